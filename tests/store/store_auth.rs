//! The store's shared secret (src/store/tcp/auth.rs) over loopback: a server with a token serves
//! only clients that prove they hold it, before any key is read or written; clients without it,
//! with another one, and raw torch-protocol bytes are refused at once; a real torch client is
//! refused with a token and served without one (when a torch interpreter is available, see
//! [`torch_python`]).

use crate::common;

use mcore_init::store::tcp::auth::{self, AUTH_REQUIRED};
use mcore_init::store::tcp::wire::{Encoder, Query, VALIDATE_MAGIC};
use mcore_init::store::{ServerLimits, Store, StoreError, StoreToken, TcpStore, TcpStorePool, TcpStoreServer};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A long connect timeout: every refusal below must come well before it.
const T: Duration = Duration::from_secs(30);

fn token(s: &str) -> StoreToken {
    StoreToken::new(s.as_bytes()).unwrap()
}

fn server_with(tok: &str) -> TcpStoreServer {
    TcpStoreServer::bind_with_token("127.0.0.1", 0, ServerLimits::default(), Some(token(tok))).unwrap()
}

#[test]
fn a_client_with_the_token_is_served_and_its_pool_too() {
    let server = server_with("s3cret");
    let tok = token("s3cret");
    let c = TcpStore::connect_with_token("127.0.0.1", server.port(), T, Some(&tok)).unwrap();
    c.set("a", b"1").unwrap();
    assert_eq!(c.get("a").unwrap(), b"1");
    assert_eq!(c.add("n", 3).unwrap(), 3);
    // A pool opens more connections when one is blocked in a WAIT: each proves the token.
    let pool = Arc::new(
        TcpStorePool::new(Arc::new(c), "127.0.0.1", server.port())
            .with_token(mcore_init::store::tcp::auth::TokenCell::new(Some(tok))),
    );
    let waiter = {
        let pool = pool.clone();
        std::thread::spawn(move || pool.get("later"))
    };
    std::thread::sleep(Duration::from_millis(200));
    pool.set("later", b"x").unwrap();
    assert_eq!(waiter.join().unwrap().unwrap(), b"x");
    assert_eq!(pool.connections(), 2);
}

#[test]
fn a_client_without_the_token_or_with_another_is_refused_at_once() {
    let server = server_with("s3cret");
    let start = Instant::now();
    let e = TcpStore::connect("127.0.0.1", server.port(), T).err().expect("served without the token");
    assert!(
        matches!(&e, StoreError::Protocol(m) if m.contains("requires a token") && m.contains("MCORE_STORE_TOKEN")),
        "{e}"
    );
    let e = TcpStore::connect_with_token("127.0.0.1", server.port(), T, Some(&token("guess")))
        .err()
        .expect("served with a wrong token");
    assert!(matches!(&e, StoreError::Protocol(m) if m.contains("refused this client's token")), "{e}");
    // Both within a small part of the 30 s connect timeout (nothing was retried).
    assert!(start.elapsed() < Duration::from_secs(10), "{:?}", start.elapsed());
    // The server still serves its real clients.
    let ok = TcpStore::connect_with_token("127.0.0.1", server.port(), T, Some(&token("s3cret"))).unwrap();
    assert_eq!(ok.num_keys().unwrap(), 0);
}

/// Raw bytes of torch's protocol (VALIDATE, then a SET and a GET without waiting for anything):
/// the server answers the marker, closes, and stores nothing.
#[test]
fn torch_protocol_bytes_without_the_exchange_touch_no_key() {
    let server = server_with("s3cret");
    let mut raw = TcpStream::connect(("127.0.0.1", server.port())).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut msg = Encoder::query(Query::Validate).u32(VALIDATE_MAGIC).finish();
    msg.extend(Encoder::query(Query::Set).bytes(b"/stolen").bytes(b"1").finish());
    msg.extend(Encoder::query(Query::Get).bytes(b"/stolen").finish());
    raw.write_all(&msg).unwrap();
    let mut reply = Vec::new();
    raw.read_to_end(&mut reply).unwrap();
    assert_eq!(reply, AUTH_REQUIRED.to_le_bytes(), "only the marker, then the end of the stream");
    // A forged proof after a real hello is refused too.
    let mut raw = TcpStream::connect(("127.0.0.1", server.port())).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    raw.write_all(&auth::hello()).unwrap();
    let mut challenge = [0u8; 1 + auth::NONCE_LEN];
    raw.read_exact(&mut challenge).unwrap();
    assert_eq!(challenge[0], auth::AUTH_CHALLENGE);
    let mut forged = token("guess").prove(&challenge[1..]).to_vec();
    forged.extend(Encoder::query(Query::Set).bytes(b"/stolen").bytes(b"1").finish());
    raw.write_all(&forged).unwrap();
    let mut reply = Vec::new();
    raw.read_to_end(&mut reply).unwrap();
    assert_eq!(reply, [auth::AUTH_REFUSED]);
    let ok = TcpStore::connect_with_token("127.0.0.1", server.port(), T, Some(&token("s3cret"))).unwrap();
    assert!(!ok.check(&["stolen"]).unwrap());
    assert_eq!(ok.num_keys().unwrap(), 0);
}

