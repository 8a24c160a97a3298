//! Options of one kind's communicators (Megatron-Core's per-group NCCL communicator config):
//! what a backend is asked to apply when it creates a group's communicator.

use std::collections::BTreeMap;
use std::fmt;

/// The value of a backend option beyond the five typed ones (an NCCL `ncclConfig_t` field).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OptionValue {
    Int(i32),
    Bool(bool),
    Text(String),
}

impl fmt::Display for OptionValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OptionValue::Int(v) => write!(f, "{v}"),
            OptionValue::Bool(v) => write!(f, "{v}"),
            OptionValue::Text(v) => f.write_str(v),
        }
    }
}

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
    /// Every other `ncclConfig_t` field, by its snake_case key (`traffic_class`, `comm_name`, ...;
    /// see `backend::nccl::config::CONFIG_FIELDS`).
    pub more: BTreeMap<String, OptionValue>,
    /// A field newer than the loaded NCCL is an error instead of a warning.
    pub strict: Option<bool>,
}

/// torch_npu's per-group `hccl_config` keys, which the HCCL plugin applies to `HcclCommConfig`
/// (docs/backends.md, "HCCL"): whether each takes text (else a whole number).
pub const HCCL_OPTIONS: [(&str, bool); 8] = [
    ("hccl_buffer_size", false),
    ("group_name", true),
    ("qos_traffic_class", false),
    ("qos_service_level", false),
    ("hccl_op_expansion_mode", false),
    ("hccl_exec_timeout", false),
    ("hccl_algo", true),
    ("hccl_sdma_qos", false),
];

/// Whether `key` is one of [`HCCL_OPTIONS`] (`Some(takes text)`).
pub fn hccl_option(key: &str) -> Option<bool> {
    HCCL_OPTIONS.iter().find(|(k, _)| *k == key).map(|&(_, text)| text)
}

impl CommOptions {
    /// Every option set as `key=value` lines (typed options first, then the others by key,
    /// `strict` last): what a plugin backend is given (`mcore_backend_group_info.options`).
    pub fn lines(&self) -> String {
        let mut out = String::new();
        let mut line = |k: &str, v: &dyn fmt::Display| out.push_str(&format!("{k}={v}\n"));
        let typed: [(&str, Option<i32>); 3] =
            [("cga_cluster_size", self.cga_cluster_size), ("min_ctas", self.min_ctas), ("max_ctas", self.max_ctas)];
        for (k, v) in typed {
            if let Some(v) = v {
                line(k, &v);
            }
        }
        if let Some(n) = &self.net_name {
            line("net_name", n);
        }
        if let Some(s) = self.split_share {
            line("split_share", &s);
        }
        for (k, v) in &self.more {
            line(k, v);
        }
        if let Some(s) = self.strict {
            line("strict", &s);
        }
        out
    }

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
            more: {
                let mut m = self.more.clone();
                m.extend(over.more.iter().map(|(k, v)| (k.clone(), v.clone())));
                m
            },
            strict: over.strict.or(self.strict),
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
        for (k, v) in &self.more {
            parts.push(format!("{k}={v}"));
        }
        if let Some(s) = self.strict {
            parts.push(format!("strict={s}"));
        }
        if parts.is_empty() {
            f.write_str("-")
        } else {
            f.write_str(&parts.join(","))
        }
    }
}
