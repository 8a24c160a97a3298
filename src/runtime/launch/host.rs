//! Which host a rank runs on, and the address it advertises to its peers.
//!
//! By default a rank advertises the local address of its own connection to the rendezvous
//! store: the address of the interface that routes to MASTER_ADDR, which peers on other hosts
//! can reach whenever they can reach the store. Backends receive it with every group
//! (`mcore_backend_group_info.host_addr`); their own settings (e.g. `MCORE_GLOO_HOSTNAME`,
//! `GLOO_SOCKET_IFNAME`) still override it. A world on the in-process store (one process) has
//! no connection and advertises 127.0.0.1.
//!
//! Each rank publishes `host/<rank>` = `"<hostname> <address>"` before check-in, so a failure can
//! name the hosts of the ranks it waited for. Simulated hosts (network namespaces) and
//! containers often share a host name, so the address is part of the name. Ranks that never
//! checked in published nothing: they are named by node instead (rank / LOCAL_WORLD_SIZE, the
//! numbering of torchrun and mcore-launch).

use crate::store::Store;
use std::collections::BTreeMap;
use std::net::IpAddr;

/// This process's host and the address it advertises.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostInfo {
    /// The machine's host name (`/proc/sys/kernel/hostname`), "unknown" when unreadable.
    pub hostname: String,
    /// The address peers are told to reach this rank at.
    pub addr: IpAddr,
    /// Why this address (for logs and `mcore-selftest`).
    pub why: String,
}

/// The machine's host name.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

impl HostInfo {
    /// The host of a rank whose store connection has local address `local` (None: in-process
    /// store), connected to `store_at` (`host:port`).
    pub fn new(local: Option<IpAddr>, store_at: &str) -> HostInfo {
        let (addr, why) = match local {
            Some(a) => (a, format!("local address of this rank's connection to the rendezvous store at {store_at}")),
            None => (IpAddr::from([127, 0, 0, 1]), "no rendezvous store connection (a world of one process)".into()),
        };
        HostInfo { hostname: hostname(), addr, why }
    }

    /// How errors name this host: `'name' (address)`.
    pub fn label(&self) -> String {
        format!("'{}' ({})", self.hostname, self.addr)
    }
}

fn key(rank: u32) -> String {
    crate::runtime::meeting::keys::host(rank)
}

/// Record `rank`'s host in `store` (one SET, no reply).
pub fn publish(store: &dyn Store, rank: u32, host: &HostInfo) -> Result<(), crate::store::StoreError> {
    let (k, v) = entry(rank, host);
    store.set(&k, &v)
}

/// The key and value that record `rank`'s host (see [`publish`]), for a caller that sets them
/// along with other keys in one request (the check-in's arrival).
pub fn entry(rank: u32, host: &HostInfo) -> (String, Vec<u8>) {
    (key(rank), format!("{} {}", host.hostname, host.addr).into_bytes())
}

/// The published label of `rank`'s host, or None (not published, or the store failed).
pub fn label_of(store: &dyn Store, rank: u32) -> Option<String> {
    if !store.check(&[&key(rank)]).ok()? {
        return None;
    }
    let v = store.get(&key(rank)).ok()?;
    label_from(&String::from_utf8_lossy(&v))
}

/// The label of a published host record `<hostname> <address>`: `'name' (address)`.
pub fn label_from(record: &str) -> Option<String> {
    let (name, addr) = record.rsplit_once(' ')?;
    Some(format!("'{name}' ({addr})"))
}

/// `ranks` (ascending) grouped by the host each published, e.g. "4-7 on host 'n1' (10.0.0.2)";
/// ranks that published none are listed bare (all of them when the store fails). Used on failure
/// paths only: one store request, whatever the number of ranks.
pub fn describe(store: &dyn Store, ranks: &[u32]) -> String {
    if ranks.is_empty() {
        return String::new();
    }
    let keys: Vec<String> = ranks.iter().map(|&r| key(r)).collect();
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let records = store.multi_get_existing(&refs).unwrap_or_default();
    let labels: BTreeMap<u32, String> =
        ranks.iter().zip(records).filter_map(|(&r, v)| Some((r, label_from(&String::from_utf8_lossy(&v))?))).collect();
    describe_by(ranks, &|r| labels.get(&r).cloned())
}

