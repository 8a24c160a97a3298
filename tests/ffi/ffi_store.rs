//! The store C API through its `extern "C"` functions: TCP server + clients, prefixed views,
//! buffers, timeouts, NULL pointers and bad UTF-8.

use mcore_init::ffi::error::mcore_last_error_message;
use mcore_init::ffi::mcore_status;
use mcore_init::ffi::store::*;
use std::ffi::{c_char, CStr, CString};
use std::ptr::{null, null_mut};

fn last_error() -> String {
    unsafe { CStr::from_ptr(mcore_last_error_message()) }.to_string_lossy().into_owned()
}

fn c(s: &str) -> CString {
    CString::new(s).unwrap()
}

/// A handle destroyed on drop.
struct Handle(*mut mcore_store);

impl Drop for Handle {
    fn drop(&mut self) {
        unsafe { mcore_store_destroy(self.0) };
    }
}

fn tcp(port: u16, is_server: bool, timeout_ms: u64) -> Result<Handle, (mcore_status, String)> {
    let mut out = null_mut();
    let st = unsafe { mcore_store_tcp_create(c("127.0.0.1").as_ptr(), port, is_server, timeout_ms, &mut out) };
    if st == mcore_status::Ok {
        assert!(!out.is_null());
        Ok(Handle(out))
    } else {
        assert!(out.is_null(), "out written on failure");
        Err((st, last_error()))
    }
}

fn port_of(h: &Handle) -> u16 {
    let mut p = 0u16;
    assert_eq!(unsafe { mcore_store_tcp_port(h.0, &mut p) }, mcore_status::Ok, "{}", last_error());
    p
}

fn set(h: &Handle, key: &str, v: &[u8]) {
    assert_eq!(
        unsafe { mcore_store_set(h.0, c(key).as_ptr(), v.as_ptr(), v.len()) },
        mcore_status::Ok,
        "{}",
        last_error()
    );
}

fn get(h: &Handle, key: &str) -> Result<Vec<u8>, (mcore_status, String)> {
    let k = c(key);
    let mut need = usize::MAX;
    let st = unsafe { mcore_store_get(h.0, k.as_ptr(), null_mut(), 0, &mut need) };
    if st != mcore_status::Ok && st != mcore_status::BufferTooSmall {
        return Err((st, last_error()));
    }
    let mut buf = vec![0u8; need];
    let mut len = usize::MAX;
    let st = unsafe { mcore_store_get(h.0, k.as_ptr(), buf.as_mut_ptr(), buf.len(), &mut len) };
    assert_eq!(st, mcore_status::Ok, "{}", last_error());
    assert_eq!(len, need);
    Ok(buf)
}

#[test]
fn server_and_client_share_keys_through_the_c_api() {
    let server = tcp(0, true, 10_000).unwrap();
    let port = port_of(&server);
    assert!(port > 0);
    let client = tcp(port, false, 10_000).unwrap();
    assert_eq!(port_of(&client), port);

    set(&server, "k", b"hello");
    assert_eq!(get(&client, "k").unwrap(), b"hello");
    // Too small a buffer: status and the size needed, nothing else changed.
    let mut small = [0u8; 2];
    let mut len = 0usize;
    let st = unsafe { mcore_store_get(client.0, c("k").as_ptr(), small.as_mut_ptr(), 2, &mut len) };
    assert_eq!(st, mcore_status::BufferTooSmall);
    assert_eq!(len, 5);
    assert_eq!(small, [0, 0]);
    // Empty values: NULL with length 0 is fine both ways.
    assert_eq!(unsafe { mcore_store_set(client.0, c("empty").as_ptr(), null(), 0) }, mcore_status::Ok);
    let mut len = 9usize;
    assert_eq!(unsafe { mcore_store_get(server.0, c("empty").as_ptr(), null_mut(), 0, &mut len) }, mcore_status::Ok);
    assert_eq!(len, 0);

    let mut v = 0i64;
    assert_eq!(unsafe { mcore_store_add(client.0, c("n").as_ptr(), 3, &mut v) }, mcore_status::Ok);
    assert_eq!(unsafe { mcore_store_add(server.0, c("n").as_ptr(), 4, &mut v) }, mcore_status::Ok);
    assert_eq!(v, 7);
    assert_eq!(unsafe { mcore_store_add(server.0, c("n").as_ptr(), 0, null_mut()) }, mcore_status::Ok);
    assert_eq!(get(&server, "n").unwrap(), b"7");

    let keys = [c("k"), c("n")];
    let ptrs: Vec<*const c_char> = keys.iter().map(|k| k.as_ptr()).collect();
    let mut ready = false;
    assert_eq!(unsafe { mcore_store_check(client.0, ptrs.as_ptr(), 2, &mut ready) }, mcore_status::Ok);
    assert!(ready);
    assert_eq!(unsafe { mcore_store_wait(client.0, ptrs.as_ptr(), 2, 1000) }, mcore_status::Ok);

    let mut count = 0i64;
    assert_eq!(unsafe { mcore_store_num_keys(client.0, &mut count) }, mcore_status::Ok);
    assert_eq!(count, 3);
    let mut deleted = false;
    assert_eq!(unsafe { mcore_store_delete_key(client.0, c("k").as_ptr(), &mut deleted) }, mcore_status::Ok);
    assert!(deleted);
    assert_eq!(unsafe { mcore_store_delete_key(client.0, c("k").as_ptr(), &mut deleted) }, mcore_status::Ok);
    assert!(!deleted);
    assert_eq!(unsafe { mcore_store_check(client.0, ptrs.as_ptr(), 2, &mut ready) }, mcore_status::Ok);
    assert!(!ready);
}

