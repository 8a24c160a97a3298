//! Recovery planning in C: `mcore_recovery_plan_create` plans the next layout of a topology
//! without its failed ranks (docs/recovery.md); accessors read the plan.
#![allow(non_camel_case_types)]

use super::args::{fill_items, fill_ranks, out_ptr, slice_arg};
use super::boundary::ffi_guard;
use super::error::FfiError;
use super::handle;
use super::mcore_status;
use super::topology::config::UserData;
use super::topology::{kind_to_c, mcore_topology, topo, topology_handle, user_data_of};
use crate::topology::{plan_recovery, RecoveryPlan};
use std::sync::Arc;

/// A recovery plan (opaque): the new layout, the old -> new rank map, the dropped ranks.
pub struct mcore_recovery_plan {
    plan: RecoveryPlan,
    /// The planned topology's user data (its callbacks serve the new layout too).
    user: Option<Arc<UserData>>,
}

fn plan(p: *const mcore_recovery_plan) -> Result<Arc<mcore_recovery_plan>, FfiError> {
    // SAFETY: NULL or a live handle from mcore_recovery_plan_create (the API contract).
    unsafe { handle::borrow(p, "plan") }
}

/// Plan the next layout of `t` without the `n_failed` ranks of `failed`, with the `n_spares`
/// ranks of `spares` (ranks from the layout's end on, outside it) taking failed ranks' places
/// where they repair a whole data-parallel replica. Policy: a failed rank's whole data-parallel
/// and expert-data-parallel replicas leave; tp, pp, cp, ep, etp and the order are kept.
/// `failed`/`spares` may be NULL when their count is 0. When no valid layout remains the status
/// is INVALID_CONFIG and the message says "no valid layout remains" and names the failed ranks.
///
/// # Safety
/// Pointer arguments are NULL (reported as INVALID_ARGUMENT) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn mcore_recovery_plan_create(
    t: *const mcore_topology,
    failed: *const u32,
    n_failed: usize,
    spares: *const u32,
    n_spares: usize,
    out: *mut *mut mcore_recovery_plan,
) -> mcore_status {
    ffi_guard(|| {
        let out = out_ptr(out, "out")?;
        let layout = topo(t)?;
        // SAFETY: the caller declares n_failed / n_spares readable items.
        let failed = unsafe { slice_arg(failed, n_failed, "failed") }?;
        let spares = unsafe { slice_arg(spares, n_spares, "spares") }?;
        let plan = plan_recovery(&layout, failed, spares)?;
        *out = handle::into_raw(mcore_recovery_plan { plan, user: user_data_of(t)? });
        Ok(())
    })
}

/// Destroy a plan (NULL is fine).
///
/// # Safety
/// `p` comes from `mcore_recovery_plan_create` and is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn mcore_recovery_plan_destroy(p: *mut mcore_recovery_plan) {
    let _ = ffi_guard(|| {
        // SAFETY: NULL or a handle from mcore_recovery_plan_create, not used afterwards.
        unsafe { handle::destroy(p) };
        Ok(())
    });
}

/// The new layout as a new topology handle (destroy it with `mcore_topology_destroy`); its
/// world size is the number of ranks that stay (spares included).
///
/// # Safety
/// Pointer arguments are NULL (reported as INVALID_ARGUMENT) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn mcore_recovery_plan_topology(
    p: *const mcore_recovery_plan,
    out: *mut *mut mcore_topology,
) -> mcore_status {
    ffi_guard(|| {
        let out = out_ptr(out, "out")?;
        let h = plan(p)?;
        *out = topology_handle(h.plan.topology.clone(), h.user.clone());
        Ok(())
    })
}

/// The new rank of old rank (or spare) `old`, or -1 when it is not in the new layout (failed,
/// leaving with its replica, an unused spare or not a rank of the layout).
///
/// # Safety
/// Pointer arguments are NULL (reported as INVALID_ARGUMENT) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn mcore_recovery_plan_new_rank(
    p: *const mcore_recovery_plan,
    old: u32,
    out_new: *mut i64,
) -> mcore_status {
    ffi_guard(|| {
        let out = out_ptr(out_new, "out_new")?;
        *out = plan(p)?.plan.new_rank(old).map_or(-1, i64::from);
        Ok(())
    })
}

