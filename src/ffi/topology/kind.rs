//! Group kinds in C: `mcore_group_kind`, whose numbers are pinned by the exhaustive matches
//! below (never by the position of a Rust table), and the name lookups.

#![allow(non_camel_case_types)]

use super::super::args::{fill_str, out_ptr, str_arg};
use super::super::{ffi_guard, mcore_status, FfiError};
use crate::topology::GroupKind;
use std::ffi::c_char;

/// The kinds of process group. Functions take a kind as `int32_t` holding one of these values;
/// hierarchical context-parallel level `i` is `MCORE_GROUP_KIND_HIERARCHICAL_CONTEXT_PARALLEL + i`.
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum mcore_group_kind {
    TensorModelParallel = 0,
    PipelineModelParallel = 1,
    DataParallel = 2,
    DataParallelWithCp = 3,
    ContextParallel = 4,
    ModelParallel = 5,
    TensorAndDataParallel = 6,
    TensorAndDataParallelWithCp = 7,
    TensorAndContextParallel = 8,
    IntraPartialDataParallelWithCp = 9,
    IntraDistributedOptimizerInstance = 10,
    Embedding = 11,
    PositionEmbedding = 12,
    ExpertModelParallel = 13,
    ExpertTensorParallel = 14,
    ExpertTensorAndModelParallel = 15,
    ExpertTensorModelPipelineParallel = 16,
    ExpertDataParallel = 17,
    IntraPartialExpertDataParallel = 18,
    InterPartialExpertDataParallel = 19,
    /// Megatron-Core 0.19 (gtp_remat_size): ranks equal in every dense coordinate but gtp.
    GtpWeightRemat = 20,
    /// Megatron-Core 0.19: data-parallel with its gtp peers (the data-parallel groups at gtp = 1).
    DataParallelWithGtpRemat = 21,
    /// Megatron-Core 0.19: data-parallel with cp and gtp peers.
    DataParallelWithCpWithGtpRemat = 22,
    /// Megatron-Core 0.19 (expert_gtp_remat_size): ranks equal in every expert coordinate but egtp.
    ExpertGtpWeightRemat = 23,
    /// Megatron-Core 0.19: an etp x ep x pp group merged with its egtp peers.
    ExpertTensorModelPipelineParallelWithEgtp = 24,
    /// Megatron-Core 0.19: expert data-parallel with its egtp peers.
    ExpertDataParallelWithGtpRemat = 25,
    /// Level 0 of hierarchical context parallelism; level i is this value + i.
    HierarchicalContextParallel = 1000,
}

const HCP_BASE: i32 = mcore_group_kind::HierarchicalContextParallel as i32;

impl mcore_group_kind {
    /// The C value of a fixed kind (`None` for the hierarchical levels, which are `HCP_BASE + i`).
    /// Exhaustive in both directions: a new `GroupKind` does not compile until it has a number.
    fn of(kind: GroupKind) -> Option<mcore_group_kind> {
        use mcore_group_kind as C;
        use GroupKind as K;
        Some(match kind {
            K::TensorModelParallel => C::TensorModelParallel,
            K::PipelineModelParallel => C::PipelineModelParallel,
            K::DataParallel => C::DataParallel,
            K::DataParallelWithCp => C::DataParallelWithCp,
            K::ContextParallel => C::ContextParallel,
            K::ModelParallel => C::ModelParallel,
            K::TensorAndDataParallel => C::TensorAndDataParallel,
            K::TensorAndDataParallelWithCp => C::TensorAndDataParallelWithCp,
            K::TensorAndContextParallel => C::TensorAndContextParallel,
            K::IntraPartialDataParallelWithCp => C::IntraPartialDataParallelWithCp,
            K::IntraDistributedOptimizerInstance => C::IntraDistributedOptimizerInstance,
            K::Embedding => C::Embedding,
            K::PositionEmbedding => C::PositionEmbedding,
            K::ExpertModelParallel => C::ExpertModelParallel,
            K::ExpertTensorParallel => C::ExpertTensorParallel,
            K::ExpertTensorAndModelParallel => C::ExpertTensorAndModelParallel,
            K::ExpertTensorModelPipelineParallel => C::ExpertTensorModelPipelineParallel,
            K::ExpertDataParallel => C::ExpertDataParallel,
            K::IntraPartialExpertDataParallel => C::IntraPartialExpertDataParallel,
            K::InterPartialExpertDataParallel => C::InterPartialExpertDataParallel,
            K::GtpWeightRemat => C::GtpWeightRemat,
            K::DataParallelWithGtpRemat => C::DataParallelWithGtpRemat,
            K::DataParallelWithCpWithGtpRemat => C::DataParallelWithCpWithGtpRemat,
            K::ExpertGtpWeightRemat => C::ExpertGtpWeightRemat,
            K::ExpertTensorModelPipelineParallelWithEgtp => C::ExpertTensorModelPipelineParallelWithEgtp,
            K::ExpertDataParallelWithGtpRemat => C::ExpertDataParallelWithGtpRemat,
            K::HierarchicalContextParallel(_) => return None,
        })
    }

