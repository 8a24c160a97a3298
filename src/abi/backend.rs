//! The backend plugin ABI, version 1: the vtable a communicator backend fills in
//! ([`mcore_backend_v1`]), the group description it receives ([`mcore_backend_group_info`]), the
//! store callbacks it rendezvous through ([`mcore_backend_store`]) and the plugin entry point.
//! Plain C types only: the host side (validating and calling a vtable, the store callbacks) is
//! `crate::backend::plugin`; the exports that register one are in the C layer (src/ffi/backend.rs).
//!
//! Versioning (docs/abi.md, "Backend plugin vtables"): `struct_size` first, then `abi_version`;
//! new slots only at the end; a NULL slot means "not supported". A vtable's `struct_size` must be
//! one of [`MCORE_BACKEND_V1_RELEASES`] (a plugin built against an older, shorter v1 keeps
//! working, its missing slots NULL), or larger with every slot beyond ours NULL (the one rule of
//! `crate::abi::sized`). A breaking change is a new
//! `mcore_backend_v2` type, v1 kept through an adapter. See docs/backends.md.
#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_void};

/// `abi_version` of [`mcore_backend_v1`].
pub const MCORE_BACKEND_ABI_VERSION_V1: u32 = 1;

/// Smallest `struct_size` accepted for a [`mcore_backend_v1`]: the size of its first release
/// (every slot up to `finalize`). Slots appended later are optional and read as NULL when a
/// plugin's `struct_size` does not cover them.
pub const MCORE_BACKEND_V1_MIN_SIZE: u32 = 88;

/// The `struct_size` of every released layout of [`mcore_backend_v1`], ascending: the first
/// release (up to `finalize`), then `flags`, then `abort_comm`, then `shrink`, then `suspend`,
/// `resume` and `mem_stat` together, then `interrupt`. A vtable must have one of these sizes, or
/// be larger with every slot beyond ours NULL (see `crate::abi::sized`).
pub const MCORE_BACKEND_V1_RELEASES: &[u32] = &[MCORE_BACKEND_V1_MIN_SIZE, 96, 104, 112, 136, 144];

/// One group a backend is asked to create a communicator for.
///
/// Pointers are valid only during the call that receives the struct; copy what you keep.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
#[allow(non_camel_case_types)]
pub struct mcore_backend_group_info {
    /// `sizeof(mcore_backend_group_info)` as the library was built; fields are only appended.
    pub struct_size: u32,
    /// This process's rank inside the group (its index in `global_ranks`).
    pub group_rank: u32,
    /// Number of ranks in the group (`global_ranks` has this many entries).
    pub group_size: u32,
    /// This process's global rank.
    pub global_rank: u32,
    /// Unique group name, NUL-terminated, e.g. `"tensor_model_parallel/3"`; equal on all members.
    pub name: *const c_char,
    /// The group's global ranks in ascending order; `group_size` entries.
    pub global_ranks: *const u32,
    /// Upper bound for rendezvous and collectives of this group, in milliseconds: what is left
    /// of the init deadline when the group's creation starts.
    pub timeout_ms: u64,
    /// The address this process advertises to peers on other hosts, NUL-terminated text such as
    /// `"10.0.0.7"`: the local address of its connection to the rendezvous store. NULL when the
    /// library has none. A backend that publishes an address for peers to connect to should
    /// bind there unless its own settings say otherwise. Appended in 0.1: read it only when
    /// `struct_size` covers it.
    pub host_addr: *const c_char,
    /// The device the caller asked for (the init arguments' device), or -1 when none was given.
    /// Only backends whose vtable sets `MCORE_BACKEND_FLAG_TAKES_DEVICE` are given one (the
    /// library refuses a device for the others). Appended in 0.2: read it only when
    /// `struct_size` covers it.
    pub device: i32,
    /// The communicator options of the group's kind (the per-kind communicator config), as
    /// NUL-terminated `key=value` lines (`hccl_buffer_size=300\ngroup_name=grads\n`: the config
    /// file's keys, typed options first), or NULL when the kind sets none. A backend applies the
    /// keys it knows and skips the others (another backend's). Appended in 0.2: read it only when
    /// `struct_size` covers it.
    pub options: *const c_char,
}

