//! C API of the rng module: the per-rank stream tracker (named Philox states, default generator,
//! CPU streams, checkpoint), seed policies from explicit coordinates, and cuRAND-exact Philox.

#![allow(non_camel_case_types)]

use super::args::{null, slice_arg, slice_out, str_arg};
use super::{ffi_guard, ffi_guard_ptr, mcore_status, FfiError};
use crate::abi::read_sized;
use crate::lock::Unpoisoned;
use crate::rng::{
    philox, stream_seeds, GroupPosition, PhiloxState, RankCoordinates, RankRng, RestoreMode, SeedPolicy, SeedRequest,
};
use std::ffi::c_char;
use std::sync::{Arc, Mutex, MutexGuard};

/// Bytes of `mcore_rng_named_seed::name`, terminating NUL included.
pub const MCORE_RNG_NAME_MAX: usize = 32;
/// `mcore_rng_tracker_restore` flag: on a layout change, keep the seeds this tracker derived for
/// the new layout and take each stream's position from the checkpoint (else: error).
pub const MCORE_RNG_RESTORE_REDERIVE: u32 = 1;

/// A Philox generator state, the 16-byte layout of a CUDA generator state in PyTorch.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct mcore_rng_state {
    pub seed: u64,
    pub offset: u64,
}

/// Where a rank sits in the layout. Fill with `mcore_rng_coords_default` first.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct mcore_rng_coords {
    /// `sizeof(mcore_rng_coords)` as the caller was compiled.
    pub struct_size: u32,
    pub world_size: u32,
    /// Global rank.
    pub rank: u32,
    pub pp_rank: u32,
    /// Plain data-parallel rank (without context parallelism).
    pub dp_rank: u32,
    pub tp_rank: u32,
    pub cp_rank: u32,
    pub ep_rank: u32,
    pub etp_rank: u32,
    /// Caller-chosen digest of the whole layout (sizes, order); 0 when unknown.
    pub layout_fingerprint: u64,
}

/// A rank's group rank and group size in one group kind (for the `sharded` policy).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct mcore_rng_group_position {
    pub rank: u32,
    pub size: u32,
}

/// One named stream seed: NUL-terminated name, seed.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct mcore_rng_named_seed {
    pub name: [c_char; MCORE_RNG_NAME_MAX],
    pub seed: u64,
}

/// All random streams of one rank. Thread-safe: calls on one handle are serialised.
pub struct mcore_rng_tracker {
    /// Shared with the runtime for handles from `mcore_runtime_rng_tracker`.
    inner: Arc<Mutex<RankRng>>,
}

/// A new handle on `rng` (the runtime's streams); destroyed with `mcore_rng_tracker_destroy`.
pub(crate) fn tracker_handle(rng: Arc<Mutex<RankRng>>) -> *mut mcore_rng_tracker {
    super::handle::into_raw(mcore_rng_tracker { inner: rng })
}

/// The locked streams of a tracker handle, kept alive by their own `Arc` (so that destroying
/// the handle in another thread meanwhile frees nothing under the caller).
struct Locked {
    guard: std::mem::ManuallyDrop<MutexGuard<'static, RankRng>>,
    _owner: Arc<Mutex<RankRng>>,
}

impl std::ops::Deref for Locked {
    type Target = RankRng;

    fn deref(&self) -> &RankRng {
        &self.guard
    }
}

impl std::ops::DerefMut for Locked {
    fn deref_mut(&mut self) -> &mut RankRng {
        &mut self.guard
    }
}

impl Drop for Locked {
    fn drop(&mut self) {
        // SAFETY: dropped once, here, before `_owner` (which it borrows from) goes.
        unsafe { std::mem::ManuallyDrop::drop(&mut self.guard) };
    }
}

/// # Safety
/// None needed: `t` is looked up, never dereferenced (see `handle`).
unsafe fn lock(t: *const mcore_rng_tracker) -> Result<Locked, FfiError> {
    // SAFETY: any pointer value.
    let owner = unsafe { super::handle::borrow(t, "tracker") }?.inner.clone();
    // SAFETY: the mutex lives in `owner`'s allocation, which does not move and outlives the
    // guard (`Locked` drops the guard first).
    let mutex: &'static Mutex<RankRng> = unsafe { &*Arc::as_ptr(&owner) };
    let guard = mutex.locked();
    Ok(Locked { guard: std::mem::ManuallyDrop::new(guard), _owner: owner })
}