/// Which ranks of the old layout are not in the new one, ascending: with `leaving_only` false,
/// every dropped rank (failed ones included); with it true, the healthy ranks that leave with
/// their replica. `buf` may be NULL when `len` is 0, to ask for the size (BUFFER_TOO_SMALL sets
/// `*out_len`).
///
/// # Safety
/// Pointer arguments are NULL (reported as INVALID_ARGUMENT) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn mcore_recovery_plan_dropped(
    p: *const mcore_recovery_plan,
    leaving_only: bool,
    buf: *mut u32,
    len: usize,
    out_len: *mut usize,
) -> mcore_status {
    ffi_guard(|| {
        let h = plan(p)?;
        let v = if leaving_only { &h.plan.leaving } else { &h.plan.dropped };
        fill_ranks(v.iter().copied(), buf, len, out_len)
    })
}

/// The group kinds (`MCORE_GROUP_KIND_*` values) whose groups change membership: their
/// communicators must be created anew; the other kinds keep their groups under the rank map.
///
/// # Safety
/// Pointer arguments are NULL (reported as INVALID_ARGUMENT) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn mcore_recovery_plan_changed_kinds(
    p: *const mcore_recovery_plan,
    buf: *mut i32,
    len: usize,
    out_len: *mut usize,
) -> mcore_status {
    ffi_guard(|| {
        let kinds = &plan(p)?.plan.changed_kinds;
        fill_items(kinds.iter().map(|&k| kind_to_c(k)), buf, len, out_len, |len, need| {
            format!("buffer holds {len} kinds, the plan changes {need}")
        })
    })
}

/// What `mcore_reinitialize` did for this rank.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct mcore_recovery_result {
    /// true: this rank is not on the new layout (its replica was dropped, or the others found it
    /// failed); its runtime is torn down and it should exit. false: it runs the new layout.
    pub left: bool,
    pub old_rank: u32,
    /// The rank on the new layout (equal to `old_rank` when `left`).
    pub new_rank: u32,
    pub old_world_size: u32,
    pub new_world_size: u32,
    /// Number of agreed failed ranks (the first `failed_len` are in the caller's buffer).
    pub n_failed: usize,
    /// Seconds to agree on the failed set, and for the whole recovery.
    pub agree_seconds: f64,
    pub total_seconds: f64,
}

/// Recover after a failure (docs/recovery.md): agree with the other survivors through the store
/// on the failed ranks, plan the next layout (whole data-parallel replicas with a failed rank
/// leave), tear down every communicator and create and verify the new layout's groups, all
/// within the init timeout. Runs on an initialized runtime, or after an `mcore_initialize` that
/// failed for a peer (TIMEOUT or PEER_FAILED: a rank missing at check-in, a group whose creation
/// timed out or lost a peer), continuing on that attempt's store; the ranks that failure named
/// are suspected. `suspected` (may be NULL when `n_suspected` is 0) are ranks this rank knows to
/// have failed; others are found by their absence within `window_seconds` (0 = the default of
/// 3 s; NaN, infinite, negative or over 2^31 s: INVALID_ARGUMENT naming the value). The agreed failed ranks go to `failed` (the first `failed_len`, may be NULL when 0;
/// `out->n_failed` says how many there are: a recovery is not repeated to fit a buffer). On
/// error (e.g. INVALID_CONFIG "no valid layout remains", a store that is gone with its host) the
/// runtime is torn down; a bad argument leaves everything as it was.
///
/// # Safety
/// Pointer arguments are NULL (reported as INVALID_ARGUMENT) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn mcore_reinitialize(
    suspected: *const u32,
    n_suspected: usize,
    window_seconds: f64,
    failed: *mut u32,
    failed_len: usize,
    out: *mut mcore_recovery_result,
) -> mcore_status {
    use crate::runtime::recovery::{reinitialize, ReinitArgs, Reinitialized};
    ffi_guard(|| {
        let out = out_ptr(out, "out")?;
        // SAFETY: the caller declares n_suspected readable items and failed_len writable ones.
        let suspected = unsafe { slice_arg(suspected, n_suspected, "suspected") }?.to_vec();
        let failed_buf = unsafe { super::args::slice_out(failed, failed_len, "failed") }?;
        let window = window_arg(window_seconds)?;
        let outcome = reinitialize(ReinitArgs { suspected, window, timeout: None })?;
        let (r, left) = match outcome {
            Reinitialized::Recovered(r) => (r, false),
            Reinitialized::Left(r) => (r, true),
        };
        for (d, s) in failed_buf.iter_mut().zip(&r.failed) {
            *d = *s;
        }
        *out = mcore_recovery_result {
            left,
            old_rank: r.old_rank,
            new_rank: r.new_rank.unwrap_or(r.old_rank),
            old_world_size: r.old_world_size,
            new_world_size: r.new_world_size,
            n_failed: r.failed.len(),
            agree_seconds: r.agree.as_secs_f64(),
            total_seconds: r.total.as_secs_f64(),
        };
        Ok(())
    })
}