/// Store `set`: write `len` bytes at `value` under the NUL-terminated `key`. Returns a status.
pub type mcore_backend_store_set_fn =
    Option<unsafe extern "C" fn(ctx: *mut c_void, key: *const c_char, value: *const u8, len: usize) -> i32>;
/// Store `get`: wait (up to the store timeout) for `key`, write its length to `*out_len`, and
/// copy it into `buf` when `buf_len` suffices; otherwise return `MCORE_STATUS_BUFFER_TOO_SMALL`
/// (`buf` may be NULL when `buf_len` is 0) and call again with a buffer of `*out_len` bytes.
pub type mcore_backend_store_get_fn = Option<
    unsafe extern "C" fn(
        ctx: *mut c_void,
        key: *const c_char,
        buf: *mut u8,
        buf_len: usize,
        out_len: *mut usize,
    ) -> i32,
>;
/// Store `wait`: wait until all `n` keys exist, up to `timeout_ms` (0 = the store's timeout).
/// `MCORE_STATUS_TIMEOUT` on expiry; `error_message` then names the missing keys.
pub type mcore_backend_store_wait_fn =
    Option<unsafe extern "C" fn(ctx: *mut c_void, keys: *const *const c_char, n: usize, timeout_ms: u64) -> i32>;
/// Store `add`: add `delta` to the integer counter under `key` (missing = 0); new value in `*out`.
pub type mcore_backend_store_add_fn =
    Option<unsafe extern "C" fn(ctx: *mut c_void, key: *const c_char, delta: i64, out: *mut i64) -> i32>;
/// Message of the last failed call on this store from the calling thread's point of view
/// (never NULL; valid until the next call on the store).
pub type mcore_backend_store_error_message_fn = Option<unsafe extern "C" fn(ctx: *mut c_void) -> *const c_char>;
/// Store `multi_get`: wait for all `n` keys (store timeout), then write their values one after
/// the other into `buf` and each length into `lens[i]` (n entries), in one store round trip.
/// When `buf_len` is smaller than the total, returns BUFFER_TOO_SMALL with `lens` filled: call
/// again with the same keys and a buffer of the sum (served without another round trip).
pub type mcore_backend_store_multi_get_fn = Option<
    unsafe extern "C" fn(
        ctx: *mut c_void,
        keys: *const *const c_char,
        n: usize,
        buf: *mut u8,
        buf_len: usize,
        lens: *mut usize,
    ) -> i32,
>;

/// The rendezvous store handed to a backend's `create_world`/`create_group`: a key space already
/// private to the group (keys need no group prefix). Implemented by the library over its own
/// stores, so a plugin need not link libmcore_init. Every callback takes `ctx` first and returns
/// an `mcore_status` code as `int32_t`; callbacks may be called from any thread.
///
/// Lifetime: the store passed to `create_group` is valid only during that call. The store passed
/// to `create_world` stays valid until that world communicator is destroyed (its `destroy_comm`
/// returned), so a backend may keep the pointer and rendezvous its splits through it (under key
/// prefixes of its own, one per split). A relaxation added in 0.1: plugins that do not keep the
/// pointer are unaffected.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
#[allow(non_camel_case_types)]
pub struct mcore_backend_store {
    /// `sizeof(mcore_backend_store)` as the library was built; callbacks are only appended.
    pub struct_size: u32,
    /// Passed as the first argument of every callback.
    pub ctx: *mut c_void,
    /// Write a key (see `mcore_backend_store_set_fn`).
    pub set: mcore_backend_store_set_fn,
    /// Read a key, waiting for it; two-call pattern (see `mcore_backend_store_get_fn`).
    pub get: mcore_backend_store_get_fn,
    /// Wait for keys with a timeout (see `mcore_backend_store_wait_fn`).
    pub wait: mcore_backend_store_wait_fn,
    /// Atomic counter (see `mcore_backend_store_add_fn`).
    pub add: mcore_backend_store_add_fn,
    /// Text of the last failed callback (see `mcore_backend_store_error_message_fn`).
    pub error_message: mcore_backend_store_error_message_fn,
    /// Several keys in one round trip (appended in 0.1; check `struct_size` before use).
    pub multi_get: mcore_backend_store_multi_get_fn,
}

