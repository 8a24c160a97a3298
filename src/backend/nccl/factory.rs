//! NCCL as the runtime sees a backend: a [`CommFactory`] that creates a communicator (one group's,
//! or the world's for the split strategy) from a unique id shared through the group's store, and
//! [`Communicator`] for [`NcclComm`], which splits with `ncclCommSplit`. Per-kind options become
//! the `ncclConfig_t` of the kind's communicators.
//!
//! Creation is concurrent unless `MCORE_NCCL_CONCURRENT=0`: per group, every group's id is shared
//! first and all inits run inside one `ncclGroupStart`/`ncclGroupEnd`; split, each kind's split
//! returns once the parent finished it, so the children initialize while the next kinds split.
//! The runtime then waits for each communicator ([`Communicator::wait_ready`]).
#![forbid(unsafe_code)]

use super::comm::{Device, InitSpec, NcclComm};
use super::config::NcclConfig;
use super::error::NcclError;
use super::exchange::{share_unique_id, UNIQUE_ID_KEY};
use super::loader::nccl::NcclLibrary;
use super::unique_id::NcclUniqueId;
use super::version::Feature;
use crate::backend::options::{hccl_option, OptionValue};
use crate::backend::seam::{CommError, CommErrorKind, CommFactory, CommMemory, Communicator, GroupRequest};
use crate::backend::CommOptions;
use crate::backend::GroupInfo;
use crate::store::Store;
use std::ffi::c_void;
use std::sync::Arc;

/// Creates NCCL communicators on one device with one config.
pub struct NcclFactory {
    lib: &'static NcclLibrary,
    device: Device,
    config: NcclConfig,
    /// Create all of a rank's communicators together (the default) or one by one.
    concurrent: bool,
    /// Ranks per root of a scalable world init; 0: never scalable.
    ranks_per_root: u32,
}

/// `MCORE_NCCL_RANKS_PER_ROOT`: a world communicator with more ranks than this is created by
/// `ncclCommInitRankScalable` (NCCL 2.23+) with one root per this many ranks; `0` turns it off.
pub const RANKS_PER_ROOT_ENV: &str = "MCORE_NCCL_RANKS_PER_ROOT";
/// The default ranks per root (torch's `TORCH_NCCL_RANKS_PER_ROOT` default too).
pub const DEFAULT_RANKS_PER_ROOT: u32 = 128;
/// `MCORE_NCCL_PSK_FILE`: a file holding the pre-shared key NCCL (2.32.3+) encrypts its own
/// sockets with (`ncclSetEncryption`, applied when the factory is made, before any unique id).
pub const PSK_FILE_ENV: &str = "MCORE_NCCL_PSK_FILE";
/// Most bytes of the file named by [`PSK_FILE_ENV`] (a key is a few dozen bytes); read by
/// [`crate::input_file::read_bounded`].
pub const MAX_PSK_FILE_BYTES: usize = 4096;
/// The store key under which root `i` of a scalable init publishes its unique id.
pub fn root_id_key(i: u32) -> String {
    format!("{UNIQUE_ID_KEY}_root_{i}")
}

/// The roots of a scalable init of `nranks` ranks with `per_root` ranks per root: ranks 0,
/// `per_root`, `2*per_root`, ... (one per started block of `per_root` ranks).
pub fn scalable_roots(nranks: u32, per_root: u32) -> Vec<u32> {
    if per_root == 0 {
        return vec![0];
    }
    (0..nranks.div_ceil(per_root)).map(|i| i * per_root).collect()
}

fn ranks_per_root_from_env() -> Result<u32, NcclError> {
    match std::env::var(RANKS_PER_ROOT_ENV) {
        Err(_) => Ok(DEFAULT_RANKS_PER_ROOT),
        Ok(v) => v.trim().parse::<u32>().map_err(|_| {
            NcclError::invalid(format!(
                "{RANKS_PER_ROOT_ENV}={} is not a number of ranks (0 turns scalable init off)",
                crate::quote::debug(&v)
            ))
        }),
    }
}

/// Device `device` if given, else device `LOCAL_RANK` (0 when unset); the error names a value
/// that is no device ordinal.
pub fn device_or_local_rank(device: Option<u32>) -> Result<Device, NcclError> {
    let ordinal = match (device, std::env::var("LOCAL_RANK")) {
        (Some(d), _) => {
            i32::try_from(d).map_err(|_| NcclError::invalid(format!("device {d} is not a CUDA device ordinal")))?
        }
        (None, Ok(v)) => v.trim().parse::<i32>().map_err(|_| {
            NcclError::invalid(format!("LOCAL_RANK={} is not a device ordinal", crate::quote::debug(&v)))
        })?,
        (None, Err(_)) => 0,
    };
    Ok(Device::Ordinal(ordinal))
}

