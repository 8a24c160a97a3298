//! How communicators are created: the strategy (split from a world communicator, or one by one)
//! and per-kind communicator options, the equivalent of Megatron-Core's per-process-group NCCL
//! config file (`--nccl-communicator-config-path`), whose YAML this module reads as is.
//!
//! Megatron keys its file by short process-group names (`tp`, `dp_cp`, `ep_dp`, ...); our group
//! kind keys (`tensor_model_parallel`, ...) are accepted too. Options: `cga_cluster_size`,
//! `min_ctas`, `max_ctas`, `net_name` (Megatron's four), `split_share` (NCCL's `splitShare`),
//! every other `ncclConfig_t` field by the snake_case of its name (`traffic_class`, `comm_name`,
//! `max_p2p_peers`, ...: `backend::nccl::config::CONFIG_FIELDS`, each with the NCCL version that
//! has it), and `strict` (a field newer than the loaded NCCL is then an error, not a warning).
//! Megatron's `is_high_priority_stream` is a torch stream setting with no communicator
//! equivalent: it is accepted and ignored. torch_npu's per-group `hccl_config` keys
//! (`hccl_buffer_size`, `group_name`, ...: `backend::options::HCCL_OPTIONS`) are the HCCL
//! plugin's; MindSpeed's per-group buffer string (`dp:200;tp:300;exp:400`) sets
//! `hccl_buffer_size` per kind ([`CommConfig::add_group_buffers`], `MCORE_HCCL_GROUP_BUFFER`).
//! MindSpeed's own groups (`cp2`, `cp_ring`, `nd1_dim1`, `tp-y-cp`, ...: [`MindSpeedKind`]) are
//! entries by their names too; its hot-expert groups take `exp`'s options, as in MindSpeed.

use crate::backend::nccl::config::{config_field, FieldKind, CONFIG_FIELDS};
use crate::backend::options::{hccl_option, OptionValue, HCCL_OPTIONS};
pub use crate::backend::CommOptions;
use crate::quote::{clip, quoted};
use crate::topology::{GroupKind, MindSpeedKind};
use std::collections::BTreeMap;
use std::fmt;
use yaml_rust2::parser::{Event, Parser};
use yaml_rust2::{Yaml, YamlLoader};

/// Most bytes of communicator config text (a real file is a few hundred bytes).
pub const MAX_YAML_BYTES: usize = 1 << 20;
/// Deepest nesting of mappings and lists accepted (the format needs 2).
pub const MAX_YAML_DEPTH: usize = 32;
/// Most nodes the document may have with every alias (`*name`) expanded: aliases are allowed
/// (a shared `&options` block), alias bombs are not.
pub const MAX_YAML_NODES: u64 = 100_000;

/// Check `text` against the limits above by walking the parser's events (the parser's event
/// stream is not recursive, unlike its document builder), so that building the document next
/// can neither exhaust memory through aliases nor the stack through nesting.
fn check_yaml_limits(text: &str, source: &str) -> Result<(), String> {
    if text.len() > MAX_YAML_BYTES {
        return Err(format!(
            "{source}: {} bytes is more than the {MAX_YAML_BYTES} a communicator config may have",
            text.len()
        ));
    }
    let mut parser = Parser::new_from_str(text);
    // Per open mapping or list: its anchor id and the node count when it started.
    let mut open: Vec<(usize, u64)> = Vec::new();
    // Expanded node count of each anchored node, by anchor id.
    let mut anchored: BTreeMap<usize, u64> = BTreeMap::new();
    let mut nodes: u64 = 0;
    loop {
        let (event, mark) = parser.next_token().map_err(|e| format!("{source}: not valid YAML: {e}"))?;
        let at = || format!("line {} column {}", mark.line(), mark.col() + 1);
        match event {
            Event::StreamEnd => return Ok(()),
            Event::Scalar(_, _, anchor, _) => {
                nodes += 1;
                if anchor > 0 {
                    anchored.insert(anchor, 1);
                }
            }
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                nodes += 1;
                open.push((anchor, nodes));
                if open.len() > MAX_YAML_DEPTH {
                    return Err(format!("{source}: nesting deeper than {MAX_YAML_DEPTH} levels at {}", at()));
                }
            }
            Event::SequenceEnd | Event::MappingEnd => {
                if let Some((anchor, start)) = open.pop() {
                    if anchor > 0 {
                        anchored.insert(anchor, nodes - start + 1);
                    }
                }
            }
            Event::Alias(id) => nodes = nodes.saturating_add(anchored.get(&id).copied().unwrap_or(1)),
            _ => {}
        }
        if nodes > MAX_YAML_NODES {
            return Err(format!(
                "{source}: more than {MAX_YAML_NODES} nodes with aliases expanded (at {}): refusing an alias bomb",
                at()
            ));
        }
    }
}

