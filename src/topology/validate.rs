//! Validation of a layout: every configuration Megatron-Core rejects (docs/topology.md,
//! "Validation") plus what it leaves unchecked (zero sizes, overflow, ranks beyond u32).
//! Messages name the offending values.

use super::config::{Sizes, TopologyConfig};
use super::error::TopologyError;
use super::generator::{Dim, Generator};
use super::kind::GroupKind;

fn positive(name: &str, v: u32) -> Result<u64, TopologyError> {
    if v == 0 {
        return Err(TopologyError::config(format!("{name} must be >= 1, got 0")));
    }
    Ok(u64::from(v))
}

/// Checks that need no generator; returns the derived sizes.
pub(crate) fn validate(c: &TopologyConfig, total_world_size: u32) -> Result<Sizes, TopologyError> {
    positive("world size", total_world_size)?;
    let world_size = match c.local_world_size {
        None => total_world_size,
        Some(l) => {
            positive("local world size", l)?;
            if u64::from(c.rank_offset) + u64::from(l) > u64::from(total_world_size) {
                return Err(TopologyError::config(format!(
                    "rank offset {} + local world size {l} exceeds the world size {total_world_size}: \
                     the grid's ranks {}..{} are not all in 0..{}",
                    c.rank_offset,
                    c.rank_offset,
                    u64::from(c.rank_offset) + u64::from(l) - 1,
                    total_world_size - 1
                )));
            }
            l
        }
    };
    let w = u64::from(world_size);
    let gtp = positive("gtp_remat_size (gtp)", c.gtp)?;
    let egtp = positive("expert_gtp_remat_size (egtp)", c.egtp)?;
    let tp = positive("tensor-model-parallel size (tp)", c.tp)?;
    let pp = positive("pipeline-model-parallel size (pp)", c.pp)?;
    let cp = positive("context-parallel size (cp)", c.cp)?;
    let ep = positive("expert-model-parallel size (ep)", c.ep)?;
    let nd = positive("number of distributed-optimizer instances", c.dist_opt_instances)?;
    let etp = match c.etp {
        Some(v) => positive("expert tensor-parallel size (etp)", v)?,
        None => tp,
    };
    if let Some(v) = c.vpp {
        positive("virtual pipeline size (vpp)", v)?;
    }
    if c.hierarchical_cp.len() > GroupKind::MAX_HCP_LEVELS as usize {
        return Err(TopologyError::config(format!(
            "{} hierarchical context-parallel levels: at most {} are supported",
            c.hierarchical_cp.len(),
            GroupKind::MAX_HCP_LEVELS
        )));
    }
    for (i, &s) in c.hierarchical_cp.iter().enumerate() {
        positive(&format!("hierarchical context-parallel size #{i}"), s)?;
    }
    if u64::from(c.rank_offset) + w - 1 > u64::from(u32::MAX) {
        return Err(TopologyError::config(format!(
            "rank offset {} + world size {world_size} exceeds the largest rank {}",
            c.rank_offset,
            u32::MAX
        )));
    }
    // Products of three u32 fit in u128; anything above the world size fails divisibility.
    let dense = u128::from(tp) * u128::from(pp) * u128::from(cp) * u128::from(gtp);
    if u128::from(w) % dense != 0 {
        return Err(TopologyError::config(if gtp == 1 {
            format!("world size {w} is not divisible by tp·pp·cp = {tp}·{pp}·{cp} = {dense}")
        } else {
            format!("world size {w} is not divisible by tp·pp·cp·gtp = {tp}·{pp}·{cp}·{gtp} = {dense}")
        }));
    }
    let dp = w / dense as u64;
    if c.vpp.is_some() && pp <= 1 {
        return Err(TopologyError::config(format!(
            "virtual pipeline size {} needs pipeline-model-parallel size > 1, got pp = {pp}",
            c.vpp.unwrap_or(0)
        )));
    }
    let expert = u128::from(etp) * u128::from(ep) * u128::from(pp) * u128::from(egtp);
    if u128::from(w) % expert != 0 {
        return Err(TopologyError::config(if egtp == 1 {
            format!("world size {w} is not divisible by etp·ep·pp = {etp}·{ep}·{pp} = {expert}")
        } else {
            format!("world size {w} is not divisible by etp·ep·pp·egtp = {etp}·{ep}·{pp}·{egtp} = {expert}")
        }));
    }
    if (gtp > 1 || egtp > 1) && nd > 1 {
        return Err(TopologyError::config(format!(
            "gtp_remat_size {gtp} / expert_gtp_remat_size {egtp} with {nd} distributed-optimizer instances: \
             weight rematerialization needs a single instance (Megatron-Core 0.19: not yet supported)"
        )));
    }
    let edp = w / expert as u64;
    if (dp * cp) % nd != 0 {
        return Err(TopologyError::config(format!(
            "data-parallel size with context parallelism dp·cp = {dp}·{cp} = {} is not divisible by \
             the {nd} distributed-optimizer instances",
            dp * cp
        )));
    }
    if !c.hierarchical_cp.is_empty() {
        let product: u128 = c.hierarchical_cp.iter().map(|&s| u128::from(s)).product();
        if product != u128::from(cp) {
            return Err(TopologyError::config(format!(
                "hierarchical context-parallel sizes {:?} multiply to {product}, not cp = {cp}",
                c.hierarchical_cp
            )));
        }
    }
    if edp % nd != 0 {
        return Err(TopologyError::config(format!(
            "expert data-parallel size {edp} (world {w} / etp·ep·pp {expert}) is not divisible by the \
             {nd} distributed-optimizer instances"
        )));
    }
    Ok(Sizes {
        world_size,
        tp: c.tp,
        pp: c.pp,
        vpp: c.vpp,
        cp: c.cp,
        hierarchical_cp: c.hierarchical_cp.clone(),
        ep: c.ep,
        etp: etp as u32,
        dp: dp as u32,
        expert_dp: edp as u32,
        dist_opt_instances: c.dist_opt_instances,
        gtp: c.gtp,
        egtp: c.egtp,
        total_world_size,
    })
}

/// Checks between the dense and the expert generator (docs/topology.md, "Dense and expert generators").
pub(crate) fn validate_generators(
    c: &TopologyConfig,
    s: &Sizes,
    dense: &Generator,
    expert: &Generator,
) -> Result<(), TopologyError> {
    // Megatron tests the order string as given, case-sensitively.
    if s.pp > 1 && !c.order.ends_with("pp") && s.expert_dp != s.dp {
        return Err(TopologyError::config(format!(
            "order '{}' does not end with pp, so the dense and expert data-parallel sizes must be equal \
             (pp = {} > 1), got dp = {} and expert dp = {}",
            c.order, s.pp, s.dp, s.expert_dp
        )));
    }
    let (ds, es) = (dense.stride[Dim::Pp as usize], expert.stride[Dim::Pp as usize]);
    if s.pp > 1 && ds != es {
        return Err(TopologyError::config(format!(
            "order '{}': the pipeline groups of the dense layout (pp stride {ds}, from tp {} cp {} dp {}) \
             differ from those of the expert layout (pp stride {es}, from etp {} ep {} expert dp {})",
            c.order, s.tp, s.cp, s.dp, s.etp, s.ep, s.expert_dp
        )));
    }
    Ok(())
}