/// `create_world` / `create_group`: create this rank's communicator for `group`, rendezvousing
/// through `store`; on success write it to `*out_comm` (non-NULL). `store` lives until the
/// communicator is destroyed for `create_world`, only during the call for `create_group` (see
/// `mcore_backend_store`).
pub type mcore_backend_create_fn = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        group: *const mcore_backend_group_info,
        store: *const mcore_backend_store,
        out_comm: *mut *mut c_void,
    ) -> i32,
>;
/// `split`: collective over all ranks of `parent_comm`. `color` -1 = this rank joins no group
/// (`group` is NULL, `*out_comm` gets NULL); otherwise ranks with equal color form one group,
/// ordered by `key` (the library passes the group rank), described by `group`. The parent
/// (the world communicator) must live until the split returned; the child does not depend on
/// it afterwards unless the backend documents otherwise.
pub type mcore_backend_split_fn = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        parent_comm: *mut c_void,
        color: i32,
        key: i32,
        group: *const mcore_backend_group_info,
        out_comm: *mut *mut c_void,
    ) -> i32,
>;
/// `allreduce_sum_i64`: in-place sum of `count` int64 values over the communicator's ranks.
pub type mcore_backend_allreduce_sum_i64_fn =
    Option<unsafe extern "C" fn(user_data: *mut c_void, comm: *mut c_void, inout: *mut i64, count: usize) -> i32>;
/// `barrier` and `destroy_comm`: an operation on one communicator.
pub type mcore_backend_comm_fn = Option<unsafe extern "C" fn(user_data: *mut c_void, comm: *mut c_void) -> i32>;
/// `shrink`: collective over the ranks of `comm` that are not in `exclude` (`n_exclude` ranks of
/// `comm`, ascending; the excluded ranks do not call it): a new communicator of the remaining
/// ranks, renumbered in ascending order of their rank in `comm`, written to `*out_comm`. `group`
/// describes it: its name (the parent's), `group_size` and this rank's `group_rank` in the new
/// numbering, `global_ranks` 0, 1, …, `group_size` − 1 (recovery shrinks the world, whose ranks are the new
/// global ranks), `timeout_ms` the bound of the call. `flags`: `MCORE_BACKEND_SHRINK_ABORT_PARENT`
/// when a peer of `comm` failed (end its operations in flight first; no exchange with the
/// excluded ranks). The library aborts `comm` afterwards (`abort_comm`) and never uses it again;
/// the store `comm` was created with (`create_world`) passes to the new communicator and stays
/// valid until that one is destroyed (its keys hold the parent's rendezvous: use new prefixes).
pub type mcore_backend_shrink_fn = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        comm: *mut c_void,
        exclude: *const u32,
        n_exclude: usize,
        flags: u32,
        group: *const mcore_backend_group_info,
        out_comm: *mut *mut c_void,
    ) -> i32,
>;
/// `mem_stat`: one statistic of the device memory of `comm` (`stat`: a
/// `MCORE_BACKEND_MEM_*` value, NCCL's `ncclCommMemStat_t` numbering) into `*out_value`.
/// `MCORE_STATUS_UNSUPPORTED` for a statistic the backend does not know.
pub type mcore_backend_mem_stat_fn =
    Option<unsafe extern "C" fn(user_data: *mut c_void, comm: *mut c_void, stat: i32, out_value: *mut u64) -> i32>;