/// How the runtime creates the communicators of the groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CommStrategy {
    /// Split when the backend can (NCCL ≥ 2.18, a plugin with `create_world` + `split`), else
    /// one by one.
    #[default]
    Auto,
    /// A world communicator, then one split collective per group kind (non-members pass no color).
    Split,
    /// Each group's communicator from its own rendezvous through the store.
    PerGroup,
}

impl std::str::FromStr for CommStrategy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "auto" | "" => Ok(CommStrategy::Auto),
            "split" => Ok(CommStrategy::Split),
            "per-group" | "per_group" => Ok(CommStrategy::PerGroup),
            other => Err(format!("communicator strategy {} is not one of auto, split, per-group", quoted(other))),
        }
    }
}

impl fmt::Display for CommStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CommStrategy::Auto => "auto",
            CommStrategy::Split => "split",
            CommStrategy::PerGroup => "per-group",
        })
    }
}

/// What an entry of the config file configures: one kind, or every hierarchical
/// context-parallel level (Megatron's `hcp`, our `hierarchical_context_parallel`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Entry {
    Kind(GroupKind),
    EveryHierarchicalCpLevel,
    /// One of MindSpeed's own kinds (its `pg_name`; not `exp`, which names expert_model_parallel).
    MindSpeed(MindSpeedKind),
}

/// MindSpeed's (older Megatron's) expert group names in its `--hccl-group-buffer` string, with
/// the kinds they mean.
pub const MINDSPEED_EXPERT_NAMES: [(&str, &str); 4] = [
    ("exp", "expert_model_parallel"),
    ("tp_exp", "expert_tensor_and_model_parallel"),
    ("mp_exp", "expert_tensor_model_pipeline_parallel"),
    ("dp_modulo_exp", "expert_data_parallel"),
];

/// The entry that applies to every `hierarchical_context_parallel_<i>` level.
const HIERARCHICAL_CP: &str = "hierarchical_context_parallel";

/// The entry an entry name means: a Megatron short name ([`GroupKind::megatron_name`]), a kind
/// key, or `hierarchical_context_parallel` (every level).
fn entry_of(name: &str) -> Option<Entry> {
    if name == HIERARCHICAL_CP || name == GroupKind::HierarchicalContextParallel(0).megatron_name() {
        return Some(Entry::EveryHierarchicalCpLevel);
    }
    GroupKind::FIXED
        .into_iter()
        .find(|k| k.megatron_name() == name)
        .or_else(|| GroupKind::from_key(name))
        .map(Entry::Kind)
        .or_else(|| MindSpeedKind::from_name(name).ok().filter(|&k| k != MindSpeedKind::Exp).map(Entry::MindSpeed))
}

impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Entry::Kind(k) => write!(f, "{k}"),
            Entry::EveryHierarchicalCpLevel => f.write_str(HIERARCHICAL_CP),
            Entry::MindSpeed(k) => write!(f, "{k}"),
        }
    }
}

/// Communicator options: a default for every kind, and per-kind entries over it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommConfig {
    pub default: CommOptions,
    per_kind: BTreeMap<Entry, CommOptions>,
}

impl CommConfig {
    /// Set the options of `name` (a Megatron short name, a kind key or a MindSpeed kind); the
    /// error names it.
    pub fn set(&mut self, name: &str, options: CommOptions) -> Result<(), String> {
        let entry = entry_of(name).ok_or_else(|| {
            let mut names: Vec<&str> = GroupKind::FIXED.iter().map(|k| k.megatron_name()).collect();
            names.push(GroupKind::HierarchicalContextParallel(0).megatron_name());
            format!(
                "communicator config: {} is neither a group kind nor one of Megatron's or MindSpeed's group names ({})",
                quoted(name),
                names.join(", ")
            )
        })?;
        self.per_kind.insert(entry, options);
        Ok(())
    }

