//! A validated copy of a backend's vtable and safe calls into its slots. Each call converts the
//! plugin's `int32_t` status with `mcore_status::from_code` (never trusting it as the enum) and
//! fetches the plugin's `last_error` (or the store's message) for the error.

use super::store_bridge::StoreBridge;
use crate::abi::backend::{
    mcore_backend_group_info, mcore_backend_v1, MCORE_BACKEND_ABI_VERSION_V1, MCORE_BACKEND_SHRINK_ABORT_PARENT,
    MCORE_BACKEND_V1_RELEASES,
};
use crate::abi::{mcore_status, read_sized};
use crate::backend::{BackendError, GroupInfo};
use crate::store::Store;
use std::ffi::{c_void, CStr, CString};
use std::mem::size_of;
use std::sync::Arc;

/// A backend's vtable, copied and checked at registration. Calls `finalize` when dropped.
pub struct Vtable {
    raw: mcore_backend_v1,
    name: String,
    /// Our copy of the name; `raw.name` points here, never at the registrant's memory.
    _c_name: CString,
}

// SAFETY: the plugin contract (docs/backends.md) requires slots callable from any thread and
// `user_data` usable from any thread; one communicator is used by one thread at a time (`RawComm`
// is `Send` but not `Sync`).
unsafe impl Send for Vtable {}
unsafe impl Sync for Vtable {}

/// A communicator handle returned by a backend. `Send`, not `Sync`: one thread at a time.
///
/// A world communicator (`create_world`) also owns the store bridge it was created with: the
/// plugin may keep the `mcore_backend_store` pointer to rendezvous its splits, so the bridge is
/// dropped only after [`Vtable::destroy_comm`] returned. The bridge is boxed, so the pointer the
/// plugin holds stays put while the handle moves.
pub struct RawComm {
    ptr: *mut c_void,
    store: Option<Box<StoreBridge>>,
}

// SAFETY: see `Vtable`; a communicator may move between threads but is not shared. The bridge
// is `Send + Sync` in substance (an `Arc<dyn Store>`, whose trait requires both, and mutexes);
// only the raw `ctx` pointer inside its C view stops the auto trait.
unsafe impl Send for RawComm {}

impl std::fmt::Debug for RawComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawComm").field("ptr", &self.ptr).field("keeps_store", &self.store.is_some()).finish()
    }
}

impl RawComm {
    /// The backend's own handle (a Gloo context, an `ncclComm_t`, ...), for C API users.
    pub fn as_ptr(&self) -> *mut c_void {
        self.ptr
    }
}

/// The C view of a [`GroupInfo`], with the storage its pointers point into.
struct CGroup {
    _name: CString,
    _host_addr: Option<CString>,
    _options: Option<CString>,
    c: mcore_backend_group_info,
}

impl CGroup {
    fn new(g: &GroupInfo) -> Result<Self, BackendError> {
        let name = CString::new(g.name.as_str())
            .map_err(|_| BackendError::InvalidArgument(format!("group name {:?} contains NUL", g.name)))?;
        let host_addr = match &g.host_addr {
            Some(a) => Some(
                CString::new(a.as_str())
                    .map_err(|_| BackendError::InvalidArgument(format!("host address {a:?} contains NUL")))?,
            ),
            None => None,
        };
        let options = match &g.options {
            Some(o) => Some(CString::new(o.as_str()).map_err(|_| {
                BackendError::InvalidArgument(format!("group '{}': communicator options contain NUL", g.name))
            })?),
            None => None,
        };
        let c = mcore_backend_group_info {
            struct_size: size_of::<mcore_backend_group_info>() as u32,
            group_rank: g.group_rank,
            group_size: g.size(),
            global_rank: g.global_rank,
            name: name.as_ptr(),
            global_ranks: g.global_ranks.as_ptr(),
            timeout_ms: g.timeout.as_millis().min(u64::MAX as u128) as u64,
            host_addr: host_addr.as_ref().map_or(std::ptr::null(), |a| a.as_ptr()),
            device: g.device.and_then(|d| i32::try_from(d).ok()).unwrap_or(-1),
            options: options.as_ref().map_or(std::ptr::null(), |o| o.as_ptr()),
        };
        Ok(CGroup { _name: name, _host_addr: host_addr, _options: options, c })
    }
}

