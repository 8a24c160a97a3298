//! MindSpeed's options (its argument names), parsed from `KEY=VALUE,...`, and its validation
//! rules (docs/topology.md, "MindSpeed's groups"). Every refusal names the rule it breaks.

use super::super::error::TopologyError;
use crate::quote::quoted;
use std::fmt;

/// MindSpeed's `--context-parallel-algo`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CpAlgo {
    /// `megatron_cp_algo` (the default): ring attention with double-ring windows.
    Megatron,
    /// `ulysses_cp_algo`.
    Ulysses,
    /// `hybrid_cp_algo`: Ulysses inside blocks of `ulysses_degree_in_cp`, ring across them.
    Hybrid,
    /// `hybrid_adaptive_cp_algo`.
    HybridAdaptive,
    /// `adaptive_cp_algo`.
    Adaptive,
    /// `kvallgather_cp_algo`.
    KvAllGather,
}

impl CpAlgo {
    pub const ALL: [CpAlgo; 6] = [
        CpAlgo::Megatron,
        CpAlgo::Ulysses,
        CpAlgo::Hybrid,
        CpAlgo::HybridAdaptive,
        CpAlgo::Adaptive,
        CpAlgo::KvAllGather,
    ];

    /// MindSpeed's name of the algorithm.
    pub fn name(self) -> &'static str {
        match self {
            CpAlgo::Megatron => "megatron_cp_algo",
            CpAlgo::Ulysses => "ulysses_cp_algo",
            CpAlgo::Hybrid => "hybrid_cp_algo",
            CpAlgo::HybridAdaptive => "hybrid_adaptive_cp_algo",
            CpAlgo::Adaptive => "adaptive_cp_algo",
            CpAlgo::KvAllGather => "kvallgather_cp_algo",
        }
    }
}

impl fmt::Display for CpAlgo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The attention-head count assumed when `num_attention_heads` is not given: hybrid CP's rule
/// `num_attention_heads % (ulysses_degree_in_cp * tp) == 0` needs one (docs/topology.md).
pub const DEFAULT_ATTENTION_HEADS: u32 = 32;

/// The most hot-expert broadcast groups MindSpeed makes per expert-parallel group.
pub const MAX_HOT_EXPERT_GROUPS: u32 = 8;

/// MindSpeed's options that shape its groups, with MindSpeed's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MindSpeedOptions {
    pub context_parallel_algo: CpAlgo,
    /// Needed by the hybrid algorithms; `None` = not given.
    pub ulysses_degree_in_cp: Option<u32>,
    /// Double-ring window (default 1).
    pub cp_window_size: u32,
    pub use_cp_send_recv_overlap: bool,
    pub tp_2d: bool,
    /// 2-D tensor parallel: tp = tp_x * tp_y (defaults 1).
    pub tp_x: u32,
    pub tp_y: u32,
    pub enable_overlap_ag_with_matmul: bool,
    pub enable_backward_overlap_ag_with_matmul: bool,
    pub optimize_send_recv_comm: bool,
    pub balanced_moe_experts: bool,
    /// Hot-expert broadcast groups per expert-parallel group (default 3, MindSpeed master's).
    pub trans_hot_expert_group_num: u32,
    /// Caps `trans_hot_expert_group_num` when given.
    pub balanced_moe_hot_expert_num: Option<u32>,
    /// Megatron's `--use-flash-attn`: with `tp_2d`, keeps `megatron_cp_algo` (else Ulysses).
    pub use_flash_attn: bool,
    /// Megatron's `--num-attention-heads` (hybrid CP's divisibility rule); `None` =
    /// [`DEFAULT_ATTENTION_HEADS`].
    pub num_attention_heads: Option<u32>,
}

impl Default for MindSpeedOptions {
    fn default() -> Self {
        MindSpeedOptions {
            context_parallel_algo: CpAlgo::Megatron,
            ulysses_degree_in_cp: None,
            cp_window_size: 1,
            use_cp_send_recv_overlap: false,
            tp_2d: false,
            tp_x: 1,
            tp_y: 1,
            enable_overlap_ag_with_matmul: false,
            enable_backward_overlap_ag_with_matmul: false,
            optimize_send_recv_comm: false,
            balanced_moe_experts: false,
            trans_hot_expert_group_num: 3,
            balanced_moe_hot_expert_num: None,
            use_flash_attn: false,
            num_attention_heads: None,
        }
    }
}

/// The keys [`MindSpeedOptions::parse`] takes (MindSpeed's and Megatron's argument names).
pub const OPTION_KEYS: [&str; 15] = [
    "context_parallel_algo",
    "ulysses_degree_in_cp",
    "cp_window_size",
    "use_cp_send_recv_overlap",
    "tp_2d",
    "tp_x",
    "tp_y",
    "enable_overlap_ag_with_matmul",
    "enable_backward_overlap_ag_with_matmul",
    "optimize_send_recv_comm",
    "balanced_moe_experts",
    "trans_hot_expert_group_num",
    "balanced_moe_hot_expert_num",
    "use_flash_attn",
    "num_attention_heads",
];