    /// The options of `kind`: its entry over the default.
    pub fn options_for(&self, kind: GroupKind) -> CommOptions {
        let entry = self.per_kind.get(&Entry::Kind(kind)).or_else(|| match kind {
            GroupKind::HierarchicalContextParallel(_) => self.per_kind.get(&Entry::EveryHierarchicalCpLevel),
            _ => None,
        });
        self.over_default(entry)
    }

    /// The options of MindSpeed's `kind`: its entry over the default; the hot-expert groups
    /// (MindSpeed's `exp`) take expert_model_parallel's, as MindSpeed asks for `exp`'s options.
    pub fn options_for_mindspeed(&self, kind: MindSpeedKind) -> CommOptions {
        match kind {
            MindSpeedKind::Exp => self.options_for(GroupKind::ExpertModelParallel),
            _ => self.over_default(self.per_kind.get(&Entry::MindSpeed(kind))),
        }
    }

    fn over_default(&self, entry: Option<&CommOptions>) -> CommOptions {
        match entry {
            Some(o) => self.default.merged(o),
            None => self.default.clone(),
        }
    }

    /// Whether nothing is set.
    pub fn is_empty(&self) -> bool {
        self.default.is_default() && self.per_kind.is_empty()
    }

    /// Parse Megatron's YAML (a mapping from group name to a mapping of options) and add its
    /// entries. Errors name the group, the option and the bad value.
    /// The text is checked against [`MAX_YAML_BYTES`], [`MAX_YAML_DEPTH`] and
    /// [`MAX_YAML_NODES`] first.
    pub fn add_yaml(&mut self, text: &str, source: &str) -> Result<(), String> {
        check_yaml_limits(text, source)?;
        let docs = YamlLoader::load_from_str(text).map_err(|e| format!("{source}: not valid YAML: {e}"))?;
        let top = match docs.as_slice() {
            [] | [Yaml::Null] => return Ok(()),
            [Yaml::Hash(h)] => h,
            [_] => return Err(format!("{source}: expected a mapping from group name to options")),
            _ => return Err(format!("{source}: expected one YAML document, found {}", docs.len())),
        };
        for (name, body) in top {
            let name = name
                .as_str()
                .ok_or_else(|| format!("{source}: group name {} is not a string", clip(&format!("{name:?}"))))?;
            let options = parse_options(body, &format!("{source}: {}", clip(name)))?;
            self.set(name, options).map_err(|e| format!("{source}: {e}"))?;
        }
        Ok(())
    }

    /// Add MindSpeed's per-group HCCL buffer string (`--hccl-group-buffer`, e.g.
    /// `dp:200;tp:300;exp:400`, MB per group): each entry sets `hccl_buffer_size` of its kind
    /// unless the kind's entry sets it already. Names are the ones [`Self::set`] takes plus
    /// MindSpeed's older expert names ([`MINDSPEED_EXPERT_NAMES`]) and MindSpeed's own group
    /// names (`cp_ring:70`). The error names the entry.
    pub fn add_group_buffers(&mut self, text: &str, source: &str) -> Result<(), String> {
        for item in text.split(';').map(str::trim).filter(|i| !i.is_empty()) {
            let bad = |why: &str| format!("{source}: {} {why} (expected name:MB, e.g. dp:200;tp:300)", quoted(item));
            let (name, mb) = item.split_once(':').ok_or_else(|| bad("is not name:MB"))?;
            let (name, mb) = (name.trim(), mb.trim());
            let mb: i32 = mb.parse().ok().filter(|v| *v >= 1).ok_or_else(|| bad("has no whole number of MB from 1"))?;
            let kind_name = MINDSPEED_EXPERT_NAMES.iter().find(|(m, _)| *m == name).map_or(name, |&(_, k)| k);
            let entry = entry_of(kind_name).ok_or_else(|| bad("names no group kind"))?;
            let options = self.per_kind.entry(entry).or_default();
            options.more.entry("hccl_buffer_size".into()).or_insert(OptionValue::Int(mb));
        }
        Ok(())
    }

