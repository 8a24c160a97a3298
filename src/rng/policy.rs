//! Seed policies: which seed each named stream of a rank gets.
//!
//! * `megatron`: Megatron-Core's training initializer (`s = seed + 100·pp_rank [+ 10·dp_rank]`,
//!   CPU and default device stream seeded with `s`) followed by `model_parallel_cuda_manual_seed(s)`
//!   (`data-parallel-rng = s`, `model-parallel-rng = s + 2718 + tp_rank`,
//!   `expert-parallel-rng = s + 1024 + 100·ep_rank + etp_rank`), and with Megatron-Core 0.19's
//!   weight rematerialization `gtp-remat-rng = model + 65536·(1 + gtp_rank)` (gtp > 1) and
//!   `egtp-remat-rng = expert + 32768 + 65536·(1 + egtp_rank)` (egtp > 1); `dp_rank` is then the
//!   gtp-inclusive data-parallel rank.
//! * `roll`: the same tracker offsets on the same base seed everywhere (no pipeline or
//!   data-parallel offset).
//! * `sharded:<key>,...`: the PyTorch RFC's `manual_seed(seed, sharded_groups=[...])`: seed plus
//!   this rank's linear index over the listed group kinds, first listed most significant.

pub use super::tracker::DEFAULT_STREAM;
use super::tracker::{
    Tracker, DATA_PARALLEL_RNG, EGTP_REMAT_RNG, EXPERT_PARALLEL_RNG, GTP_REMAT_RNG, MODEL_PARALLEL_RNG,
};
use super::RngError;
use std::fmt;
use std::str::FromStr;

/// A group-kind key of the topology engine (`tensor_model_parallel`, ...,
/// `hierarchical_context_parallel_<i>`).
fn is_group_kind_key(key: &str) -> bool {
    crate::topology::GroupKind::from_key(key).is_some()
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SeedPolicy {
    Megatron,
    Roll,
    /// Group-kind keys, first most significant.
    Sharded(Vec<String>),
}

impl FromStr for SeedPolicy {
    type Err = RngError;
    /// `megatron`, `roll` or `sharded:<key>,<key>...`.
    fn from_str(text: &str) -> Result<Self, RngError> {
        match text {
            "megatron" => return Ok(SeedPolicy::Megatron),
            "roll" => return Ok(SeedPolicy::Roll),
            _ => {}
        }
        let Some(list) = text.strip_prefix("sharded:") else {
            return Err(RngError::Invalid(format!(
                "unknown seed policy {}: expected megatron, roll or sharded:<group kind>,...",
                crate::quote::quoted(text)
            )));
        };
        let mut keys: Vec<String> = Vec::new();
        for key in list.split(',') {
            if !is_group_kind_key(key) {
                return Err(RngError::Invalid(format!(
                    "seed policy {}: {} is not a group kind key (e.g. pipeline_model_parallel)",
                    crate::quote::quoted(text),
                    crate::quote::quoted(key)
                )));
            }
            if keys.iter().any(|k| k == key) {
                return Err(RngError::Invalid(format!(
                    "seed policy {}: group kind '{key}' listed twice",
                    crate::quote::quoted(text)
                )));
            }
            keys.push(key.to_string());
        }
        Ok(SeedPolicy::Sharded(keys))
    }
}

impl fmt::Display for SeedPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SeedPolicy::Megatron => f.write_str("megatron"),
            SeedPolicy::Roll => f.write_str("roll"),
            SeedPolicy::Sharded(keys) => write!(f, "sharded:{}", keys.join(",")),
        }
    }
}

/// Where a rank sits in the layout: what the policies read, and what a checkpoint records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RankCoordinates {
    pub world_size: u32,
    /// Global rank.
    pub rank: u32,
    pub pp_rank: u32,
    /// Data-parallel rank without context parallelism (with Megatron-Core 0.19's gtp peers: the
    /// rank in `data_parallel_with_gtp_remat`, which is `data_parallel` when gtp = 1).
    pub dp_rank: u32,
    pub tp_rank: u32,
    pub cp_rank: u32,
    pub ep_rank: u32,
    pub etp_rank: u32,
    /// A caller-chosen digest of the whole layout (sizes, order); 0 when unknown.
    pub layout_fingerprint: u64,
    /// Rank in the gtp weight-rematerialization group (0.19); used only when `gtp_size > 1`.
    /// Not stored in RNG checkpoints (the streams' states are; the fingerprint covers gtp).
    pub gtp_rank: u32,
    /// Size of the gtp group; 0 or 1 = no `gtp-remat-rng` stream.
    pub gtp_size: u32,
    /// Rank in the expert gtp group; used only when `egtp_size > 1`.
    pub egtp_rank: u32,
    /// Size of the expert gtp group; 0 or 1 = no `egtp-remat-rng` stream.
    pub egtp_size: u32,
}

/// A rank's place in one group: its group rank and the group size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GroupPosition {
    pub rank: u32,
    pub size: u32,
}