impl Vtable {
    /// Validate and copy the vtable at `ptr`; `origin` names where it came from for messages.
    ///
    /// # Safety
    /// `ptr` is NULL or points to at least `struct_size` readable bytes laid out as
    /// `mcore_backend_v1` (its first 8 bytes at least), with `name` NULL or NUL-terminated.
    pub unsafe fn from_ptr(ptr: *const mcore_backend_v1, origin: &str) -> Result<Vtable, BackendError> {
        if ptr.is_null() {
            return Err(BackendError::InvalidVtable(format!("{origin}: the backend vtable pointer is NULL")));
        }
        // SAFETY: the caller guarantees the two leading u32 fields are readable.
        let abi_version = unsafe { (*ptr).abi_version };
        if abi_version != MCORE_BACKEND_ABI_VERSION_V1 {
            return Err(BackendError::Abi(format!(
                "{origin}: backend vtable has abi_version {abi_version}; this library speaks mcore_backend_v1 \
                 (abi_version {MCORE_BACKEND_ABI_VERSION_V1}); rebuild the backend against this mcore_init.h"
            )));
        }
        // SAFETY: an all-zero `mcore_backend_v1` is valid (NULL pointers, `None` slots).
        let zeroed = unsafe { std::mem::MaybeUninit::<mcore_backend_v1>::zeroed().assume_init() };
        // SAFETY: `struct_size` readable bytes at `ptr` (caller); slots an older vtable lacks stay NULL.
        let raw = unsafe { read_sized(ptr, "mcore_backend_v1", MCORE_BACKEND_V1_RELEASES, zeroed) }
            .map_err(|error| BackendError::StructSize { origin: origin.to_string(), error })?;
        if raw.name.is_null() {
            return Err(BackendError::InvalidVtable(format!("{origin}: backend vtable has a NULL name")));
        }
        // SAFETY: non-NULL `name` is NUL-terminated (caller).
        let name = match unsafe { CStr::from_ptr(raw.name) }.to_str() {
            Ok(s) if !s.is_empty() => s.to_string(),
            _ => return Err(BackendError::InvalidVtable(format!("{origin}: backend name must be non-empty UTF-8"))),
        };
        if raw.create_group.is_none() && (raw.create_world.is_none() || raw.split.is_none()) {
            return Err(BackendError::InvalidVtable(format!(
                "{origin}: backend '{name}' offers no creation strategy (needs create_group, or create_world and split)"
            )));
        }
        if raw.destroy_comm.is_none() {
            return Err(BackendError::InvalidVtable(format!("{origin}: backend '{name}' has no destroy_comm slot")));
        }
        let c_name = CString::new(name.as_str()).expect("from a C string: no interior NUL");
        let mut raw = raw;
        raw.name = c_name.as_ptr();
        Ok(Vtable { raw, name, _c_name: c_name })
    }

    /// Drop this copy without calling `finalize` (a rejected duplicate registration).
    pub fn disarm(mut self) {
        self.raw.finalize = None;
    }

    /// The backend's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the per-group strategy (`create_group`) is available.
    pub fn has_create_group(&self) -> bool {
        self.raw.create_group.is_some()
    }

    /// Whether the split strategy (`create_world` + `split`) is available.
    pub fn has_split(&self) -> bool {
        self.raw.create_world.is_some() && self.raw.split.is_some()
    }

    /// Whether the backend asks for the per-group strategy under `auto`.
    pub fn prefers_per_group(&self) -> bool {
        self.raw.flags & crate::abi::backend::MCORE_BACKEND_FLAG_PREFER_PER_GROUP != 0
    }