    /// Read a Megatron NCCL communicator config file: a regular file of at most
    /// [`MAX_YAML_BYTES`], refused without blocking otherwise ([`crate::input_file`]), so that
    /// init can never hang on it.
    pub fn add_yaml_file(&mut self, path: &std::path::Path) -> Result<(), String> {
        let shown = clip(&path.display().to_string());
        let bytes =
            crate::input_file::read_bounded(path, &format!("communicator config file {shown}"), MAX_YAML_BYTES)?;
        let text = String::from_utf8(bytes).map_err(|e| {
            format!("communicator config file {shown}: not UTF-8 text (byte {})", e.utf8_error().valid_up_to())
        })?;
        self.add_yaml(&text, &shown)
    }

    /// One line naming every setting: compared across ranks at check-in (`-` when empty).
    pub fn fingerprint(&self) -> String {
        if self.is_empty() {
            return "-".into();
        }
        let mut parts = vec![format!("default:{}", self.default)];
        parts.extend(self.per_kind.iter().map(|(k, o)| format!("{k}:{o}")));
        parts.join(";")
    }
}

fn parse_options(body: &Yaml, at: &str) -> Result<CommOptions, String> {
    let map = match body {
        Yaml::Hash(h) => h,
        Yaml::Null => return Ok(CommOptions::default()),
        other => return Err(format!("{at}: expected a mapping of options, got {}", describe(other))),
    };
    let mut o = CommOptions::default();
    for (key, value) in map {
        let key =
            key.as_str().ok_or_else(|| format!("{at}: option name {} is not a string", clip(&format!("{key:?}"))))?;
        let int = || -> Result<i32, String> {
            value
                .as_i64()
                .and_then(|v| i32::try_from(v).ok())
                .ok_or_else(|| format!("{at}: {key} must be an integer, got {}", describe(value)))
        };
        match key {
            "cga_cluster_size" => o.cga_cluster_size = Some(int()?),
            "min_ctas" => o.min_ctas = Some(int()?),
            "max_ctas" => o.max_ctas = Some(int()?),
            "net_name" => {
                let v = value.as_str().filter(|t| !t.contains(char::is_control)).ok_or_else(|| {
                    format!("{at}: net_name must be a string without control characters, got {}", describe(value))
                })?;
                o.net_name = Some(v.to_string());
            }
            "split_share" => {
                o.split_share = Some(
                    value
                        .as_bool()
                        .ok_or_else(|| format!("{at}: split_share must be true or false, got {}", describe(value)))?,
                )
            }
            "strict" => {
                o.strict = Some(
                    value
                        .as_bool()
                        .ok_or_else(|| format!("{at}: strict must be true or false, got {}", describe(value)))?,
                )
            }
            // A torch stream priority (Megatron passes it to ProcessGroupNCCL.Options): no
            // communicator option corresponds; the caller chooses its streams' priorities.
            "is_high_priority_stream" => {}
            other => {
                let kind = config_field(other)
                    .map(|f| f.kind)
                    .or_else(|| hccl_option(other).map(|text| if text { FieldKind::Text } else { FieldKind::Int }))
                    .ok_or_else(|| {
                        let keys: Vec<&str> =
                            CONFIG_FIELDS.iter().map(|f| f.key).chain(HCCL_OPTIONS.iter().map(|(k, _)| *k)).collect();
                        format!("{at}: unknown option {} (expected one of {}, strict)", quoted(other), keys.join(", "))
                    })?;
                let v = match kind {
                    FieldKind::Int => OptionValue::Int(int()?),
                    FieldKind::Bool => match (value.as_bool(), value.as_i64()) {
                        (Some(b), _) => OptionValue::Bool(b),
                        (None, Some(i @ (0 | 1))) => OptionValue::Bool(i == 1),
                        _ => return Err(format!("{at}: {other} must be true or false, got {}", describe(value))),
                    },
                    FieldKind::Text => OptionValue::Text(
                        value
                            .as_str()
                            .filter(|t| !t.is_empty() && !t.contains(char::is_control))
                            .ok_or_else(|| {
                                format!(
                                    "{at}: {other} must be a non-empty string without control characters, got {}",
                                    describe(value)
                                )
                            })?
                            .to_string(),
                    ),
                };
                o.more.insert(other.to_string(), v);
            }
        }
    }
    Ok(o)
}