#[test]
fn wait_timeout_names_the_keys_waited_for() {
    let s = tcp(0, true, 200).unwrap();
    set(&s, "present", b"1");
    let keys = [c("present"), c("absent")];
    let ptrs: Vec<*const c_char> = keys.iter().map(|k| k.as_ptr()).collect();
    assert_eq!(unsafe { mcore_store_wait(s.0, ptrs.as_ptr(), 2, 100) }, mcore_status::Timeout);
    let msg = last_error();
    assert!(msg.contains("'absent'"), "{msg}");
    // 0 = the store's timeout (200 ms), and get waits the same way.
    assert_eq!(unsafe { mcore_store_wait(s.0, ptrs.as_ptr(), 2, 0) }, mcore_status::Timeout);
    let (st, msg) = get(&s, "absent").unwrap_err();
    assert_eq!(st, mcore_status::Timeout);
    assert!(msg.contains("'absent'"), "{msg}");
}

#[test]
fn prefixed_views_outlive_their_base_and_share_the_server() {
    let server = tcp(0, true, 10_000).unwrap();
    let port = port_of(&server);
    let mut pg = null_mut();
    assert_eq!(unsafe { mcore_store_prefix_create(server.0, c("default_pg").as_ptr(), &mut pg) }, mcore_status::Ok);
    let pg = Handle(pg);
    drop(server); // the view keeps the hosted server alive
    assert_eq!(port_of(&pg), port);
    set(&pg, "x", b"1");
    let client = tcp(port, false, 10_000).unwrap();
    assert_eq!(get(&client, "default_pg/x").unwrap(), b"1");
    let mut nested = null_mut();
    assert_eq!(unsafe { mcore_store_prefix_create(pg.0, c("cuda").as_ptr(), &mut nested) }, mcore_status::Ok);
    let nested = Handle(nested);
    set(&nested, "y", b"2");
    assert_eq!(get(&client, "default_pg/cuda/y").unwrap(), b"2");
}

