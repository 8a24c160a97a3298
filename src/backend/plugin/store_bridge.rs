//! The library side of `mcore_backend_store`: C callbacks over an `Arc<dyn Store>`. No panic
//! crosses back into the plugin; failures return a status and leave a message for
//! `error_message`.

use crate::abi::backend::mcore_backend_store;
use crate::abi::mcore_status;
use crate::store::{Store, StoreError};
use std::collections::HashSet;
use std::ffi::{c_char, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

/// The keys of a `multi_get` and their values.
type PendingValues = (Vec<String>, Vec<Vec<u8>>);

/// One store lent to a plugin: for the duration of a `create_group` call, or, for
/// `create_world`, until the world communicator is destroyed (`RawComm` owns it then). Boxed so
/// `ctx` stays put.
pub(crate) struct StoreBridge {
    store: Arc<dyn Store>,
    last_error: Mutex<CString>,
    /// Values of a `multi_get` whose buffer was too small, for the caller's second call.
    pending: Mutex<Option<PendingValues>>,
    /// Keys a `wait` through this bridge has seen. The callbacks delete nothing, so a `get` or
    /// `multi_get` of them reads at once ([`Store::multi_get_existing`]) instead of waiting again:
    /// a plugin's "wait for every peer, then fetch them" is one wait and one read.
    seen: Mutex<HashSet<String>>,
    c: mcore_backend_store,
}

impl StoreBridge {
    pub(crate) fn new(store: Arc<dyn Store>) -> Box<StoreBridge> {
        let mut b = Box::new(StoreBridge {
            store,
            last_error: Mutex::new(CString::default()),
            pending: Mutex::new(None),
            seen: Mutex::default(),
            c: mcore_backend_store {
                struct_size: std::mem::size_of::<mcore_backend_store>() as u32,
                ctx: std::ptr::null_mut(),
                set: Some(bridge_set),
                get: Some(bridge_get),
                wait: Some(bridge_wait),
                add: Some(bridge_add),
                error_message: Some(bridge_error_message),
                multi_get: Some(bridge_multi_get),
            },
        });
        b.c.ctx = &*b as *const StoreBridge as *mut c_void;
        b
    }

    /// The values of `keys`: read at once when a wait through this bridge has seen them all,
    /// else waiting for them (the store timeout), as `get` does.
    fn read(&self, keys: &[&str]) -> Result<Vec<Vec<u8>>, StoreError> {
        let seen = self.seen.lock().is_ok_and(|s| keys.iter().all(|k| s.contains(*k)));
        if seen {
            self.store.multi_get_existing(keys)
        } else {
            self.store.multi_get(keys)
        }
    }

    /// The C view, valid while `self` lives.
    pub(crate) fn as_c(&self) -> *const mcore_backend_store {
        &self.c
    }

    /// The message of the last failed callback ("" if none).
    pub(crate) fn last_error(&self) -> String {
        self.last_error.lock().map(|m| m.to_string_lossy().into_owned()).unwrap_or_default()
    }

    /// Forget the last failure (before a new call whose failure alone should be reported).
    pub(crate) fn clear_error(&self) {
        if let Ok(mut slot) = self.last_error.lock() {
            *slot = CString::default();
        }
    }

    fn fail(&self, status: mcore_status, message: String) -> i32 {
        if let Ok(mut slot) = self.last_error.lock() {
            *slot = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
        }
        status as i32
    }
}

/// Run one callback body against the bridge behind `ctx`, turning errors and panics into codes.
unsafe fn with_bridge(ctx: *mut c_void, body: impl FnOnce(&StoreBridge) -> Result<(), (mcore_status, String)>) -> i32 {
    if ctx.is_null() {
        return mcore_status::InvalidArgument as i32;
    }
    // SAFETY: `ctx` is the pointer `StoreBridge::new` stored; the bridge outlives every call
    // during which the plugin may call back (the create call; for a world communicator, until
    // its `destroy_comm` returned).
    let bridge = unsafe { &*(ctx as *const StoreBridge) };
    match catch_unwind(AssertUnwindSafe(|| body(bridge))) {
        Ok(Ok(())) => mcore_status::Ok as i32,
        Ok(Err((status, message))) => bridge.fail(status, message),
        Err(_) => bridge.fail(mcore_status::Panic, "internal panic in a store callback (bug)".into()),
    }
}

fn from_store(e: StoreError) -> (mcore_status, String) {
    (store_error_status(&e), e.to_string())
}

/// The status a store failure has in the plugin ABI's store callbacks. The C API reports store
/// failures with the same statuses: the C layer's status map (src/ffi/status_map.rs) calls this
/// for `StoreError`.
pub fn store_error_status(e: &StoreError) -> mcore_status {
    match e {
        StoreError::Timeout { .. } => mcore_status::Timeout,
        StoreError::Io(_) => mcore_status::Io,
        StoreError::Protocol(_) => mcore_status::Protocol,
        StoreError::InvalidArgument(_) => mcore_status::InvalidArgument,
        StoreError::Closed(_) => mcore_status::PeerFailed,
        // Another job's store (or one going away): the configuration's concern.
        StoreError::Locked { .. } => mcore_status::ConfigMismatch,
    }
}

/// A NUL-terminated UTF-8 key, named in the error when it is not one.
unsafe fn key_arg<'a>(key: *const c_char, what: &str) -> Result<&'a str, (mcore_status, String)> {
    if key.is_null() {
        return Err((mcore_status::InvalidArgument, format!("store {what}: key is NULL")));
    }
    // SAFETY: the plugin passes a NUL-terminated string (the callback contract).
    unsafe { CStr::from_ptr(key) }
        .to_str()
        .map_err(|_| (mcore_status::InvalidArgument, format!("store {what}: key is not UTF-8")))
}

unsafe extern "C" fn bridge_set(ctx: *mut c_void, key: *const c_char, value: *const u8, len: usize) -> i32 {
    unsafe {
        with_bridge(ctx, |b| {
            let key = key_arg(key, "set")?;
            let value: &[u8] = if len == 0 {
                &[]
            } else if value.is_null() {
                return Err((mcore_status::InvalidArgument, format!("store set '{key}': value is NULL, len {len}")));
            } else {
                // SAFETY: the plugin passes `len` readable bytes at `value`.
                std::slice::from_raw_parts(value, len)
            };
            b.store.set(key, value).map_err(from_store)
        })
    }
}

unsafe extern "C" fn bridge_get(
    ctx: *mut c_void,
    key: *const c_char,
    buf: *mut u8,
    buf_len: usize,
    out_len: *mut usize,
) -> i32 {
    unsafe {
        with_bridge(ctx, |b| {
            let key = key_arg(key, "get")?;
            if out_len.is_null() {
                return Err((mcore_status::InvalidArgument, format!("store get '{key}': out_len is NULL")));
            }
            if buf.is_null() && buf_len != 0 {
                return Err((
                    mcore_status::InvalidArgument,
                    format!("store get '{key}': buf is NULL, buf_len {buf_len}"),
                ));
            }
            let value = b.read(&[key]).map_err(from_store)?.pop().unwrap_or_default();
            *out_len = value.len();
            if value.len() > buf_len {
                return Err((
                    mcore_status::BufferTooSmall,
                    format!("store get '{key}': value has {} bytes, buffer {buf_len}", value.len()),
                ));
            }
            if !value.is_empty() {
                // SAFETY: `buf` has `buf_len >= value.len()` writable bytes (checked above).
                std::ptr::copy_nonoverlapping(value.as_ptr(), buf, value.len());
            }
            Ok(())
        })
    }
}

unsafe extern "C" fn bridge_wait(ctx: *mut c_void, keys: *const *const c_char, n: usize, timeout_ms: u64) -> i32 {
    unsafe {
        with_bridge(ctx, |b| {
            if keys.is_null() && n != 0 {
                return Err((mcore_status::InvalidArgument, format!("store wait: keys is NULL, n {n}")));
            }
            let mut owned = Vec::with_capacity(n);
            for i in 0..n {
                // SAFETY: `keys` has `n` entries (the callback contract).
                owned.push(key_arg(*keys.add(i), "wait")?);
            }
            let timeout = if timeout_ms == 0 { b.store.timeout() } else { crate::timeout::from_millis(timeout_ms) };
            b.store.wait(&owned, timeout).map_err(|e| from_store(only_missing(b.store.as_ref(), &owned, e)))?;
            if let Ok(mut seen) = b.seen.lock() {
                seen.extend(owned.iter().map(|k| k.to_string()));
            }
            Ok(())
        })
    }
}

/// A wait's timeout names only the keys still missing (the plugin maps them to ranks), not
/// every key it waited for.
fn only_missing(store: &dyn Store, keys: &[&str], e: StoreError) -> StoreError {
    match e {
        StoreError::Timeout { waited, .. } => {
            let missing =
                keys.iter().filter(|k| !store.check(&[**k]).unwrap_or(false)).map(|k| k.to_string()).collect();
            StoreError::Timeout { keys: missing, waited }
        }
        other => other,
    }
}

unsafe extern "C" fn bridge_multi_get(
    ctx: *mut c_void,
    keys: *const *const c_char,
    n: usize,
    buf: *mut u8,
    buf_len: usize,
    lens: *mut usize,
) -> i32 {
    unsafe {
        with_bridge(ctx, |b| {
            if (keys.is_null() || lens.is_null()) && n != 0 {
                return Err((mcore_status::InvalidArgument, format!("store multi_get: keys or lens is NULL, n {n}")));
            }
            let mut owned: Vec<String> = Vec::with_capacity(n);
            for i in 0..n {
                // SAFETY: `keys` has `n` entries (the callback contract).
                owned.push(key_arg(*keys.add(i), "multi_get")?.to_string());
            }
            let cached = b.pending.lock().ok().and_then(|mut p| p.take()).filter(|(k, _)| *k == owned);
            let values = match cached {
                Some((_, v)) => v,
                None => {
                    let refs: Vec<&str> = owned.iter().map(String::as_str).collect();
                    b.read(&refs).map_err(|e| from_store(only_missing(b.store.as_ref(), &refs, e)))?
                }
            };
            let total: usize = values.iter().map(Vec::len).sum();
            // SAFETY: `lens` has `n` writable entries (the callback contract).
            let lens = std::slice::from_raw_parts_mut(lens, n);
            for (l, v) in lens.iter_mut().zip(&values) {
                *l = v.len();
            }
            if total > buf_len || (buf.is_null() && total > 0) {
                if let Ok(mut p) = b.pending.lock() {
                    *p = Some((owned, values));
                }
                return Err((
                    mcore_status::BufferTooSmall,
                    format!("store multi_get: values have {total} bytes, buffer {buf_len}"),
                ));
            }
            let mut at = 0;
            for v in &values {
                // SAFETY: `buf` has `buf_len >= total` writable bytes (checked above).
                std::ptr::copy_nonoverlapping(v.as_ptr(), buf.add(at), v.len());
                at += v.len();
            }
            Ok(())
        })
    }
}

unsafe extern "C" fn bridge_add(ctx: *mut c_void, key: *const c_char, delta: i64, out: *mut i64) -> i32 {
    unsafe {
        with_bridge(ctx, |b| {
            let key = key_arg(key, "add")?;
            if out.is_null() {
                return Err((mcore_status::InvalidArgument, format!("store add '{key}': out is NULL")));
            }
            *out = b.store.add(key, delta).map_err(from_store)?;
            Ok(())
        })
    }
}

unsafe extern "C" fn bridge_error_message(ctx: *mut c_void) -> *const c_char {
    if ctx.is_null() {
        return c"store context is NULL".as_ptr();
    }
    // SAFETY: as in `with_bridge`.
    let bridge = unsafe { &*(ctx as *const StoreBridge) };
    // The CString's heap buffer stays put until the next failure replaces it.
    bridge.last_error.lock().map(|m| m.as_ptr()).unwrap_or(c"store error message unavailable".as_ptr())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::FileStore;
    use std::time::Duration;

    #[test]
    fn callbacks_round_trip_and_report_errors() {
        let dir = std::env::temp_dir().join(format!("mcore-bridge-{}", std::process::id()));
        let store: Arc<dyn Store> = Arc::new(FileStore::new(&dir, Duration::from_millis(100)).unwrap());
        let bridge = StoreBridge::new(store);
        let c = unsafe { &*bridge.as_c() };
        unsafe {
            assert_eq!((c.set.unwrap())(c.ctx, c"k".as_ptr(), b"hello".as_ptr(), 5), 0);
            let mut len = 0usize;
            let rc = (c.get.unwrap())(c.ctx, c"k".as_ptr(), std::ptr::null_mut(), 0, &mut len);
            assert_eq!(rc, mcore_status::BufferTooSmall as i32);
            assert_eq!(len, 5);
            let mut buf = vec![0u8; len];
            assert_eq!((c.get.unwrap())(c.ctx, c"k".as_ptr(), buf.as_mut_ptr(), buf.len(), &mut len), 0);
            assert_eq!(&buf, b"hello");
            let mut v = 0i64;
            assert_eq!((c.add.unwrap())(c.ctx, c"n".as_ptr(), 3, &mut v), 0);
            assert_eq!(v, 3);
            let keys = [c"k".as_ptr(), c"missing/7".as_ptr()];
            assert_eq!((c.wait.unwrap())(c.ctx, keys.as_ptr(), 2, 20), mcore_status::Timeout as i32);
            let msg = CStr::from_ptr((c.error_message.unwrap())(c.ctx)).to_str().unwrap().to_string();
            assert!(msg.contains("'missing/7'") && !msg.contains("'k'"), "{msg}");
            assert_eq!(
                (c.set.unwrap())(c.ctx, std::ptr::null(), b"x".as_ptr(), 1),
                mcore_status::InvalidArgument as i32
            );
            assert!(bridge.last_error().contains("key is NULL"));
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
