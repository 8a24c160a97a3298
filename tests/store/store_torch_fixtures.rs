//! Replays byte exchanges captured with real torch (scripts/torch_store_capture) so CI checks the
//! c10d TCPStore protocol without torch: torch's client bytes sent to our server must get torch's
//! server's reply bytes, and our client must send the bytes torch's client sent.

use mcore_init::store::{Store, TcpStore, TcpStoreServer};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

struct Exchange {
    op: String,
    result: Value,
    c2s: Vec<u8>,
    s2c: Vec<u8>,
    /// The exchange as it happened: (client_to_server, bytes) runs in order.
    flow: Vec<(bool, Vec<u8>)>,
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex")).collect()
}

fn load(name: &str) -> (String, Vec<Exchange>) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/torch_tcpstore").join(name);
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("fixture")).expect("json");
    let ex = doc["exchanges"]
        .as_array()
        .expect("exchanges")
        .iter()
        .map(|e| Exchange {
            op: e["op"].as_str().unwrap().to_string(),
            result: e["result"].clone(),
            c2s: unhex(e["c2s"].as_str().unwrap()),
            s2c: unhex(e["s2c"].as_str().unwrap()),
            flow: e["flow"]
                .as_array()
                .expect("flow")
                .iter()
                .map(|f| (f[0].as_str() == Some("c2s"), unhex(f[1].as_str().unwrap())))
                .collect(),
        })
        .collect();
    (doc["torch_version"].as_str().unwrap_or("?").to_string(), ex)
}

#[test]
fn torch_client_bytes_get_torch_server_replies_from_our_server() {
    let (version, ex) = load("torch_client_torch_server.json");
    assert!(ex.len() > 15, "fixture too short");
    let server = TcpStoreServer::bind("127.0.0.1", 0).unwrap();
    let mut s = TcpStream::connect(("127.0.0.1", server.port())).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    for (i, e) in ex.iter().enumerate() {
        for (to_server, bytes) in &e.flow {
            if *to_server {
                s.write_all(bytes).unwrap();
            } else {
                let mut got = vec![0u8; bytes.len()];
                s.read_exact(&mut got).unwrap_or_else(|err| panic!("step {i} {}: {err}", e.op));
                assert_eq!(&got, bytes, "step {i} {}: our reply differs from torch {version}'s server", e.op);
            }
        }
    }
    // Nothing more may follow: a GETNUMKEYS round trip comes back alone, and counts the keys
    // left after the last recorded count plus the two of MULTI_SET.
    let last_count = ex.iter().rev().find(|e| e.op == "num_keys").unwrap().result.as_i64().unwrap();
    s.write_all(&[7]).unwrap();
    let mut n = [0u8; 8];
    s.read_exact(&mut n).unwrap();
    assert_eq!(i64::from_le_bytes(n), last_count + 2);
}