/// The `struct_size` of every released layout of `mcore_rng_coords` (see `crate::abi::sized`).
const COORDS_RELEASES: &[u32] = &[std::mem::size_of::<mcore_rng_coords>() as u32];

fn coords_default() -> mcore_rng_coords {
    mcore_rng_coords {
        struct_size: std::mem::size_of::<mcore_rng_coords>() as u32,
        world_size: 0,
        rank: 0,
        pp_rank: 0,
        dp_rank: 0,
        tp_rank: 0,
        cp_rank: 0,
        ep_rank: 0,
        etp_rank: 0,
        layout_fingerprint: 0,
    }
}

/// # Safety
/// `c` is NULL or points to a `mcore_rng_coords` of at least `c->struct_size` bytes.
unsafe fn coords_arg(c: *const mcore_rng_coords) -> Result<RankCoordinates, FfiError> {
    if c.is_null() {
        return Err(null("coords"));
    }
    // SAFETY: readable for its struct_size bytes per the contract.
    let c = unsafe { read_sized(c, "mcore_rng_coords", COORDS_RELEASES, coords_default()) }?;
    Ok(RankCoordinates {
        world_size: c.world_size,
        rank: c.rank,
        pp_rank: c.pp_rank,
        dp_rank: c.dp_rank,
        tp_rank: c.tp_rank,
        cp_rank: c.cp_rank,
        ep_rank: c.ep_rank,
        etp_rank: c.etp_rank,
        layout_fingerprint: c.layout_fingerprint,
        ..Default::default()
    })
}

/// # Safety
/// Pointer arguments as documented on the exports that call this.
unsafe fn request_arg(
    policy: *const c_char,
    seed: i64,
    data_parallel_random_init: bool,
    positions: *const mcore_rng_group_position,
    n_positions: usize,
) -> Result<SeedRequest, FfiError> {
    // SAFETY: forwarded contract.
    let policy: SeedPolicy = unsafe { str_arg(policy, "policy") }?.parse()?;
    // SAFETY: forwarded contract.
    let positions = unsafe { slice_arg(positions, n_positions, "positions") }?
        .iter()
        .map(|p| GroupPosition { rank: p.rank, size: p.size })
        .collect();
    Ok(SeedRequest { policy, seed, data_parallel_random_init, positions })
}

/// Fills `*out` with defaults (all zero) and `struct_size`.
///
/// # Safety
/// `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_rng_coords_default(out: *mut mcore_rng_coords) -> mcore_status {
    ffi_guard(|| {
        // SAFETY: writable per the contract.
        let out = unsafe { out.as_mut() }.ok_or_else(|| null("out"))?;
        *out = coords_default();
        Ok(())
    })
}

/// Creates an empty tracker for the rank at `coords` (recorded in its checkpoints).
/// Returns NULL on error (see `mcore_last_error_message`).
///
/// # Safety
/// `coords` is NULL or a `mcore_rng_coords` filled by `mcore_rng_coords_default`.
#[no_mangle]
pub unsafe extern "C" fn mcore_rng_tracker_create(coords: *const mcore_rng_coords) -> *mut mcore_rng_tracker {
    ffi_guard_ptr(|| {
        // SAFETY: forwarded contract.
        let coords = unsafe { coords_arg(coords) }?;
        Ok(tracker_handle(Arc::new(Mutex::new(RankRng::new(coords)))))
    })
}

/// Destroys a tracker; NULL is accepted.
///
/// # Safety
/// `tracker` is NULL or a handle from `mcore_rng_tracker_create`, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn mcore_rng_tracker_destroy(tracker: *mut mcore_rng_tracker) {
    let _ = ffi_guard(|| {
        // SAFETY: NULL or a handle from mcore_rng_tracker_create, destroyed once (the contract).
        unsafe { super::handle::destroy(tracker) };
        Ok(())
    });
}

