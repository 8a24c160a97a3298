//! Megatron-Core-style getters of the initialized process (`mcore_get_tensor_model_parallel_rank`,
//! `mcore_is_pipeline_first_stage`, ...): plain `int32_t` results, -1 on error with the last
//! error set, as a trainer ported from Python expects.

use super::runtime::with_rt;
use super::{ffi_guard, mcore_status, FfiError};
use crate::runtime::{LiveGroup, Runtime};
use crate::topology::{GroupKind, RankView};

/// Run a getter: its value, or -1 with the last error set (not initialized, not a member).
fn getter(f: impl FnOnce(&Runtime) -> Result<i64, FfiError>) -> i32 {
    let mut value = -1i32;
    let status = ffi_guard(|| {
        value = with_rt(f)? as i32;
        Ok(())
    });
    if status == mcore_status::Ok {
        value
    } else {
        -1
    }
}

fn member(rt: &Runtime, kind: GroupKind) -> Result<&LiveGroup, FfiError> {
    rt.group(kind).ok_or_else(|| {
        FfiError::new(
            mcore_status::NotMember,
            format!("rank {} is not a member of any {} group", rt.env.rank, kind.key()),
        )
    })
}

/// This rank's place in the default grid, or `NotMember` naming the grid's window.
fn view(rt: &Runtime) -> Result<&RankView, FfiError> {
    rt.view().ok_or_else(|| {
        let t = rt.topology();
        FfiError::new(
            mcore_status::NotMember,
            format!(
                "rank {} is outside the default grid '{}' (ranks {}..{})",
                rt.env.rank,
                rt.grids[0].name,
                t.rank_offset(),
                u64::from(t.rank_offset()) + u64::from(t.world_size()) - 1
            ),
        )
    })
}

/// Which number of a rank's group a getter returns.
enum GroupField {
    Rank,
    Size,
    First,
}

/// One Megatron-style getter: the field of this rank's group of `kind`, or -1 (last error set).
fn group_getter(kind: GroupKind, field: GroupField) -> i32 {
    getter(|rt| {
        let g = member(rt, kind)?;
        Ok(match field {
            GroupField::Rank => g.group_rank as i64,
            GroupField::Size => g.plan.members.len() as i64,
            GroupField::First => g.plan.members[0] as i64,
        })
    })
}

// Written out one by one (not by a macro) so that cbindgen puts every getter in the header.
/// This rank's index in its `tensor_model_parallel` group (Megatron's `get_tensor_model_parallel_rank`); -1 when not
/// initialized or not a member (see `mcore_last_error_message`).
#[no_mangle]
pub extern "C" fn mcore_get_tensor_model_parallel_rank() -> i32 {
    group_getter(GroupKind::TensorModelParallel, GroupField::Rank)
}

/// Size of this rank's `tensor_model_parallel` group; -1 when not initialized.
#[no_mangle]
pub extern "C" fn mcore_get_tensor_model_parallel_world_size() -> i32 {
    group_getter(GroupKind::TensorModelParallel, GroupField::Size)
}

/// Global rank of the first member of this rank's `tensor_model_parallel` group; -1 when not initialized.
#[no_mangle]
pub extern "C" fn mcore_get_tensor_model_parallel_src_rank() -> i32 {
    group_getter(GroupKind::TensorModelParallel, GroupField::First)
}

/// This rank's index in its `pipeline_model_parallel` group (Megatron's `get_pipeline_model_parallel_rank`); -1 when not
/// initialized or not a member (see `mcore_last_error_message`).
#[no_mangle]
pub extern "C" fn mcore_get_pipeline_model_parallel_rank() -> i32 {
    group_getter(GroupKind::PipelineModelParallel, GroupField::Rank)
}

/// Size of this rank's `pipeline_model_parallel` group; -1 when not initialized.
#[no_mangle]
pub extern "C" fn mcore_get_pipeline_model_parallel_world_size() -> i32 {
    group_getter(GroupKind::PipelineModelParallel, GroupField::Size)
}

/// Global rank of the first member of this rank's `pipeline_model_parallel` group; -1 when not initialized.
#[no_mangle]
pub extern "C" fn mcore_get_pipeline_model_parallel_first_rank() -> i32 {
    group_getter(GroupKind::PipelineModelParallel, GroupField::First)
}

/// This rank's index in its `data_parallel` group (Megatron's `get_data_parallel_rank`); -1 when not
/// initialized or not a member (see `mcore_last_error_message`).
#[no_mangle]
pub extern "C" fn mcore_get_data_parallel_rank() -> i32 {
    group_getter(GroupKind::DataParallel, GroupField::Rank)
}