/// `last_error`: specifics of the last failure on the calling thread (NULL or "" = none).
pub type mcore_backend_last_error_fn = Option<unsafe extern "C" fn(user_data: *mut c_void) -> *const c_char>;
/// `finalize`: the library is done with this vtable and `user_data`.
pub type mcore_backend_finalize_fn = Option<unsafe extern "C" fn(user_data: *mut c_void)>;
/// `interrupt`: `on` true: a peer of this process failed while it creates or verifies
/// communicators. End every blocking call of this backend in flight (`create_world`,
/// `create_group`, `split`, `shrink`, `allreduce_sum_i64`, `barrier`: any thread, any
/// communicator, also one being created) promptly with `MCORE_STATUS_PEER_FAILED`, and fail every
/// such call that starts the same way at once, until `interrupt(user_data, false)`. Called from
/// any thread while those calls run: it must not wait for them. `destroy_comm` and `abort_comm`
/// keep working. The library turns it off once the calls it ended have returned.
pub type mcore_backend_interrupt_fn = Option<unsafe extern "C" fn(user_data: *mut c_void, on: bool)>;

/// A communicator backend, version 1. Fill it in (zero what you do not support), then register
/// it with `mcore_backend_register`, or return it from a plugin's `mcore_backend_plugin_v1()`.
/// The library copies it; `name` is copied too. Statuses are `mcore_status` codes as `int32_t`.
/// A backend offers at least one creation strategy: `create_group` (per group, rendezvous
/// through the store), or `create_world` + `split` (one world communicator, then one split per
/// group kind). `destroy_comm` is required.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
#[allow(non_camel_case_types)]
pub struct mcore_backend_v1 {
    /// `sizeof(mcore_backend_v1)` as the plugin was built (at least `MCORE_BACKEND_V1_MIN_SIZE`).
    pub struct_size: u32,
    /// `MCORE_BACKEND_ABI_VERSION_V1`.
    pub abi_version: u32,
    /// Unique backend name, NUL-terminated (e.g. `"gloo"`); how users select it.
    pub name: *const c_char,
    /// Passed as the first argument of every slot; released by `finalize`.
    pub user_data: *mut c_void,
    /// Optional: create the world communicator (split strategy). Its store stays valid until
    /// this communicator's `destroy_comm` returned.
    pub create_world: mcore_backend_create_fn,
    /// Optional: split a communicator (split strategy).
    pub split: mcore_backend_split_fn,
    /// Optional: create one group's communicator directly (per-group strategy).
    pub create_group: mcore_backend_create_fn,
    /// Optional: in-place int64 sum; the library verifies each communicator with it.
    pub allreduce_sum_i64: mcore_backend_allreduce_sum_i64_fn,
    /// Optional: block until every rank of the communicator arrives.
    pub barrier: mcore_backend_comm_fn,
    /// Required: release a communicator.
    pub destroy_comm: mcore_backend_comm_fn,
    /// Optional: message of the last failure on this thread.
    pub last_error: mcore_backend_last_error_fn,
    /// Optional: called once when the backend is unregistered and its last communicator is gone.
    pub finalize: mcore_backend_finalize_fn,
    /// `MCORE_BACKEND_FLAG_*` bits (appended after `finalize`: 0 when `struct_size` does not cover
    /// it; unknown bits are ignored).
    pub flags: u32,
    /// Optional (appended after `flags`; NULL when `struct_size` does not cover it): release a
    /// communicator one of whose peers failed, without any exchange with its peers (recovery,
    /// docs/recovery.md). The library never uses the communicator again. NULL: `destroy_comm`
    /// is called instead.
    pub abort_comm: mcore_backend_comm_fn,
    /// Optional (appended after `abort_comm`; NULL when `struct_size` does not cover it): a new
    /// communicator without some ranks of `comm` (recovery, docs/recovery.md; see
    /// `mcore_backend_shrink_fn`). NULL: recovery creates the new world afresh (`create_world`).
    pub shrink: mcore_backend_shrink_fn,
    /// Optional (appended after `shrink`, with `resume` and `mem_stat`; NULL when `struct_size`
    /// does not cover it): release the device memory of `comm`, keeping the communicator and its
    /// ranks (collective over them; e.g. `HcclCommSuspend`). The library uses `comm` for nothing
    /// but `resume`, `mem_stat`, `abort_comm` and `destroy_comm` until `resume` returned OK.
    /// NULL (or `MCORE_STATUS_UNSUPPORTED`): the library destroys the communicator on suspend
    /// and creates it again on resume (docs/backends.md, "Suspend and resume").
    pub suspend: mcore_backend_comm_fn,
    /// Optional: take back what `suspend` released (collective over the ranks of `comm`).
    pub resume: mcore_backend_comm_fn,
    /// Optional: device memory statistics of a communicator (see `mcore_backend_mem_stat_fn`).
    pub mem_stat: mcore_backend_mem_stat_fn,
    /// Optional (appended after `mem_stat`; NULL when `struct_size` does not cover it): end the
    /// calls in flight when a peer failed (see `mcore_backend_interrupt_fn`). NULL: a call blocked
    /// on a live peer runs to its deadline.
    pub interrupt: mcore_backend_interrupt_fn,
}