/// `MCORE_NCCL_CONCURRENT`: `0` creates communicators one by one (as Megatron does), anything
/// else (or unset) together.
pub const CONCURRENT_ENV: &str = "MCORE_NCCL_CONCURRENT";

impl NcclFactory {
    /// Concurrent creation unless `MCORE_NCCL_CONCURRENT=0`.
    pub fn new(lib: &'static NcclLibrary, device: Device, config: NcclConfig) -> Self {
        let concurrent = std::env::var(CONCURRENT_ENV).map_or(true, |v| v.trim() != "0");
        let ranks_per_root = ranks_per_root_from_env().unwrap_or(DEFAULT_RANKS_PER_ROOT);
        NcclFactory { lib, device, config, concurrent, ranks_per_root }
    }

    /// Ranks per root of a scalable world init (0: never scalable).
    pub fn with_ranks_per_root(mut self, per_root: u32) -> Self {
        self.ranks_per_root = per_root;
        self
    }

    pub fn ranks_per_root(&self) -> u32 {
        self.ranks_per_root
    }

    /// Encrypt NCCL's own sockets with the pre-shared key `psk` (`ncclSetEncryption`, NCCL
    /// 2.32.3+; below it an error naming the loaded version). Must come before this process's
    /// first unique id.
    pub fn with_encryption_key(self, psk: &str) -> Result<Self, NcclError> {
        self.lib.set_encryption_psk(psk)?;
        Ok(self)
    }

    /// Choose concurrent (`true`) or one-by-one creation.
    pub fn with_concurrency(mut self, concurrent: bool) -> Self {
        self.concurrent = concurrent;
        self
    }

    pub fn concurrent(&self) -> bool {
        self.concurrent
    }

    /// The process-wide library, default config, on `device` if given, else device `LOCAL_RANK`
    /// (0 when unset).
    pub fn from_env(device: Option<u32>) -> Result<Self, NcclError> {
        let device = device_or_local_rank(device)?;
        ranks_per_root_from_env()?;
        let factory = Self::new(NcclLibrary::global()?, device, NcclConfig::default());
        match std::env::var_os(PSK_FILE_ENV) {
            None => Ok(factory),
            Some(path) => {
                let shown = crate::quote::clip(&path.to_string_lossy());
                let what = format!("{PSK_FILE_ENV}={shown}");
                let bytes = crate::input_file::read_bounded(std::path::Path::new(&path), &what, MAX_PSK_FILE_BYTES)
                    .map_err(NcclError::invalid)?;
                let text =
                    String::from_utf8(bytes).map_err(|_| NcclError::invalid(format!("{what}: not UTF-8 text")))?;
                factory.with_encryption_key(text.trim_end_matches(['\n', '\r']))
            }
        }
    }

    /// World `world` by `ncclCommInitRankScalable`: roots [`scalable_roots`] each make a unique
    /// id and publish it under [`root_id_key`]; every rank reads all of them (the same list in
    /// root order) within `world.timeout`.
    fn create_scalable(
        &self,
        world: &GroupInfo,
        config: &NcclConfig,
        store: &dyn Store,
    ) -> Result<NcclComm, NcclError> {
        let roots = scalable_roots(world.size(), self.ranks_per_root);
        let mine = roots.iter().position(|&r| r == world.group_rank);
        if let Some(i) = mine {
            let id = self.lib.unique_id()?;
            let key = root_id_key(i as u32);
            store.set(&key, id.as_bytes()).map_err(|error| NcclError::Store {
                what: format!("publishing root {i}'s NCCL unique id of {} under '{key}'", world.name),
                error,
            })?;
        }
        let keys: Vec<String> = (0..roots.len() as u32).map(root_id_key).collect();
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        let what = || {
            format!(
                "waiting for the NCCL unique ids of the {} roots (ranks {}) of {}",
                roots.len(),
                crate::quote::clip(&format!("{roots:?}")),
                world.name
            )
        };
        store.wait(&refs, world.timeout).map_err(|error| NcclError::Store { what: what(), error })?;
        let mut ids = Vec::with_capacity(keys.len());
        for k in &keys {
            let bytes = store.get(k).map_err(|error| NcclError::Store { what: what(), error })?;
            ids.push(
                NcclUniqueId::from_bytes(&bytes)
                    .map_err(|e| NcclError::invalid(format!("group {}, key '{k}': {e}", world.name)))?,
            );
        }
        let spec = InitSpec {
            group: world.name.clone(),
            id: ids[0],
            root_ids: ids,
            nranks: world.size(),
            rank: world.group_rank,
            config: config.clone(),
            timeout: world.timeout,
        };
        let mut comm = NcclComm::init_together(self.lib, std::slice::from_ref(&spec), self.device)
            .map_err(|(_, e)| e)?
            .pop()
            .expect("one spec, one communicator");
        comm.wait_ready()?;
        comm.set_op_timeout(world.timeout);
        comm.set_split_together(self.concurrent);
        Ok(comm)
    }