/// Everything a policy needs besides the coordinates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeedRequest {
    pub policy: SeedPolicy,
    pub seed: i64,
    /// Megatron's `data_parallel_random_init` (only the megatron policy reads it).
    pub data_parallel_random_init: bool,
    /// For `sharded`: this rank's position in each listed group kind, in the listed order.
    pub positions: Vec<GroupPosition>,
}

/// The seeds a policy gives one rank: CPU seed, default device stream, tracker adds in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeedPlan {
    pub cpu: u64,
    pub default: u64,
    pub tracker: Vec<(&'static str, u64)>,
}

fn overflow(what: &str) -> RngError {
    RngError::Overflow(format!("{what} overflows 64 bits"))
}

/// The training wrapper's check: seed must be a positive integer (`None` prints as Python's None).
pub fn check_training_seed(seed: Option<i64>) -> Result<u64, RngError> {
    match seed {
        Some(s) if s > 0 => Ok(s as u64),
        Some(s) => Err(RngError::BadSeed(s.to_string())),
        None => Err(RngError::BadSeed("None".into())),
    }
}

/// `model_parallel_cuda_manual_seed(s)`'s three tracker seeds, in Megatron's add order.
pub fn megatron_tracker_seeds(
    s: u64,
    tp_rank: u32,
    ep_rank: u32,
    etp_rank: u32,
) -> Result<Vec<(&'static str, u64)>, RngError> {
    let model = s.checked_add(2718 + u64::from(tp_rank)).ok_or_else(|| overflow("model-parallel seed"))?;
    let expert = (100 * u64::from(ep_rank) + u64::from(etp_rank) + 1024)
        .checked_add(s)
        .ok_or_else(|| overflow("expert-parallel seed"))?;
    Ok(vec![(DATA_PARALLEL_RNG, s), (MODEL_PARALLEL_RNG, model), (EXPERT_PARALLEL_RNG, expert)])
}

/// The tracker seeds of `model_parallel_cuda_manual_seed(s)` for `coords`: the three of
/// [`megatron_tracker_seeds`], then Megatron-Core 0.19's `gtp-remat-rng` (gtp > 1) and
/// `egtp-remat-rng` (egtp > 1).
pub fn megatron_tracker_seeds_for(s: u64, c: &RankCoordinates) -> Result<Vec<(&'static str, u64)>, RngError> {
    let mut seeds = megatron_tracker_seeds(s, c.tp_rank, c.ep_rank, c.etp_rank)?;
    let (model, expert) = (seeds[1].1, seeds[2].1);
    if c.gtp_size > 1 {
        let add = 65536 * (1 + u64::from(c.gtp_rank));
        seeds.push((GTP_REMAT_RNG, model.checked_add(add).ok_or_else(|| overflow("gtp-remat seed"))?));
    }
    if c.egtp_size > 1 {
        let add = 32768 + 65536 * (1 + u64::from(c.egtp_rank));
        seeds.push((EGTP_REMAT_RNG, expert.checked_add(add).ok_or_else(|| overflow("egtp-remat seed"))?));
    }
    Ok(seeds)
}

/// Linear index of a rank over groups (first most significant); replicas get equal indices.
pub fn sharded_index(positions: &[GroupPosition]) -> Result<u64, RngError> {
    let mut index: u64 = 0;
    for p in positions {
        if p.size == 0 || p.rank >= p.size {
            return Err(RngError::Invalid(format!(
                "group position rank {} of size {} is out of range",
                p.rank, p.size
            )));
        }
        index = index
            .checked_mul(u64::from(p.size))
            .and_then(|i| i.checked_add(u64::from(p.rank)))
            .ok_or_else(|| overflow("sharded index"))?;
    }
    Ok(index)
}

/// The seeds `req.policy` gives the rank at `coords`.
pub fn seed_plan(req: &SeedRequest, coords: &RankCoordinates) -> Result<SeedPlan, RngError> {
    match &req.policy {
        SeedPolicy::Megatron => {
            let mut s = check_training_seed(Some(req.seed))?;
            s = s.checked_add(100 * u64::from(coords.pp_rank)).ok_or_else(|| overflow("seed + 100·pp_rank"))?;
            if req.data_parallel_random_init {
                s = s.checked_add(10 * u64::from(coords.dp_rank)).ok_or_else(|| overflow("seed + 10·dp_rank"))?;
            }
            let tracker = megatron_tracker_seeds_for(s, coords)?;
            Ok(SeedPlan { cpu: s, default: s, tracker })
        }
        SeedPolicy::Roll => {
            let s = non_negative(req.seed)?;
            let tracker = megatron_tracker_seeds_for(s, coords)?;
            Ok(SeedPlan { cpu: s, default: s, tracker })
        }
        SeedPolicy::Sharded(keys) => {
            if req.positions.len() != keys.len() {
                return Err(RngError::Invalid(format!(
                    "seed policy {} lists {} group kinds but {} group positions were given",
                    req.policy,
                    keys.len(),
                    req.positions.len()
                )));
            }
            let s = non_negative(req.seed)?
                .checked_add(sharded_index(&req.positions)?)
                .ok_or_else(|| overflow("seed + sharded index"))?;
            Ok(SeedPlan { cpu: s, default: s, tracker: Vec::new() })
        }
    }
}

