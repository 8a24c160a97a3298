//! Scale load generator for TCPStore servers (ours or torch's): many non-blocking clients on a
//! few threads, each sending the bytes this project's `TcpStore` client sends (VALIDATE + PING
//! on connect; `get` is WAIT + GET), retrying a refused or reset connection until the deadline
//! as the client does. Used by `bench/store_scale.sh`; see docs/benchmarks/store.md.
//!
//! ```text
//! store_scale serve PORT                      # our server on 127.0.0.1:PORT until stdin closes;
//!                                             # each line read: prints the requests served so far
//! store_scale load PORT CLIENTS WORKLOAD [SERVER_PID]
//! ```
//! WORKLOAD `load`: per client connect, SET its key, ADD a counter (the client that brings it to
//! CLIENTS sets "go"), WAIT for "go", 8 GETs of other clients' keys (WAIT + GET each), close.
//! WORKLOAD `init`: the store traffic of this project's init at CLIENTS ranks without a backend
//! (a store-level simulation of its key pattern): open mark, configuration check-in (rank 0
//! waits for and reads every rank's key, then sets the verdict), one unique-id exchange per
//! communicator kind (the group's rank 0 sets, the others WAIT, WAIT, GET as the NCCL exchange
//! does) for 7 kinds of a tp8 pp4 dp layout, then the leave counter.
//! Prints one JSON line: seconds, failed clients, requests per client, server RSS before and peak.

#[path = "scale_sim/shared.rs"]
mod shared;

use mcore_init::store::tcp::wire::{Encoder, Query, VALIDATE_MAGIC};
use mcore_init::store::TcpStoreServer;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use shared::{cpu_s, megatron_groups};
use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

const THREADS: usize = 2;
const DEADLINE: Duration = Duration::from_secs(120);

#[derive(Clone, Copy, PartialEq)]
enum Reply {
    None,
    U32,
    U8,
    /// The ADD of the barrier: the client that reads `n` sets "go".
    Counter,
    Blob,
    Blobs(usize),
}

struct Step {
    msg: Vec<u8>,
    reply: Reply,
}

fn key(k: &str) -> Vec<u8> {
    format!("/{k}").into_bytes()
}
fn set(k: &str, v: &[u8]) -> Step {
    Step { msg: Encoder::query(Query::Set).bytes(&key(k)).bytes(v).finish(), reply: Reply::None }
}
fn wait(ks: &[String]) -> Step {
    let ks: Vec<String> = ks.iter().map(|k| format!("/{k}")).collect();
    Step { msg: Encoder::query(Query::Wait).keys(&ks).finish(), reply: Reply::U8 }
}
fn get(k: &str) -> [Step; 2] {
    [wait(&[k.to_string()]), Step { msg: Encoder::query(Query::Get).bytes(&key(k)).finish(), reply: Reply::Blob }]
}
fn handshake() -> Vec<Step> {
    vec![
        Step { msg: Encoder::query(Query::Validate).u32(VALIDATE_MAGIC).finish(), reply: Reply::None },
        Step { msg: Encoder::query(Query::Ping).u32(std::process::id()).finish(), reply: Reply::U32 },
    ]
}

fn load_script(r: usize, n: usize) -> Vec<Step> {
    let mut s = handshake();
    s.push(set(&format!("rank/{r}"), format!("address-of-rank-{r}:29500").as_bytes()));
    s.push(Step { msg: Encoder::query(Query::Add).bytes(&key("count")).i64(1).finish(), reply: Reply::Counter });
    s.push(wait(&["go".to_string()]));
    for j in 1..=8 {
        s.extend(get(&format!("rank/{}", (r + j * 97) % n)));
    }
    s
}

fn init_script(r: usize, n: usize) -> Vec<Step> {
    let mut s = handshake();
    // Open: rank 0 marks its fresh server open, the others wait for the mark.
    s.push(if r == 0 { set("a/open", b"1") } else { wait(&["a/open".to_string()]) });
    // Check-in of the configuration fingerprint.
    s.push(set(&format!("a/ck/{r}"), b"tp=8 pp=4 cp=1 ep=1 order=tp-cp-ep-dp-pp backend=nccl seed=1234"));
    if r == 0 {
        let all: Vec<String> = (0..n).map(|i| format!("a/ck/{i}")).collect();
        s.push(wait(&all));
        s.push(wait(&all)); // multi_get waits, then reads
        let ks: Vec<String> = all.iter().map(|k| format!("/{k}")).collect();
        s.push(Step { msg: Encoder::query(Query::MultiGet).keys(&ks).finish(), reply: Reply::Blobs(n) });
        s.push(set("a/ck/verdict", b"ok"));
    } else {
        s.push(wait(&["a/ck/verdict".to_string()]));
        s.extend(get("a/ck/verdict"));
    }
    // One unique id per communicator kind.
    for (kind, g, leader) in megatron_groups(r, n) {
        let k = format!("a/uid/{kind}/{g}");
        if r == leader {
            s.push(set(&k, &[7u8; 128]));
        } else {
            s.push(wait(std::slice::from_ref(&k)));
            s.extend(get(&k));
        }
    }
    s.push(Step { msg: Encoder::query(Query::Add).bytes(&key("a/leave")).i64(1).finish(), reply: Reply::Counter });
    s
}