    /// Whether the world `world` is created by scalable init: more ranks than one root serves,
    /// and an NCCL with `ncclCommInitRankScalable` (2.23+).
    pub fn uses_scalable_init(&self, nranks: u32) -> bool {
        self.ranks_per_root > 0 && nranks > self.ranks_per_root && self.lib.require(Feature::InitRankScalable).is_ok()
    }

    /// This rank's communicator of `group`: its rank 0 makes the unique id and publishes it in
    /// `store` (private to the group), every member initializes within `group.timeout`.
    pub fn create(&self, group: &GroupInfo, store: &dyn Store) -> Result<NcclComm, NcclError> {
        self.create_with(group, &self.config, store)
    }

    fn create_with(&self, group: &GroupInfo, config: &NcclConfig, store: &dyn Store) -> Result<NcclComm, NcclError> {
        let config = &named(config, &group.name);
        let id = share_unique_id(self.lib, store, UNIQUE_ID_KEY, group.group_rank == 0, &group.name, group.timeout)?;
        let mut comm = NcclComm::init_rank(
            self.lib,
            &group.name,
            &id,
            group.size(),
            group.group_rank,
            self.device,
            config,
            group.timeout,
        )?;
        comm.set_op_timeout(group.timeout);
        comm.set_split_together(self.concurrent);
        Ok(comm)
    }

    /// Every group's unique id (each rank publishes the ids it makes before waiting for any, so
    /// no two ranks wait on each other), then all inits inside one NCCL group.
    fn create_together(&self, groups: &[GroupRequest<'_>]) -> Result<Vec<NcclComm>, (usize, NcclError)> {
        let mut ids = vec![None; groups.len()];
        let roots_first = (0..groups.len())
            .filter(|&i| groups[i].0.group_rank == 0)
            .chain((0..groups.len()).filter(|&i| groups[i].0.group_rank != 0));
        for i in roots_first {
            let (g, _, store) = &groups[i];
            let id = share_unique_id(self.lib, store.as_ref(), UNIQUE_ID_KEY, g.group_rank == 0, &g.name, g.timeout)
                .map_err(|e| (i, e))?;
            ids[i] = Some(id);
        }
        let specs: Vec<InitSpec> = groups
            .iter()
            .zip(ids)
            .map(|((g, options, _), id)| InitSpec {
                group: g.name.clone(),
                id: id.expect("every id was shared above"),
                nranks: g.size(),
                rank: g.group_rank,
                root_ids: Vec::new(),
                config: named(&with_options(&self.config, options), &g.name),
                timeout: g.timeout,
            })
            .collect();
        NcclComm::init_together(self.lib, &specs, self.device)
    }
}

/// Whether `lib` has `ncclCommShrink`: `VersionTooOld` below 2.27, `Unsupported` when the symbol
/// is missing from a library that should have it (both mean: create a new world instead).
pub fn shrink_available(lib: &NcclLibrary) -> Result<(), CommError> {
    lib.require(Feature::CommShrink).map_err(missing_is_unsupported)
}

/// `base` with the options a kind sets replacing its values (`blocking` in the options' `more`
/// sets `blocking`; HCCL's keys are the HCCL plugin's and skipped; every other key there is an
/// `ncclConfig_t` field of its own).
pub fn with_options(base: &NcclConfig, o: &CommOptions) -> NcclConfig {
    let mut more = base.more.clone();
    more.extend(o.more.iter().filter(|(k, _)| hccl_option(k).is_none()).map(|(k, v)| (k.clone(), v.clone())));
    let blocking = match more.remove("blocking") {
        Some(OptionValue::Bool(b)) => b,
        _ => base.blocking,
    };
    NcclConfig {
        blocking,
        cga_cluster_size: o.cga_cluster_size.or(base.cga_cluster_size),
        min_ctas: o.min_ctas.or(base.min_ctas),
        max_ctas: o.max_ctas.or(base.max_ctas),
        net_name: o.net_name.clone().or_else(|| base.net_name.clone()),
        split_share: o.split_share.unwrap_or(base.split_share),
        more,
        default_name: base.default_name.clone(),
        strict: o.strict.unwrap_or(base.strict),
    }
}

/// `config` whose `commName` defaults to `name` (a `comm_name` the options set wins).
pub fn named(config: &NcclConfig, name: &str) -> NcclConfig {
    NcclConfig { default_name: Some(name.to_string()), ..config.clone() }
}

impl CommFactory for NcclFactory {
    fn name(&self) -> &str {
        "nccl"
    }

