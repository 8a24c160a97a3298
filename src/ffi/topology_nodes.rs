//! C API of the node placement (`topology::node_placement`): for machines of `gpus_per_node`
//! GPUs, how many groups of each kind stay inside one node, and the warnings about
//! tensor-, context- and expert-tensor-parallel groups that cross nodes.

#![allow(non_camel_case_types)]

use super::args::{fill_items, fill_str, out_ptr};
use super::error::FfiError;
use super::ffi_guard;
use super::topology::{kind_to_c, mcore_topology, topo};
use crate::abi::mcore_status;
use crate::topology::node_placement;
use std::ffi::c_char;

/// `first_crossing` of a kind none of whose groups cross nodes.
pub const MCORE_NO_GROUP: u64 = u64::MAX;

/// How the groups of one kind sit on nodes.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct mcore_kind_placement {
    /// The kind (`mcore_group_kind` value).
    pub kind: i32,
    /// Number of groups of the kind.
    pub groups: u64,
    /// Groups whose members all sit on one node.
    pub local: u64,
    /// Groups spanning more than one node.
    pub crossing: u64,
    /// Index of the first crossing group, `MCORE_NO_GROUP` when none crosses.
    pub first_crossing: u64,
    /// Most nodes one group of the kind spans.
    pub max_nodes: u64,
}

/// The placement of every kind of the layout on nodes of `gpus_per_node` GPUs (global rank r on
/// node r / gpus_per_node), one entry per kind in `mcore_topology_kind_at` order, into `buf` of
/// `len` entries; `*out_len` = entries (also the size needed on BUFFER_TOO_SMALL).
/// `out_warnings` (may be NULL) receives the number of warnings (`mcore_topology_node_warning`).
/// INVALID_CONFIG for `gpus_per_node` 0; OUT_OF_RANGE for a layout with more than 2^24 groups.
///
/// # Safety
/// Pointer arguments are NULL (reported as INVALID_ARGUMENT, except `out_warnings`) or valid as
/// described above.
#[no_mangle]
pub unsafe extern "C" fn mcore_topology_node_placement(
    t: *const mcore_topology,
    gpus_per_node: u32,
    buf: *mut mcore_kind_placement,
    len: usize,
    out_len: *mut usize,
    out_warnings: *mut usize,
) -> mcore_status {
    ffi_guard(|| {
        let t = topo(t)?;
        let p = node_placement(&t, gpus_per_node)?;
        let entries = p.kinds.iter().map(|k| mcore_kind_placement {
            kind: kind_to_c(k.kind),
            groups: k.groups,
            local: k.local,
            crossing: k.crossing,
            first_crossing: k.first_crossing.unwrap_or(MCORE_NO_GROUP),
            max_nodes: k.max_nodes,
        });
        fill_items(entries, buf, len, out_len, |len, need| {
            format!("buffer holds {len} entries, the layout has {need} kinds")
        })?;
        // SAFETY: NULL or writable per the contract.
        if let Some(w) = unsafe { out_warnings.as_mut() } {
            *w = p.warnings.len();
        }
        Ok(())
    })
}

/// Warning `index` of the node placement on nodes of `gpus_per_node` GPUs: its kind and its
/// text (NUL-terminated, naming an `--order` or sizes that keep the groups inside nodes when
/// one exists) in `buf`; `*out_len` = bytes needed including the NUL (also on
/// BUFFER_TOO_SMALL). OUT_OF_RANGE when `index` >= the number of warnings.
///
/// # Safety
/// Pointer arguments are NULL (reported as INVALID_ARGUMENT) or valid as described above.
#[no_mangle]
pub unsafe extern "C" fn mcore_topology_node_warning(
    t: *const mcore_topology,
    gpus_per_node: u32,
    index: usize,
    out_kind: *mut i32,
    buf: *mut c_char,
    len: usize,
    out_len: *mut usize,
) -> mcore_status {
    ffi_guard(|| {
        let t = topo(t)?;
        let out_kind = out_ptr(out_kind, "out_kind")?;
        let p = node_placement(&t, gpus_per_node)?;
        let w = p.warnings.get(index).ok_or_else(|| {
            FfiError::new(
                mcore_status::OutOfRange,
                format!("warning index {index} out of range: {} warnings", p.warnings.len()),
            )
        })?;
        fill_str(&w.message, buf, len, out_len, "warning")?;
        *out_kind = kind_to_c(w.kind);
        Ok(())
    })
}