#[test]
fn null_pointers_bad_utf8_and_bad_arguments_are_invalid_argument() {
    let s = tcp(0, true, 5_000).unwrap();
    let mut out = null_mut();
    let inv = mcore_status::InvalidArgument;
    assert_eq!(unsafe { mcore_store_tcp_create(null(), 0, true, 1000, &mut out) }, inv);
    assert!(last_error().contains("host is NULL"), "{}", last_error());
    assert_eq!(unsafe { mcore_store_tcp_create(c("127.0.0.1").as_ptr(), 0, true, 1000, null_mut()) }, inv);
    assert_eq!(unsafe { mcore_store_tcp_create(c("127.0.0.1").as_ptr(), 0, false, 1000, &mut out) }, inv);
    assert!(out.is_null());
    assert_eq!(unsafe { mcore_store_tcp_port(null(), &mut 0) }, inv);
    assert_eq!(unsafe { mcore_store_tcp_port(s.0, null_mut()) }, inv);
    assert_eq!(unsafe { mcore_store_prefix_create(null_mut(), c("p").as_ptr(), &mut out) }, inv);
    assert_eq!(unsafe { mcore_store_prefix_create(s.0, null(), &mut out) }, inv);
    assert!(out.is_null());

    let bad: &[u8] = b"k\xff\xfe\0";
    let bad_key = bad.as_ptr() as *const c_char;
    assert_eq!(unsafe { mcore_store_set(s.0, bad_key, b"v".as_ptr(), 1) }, inv);
    assert!(last_error().contains("not valid UTF-8"), "{}", last_error());
    assert_eq!(unsafe { mcore_store_set(null_mut(), c("k").as_ptr(), b"v".as_ptr(), 1) }, inv);
    assert_eq!(unsafe { mcore_store_set(s.0, null(), b"v".as_ptr(), 1) }, inv);
    assert_eq!(unsafe { mcore_store_set(s.0, c("k").as_ptr(), null(), 3) }, inv);
    assert_eq!(unsafe { mcore_store_set(s.0, c("").as_ptr(), b"v".as_ptr(), 1) }, inv);
    assert!(last_error().contains("empty"), "{}", last_error());
    let mut len = 0usize;
    assert_eq!(unsafe { mcore_store_get(s.0, bad_key, null_mut(), 0, &mut len) }, inv);
    assert_eq!(unsafe { mcore_store_get(s.0, c("k").as_ptr(), null_mut(), 4, &mut len) }, inv);
    assert_eq!(unsafe { mcore_store_get(s.0, c("k").as_ptr(), null_mut(), 0, null_mut()) }, inv);
    assert_eq!(unsafe { mcore_store_add(s.0, bad_key, 1, null_mut()) }, inv);
    let ok = c("ok");
    let bad_list = [ok.as_ptr(), null()];
    let mut ready = false;
    assert_eq!(unsafe { mcore_store_check(s.0, bad_list.as_ptr(), 2, &mut ready) }, inv);
    assert!(last_error().contains("keys[1] is NULL"), "{}", last_error());
    assert_eq!(unsafe { mcore_store_check(s.0, null(), 1, &mut ready) }, inv);
    assert_eq!(unsafe { mcore_store_check(s.0, bad_list.as_ptr(), 1, null_mut()) }, inv);
    let utf = [bad_key];
    assert_eq!(unsafe { mcore_store_wait(s.0, utf.as_ptr(), 1, 10) }, inv);
    assert_eq!(unsafe { mcore_store_wait(null_mut(), utf.as_ptr(), 1, 10) }, inv);
    assert_eq!(unsafe { mcore_store_delete_key(s.0, null(), null_mut()) }, inv);
    assert_eq!(unsafe { mcore_store_num_keys(s.0, null_mut()) }, inv);
    assert_eq!(unsafe { mcore_store_num_keys(null_mut(), &mut 0) }, inv);
    // Empty key lists are trivially ready.
    assert_eq!(unsafe { mcore_store_check(s.0, null(), 0, &mut ready) }, mcore_status::Ok);
    assert!(ready);
    unsafe { mcore_store_destroy(null_mut()) };
}

#[test]
fn port_in_use_and_no_server_have_their_statuses() {
    let s = tcp(0, true, 5_000).unwrap();
    let port = port_of(&s);
    let (st, msg) = tcp(port, true, 5_000).err().unwrap();
    assert_eq!(st, mcore_status::InvalidArgument);
    assert!(msg.contains(&format!("port {port} is already in use")), "{msg}");
    drop(s);
    let (st, msg) = tcp(port, false, 200).err().unwrap();
    assert_eq!(st, mcore_status::Timeout);
    assert!(msg.contains(&format!("127.0.0.1:{port}")), "{msg}");
}

/// `mcore_store_compare_set` through two clients, with the two-call buffer pattern.
fn cas(h: &Handle, key: &str, expected: &[u8], desired: &[u8], buf_len: usize) -> (mcore_status, Vec<u8>, usize) {
    let mut buf = vec![0xAAu8; buf_len];
    let mut len = usize::MAX;
    let st = unsafe {
        mcore_store_compare_set(
            h.0,
            c(key).as_ptr(),
            expected.as_ptr(),
            expected.len(),
            desired.as_ptr(),
            desired.len(),
            if buf_len == 0 { null_mut() } else { buf.as_mut_ptr() },
            buf_len,
            &mut len,
        )
    };
    (st, buf, len)
}

