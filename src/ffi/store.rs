//! C API of the rendezvous store: a TCP store (client, optionally with the server it hosts), a
//! prefixed view of any store, and the key-value calls.

#![allow(non_camel_case_types)]

use super::args::{out_ptr, slice_arg, slice_out, str_arg};
use super::{ffi_guard, mcore_status, FfiError};
use crate::store::{PrefixStore, Store, TcpStore, TcpStoreServer};
use std::ffi::c_char;
use std::sync::Arc;

/// A rendezvous store handle. Thread-safe: calls from several threads are serialised inside.
pub struct mcore_store {
    // Field order is drop order: the client goes before the server it may be talking to.
    store: Arc<dyn Store>,
    /// Port of the TCP server this store talks to (for `mcore_store_tcp_port`).
    tcp_port: Option<u16>,
    /// The server this handle hosts (shared with prefixed views made from it).
    server: Option<Arc<TcpStoreServer>>,
}

/// # Safety
/// `p` is NULL or a live handle.
unsafe fn handle(p: *const mcore_store) -> Result<Arc<mcore_store>, FfiError> {
    // SAFETY: live handle per the contract.
    unsafe { super::handle::borrow(p, "store") }
}

/// # Safety
/// `keys` is NULL or valid for `n` pointers, each NULL or NUL-terminated.
unsafe fn keys_arg<'a>(keys: *const *const c_char, n: usize) -> Result<Vec<&'a str>, FfiError> {
    // SAFETY: valid for n pointers per the contract.
    let ptrs = unsafe { slice_arg(keys, n, "keys") }?;
    ptrs.iter()
        .enumerate()
        // SAFETY: each NULL or NUL-terminated per the contract.
        .map(|(i, p)| unsafe { str_arg(*p, &format!("keys[{i}]")) })
        .collect()
}

/// Creates a TCP store (wire-compatible with PyTorch's `TCPStore`) on `host:port`. With
/// `is_server`, first hosts a server there (port 0: a free port, see `mcore_store_tcp_port`) and
/// connects to it; otherwise connects to an existing server, retrying until `timeout_ms`.
/// `timeout_ms` is also the store timeout of `mcore_store_get`/`mcore_store_wait` (0: 300 s).
///
/// # Safety
/// `host` is NULL or a NUL-terminated string; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_store_tcp_create(
    host: *const c_char,
    port: u16,
    is_server: bool,
    timeout_ms: u64,
    out: *mut *mut mcore_store,
) -> mcore_status {
    ffi_guard(|| {
        // SAFETY: forwarded contracts.
        let host = unsafe { str_arg(host, "host") }?;
        let out = out_ptr(out, "out")?;
        if host.is_empty() {
            return Err(FfiError::invalid_arg("host is empty"));
        }
        if !is_server && port == 0 {
            return Err(FfiError::invalid_arg("port 0 is only allowed with is_server (a free port)"));
        }
        let timeout =
            if timeout_ms == 0 { crate::store::DEFAULT_TIMEOUT } else { crate::timeout::from_millis(timeout_ms) };
        let h = if is_server {
            let (server, client) = TcpStore::host(host, port, timeout)?;
            mcore_store { store: Arc::new(client), tcp_port: Some(server.port()), server: Some(Arc::new(server)) }
        } else {
            mcore_store { store: Arc::new(TcpStore::connect(host, port, timeout)?), tcp_port: Some(port), server: None }
        };
        *out = super::handle::into_raw(h);
        Ok(())
    })
}

/// The port of the TCP server a store (or a prefixed view of one) talks to.
///
/// # Safety
/// `store` is NULL or a live handle; `out_port` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_store_tcp_port(store: *const mcore_store, out_port: *mut u16) -> mcore_status {
    ffi_guard(|| {
        // SAFETY: forwarded contracts.
        let h = unsafe { handle(store) }?;
        let out = out_ptr(out_port, "out_port")?;
        *out = h.tcp_port.ok_or_else(|| FfiError::invalid_arg("store is not a TCP store"))?;
        Ok(())
    })
}

/// Creates a view of `base` whose keys live under `prefix + "/"` (torch's `PrefixStore`). The
/// view keeps `base`'s store (and a server it hosts) alive: `base` may be destroyed first.
///
/// # Safety
/// `base` is NULL or a live handle; `prefix` is NULL or NUL-terminated; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_store_prefix_create(
    base: *mut mcore_store,
    prefix: *const c_char,
    out: *mut *mut mcore_store,
) -> mcore_status {
    ffi_guard(|| {
        // SAFETY: forwarded contracts.
        let b = unsafe { handle(base) }?;
        let prefix = unsafe { str_arg(prefix, "prefix") }?;
        let out = out_ptr(out, "out")?;
        let view = mcore_store {
            store: Arc::new(PrefixStore::new(prefix, b.store.clone())),
            tcp_port: b.tcp_port,
            server: b.server.clone(),
        };
        *out = super::handle::into_raw(view);
        Ok(())
    })
}