fn non_negative(seed: i64) -> Result<u64, RngError> {
    u64::try_from(seed).map_err(|_| RngError::Invalid(format!("seed {seed} is negative")))
}

/// Seeds `tracker` like `model_parallel_cuda_manual_seed`: reset, default generator := `default`,
/// then each add in order. On a seed collision the tracker is left as Megatron leaves it.
pub fn apply_plan(plan: &SeedPlan, tracker: &mut Tracker) -> Result<(), RngError> {
    tracker.reset();
    tracker.manual_seed(plan.default);
    for (name, seed) in &plan.tracker {
        tracker.add(name, *seed)?;
    }
    Ok(())
}

/// All named stream seeds of a rank, `default` first, then the tracker streams in add order.
/// A tracker seed collision (Megatron's `seed N already exists`) is an error.
pub fn stream_seeds(req: &SeedRequest, coords: &RankCoordinates) -> Result<Vec<(String, u64)>, RngError> {
    let plan = seed_plan(req, coords)?;
    apply_plan(&plan, &mut Tracker::new())?;
    let mut out = vec![(DEFAULT_STREAM.to_string(), plan.default)];
    out.extend(plan.tracker.iter().map(|(n, s)| (n.to_string(), *s)));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_print_round_trip() {
        for text in [
            "megatron",
            "roll",
            "sharded:pipeline_model_parallel,tensor_model_parallel",
            "sharded:hierarchical_context_parallel_1",
        ] {
            assert_eq!(text.parse::<SeedPolicy>().unwrap().to_string(), text);
        }
        for bad in [
            "",
            "Megatron",
            "sharded:",
            "sharded:pp",
            "sharded:data_parallel,data_parallel",
            "sharded:hierarchical_context_parallel_x",
        ] {
            let err = bad.parse::<SeedPolicy>().unwrap_err().to_string();
            assert!(err.contains(&format!("'{bad}'")), "{err}");
        }
    }

    #[test]
    fn sharded_positions_are_checked() {
        let req = SeedRequest {
            policy: "sharded:tensor_model_parallel".parse().unwrap(),
            seed: 7,
            data_parallel_random_init: false,
            positions: vec![GroupPosition { rank: 2, size: 2 }],
        };
        let err = seed_plan(&req, &RankCoordinates::default()).unwrap_err();
        assert!(err.to_string().contains("rank 2 of size 2"), "{err}");
        let req = SeedRequest { positions: vec![], ..req };
        assert!(seed_plan(&req, &RankCoordinates::default()).unwrap_err().to_string().contains("1 group kinds but 0"));
    }

    #[test]
    fn roll_has_no_pipeline_or_dp_offset() {
        let coords = RankCoordinates { pp_rank: 3, dp_rank: 2, tp_rank: 1, ..Default::default() };
        let req =
            SeedRequest { policy: SeedPolicy::Roll, seed: 42, data_parallel_random_init: true, positions: vec![] };
        let seeds = stream_seeds(&req, &coords).unwrap();
        assert_eq!(seeds[0], ("default".to_string(), 42));
        assert_eq!(seeds[2], ("model-parallel-rng".to_string(), 42 + 2718 + 1));
        let req = SeedRequest { policy: SeedPolicy::Megatron, ..req };
        assert_eq!(stream_seeds(&req, &coords).unwrap()[0].1, 42 + 300 + 20);
        let big = SeedRequest { seed: i64::MAX, ..req.clone() };
        // i64 seeds plus u32 coordinates never overflow u64: seeds above i64::MAX are reachable
        assert_eq!(stream_seeds(&big, &coords).unwrap()[0].1, i64::MAX as u64 + 320);
        let remat = RankCoordinates { gtp_rank: 1, gtp_size: 2, egtp_rank: 1, egtp_size: 2, ep_rank: 1, ..coords };
        let seeds =
            stream_seeds(&SeedRequest { seed: 1234, data_parallel_random_init: false, ..req.clone() }, &remat).unwrap();
        let s = 1234 + 300;
        let (model, expert) = (s + 2718 + 1, s + 1024 + 100);
        assert_eq!(seeds[4], ("gtp-remat-rng".to_string(), model + 2 * 65536));
        assert_eq!(seeds[5], ("egtp-remat-rng".to_string(), expert + 32768 + 2 * 65536));
        let huge = [GroupPosition { rank: 1, size: u32::MAX }; 4];
        assert!(matches!(sharded_index(&huge), Err(RngError::Overflow(_))));
    }
}