/// Re-seeds every stream of the tracker from a policy (`"megatron"`, `"roll"` or
/// `"sharded:<group kind>,..."`): default generator, named Philox streams and one CPU stream per
/// name. `positions` (for `sharded` only) gives this rank's place in each listed group kind.
/// A Megatron seed collision returns `MCORE_STATUS_ALREADY_EXISTS` (`seed N already exists`).
///
/// # Safety
/// `tracker` live; `policy` a C string; `positions` NULL or valid for `n_positions` entries.
#[no_mangle]
pub unsafe extern "C" fn mcore_rng_tracker_seed(
    tracker: *mut mcore_rng_tracker,
    policy: *const c_char,
    seed: i64,
    data_parallel_random_init: bool,
    positions: *const mcore_rng_group_position,
    n_positions: usize,
) -> mcore_status {
    ffi_guard(|| {
        // SAFETY: forwarded contract.
        let mut rr = unsafe { lock(tracker) }?;
        // SAFETY: forwarded contract.
        let req = unsafe { request_arg(policy, seed, data_parallel_random_init, positions, n_positions) }?;
        rr.seed(&req)?;
        Ok(())
    })
}

/// Adds a named Philox stream at offset 0 (duplicate name or seed: `MCORE_STATUS_ALREADY_EXISTS`).
///
/// # Safety
/// `tracker` live; `name` a C string.
#[no_mangle]
pub unsafe extern "C" fn mcore_rng_tracker_add(
    tracker: *mut mcore_rng_tracker,
    name: *const c_char,
    seed: u64,
) -> mcore_status {
    ffi_guard(|| {
        // SAFETY: forwarded contract.
        let mut rr = unsafe { lock(tracker) }?;
        // SAFETY: forwarded contract.
        let name = unsafe { str_arg(name, "name") }?;
        rr.tracker_mut().add(name, seed)?;
        Ok(())
    })
}

/// One kernel launch on stream `name` (`"default"` = the default generator): writes the
/// `(seed, offset)` to launch with to `*out` and advances the stream by `count` rounded up to 4.
///
/// # Safety
/// `tracker` live; `name` a C string; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_rng_tracker_fork(
    tracker: *mut mcore_rng_tracker,
    name: *const c_char,
    count: u64,
    out: *mut mcore_rng_state,
) -> mcore_status {
    ffi_guard(|| {
        // SAFETY: forwarded contract.
        let mut rr = unsafe { lock(tracker) }?;
        // SAFETY: forwarded contract.
        let name = unsafe { str_arg(name, "name") }?;
        if out.is_null() {
            return Err(null("out"));
        }
        let st = rr.tracker_mut().fork(name, count)?;
        // SAFETY: non-NULL and writable per the contract.
        unsafe { *out = mcore_rng_state { seed: st.seed, offset: st.offset } };
        Ok(())
    })
}

/// Reads the state of stream `name` (`"default"` = the default generator).
///
/// # Safety
/// `tracker` live; `name` a C string; `out` writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_rng_tracker_get_state(
    tracker: *const mcore_rng_tracker,
    name: *const c_char,
    out: *mut mcore_rng_state,
) -> mcore_status {
    ffi_guard(|| {
        // SAFETY: forwarded contract.
        let rr = unsafe { lock(tracker) }?;
        // SAFETY: forwarded contract.
        let name = unsafe { str_arg(name, "name") }?;
        // SAFETY: writable per the contract.
        let out = unsafe { out.as_mut() }.ok_or_else(|| null("out"))?;
        let st = rr.tracker().state(name)?;
        *out = mcore_rng_state { seed: st.seed, offset: st.offset };
        Ok(())
    })
}

/// Overwrites the state of an existing stream `name` (`"default"` = the default generator).
///
/// # Safety
/// `tracker` live; `name` a C string; `state` readable.
#[no_mangle]
pub unsafe extern "C" fn mcore_rng_tracker_set_state(
    tracker: *mut mcore_rng_tracker,
    name: *const c_char,
    state: *const mcore_rng_state,
) -> mcore_status {
    ffi_guard(|| {
        // SAFETY: forwarded contract.
        let mut rr = unsafe { lock(tracker) }?;
        // SAFETY: forwarded contract.
        let name = unsafe { str_arg(name, "name") }?;
        // SAFETY: readable per the contract.
        let st = unsafe { state.as_ref() }.ok_or_else(|| null("state"))?;
        rr.tracker_mut().set_state(name, PhiloxState { seed: st.seed, offset: st.offset })?;
        Ok(())
    })
}

/// Megatron's tracker reset: forgets every named stream and seed (the default generator and the
/// CPU streams stay).
///
/// # Safety
/// `tracker` live.
#[no_mangle]
pub unsafe extern "C" fn mcore_rng_tracker_reset(tracker: *mut mcore_rng_tracker) -> mcore_status {
    ffi_guard(|| {
        // SAFETY: forwarded contract.
        unsafe { lock(tracker) }?.tracker_mut().reset();
        Ok(())
    })
}