    #[cfg(test)]
    fn kind(self) -> GroupKind {
        use mcore_group_kind as C;
        use GroupKind as K;
        match self {
            C::TensorModelParallel => K::TensorModelParallel,
            C::PipelineModelParallel => K::PipelineModelParallel,
            C::DataParallel => K::DataParallel,
            C::DataParallelWithCp => K::DataParallelWithCp,
            C::ContextParallel => K::ContextParallel,
            C::ModelParallel => K::ModelParallel,
            C::TensorAndDataParallel => K::TensorAndDataParallel,
            C::TensorAndDataParallelWithCp => K::TensorAndDataParallelWithCp,
            C::TensorAndContextParallel => K::TensorAndContextParallel,
            C::IntraPartialDataParallelWithCp => K::IntraPartialDataParallelWithCp,
            C::IntraDistributedOptimizerInstance => K::IntraDistributedOptimizerInstance,
            C::Embedding => K::Embedding,
            C::PositionEmbedding => K::PositionEmbedding,
            C::ExpertModelParallel => K::ExpertModelParallel,
            C::ExpertTensorParallel => K::ExpertTensorParallel,
            C::ExpertTensorAndModelParallel => K::ExpertTensorAndModelParallel,
            C::ExpertTensorModelPipelineParallel => K::ExpertTensorModelPipelineParallel,
            C::ExpertDataParallel => K::ExpertDataParallel,
            C::IntraPartialExpertDataParallel => K::IntraPartialExpertDataParallel,
            C::InterPartialExpertDataParallel => K::InterPartialExpertDataParallel,
            C::GtpWeightRemat => K::GtpWeightRemat,
            C::DataParallelWithGtpRemat => K::DataParallelWithGtpRemat,
            C::DataParallelWithCpWithGtpRemat => K::DataParallelWithCpWithGtpRemat,
            C::ExpertGtpWeightRemat => K::ExpertGtpWeightRemat,
            C::ExpertTensorModelPipelineParallelWithEgtp => K::ExpertTensorModelPipelineParallelWithEgtp,
            C::ExpertDataParallelWithGtpRemat => K::ExpertDataParallelWithGtpRemat,
            C::HierarchicalContextParallel => K::HierarchicalContextParallel(0),
        }
    }
}

/// The kind a C value names; INVALID_ARGUMENT naming the value when it names none (a number at
/// or above `HCP_BASE + GroupKind::MAX_HCP_LEVELS` is no level, not a level no layout has).
pub(crate) fn kind_from_c(kind: i32) -> Result<GroupKind, FfiError> {
    let fixed = || GroupKind::FIXED.into_iter().find(|&k| mcore_group_kind::of(k).map(|c| c as i32) == Some(kind));
    let level = || {
        let level = u32::try_from(kind.checked_sub(HCP_BASE)?).ok()?;
        (level < GroupKind::MAX_HCP_LEVELS).then_some(GroupKind::HierarchicalContextParallel(level))
    };
    fixed().or_else(level).ok_or_else(|| {
        FfiError::invalid_arg(format!(
            "unknown group kind {kind} (see mcore_group_kind: 0-{} or hierarchical levels {HCP_BASE}-{})",
            GroupKind::FIXED.len() - 1,
            HCP_BASE + GroupKind::MAX_HCP_LEVELS as i32 - 1
        ))
    })
}

/// The C value of `kind`.
pub(crate) fn kind_to_c(kind: GroupKind) -> i32 {
    match (kind, mcore_group_kind::of(kind)) {
        (GroupKind::HierarchicalContextParallel(i), _) => HCP_BASE.saturating_add(i32::try_from(i).unwrap_or(i32::MAX)),
        (_, Some(c)) => c as i32,
        (_, None) => unreachable!("every fixed kind has a number"),
    }
}

/// The kind for a key such as "data_parallel_with_cp" or "hierarchical_context_parallel_1";
/// NOT_FOUND for an unknown key.
///
/// # Safety
/// Pointer arguments are NULL (reported as INVALID_ARGUMENT) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn mcore_group_kind_from_name(name: *const c_char, out_kind: *mut i32) -> mcore_status {
    ffi_guard(|| {
        let out = out_ptr(out_kind, "out_kind")?;
        // SAFETY: NULL or a NUL-terminated string per the contract.
        let kind: GroupKind = unsafe { str_arg(name, "name") }?.parse()?;
        *out = kind_to_c(kind);
        Ok(())
    })
}

/// Write the key of `kind` (NUL-terminated) into `buf`; `*out_len` = bytes needed including the
/// NUL (also on BUFFER_TOO_SMALL).
///
/// # Safety
/// Pointer arguments are NULL (reported as INVALID_ARGUMENT) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn mcore_group_kind_name(
    kind: i32,
    buf: *mut c_char,
    len: usize,
    out_len: *mut usize,
) -> mcore_status {
    ffi_guard(|| fill_str(&kind_from_c(kind)?.key(), buf, len, out_len, "name"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_numbers_round_trip_and_are_pinned() {
        for k in GroupKind::FIXED {
            let c = kind_to_c(k);
            assert_eq!(kind_from_c(c).unwrap(), k);
            assert_eq!(mcore_group_kind::of(k).unwrap().kind(), k);
        }
        // Spot checks of the published numbers (include/mcore_init.h).
        assert_eq!(kind_to_c(GroupKind::TensorModelParallel), 0);
        assert_eq!(kind_to_c(GroupKind::InterPartialExpertDataParallel), 19);
        assert_eq!(kind_to_c(GroupKind::ExpertDataParallelWithGtpRemat), 25);
        assert_eq!(kind_to_c(GroupKind::HierarchicalContextParallel(2)), 1002);
        assert!(kind_from_c(26).is_err() && kind_from_c(-1).is_err() && kind_from_c(999).is_err());
        let last = HCP_BASE + GroupKind::MAX_HCP_LEVELS as i32 - 1;
        assert_eq!(kind_from_c(last).unwrap(), GroupKind::HierarchicalContextParallel(GroupKind::MAX_HCP_LEVELS - 1));
        for unknown in [last + 1, 9999, i32::MAX, i32::MIN] {
            let e = kind_from_c(unknown).unwrap_err();
            assert_eq!(e.status, mcore_status::InvalidArgument);
            assert!(e.message.contains(&format!("unknown group kind {unknown}")), "{}", e.message);
        }
    }
}