/// Bytes a reply of kind `r` takes at the start of `buf`, once complete.
fn reply_len(r: Reply, buf: &[u8]) -> Option<usize> {
    let blob = |at: usize| -> Option<usize> {
        let n = u64::from_le_bytes(buf.get(at..at + 8)?.try_into().ok()?) as usize;
        (buf.len() >= at + 8 + n).then_some(8 + n)
    };
    let fixed = |n: usize| (buf.len() >= n).then_some(n);
    match r {
        Reply::None => Some(0),
        Reply::U32 => fixed(4),
        Reply::U8 => fixed(1),
        Reply::Counter => fixed(8),
        Reply::Blob => blob(0),
        Reply::Blobs(k) => (0..k).try_fold(0, |at, _| Some(at + blob(at)?)),
    }
}

struct Client {
    rank: usize,
    script: Vec<Step>,
    pc: usize,
    stream: Option<TcpStream>,
    out: Vec<u8>,
    inbuf: Vec<u8>,
    retry_at: Option<Instant>,
    backoff: Duration,
    requests: u64,
    done: bool,
    failed: bool,
}

struct Shared {
    addr: SocketAddr,
    n: usize,
    deadline: Instant,
}

impl Client {
    fn connect(&mut self, poll: &Poll, tok: usize, sh: &Shared) {
        match TcpStream::connect(sh.addr) {
            Ok(mut s) => {
                let _ = s.set_nodelay(true);
                if poll.registry().register(&mut s, Token(tok), Interest::READABLE | Interest::WRITABLE).is_err() {
                    self.failed = true;
                    return;
                }
                self.stream = Some(s);
                self.pc = 0;
                self.inbuf.clear();
                self.out.clear();
                self.queue(sh);
            }
            Err(_) => self.retry(poll, sh),
        }
    }

    /// Connection refused or reset before the handshake finished: back off and reconnect.
    fn retry(&mut self, poll: &Poll, sh: &Shared) {
        if let Some(mut s) = self.stream.take() {
            let _ = poll.registry().deregister(&mut s);
        }
        if self.pc >= 2 || Instant::now() >= sh.deadline {
            self.failed = true;
            return;
        }
        let jitter = Duration::from_micros((self.rank as u64 * 7919) % (self.backoff.as_micros() as u64 / 2 + 1));
        self.retry_at = Some(Instant::now() + self.backoff / 2 + jitter);
        self.backoff = (self.backoff * 2).min(Duration::from_secs(1));
    }

