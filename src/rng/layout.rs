//! A rank's seed inputs read off a topology: its coordinates (what the megatron and roll
//! policies use) and its group positions for a `sharded` policy's kinds.

use super::checkpoint::fnv1a64;
use super::{stream_seeds, GroupPosition, RankCoordinates, RngError, SeedPolicy, SeedRequest};
use crate::topology::{GroupKind, Topology, TopologyError};

fn topo_err(e: TopologyError) -> RngError {
    RngError::Invalid(e.message)
}

/// A digest of the layout (sizes and order) that checkpoints record.
pub fn layout_fingerprint(topology: &Topology) -> u64 {
    let s = topology.sizes();
    fnv1a64(format!("{s:?} order={}", topology.config().order).as_bytes())
}

fn group_rank(topology: &Topology, kind: GroupKind, rank: u32) -> Result<u32, RngError> {
    Ok(topology.membership(kind, rank).map_err(topo_err)?.map(|m| m.rank).unwrap_or(0))
}

/// The coordinates of `rank` in `topology` (data-parallel rank with gtp peers, without CP).
/// A rank outside the grid (local world size) has none: it belongs to no group.
pub fn coordinates(topology: &Topology, rank: u32) -> Result<RankCoordinates, RngError> {
    use GroupKind::*;
    topology.pipeline(rank).map_err(topo_err)?;
    let position = |kind| -> Result<(u32, u32), RngError> {
        Ok(topology.membership(kind, rank).map_err(topo_err)?.map_or((0, 0), |m| (m.rank, m.size())))
    };
    let (gtp_rank, gtp_size) = position(GtpWeightRemat)?;
    let (egtp_rank, egtp_size) = position(ExpertGtpWeightRemat)?;
    Ok(RankCoordinates {
        world_size: topology.world_size(),
        rank,
        gtp_rank,
        gtp_size,
        egtp_rank,
        egtp_size,
        pp_rank: group_rank(topology, PipelineModelParallel, rank)?,
        dp_rank: group_rank(topology, DataParallelWithGtpRemat, rank)?,
        tp_rank: group_rank(topology, TensorModelParallel, rank)?,
        cp_rank: group_rank(topology, ContextParallel, rank)?,
        ep_rank: group_rank(topology, ExpertModelParallel, rank)?,
        etp_rank: group_rank(topology, ExpertTensorParallel, rank)?,
        layout_fingerprint: layout_fingerprint(topology),
    })
}

/// The request for `policy` at `rank`: for `sharded`, this rank's (group rank, size) in each
/// listed kind, first listed most significant.
pub fn seed_request(
    topology: &Topology,
    rank: u32,
    policy: &SeedPolicy,
    seed: i64,
    data_parallel_random_init: bool,
) -> Result<SeedRequest, RngError> {
    let positions = match policy {
        SeedPolicy::Sharded(keys) => keys
            .iter()
            .map(|key| {
                let kind = GroupKind::from_key(key)
                    .ok_or_else(|| RngError::Invalid(format!("seed policy {policy}: unknown group kind '{key}'")))?;
                let m = topology.membership(kind, rank).map_err(topo_err)?.ok_or_else(|| {
                    RngError::Invalid(format!("seed policy {policy}: rank {rank} is in no {key} group of this layout"))
                })?;
                Ok(GroupPosition { rank: m.rank, size: m.size() })
            })
            .collect::<Result<_, RngError>>()?,
        _ => Vec::new(),
    };
    Ok(SeedRequest { policy: policy.clone(), seed, data_parallel_random_init, positions })
}

/// Every named stream seed of `rank` (`default` first) under `policy`.
pub fn rank_stream_seeds(
    topology: &Topology,
    rank: u32,
    policy: &SeedPolicy,
    seed: i64,
    data_parallel_random_init: bool,
) -> Result<Vec<(String, u64)>, RngError> {
    let req = seed_request(topology, rank, policy, seed, data_parallel_random_init)?;
    stream_seeds(&req, &coordinates(topology, rank)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::TopologyConfig;

    /// The RFC's tables: dp=2, pp=2, tp=2 with dp outermost, then pp, then tp (Megatron order
    /// `tp-pp-dp`, first token fastest).
    #[test]
    fn rfc_sharded_tables_through_the_topology() {
        let cfg = TopologyConfig { tp: 2, pp: 2, order: "tp-pp-dp".into(), ..Default::default() };
        let topo = Topology::new(cfg, 8).unwrap();
        let offsets = |policy: &str| -> Vec<u64> {
            let p: SeedPolicy = policy.parse().unwrap();
            (0..8).map(|r| rank_stream_seeds(&topo, r, &p, 1000, false).unwrap()[0].1 - 1000).collect()
        };
        assert_eq!(offsets("sharded:pipeline_model_parallel,tensor_model_parallel"), vec![0, 1, 2, 3, 0, 1, 2, 3]);
        assert_eq!(offsets("sharded:tensor_model_parallel,pipeline_model_parallel"), vec![0, 2, 1, 3, 0, 2, 1, 3]);
    }

    #[test]
    fn megatron_seeds_differ_across_tp_and_match_across_dp() {
        let topo = Topology::new(TopologyConfig { tp: 2, pp: 2, ..Default::default() }, 8).unwrap();
        let seeds = |r| rank_stream_seeds(&topo, r, &SeedPolicy::Megatron, 1234, false).unwrap();
        let model = |r| seeds(r).into_iter().find(|(n, _)| n == "model-parallel-rng").unwrap().1;
        assert_ne!(model(0), model(1)); // tp peers
        assert_eq!(model(0), model(2)); // dp replicas (tp-cp-ep-dp-pp: dp stride 2)
        assert_eq!(seeds(0)[0], ("default".to_string(), 1234));
        assert_eq!(seeds(4)[0], ("default".to_string(), 1334)); // pp stage 1: +100
    }

    #[test]
    fn sharded_over_a_kind_the_rank_is_not_in_is_named() {
        let topo = Topology::new(TopologyConfig { pp: 4, ..Default::default() }, 4).unwrap();
        let p: SeedPolicy = "sharded:embedding".parse().unwrap();
        let e = rank_stream_seeds(&topo, 1, &p, 1, false).unwrap_err();
        assert!(e.to_string().contains("rank 1 is in no embedding group"), "{e}");
    }
}