/// Destroys a store handle; NULL is accepted. A hosted server stops when its last view goes.
///
/// # Safety
/// `store` is NULL or a handle from an `mcore_store_*_create` call, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn mcore_store_destroy(store: *mut mcore_store) {
    let _ = ffi_guard(|| {
        // SAFETY: NULL or a handle from an mcore_store_*_create call, destroyed once (the contract).
        unsafe { super::handle::destroy(store) };
        Ok(())
    });
}

/// Sets `key` to the `value_len` bytes at `value` (`value` may be NULL when `value_len` is 0).
///
/// # Safety
/// `store` live handle or NULL; `key` NULL or NUL-terminated; `value` NULL or valid for `value_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn mcore_store_set(
    store: *mut mcore_store,
    key: *const c_char,
    value: *const u8,
    value_len: usize,
) -> mcore_status {
    ffi_guard(|| {
        // SAFETY: forwarded contracts.
        let h = unsafe { handle(store) }?;
        let key = unsafe { str_arg(key, "key") }?;
        let value = unsafe { slice_arg(value, value_len, "value") }?;
        Ok(h.store.set(key, value)?)
    })
}

/// Copies the value of `key` into `buf`, waiting for the key up to the store timeout. Writes
/// the value's length to `*out_len`; when `buf_len` is too small (query the size with `buf`
/// NULL and `buf_len` 0) returns `MCORE_STATUS_BUFFER_TOO_SMALL` with `*out_len` = size needed.
///
/// # Safety
/// `store` live handle or NULL; `key` NULL or NUL-terminated; `buf` NULL or valid for `buf_len`
/// bytes; `out_len` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_store_get(
    store: *mut mcore_store,
    key: *const c_char,
    buf: *mut u8,
    buf_len: usize,
    out_len: *mut usize,
) -> mcore_status {
    ffi_guard(|| {
        // SAFETY: forwarded contracts.
        let h = unsafe { handle(store) }?;
        let key = unsafe { str_arg(key, "key") }?;
        let out_len = out_ptr(out_len, "out_len")?;
        let buf = unsafe { slice_out(buf, buf_len, "buf") }?;
        let v = h.store.get(key)?;
        fill_value(&v, buf, out_len, &format!("value of key '{key}'"))
    })
}

/// Copies `v` into `buf` and sets `*out_len` to its length; when `buf` is too small, sets
/// `*out_len` to the size needed and fails with `MCORE_STATUS_BUFFER_TOO_SMALL`.
fn fill_value(v: &[u8], buf: &mut [u8], out_len: &mut usize, what: &str) -> Result<(), FfiError> {
    *out_len = v.len();
    let Some(dst) = buf.get_mut(..v.len()) else {
        return Err(FfiError::new(
            mcore_status::BufferTooSmall,
            format!("{what} has {} bytes, buffer has {}", v.len(), buf.len()),
        ));
    };
    dst.copy_from_slice(v);
    Ok(())
}

/// Atomically sets `key` to `desired` if its value is `expected` (torch's `compare_set`): a
/// missing key with an empty `expected` is set to `desired`; a missing key with a non-empty
/// `expected` stays missing. Copies the value now stored (the missing case: `expected`) into
/// `buf` like `mcore_store_get`: `*out_len` = its length; when `buf_len` is too small returns
/// `MCORE_STATUS_BUFFER_TOO_SMALL` with `*out_len` = size needed. The swap happens on the first
/// call either way: a second call to fetch the value passes `expected` = `desired` (a no-op swap).
///
/// # Safety
/// `store` live handle or NULL; `key` NULL or NUL-terminated; `expected`/`desired` NULL or valid
/// for `expected_len`/`desired_len` bytes; `buf` NULL or valid for `buf_len` bytes; `out_len`
/// NULL or writable.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn mcore_store_compare_set(
    store: *mut mcore_store,
    key: *const c_char,
    expected: *const u8,
    expected_len: usize,
    desired: *const u8,
    desired_len: usize,
    buf: *mut u8,
    buf_len: usize,
    out_len: *mut usize,
) -> mcore_status {
    ffi_guard(|| {
        // SAFETY: forwarded contracts.
        let h = unsafe { handle(store) }?;
        let key = unsafe { str_arg(key, "key") }?;
        let expected = unsafe { slice_arg(expected, expected_len, "expected") }?;
        let desired = unsafe { slice_arg(desired, desired_len, "desired") }?;
        let out_len = out_ptr(out_len, "out_len")?;
        let buf = unsafe { slice_out(buf, buf_len, "buf") }?;
        let v = h.store.compare_set(key, expected, desired)?;
        fill_value(&v, buf, out_len, &format!("value of key '{key}' after compare_set"))
    })
}