/// A client with a token against a store that asks for none: the store answers that it wants
/// none and closes; the client fails at once (a rank 0 started without the token).
#[test]
fn a_token_against_a_store_without_one_fails_at_once_naming_the_token() {
    let server = TcpStoreServer::bind("127.0.0.1", 0).unwrap();
    let start = Instant::now();
    let e = TcpStore::connect_with_token("127.0.0.1", server.port(), T, Some(&token("x")))
        .err()
        .expect("a store without a token accepted a token");
    assert!(start.elapsed() < Duration::from_secs(10), "{:?}", start.elapsed());
    assert!(
        matches!(&e, StoreError::Protocol(m) if m.contains("MCORE_STORE_TOKEN is set here") && m.contains("started without one")),
        "{e}"
    );
    // Without a token nothing changed.
    let c = TcpStore::connect("127.0.0.1", server.port(), T).unwrap();
    c.set("k", b"v").unwrap();
    assert_eq!(c.get("k").unwrap(), b"v");
}

/// A Python interpreter with torch: `MCORE_TORCH_PYTHON`, else the venv scripts/torchrun-venv.sh
/// makes (target/torchrun-venv). None: the torch checks are skipped, saying so.
fn torch_python() -> Option<String> {
    let candidates = [
        std::env::var("MCORE_TORCH_PYTHON").ok(),
        Some(format!("{}/target/torchrun-venv/bin/python", env!("CARGO_MANIFEST_DIR"))),
    ];
    let found = candidates.into_iter().flatten().find(|p| std::path::Path::new(p).exists());
    if found.is_none() {
        eprintln!("skipped: no torch interpreter (set MCORE_TORCH_PYTHON or run scripts/torchrun-venv.sh)");
    }
    found
}

/// Run torch's TCPStore client against port `port`: set, then get. Its output and whether it
/// succeeded, within 60 s.
fn torch_client(python: &str, port: u16) -> (bool, String) {
    let script = "import sys, datetime, torch.distributed as d\n\
                  s = d.TCPStore('127.0.0.1', int(sys.argv[1]), is_master=False, timeout=datetime.timedelta(seconds=5))\n\
                  s.set('torch_key', b'v')\n\
                  assert s.get('torch_key') == b'v'\n\
                  print('TORCH-OK')\n";
    let mut child = std::process::Command::new(python)
        .args(["-c", script, &port.to_string()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() && start.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success() && text.contains("TORCH-OK"), text)
}

#[test]
fn a_torch_client_is_refused_with_a_token_and_served_without() {
    let Some(python) = torch_python() else { return };
    let open = TcpStoreServer::bind("127.0.0.1", 0).unwrap();
    let (ok, text) = torch_client(&python, open.port());
    assert!(ok, "torch's client against our server without a token:\n{text}");
    let closed = server_with("s3cret");
    let (ok, text) = torch_client(&python, closed.port());
    assert!(!ok, "torch's client was served by a server with a token:\n{text}");
    let c = TcpStore::connect_with_token("127.0.0.1", closed.port(), T, Some(&token("s3cret"))).unwrap();
    assert!(!c.check(&["torch_key"]).unwrap(), "torch's client wrote a key");
    eprintln!("torch client refused with: {}", text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or(""));
}

/// Issue 34.3: `MCORE_STORE_TOKEN_FILE` naming a FIFO (it hung forever), `/dev/zero` (read until
/// memory ran out) or a 200 MB file (accepted as a token): each makes a real rank fail within
/// 1 s, naming the variable, with a 60 s init timeout.
#[test]
fn a_token_file_that_is_a_fifo_a_device_or_huge_fails_at_once_naming_the_variable() {
    const SELFTEST: &str = env!("CARGO_BIN_EXE_mcore-selftest");
    let dir = std::env::temp_dir().join(format!("mcore-token-files-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("fifo");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let big = dir.join("big");
    std::fs::File::create(&big).unwrap().set_len(200 << 20).unwrap();
    let cases = [(fifo.clone(), "a FIFO"), ("/dev/zero".into(), "a character device"), (big.clone(), "larger than")];
    for (path, why) in cases {
        let start = Instant::now();
        let mut cmd = common::rank_command(SELFTEST, 0, 2, &common::free_port().to_string());
        cmd.args(["--timeout", "60"]).env("MCORE_STORE_TOKEN_FILE", &path);
        let out = common::wait_bounded(cmd.spawn().unwrap(), Duration::from_secs(30));
        let took = start.elapsed();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!out.status.success(), "{}: the rank came up: {err}", path.display());
        let named = format!("MCORE_STORE_TOKEN_FILE='{}'", path.display());
        assert!(err.contains(&named) && err.contains(why), "{}: {err}", path.display());
        assert!(took < Duration::from_secs(1), "{}: failed after {took:?}: {err}", path.display());
        eprintln!("token file {}: failed after {:.3} s: {}", path.display(), took.as_secs_f64(), err.trim());
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