/// Size of this rank's `data_parallel` group; -1 when not initialized.
#[no_mangle]
pub extern "C" fn mcore_get_data_parallel_world_size() -> i32 {
    group_getter(GroupKind::DataParallel, GroupField::Size)
}

/// Global rank of the first member of this rank's `data_parallel` group; -1 when not initialized.
#[no_mangle]
pub extern "C" fn mcore_get_data_parallel_src_rank() -> i32 {
    group_getter(GroupKind::DataParallel, GroupField::First)
}

/// This rank's index in its `data_parallel_with_cp` group (Megatron's `get_data_parallel_rank_with_cp`); -1 when not
/// initialized or not a member (see `mcore_last_error_message`).
#[no_mangle]
pub extern "C" fn mcore_get_data_parallel_rank_with_cp() -> i32 {
    group_getter(GroupKind::DataParallelWithCp, GroupField::Rank)
}

/// Size of this rank's `data_parallel_with_cp` group; -1 when not initialized.
#[no_mangle]
pub extern "C" fn mcore_get_data_parallel_world_size_with_cp() -> i32 {
    group_getter(GroupKind::DataParallelWithCp, GroupField::Size)
}

/// Global rank of the first member of this rank's `data_parallel_with_cp` group; -1 when not initialized.
#[no_mangle]
pub extern "C" fn mcore_get_data_parallel_src_rank_with_cp() -> i32 {
    group_getter(GroupKind::DataParallelWithCp, GroupField::First)
}

/// This rank's index in its `context_parallel` group (Megatron's `get_context_parallel_rank`); -1 when not
/// initialized or not a member (see `mcore_last_error_message`).
#[no_mangle]
pub extern "C" fn mcore_get_context_parallel_rank() -> i32 {
    group_getter(GroupKind::ContextParallel, GroupField::Rank)
}

/// Size of this rank's `context_parallel` group; -1 when not initialized.
#[no_mangle]
pub extern "C" fn mcore_get_context_parallel_world_size() -> i32 {
    group_getter(GroupKind::ContextParallel, GroupField::Size)
}

/// Global rank of the first member of this rank's `context_parallel` group; -1 when not initialized.
#[no_mangle]
pub extern "C" fn mcore_get_context_parallel_src_rank() -> i32 {
    group_getter(GroupKind::ContextParallel, GroupField::First)
}

/// This rank's index in its `model_parallel` group (Megatron's `get_model_parallel_rank`); -1 when not
/// initialized or not a member (see `mcore_last_error_message`).
#[no_mangle]
pub extern "C" fn mcore_get_model_parallel_rank() -> i32 {
    group_getter(GroupKind::ModelParallel, GroupField::Rank)
}

/// Size of this rank's `model_parallel` group; -1 when not initialized.
#[no_mangle]
pub extern "C" fn mcore_get_model_parallel_world_size() -> i32 {
    group_getter(GroupKind::ModelParallel, GroupField::Size)
}

/// Global rank of the first member of this rank's `model_parallel` group; -1 when not initialized.
#[no_mangle]
pub extern "C" fn mcore_get_model_parallel_src_rank() -> i32 {
    group_getter(GroupKind::ModelParallel, GroupField::First)
}

/// This rank's index in its `expert_model_parallel` group (Megatron's `get_expert_model_parallel_rank`); -1 when not
/// initialized or not a member (see `mcore_last_error_message`).
#[no_mangle]
pub extern "C" fn mcore_get_expert_model_parallel_rank() -> i32 {
    group_getter(GroupKind::ExpertModelParallel, GroupField::Rank)
}

/// Size of this rank's `expert_model_parallel` group; -1 when not initialized.
#[no_mangle]
pub extern "C" fn mcore_get_expert_model_parallel_world_size() -> i32 {
    group_getter(GroupKind::ExpertModelParallel, GroupField::Size)
}

/// Global rank of the first member of this rank's `expert_model_parallel` group; -1 when not initialized.
#[no_mangle]
pub extern "C" fn mcore_get_expert_model_parallel_src_rank() -> i32 {
    group_getter(GroupKind::ExpertModelParallel, GroupField::First)
}

/// This rank's index in its `expert_tensor_parallel` group (Megatron's `get_expert_tensor_parallel_rank`); -1 when not
/// initialized or not a member (see `mcore_last_error_message`).
#[no_mangle]
pub extern "C" fn mcore_get_expert_tensor_parallel_rank() -> i32 {
    group_getter(GroupKind::ExpertTensorParallel, GroupField::Rank)
}