/// Adds `delta` to the integer counter under `key` (missing: 0); `*out_value` = the new value
/// (`out_value` may be NULL).
///
/// # Safety
/// `store` live handle or NULL; `key` NULL or NUL-terminated; `out_value` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_store_add(
    store: *mut mcore_store,
    key: *const c_char,
    delta: i64,
    out_value: *mut i64,
) -> mcore_status {
    ffi_guard(|| {
        // SAFETY: forwarded contracts.
        let h = unsafe { handle(store) }?;
        let key = unsafe { str_arg(key, "key") }?;
        let now = h.store.add(key, delta)?;
        // SAFETY: NULL or writable per the contract.
        if let Some(out) = unsafe { out_value.as_mut() } {
            *out = now;
        }
        Ok(())
    })
}

/// Whether all `n_keys` keys exist now (no waiting).
///
/// # Safety
/// `store` live handle or NULL; `keys` NULL or valid for `n_keys` NUL-terminated strings;
/// `out_ready` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_store_check(
    store: *mut mcore_store,
    keys: *const *const c_char,
    n_keys: usize,
    out_ready: *mut bool,
) -> mcore_status {
    ffi_guard(|| {
        // SAFETY: forwarded contracts.
        let h = unsafe { handle(store) }?;
        let keys = unsafe { keys_arg(keys, n_keys) }?;
        let out = out_ptr(out_ready, "out_ready")?;
        *out = h.store.check(&keys)?;
        Ok(())
    })
}

/// Waits until all `n_keys` keys exist, up to `timeout_ms` (0: the store's timeout). On
/// timeout returns `MCORE_STATUS_TIMEOUT`; the message names the keys waited for (a TCP store,
/// like torch's client, names all of them: check keys one by one for the missing subset).
///
/// # Safety
/// `store` live handle or NULL; `keys` NULL or valid for `n_keys` NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn mcore_store_wait(
    store: *mut mcore_store,
    keys: *const *const c_char,
    n_keys: usize,
    timeout_ms: u64,
) -> mcore_status {
    ffi_guard(|| {
        // SAFETY: forwarded contracts.
        let h = unsafe { handle(store) }?;
        let keys = unsafe { keys_arg(keys, n_keys) }?;
        let timeout = if timeout_ms == 0 { h.store.timeout() } else { crate::timeout::from_millis(timeout_ms) };
        Ok(h.store.wait(&keys, timeout)?)
    })
}

/// Deletes `key`; `*out_deleted` = whether it existed (`out_deleted` may be NULL).
///
/// # Safety
/// `store` live handle or NULL; `key` NULL or NUL-terminated; `out_deleted` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_store_delete_key(
    store: *mut mcore_store,
    key: *const c_char,
    out_deleted: *mut bool,
) -> mcore_status {
    ffi_guard(|| {
        // SAFETY: forwarded contracts.
        let h = unsafe { handle(store) }?;
        let key = unsafe { str_arg(key, "key") }?;
        let deleted = h.store.delete_key(key)?;
        // SAFETY: NULL or writable per the contract.
        if let Some(out) = unsafe { out_deleted.as_mut() } {
            *out = deleted;
        }
        Ok(())
    })
}

/// Number of keys in the whole underlying store (a prefixed view counts all keys).
///
/// # Safety
/// `store` live handle or NULL; `out_count` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mcore_store_num_keys(store: *mut mcore_store, out_count: *mut i64) -> mcore_status {
    ffi_guard(|| {
        // SAFETY: forwarded contracts.
        let h = unsafe { handle(store) }?;
        let out = out_ptr(out_count, "out_count")?;
        *out = h.store.num_keys()?;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{MemoryStore, StoreError};
    use std::time::Duration;

    #[test]
    fn errors_map_to_statuses_and_raw_handles_round_trip() {
        let t = FfiError::from(StoreError::Timeout { keys: vec!["a".into()], waited: Duration::from_secs(1) });
        assert_eq!(t.status, mcore_status::Timeout);
        assert!(t.message.contains("'a'"));
        assert_eq!(FfiError::from(StoreError::Io("x".into())).status, mcore_status::Io);
        assert_eq!(FfiError::from(StoreError::Protocol("x".into())).status, mcore_status::Protocol);
        assert_eq!(FfiError::from(StoreError::InvalidArgument("x".into())).status, mcore_status::InvalidArgument);
        assert_eq!(FfiError::from(StoreError::Closed("x".into())).status, mcore_status::PeerFailed);
        let raw = super::super::handle::into_raw(mcore_store {
            store: Arc::new(MemoryStore::default()),
            tcp_port: None,
            server: None,
        });
        let s = unsafe { handle(raw) }.unwrap().store.clone();
        s.set("k", b"v").unwrap();
        let mut port = 0u16;
        assert_eq!(unsafe { mcore_store_tcp_port(raw, &mut port) }, mcore_status::InvalidArgument);
        let mut n = 0i64;
        assert_eq!(unsafe { mcore_store_num_keys(raw, &mut n) }, mcore_status::Ok);
        assert_eq!(n, 1);
        unsafe { mcore_store_destroy(raw) };
        assert!(unsafe { handle(std::ptr::null()) }.is_err());
    }
}