    /// Whether `create_group` may run on several threads at once (`MCORE_BACKEND_FLAG_CONCURRENT_CREATE`).
    pub fn creates_concurrently(&self) -> bool {
        self.raw.flags & crate::abi::backend::MCORE_BACKEND_FLAG_CONCURRENT_CREATE != 0
    }

    /// Whether it reads the options of `mcore_backend_group_info` (`MCORE_BACKEND_FLAG_TAKES_OPTIONS`).
    pub fn takes_options(&self) -> bool {
        self.raw.flags & crate::abi::backend::MCORE_BACKEND_FLAG_TAKES_OPTIONS != 0
    }

    /// Whether it reads the device of `mcore_backend_group_info` (`MCORE_BACKEND_FLAG_TAKES_DEVICE`).
    pub fn takes_device(&self) -> bool {
        self.raw.flags & crate::abi::backend::MCORE_BACKEND_FLAG_TAKES_DEVICE != 0
    }

    /// Whether it verifies communicators (`allreduce_sum_i64`).
    pub fn has_allreduce(&self) -> bool {
        self.raw.allreduce_sum_i64.is_some()
    }

    /// The backend's `interrupt` slot: end (`on`) the calls in flight, and fail new ones, until
    /// turned off. Nothing without the slot.
    pub fn interrupt(&self, on: bool) {
        if let Some(f) = self.raw.interrupt {
            // SAFETY: the slot may be called from any thread while other slots run (its contract).
            unsafe { f(self.raw.user_data, on) };
        }
    }

    fn unsupported(&self, op: &'static str) -> BackendError {
        BackendError::Unsupported { backend: self.name.clone(), op }
    }

    /// Turn a returned code into a result, with the plugin's (or the store's) message.
    fn check(
        &self,
        code: i32,
        op: &'static str,
        group: &str,
        bridge: Option<&StoreBridge>,
    ) -> Result<(), BackendError> {
        let status = match mcore_status::from_code(code) {
            Some(mcore_status::Ok) => return Ok(()),
            Some(s) => s,
            None => mcore_status::Backend,
        };
        let mut message = self.plugin_message();
        if let Some(store_msg) = bridge.map(|b| b.last_error()).filter(|m| !m.is_empty()) {
            if !message.contains(&store_msg) {
                message = if message.is_empty() { store_msg } else { format!("{message} (store: {store_msg})") };
            }
        }
        if message.is_empty() {
            message = format!("status code {code}, no message from the backend");
        } else if mcore_status::from_code(code).is_none() {
            message = format!("{message} (unknown status code {code})");
        }
        Err(BackendError::Plugin { backend: self.name.clone(), op, group: group.to_string(), status, message })
    }

    /// A slot that reported success without handing out the communicator it was to create.
    fn no_communicator(&self, op: &'static str, group: &str) -> BackendError {
        BackendError::Plugin {
            backend: self.name.clone(),
            op,
            group: group.to_string(),
            status: mcore_status::Backend,
            message: "returned success but no communicator".into(),
        }
    }

