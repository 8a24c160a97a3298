//! A free TCP port on 127.0.0.1 for a store that a process about to start will bind
//! (`mcore-launch` on one node without `--master-port`; the tests).
//!
//! Picking a port by binding port 0 and releasing it races with the rest of the machine: until
//! the store binds it, the kernel may hand the same port to anyone's outgoing connection or
//! `bind(0)` (a Gloo pair of a job running beside it). With `MCORE_PORT_RANGE=LO-HI` set, the
//! port is looked for in that range instead, skipping the kernel's ephemeral range
//! (/proc/sys/net/ipv4/ip_local_port_range), which the kernel never hands out by chance; jobs that
//! run side by side and get disjoint ranges cannot collide (scripts/test.sh gives each of its
//! lanes one). scripts/lib/ports.py and cpp_tests/test_util.h follow the same rule.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU32, Ordering};

/// The variable naming the range, `LO-HI` (inclusive).
pub const PORT_RANGE_VAR: &str = "MCORE_PORT_RANGE";

/// A port on 127.0.0.1 that was free when checked (bound, then released): from
/// `MCORE_PORT_RANGE` when set (outside the kernel's ephemeral range), else one the kernel picks.
/// An error names a malformed range or one with no free port left.
pub fn free_port() -> std::io::Result<u16> {
    pick(std::env::var(PORT_RANGE_VAR).ok().as_deref())
}

/// Whether this process itself listens on TCP `port` (any address): a listening socket of
/// /proc/net/tcp or /proc/net/tcp6 on that port is one of /proc/self/fd's (torch's `env://`
/// store made in the same process holds MASTER_PORT so). `false` when /proc cannot tell.
pub fn listened_on_by_this_process(port: u16) -> bool {
    let inodes: Vec<String> = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .flat_map(|table| table.lines().skip(1).filter_map(|l| listening_inode(l, port)).collect::<Vec<_>>())
        .collect();
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else { return false };
    !inodes.is_empty()
        && fds.flatten().filter_map(|fd| std::fs::read_link(fd.path()).ok()).any(|target| {
            let target = target.to_string_lossy();
            inodes.iter().any(|inode| target == format!("socket:[{inode}]").as_str())
        })
}

/// The inode of a /proc/net/tcp line's socket when it listens (state `0A`) on `port`.
fn listening_inode(line: &str, port: u16) -> Option<String> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let local = u16::from_str_radix(fields.get(1)?.rsplit(':').next()?, 16).ok()?;
    (local == port && *fields.get(3)? == "0A").then(|| fields.get(9).map(|s| s.to_string()))?
}

fn pick(spec: Option<&str>) -> std::io::Result<u16> {
    let Some(spec) = spec.filter(|s| !s.trim().is_empty()) else {
        return Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port());
    };
    let bad =
        |why: &str| std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{PORT_RANGE_VAR}='{spec}': {why}"));
    let (lo, hi) = spec
        .trim()
        .split_once('-')
        .and_then(|(a, b)| Some((a.trim().parse::<u16>().ok()?, b.trim().parse::<u16>().ok()?)))
        .filter(|(a, b)| *a >= 1 && a <= b)
        .ok_or_else(|| bad("not a range LO-HI of ports 1-65535"))?;
    let ephemeral = ephemeral_range();
    let span = u32::from(hi - lo) + 1;
    // A different start in each process and for each call of one process (threads of a test).
    static CALLS: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let start =
        nanos ^ std::process::id().wrapping_mul(7919) ^ CALLS.fetch_add(1, Ordering::Relaxed).wrapping_mul(104_729);
    for i in 0..span {
        let port = lo + ((start.wrapping_add(i)) % span) as u16;
        if ephemeral.is_some_and(|(a, b)| (a..=b).contains(&port)) {
            continue;
        }
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Err(bad("no free port in it outside the kernel's ephemeral range"))
}

/// The kernel's ephemeral port range, when it can be read.
fn ephemeral_range() -> Option<(u16, u16)> {
    let s = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    let mut it = s.split_whitespace().map(|v| v.parse::<u16>().ok());
    Some((it.next()??, it.next()??))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_this_process_listens_on_is_told_from_a_free_one() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        assert!(listened_on_by_this_process(port));
        drop(listener);
        assert!(!listened_on_by_this_process(port));
        assert_eq!(
            listening_inode(
                "   1: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 4242 1",
                8080
            ),
            Some("4242".into())
        );
        assert_eq!(listening_inode("   1: 0100007F:1F90 0100007F:9C40 01 0 0 0 0 0 4243 1", 8080), None);
    }

    #[test]
    fn picks_in_the_range_outside_the_ephemeral_one_and_names_a_bad_range() {
        // The range the test runner gave this process, so that nothing beside it is disturbed.
        let range = std::env::var(PORT_RANGE_VAR).unwrap_or_else(|_| "11000-11099".into());
        let (lo, hi) =
            range.split_once('-').map(|(a, b)| (a.parse::<u16>().unwrap(), b.parse::<u16>().unwrap())).unwrap();
        let ports: Vec<u16> = (0..20).map(|_| pick(Some(&range)).unwrap()).collect();
        assert!(ports.iter().all(|p| (lo..=hi).contains(p)), "{ports:?} outside {range}");
        assert!(ports.windows(2).any(|w| w[0] != w[1]), "{ports:?}: every call the same port");
        // A range inside the ephemeral one has no port to give.
        let ephemeral = ephemeral_range().expect("ip_local_port_range");
        let e = pick(Some(&format!("{}-{}", ephemeral.0, ephemeral.0 + 10))).unwrap_err().to_string();
        assert!(e.contains("MCORE_PORT_RANGE=") && e.contains("ephemeral"), "{e}");
        let e = pick(Some("9-3")).unwrap_err().to_string();
        assert!(e.contains("'9-3'") && e.contains("LO-HI"), "{e}");
        // A taken port is not given.
        let held = TcpListener::bind(("127.0.0.1", pick(Some(&range)).unwrap())).unwrap();
        let port = held.local_addr().unwrap().port();
        assert!(pick(Some(&format!("{port}-{port}"))).is_err());
        assert!(pick(None).unwrap() > 0);
    }
}