    /// `ncclCommSplit` needs NCCL 2.18; the message names the loaded version.
    fn split_unavailable(&self) -> Option<String> {
        self.lib.require(Feature::CommSplit).err().map(|e| e.to_string())
    }

    /// Values checked; fields newer than the loaded NCCL warned about here (once per process) or,
    /// strict, refused before any communicator is made.
    fn check_options(&self, options: &CommOptions) -> Result<(), CommError> {
        let config = with_options(&self.config, options);
        config.validate().and_then(|_| config.warn_too_new(self.lib.version(), "communicator config")).map_err(|e| {
            match e {
                NcclError::InvalidArgument(m) => CommError::new(CommErrorKind::InvalidArgument, m),
                other => other.into(),
            }
        })
    }

    fn creates_together(&self) -> bool {
        self.concurrent
    }

    /// Ends the polling loops of every NCCL wait (see [`super::comm::interrupt`]).
    fn interrupt(&self, on: bool) {
        super::comm::interrupt(on)
    }

    fn create_groups_together(
        &self,
        groups: &[GroupRequest<'_>],
    ) -> Result<Vec<Box<dyn Communicator>>, (usize, CommError)> {
        self.create_together(groups)
            .map(|comms| comms.into_iter().map(|c| Box::new(c) as Box<dyn Communicator>).collect())
            .map_err(|(i, e)| (i, e.into()))
    }

    fn create_group(
        &self,
        group: &GroupInfo,
        options: &CommOptions,
        store: Arc<dyn Store>,
    ) -> Result<Box<dyn Communicator>, CommError> {
        let config = with_options(&self.config, options);
        self.create_with(group, &config, store.as_ref())
            .map(|c| Box::new(c) as Box<dyn Communicator>)
            .map_err(CommError::from)
    }

    /// Above [`NcclFactory::ranks_per_root`] ranks (and NCCL 2.23+), scalable init with several
    /// roots; else one unique id, as any group.
    fn create_world(
        &self,
        world: &GroupInfo,
        options: &CommOptions,
        store: Arc<dyn Store>,
    ) -> Result<Box<dyn Communicator>, CommError> {
        if !self.uses_scalable_init(world.size()) {
            return self.create_group(world, options, store);
        }
        let config = named(&with_options(&self.config, options), &world.name);
        self.create_scalable(world, &config, store.as_ref())
            .map(|c| Box::new(c) as Box<dyn Communicator>)
            .map_err(CommError::from)
    }
}

/// A library without an optional call (a symbol missing: shrink, suspend) is `Unsupported`, as a
/// version too old is `VersionTooOld`: either way the runtime falls back (a new world, recreating).
fn missing_is_unsupported(e: NcclError) -> CommError {
    match e {
        NcclError::MissingSymbol { .. } => CommError::new(CommErrorKind::Unsupported, e.to_string()),
        other => CommError::from(other),
    }
}

impl Communicator for NcclComm {
    fn allreduce_sum_i64(&mut self, values: &mut [i64]) -> Result<(), CommError> {
        let t = self.op_timeout();
        NcclComm::allreduce_sum_i64(self, values, t).map_err(CommError::from)
    }

    /// NCCL has no barrier: a one-element allreduce.
    fn barrier(&mut self) -> Result<(), CommError> {
        let t = self.op_timeout();
        NcclComm::allreduce_sum_i64(self, &mut [0], t).map_err(CommError::from)
    }

    fn raw_handle(&self) -> *mut c_void {
        NcclComm::raw_handle(self)
    }