/// A detection window in seconds: 0 = the default, else positive and at most 2^31 s
/// (`MCORE_TIMEOUT_MAX_MS`); NaN, infinities, negative and longer values are INVALID_ARGUMENT.
fn window_arg(seconds: f64) -> Result<Option<std::time::Duration>, FfiError> {
    let window = crate::timeout::from_secs_f64("window_seconds", seconds).map_err(FfiError::invalid_arg)?;
    Ok((!window.is_zero()).then_some(window))
}

/// A health check of the initialized world through the store (docs/recovery.md), collective:
/// call it at the same points on every rank. Each rank checks in and waits until all have, at
/// most `window_seconds` (0 = 3 s; NaN, infinite, negative or over 2^31 s: INVALID_ARGUMENT). `*healthy` is true when every rank came and no recovery was
/// requested; false when a rank asked for one (its init or a collective failed) or ranks did not
/// come. The ranks to suspect go to `suspected` (the first `len`, may be NULL when 0), their
/// number to `*out_len`; pass them to `mcore_reinitialize`. A check is not repeated to fit a
/// buffer, so the status is OK even when `*out_len > len`.
///
/// # Safety
/// Pointer arguments are NULL (reported as INVALID_ARGUMENT) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn mcore_check_health(
    window_seconds: f64,
    healthy: *mut bool,
    suspected: *mut u32,
    len: usize,
    out_len: *mut usize,
) -> mcore_status {
    use crate::runtime::recovery::{check_health, Health};
    ffi_guard(|| {
        let healthy = out_ptr(healthy, "healthy")?;
        let out_len = out_ptr(out_len, "out_len")?;
        // SAFETY: the caller declares `len` writable items.
        let buf = unsafe { super::args::slice_out(suspected, len, "suspected") }?;
        let window = window_arg(window_seconds)?;
        let (ok, suspects) = match check_health(window)? {
            Health::Healthy => (true, vec![]),
            Health::Failed(s) => (false, s),
        };
        for (d, s) in buf.iter_mut().zip(&suspects) {
            *d = *s;
        }
        (*out_len, *healthy) = (suspects.len(), ok);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ffi::topology::{
        mcore_topology_config, mcore_topology_config_init, mcore_topology_create, mcore_topology_destroy,
        mcore_topology_get_sizes, mcore_topology_sizes,
    };
    use std::ptr::{null, null_mut};

    fn layout(world: u32, tp: i32, pp: i32) -> *mut mcore_topology {
        // SAFETY: every pointer is a local or the out-param of the call before.
        unsafe {
            let mut cfg = std::mem::MaybeUninit::<mcore_topology_config>::uninit();
            assert_eq!(mcore_topology_config_init(cfg.as_mut_ptr()), mcore_status::Ok);
            let mut cfg = cfg.assume_init();
            cfg.tp = tp;
            cfg.pp = pp;
            let mut t = null_mut();
            assert_eq!(mcore_topology_create(&cfg, world, &mut t), mcore_status::Ok);
            t
        }
    }

    #[test]
    fn plan_through_the_c_calls() {
        unsafe {
            let t = layout(16, 2, 2);
            let mut p = null_mut();
            assert_eq!(mcore_recovery_plan_create(t, [5u32].as_ptr(), 1, null(), 0, &mut p), mcore_status::Ok);
            let mut nt = null_mut();
            assert_eq!(mcore_recovery_plan_topology(p, &mut nt), mcore_status::Ok);
            let mut sizes = mcore_topology_sizes::default();
            assert_eq!(mcore_topology_get_sizes(nt, &mut sizes), mcore_status::Ok);
            assert_eq!((sizes.world_size, sizes.dp, sizes.tp, sizes.pp), (12, 3, 2, 2));
            let mut n = 0i64;
            assert_eq!(mcore_recovery_plan_new_rank(p, 6, &mut n), mcore_status::Ok);
            assert_eq!(n, 4);
            assert_eq!(mcore_recovery_plan_new_rank(p, 5, &mut n), mcore_status::Ok);
            assert_eq!(n, -1);
            let (mut buf, mut len) = ([0u32; 4], 0usize);
            assert_eq!(mcore_recovery_plan_dropped(p, false, buf.as_mut_ptr(), 4, &mut len), mcore_status::Ok);
            assert_eq!(&buf[..len], &[4, 5, 12, 13]);
            assert_eq!(mcore_recovery_plan_dropped(p, true, buf.as_mut_ptr(), 4, &mut len), mcore_status::Ok);
            assert_eq!(&buf[..len], &[4, 12, 13]);
            assert_eq!(mcore_recovery_plan_dropped(p, false, null_mut(), 0, &mut len), mcore_status::BufferTooSmall);
            assert_eq!(len, 4);
            let mut kinds = [0i32; 64];
            assert_eq!(mcore_recovery_plan_changed_kinds(p, kinds.as_mut_ptr(), 64, &mut len), mcore_status::Ok);
            assert!(len > 0 && kinds[..len].contains(&kind_to_c(crate::topology::GroupKind::DataParallel)));
            mcore_topology_destroy(nt);
            mcore_recovery_plan_destroy(p);
            // The refusal and bad arguments.
            let mut p2 = null_mut();
            assert_eq!(
                mcore_recovery_plan_create(t, [0u32, 2, 4, 6].as_ptr(), 4, null(), 0, &mut p2),
                mcore_status::InvalidConfig
            );
            assert!(p2.is_null());
            assert_eq!(mcore_recovery_plan_create(t, null(), 1, null(), 0, &mut p2), mcore_status::InvalidArgument);
            assert_eq!(
                mcore_recovery_plan_create(null(), null(), 0, null(), 0, &mut p2),
                mcore_status::InvalidArgument
            );
            assert_eq!(
                mcore_recovery_plan_create(t, [99u32].as_ptr(), 1, null(), 0, &mut p2),
                mcore_status::OutOfRange
            );
            assert_eq!(mcore_recovery_plan_new_rank(null(), 0, &mut n), mcore_status::InvalidArgument);
            mcore_recovery_plan_destroy(null_mut());
            mcore_topology_destroy(t);
            // Bad arguments fail before the runtime is touched (other tests of this process may hold it).
            let mut r = mcore_recovery_result::default();
            assert_eq!(mcore_reinitialize(null(), 1, 0.0, null_mut(), 0, &mut r), mcore_status::InvalidArgument);
            assert_eq!(mcore_reinitialize(null(), 0, f64::NAN, null_mut(), 0, &mut r), mcore_status::InvalidArgument);
            let (mut healthy, mut n) = (true, 0usize);
            assert_eq!(mcore_check_health(0.0, null_mut(), null_mut(), 0, &mut n), mcore_status::InvalidArgument);
            assert_eq!(mcore_check_health(-1.0, &mut healthy, null_mut(), 0, &mut n), mcore_status::InvalidArgument);
            assert_eq!(mcore_check_health(0.0, &mut healthy, null_mut(), 1, &mut n), mcore_status::InvalidArgument);
        }
    }

    /// Windows a `Duration` cannot hold (or that are not numbers) are INVALID_ARGUMENT naming
    /// the parameter and the value; they were an internal panic (status 99) from
    /// `Duration::from_secs_f64`. Checked before the runtime is touched.
    #[test]
    fn out_of_range_windows_are_invalid_arguments_not_panics() {
        let message = || {
            // SAFETY: the message of this thread's last call.
            unsafe { std::ffi::CStr::from_ptr(crate::ffi::error::mcore_last_error_message()) }
                .to_string_lossy()
                .into_owned()
        };
        for (w, shown) in
            [(1e300, "1e300"), (1.8e19, "1.8e19"), (f64::NAN, "NaN"), (f64::INFINITY, "inf"), (-1.0, "-1.0")]
        {
            let (mut healthy, mut n) = (true, 0usize);
            // SAFETY: every pointer is a local.
            let st = unsafe { mcore_check_health(w, &mut healthy, null_mut(), 0, &mut n) };
            assert_eq!(st, mcore_status::InvalidArgument, "check_health({shown}): {}", message());
            assert!(message().contains(&format!("window_seconds {shown}")), "{}", message());
            let mut r = mcore_recovery_result::default();
            // SAFETY: as above.
            let st = unsafe { mcore_reinitialize(null(), 0, w, null_mut(), 0, &mut r) };
            assert_eq!(st, mcore_status::InvalidArgument, "reinitialize({shown}): {}", message());
            assert!(message().contains(&format!("window_seconds {shown}")), "{}", message());
        }
    }
}
