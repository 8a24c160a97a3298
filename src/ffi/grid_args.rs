//! The grids of `mcore_init_args`: `mcore_grid_spec` (a name, a layout, its seed) and reading
//! the caller's array of them.

use super::args::{opt_str_arg, out_ptr, slice_arg, str_arg};
use super::topology::config::{config_from_c, mcore_topology_config, read_config, UserData};
use super::{ffi_guard, mcore_status, FfiError};
use crate::abi::read_sized;
use crate::runtime::{GridSpec, DEFAULT_GRID};
use crate::topology::TopologyConfig;
use std::ffi::c_char;
use std::sync::Arc;

/// A further grid of the job (`mcore_init_args.grids`): another layout over the same world, on
/// the same ranks (colocated) or a window of them (`rank_offset`, `local_world_size` in its
/// layout), e.g. an RL job's rollout engine beside its trainer. Fill with
/// `mcore_grid_spec_init`, then set what differs.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct mcore_grid_spec {
    /// `sizeof(mcore_grid_spec)` as compiled by the caller (set by the init function).
    pub struct_size: u32,
    /// Its name: 1 to 64 letters, digits, `_`, `-`, `.`; unique in the job. Read during the call.
    pub name: *const c_char,
    /// Its layout (a config filled by `mcore_topology_config_init`), read during the call; NULL =
    /// every size 1 over the whole world.
    pub topology: *const mcore_topology_config,
    /// Seed this grid's RNG streams from its own coordinates (default false; the policy is the
    /// job's `seed_policy`); see `mcore_grid_rng_tracker`.
    pub seed_rng: bool,
    /// The grid's base seed.
    pub seed: i64,
}

impl Default for mcore_grid_spec {
    fn default() -> Self {
        mcore_grid_spec {
            struct_size: std::mem::size_of::<Self>() as u32,
            name: std::ptr::null(),
            topology: std::ptr::null(),
            seed_rng: false,
            seed: 1234,
        }
    }
}

const GRID_SPEC_RELEASES: &[u32] = &[std::mem::size_of::<mcore_grid_spec>() as u32];

/// Fill `spec` with defaults (no name, every size 1, no seeds).
///
/// # Safety
/// `spec` is NULL or writable for `sizeof(mcore_grid_spec)` bytes.
#[no_mangle]
pub unsafe extern "C" fn mcore_grid_spec_init(spec: *mut mcore_grid_spec) -> mcore_status {
    ffi_guard(|| {
        *out_ptr(spec, "spec")? = mcore_grid_spec::default();
        Ok(())
    })
}

/// The layout at `p` (NULL: every size 1), its callbacks' user data kept in `users`.
///
/// # Safety
/// `p` is NULL or readable for its `struct_size` bytes.
unsafe fn layout(
    p: *const mcore_topology_config,
    what: &str,
    users: &mut Vec<Arc<UserData>>,
) -> Result<TopologyConfig, FfiError> {
    if p.is_null() {
        return Ok(TopologyConfig::default());
    }
    // SAFETY: non-NULL, readable per the contract.
    let c = unsafe { read_config(p, what) }?;
    let (config, user) = config_from_c(&c)?;
    users.extend(user);
    Ok(config)
}

/// The job's grids from the init args: the first grid's name (`grid_name`, NULL = `default`) and
/// the further grids (`grids`, `grids_len` pointers). With `topology` NULL and grids given, the
/// first of `grids` is the first grid (its seed, when set, is the job's `seed`); the user data of
/// their layouts' callbacks lands in `users`.
pub(super) struct Grids {
    /// The first grid's layout when it came from `grids[0]` (else the args' `topology`).
    pub first: Option<(String, TopologyConfig, Option<i64>)>,
    pub grid_name: String,
    pub more: Vec<GridSpec>,
}