    /// Queue messages up to and including the next one that needs a reply.
    fn queue(&mut self, _sh: &Shared) {
        while self.pc < self.script.len() {
            let st = &self.script[self.pc];
            self.out.extend_from_slice(&st.msg);
            self.requests += 1;
            if st.reply != Reply::None {
                return;
            }
            self.pc += 1;
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let Some(s) = self.stream.as_mut() else { return Ok(()) };
        while !self.out.is_empty() {
            match s.write(&self.out) {
                Ok(n) => {
                    self.out.drain(..n);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn on_event(&mut self, poll: &Poll, sh: &Shared) {
        if self.done || self.failed || self.stream.is_none() {
            return;
        }
        let mut buf = [0u8; 65536];
        let mut eof = false;
        let mut err = false;
        if let Some(s) = self.stream.as_mut() {
            loop {
                match s.read(&mut buf) {
                    Ok(0) => {
                        eof = true;
                        break;
                    }
                    Ok(n) => self.inbuf.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(_) => {
                        err = true;
                        break;
                    }
                }
            }
        }
        while self.pc < self.script.len() {
            let r = self.script[self.pc].reply;
            let Some(len) = reply_len(r, &self.inbuf) else { break };
            if r == Reply::Counter {
                let v = i64::from_le_bytes(self.inbuf[..8].try_into().unwrap());
                if v == sh.n as i64 && self.script[self.pc].msg.windows(6).any(|w| w == b"/count") {
                    self.out.extend_from_slice(&set("go", b"1").msg);
                    self.requests += 1;
                }
            }
            self.inbuf.drain(..len);
            self.pc += 1;
            self.queue(sh);
        }
        if self.pc >= self.script.len() && self.out.is_empty() {
            self.finish(poll);
            return;
        }
        if err || self.flush().is_err() || eof {
            if self.pc >= self.script.len() {
                self.finish(poll);
            } else {
                self.retry(poll, sh);
            }
            return;
        }
        if self.pc >= self.script.len() && self.out.is_empty() {
            self.finish(poll);
        }
    }

    fn finish(&mut self, poll: &Poll) {
        if let Some(mut s) = self.stream.take() {
            let _ = poll.registry().deregister(&mut s);
        }
        self.done = true;
    }
}

fn run_thread(mut clients: Vec<Client>, sh: &Shared) -> Vec<Client> {
    let mut poll = Poll::new().unwrap();
    let mut events = Events::with_capacity(4096);
    for (i, c) in clients.iter_mut().enumerate() {
        c.connect(&poll, i, sh);
    }
    // Clients still running are counted on the fly: no scan of all clients per turn.
    let running = |cs: &[Client]| cs.iter().filter(|c| !c.done && !c.failed).count();
    let mut left = running(&clients);
    let mut retrying: Vec<usize> = (0..clients.len()).filter(|&i| clients[i].retry_at.is_some()).collect();
    loop {
        if left == 0 {
            break;
        }
        if Instant::now() >= sh.deadline {
            for c in clients.iter_mut().filter(|c| !c.done) {
                c.failed = true;
            }
            break;
        }
        poll.poll(&mut events, Some(Duration::from_millis(5))).unwrap();
        for e in events.iter() {
            let i = e.token().0;
            let c = &mut clients[i];
            let was_running = !c.done && !c.failed;
            c.on_event(&poll, sh);
            if was_running && (c.done || c.failed) {
                left -= 1;
            }
            if c.retry_at.is_some() {
                retrying.push(i);
            }
        }
        if !retrying.is_empty() {
            let now = Instant::now();
            retrying.sort_unstable();
            retrying.dedup();
            retrying.retain(|&i| {
                let c = &mut clients[i];
                if c.retry_at.is_some_and(|t| t <= now) && !c.failed {
                    c.retry_at = None;
                    c.connect(&poll, i, sh);
                    if c.failed {
                        left -= 1;
                    }
                    return c.retry_at.is_some();
                }
                c.retry_at.is_some() && !c.failed
            });
        }
    }
    clients
}

fn rss_kb(pid: &str, field: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines().find(|l| l.starts_with(field))?.split_whitespace().nth(1)?.parse().ok()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("serve") => {
            let port: u16 = args[2].parse().unwrap();
            let server = TcpStoreServer::bind("127.0.0.1", port).unwrap();
            println!("ready");
            // Each line read: the requests served so far (asked by the scale simulator, so that
            // nothing runs in this process between questions).
            for _ in std::io::stdin().lines().map_while(Result::ok) {
                println!("{}", server.requests_served());
            }
        }
        Some("load") => {
            let port: u16 = args[2].parse().unwrap();
            let n: usize = args[3].parse().unwrap();
            let workload = args[4].as_str();
            let pid = args.get(5).cloned();
            let rss_before = pid.as_deref().and_then(|p| rss_kb(p, "VmRSS:"));
            let cpu_before = pid.as_deref().and_then(cpu_s);
            let sh = Shared { addr: SocketAddr::from(([127, 0, 0, 1], port)), n, deadline: Instant::now() + DEADLINE };
            let mut parts: Vec<Vec<Client>> = (0..THREADS).map(|_| Vec::new()).collect();
            for r in 0..n {
                let script = if workload == "init" { init_script(r, n) } else { load_script(r, n) };
                parts[r % THREADS].push(Client {
                    rank: r,
                    script,
                    pc: 0,
                    stream: None,
                    out: Vec::new(),
                    inbuf: Vec::new(),
                    retry_at: None,
                    backoff: Duration::from_millis(10),
                    requests: 0,
                    done: false,
                    failed: false,
                });
            }
            let t = Instant::now();
            let done: Vec<Client> = std::thread::scope(|s| {
                let hs: Vec<_> = parts.into_iter().map(|p| s.spawn(|| run_thread(p, &sh))).collect();
                hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
            });
            let secs = t.elapsed().as_secs_f64();
            let peak = pid.as_deref().and_then(|p| rss_kb(p, "VmHWM:"));
            let cpu = pid.as_deref().and_then(cpu_s).zip(cpu_before).map(|(a, b)| a - b);
            let failed = done.iter().filter(|c| !c.done).count();
            let reqs: Vec<u64> = done.iter().filter(|c| c.done).map(|c| c.requests).collect();
            let mean = reqs.iter().sum::<u64>() as f64 / reqs.len().max(1) as f64;
            let max = reqs.iter().max().copied().unwrap_or(0);
            let non_root = done.iter().filter(|c| c.done && c.rank != 0).map(|c| c.requests).max().unwrap_or(0);
            println!(
                "{{\"workload\":\"{workload}\",\"clients\":{n},\"seconds\":{secs:.4},\"failed\":{failed},\
                 \"requests_mean\":{mean:.2},\"requests_max\":{max},\"requests_max_non_root\":{non_root},\
                 \"server_cpu_s\":{},\"rss_before_kb\":{},\"rss_peak_kb\":{}}}",
                cpu.map_or("null".into(), |v| format!("{v:.2}")),
                rss_before.map_or("null".into(), |v| v.to_string()),
                peak.map_or("null".into(), |v| v.to_string())
            );
        }
        _ => {
            eprintln!("usage: store_scale serve PORT | store_scale load PORT CLIENTS load|init [SERVER_PID]");
            std::process::exit(2);
        }
    }
}