    /// `ncclCommSuspend` with `NCCL_SUSPEND_MEM` where the loaded NCCL has it (2.29.7+); before
    /// that `VersionTooOld` or `Unsupported` (the runtime then recreates).
    /// Refused up front (`Unsupported`, so the runtime recreates) where NCCL would refuse:
    /// [`NcclComm::suspend_refusal`].
    fn suspend(&mut self) -> Result<(), CommError> {
        if let Some(why) = self.suspend_refusal().filter(|_| self.has_native_suspend()) {
            return Err(CommError::new(CommErrorKind::Unsupported, format!("not suspended in place: {why}")));
        }
        NcclComm::suspend(self).map_err(missing_is_unsupported)
    }

    /// Where the library has `ncclCommSuspend`: NCCL's refusal depends on this process's
    /// environment (`NCCL_DISABLE_MEM_MANAGER`, `NCCL_COMM_SPLIT_SHARE_RESOURCES`) and the kind's
    /// options, so the members vote.
    fn suspend_vote(&self) -> Option<Result<(), String>> {
        if !self.has_native_suspend() {
            return None;
        }
        Some(self.suspend_refusal().map_or(Ok(()), Err))
    }

    fn resume(&mut self) -> Result<(), CommError> {
        NcclComm::resume(self).map_err(missing_is_unsupported)
    }

    /// `ncclCommMemStats` (2.29.7+).
    fn memory(&self) -> Option<Result<CommMemory, CommError>> {
        NcclComm::memory(self).map(|r| r.map(CommMemory::from_stats).map_err(CommError::from))
    }

    /// `ncclCommSplit` with the member's group rank as key (so the child orders ranks as `group`
    /// does), non-members passing `NCCL_SPLIT_NOCOLOR`; the child's config is this one's with the
    /// kind's options. With concurrent creation the child comes back still initializing; its size
    /// and rank are checked against `group` once it is ready.
    fn split(
        &mut self,
        color: u32,
        group: Option<&GroupInfo>,
        options: &CommOptions,
    ) -> Result<Option<Box<dyn Communicator>>, CommError> {
        let timeout = group.map_or(self.op_timeout(), |g| g.timeout);
        let name =
            group.map_or_else(|| format!("(no group of this kind, split of {})", self.group()), |g| g.name.clone());
        let config = named(&with_options(self.config(), options), &name);
        let child = NcclComm::split_start(
            self,
            &name,
            group.map(|_| color),
            group.map_or(0, |g| g.group_rank),
            Some(&config),
            timeout,
        )
        .map_err(CommError::from)?;
        let Some(mut child) = child else { return Ok(None) };
        if let Some(g) = group {
            child.expect_size_rank(g.size(), g.group_rank);
        }
        if !self.split_together() {
            child.wait_ready().map_err(CommError::from)?;
        }
        Ok(Some(Box::new(child)))
    }

    fn wait_ready(&mut self) -> Result<(), CommError> {
        NcclComm::wait_ready(self).map_err(CommError::from)
    }

    /// `ncclCommShrink` (2.27 or newer; an older library or one without the symbol says
    /// `VersionTooOld` / `Unsupported`, and the runtime falls back to a new world). The new
    /// communicator keeps this one's name and gets its config with the kind's options.
    fn shrink(
        &mut self,
        exclude: &[u32],
        options: &CommOptions,
        abort_parent: bool,
        timeout: std::time::Duration,
    ) -> Result<Box<dyn Communicator>, CommError> {
        shrink_available(self.library())?;
        let config = with_options(self.config(), options);
        let name = self.group().to_string();
        NcclComm::shrink(self, &name, exclude, Some(&config), abort_parent, timeout)
            .map(|c| Box::new(c) as Box<dyn Communicator>)
            .map_err(CommError::from)
    }

    /// `ncclCommAbort`: a peer failed, so no `ncclCommDestroy` that could wait on it.
    fn abort(&mut self) {
        let _ = NcclComm::abort(self);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One per-kind file serves NCCL and HCCL jobs: NCCL takes its fields and skips HCCL's keys
    /// (which its validation would refuse as no `ncclConfig_t` field).
    #[test]
    fn hccl_keys_of_a_shared_file_are_skipped() {
        let mut o = CommOptions { max_ctas: Some(4), ..Default::default() };
        o.more.insert("traffic_class".into(), OptionValue::Int(3));
        o.more.insert("hccl_buffer_size".into(), OptionValue::Int(300));
        o.more.insert("group_name".into(), OptionValue::Text("grads".into()));
        let c = with_options(&NcclConfig::default(), &o);
        assert_eq!(c.max_ctas, Some(4));
        assert_eq!(c.more.keys().collect::<Vec<_>>(), ["traffic_class"]);
        c.validate().unwrap();
    }
}