/// Size of this rank's `expert_tensor_parallel` group; -1 when not initialized.
#[no_mangle]
pub extern "C" fn mcore_get_expert_tensor_parallel_world_size() -> i32 {
    group_getter(GroupKind::ExpertTensorParallel, GroupField::Size)
}

/// Global rank of the first member of this rank's `expert_tensor_parallel` group; -1 when not initialized.
#[no_mangle]
pub extern "C" fn mcore_get_expert_tensor_parallel_src_rank() -> i32 {
    group_getter(GroupKind::ExpertTensorParallel, GroupField::First)
}

/// This rank's index in its `expert_data_parallel` group (Megatron's `get_expert_data_parallel_rank`); -1 when not
/// initialized or not a member (see `mcore_last_error_message`).
#[no_mangle]
pub extern "C" fn mcore_get_expert_data_parallel_rank() -> i32 {
    group_getter(GroupKind::ExpertDataParallel, GroupField::Rank)
}

/// Size of this rank's `expert_data_parallel` group; -1 when not initialized.
#[no_mangle]
pub extern "C" fn mcore_get_expert_data_parallel_world_size() -> i32 {
    group_getter(GroupKind::ExpertDataParallel, GroupField::Size)
}

/// Global rank of the first member of this rank's `expert_data_parallel` group; -1 when not initialized.
#[no_mangle]
pub extern "C" fn mcore_get_expert_data_parallel_src_rank() -> i32 {
    group_getter(GroupKind::ExpertDataParallel, GroupField::First)
}

/// Global rank of the last pipeline stage of this rank's pipeline; -1 when not initialized.
#[no_mangle]
pub extern "C" fn mcore_get_pipeline_model_parallel_last_rank() -> i32 {
    getter(|rt| Ok(view(rt)?.pipeline.last as i64))
}

/// Global rank of the next pipeline stage (wraps around); -1 when not initialized.
#[no_mangle]
pub extern "C" fn mcore_get_pipeline_model_parallel_next_rank() -> i32 {
    getter(|rt| Ok(view(rt)?.pipeline.next as i64))
}

/// Global rank of the previous pipeline stage (wraps around); -1 when not initialized.
#[no_mangle]
pub extern "C" fn mcore_get_pipeline_model_parallel_prev_rank() -> i32 {
    getter(|rt| Ok(view(rt)?.pipeline.prev as i64))
}

/// Virtual pipeline size (0 without an interleaved schedule); -1 when not initialized.
#[no_mangle]
pub extern "C" fn mcore_get_virtual_pipeline_model_parallel_world_size() -> i32 {
    getter(|rt| Ok(rt.topology().sizes().vpp.unwrap_or(0) as i64))
}

/// Stage tests of this rank: `vp_stage` -1 ignores virtual stages (Megatron's
/// `ignore_virtual=True`); otherwise the virtual stage to test. 1 = yes, 0 = no, -1 = error.
fn stage_test(
    f: impl FnOnce(&Runtime, Option<u32>) -> Result<bool, crate::topology::TopologyError>,
    vp_stage: i32,
) -> i32 {
    getter(|rt| {
        let vp = match vp_stage {
            -1 => None,
            v if v >= 0 => Some(v as u32),
            v => return Err(FfiError::invalid_arg(format!("vp_stage {v} must be -1 (ignore) or >= 0"))),
        };
        Ok(f(rt, vp)? as i64)
    })
}

/// Whether this rank is on the first pipeline stage (and on virtual stage 0 when `vp_stage` is
/// given): 1, 0, or -1 on error.
#[no_mangle]
pub extern "C" fn mcore_is_pipeline_first_stage(vp_stage: i32) -> i32 {
    stage_test(|rt, vp| rt.topology().is_pipeline_first_stage(rt.env.rank, vp), vp_stage)
}

/// Whether this rank is on the last pipeline stage (and on the last virtual stage when
/// `vp_stage` is given): 1, 0, or -1 on error.
#[no_mangle]
pub extern "C" fn mcore_is_pipeline_last_stage(vp_stage: i32) -> i32 {
    stage_test(|rt, vp| rt.topology().is_pipeline_last_stage(rt.env.rank, vp), vp_stage)
}

/// Whether this rank is in the embedding group (Megatron's `is_rank_in_embedding_group`): 1, 0, or -1.
#[no_mangle]
pub extern "C" fn mcore_is_rank_in_embedding_group(vp_stage: i32) -> i32 {
    stage_test(|rt, vp| rt.topology().is_rank_in_embedding_group(rt.env.rank, vp), vp_stage)
}