/// Adds a CPU (ChaCha20) stream `name` seeded with `seed`.
///
/// # Safety
/// `tracker` live; `name` a C string.
#[no_mangle]
pub unsafe extern "C" fn mcore_rng_tracker_cpu_add(
    tracker: *mut mcore_rng_tracker,
    name: *const c_char,
    seed: u64,
) -> mcore_status {
    ffi_guard(|| {
        // SAFETY: forwarded contract.
        let mut rr = unsafe { lock(tracker) }?;
        // SAFETY: forwarded contract.
        let name = unsafe { str_arg(name, "name") }?;
        rr.cpu_mut().add(name, seed)?;
        Ok(())
    })
}

/// Draws `n` 32-bit words from CPU stream `name` into `out`.
///
/// # Safety
/// `tracker` live; `name` a C string; `out` NULL (n = 0) or valid for `n` writes.
#[no_mangle]
pub unsafe extern "C" fn mcore_rng_tracker_cpu_fill_u32(
    tracker: *mut mcore_rng_tracker,
    name: *const c_char,
    out: *mut u32,
    n: usize,
) -> mcore_status {
    ffi_guard(|| {
        // SAFETY: forwarded contract.
        let mut rr = unsafe { lock(tracker) }?;
        // SAFETY: forwarded contract.
        let name = unsafe { str_arg(name, "name") }?;
        // SAFETY: forwarded contract.
        let out = unsafe { slice_out(out, n, "out") }?;
        rr.cpu_mut().fill_u32(name, out)?;
        Ok(())
    })
}

/// Draws `n` doubles uniform in [0, 1) from CPU stream `name` into `out`.
///
/// # Safety
/// `tracker` live; `name` a C string; `out` NULL (n = 0) or valid for `n` writes.
#[no_mangle]
pub unsafe extern "C" fn mcore_rng_tracker_cpu_fill_f64(
    tracker: *mut mcore_rng_tracker,
    name: *const c_char,
    out: *mut f64,
    n: usize,
) -> mcore_status {
    ffi_guard(|| {
        // SAFETY: forwarded contract.
        let mut rr = unsafe { lock(tracker) }?;
        // SAFETY: forwarded contract.
        let name = unsafe { str_arg(name, "name") }?;
        // SAFETY: forwarded contract.
        let out = unsafe { slice_out(out, n, "out") }?;
        rr.cpu_mut().fill_f64(name, out)?;
        Ok(())
    })
}

/// Writes the checkpoint blob of all streams to `buf`. `*out_len` receives the blob size; when
/// `len` is smaller the result is `MCORE_STATUS_BUFFER_TOO_SMALL` with `*out_len` set (call with
/// `buf = NULL, len = 0` to ask for the size).
///
/// # Safety
/// `tracker` live; `buf` NULL (len = 0) or valid for `len` writes; `out_len` writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_rng_tracker_save(
    tracker: *const mcore_rng_tracker,
    buf: *mut u8,
    len: usize,
    out_len: *mut usize,
) -> mcore_status {
    ffi_guard(|| {
        // SAFETY: forwarded contract.
        let rr = unsafe { lock(tracker) }?;
        // SAFETY: writable per the contract.
        let out_len = unsafe { out_len.as_mut() }.ok_or_else(|| null("out_len"))?;
        let blob = rr.save()?;
        if blob.len() > len {
            *out_len = blob.len();
            return Err(FfiError::new(
                mcore_status::BufferTooSmall,
                format!("RNG checkpoint needs {} bytes, buffer has {len}", blob.len()),
            ));
        }
        // SAFETY: forwarded contract.
        unsafe { slice_out(buf, blob.len(), "buf") }?.copy_from_slice(&blob);
        *out_len = blob.len();
        Ok(())
    })
}