fn describe(v: &Yaml) -> String {
    match v {
        Yaml::String(s) => quoted(s),
        Yaml::Integer(i) => i.to_string(),
        Yaml::Real(r) => clip(r),
        Yaml::Boolean(b) => b.to_string(),
        Yaml::Null => "nothing".into(),
        Yaml::Array(_) => "a list".into(),
        Yaml::Hash(_) => "a mapping".into(),
        _ => "an unsupported value".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(key: &str) -> GroupKind {
        GroupKind::from_key(key).unwrap()
    }

    const MEGATRON_STYLE: &str = "\
# per-communicator tuning
dp:
  cga_cluster_size: 4
  max_ctas: 4
  min_ctas: 1
tp: {net_name: Socket, is_high_priority_stream: true}
hcp:
  max_ctas: 2
tensor_and_data_parallel:
  split_share: true
";

    #[test]
    fn megatron_names_and_kind_keys_map_to_kinds() {
        let mut c = CommConfig::default();
        c.add_yaml(MEGATRON_STYLE, "cfg.yaml").unwrap();
        let dp = c.options_for(k("data_parallel"));
        assert_eq!((dp.cga_cluster_size, dp.max_ctas, dp.min_ctas), (Some(4), Some(4), Some(1)));
        assert_eq!(c.options_for(k("tensor_model_parallel")).net_name.as_deref(), Some("Socket"));
        assert_eq!(c.options_for(k("hierarchical_context_parallel_1")).max_ctas, Some(2));
        assert_eq!(c.options_for(k("tensor_and_data_parallel")).split_share, Some(true));
        // dp does not configure dp_cp: Megatron configures them separately.
        assert!(c.options_for(k("data_parallel_with_cp")).is_default());
    }

    #[test]
    fn every_nccl_config_field_is_accepted_next_to_megatrons_keys() {
        let mut c = CommConfig::default();
        c.add_yaml(
            "dp: {max_ctas: 4, traffic_class: 3, comm_name: grads, collnet_enable: true, nvls_host_mode: 1, strict: true}\n\
             tp: {shrink_share: 0, graph_stream_ordering: 1, cga_cluster_size: 2}\n",
            "cfg.yaml",
        )
        .unwrap();
        let dp = c.options_for(k("data_parallel"));
        assert_eq!(dp.max_ctas, Some(4));
        assert_eq!(dp.more.get("traffic_class"), Some(&OptionValue::Int(3)));
        assert_eq!(dp.more.get("comm_name"), Some(&OptionValue::Text("grads".into())));
        assert_eq!(dp.more.get("collnet_enable"), Some(&OptionValue::Bool(true)));
        assert_eq!(dp.more.get("nvls_host_mode"), Some(&OptionValue::Int(1)));
        assert_eq!(dp.strict, Some(true));
        let tp = c.options_for(k("tensor_model_parallel"));
        assert_eq!(tp.more.get("shrink_share"), Some(&OptionValue::Bool(false)));
        assert_eq!(tp.cga_cluster_size, Some(2));
        assert!(c.fingerprint().contains("traffic_class=3"), "{}", c.fingerprint());
        // Every key of the table parses.
        for f in &CONFIG_FIELDS {
            let v = match f.kind {
                FieldKind::Int => "1",
                FieldKind::Bool => "true",
                FieldKind::Text => "x",
            };
            let mut one = CommConfig::default();
            one.add_yaml(&format!("pp: {{{}: {v}}}", f.key), "one.yaml").unwrap_or_else(|e| panic!("{}: {e}", f.key));
        }
    }

    #[test]
    fn megatron_0_19_names_map_to_the_remat_kinds() {
        let mut c = CommConfig::default();
        let yaml = "gtp_remat: {max_ctas: 1}\ngtp_remat_dp: {max_ctas: 2}\ngtp_remat_dp_cp: {max_ctas: 3}\n\
                    expt_gtp_remat: {max_ctas: 4}\ntp_ep_gtp_remat_pp: {max_ctas: 5}\nep_gtp_remat_dp: {max_ctas: 6}\n";
        c.add_yaml(yaml, "cfg.yaml").unwrap();
        for (i, kind) in [
            "gtp_weight_remat",
            "data_parallel_with_gtp_remat",
            "data_parallel_with_cp_with_gtp_remat",
            "expert_gtp_weight_remat",
            "expert_tensor_model_pipeline_parallel_with_egtp",
            "expert_data_parallel_with_gtp_remat",
        ]
        .into_iter()
        .enumerate()
        {
            assert!(crate::topology::GroupKind::from_key(kind).is_some(), "{kind}");
            assert_eq!(c.options_for(k(kind)).max_ctas, Some(i as i32 + 1), "{kind}");
        }
        assert!(c.options_for(k("data_parallel")).is_default(), "gtp_remat_dp does not configure dp");
    }

    #[test]
    fn torch_npu_hccl_keys_are_accepted_next_to_nccls() {
        let mut c = CommConfig::default();
        c.add_yaml(
            "tp: {hccl_buffer_size: 300, group_name: tp_grads, qos_traffic_class: 132, qos_service_level: 4, \
             hccl_op_expansion_mode: 2, hccl_exec_timeout: 1800, hccl_algo: 'level0:NA;level1:ring', \
             hccl_sdma_qos: 6, max_ctas: 4}\n",
            "cfg.yaml",
        )
        .unwrap();
        let tp = c.options_for(k("tensor_model_parallel"));
        assert_eq!(tp.more.get("hccl_buffer_size"), Some(&OptionValue::Int(300)));
        assert_eq!(tp.more.get("group_name"), Some(&OptionValue::Text("tp_grads".into())));
        assert_eq!(tp.more.get("hccl_algo"), Some(&OptionValue::Text("level0:NA;level1:ring".into())));
        assert_eq!(tp.more.get("hccl_sdma_qos"), Some(&OptionValue::Int(6)));
        let lines = tp.lines();
        assert!(lines.starts_with("max_ctas=4\n") && lines.contains("\nhccl_exec_timeout=1800\n"), "{lines}");
        assert_eq!(lines.lines().count(), 9, "{lines}");
        let err = |text: &str| CommConfig::default().add_yaml(text, "cfg.yaml").unwrap_err();
        assert!(err("tp: {hccl_buffer_size: big}").contains("tp: hccl_buffer_size must be an integer, got 'big'"));
        assert!(err("tp: {group_name: \"a\\nb\"}").contains("group_name must be a non-empty string without control"));
        assert!(err("tp: {net_name: \"IB\\n\"}").contains("net_name must be a string without control"));
        assert!(err("tp: {hccl_buffersize: 1}").contains("unknown option 'hccl_buffersize'"));
    }

    #[test]
    fn mindspeeds_group_buffer_string_sets_buffer_sizes_per_kind() {
        let mut c = CommConfig::default();
        c.add_yaml("tp: {hccl_buffer_size: 500}\npp: {max_ctas: 2}", "cfg.yaml").unwrap();
        c.add_group_buffers(" dp:200; tp:300 ;exp:400;dp_modulo_exp:50;cp_ring:70;pp:10;", "MCORE_HCCL_GROUP_BUFFER")
            .unwrap();
        let mb = |kind: &str| c.options_for(k(kind)).more.get("hccl_buffer_size").cloned();
        assert_eq!(mb("data_parallel"), Some(OptionValue::Int(200)));
        assert_eq!(mb("tensor_model_parallel"), Some(OptionValue::Int(500)), "the per-kind file wins");
        assert_eq!(mb("expert_model_parallel"), Some(OptionValue::Int(400)));
        assert_eq!(mb("expert_data_parallel"), Some(OptionValue::Int(50)));
        assert_eq!(mb("pipeline_model_parallel"), Some(OptionValue::Int(10)));
        assert_eq!(c.options_for(k("pipeline_model_parallel")).max_ctas, Some(2), "the kind's other options stay");
        assert_eq!(mb("context_parallel"), None, "cp_ring is MindSpeed's own group, not cp");
        let ms = |kind: MindSpeedKind| c.options_for_mindspeed(kind).more.get("hccl_buffer_size").cloned();
        assert_eq!(ms(MindSpeedKind::CpRing), Some(OptionValue::Int(70)));
        assert_eq!(ms(MindSpeedKind::CpUlysses), None);
        assert_eq!(ms(MindSpeedKind::Exp), Some(OptionValue::Int(400)), "hot-expert groups take exp's");
        let err = |text: &str| CommConfig::default().add_group_buffers(text, "MCORE_HCCL_GROUP_BUFFER").unwrap_err();
        assert!(err("dp:200;tq:300").contains("MCORE_HCCL_GROUP_BUFFER: 'tq:300' names no group kind"));
        assert!(err("dp=200").contains("'dp=200' is not name:MB"));
        assert!(err("dp:0").contains("'dp:0' has no whole number of MB from 1"));
        assert!(err("dp:lots").contains("'dp:lots' has no whole number"));
    }

    #[test]
    fn the_default_applies_under_entries() {
        let mut c = CommConfig {
            default: CommOptions { split_share: Some(true), max_ctas: Some(8), ..Default::default() },
            ..Default::default()
        };
        c.set("pp", CommOptions { max_ctas: Some(2), ..Default::default() }).unwrap();
        assert_eq!(
            c.options_for(k("pipeline_model_parallel")),
            CommOptions { max_ctas: Some(2), split_share: Some(true), ..Default::default() }
        );
        assert_eq!(c.options_for(k("context_parallel")).max_ctas, Some(8));
    }

    #[test]
    fn fingerprints_differ_when_settings_differ() {
        let mut a = CommConfig::default();
        assert_eq!(a.fingerprint(), "-");
        a.add_yaml("tp: {max_ctas: 4}", "x").unwrap();
        let mut b = CommConfig::default();
        b.add_yaml("tp: {max_ctas: 8}", "x").unwrap();
        assert_ne!(a.fingerprint(), b.fingerprint());
        assert!(a.fingerprint().contains("tensor_model_parallel:max_ctas=4"), "{}", a.fingerprint());
    }

    #[test]
    fn bad_files_are_named_precisely() {
        let err = |text: &str| {
            let mut c = CommConfig::default();
            c.add_yaml(text, "cfg.yaml").unwrap_err()
        };
        assert!(err("tq: {max_ctas: 4}").contains("'tq' is neither a group kind"));
        assert!(err("tp: {max_ctas: four}").contains("cfg.yaml: tp: max_ctas must be an integer, got 'four'"));
        assert!(err("tp: {maxctas: 4}").contains("unknown option 'maxctas'"));
        assert!(err("tp: {traffic_class: high}").contains("tp: traffic_class must be an integer, got 'high'"));
        assert!(err("tp: {collnet_enable: 2}").contains("collnet_enable must be true or false, got 2"));
        assert!(err("tp: {comm_name: ''}").contains("comm_name must be a non-empty string"));
        assert!(err("tp: {strict: yes please}").contains("strict must be true or false"));
        assert!(err("tp: [1, 2]").contains("expected a mapping of options, got a list"));
        assert!(err("- tp").contains("expected a mapping from group name"));
        assert!(err("tp: {max_ctas: 4").contains("not valid YAML"));
        assert!(err("tp: {max_ctas: 99999999999}").contains("must be an integer, got 99999999999"));
        assert!(CommConfig::default()
            .add_yaml_file(std::path::Path::new("/nonexistent/cfg.yaml"))
            .unwrap_err()
            .contains("/nonexistent/cfg.yaml"));
    }

    /// The 368-byte alias bomb that aborted the process: nine levels of nine aliases each.
    fn alias_bomb() -> String {
        let mut text = String::from("a: &a [x, x, x, x, x, x, x, x, x]\n");
        for (prev, name) in
            ["a", "b", "c", "d", "e", "f", "g", "h"].iter().zip(["b", "c", "d", "e", "f", "g", "h", "i"])
        {
            text.push_str(&format!(
                "{name}: &{name} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"
            ));
        }
        text
    }

    #[test]
    fn alias_bombs_deep_nesting_and_huge_texts_are_refused() {
        let bomb = alias_bomb();
        assert!(bomb.len() < 400, "{}", bomb.len());
        let e = CommConfig::default().add_yaml(&bomb, "bomb.yaml").unwrap_err();
        assert!(e.contains("bomb.yaml") && e.contains("alias bomb"), "{e}");
        // Through a file too (the path of the report).
        let path = std::env::temp_dir().join(format!("mcore-bomb-{}.yaml", std::process::id()));
        std::fs::write(&path, &bomb).unwrap();
        let e = CommConfig::default().add_yaml_file(&path).unwrap_err();
        std::fs::remove_file(&path).unwrap();
        assert!(e.contains("alias bomb"), "{e}");
        // Nesting that would overflow the stack of a recursive builder, flow and block style.
        let deep = |n: usize| format!("tp: {}{}", "[".repeat(n), "]".repeat(n));
        let e = CommConfig::default().add_yaml(&deep(40), "deep.yaml").unwrap_err();
        assert!(e.contains("nesting deeper than 32"), "{e}");
        let e = CommConfig::default().add_yaml(&deep(100_000), "deep.yaml").unwrap_err();
        assert!(e.starts_with("deep.yaml: "), "{e}");
        let block: String = (0..300).map(|i| format!("{}k{i}:\n", " ".repeat(i))).collect();
        let e = CommConfig::default().add_yaml(&block, "block.yaml").unwrap_err();
        assert!(e.contains("nesting deeper than 32"), "{e}");
        let huge = format!("# {}\ntp: {{max_ctas: 4}}", "x".repeat(MAX_YAML_BYTES));
        assert!(CommConfig::default().add_yaml(&huge, "big.yaml").unwrap_err().contains("bytes"));
        let e = CommConfig::default().add_yaml_file(std::path::Path::new("/dev/zero")).unwrap_err();
        assert!(e.contains("/dev/zero") && e.contains("a character device"), "{e}");
        // A regular file over the limit.
        let path = std::env::temp_dir().join(format!("mcore-big-{}.yaml", std::process::id()));
        std::fs::write(&path, &huge).unwrap();
        let e = CommConfig::default().add_yaml_file(&path).unwrap_err();
        std::fs::remove_file(&path).unwrap();
        assert!(e.contains("larger than"), "{e}");
    }

    /// Only regular files are read: a FIFO with no writer used to block init forever. The read
    /// runs in a thread with a bounded wait so that the test fails instead of hanging.
    #[test]
    fn fifos_devices_and_directories_are_refused_without_blocking() {
        let dir = std::env::temp_dir().join(format!("mcore-cfg-fifo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("nccl.yaml");
        let _ = std::fs::remove_file(&fifo);
        let status = std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
        assert!(status.success());
        let (tx, rx) = std::sync::mpsc::channel();
        let path = fifo.clone();
        std::thread::spawn(move || {
            let _ = tx.send(CommConfig::default().add_yaml_file(&path));
        });
        let got = rx.recv_timeout(std::time::Duration::from_secs(5));
        let _ = std::fs::remove_file(&fifo);
        let e = got.expect("reading a FIFO blocked").unwrap_err();
        assert!(e.contains(fifo.to_str().unwrap()) && e.contains("a FIFO") && e.contains("not a regular file"), "{e}");
        let e = CommConfig::default().add_yaml_file(&dir).unwrap_err();
        assert!(e.contains("a directory"), "{e}");
        std::fs::remove_dir(&dir).unwrap();
    }

    #[test]
    fn long_names_values_and_paths_are_cut_in_errors() {
        let long = "v".repeat(512 * 1024);
        let mut c = CommConfig::default();
        let e = c.add_yaml(&format!("tp: {{max_ctas: '{long}'}}"), "cfg.yaml").unwrap_err();
        assert!(e.len() < 1024 && e.contains("max_ctas must be an integer") && e.contains(" bytes)"), "{e}");
        let e = c.set(&long, CommOptions::default()).unwrap_err();
        assert!(e.len() < 1024 && e.contains("is neither a group kind"), "{} bytes", e.len());
        let e = long.parse::<CommStrategy>().unwrap_err();
        assert!(e.len() < 1024 && e.starts_with("communicator strategy 'vvv"), "{e}");
        let path = format!("/nonexistent/{}", "p".repeat(1 << 20));
        let e = c.add_yaml_file(std::path::Path::new(&path)).unwrap_err();
        assert!(e.len() < 1024 && e.starts_with("communicator config file /nonexistent/ppp"), "{e}");
    }

    #[test]
    fn a_shared_options_block_through_an_alias_still_works() {
        let mut c = CommConfig::default();
        c.add_yaml("tp: &o {max_ctas: 4, net_name: Socket}\ndp: *o\n", "x").unwrap();
        assert_eq!(c.options_for(k("data_parallel")), c.options_for(k("tensor_model_parallel")));
        assert_eq!(c.options_for(k("data_parallel")).max_ctas, Some(4));
    }

    #[test]
    fn strategy_names_round_trip() {
        for s in [CommStrategy::Auto, CommStrategy::Split, CommStrategy::PerGroup] {
            assert_eq!(s.to_string().parse::<CommStrategy>().unwrap(), s);
        }
        assert!("splt".parse::<CommStrategy>().unwrap_err().contains("'splt'"));
    }
}