/// See [`Grids`].
///
/// # Safety
/// `grids` is NULL (with `len` 0) or readable for `len` pointers, each to a whole
/// `mcore_grid_spec` whose strings and layout are valid during the call; `grid_name` is NULL or a
/// NUL-terminated string.
pub(super) unsafe fn read_grids(
    grid_name: *const c_char,
    grids: *const *const mcore_grid_spec,
    len: usize,
    topology_given: bool,
    users: &mut Vec<Arc<UserData>>,
) -> Result<Grids, FfiError> {
    // SAFETY: per the contract.
    let name = unsafe { opt_str_arg(grid_name, "grid_name") }?;
    // SAFETY: per the contract.
    let ptrs = unsafe { slice_arg(grids, len, "grids") }?;
    let mut specs = Vec::with_capacity(ptrs.len());
    for (i, &p) in ptrs.iter().enumerate() {
        let what = format!("grids[{i}]");
        if p.is_null() {
            return Err(FfiError::invalid_arg(format!("{what} is NULL")));
        }
        // SAFETY: non-NULL, readable for its struct_size per the contract.
        let c = unsafe { read_sized(p, "mcore_grid_spec", GRID_SPEC_RELEASES, mcore_grid_spec::default()) }
            .map_err(|e| FfiError::invalid_arg(format!("{what}: {e}")))?;
        // SAFETY: the name is NULL or a NUL-terminated string, per the contract.
        let gname = unsafe { str_arg(c.name, &format!("{what}.name")) }?.to_string();
        // SAFETY: the layout is NULL or readable, per the contract.
        let topology = unsafe { layout(c.topology, &format!("{what}.topology"), users) }?;
        specs.push(GridSpec { name: gname, topology, seed: c.seed_rng.then_some(c.seed) });
    }
    let first = if topology_given || specs.is_empty() {
        None
    } else {
        let g = specs.remove(0);
        if let Some(n) = name.filter(|n| *n != g.name) {
            return Err(FfiError::invalid_arg(format!(
                "grid_name '{n}' and grids[0].name '{}' both name the first grid (topology is NULL): give one",
                g.name
            )));
        }
        Some((g.name, g.topology, g.seed))
    };
    let grid_name = match &first {
        Some((n, ..)) => n.clone(),
        None => name.unwrap_or(DEFAULT_GRID).to_string(),
    };
    Ok(Grids { first, grid_name, more: specs })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;

    #[test]
    fn grids_are_read_with_the_first_from_topology_or_from_the_array() {
        let (a, b) = (CString::new("train").unwrap(), CString::new("rollout").unwrap());
        let tp4 = mcore_topology_config { tp: 4, ..Default::default() };
        let g0 = mcore_grid_spec { name: a.as_ptr(), ..Default::default() };
        let g1 = mcore_grid_spec { name: b.as_ptr(), topology: &tp4, seed_rng: true, seed: 9, ..Default::default() };
        let ptrs = [&g0 as *const _, &g1 as *const _];
        let mut users = Vec::new();
        // SAFETY: every pointer is live for the calls.
        let g = unsafe { read_grids(std::ptr::null(), ptrs.as_ptr(), 2, false, &mut users) }.unwrap();
        assert_eq!(g.first.as_ref().map(|f| f.0.as_str()), Some("train"));
        assert_eq!(
            (g.grid_name.as_str(), g.more.len(), g.more[0].topology.tp, g.more[0].seed),
            ("train", 1, 4, Some(9))
        );
        // SAFETY: as above.
        let g = unsafe { read_grids(std::ptr::null(), ptrs.as_ptr(), 2, true, &mut users) }.unwrap();
        assert!(g.first.is_none());
        assert_eq!((g.grid_name.as_str(), g.more.len()), ("default", 2));
        // SAFETY: as above.
        let e = unsafe { read_grids(b.as_ptr(), ptrs.as_ptr(), 2, false, &mut users) }.err().unwrap();
        assert!(e.message.contains("grid_name 'rollout' and grids[0].name 'train'"), "{}", e.message);
        let null = [std::ptr::null::<mcore_grid_spec>()];
        // SAFETY: as above.
        let e = unsafe { read_grids(std::ptr::null(), null.as_ptr(), 1, true, &mut users) }.err().unwrap();
        assert!(e.message.contains("grids[0] is NULL"), "{}", e.message);
        let unnamed = mcore_grid_spec::default();
        let ptrs = [&unnamed as *const _];
        // SAFETY: as above.
        let e = unsafe { read_grids(std::ptr::null(), ptrs.as_ptr(), 1, true, &mut users) }.err().unwrap();
        assert!(e.message.contains("grids[0].name is NULL"), "{}", e.message);
    }
}