    fn plugin_message(&self) -> String {
        let Some(f) = self.raw.last_error else {
            return String::new();
        };
        // SAFETY: slot contract: returns NULL or a NUL-terminated string valid until the next call.
        let p = unsafe { f(self.raw.user_data) };
        if p.is_null() {
            String::new()
        } else {
            // SAFETY: as above.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    }

    /// `keep_store`: the communicator keeps the bridge until it is destroyed (`create_world`);
    /// otherwise the bridge is valid only during the call (`create_group`).
    fn create_with(
        &self,
        slot: crate::abi::backend::mcore_backend_create_fn,
        op: &'static str,
        group: &GroupInfo,
        store: Arc<dyn Store>,
        keep_store: bool,
    ) -> Result<RawComm, BackendError> {
        let f = slot.ok_or_else(|| self.unsupported(op))?;
        let cg = CGroup::new(group)?;
        let bridge = StoreBridge::new(store);
        let mut out: *mut c_void = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the call; the bridge outlives it.
        let code = unsafe { f(self.raw.user_data, &cg.c, bridge.as_c(), &mut out) };
        self.check(code, op, &group.name, Some(&bridge))?;
        if out.is_null() {
            return Err(self.no_communicator(op, &group.name));
        }
        Ok(RawComm { ptr: out, store: keep_store.then_some(bridge) })
    }

    /// Per-group strategy: this rank's communicator for `group`, rendezvous through `store`
    /// (a key space private to the group).
    pub fn create_group(&self, group: &GroupInfo, store: Arc<dyn Store>) -> Result<RawComm, BackendError> {
        self.create_with(self.raw.create_group, "create_group", group, store, false)
    }

    /// Split strategy, step one: the world communicator. It keeps `store` (lent to the plugin)
    /// until it is destroyed, so the backend may rendezvous its splits through it.
    pub fn create_world(&self, world: &GroupInfo, store: Arc<dyn Store>) -> Result<RawComm, BackendError> {
        self.create_with(self.raw.create_world, "create_world", world, store, true)
    }

    /// Split strategy: collective over `parent`'s ranks. `group` None = this rank joins no group
    /// (color -1); otherwise `color` selects the group, ordered by `key`.
    pub fn split(
        &self,
        parent: &RawComm,
        parent_name: &str,
        color: u32,
        key: i32,
        group: Option<&GroupInfo>,
    ) -> Result<Option<RawComm>, BackendError> {
        let f = self.raw.split.ok_or_else(|| self.unsupported("split"))?;
        let (color, cg) = match group {
            Some(g) => {
                let color = i32::try_from(color)
                    .map_err(|_| BackendError::InvalidArgument(format!("split color {color} exceeds i32")))?;
                (color, Some(CGroup::new(g)?))
            }
            None => (-1, None),
        };
        let info = cg.as_ref().map_or(std::ptr::null(), |c| &c.c as *const _);
        let mut out: *mut c_void = std::ptr::null_mut();
        // A split may rendezvous through the parent's store: report only what fails in this call.
        let bridge = parent.store.as_deref();
        if let Some(b) = bridge {
            b.clear_error();
        }
        // SAFETY: valid pointers for the call; `parent` came from this backend.
        let code = unsafe { f(self.raw.user_data, parent.ptr, color, key, info, &mut out) };
        let name = group.map_or(parent_name, |g| g.name.as_str());
        self.check(code, "split", name, bridge)?;
        Ok((!out.is_null()).then_some(RawComm { ptr: out, store: None }))
    }

    /// In-place sum over the communicator.
    pub fn allreduce_sum_i64(&self, comm: &mut RawComm, group: &str, data: &mut [i64]) -> Result<(), BackendError> {
        let f = self.raw.allreduce_sum_i64.ok_or_else(|| self.unsupported("allreduce_sum_i64"))?;
        // SAFETY: `data` is valid for `len` elements; `comm` came from this backend.
        let code = unsafe { f(self.raw.user_data, comm.ptr, data.as_mut_ptr(), data.len()) };
        self.check(code, "allreduce_sum_i64", group, None)
    }

    /// The backend's `suspend` slot (`Unsupported` when NULL).
    pub fn suspend(&self, comm: &mut RawComm, group: &str) -> Result<(), BackendError> {
        let f = self.raw.suspend.ok_or_else(|| self.unsupported("suspend"))?;
        // SAFETY: `comm` came from this backend.
        let code = unsafe { f(self.raw.user_data, comm.ptr) };
        self.check(code, "suspend", group, None)
    }

    /// The backend's `resume` slot (`Unsupported` when NULL).
    pub fn resume(&self, comm: &mut RawComm, group: &str) -> Result<(), BackendError> {
        let f = self.raw.resume.ok_or_else(|| self.unsupported("resume"))?;
        // SAFETY: `comm` came from this backend.
        let code = unsafe { f(self.raw.user_data, comm.ptr) };
        self.check(code, "resume", group, None)
    }

    /// One memory statistic (`MCORE_BACKEND_MEM_*`) through the `mem_stat` slot; `None` when NULL.
    pub fn mem_stat(&self, comm: &RawComm, group: &str, stat: i32) -> Option<Result<u64, BackendError>> {
        let f = self.raw.mem_stat?;
        let mut value = 0u64;
        // SAFETY: `comm` came from this backend; `value` is writable.
        let code = unsafe { f(self.raw.user_data, comm.ptr, stat, &mut value) };
        Some(self.check(code, "mem_stat", group, None).map(|()| value))
    }

    /// Block until every rank of the communicator arrives.
    pub fn barrier(&self, comm: &mut RawComm, group: &str) -> Result<(), BackendError> {
        let f = self.raw.barrier.ok_or_else(|| self.unsupported("barrier"))?;
        // SAFETY: `comm` came from this backend.
        let code = unsafe { f(self.raw.user_data, comm.ptr) };
        self.check(code, "barrier", group, None)
    }

    /// Release a communicator; a world communicator's store bridge goes only after the slot
    /// returned (the plugin may use the store until then).
    pub fn destroy_comm(&self, comm: RawComm, group: &str) -> Result<(), BackendError> {
        let f = self.raw.destroy_comm.ok_or_else(|| self.unsupported("destroy_comm"))?;
        let RawComm { ptr, store } = comm;
        if let Some(b) = &store {
            b.clear_error();
        }
        // SAFETY: `ptr` came from this backend and is consumed here.
        let code = unsafe { f(self.raw.user_data, ptr) };
        let result = self.check(code, "destroy_comm", group, store.as_deref());
        drop(store);
        result
    }
}

impl Vtable {
    /// Release a communicator whose peer failed: the backend's `abort_comm`, else
    /// [`Vtable::destroy_comm`].
    pub fn abort_comm(&self, comm: RawComm, group: &str) -> Result<(), BackendError> {
        let Some(f) = self.raw.abort_comm else { return self.destroy_comm(comm, group) };
        let RawComm { ptr, store } = comm;
        // SAFETY: `ptr` came from this backend and is consumed here.
        let code = unsafe { f(self.raw.user_data, ptr) };
        let result = self.check(code, "abort_comm", group, store.as_deref());
        drop(store);
        result
    }

    /// A new communicator without `exclude` (ranks of `parent`, ascending), described by
    /// `group`: the backend's `shrink`, `Unsupported` when it has none. `parent`'s store (a
    /// world's) passes to the new communicator.
    pub fn shrink(
        &self,
        parent: &mut RawComm,
        parent_name: &str,
        exclude: &[u32],
        abort_parent: bool,
        group: &GroupInfo,
    ) -> Result<RawComm, BackendError> {
        let f = self.raw.shrink.ok_or_else(|| self.unsupported("shrink"))?;
        let cg = CGroup::new(group)?;
        let flags = if abort_parent { MCORE_BACKEND_SHRINK_ABORT_PARENT } else { 0 };
        let mut out: *mut c_void = std::ptr::null_mut();
        let bridge = parent.store.as_deref();
        if let Some(b) = bridge {
            b.clear_error();
        }
        // SAFETY: valid pointers for the call (`exclude` has its length); `parent` came from
        // this backend.
        let code =
            unsafe { f(self.raw.user_data, parent.ptr, exclude.as_ptr(), exclude.len(), flags, &cg.c, &mut out) };
        self.check(code, "shrink", parent_name, bridge)?;
        if out.is_null() {
            return Err(self.no_communicator("shrink", parent_name));
        }
        Ok(RawComm { ptr: out, store: parent.store.take() })
    }
}

impl Drop for Vtable {
    fn drop(&mut self) {
        if let Some(f) = self.raw.finalize {
            // SAFETY: the last reference to this backend is gone; called exactly once.
            unsafe { f(self.raw.user_data) };
        }
    }
}