#[test]
fn compare_set_swaps_reports_the_stored_value_and_sizes_the_buffer() {
    let server = tcp(0, true, 10_000).unwrap();
    let client = tcp(port_of(&server), false, 10_000).unwrap();
    let ok = mcore_status::Ok;
    // Missing key, empty expected: set to desired.
    let (st, buf, len) = cas(&client, "cas", b"", b"first", 16);
    assert_eq!((st, &buf[..len]), (ok, &b"first"[..]), "{}", last_error());
    assert_eq!(get(&server, "cas").unwrap(), b"first");
    // Matching expected: swapped.
    let (st, buf, len) = cas(&server, "cas", b"first", b"second", 16);
    assert_eq!((st, &buf[..len]), (ok, &b"second"[..]));
    // Wrong expected: unchanged, the current value comes back.
    let (st, buf, len) = cas(&client, "cas", b"wrong", b"third", 16);
    assert_eq!((st, &buf[..len]), (ok, &b"second"[..]));
    assert_eq!(get(&client, "cas").unwrap(), b"second");
    // Missing key, non-empty expected: stays missing, expected comes back.
    let (st, buf, len) = cas(&client, "nokey", b"exp", b"des", 16);
    assert_eq!((st, &buf[..len]), (ok, &b"exp"[..]));
    let keys = [c("nokey")];
    let ptrs: Vec<*const c_char> = keys.iter().map(|k| k.as_ptr()).collect();
    let mut ready = true;
    assert_eq!(unsafe { mcore_store_check(client.0, ptrs.as_ptr(), 1, &mut ready) }, ok);
    assert!(!ready);
    // Too small a buffer: the swap happened, the size needed comes back, the buffer is untouched;
    // a second call with expected = desired fetches the value.
    let (st, buf, len) = cas(&client, "cas", b"second", b"a longer value", 4);
    assert_eq!((st, len, buf), (mcore_status::BufferTooSmall, 14, vec![0xAA; 4]));
    assert!(last_error().contains("14 bytes"), "{}", last_error());
    let (st, buf, len) = cas(&client, "cas", b"a longer value", b"a longer value", len);
    assert_eq!((st, &buf[..len]), (ok, &b"a longer value"[..]));
    let (st, _, len) = cas(&client, "cas", b"x", b"y", 0);
    assert_eq!((st, len), (mcore_status::BufferTooSmall, 14));

    // Bad arguments.
    let inv = mcore_status::InvalidArgument;
    let mut len = 0usize;
    let mut b = [0u8; 4];
    let call =
        |store: *mut mcore_store,
         key: *const c_char,
         e: *const u8,
         el: usize,
         d: *const u8,
         dl: usize,
         buf: *mut u8,
         bl: usize,
         out: *mut usize| unsafe { mcore_store_compare_set(store, key, e, el, d, dl, buf, bl, out) };
    let k = c("cas");
    assert_eq!(call(null_mut(), k.as_ptr(), null(), 0, null(), 0, b.as_mut_ptr(), 4, &mut len), inv);
    assert_eq!(call(client.0, null(), null(), 0, null(), 0, b.as_mut_ptr(), 4, &mut len), inv);
    assert_eq!(call(client.0, k.as_ptr(), null(), 2, null(), 0, b.as_mut_ptr(), 4, &mut len), inv);
    assert!(last_error().contains("expected is NULL"), "{}", last_error());
    assert_eq!(call(client.0, k.as_ptr(), null(), 0, null(), 3, b.as_mut_ptr(), 4, &mut len), inv);
    assert!(last_error().contains("desired is NULL"), "{}", last_error());
    assert_eq!(call(client.0, k.as_ptr(), null(), 0, null(), 0, null_mut(), 4, &mut len), inv);
    assert!(last_error().contains("buf is NULL"), "{}", last_error());
    assert_eq!(call(client.0, k.as_ptr(), null(), 0, null(), 0, b.as_mut_ptr(), 4, null_mut()), inv);
    assert!(last_error().contains("out_len is NULL"), "{}", last_error());
    // None of the rejected calls changed the value.
    assert_eq!(get(&server, "cas").unwrap(), b"a longer value");
}