/// `mcore_backend_mem_stat_fn` statistics (NCCL's `ncclCommMemStat_t` numbering): bytes a suspend
/// releases; whether they are released now (0 or 1); bytes kept while suspended; all bytes.
pub const MCORE_BACKEND_MEM_SUSPENDABLE: i32 = 0;
pub const MCORE_BACKEND_MEM_SUSPENDED: i32 = 1;
pub const MCORE_BACKEND_MEM_PERSISTENT: i32 = 2;
pub const MCORE_BACKEND_MEM_TOTAL: i32 = 3;

/// `mcore_backend_v1.flags`: under the `auto` strategy, create groups one by one although
/// `create_world` and `split` are filled, because this backend's split costs no less than
/// `create_group` (e.g. a split that connects a new full mesh per group). `split` stays
/// available on request.
pub const MCORE_BACKEND_FLAG_PREFER_PER_GROUP: u32 = 1;

/// `mcore_backend_v1.flags`: `create_group` may run on several threads at once, each for a
/// different group with its own store. The per-group strategy then creates all of a rank's
/// communicators concurrently (one thread each; their store calls never queue behind each
/// other's waits) instead of one after another. Every member of a group must be able to reach
/// the same group while its other groups are still being created. The library then also runs
/// the verification all-reduces of a rank's communicators on several threads at once.
pub const MCORE_BACKEND_FLAG_CONCURRENT_CREATE: u32 = 2;
/// `mcore_backend_v1.flags`: the backend places its communicators on a device and reads
/// `mcore_backend_group_info.device` (a device given at initialization is refused for a
/// backend without this flag).
pub const MCORE_BACKEND_FLAG_TAKES_DEVICE: u32 = 4;
/// `mcore_backend_v1.flags`: the backend reads the per-kind communicator options
/// (`mcore_backend_group_info.options`; appended in 0.2). Without this flag the library refuses
/// options for the backend before anything is created.
pub const MCORE_BACKEND_FLAG_TAKES_OPTIONS: u32 = 8;

/// `flags` of `mcore_backend_v1.shrink`: a peer of the communicator failed; end its operations in
/// flight before shrinking (the library aborts it afterwards).
pub const MCORE_BACKEND_SHRINK_ABORT_PARENT: u32 = 1;

/// Type of the entry symbol `mcore_backend_plugin_v1` a backend plugin `.so` exports: returns its
/// vtable (static storage; the library copies it), or NULL on failure.
pub type mcore_backend_plugin_v1_fn = unsafe extern "C" fn() -> *const mcore_backend_v1;

/// Name of the entry symbol of a backend plugin.
pub const PLUGIN_ENTRY_SYMBOL: &str = "mcore_backend_plugin_v1";

const _: () = assert!(
    std::mem::offset_of!(mcore_backend_v1, finalize) + std::mem::size_of::<mcore_backend_finalize_fn>()
        == MCORE_BACKEND_V1_MIN_SIZE as usize
);
const _: () = assert!(std::mem::size_of::<mcore_backend_v1>() == 144);
