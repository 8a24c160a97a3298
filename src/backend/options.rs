//! Options of one kind's communicators (Megatron-Core's per-group NCCL communicator config):
//! what a backend is asked to apply when it creates a group's communicator.

use std::fmt;

/// Options of one kind's communicators; `None` leaves the backend's default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct CommOptions {
    pub cga_cluster_size: Option<i32>,
    pub min_ctas: Option<i32>,
    pub max_ctas: Option<i32>,
    /// The network plugin, e.g. "IB" or "Socket".
    pub net_name: Option<String>,
    /// Children of a split share the parent's resources (NCCL `splitShare`; off by default, so
    /// that aborting one communicator does not break the others).
    pub split_share: Option<bool>,
}

impl CommOptions {
    /// Whether every option is left at the backend's default.
    pub fn is_default(&self) -> bool {
        *self == CommOptions::default()
    }

    /// `self` with the options `over` sets replacing ours.
    pub fn merged(&self, over: &CommOptions) -> CommOptions {
        CommOptions {
            cga_cluster_size: over.cga_cluster_size.or(self.cga_cluster_size),
            min_ctas: over.min_ctas.or(self.min_ctas),
            max_ctas: over.max_ctas.or(self.max_ctas),
            net_name: over.net_name.clone().or_else(|| self.net_name.clone()),
            split_share: over.split_share.or(self.split_share),
        }
    }
}

impl fmt::Display for CommOptions {
    /// The options set, `name=value` joined by commas (`-` when none): messages and fingerprints.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        let mut num = |name: &str, v: Option<i32>| {
            if let Some(v) = v {
                parts.push(format!("{name}={v}"));
            }
        };
        num("cga_cluster_size", self.cga_cluster_size);
        num("min_ctas", self.min_ctas);
        num("max_ctas", self.max_ctas);
        if let Some(n) = &self.net_name {
            parts.push(format!("net_name={n}"));
        }
        if let Some(s) = self.split_share {
            parts.push(format!("split_share={s}"));
        }
        if parts.is_empty() {
            f.write_str("-")
        } else {
            f.write_str(&parts.join(","))
        }
    }
}
