//! Backend vtable v1 through the C exports: plugin loading errors, registration by pointer (a
//! small single-rank backend written here in Rust), and — when the Gloo plugin is built — real
//! multi-process communicators over a file store.
//!
//! The Gloo part needs `MCORE_GLOO_PLUGIN` (set by scripts/test.d/20-gloo-plugin.sh) or a build
//! at target/gloo-plugin/libmcore_init_gloo.so; otherwise it prints why and skips.

use crate::common;

use mcore_init::abi::backend::*;
use mcore_init::backend::register_vtable;
use mcore_init::backend::{self, BackendError, GroupInfo};
use mcore_init::ffi::backend::*;

/// The C status a backend error has at the boundary.
fn status_of(e: &mcore_init::backend::BackendError) -> mcore_status {
    mcore_init::ffi::FfiError::from(e.clone()).status
}
use mcore_init::ffi::mcore_status;
use mcore_init::store::{FileStore, Store, StoreError};
use std::ffi::{c_char, c_void, CStr, CString};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn last_error() -> String {
    let p = mcore_init::ffi::error::mcore_last_error_message();
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

fn temp_dir(tag: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let d = std::env::temp_dir().join(format!(
        "mcore-backend-test-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn load(path: &str) -> mcore_status {
    let c = CString::new(path).unwrap();
    unsafe { mcore_backend_load_plugin(c.as_ptr(), std::ptr::null_mut(), 0, std::ptr::null_mut()) }
}

#[test]
fn loading_a_missing_file_names_the_path() {
    assert_eq!(load("/nonexistent/dir/libmcore_init_nothing.so"), mcore_status::LibraryLoad);
    let msg = last_error();
    assert!(msg.contains("/nonexistent/dir/libmcore_init_nothing.so") && msg.contains("no such file"), "{msg}");
    // A bare name the dynamic loader cannot find.
    assert_eq!(load("libmcore_init_does_not_exist.so"), mcore_status::LibraryLoad);
    assert!(last_error().contains("libmcore_init_does_not_exist.so"), "{}", last_error());
    let st = unsafe { mcore_backend_load_plugin(std::ptr::null(), std::ptr::null_mut(), 0, std::ptr::null_mut()) };
    assert_eq!(st, mcore_status::InvalidArgument);
}

#[test]
fn loading_a_library_without_the_entry_symbol_names_the_symbol() {
    assert_eq!(load("libm.so.6"), mcore_status::LibraryLoad);
    let msg = last_error();
    assert!(msg.contains("libm.so.6") && msg.contains("mcore_backend_plugin_v1"), "{msg}");
}

// ---- a small backend registered by pointer: single-rank groups, counters for every slot ----

static CREATED: AtomicUsize = AtomicUsize::new(0);
static DESTROYED: AtomicUsize = AtomicUsize::new(0);
static FINALIZED: AtomicUsize = AtomicUsize::new(0);
static MESSAGE: &CStr = c"solo backend: only groups of size 1";
/// The name and `host_addr` (None: NULL) of every group solo_create saw.
static HOST_ADDRS: std::sync::Mutex<Vec<(String, Option<String>)>> = std::sync::Mutex::new(Vec::new());

unsafe extern "C" fn solo_create(
    _ud: *mut c_void,
    group: *const mcore_backend_group_info,
    store: *const mcore_backend_store,
    out: *mut *mut c_void,
) -> i32 {
    let (g, s) = unsafe { (&*group, &*store) };
    let addr = (!g.host_addr.is_null()).then(|| unsafe { CStr::from_ptr(g.host_addr) }.to_string_lossy().into_owned());
    let name = unsafe { CStr::from_ptr(g.name) }.to_string_lossy().into_owned();
    HOST_ADDRS.lock().unwrap().push((name, addr));
    if g.group_size != 1 {
        return if g.group_size == 99 { 12345 } else { mcore_status::Unsupported as i32 };
    }
    // Use the store the way a plugin does: set, get with the two-call pattern, add.
    unsafe {
        let rc = (s.set.unwrap())(s.ctx, c"addr".as_ptr(), b"here".as_ptr(), 4);
        assert_eq!(rc, 0);
        let mut len = 0;
        assert_eq!(
            (s.get.unwrap())(s.ctx, c"addr".as_ptr(), std::ptr::null_mut(), 0, &mut len),
            mcore_status::BufferTooSmall as i32
        );
        let mut buf = vec![0u8; len];
        assert_eq!((s.get.unwrap())(s.ctx, c"addr".as_ptr(), buf.as_mut_ptr(), len, &mut len), 0);
        assert_eq!(buf, b"here");
        let mut n = 0;
        assert_eq!((s.add.unwrap())(s.ctx, c"joined".as_ptr(), 1, &mut n), 0);
        // Every communicator gets its own heap cell holding its group rank.
        *out = Box::into_raw(Box::new(g.group_rank as i64 + n)).cast();
    }
    CREATED.fetch_add(1, Ordering::SeqCst);
    0
}

unsafe extern "C" fn solo_allreduce(_ud: *mut c_void, comm: *mut c_void, data: *mut i64, n: usize) -> i32 {
    // A sum over one rank is the identity: only check the arguments.
    if comm.is_null() || (data.is_null() && n != 0) {
        return mcore_status::InvalidArgument as i32;
    }
    0
}

unsafe extern "C" fn solo_destroy(_ud: *mut c_void, comm: *mut c_void) -> i32 {
    drop(unsafe { Box::from_raw(comm as *mut i64) });
    DESTROYED.fetch_add(1, Ordering::SeqCst);
    0
}

unsafe extern "C" fn solo_last_error(_ud: *mut c_void) -> *const c_char {
    MESSAGE.as_ptr()
}

unsafe extern "C" fn solo_finalize(_ud: *mut c_void) {
    FINALIZED.fetch_add(1, Ordering::SeqCst);
}

fn solo_vtable(name: &'static CStr) -> mcore_backend_v1 {
    mcore_backend_v1 {
        struct_size: std::mem::size_of::<mcore_backend_v1>() as u32,
        abi_version: MCORE_BACKEND_ABI_VERSION_V1,
        name: name.as_ptr(),
        user_data: std::ptr::null_mut(),
        create_world: None,
        split: None,
        create_group: Some(solo_create),
        allreduce_sum_i64: Some(solo_allreduce),
        barrier: None,
        destroy_comm: Some(solo_destroy),
        last_error: Some(solo_last_error),
        finalize: Some(solo_finalize),
        flags: 0,
        abort_comm: None,
        shrink: None,
        suspend: None,
        resume: None,
        mem_stat: None,
        interrupt: None,
    }
}

fn register(vt: &mcore_backend_v1) -> mcore_status {
    unsafe { mcore_backend_register(vt) }
}

#[test]
fn bad_vtables_are_rejected_with_the_bad_value_named() {
    let mut vt = solo_vtable(c"bad-abi");
    vt.abi_version = 2;
    assert_eq!(register(&vt), mcore_status::Unsupported);
    assert!(last_error().contains("abi_version 2"), "{}", last_error());

    let mut vt = solo_vtable(c"too-small");
    vt.struct_size = 40;
    assert_eq!(register(&vt), mcore_status::InvalidArgument);
    assert!(last_error().contains("struct_size 40"), "{}", last_error());

    let mut vt = solo_vtable(c"no-destroy");
    vt.destroy_comm = None;
    assert_eq!(register(&vt), mcore_status::InvalidArgument);
    assert!(last_error().contains("destroy_comm"), "{}", last_error());

    let mut vt = solo_vtable(c"no-strategy");
    vt.create_group = None;
    vt.create_world = Some(solo_create);
    assert_eq!(register(&vt), mcore_status::InvalidArgument);
    assert!(last_error().contains("no creation strategy"), "{}", last_error());

    let mut vt = solo_vtable(c"x");
    vt.name = std::ptr::null();
    assert_eq!(register(&vt), mcore_status::InvalidArgument);
    assert!(last_error().contains("NULL name"), "{}", last_error());

    assert_eq!(unsafe { mcore_backend_register(std::ptr::null()) }, mcore_status::InvalidArgument);
    for name in ["bad-abi", "too-small", "no-destroy", "no-strategy"] {
        assert!(!backend::names().contains(&name.to_string()), "{name} must not be registered");
    }
}

#[test]
fn register_by_pointer_round_trip() {
    let dir = temp_dir("solo");
    let store = || -> Arc<dyn Store> { Arc::new(FileStore::new(&dir, Duration::from_secs(5)).unwrap()) };
    let vt = solo_vtable(c"solo");
    assert_eq!(register(&vt), mcore_status::Ok);
    // A duplicate name is refused, and the refused copy is not finalized.
    assert_eq!(register(&vt), mcore_status::AlreadyExists);
    assert!(last_error().contains("'solo'"), "{}", last_error());
    assert_eq!(FINALIZED.load(Ordering::SeqCst), 0);

    let b = backend::get("solo").unwrap();
    assert_eq!(b.name(), "solo");
    assert!(b.supports_create_group() && !b.supports_split());
    let g = GroupInfo::new("data_parallel/7", vec![7], 7, Duration::from_secs(5)).unwrap();
    let group_store = store();
    let mut comm = b.create_group(&g, group_store.clone()).unwrap();
    // The store lent to create_group is released when the call returns.
    assert_eq!(Arc::strong_count(&group_store), 1);
    assert_eq!((comm.group_name(), comm.rank(), comm.size()), ("data_parallel/7", 0, 1));
    // The raw handle is the backend's own: here a cell holding group rank + the store counter.
    assert_eq!(unsafe { *(comm.raw_handle() as *const i64) }, 1);
    // The advertised address reaches the plugin as text, NULL when there is none.
    let with_addr =
        GroupInfo::new("data_parallel/8", vec![7], 7, Duration::from_secs(5)).unwrap().with_host_addr(Some("10.9.8.7"));
    drop(b.create_group(&with_addr, store()).unwrap());
    let seen = HOST_ADDRS.lock().unwrap().clone();
    assert!(seen.contains(&("data_parallel/7".into(), None)), "{seen:?}");
    assert!(seen.contains(&("data_parallel/8".into(), Some("10.9.8.7".into()))), "{seen:?}");
    let mut data = [7i64, 1];
    comm.allreduce_sum_i64(&mut data).unwrap();
    assert_eq!(data, [7, 1]);
    // A NULL slot is reported as unsupported, naming the operation.
    let e = comm.barrier().unwrap_err();
    assert_eq!(status_of(&e), mcore_status::Unsupported);
    assert!(e.to_string().contains("barrier"), "{e}");
    // The plugin's status and last_error come back with the group named.
    let g2 = GroupInfo::new("tensor_model_parallel/0", vec![0, 1], 1, Duration::from_secs(5)).unwrap();
    let e = b.create_group(&g2, store()).unwrap_err();
    assert_eq!(status_of(&e), mcore_status::Unsupported);
    let text = e.to_string();
    assert!(text.contains("tensor_model_parallel/0") && text.contains("only groups of size 1"), "{text}");
    // An unknown status code is never trusted as the enum.
    let g99 = GroupInfo::new("big", (0..99).collect(), 0, Duration::from_secs(5)).unwrap();
    let e = b.create_group(&g99, store()).unwrap_err();
    assert_eq!(status_of(&e), mcore_status::Backend);
    assert!(e.to_string().contains("unknown status code 12345"), "{e}");

    // Unregister while a communicator lives: finalize waits for it.
    let name = CString::new("solo").unwrap();
    assert_eq!(unsafe { mcore_backend_unregister(name.as_ptr()) }, mcore_status::Ok);
    assert!(matches!(backend::get("solo"), Err(BackendError::NotFound { .. })));
    assert_eq!(FINALIZED.load(Ordering::SeqCst), 0);
    drop(b);
    let created = CREATED.load(Ordering::SeqCst);
    comm.destroy().unwrap();
    assert_eq!(DESTROYED.load(Ordering::SeqCst), created);
    assert_eq!(FINALIZED.load(Ordering::SeqCst), 1);
    assert_eq!(unsafe { mcore_backend_unregister(name.as_ptr()) }, mcore_status::NotFound);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_longer_vtable_from_a_newer_plugin_is_accepted_when_its_new_slots_are_null() {
    #[repr(C)]
    struct Newer {
        v1: mcore_backend_v1,
        future_slot: usize,
    }
    // A slot this library does not know is set: refused, not silently ignored.
    let mut newer = Newer { v1: solo_vtable(c"solo-newer"), future_slot: 0xdead };
    newer.v1.struct_size = std::mem::size_of::<Newer>() as u32;
    newer.v1.finalize = None;
    assert_eq!(unsafe { mcore_backend_register(&newer.v1) }, mcore_status::InvalidArgument);
    assert!(last_error().contains("newer header"), "{}", last_error());
    newer.future_slot = 0;
    assert_eq!(unsafe { mcore_backend_register(&newer.v1) }, mcore_status::Ok, "{}", last_error());
    assert_eq!(backend::get("solo-newer").unwrap().name(), "solo-newer");
    backend::unregister("solo-newer").unwrap();
}

#[test]
fn flags_are_read_when_struct_size_covers_them_and_zero_from_an_older_plugin() {
    let mut vt = solo_vtable(c"solo-flags");
    vt.finalize = None;
    vt.flags = MCORE_BACKEND_FLAG_PREFER_PER_GROUP;
    assert_eq!(register(&vt), mcore_status::Ok, "{}", last_error());
    assert!(backend::get("solo-flags").unwrap().prefers_per_group());
    backend::unregister("solo-flags").unwrap();
    // A plugin built before `flags` existed: its struct ends at `finalize`.
    let mut older = solo_vtable(c"solo-older");
    older.finalize = None;
    older.flags = MCORE_BACKEND_FLAG_PREFER_PER_GROUP; // beyond struct_size: must not be read
    older.struct_size = MCORE_BACKEND_V1_MIN_SIZE;
    assert_eq!(register(&older), mcore_status::Ok, "{}", last_error());
    let b = backend::get("solo-older").unwrap();
    assert!(!b.prefers_per_group() && b.supports_allreduce());
    backend::unregister("solo-older").unwrap();
}

// ---- suspend, resume and memory statistics through the slots appended last ----

/// The solo backend's communicator cell holds 1 while suspended (else its group rank + counter).
static SUSPENDED_NOW: AtomicUsize = AtomicUsize::new(0);

unsafe extern "C" fn solo_suspend(_ud: *mut c_void, comm: *mut c_void) -> i32 {
    if comm.is_null() || SUSPENDED_NOW.swap(1, Ordering::SeqCst) == 1 {
        return mcore_status::InvalidArgument as i32;
    }
    0
}

unsafe extern "C" fn solo_resume(_ud: *mut c_void, comm: *mut c_void) -> i32 {
    if comm.is_null() || SUSPENDED_NOW.swap(0, Ordering::SeqCst) == 0 {
        return mcore_status::InvalidArgument as i32;
    }
    0
}

unsafe extern "C" fn solo_mem_stat(_ud: *mut c_void, _comm: *mut c_void, stat: i32, out: *mut u64) -> i32 {
    let suspended = SUSPENDED_NOW.load(Ordering::SeqCst) as u64;
    let value = match stat {
        MCORE_BACKEND_MEM_SUSPENDABLE => 1000 * (1 - suspended),
        MCORE_BACKEND_MEM_SUSPENDED => suspended,
        MCORE_BACKEND_MEM_PERSISTENT => 24,
        MCORE_BACKEND_MEM_TOTAL => 24 + 1000 * (1 - suspended),
        _ => return mcore_status::Unsupported as i32,
    };
    unsafe { *out = value };
    0
}

#[test]
fn suspend_resume_and_mem_stat_slots_are_called_and_null_slots_are_unsupported() {
    let dir = temp_dir("solo-suspend");
    let store = || -> Arc<dyn Store> { Arc::new(FileStore::new(&dir, Duration::from_secs(5)).unwrap()) };
    let mut vt = solo_vtable(c"solo-suspend");
    vt.finalize = None;
    vt.suspend = Some(solo_suspend);
    vt.resume = Some(solo_resume);
    vt.mem_stat = Some(solo_mem_stat);
    assert_eq!(register(&vt), mcore_status::Ok, "{}", last_error());
    let b = backend::get("solo-suspend").unwrap();
    let g = GroupInfo::new("tensor_model_parallel/0", vec![0], 0, Duration::from_secs(5)).unwrap();
    let mut comm = b.create_group(&g, store()).unwrap();
    assert_eq!(comm.memory().unwrap().unwrap(), [1000, 0, 24, 1024]);
    comm.suspend().unwrap();
    assert_eq!(comm.memory().unwrap().unwrap(), [0, 1, 24, 24]);
    // The plugin's refusal (suspended twice) comes back with the operation and group named.
    let e = comm.suspend().unwrap_err();
    assert_eq!(status_of(&e), mcore_status::InvalidArgument);
    assert!(e.to_string().contains("suspend") && e.to_string().contains("tensor_model_parallel/0"), "{e}");
    comm.resume().unwrap();
    assert_eq!(comm.memory().unwrap().unwrap(), [1000, 0, 24, 1024]);
    comm.destroy().unwrap();
    backend::unregister("solo-suspend").unwrap();

    // An older plugin (struct_size up to `shrink`): the slots read as NULL, whatever follows.
    let mut older = solo_vtable(c"solo-no-suspend");
    older.finalize = None;
    older.suspend = Some(solo_suspend);
    older.resume = Some(solo_resume);
    older.mem_stat = Some(solo_mem_stat);
    older.struct_size = 112;
    assert_eq!(register(&older), mcore_status::Ok, "{}", last_error());
    let b = backend::get("solo-no-suspend").unwrap();
    let mut comm = b.create_group(&g, store()).unwrap();
    assert!(comm.memory().is_none());
    let e = comm.suspend().unwrap_err();
    assert_eq!(status_of(&e), mcore_status::Unsupported);
    assert!(e.to_string().contains("suspend"), "{e}");
    comm.destroy().unwrap();
    backend::unregister("solo-no-suspend").unwrap();
    std::fs::remove_dir_all(dir).unwrap();
}

// ---- the split strategy through a single-rank backend ----

static SPLIT_LIVE: AtomicUsize = AtomicUsize::new(0);

unsafe extern "C" fn split_world(
    _ud: *mut c_void,
    group: *const mcore_backend_group_info,
    _store: *const mcore_backend_store,
    out: *mut *mut c_void,
) -> i32 {
    if unsafe { (*group).group_size } != 1 {
        return mcore_status::Unsupported as i32;
    }
    unsafe { *out = Box::into_raw(Box::new(-1i64)).cast() };
    SPLIT_LIVE.fetch_add(1, Ordering::SeqCst);
    0
}

unsafe extern "C" fn split_split(
    _ud: *mut c_void,
    parent: *mut c_void,
    color: i32,
    key: i32,
    group: *const mcore_backend_group_info,
    out: *mut *mut c_void,
) -> i32 {
    if parent.is_null() || (color < 0) != group.is_null() {
        return mcore_status::InvalidArgument as i32;
    }
    if color < 0 {
        unsafe { *out = std::ptr::null_mut() };
        return 0;
    }
    // The communicator remembers (color, key) so the test can see they arrived.
    unsafe { *out = Box::into_raw(Box::new(i64::from(color) * 1000 + i64::from(key))).cast() };
    SPLIT_LIVE.fetch_add(1, Ordering::SeqCst);
    0
}

unsafe extern "C" fn split_allreduce(_ud: *mut c_void, comm: *mut c_void, data: *mut i64, n: usize) -> i32 {
    // Adds the communicator's remembered value to each element (a test-only "sum").
    let v = unsafe { *(comm as *const i64) };
    for i in 0..n {
        unsafe { *data.add(i) += v };
    }
    0
}

unsafe extern "C" fn split_destroy(_ud: *mut c_void, comm: *mut c_void) -> i32 {
    drop(unsafe { Box::from_raw(comm as *mut i64) });
    SPLIT_LIVE.fetch_sub(1, Ordering::SeqCst);
    0
}

#[test]
fn split_strategy_members_get_a_communicator_and_others_none() {
    let mut vt = solo_vtable(c"solo-split");
    vt.create_group = None;
    vt.create_world = Some(split_world);
    vt.split = Some(split_split);
    vt.allreduce_sum_i64 = Some(split_allreduce);
    vt.destroy_comm = Some(split_destroy);
    vt.finalize = None;
    // The Rust-side registration gives the backend back directly.
    let b = unsafe { register_vtable(&vt) }.unwrap();
    assert_eq!(backend::get("solo-split").unwrap().name(), b.name());
    assert!(b.supports_split() && !b.supports_create_group());
    let dir = temp_dir("split");
    let store: Arc<dyn Store> = Arc::new(FileStore::new(&dir, Duration::from_secs(5)).unwrap());
    let t = Duration::from_secs(5);
    let e = b.create_group(&GroupInfo::new("g", vec![0], 0, t).unwrap(), store.clone()).unwrap_err();
    assert_eq!(status_of(&e), mcore_status::Unsupported);
    let mut world = b.create_world(&GroupInfo::new("world", vec![0], 0, t).unwrap(), store).unwrap();
    let g = GroupInfo::new("expert_model_parallel/3", vec![0], 0, t).unwrap();
    let mut comm = b.split(&mut world, 3, 7, Some(&g)).unwrap().expect("a member gets a communicator");
    assert_eq!((comm.group_name(), comm.rank(), comm.size()), ("expert_model_parallel/3", 0, 1));
    let mut data = [0i64];
    comm.allreduce_sum_i64(&mut data).unwrap();
    assert_eq!(data, [3007], "color and key reach the backend");
    assert!(b.split(&mut world, 0, 0, None).unwrap().is_none());
    assert_eq!(SPLIT_LIVE.load(Ordering::SeqCst), 2);
    drop(comm);
    world.destroy().unwrap();
    assert_eq!(SPLIT_LIVE.load(Ordering::SeqCst), 0);
    backend::unregister("solo-split").unwrap();
    std::fs::remove_dir_all(dir).unwrap();
}

// ---- the store lent to create_world lives exactly as long as the world communicator ----

/// A communicator of the keep-store backend: the store it may use later (NULL for a child).
struct KeepComm {
    store: *const mcore_backend_store,
}

unsafe fn keep_set(store: *const mcore_backend_store, key: &CStr) -> i32 {
    let s = unsafe { &*store };
    unsafe { (s.set.unwrap())(s.ctx, key.as_ptr(), b"1".as_ptr(), 1) }
}

unsafe extern "C" fn keep_world(
    _ud: *mut c_void,
    _group: *const mcore_backend_group_info,
    store: *const mcore_backend_store,
    out: *mut *mut c_void,
) -> i32 {
    unsafe { *out = Box::into_raw(Box::new(KeepComm { store })).cast() };
    0
}

unsafe extern "C" fn keep_split(
    _ud: *mut c_void,
    parent: *mut c_void,
    color: i32,
    _key: i32,
    _group: *const mcore_backend_group_info,
    out: *mut *mut c_void,
) -> i32 {
    if color < 0 {
        unsafe { *out = std::ptr::null_mut() };
        return 0;
    }
    // Rendezvous through the world's store, after create_world returned.
    let rc = unsafe { keep_set((*(parent as *const KeepComm)).store, c"split-used-the-store") };
    if rc != 0 {
        return rc;
    }
    let child = KeepComm { store: std::ptr::null() };
    unsafe { *out = Box::into_raw(Box::new(child)).cast() };
    0
}

unsafe extern "C" fn keep_destroy(_ud: *mut c_void, comm: *mut c_void) -> i32 {
    let comm = unsafe { Box::from_raw(comm as *mut KeepComm) };
    if comm.store.is_null() {
        return 0;
    }
    // The world's store is still valid while its destroy_comm runs.
    unsafe { keep_set(comm.store, c"world-destroy-used-the-store") }
}

#[test]
fn the_store_lent_to_create_world_lives_until_the_world_is_destroyed() {
    let mut vt = solo_vtable(c"keep-store");
    vt.create_group = None;
    vt.create_world = Some(keep_world);
    vt.split = Some(keep_split);
    vt.destroy_comm = Some(keep_destroy);
    vt.finalize = None;
    let b = unsafe { register_vtable(&vt) }.unwrap();
    let dir = temp_dir("keep-store");
    let t = Duration::from_secs(5);
    let store: Arc<dyn Store> = Arc::new(FileStore::new(&dir, t).unwrap());
    let world_info = GroupInfo::new("world", vec![0], 0, t).unwrap();
    let mut world = b.create_world(&world_info, store.clone()).unwrap();
    assert_eq!(Arc::strong_count(&store), 2, "the world communicator keeps its store");
    let g = GroupInfo::new("tensor_model_parallel/0", vec![0], 0, t).unwrap();
    let child = b.split(&mut world, 0, 0, Some(&g)).unwrap().unwrap();
    assert!(store.check(&["split-used-the-store"]).unwrap());
    child.destroy().unwrap();
    assert_eq!(Arc::strong_count(&store), 2, "a child does not release the world's store");
    assert!(!store.check(&["world-destroy-used-the-store"]).unwrap());
    world.destroy().unwrap();
    assert!(store.check(&["world-destroy-used-the-store"]).unwrap());
    assert_eq!(Arc::strong_count(&store), 1, "destroying the world releases its store");
    // The same through drop.
    let other = FileStore::new(dir.join("other"), t).unwrap();
    let other: Arc<dyn Store> = Arc::new(other);
    let world = b.create_world(&world_info, other.clone()).unwrap();
    assert_eq!(Arc::strong_count(&other), 2);
    drop(world);
    assert!(other.check(&["world-destroy-used-the-store"]).unwrap());
    assert_eq!(Arc::strong_count(&other), 1);
    backend::unregister("keep-store").unwrap();
    std::fs::remove_dir_all(dir).unwrap();
}

// ---- the Gloo plugin with real processes ----

fn gloo_plugin() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("MCORE_GLOO_PLUGIN") {
        return Some(PathBuf::from(p));
    }
    let built = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/gloo-plugin/libmcore_init_gloo.so");
    if built.exists() {
        return Some(built);
    }
    println!("SKIP: Gloo plugin not built (set MCORE_GLOO_PLUGIN or run scripts/test.d/20-gloo-plugin.sh)");
    None
}

fn spawn_probe(plugin: &PathBuf, dir: &PathBuf, rank: u32, world: u32, timeout_ms: u64) -> Child {
    Command::new(common::backend_probe())
        .arg("--backend")
        .arg(plugin)
        .arg("--store-dir")
        .arg(dir)
        .args(["--rank", &rank.to_string(), "--world-size", &world.to_string()])
        .args(["--timeout-ms", &timeout_ms.to_string()])
        .args(["--group", "pair/0=0,1", "--group", "pair/1=2,3", "--group", "evens=0,2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn mcore-backend-probe")
}

/// Wait for every child up to `deadline`, killing all of them past it. (exit ok, stdout, stderr).
fn collect(children: Vec<Child>, deadline: Duration) -> Vec<(bool, String, String)> {
    let start = Instant::now();
    let mut children: Vec<Option<Child>> = children.into_iter().map(Some).collect();
    loop {
        let all_done = children.iter_mut().flatten().all(|c| c.try_wait().ok().flatten().is_some());
        if all_done {
            break;
        }
        if start.elapsed() > deadline {
            for c in children.iter_mut().flatten() {
                let _ = c.kill();
            }
            panic!("probe processes still running after {deadline:?}; killed");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    children
        .iter_mut()
        .map(|c| {
            let out = c.take().unwrap().wait_with_output().unwrap();
            (
                out.status.success(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        })
        .collect()
}

#[test]
fn gloo_plugin_loads_through_the_c_api_with_its_name() {
    let Some(plugin) = gloo_plugin() else { return };
    let path = CString::new(plugin.to_str().unwrap()).unwrap();
    let mut small = [0 as c_char; 3];
    let mut len = 0usize;
    let st = unsafe { mcore_backend_load_plugin(path.as_ptr(), small.as_mut_ptr(), small.len(), &mut len) };
    assert_eq!(st, mcore_status::BufferTooSmall, "{}", last_error());
    assert_eq!(len, "gloo".len() + 1);
    let mut buf = [0 as c_char; 16];
    let st = unsafe { mcore_backend_load_plugin(path.as_ptr(), buf.as_mut_ptr(), buf.len(), &mut len) };
    assert_eq!(st, mcore_status::Ok, "loading again is idempotent: {}", last_error());
    assert_eq!(unsafe { CStr::from_ptr(buf.as_ptr()) }.to_str().unwrap(), "gloo");
    // The same library reached through another path is the same backend, not a duplicate.
    let link_dir = temp_dir("gloo-link");
    std::fs::create_dir_all(&link_dir).unwrap();
    let link = link_dir.join("libmcore_init_gloo_alias.so");
    std::os::unix::fs::symlink(&plugin, &link).unwrap();
    assert_eq!(load(link.to_str().unwrap()), mcore_status::Ok, "{}", last_error());
    std::fs::remove_dir_all(link_dir).unwrap();
    let b = backend::get("gloo").unwrap();
    assert!(b.supports_create_group() && b.supports_split());
    // A single-rank group works in-process too.
    let dir = temp_dir("gloo-solo");
    let store: Arc<dyn Store> = Arc::new(FileStore::new(&dir, Duration::from_secs(10)).unwrap());
    let g = GroupInfo::new("solo/5", vec![5], 5, Duration::from_secs(10)).unwrap();
    let mut comm = b.create_group(&g, store).unwrap();
    let mut data = [5i64, -3];
    comm.allreduce_sum_i64(&mut data).unwrap();
    assert_eq!(data, [5, -3]);
    comm.barrier().unwrap();
    comm.destroy().unwrap();
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn gloo_groups_across_four_real_processes_sum_their_members() {
    let Some(plugin) = gloo_plugin() else { return };
    let dir = temp_dir("gloo4");
    let kids = (0..4).map(|r| spawn_probe(&plugin, &dir, r, 4, 30_000)).collect();
    let results = collect(kids, Duration::from_secs(90));
    let groups =
        [("world", vec![0u32, 1, 2, 3]), ("pair/0", vec![0, 1]), ("pair/1", vec![2, 3]), ("evens", vec![0, 2])];
    for (rank, (ok, out, err)) in results.iter().enumerate() {
        assert!(ok, "rank {rank} failed: {err}");
        let v: serde_json::Value =
            serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("rank {rank}: {e}: {out}"));
        assert_eq!(v["rank"], rank as u64);
        assert_eq!(v["ok"], true);
        for (name, members) in &groups {
            let g = &v["groups"][*name];
            match members.iter().position(|&m| m == rank as u32) {
                Some(idx) => {
                    assert_eq!(g["size"], members.len() as u64, "rank {rank} group {name}");
                    assert_eq!(g["rank"], idx as u64, "rank {rank} group {name}");
                    assert_eq!(g["sum"], members.iter().sum::<u32>() as u64, "rank {rank} group {name}");
                }
                None => assert!(g.is_null(), "rank {rank} must not be in {name}: {out}"),
            }
        }
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn gloo_ranks_fail_within_the_timeout_naming_a_rank_that_never_started() {
    let Some(plugin) = gloo_plugin() else { return };
    let dir = temp_dir("gloo-missing");
    // World of 4, rank 3 never starts.
    let kids = (0..3).map(|r| spawn_probe(&plugin, &dir, r, 4, 1_500)).collect();
    let results = collect(kids, Duration::from_secs(60));
    for (rank, (ok, _out, err)) in results.iter().enumerate() {
        assert!(!ok, "rank {rank} must fail when rank 3 is missing");
        assert!(err.contains("group 'world'") && err.contains("timed out"), "rank {rank}: {err}");
        assert!(err.contains("global rank 3"), "rank {rank} should name the missing rank: {err}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn mcore_backend_plugin_env_is_honoured_and_a_bad_path_is_named() {
    let Some(plugin) = gloo_plugin() else { return };
    let dir = temp_dir("gloo-env");
    let probe = |plugin_env: &std::ffi::OsStr| {
        Command::new(common::backend_probe())
            .env("MCORE_BACKEND_PLUGIN", plugin_env)
            .arg("--store-dir")
            .arg(&dir)
            .args(["--rank", "0", "--world-size", "1", "--timeout-ms", "10000"])
            .output()
            .unwrap()
    };
    let out = probe(plugin.as_os_str());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["groups"]["world"]["sum"], 0);
    assert_eq!(v["groups"]["world"]["size"], 1);
    let out = probe(std::ffi::OsStr::new("/nonexistent/libmcore_init_gloo.so"));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/libmcore_init_gloo.so") && err.contains("no such file"), "{err}");
    std::fs::remove_dir_all(dir).unwrap();
}

// ---- the Gloo plugin's split strategy ----

const SPLIT_CHILD_ENV: &str = "MCORE_GLOO_SPLIT_CHILD";

/// `[global rank, 1]` summed over the communicator must be `[sum of members, size]`.
fn check_sum(comm: &mut backend::Comm, rank: u32, members: &[u32]) {
    let mut data = [i64::from(rank), 1];
    comm.allreduce_sum_i64(&mut data)
        .unwrap_or_else(|e| panic!("rank {rank}: allreduce on {}: {e}", comm.group_name()));
    let sum: u32 = members.iter().sum();
    assert_eq!(data, [i64::from(sum), members.len() as i64], "rank {rank} group {}", comm.group_name());
}

/// A store that counts its reads: single `get`s and `multi_get`s.
struct CountingStore {
    inner: Arc<dyn Store>,
    gets: AtomicUsize,
    multi_gets: AtomicUsize,
}

impl CountingStore {
    fn count(&self, counter: &AtomicUsize) {
        counter.fetch_add(1, Ordering::SeqCst);
    }
    fn reads(&self) -> usize {
        self.gets.load(Ordering::SeqCst) + self.multi_gets.load(Ordering::SeqCst)
    }
}

impl Store for CountingStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        self.inner.set(key, value)
    }
    fn get(&self, key: &str) -> Result<Vec<u8>, StoreError> {
        self.count(&self.gets);
        self.inner.get(key)
    }
    fn add(&self, key: &str, delta: i64) -> Result<i64, StoreError> {
        self.inner.add(key, delta)
    }
    fn compare_set(&self, key: &str, expected: &[u8], desired: &[u8]) -> Result<Vec<u8>, StoreError> {
        self.inner.compare_set(key, expected, desired)
    }
    fn check(&self, keys: &[&str]) -> Result<bool, StoreError> {
        self.inner.check(keys)
    }
    fn wait(&self, keys: &[&str], timeout: Duration) -> Result<(), StoreError> {
        self.inner.wait(keys, timeout)
    }
    fn delete_key(&self, key: &str) -> Result<bool, StoreError> {
        self.inner.delete_key(key)
    }
    fn num_keys(&self) -> Result<i64, StoreError> {
        self.inner.num_keys()
    }
    fn timeout(&self) -> Duration {
        self.inner.timeout()
    }
    fn multi_get(&self, keys: &[&str]) -> Result<Vec<Vec<u8>>, StoreError> {
        self.count(&self.multi_gets);
        self.inner.multi_get(keys)
    }
}

/// Each member's global rank at its group rank, summed over `comm`: the members in group order.
fn check_order(comm: &mut backend::Comm, rank: u32, members: &[u32]) {
    let mut data = vec![0i64; members.len()];
    data[comm.rank() as usize] = i64::from(rank);
    comm.allreduce_sum_i64(&mut data)
        .unwrap_or_else(|e| panic!("rank {rank}: allreduce on {}: {e}", comm.group_name()));
    assert_eq!(
        data,
        members.iter().map(|&m| i64::from(m)).collect::<Vec<_>>(),
        "rank {rank} group {}",
        comm.group_name()
    );
}

/// One rank of the split tests (case in `SPLIT_CHILD_ENV`):
/// * `splits`: world of 4 through create_world, then kind A = {0,1},{2,3}, kind B = {0,2}
///   (ranks 1 and 3 pass no color) and kind C = {1,2,3} (rank 0 passes no color; its root is
///   world rank 1), each child checked for its members and their order, kinds A and B
///   all-reducing on two threads at once, C with 8 MiB per rank (the sum's root takes the
///   others' values in turns), kind A split a second time under the same names; no split reads
///   the store (children are derived from the world's mesh); the world destroyed, the children
///   verified again;
/// * `missing`: world of 2, rank 1 joins no group while rank 0 splits into {0,1}: the split
///   returns (it sends nothing), and the child's first all-reduce times out naming global rank 1.
#[test]
#[ignore = "child half of the Gloo split tests"]
fn gloo_split_child() {
    let case = std::env::var(SPLIT_CHILD_ENV).expect("run only as a child");
    let plugin = PathBuf::from(std::env::var("MCORE_GLOO_PLUGIN").unwrap());
    let dir = PathBuf::from(std::env::var("MCORE_GLOO_SPLIT_DIR").unwrap());
    let rank: u32 = std::env::var("MCORE_GLOO_SPLIT_RANK").unwrap().parse().unwrap();
    let world_size: u32 = std::env::var("MCORE_GLOO_SPLIT_WORLD").unwrap().parse().unwrap();
    let t = Duration::from_secs(30);
    let b = backend::load_plugin(&plugin).unwrap();
    assert!(b.supports_split());
    let base: Arc<dyn Store> = Arc::new(FileStore::new(&dir, t).unwrap());
    // As the runtime does: the world gets a key space of its own.
    let counting = Arc::new(CountingStore {
        inner: Arc::new(mcore_init::store::PrefixStore::new("world", base.clone())),
        gets: AtomicUsize::new(0),
        multi_gets: AtomicUsize::new(0),
    });
    let world_ranks: Vec<u32> = (0..world_size).collect();
    let info = GroupInfo::new("world", world_ranks.clone(), rank, t).unwrap();
    let mut world = b.create_world(&info, counting.clone()).unwrap();
    check_sum(&mut world, rank, &world_ranks);
    let reads_of_world = counting.reads();

    let split = |world: &mut backend::Comm, name: &str, color: u32, members: Option<Vec<u32>>, t: Duration| {
        let g = members.map(|m| GroupInfo::new(name, m, rank, t).unwrap());
        let key = g.as_ref().map_or(0, |g| g.group_rank as i32);
        world.split(color, key, g.as_ref())
    };
    if case == "missing" {
        let short = Duration::from_millis(1500);
        let members = (rank == 0).then(|| vec![0, 1]);
        match split(&mut world, "pair/0", 0, members, short) {
            Ok(None) if rank == 1 => {
                // Stay connected until rank 0 has timed out (a closed pair would fail it sooner).
                base.wait(&["missing-done"], t).unwrap();
            }
            Ok(Some(mut child)) if rank == 0 => {
                let e = child.allreduce_sum_i64(&mut [0, 1]).unwrap_err();
                let text = e.to_string();
                assert!(
                    text.contains("'pair/0'") && text.contains("timed out") && text.contains("global rank 1"),
                    "{text}"
                );
                assert_eq!(status_of(&e), mcore_status::Timeout, "{text}");
                base.set("missing-done", b"1").unwrap();
                child.destroy().unwrap();
            }
            other => panic!("rank {rank}: unexpected {other:?}"),
        }
        world.destroy().unwrap();
        println!("CHILD-OK rank={rank}");
        return;
    }
    let pair_color = rank / 2;
    let pair: Vec<u32> = vec![2 * pair_color, 2 * pair_color + 1];
    let pair_name = format!("pair/{pair_color}");
    let mut a =
        split(&mut world, &pair_name, pair_color, Some(pair.clone()), t).unwrap().expect("every rank is in a pair");
    assert_eq!((a.rank(), a.size()), (rank % 2, 2));
    let evens = [0u32, 2];
    let is_even = rank % 2 == 0;
    let mut b_child = split(&mut world, "evens", 0, is_even.then(|| evens.to_vec()), t).unwrap();
    assert_eq!(b_child.is_some(), is_even, "rank {rank}: only members get a communicator");
    // Three ranks without world rank 0.
    let upper = [1u32, 2, 3];
    let c_child = split(&mut world, "upper", 0, (rank != 0).then(|| upper.to_vec()), t).unwrap();
    assert_eq!(c_child.is_some(), rank != 0, "rank {rank}: only members get a communicator");
    // Children of one world all-reduce on two threads at once, each in its own slots.
    std::thread::scope(|s| {
        let a = &mut a;
        let pair = &pair;
        s.spawn(move || {
            check_sum(a, rank, pair);
            check_order(a, rank, pair);
        });
        if let Some(c) = b_child.as_mut() {
            check_sum(c, rank, &evens);
            check_order(c, rank, &evens);
        }
    });
    if let Some(mut c) = c_child {
        assert_eq!((c.rank(), c.size()), (rank - 1, 3));
        check_order(&mut c, rank, &upper);
        // 8 MiB per rank: the root takes one member's values at a time.
        let n = (8 << 20) / 8 + 3;
        let mut big: Vec<i64> = (0..n as i64).map(|j| j * 7 + i64::from(rank)).collect();
        c.allreduce_sum_i64(&mut big).unwrap();
        assert!(big.iter().enumerate().all(|(j, &v)| v == 3 * 7 * j as i64 + 6), "rank {rank}: wrong 8 MiB sum");
        // Sums wrap as two's complement.
        let mut edge = [i64::MAX];
        c.allreduce_sum_i64(&mut edge).unwrap();
        assert_eq!(edge, [i64::MAX.wrapping_mul(3)], "rank {rank}");
        c.barrier().unwrap();
        c.destroy().unwrap();
    }
    // The same group name split again off the same world gets slots of its own.
    let mut again = split(&mut world, &pair_name, pair_color, Some(pair.clone()), t).unwrap().unwrap();
    check_sum(&mut again, rank, &pair);
    again.destroy().unwrap();
    // Splits are derived from the world's mesh: no split reads the store.
    assert!(reads_of_world > 0, "rank {rank}: the world's mesh read no key");
    assert_eq!(counting.reads(), reads_of_world, "rank {rank}: splits read the store");

    // Children own their contexts: they outlive the world.
    world.destroy().unwrap();
    check_sum(&mut a, rank, &pair);
    if let Some(c) = b_child.as_mut() {
        check_sum(c, rank, &evens);
        c.barrier().unwrap();
    }
    a.destroy().unwrap();
    if let Some(c) = b_child {
        c.destroy().unwrap();
    }
    println!("CHILD-OK rank={rank}");
}

/// Run `case` of `gloo_split_child` as `world` real processes; every one must print CHILD-OK.
fn run_split_children(case: &str, world: u32) {
    let Some(plugin) = gloo_plugin() else { return };
    let dir = temp_dir(&format!("gloo-split-{case}"));
    std::fs::create_dir_all(&dir).unwrap();
    let kids = (0..world)
        .map(|r| {
            Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    &common::test_name(module_path!(), "gloo_split_child"),
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(SPLIT_CHILD_ENV, case)
                .env("MCORE_GLOO_PLUGIN", &plugin)
                .env("MCORE_GLOO_SPLIT_DIR", &dir)
                .env("MCORE_GLOO_SPLIT_RANK", r.to_string())
                .env("MCORE_GLOO_SPLIT_WORLD", world.to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for (rank, (ok, out, err)) in collect(kids, Duration::from_secs(120)).iter().enumerate() {
        assert!(*ok && out.contains(&format!("CHILD-OK rank={rank}")), "{case} rank {rank}: {out}{err}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn gloo_splits_across_four_real_processes() {
    run_split_children("splits", 4);
}

#[test]
fn gloo_split_with_a_member_missing_times_out_naming_it() {
    run_split_children("missing", 2);
}

#[test]
fn gloo_split_errors_name_the_cause() {
    let Some(plugin) = gloo_plugin() else { return };
    let b = backend::load_plugin(&plugin).unwrap();
    let dir = temp_dir("gloo-split-errors");
    let t = Duration::from_secs(10);
    let store = || -> Arc<dyn Store> { Arc::new(FileStore::new(&dir, t).unwrap()) };
    let solo = |name: &str| GroupInfo::new(name, vec![0], 0, t).unwrap();

    // A communicator from create_group has no store to rendezvous a split through.
    let mut group = b.create_group(&solo("data_parallel/0"), store()).unwrap();
    let e = b.split(&mut group, 0, 0, Some(&solo("tp/0"))).unwrap_err();
    assert_eq!(status_of(&e), mcore_status::InvalidArgument);
    let text = e.to_string();
    assert!(
        text.contains("splits need a world communicator from create_world") && text.contains("'data_parallel/0'"),
        "{text}"
    );
    group.destroy().unwrap();

    let mut world = b.create_world(&solo("world"), store()).unwrap();
    // The key must be the group rank the runtime computed.
    let e = b.split(&mut world, 0, 5, Some(&solo("tp/0"))).unwrap_err();
    assert_eq!(status_of(&e), mcore_status::InvalidArgument);
    let text = e.to_string();
    assert!(text.contains("key 5") && text.contains("group rank 0") && text.contains("'tp/0'"), "{text}");
    // A member that is not in the world.
    let outsider = GroupInfo::new("tp/1", vec![0, 9], 0, t).unwrap();
    let e = b.split(&mut world, 1, 0, Some(&outsider)).unwrap_err();
    assert!(e.to_string().contains("global rank 9 is not in the world"), "{e}");
    // A non-member gets no communicator; a member of a one-rank group gets a working one.
    assert!(b.split(&mut world, 0, 0, None).unwrap().is_none());
    let mut child = b.split(&mut world, 0, 0, Some(&solo("tp/0"))).unwrap().unwrap();
    // A child of a split is not a world either.
    let e = b.split(&mut child, 0, 0, Some(&solo("tp/0/sub"))).unwrap_err();
    assert!(e.to_string().contains("splits need a world communicator"), "{e}");
    world.destroy().unwrap();
    check_sum(&mut child, 0, &[0]);
    child.destroy().unwrap();
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn the_runtime_refuses_verification_without_allreduce_before_any_rendezvous() {
    use mcore_init::backend::CommFactory;
    use mcore_init::runtime::{self, InitArgs, LaunchEnv, RuntimeError};
    let mut vt = solo_vtable(c"solo-noreduce");
    vt.finalize = None;
    vt.allreduce_sum_i64 = None;
    assert_eq!(register(&vt), mcore_status::Ok, "{}", last_error());
    let b = backend::get("solo-noreduce").unwrap();
    // A port nobody listens on: the check must come before the store is touched.
    let env = LaunchEnv::from_lookup(&|k| match k {
        "RANK" => Some("0".into()),
        "WORLD_SIZE" => Some("1".into()),
        "MASTER_ADDR" => Some("127.0.0.1".into()),
        "MASTER_PORT" => Some("1".into()),
        _ => None,
    })
    .unwrap();
    let resolver = move |_: &InitArgs| -> Result<Arc<dyn CommFactory>, RuntimeError> { Ok(Arc::new(b.clone())) };
    let err =
        runtime::initialize_with(InitArgs { backend: "solo-noreduce".into(), ..InitArgs::default() }, env, &resolver)
            .unwrap_err()
            .to_string();
    assert!(err.contains("fills no allreduce_sum_i64 slot") && err.contains("verify off"), "{err}");
    assert!(!runtime::is_initialized());
    backend::unregister("solo-noreduce").unwrap();
}

// ---- MCORE_BACKEND_FLAG_CONCURRENT_CREATE: create_group on several threads at once ----

static IN_CREATE: AtomicUsize = AtomicUsize::new(0);
static MOST_IN_CREATE: AtomicUsize = AtomicUsize::new(0);

/// A single-rank create_group that stays inside the call for 300 ms and records how many calls
/// were inside at once.
unsafe extern "C" fn slow_create(
    _ud: *mut c_void,
    _group: *const mcore_backend_group_info,
    _store: *const mcore_backend_store,
    out: *mut *mut c_void,
) -> i32 {
    let now = IN_CREATE.fetch_add(1, Ordering::SeqCst) + 1;
    MOST_IN_CREATE.fetch_max(now, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(300));
    IN_CREATE.fetch_sub(1, Ordering::SeqCst);
    unsafe { *out = Box::into_raw(Box::new(0i64)).cast() };
    0
}

/// Its own destroy, so that the counters of the solo backend's tests stay theirs.
unsafe extern "C" fn slow_destroy(_ud: *mut c_void, comm: *mut c_void) -> i32 {
    drop(unsafe { Box::from_raw(comm as *mut i64) });
    0
}

#[test]
fn a_backend_flagged_concurrent_creates_a_ranks_groups_on_threads_at_once() {
    use mcore_init::backend::CommFactory;
    use mcore_init::runtime::CommOptions;
    let mut vt = solo_vtable(c"solo-concurrent");
    vt.finalize = None;
    vt.create_group = Some(slow_create);
    vt.destroy_comm = Some(slow_destroy);
    vt.flags = MCORE_BACKEND_FLAG_CONCURRENT_CREATE;
    assert_eq!(register(&vt), mcore_status::Ok, "{}", last_error());
    let b = backend::get("solo-concurrent").unwrap();
    assert!(b.creates_together() && b.verifies_concurrently());
    let infos: Vec<GroupInfo> =
        (0..3).map(|i| GroupInfo::new(format!("g{i}"), vec![0], 0, Duration::from_secs(5)).unwrap()).collect();
    let options = CommOptions::default();
    let store: Arc<dyn Store> = Arc::new(mcore_init::store::MemoryStore::new(Duration::from_secs(5)));
    let requests: Vec<_> = infos.iter().map(|g| (g, &options, store.clone())).collect();
    let comms = b.create_groups_together(&requests).map_err(|(i, e)| format!("group {i}: {e}")).unwrap();
    assert_eq!(comms.len(), 3);
    assert_eq!(MOST_IN_CREATE.load(Ordering::SeqCst), 3, "the three create_group calls did not overlap");
    drop(comms);
    backend::unregister("solo-concurrent").unwrap();
    // Without the flag the same backend creates groups one by one.
    let mut plain = solo_vtable(c"solo-not-concurrent");
    plain.finalize = None;
    assert_eq!(register(&plain), mcore_status::Ok, "{}", last_error());
    let p = backend::get("solo-not-concurrent").unwrap();
    assert!(!p.creates_together() && !p.verifies_concurrently());
    backend::unregister("solo-not-concurrent").unwrap();
}

// Recovery's abort (docs/recovery.md): the optional `abort_comm` slot releases a communicator
// whose peer failed; without it `destroy_comm` is used. A Rust test double of a plugin with its
// own counters (the Gloo plugin leaves the slot NULL; recovery with it runs in
// scripts/test.d/26-recovery.sh).
static ABORT_TEST_DESTROYED: AtomicUsize = AtomicUsize::new(0);
static ABORT_TEST_ABORTED: AtomicUsize = AtomicUsize::new(0);

unsafe extern "C" fn abortable_create(
    _ud: *mut c_void,
    _g: *const mcore_backend_group_info,
    _s: *const mcore_backend_store,
    out: *mut *mut c_void,
) -> i32 {
    unsafe { *out = Box::into_raw(Box::new(0i64)).cast() };
    0
}

unsafe extern "C" fn abortable_destroy(_ud: *mut c_void, comm: *mut c_void) -> i32 {
    drop(unsafe { Box::from_raw(comm as *mut i64) });
    ABORT_TEST_DESTROYED.fetch_add(1, Ordering::SeqCst);
    0
}

unsafe extern "C" fn abortable_abort(_ud: *mut c_void, comm: *mut c_void) -> i32 {
    drop(unsafe { Box::from_raw(comm as *mut i64) });
    ABORT_TEST_ABORTED.fetch_add(1, Ordering::SeqCst);
    0
}

#[test]
fn abort_uses_the_abort_slot_and_falls_back_to_destroy() {
    let dir = temp_dir("abort");
    let store = || -> Arc<dyn Store> { Arc::new(FileStore::new(&dir, Duration::from_secs(5)).unwrap()) };
    let mut with_abort = solo_vtable(c"abortable");
    with_abort.create_group = Some(abortable_create);
    with_abort.destroy_comm = Some(abortable_destroy);
    with_abort.abort_comm = Some(abortable_abort);
    with_abort.finalize = None;
    let mut without = with_abort;
    without.name = c"abortable-old".as_ptr();
    without.abort_comm = None;
    // An older plugin whose struct_size ends at `flags` never has its (garbage) slot read.
    let mut older = with_abort;
    older.name = c"abortable-older".as_ptr();
    older.struct_size = std::mem::offset_of!(mcore_backend_v1, abort_comm) as u32;
    for vt in [&with_abort, &without, &older] {
        assert_eq!(register(vt), mcore_status::Ok, "{}", last_error());
    }
    let g = GroupInfo::new("data_parallel/0", vec![3], 3, Duration::from_secs(5)).unwrap();
    let mut comm = backend::get("abortable").unwrap().create_group(&g, store()).unwrap();
    comm.abort().unwrap();
    assert_eq!((ABORT_TEST_ABORTED.load(Ordering::SeqCst), ABORT_TEST_DESTROYED.load(Ordering::SeqCst)), (1, 0));
    assert!(comm.raw_handle().is_null());
    assert!(comm.allreduce_sum_i64(&mut [1]).is_err(), "an aborted communicator is not used again");
    drop(comm);
    assert_eq!(ABORT_TEST_DESTROYED.load(Ordering::SeqCst), 0, "dropping an aborted communicator destroys nothing");
    for (name, destroyed) in [("abortable-old", 1), ("abortable-older", 2)] {
        let mut comm = backend::get(name).unwrap().create_group(&g, store()).unwrap();
        comm.abort().unwrap();
        assert_eq!(ABORT_TEST_DESTROYED.load(Ordering::SeqCst), destroyed, "{name}: destroy_comm instead");
        assert_eq!(ABORT_TEST_ABORTED.load(Ordering::SeqCst), 1, "{name}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

// Recovery's shrink (docs/recovery.md): the optional `shrink` slot makes a communicator without
// some ranks of another; NULL (or a vtable older than the slot) is `Unsupported`, and recovery
// then creates a new world. A Rust test double of a plugin that records what the slot was given
// (the Gloo plugin leaves the slot NULL).
struct ShrinkTestComm {
    store: *const mcore_backend_store,
}

/// (exclude, flags, group name, group ranks, group rank, timeout_ms) of the last shrink call.
type ShrinkCall = (Vec<u32>, u32, String, Vec<u32>, u32, u64);
static SHRINK_CALLS: std::sync::Mutex<Vec<ShrinkCall>> = std::sync::Mutex::new(Vec::new());

unsafe extern "C" fn shrinkable_create(
    _ud: *mut c_void,
    _g: *const mcore_backend_group_info,
    s: *const mcore_backend_store,
    out: *mut *mut c_void,
) -> i32 {
    unsafe { *out = Box::into_raw(Box::new(ShrinkTestComm { store: s })).cast() };
    0
}

unsafe extern "C" fn shrinkable_release(_ud: *mut c_void, comm: *mut c_void) -> i32 {
    drop(unsafe { Box::from_raw(comm as *mut ShrinkTestComm) });
    0
}

/// Writes `shrunk/<name>` through the communicator's store (the world's, handed on by shrink).
unsafe extern "C" fn shrinkable_allreduce(_ud: *mut c_void, comm: *mut c_void, _d: *mut i64, _n: usize) -> i32 {
    let s = unsafe { &*(*(comm as *const ShrinkTestComm)).store };
    unsafe { (s.set.unwrap())(s.ctx, c"shrunk/used".as_ptr(), b"1".as_ptr(), 1) }
}

unsafe extern "C" fn shrinkable_shrink(
    _ud: *mut c_void,
    comm: *mut c_void,
    exclude: *const u32,
    n: usize,
    flags: u32,
    g: *const mcore_backend_group_info,
    out: *mut *mut c_void,
) -> i32 {
    let g = unsafe { &*g };
    let ranks = unsafe { std::slice::from_raw_parts(g.global_ranks, g.group_size as usize) }.to_vec();
    let name = unsafe { CStr::from_ptr(g.name) }.to_string_lossy().into_owned();
    let excluded = unsafe { std::slice::from_raw_parts(exclude, n) }.to_vec();
    SHRINK_CALLS.lock().unwrap().push((excluded, flags, name, ranks, g.group_rank, g.timeout_ms));
    let store = unsafe { (*(comm as *const ShrinkTestComm)).store };
    unsafe { *out = Box::into_raw(Box::new(ShrinkTestComm { store })).cast() };
    0
}

#[test]
fn shrink_uses_the_shrink_slot_and_is_unsupported_without_it() {
    use mcore_init::backend::{CommErrorKind, Communicator};
    let dir = temp_dir("shrink");
    let file_store = Arc::new(FileStore::new(&dir, Duration::from_secs(5)).unwrap());
    let mut vt = solo_vtable(c"shrinkable");
    vt.create_group = None;
    vt.create_world = Some(shrinkable_create);
    vt.split = Some(solo_split_unused);
    vt.allreduce_sum_i64 = Some(shrinkable_allreduce);
    vt.destroy_comm = Some(shrinkable_release);
    vt.abort_comm = Some(shrinkable_release);
    vt.shrink = Some(shrinkable_shrink);
    vt.finalize = None;
    let mut without = vt;
    without.name = c"shrinkable-null".as_ptr();
    without.shrink = None;
    // An older plugin whose struct_size ends at `abort_comm` never has its slot read.
    let mut older = vt;
    older.name = c"shrinkable-older".as_ptr();
    older.struct_size = std::mem::offset_of!(mcore_backend_v1, shrink) as u32;
    for v in [&vt, &without, &older] {
        assert_eq!(register(v), mcore_status::Ok, "{}", last_error());
    }
    let t = Duration::from_secs(7);
    let world = |rank: u32| GroupInfo::new("world", vec![0, 1, 2, 3, 4, 5], rank, t).unwrap();
    // Rank 4 of 6 without ranks 1 and 3 (given unordered, with a repeat): rank 2 of 4.
    let b = backend::get("shrinkable").unwrap();
    let mut parent = b.create_world(&world(4), file_store.clone()).unwrap();
    let mut shrunk = parent.shrink(&[3, 1, 3], true, t).unwrap();
    assert_eq!((shrunk.rank(), shrunk.size(), shrunk.group_name()), (2, 4, "world"));
    let call = SHRINK_CALLS.lock().unwrap().pop().unwrap();
    assert_eq!(call, (vec![1, 3], MCORE_BACKEND_SHRINK_ABORT_PARENT, "world".into(), vec![0, 1, 2, 3], 2, 7000));
    // The parent is aborted; the world's store went over to the shrunk communicator.
    parent.abort().unwrap();
    shrunk.allreduce_sum_i64(&mut [1]).unwrap();
    assert_eq!(file_store.get("shrunk/used").unwrap(), b"1");
    drop(shrunk);
    // Without the abort flag; the seam's trait method says the same.
    let mut parent: Box<dyn Communicator> = Box::new(b.create_world(&world(0), file_store.clone()).unwrap());
    let shrunk = parent.shrink(&[5], &Default::default(), false, t).unwrap();
    let call = SHRINK_CALLS.lock().unwrap().pop().unwrap();
    assert_eq!((call.0, call.1, call.3, call.4), (vec![5], 0, vec![0, 1, 2, 3, 4], 0));
    drop((shrunk, parent));
    // Bad exclusions are named and never reach the slot.
    let mut parent = b.create_world(&world(2), file_store.clone()).unwrap();
    for (bad, says) in [(vec![2], "this rank"), (vec![6], "not a rank of the group")] {
        let e = parent.shrink(&bad, true, t).unwrap_err();
        assert!(matches!(e, BackendError::InvalidArgument(_)) && e.to_string().contains(says), "{e}");
    }
    assert!(SHRINK_CALLS.lock().unwrap().is_empty());
    drop(parent);
    // NULL slot, or a vtable older than it: Unsupported (recovery's cue to create a new world).
    for name in ["shrinkable-null", "shrinkable-older"] {
        let mut parent: Box<dyn Communicator> =
            Box::new(backend::get(name).unwrap().create_world(&world(0), file_store.clone()).unwrap());
        let Err(e) = parent.shrink(&[1], &Default::default(), true, t) else { panic!("{name}: shrunk") };
        assert_eq!(e.kind, CommErrorKind::Unsupported, "{name}: {e}");
        assert!(e.message.contains("shrink"), "{name}: {e}");
    }
    assert!(SHRINK_CALLS.lock().unwrap().is_empty());
    for name in ["shrinkable", "shrinkable-null", "shrinkable-older"] {
        backend::unregister(name).unwrap();
    }
    let _ = std::fs::remove_dir_all(&dir);
}

unsafe extern "C" fn solo_split_unused(
    _ud: *mut c_void,
    _p: *mut c_void,
    _c: i32,
    _k: i32,
    _g: *const mcore_backend_group_info,
    _out: *mut *mut c_void,
) -> i32 {
    mcore_status::Unsupported as i32
}

// The optional `interrupt` slot (a peer failed while communicators are created or verified):
// the library's call reaches it with the flag, and a plugin built before the slot (struct_size
// ending at `mem_stat`) never has it read. A Rust test double with counters; the Gloo plugin's
// interrupt ends real waits in scripts/test.d/27-faults.sh.
static INTERRUPTS_ON: AtomicUsize = AtomicUsize::new(0);
static INTERRUPTS_OFF: AtomicUsize = AtomicUsize::new(0);

unsafe extern "C" fn counting_interrupt(_ud: *mut c_void, on: bool) {
    if on { &INTERRUPTS_ON } else { &INTERRUPTS_OFF }.fetch_add(1, Ordering::SeqCst);
}

#[test]
fn interrupt_reaches_the_slot_and_an_older_vtable_has_none() {
    let mut with = solo_vtable(c"interruptible");
    with.interrupt = Some(counting_interrupt);
    with.finalize = None;
    let mut older = with;
    older.name = c"interruptible-older".as_ptr();
    older.struct_size = std::mem::offset_of!(mcore_backend_v1, interrupt) as u32;
    assert!(MCORE_BACKEND_V1_RELEASES.contains(&older.struct_size), "the release before the slot is accepted");
    for vt in [&with, &older] {
        assert_eq!(register(vt), mcore_status::Ok, "{}", last_error());
    }
    let b = backend::get("interruptible").unwrap();
    b.interrupt(true);
    b.interrupt(false);
    b.interrupt(false);
    assert_eq!((INTERRUPTS_ON.load(Ordering::SeqCst), INTERRUPTS_OFF.load(Ordering::SeqCst)), (1, 2));
    backend::get("interruptible-older").unwrap().interrupt(true);
    assert_eq!(INTERRUPTS_ON.load(Ordering::SeqCst), 1, "an older vtable's bytes past its size are not a slot");
    for name in ["interruptible", "interruptible-older"] {
        backend::unregister(name).unwrap();
    }
}