fn flag(key: &str, value: &str) -> Result<bool, TopologyError> {
    match value.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => Err(TopologyError::config(format!("mindspeed option {key}: {} is not true or false", quoted(value)))),
    }
}

fn count(key: &str, value: &str) -> Result<u32, TopologyError> {
    value.trim().parse::<u32>().map_err(|_| {
        TopologyError::config(format!("mindspeed option {key}: {} is not a non-negative integer", quoted(value)))
    })
}

impl MindSpeedOptions {
    /// Parse `KEY=VALUE,...` (MindSpeed's argument names; `-` may stand for `_` in a key). A key
    /// alone means true; `default` (or an empty text) means MindSpeed's defaults; `none` is the
    /// value of an option with no default that is not given. Unknown keys,
    /// repeated keys and bad values are refused with a message naming them.
    pub fn parse(text: &str) -> Result<MindSpeedOptions, TopologyError> {
        let mut o = MindSpeedOptions::default();
        let text = text.trim();
        if text.is_empty() || text == "default" {
            return Ok(o);
        }
        let mut seen: Vec<String> = Vec::new();
        for item in text.split(',') {
            let (key, value) = match item.split_once('=') {
                Some((k, v)) => (k.trim().replace('-', "_"), Some(v.trim())),
                None => (item.trim().replace('-', "_"), None),
            };
            if seen.contains(&key) {
                return Err(TopologyError::config(format!("mindspeed option {} given twice", quoted(&key))));
            }
            o.set(&key, value)?;
            seen.push(key);
        }
        Ok(o)
    }

    /// Set one option from its text (`None`: the key alone, true for a flag).
    pub fn set(&mut self, key: &str, value: Option<&str>) -> Result<(), TopologyError> {
        let k = key;
        let b = |v: Option<&str>| v.map_or(Ok(true), |v| flag(k, v));
        let n = |v: Option<&str>| match v {
            Some(v) => count(k, v),
            None => Err(TopologyError::config(format!("mindspeed option {k} needs a value ({k}=N)"))),
        };
        // An option without a default value may be given as `none` (or `null`): not given.
        let maybe = |v: Option<&str>| match v {
            Some(t) if t.eq_ignore_ascii_case("none") || t.eq_ignore_ascii_case("null") => Ok(None),
            v => n(v).map(Some),
        };
        match key {
            "context_parallel_algo" => {
                let v = value.unwrap_or("");
                self.context_parallel_algo = CpAlgo::ALL.into_iter().find(|a| a.name() == v).ok_or_else(|| {
                    let names: Vec<_> = CpAlgo::ALL.iter().map(|a| a.name()).collect();
                    TopologyError::config(format!(
                        "mindspeed option context_parallel_algo: {} is not one of {}",
                        quoted(v),
                        names.join(", ")
                    ))
                })?;
            }
            "ulysses_degree_in_cp" => self.ulysses_degree_in_cp = maybe(value)?,
            "cp_window_size" => self.cp_window_size = n(value)?,
            "use_cp_send_recv_overlap" => self.use_cp_send_recv_overlap = b(value)?,
            "tp_2d" => self.tp_2d = b(value)?,
            "tp_x" => self.tp_x = n(value)?,
            "tp_y" => self.tp_y = n(value)?,
            "enable_overlap_ag_with_matmul" => self.enable_overlap_ag_with_matmul = b(value)?,
            "enable_backward_overlap_ag_with_matmul" => self.enable_backward_overlap_ag_with_matmul = b(value)?,
            "optimize_send_recv_comm" => self.optimize_send_recv_comm = b(value)?,
            "balanced_moe_experts" => self.balanced_moe_experts = b(value)?,
            "trans_hot_expert_group_num" => self.trans_hot_expert_group_num = n(value)?,
            "balanced_moe_hot_expert_num" => self.balanced_moe_hot_expert_num = maybe(value)?,
            "use_flash_attn" => self.use_flash_attn = b(value)?,
            "num_attention_heads" => self.num_attention_heads = maybe(value)?,
            _ => {
                return Err(TopologyError::config(format!(
                    "unknown mindspeed option {} (expected one of {})",
                    quoted(key),
                    OPTION_KEYS.join(", ")
                )))
            }
        }
        Ok(())
    }

    /// The algorithm MindSpeed's validation leaves: `tp_2d` turns `megatron_cp_algo` into
    /// `ulysses_cp_algo` unless flash attention is on.
    pub fn validated_algo(&self) -> CpAlgo {
        if self.tp_2d && self.context_parallel_algo == CpAlgo::Megatron && !self.use_flash_attn {
            CpAlgo::Ulysses
        } else {
            self.context_parallel_algo
        }
    }

    /// Hot-expert broadcast groups per expert-parallel group: the option capped at
    /// `balanced_moe_hot_expert_num` and at [`MAX_HOT_EXPERT_GROUPS`]; 0 without balanced MoE.
    pub fn hot_expert_groups(&self) -> u32 {
        if !self.balanced_moe_experts {
            return 0;
        }
        let cap = self.balanced_moe_hot_expert_num.unwrap_or(u32::MAX).min(MAX_HOT_EXPERT_GROUPS);
        self.trans_hot_expert_group_num.min(cap)
    }
}