/// Restores a blob from `mcore_rng_tracker_save`. A blob of another global rank is
/// `MCORE_STATUS_WRONG_RANK`, a damaged one `MCORE_STATUS_CORRUPT`; a layout change is
/// `MCORE_STATUS_WRONG_RANK` unless `flags` has `MCORE_RNG_RESTORE_REDERIVE`. Nothing changes on error.
///
/// # Safety
/// `tracker` live; `buf` valid for `len` reads.
#[no_mangle]
pub unsafe extern "C" fn mcore_rng_tracker_restore(
    tracker: *mut mcore_rng_tracker,
    buf: *const u8,
    len: usize,
    flags: u32,
) -> mcore_status {
    ffi_guard(|| {
        // SAFETY: forwarded contract.
        let mut rr = unsafe { lock(tracker) }?;
        // SAFETY: forwarded contract.
        let blob = unsafe { slice_arg(buf, len, "buf") }?;
        if flags & !MCORE_RNG_RESTORE_REDERIVE != 0 {
            return Err(FfiError::invalid_arg(format!("unknown restore flags 0x{flags:x}")));
        }
        let mode = if flags & MCORE_RNG_RESTORE_REDERIVE != 0 { RestoreMode::Rederive } else { RestoreMode::Strict };
        rr.restore(blob, mode)?;
        Ok(())
    })
}

/// The named stream seeds a policy gives the rank at `coords`: `"default"` first, then the
/// tracker streams in Megatron's add order. Writes up to `cap` entries to `out` and the count to
/// `*out_len` (`MCORE_STATUS_BUFFER_TOO_SMALL` with `*out_len` set when `cap` is too small).
///
/// # Safety
/// `policy` a C string; `coords` filled by `mcore_rng_coords_default`; `positions` NULL or valid
/// for `n_positions` reads; `out` NULL (cap = 0) or valid for `cap` writes; `out_len` writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_rng_policy_seeds(
    policy: *const c_char,
    seed: i64,
    data_parallel_random_init: bool,
    coords: *const mcore_rng_coords,
    positions: *const mcore_rng_group_position,
    n_positions: usize,
    out: *mut mcore_rng_named_seed,
    cap: usize,
    out_len: *mut usize,
) -> mcore_status {
    ffi_guard(|| {
        // SAFETY: forwarded contract.
        let req = unsafe { request_arg(policy, seed, data_parallel_random_init, positions, n_positions) }?;
        // SAFETY: forwarded contract.
        let coords = unsafe { coords_arg(coords) }?;
        // SAFETY: writable per the contract.
        let out_len = unsafe { out_len.as_mut() }.ok_or_else(|| null("out_len"))?;
        let seeds = stream_seeds(&req, &coords)?;
        if seeds.len() > cap {
            *out_len = seeds.len();
            return Err(FfiError::new(
                mcore_status::BufferTooSmall,
                format!("policy {} gives {} streams, out has room for {cap}", req.policy, seeds.len()),
            ));
        }
        // SAFETY: forwarded contract.
        let out = unsafe { slice_out(out, seeds.len(), "out") }?;
        for (slot, (name, seed)) in out.iter_mut().zip(&seeds) {
            let mut c_name = [0 as c_char; MCORE_RNG_NAME_MAX];
            for (d, b) in c_name.iter_mut().zip(name.bytes().take(MCORE_RNG_NAME_MAX - 1)) {
                *d = b as c_char;
            }
            *slot = mcore_rng_named_seed { name: c_name, seed: *seed };
        }
        *out_len = seeds.len();
        Ok(())
    })
}

/// `n` successive `curand()` values after `curand_init(seed, subsequence, offset)` (Philox4_32_10).
///
/// # Safety
/// `out` NULL (n = 0) or valid for `n` writes.
#[no_mangle]
pub unsafe extern "C" fn mcore_rng_philox_fill_u32(
    seed: u64,
    subsequence: u64,
    offset: u64,
    out: *mut u32,
    n: usize,
) -> mcore_status {
    ffi_guard(|| {
        // SAFETY: forwarded contract.
        philox::fill_u32(seed, subsequence, offset, unsafe { slice_out(out, n, "out") }?);
        Ok(())
    })
}

/// `n` successive `curand_uniform()` values after `curand_init(seed, subsequence, offset)`.
///
/// # Safety
/// `out` NULL (n = 0) or valid for `n` writes.
#[no_mangle]
pub unsafe extern "C" fn mcore_rng_philox_fill_uniform(
    seed: u64,
    subsequence: u64,
    offset: u64,
    out: *mut f32,
    n: usize,
) -> mcore_status {
    ffi_guard(|| {
        // SAFETY: forwarded contract.
        philox::fill_uniform(seed, subsequence, offset, unsafe { slice_out(out, n, "out") }?);
        Ok(())
    })
}