/// Our client runs the capture's scenario against a scripted server that expects torch's client
/// bytes exchange by exchange and answers with torch's server bytes.
#[test]
fn our_client_sends_torch_client_bytes() {
    let (version, ex) = load("torch_client_torch_server.json");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let script: Vec<(usize, String, bool, Vec<u8>)> = ex
        .iter()
        .enumerate()
        .flat_map(|(i, e)| e.flow.iter().map(move |(d, b)| (i, e.op.clone(), *d, b.clone())))
        .collect();
    let scripted = std::thread::spawn(move || -> Vec<String> {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut mismatches = Vec::new();
        let mut nonce = [0u8; 4];
        for (i, op, to_server, bytes) in script {
            if !to_server {
                let mut reply = bytes.clone();
                if i == 0 {
                    reply.copy_from_slice(&nonce); // PING: echo our client's nonce
                }
                s.write_all(&reply).unwrap();
                continue;
            }
            let mut got = vec![0u8; bytes.len()];
            if let Err(e) = s.read_exact(&mut got) {
                mismatches.push(format!("step {i} {op}: {e}"));
                break;
            }
            let (mut a, mut b) = (got.clone(), bytes.clone());
            if i == 0 {
                // VALIDATE (5 bytes) then PING with the client's pid as nonce: mask the nonce.
                nonce.copy_from_slice(&got[6..10]);
                a[6..10].fill(0);
                b[6..10].fill(0);
            }
            if a != b {
                mismatches.push(format!("step {i} {op}: sent {got:02x?}, torch's client sent {bytes:02x?}"));
            }
        }
        mismatches
    });

    // Run the client side so that a failure still lets the scripted server report what it saw.
    let client = std::panic::catch_unwind(|| {
        let st = TcpStore::connect("127.0.0.1", port, Duration::from_secs(10)).unwrap();
        let short = Duration::from_millis(300);
        let hex = |v: Vec<u8>| Value::from(v.iter().map(|b| format!("{b:02x}")).collect::<String>());
        let mut results: Vec<(String, Value)> = vec![("connect".into(), Value::Null)];
        let mut r = |op: &str, v: Value| results.push((op.to_string(), v));
        st.set("alpha", b"one").unwrap();
        r("set", Value::Null);
        r("get", hex(st.get("alpha").unwrap()));
        r("add", st.add("ctr", 5).unwrap().into());
        r("add", st.add("ctr", -2).unwrap().into());
        r("get", hex(st.get("ctr").unwrap()));
        r("check", st.check(&["alpha", "ctr"]).unwrap().into());
        r("check", st.check(&["alpha", "missing"]).unwrap().into());
        st.wait(&["alpha"], st.timeout()).unwrap();
        r("wait", Value::Null);
        let err = st.wait(&["never"], short).unwrap_err();
        assert!(err.to_string().contains("'never'"), "{err}");
        r("wait_timeout", "timeout".into());
        r("compare_set", hex(st.compare_set("cas", b"", b"first").unwrap()));
        r("compare_set", hex(st.compare_set("cas", b"first", b"second").unwrap()));
        r("compare_set", hex(st.compare_set("cas", b"wrong", b"third").unwrap()));
        r("compare_set", hex(st.compare_set("nokey", b"exp", b"des").unwrap()));
        r("num_keys", st.num_keys().unwrap().into());
        r("delete_key", st.delete_key("alpha").unwrap().into());
        r("delete_key", st.delete_key("alpha").unwrap().into());
        r("num_keys", st.num_keys().unwrap().into());
        st.multi_set(&[("m1", b"x"), ("m2", b"yy")]).unwrap();
        r("multi_set", Value::Null);
        let mg: Vec<Value> = st.multi_get(&["m1", "m2"]).unwrap().into_iter().map(hex).collect();
        r("multi_get", Value::from(mg));
        st.append("m1", b"zz").unwrap();
        r("append", Value::Null);
        r("get", hex(st.get("m1").unwrap()));
        drop(st);
        results
    });

    let mismatches = scripted.join().unwrap();
    assert!(mismatches.is_empty(), "against torch {version}:\n{}", mismatches.join("\n"));
    let results = client.unwrap_or_else(|_| panic!("the client side failed (see above)"));
    assert_eq!(results.len(), ex.len(), "scenario length");
    for (i, ((op, v), e)) in results.iter().zip(&ex).enumerate() {
        assert_eq!(op, &e.op, "step {i}");
        assert_eq!(v, &e.result, "step {i} {op}: result differs from torch's");
    }
}

/// The live cross-checks (torch client ↔ our server, our client ↔ torch server) were recorded
/// too: their exchanges must match the torch ↔ torch reference step by step.
#[test]
fn recorded_cross_runs_match_the_reference() {
    let (_, reference) = load("torch_client_torch_server.json");
    let (_, ours_srv) = load("torch_client_our_server.json");
    let (_, ours_cli) = load("our_client_torch_server.json");
    assert_eq!(ours_srv.len(), reference.len());
    for (a, b) in reference.iter().zip(&ours_srv) {
        assert_eq!((&a.op, &a.c2s, &a.s2c), (&b.op, &b.c2s, &b.s2c));
    }
    assert!(ours_cli.len() >= 15);
    for (i, (a, b)) in reference.iter().zip(&ours_cli).enumerate().skip(1) {
        assert_eq!((&a.op, &a.result, &a.c2s, &a.s2c), (&b.op, &b.result, &b.c2s, &b.s2c), "step {i}");
    }
}
