//! The one handle discipline of the C API: an opaque handle (`mcore_topology *`, `mcore_store *`,
//! `mcore_rng_tracker *`, `mcore_group *`, `mcore_recovery_plan *`) is the address of an
//! `Arc` of its Rust struct, registered in one table of live handles. [`into_raw`] hands one
//! out, [`borrow`] looks one up (NULL is INVALID_ARGUMENT naming the argument), [`destroy`]
//! takes one out of the table. Nothing else casts a handle.
//!
//! A handle is never dereferenced: [`borrow`] finds it in the table and returns its own `Arc`,
//! so that a call that is running on a handle keeps the object alive while another thread
//! destroys the handle (issue 34.4: `mcore_group_wait` in one thread and `mcore_group_destroy` in
//! another used to free the group under the waiting call). The object goes when the destroy
//! and the last call that was running on it are both done. A handle that was destroyed already
//! (or was never one of this type) is INVALID_ARGUMENT, not undefined behaviour, as long as its
//! address was not handed out again.

use super::args::null;
use super::error::FfiError;
use crate::lock::Unpoisoned;
use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

type Live = HashMap<usize, Arc<dyn Any + Send + Sync>>;

/// The live handles, by address.
fn live() -> MutexGuard<'static, Live> {
    static LIVE: OnceLock<Mutex<Live>> = OnceLock::new();
    LIVE.get_or_init(Default::default).locked()
}

/// Hand `value` out as a handle; the caller frees it with the matching `*_destroy`.
pub(crate) fn into_raw<T: Send + Sync + 'static>(value: T) -> *mut T {
    let object = Arc::new(value);
    let p = Arc::as_ptr(&object).cast_mut();
    live().insert(p as usize, object);
    p
}

/// The object behind handle `p`, named `what` in the error when NULL, destroyed or not a handle
/// of this type. The `Arc` keeps it alive for the caller even if the handle is destroyed meanwhile.
///
/// # Safety
/// None needed: `p` is looked up, never dereferenced (kept `unsafe` as the entry points'
/// contract on handles is).
pub(crate) unsafe fn borrow<T: Send + Sync + 'static>(p: *const T, what: &str) -> Result<Arc<T>, FfiError> {
    if p.is_null() {
        return Err(null(what));
    }
    let found = live().get(&(p as usize)).cloned();
    found.and_then(|o| o.downcast::<T>().ok()).ok_or_else(|| {
        FfiError::invalid_arg(format!(
            "{what} is not a live handle (it was destroyed, or never came from this library's create call)"
        ))
    })
}

/// Take handle `p` out of the table (NULL, or a handle destroyed already, is a no-op): the
/// object, for the caller to end what runs on it; it is freed once that `Arc` and every call
/// still running on it are gone.
///
/// # Safety
/// None needed, as for [`borrow`].
pub(crate) unsafe fn destroy<T: Send + Sync + 'static>(p: *mut T) -> Option<Arc<T>> {
    if p.is_null() {
        return None;
    }
    let mut table = live();
    let is_t = table.get(&(p as usize)).is_some_and(|o| o.is::<T>());
    let object = if is_t { table.remove(&(p as usize)) } else { None };
    drop(table);
    object.and_then(|o| o.downcast::<T>().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handle_outlives_its_destroy_while_a_call_holds_it_and_is_refused_after() {
        #[derive(Debug)]
        struct Probe(#[allow(dead_code)] Arc<()>);
        let alive = Arc::new(());
        let h = into_raw(Probe(alive.clone()));
        // SAFETY (each): any pointer value is fine.
        let held = unsafe { borrow(h, "probe") }.unwrap();
        assert!(unsafe { destroy(h) }.is_some());
        assert_eq!(Arc::strong_count(&alive), 2, "freed under a running call");
        drop(held);
        assert_eq!(Arc::strong_count(&alive), 1, "not freed after the last call");
        let e = unsafe { borrow(h, "probe") }.unwrap_err();
        assert!(e.message.contains("probe is not a live handle"), "{}", e.message);
        assert!(unsafe { destroy(h) }.is_none(), "a second destroy is a no-op");
        // Another type at a live address is refused too.
        let other = into_raw(7u64);
        assert!(unsafe { borrow(other.cast::<Probe>(), "probe") }.is_err());
        assert!(unsafe { destroy(other.cast::<Probe>()) }.is_none());
        assert_eq!(unsafe { destroy(other) }.as_deref(), Some(&7));
    }
}