/// [`describe`] with each rank's host label from `label` (see [`label_of`]).
pub fn describe_by(ranks: &[u32], label: &dyn Fn(u32) -> Option<String>) -> String {
    let mut by_host: BTreeMap<Option<String>, Vec<u32>> = BTreeMap::new();
    for &r in ranks {
        by_host.entry(label(r)).or_default().push(r);
    }
    let parts: Vec<String> = by_host
        .into_iter()
        .map(|(host, rs)| match host {
            Some(h) => format!("{} on host {h}", format_ranks(&rs)),
            None => format_ranks(&rs),
        })
        .collect();
    parts.join("; ")
}

/// The nodes `ranks` belong to when every node runs `local_world_size` ranks (as torchrun and
/// mcore-launch number them), e.g. " = node 1 of 2 (ranks 4-7, by LOCAL_WORLD_SIZE=4)"; empty
/// when the world is one node or not evenly split.
pub fn nodes_of(ranks: &[u32], world_size: u32, local_world_size: u32) -> String {
    if ranks.is_empty() || local_world_size == 0 || local_world_size >= world_size || world_size % local_world_size != 0
    {
        return String::new();
    }
    let nodes = world_size / local_world_size;
    let mut by_node: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for &r in ranks {
        by_node.entry(r / local_world_size).or_default().push(r);
    }
    let parts: Vec<String> = by_node
        .into_iter()
        .map(|(n, rs)| {
            let all = rs.len() as u32 == local_world_size;
            format!("node {n} of {nodes} ({}{})", if all { "all its ranks: " } else { "ranks " }, format_ranks(&rs))
        })
        .collect();
    format!(" = {} by LOCAL_WORLD_SIZE={local_world_size}", parts.join(", "))
}

/// `[0, 1, 2, 5]` → "0-2, 5": short even for large worlds.
pub fn format_ranks(ranks: &[u32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ranks.len() {
        let mut j = i;
        while j + 1 < ranks.len() && ranks[j + 1] == ranks[j] + 1 {
            j += 1;
        }
        out.push(if j > i { format!("{}-{}", ranks[i], ranks[j]) } else { ranks[i].to_string() });
        i = j + 1;
    }
    out.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;
    use std::time::Duration;

    #[test]
    fn ranks_are_grouped_by_their_published_host() {
        let s = MemoryStore::new(Duration::from_secs(1));
        let a = HostInfo { hostname: "n0".into(), addr: "10.0.0.1".parse().unwrap(), why: String::new() };
        let b = HostInfo { hostname: "n0".into(), addr: "10.0.0.2".parse().unwrap(), why: String::new() };
        for r in 0..2 {
            publish(&s, r, &a).unwrap();
        }
        for r in 4..6 {
            publish(&s, r, &b).unwrap();
        }
        assert_eq!(describe(&s, &[0, 1, 4, 5, 7]), "7; 0-1 on host 'n0' (10.0.0.1); 4-5 on host 'n0' (10.0.0.2)");
        assert_eq!(describe(&s, &[3]), "3");
        assert_eq!(a.label(), "'n0' (10.0.0.1)");
    }

    #[test]
    fn nodes_follow_local_world_size() {
        assert_eq!(nodes_of(&[4, 5, 6, 7], 8, 4), " = node 1 of 2 (all its ranks: 4-7) by LOCAL_WORLD_SIZE=4");
        assert_eq!(nodes_of(&[1, 6], 8, 4), " = node 0 of 2 (ranks 1), node 1 of 2 (ranks 6) by LOCAL_WORLD_SIZE=4");
        assert_eq!(nodes_of(&[1], 4, 4), "");
        assert_eq!(nodes_of(&[1], 6, 4), "");
    }

    #[test]
    fn a_world_without_store_connection_advertises_loopback() {
        let h = HostInfo::new(None, "-");
        assert_eq!(h.addr, IpAddr::from([127, 0, 0, 1]));
        let h = HostInfo::new(Some("10.1.2.3".parse().unwrap()), "10.1.2.1:29500");
        assert!(h.why.contains("10.1.2.1:29500"), "{}", h.why);
    }
}
