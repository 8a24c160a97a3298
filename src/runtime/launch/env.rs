//! The launcher's environment: who am I, how many are we, where is the store.
//!
//! torchrun's variables first (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
//! MASTER_PORT, TORCHELASTIC_USE_AGENT_STORE, TORCHELASTIC_RUN_ID, TORCHELASTIC_RESTART_COUNT),
//! then OpenMPI (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK,
//! OMPI_COMM_WORLD_LOCAL_SIZE) and Slurm (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, and
//! [`SLURM_TASKS_PER_NODE_VARS`] at SLURM_NODEID) as fallbacks for the rank variables.
//!
//! Under Slurm and OpenMPI nothing needs setting by hand: without MASTER_ADDR, all ranks on one
//! node meet on 127.0.0.1, and a Slurm step on several nodes at the first host of
//! [`SLURM_NODELIST_VARS`] ([`hostlist`]); without MASTER_PORT, the port is derived from what
//! every rank of the job shares ([`slurm_port`], [`hashed_port`]). docs/multihost.md has the
//! table; [`LaunchEnv::rendezvous_why`] says which rule applied.
//!
//! The job id ([`JobId`], checked at rendezvous so that two jobs on one MASTER_ADDR:MASTER_PORT
//! never mix) is the first set of [`JOB_ID_VARS`]: MCORE_JOB_ID (an explicit override),
//! TORCHELASTIC_RUN_ID (torchrun's `--rdzv-id`; its default `none` counts as unset), mpirun's
//! PMIX_NAMESPACE (else OMPI_MCA_ess_base_jobid), and SLURM_JOB_ID joined with SLURM_STEP_ID
//! (`751.3`: the steps of one job running at once are different jobs). Where the port is
//! derived, every job has [`DERIVED_PORT_CANDIDATES`] candidate ports ([`port_candidates`]) so
//! that two jobs whose first ports collide still both come up. The store's
//! shared secret comes from MCORE_STORE_TOKEN or MCORE_STORE_TOKEN_FILE
//! ([`crate::store::StoreToken`]).
//!
//! Under a PMIx server (mpirun, `srun --mpi=pmix`: PMIX_RANK, PMIX_NAMESPACE and a
//! PMIX_SERVER_URI* set, and no torchrun variables) the rank, sizes and job id come from PMIx
//! itself ([`PmixFacts`]), and rank 0's store listens on an ephemeral port it publishes through
//! PMIx ([`Rendezvous::Pmix`]); [`RENDEZVOUS_ENV`] forces either path (docs/multihost.md).

use super::hostlist;
use crate::backend::pmix::{PmixClient, PmixFacts};
use crate::quote::quoted;
use crate::store::StoreToken;
use std::fmt;

/// The variables a job id is read from, first set first (SLURM_JOB_ID with SLURM_STEP_ID).
pub const JOB_ID_VARS: [&str; 5] =
    ["MCORE_JOB_ID", "TORCHELASTIC_RUN_ID", "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "SLURM_JOB_ID"];

/// Which job this rank belongs to, and the variable that said so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobId {
    /// The id; empty when no variable gave one.
    pub id: String,
    /// The variable it came from (empty when none).
    pub var: &'static str,
}

impl JobId {
    /// The first non-empty variable of [`JOB_ID_VARS`] (TORCHELASTIC_RUN_ID=none skipped).
    fn from_lookup(get: &dyn Fn(&str) -> Option<String>) -> JobId {
        for var in JOB_ID_VARS {
            let Some(v) = get(var) else { continue };
            let v = v.trim();
            if v.is_empty() || (var == "TORCHELASTIC_RUN_ID" && v == "none") {
                continue;
            }
            if var == "SLURM_JOB_ID" {
                if let Some((_, step)) = first_set(get, &["SLURM_STEP_ID", "SLURM_STEPID"]) {
                    return JobId { id: format!("{v}.{step}"), var: "SLURM_JOB_ID.SLURM_STEP_ID" };
                }
            }
            return JobId { id: v.to_string(), var };
        }
        JobId { id: String::new(), var: "" }
    }

    /// How errors name it: `'job7' (from MCORE_JOB_ID)`, or `no job id`.
    pub fn describe(&self) -> String {
        if self.id.is_empty() {
            format!("no job id (none of {} is set)", JOB_ID_VARS.join(", "))
        } else {
            format!("{} (from {})", quoted(&self.id), self.var)
        }
    }
}

/// torch's default store port (`TCPStoreOptions::kDefaultPort`).
pub(crate) const DEFAULT_MASTER_PORT: u16 = 29500;

/// Which launcher convention the rank variables came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LauncherKind {
    Torchrun,
    Slurm,
    OpenMpi,
    /// Only PMIx's variables (a PMIx launcher that sets none of the above).
    Pmix,
}

/// How the ranks find rank 0's store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rendezvous {
    /// At MASTER_ADDR:MASTER_PORT (or the address and port derived in their place).
    TcpStore,
    /// Rank 0's store binds an ephemeral port and publishes its address and the job's secret
    /// through PMIx; the others read them after a PMIx fence.
    Pmix,
}

impl Rendezvous {
    /// `pmix` or `tcp-store` (the values of [`RENDEZVOUS_ENV`] and mcore-selftest's report).
    pub fn name(self) -> &'static str {
        match self {
            Rendezvous::TcpStore => "tcp-store",
            Rendezvous::Pmix => "pmix",
        }
    }
}

/// Environment variable choosing the rendezvous: `auto` (the default: PMIx when this process was
/// started by a PMIx server and its library loads, else the TCP store), `pmix` (PMIx or an
/// error), `tcp-store` (never PMIx).
pub const RENDEZVOUS_ENV: &str = "MCORE_RENDEZVOUS";

/// The variables that say a PMIx server started this process (with one of
/// [`PMIX_SERVER_URI_VARS`]).
pub const PMIX_VARS: [&str; 2] = ["PMIX_RANK", "PMIX_NAMESPACE"];
/// A PMIx server's address, one per protocol version.
pub const PMIX_SERVER_URI_VARS: [&str; 5] =
    ["PMIX_SERVER_URI41", "PMIX_SERVER_URI4", "PMIX_SERVER_URI3", "PMIX_SERVER_URI21", "PMIX_SERVER_URI2"];

/// What a rank learns from its environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchEnv {
    pub rank: u32,
    pub world_size: u32,
    pub local_rank: u32,
    pub local_world_size: u32,
    pub master_addr: String,
    pub master_port: u16,
    /// torchrun's agent already serves the store: every rank, rank 0 included, is a client.
    pub use_agent_store: bool,
    /// Identifies this job run in store keys (torchrun's TORCHELASTIC_RUN_ID, else "none").
    pub run_id: String,
    /// torchrun's restart counter (0 on the first attempt).
    pub restart_count: u32,
    pub launcher: LauncherKind,
    /// Where the store may be, in the order rank 0 tries to bind them and the other ranks look:
    /// `[master_port]` when MASTER_PORT is set (or the default applies), else the job's
    /// [`port_candidates`] (the first is `master_port`).
    pub port_candidates: Vec<u16>,
    /// The job this rank belongs to (see the module docs).
    pub job_id: JobId,
    /// The shared secret clients of the store must prove they hold; None: anyone is served.
    pub store_token: Option<StoreToken>,
    /// Where MASTER_ADDR and MASTER_PORT came from (the variables, or what stood in for them).
    pub rendezvous_why: String,
    /// How the ranks find rank 0's store.
    pub rendezvous: Rendezvous,
}

/// A variable that is missing or malformed, named with its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvError(pub String);

impl fmt::Display for EnvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for EnvError {}

/// The largest world this library brings up: 131,072 ranks ([`wire::MAX_KEYS`]). Rank 0's
/// check-in reads every rank's arrival in one store request, and one request carries at most that
/// many keys; rank 0's store server, whose cap is 262,144 connections
/// ([`crate::store::ServerLimits`]), holds two per rank there. A larger world size is refused
/// before anything is sized by it (docs/multihost.md).
///
/// [`wire::MAX_KEYS`]: crate::store::tcp::wire::MAX_KEYS
pub const MAX_WORLD_SIZE: u32 = crate::store::tcp::wire::MAX_KEYS as u32;

/// `n`, the world size `var` gave, when it is at most [`MAX_WORLD_SIZE`].
fn bounded_world(var: &str, n: u32) -> Result<u32, EnvError> {
    if n > MAX_WORLD_SIZE {
        return Err(EnvError(format!(
            "{var}={n} is more ranks than mcore_init brings up (at most {MAX_WORLD_SIZE}: rank 0's check-in reads \
             every rank's arrival in one store request of at most {MAX_WORLD_SIZE} keys)"
        )));
    }
    Ok(n)
}

fn parse_u32(var: &str, value: &str) -> Result<u32, EnvError> {
    value
        .trim()
        .parse::<u32>()
        .map_err(|_| EnvError(format!("environment variable {var}={} is not a non-negative integer", quoted(value))))
}

struct RankVars {
    rank: u32,
    world_size: u32,
    local_rank: u32,
    local_world_size: Option<u32>,
    launcher: LauncherKind,
}

fn rank_vars(get: &dyn Fn(&str) -> Option<String>) -> Result<RankVars, EnvError> {
    // (rank, world size, local rank, local world size) variable names per launcher, in priority order.
    // OpenMPI comes before Slurm: mpirun inside a Slurm allocation leaves the allocation's
    // SLURM_PROCID (one value for every rank it starts) in its ranks' environment.
    const CONVENTIONS: [(LauncherKind, [&str; 4]); 3] = [
        (LauncherKind::Torchrun, ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"]),
        (
            LauncherKind::OpenMpi,
            [
                "OMPI_COMM_WORLD_RANK",
                "OMPI_COMM_WORLD_SIZE",
                "OMPI_COMM_WORLD_LOCAL_RANK",
                "OMPI_COMM_WORLD_LOCAL_SIZE",
            ],
        ),
        (LauncherKind::Slurm, ["SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"]),
    ];
    for (launcher, [rank_v, size_v, local_v, local_size_v]) in CONVENTIONS {
        let (Some(rank), Some(size)) = (get(rank_v), get(size_v)) else { continue };
        let rank = parse_u32(rank_v, &rank)?;
        let world_size = bounded_world(size_v, parse_u32(size_v, &size)?)?;
        let local_rank = match get(local_v) {
            Some(v) => parse_u32(local_v, &v)?,
            None => rank,
        };
        let local_world_size = if launcher == LauncherKind::Slurm {
            slurm_local_world_size(get)?
        } else {
            match get(local_size_v) {
                Some(v) => Some(parse_u32(local_size_v, &v)?),
                None => None,
            }
        };
        return Ok(RankVars { rank, world_size, local_rank, local_world_size, launcher });
    }
    Err(EnvError(
        "no launcher environment: set RANK and WORLD_SIZE (torchrun / mcore-launch), or run under Slurm \
         (SLURM_PROCID, SLURM_NTASKS) or OpenMPI (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE)"
            .to_string(),
    ))
}

/// The variables Slurm gives the step's (or else the job's) tasks per node, first set first.
pub const SLURM_TASKS_PER_NODE_VARS: [&str; 3] =
    ["SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE"];

/// The variables Slurm gives the step's (or else the job's) nodes in, first set first.
pub const SLURM_NODELIST_VARS: [&str; 3] = ["SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"];

/// Ports derived from a job id (Slurm, OpenMPI) fall in `DERIVED_PORT_BASE ..
/// DERIVED_PORT_BASE + DERIVED_PORT_SPAN`: unprivileged, and below Linux's default ephemeral
/// range (32768-60999), so that no outgoing connection of the machine holds it by chance.
pub const DERIVED_PORT_BASE: u16 = 20000;
/// See [`DERIVED_PORT_BASE`].
pub const DERIVED_PORT_SPAN: u16 = 12000;

/// Slurm's port for a job step: `20000 + (16 × SLURM_JOB_ID + SLURM_STEP_ID mod 16) mod 12000`,
/// so that the steps of one job (up to 16 at once) and 750 consecutive jobs on one node differ.
pub fn slurm_port(job_id: u64, step_id: u64) -> u16 {
    let n = (job_id % u64::from(DERIVED_PORT_SPAN)) * 16 + step_id % 16;
    DERIVED_PORT_BASE + (n % u64::from(DERIVED_PORT_SPAN)) as u16
}

/// OpenMPI's port for a job: `20000 + FNV-1a-64(the job's name) mod 12000`.
pub fn hashed_port(name: &str) -> u16 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    DERIVED_PORT_BASE + (h % u64::from(DERIVED_PORT_SPAN)) as u16
}

/// How many ports a job whose port is derived may use (see [`port_candidates`]).
pub const DERIVED_PORT_CANDIDATES: usize = 8;

/// A derived port and the job's further candidates: `first`, then
/// `20000 + FNV-1a-64(format!("{job_id}#{i}")) mod 12000` for i = 1, 2, ... (skipping repeats)
/// up to [`DERIVED_PORT_CANDIDATES`] ports. Two jobs whose first ports collide almost never share their second (and so on):
/// rank 0 binds the first free one, the other ranks look for their own job's store along the
/// same list (docs/multihost.md, "Two jobs on one port").
pub fn port_candidates(first: u16, job_id: &str) -> Vec<u16> {
    let mut ports = vec![first];
    let mut i = 1;
    while ports.len() < DERIVED_PORT_CANDIDATES && i < 64 {
        let p = hashed_port(&format!("{job_id}#{i}"));
        if !ports.contains(&p) {
            ports.push(p);
        }
        i += 1;
    }
    ports
}

/// This node's task count under Slurm: the first set of [`SLURM_TASKS_PER_NODE_VARS`] (its
/// `4(x2),3` form expanded) at SLURM_NODEID (node 0 when unset).
fn slurm_local_world_size(get: &dyn Fn(&str) -> Option<String>) -> Result<Option<u32>, EnvError> {
    let Some((var, spec)) = SLURM_TASKS_PER_NODE_VARS.iter().find_map(|v| get(v).map(|s| (*v, s))) else {
        return Ok(None);
    };
    let node = match get("SLURM_NODEID") {
        Some(n) => u64::from(parse_u32("SLURM_NODEID", &n)?),
        None => 0,
    };
    hostlist::tasks_on_node(spec.trim(), node)
        .map(Some)
        .map_err(|e| EnvError(format!("environment variable {var}={e}")))
}

fn first_set(get: &dyn Fn(&str) -> Option<String>, vars: &[&'static str]) -> Option<(&'static str, String)> {
    vars.iter().find_map(|v| get(v).filter(|s| !s.trim().is_empty()).map(|s| (*v, s.trim().to_string())))
}

/// MASTER_ADDR, or what the launcher's variables say in its place, and why.
fn master_addr(get: &dyn Fn(&str) -> Option<String>, v: &RankVars) -> Result<(String, String), EnvError> {
    if let Some(a) = get("MASTER_ADDR").filter(|s| !s.trim().is_empty()) {
        return Ok((a.trim().to_string(), "MASTER_ADDR".into()));
    }
    if v.world_size == 1 {
        return Ok(("127.0.0.1".into(), "a job of one rank".into()));
    }
    match v.launcher {
        LauncherKind::Torchrun | LauncherKind::Pmix => {
            Err(EnvError("MASTER_ADDR is not set: every rank needs the address of the rendezvous store".into()))
        }
        LauncherKind::Slurm => {
            let Some((var, list)) = first_set(get, &SLURM_NODELIST_VARS) else {
                return Err(EnvError(format!(
                    "MASTER_ADDR is not set, and under Slurm none of {} is set to take the first host from: \
                     set MASTER_ADDR to an address of rank 0's node",
                    SLURM_NODELIST_VARS.join(", ")
                )));
            };
            let hosts = hostlist::HostList::parse(&list).map_err(|e| {
                EnvError(format!(
                    "MASTER_ADDR is not set, and {var}={e}; set MASTER_ADDR to an address of rank 0's node"
                ))
            })?;
            if hosts.len() == 1 {
                Ok(("127.0.0.1".into(), format!("the step runs on one node ({var}={}): loopback", quoted(&list))))
            } else {
                let first = hosts.first();
                Ok((first.clone(), format!("the first host of {var}={}", quoted(&list))))
            }
        }
        LauncherKind::OpenMpi => {
            let local = get("OMPI_COMM_WORLD_LOCAL_SIZE");
            if local.as_deref().map(str::trim) == Some(&v.world_size.to_string()) {
                return Ok((
                    "127.0.0.1".into(),
                    format!("every rank runs on this node (OMPI_COMM_WORLD_LOCAL_SIZE={}): loopback", v.world_size),
                ));
            }
            Err(EnvError(format!(
                "MASTER_ADDR is not set, and this OpenMPI job spans several nodes (OMPI_COMM_WORLD_LOCAL_SIZE={} \
                 of OMPI_COMM_WORLD_SIZE={}): set MASTER_ADDR to an address of rank 0's node (and MASTER_PORT) and \
                 pass both with `mpirun -x MASTER_ADDR -x MASTER_PORT`",
                local.as_deref().map_or("unset".to_string(), quoted),
                v.world_size
            )))
        }
    }
}

/// MASTER_PORT, or one derived from what every rank of the job shares, and why.
fn master_port(get: &dyn Fn(&str) -> Option<String>, launcher: LauncherKind) -> Result<(u16, String), EnvError> {
    if let Some(p) = get("MASTER_PORT") {
        let port = p.trim().parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(|| {
            EnvError(format!("environment variable MASTER_PORT={} is not a port number (1-65535)", quoted(&p)))
        })?;
        return Ok((port, "MASTER_PORT".into()));
    }
    match launcher {
        LauncherKind::Slurm => {
            let Some((_, job)) = first_set(get, &["SLURM_JOB_ID", "SLURM_JOBID"]) else {
                return Ok((DEFAULT_MASTER_PORT, "the default (no MASTER_PORT, no SLURM_JOB_ID)".into()));
            };
            let number = |var: &str, s: &str| {
                s.parse::<u64>().map_err(|_| {
                    EnvError(format!(
                        "MASTER_PORT is not set, and {var}={} is not a number to derive one from: set MASTER_PORT",
                        quoted(s)
                    ))
                })
            };
            let job_id = number("SLURM_JOB_ID", &job)?;
            let (step_var, step) = first_set(get, &["SLURM_STEP_ID", "SLURM_STEPID"]).unwrap_or(("", "0".into()));
            let step_id = if step_var.is_empty() { 0 } else { number(step_var, &step)? };
            let port = slurm_port(job_id, step_id);
            Ok((port, format!("derived from SLURM_JOB_ID={job_id}, SLURM_STEP_ID={step_id}")))
        }
        LauncherKind::OpenMpi => {
            const VARS: [&str; 3] = ["PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_hnp_uri"];
            match first_set(get, &VARS) {
                Some((var, name)) => Ok((hashed_port(&name), format!("derived from {var}={}", quoted(&name)))),
                None => Ok((DEFAULT_MASTER_PORT, format!("the default (no MASTER_PORT, none of {})", VARS.join(", ")))),
            }
        }
        LauncherKind::Torchrun | LauncherKind::Pmix => Ok((DEFAULT_MASTER_PORT, "the default".into())),
    }
}

/// Whether to try PMIx, from [`RENDEZVOUS_ENV`] and the variables a PMIx server sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PmixWanted {
    No,
    /// `auto`: when the library loads and initializes; else the TCP store.
    IfThere,
    /// `pmix`: or fail.
    Required,
}

/// What says a PMIx server started this process (for the warning when its client library
/// cannot be used): the namespace and the server's address variable.
fn started_by(get: &dyn Fn(&str) -> Option<String>) -> String {
    let uri = PMIX_SERVER_URI_VARS.iter().find(|v| get(v).is_some()).copied().unwrap_or("no PMIX_SERVER_URI*");
    format!("PMIX_NAMESPACE={} and {uri} set", quoted(&get("PMIX_NAMESPACE").unwrap_or_default()))
}

fn pmix_wanted(get: &dyn Fn(&str) -> Option<String>) -> Result<PmixWanted, EnvError> {
    let started_by_pmix = PMIX_VARS.iter().all(|v| get(v).is_some_and(|s| !s.trim().is_empty()))
        && PMIX_SERVER_URI_VARS.iter().any(|v| get(v).is_some_and(|s| !s.trim().is_empty()));
    // torchrun's workers (or mcore-launch's) under a PMIx launcher inherit the launcher's PMIx
    // variables, which name the agent's process, not theirs: torchrun's variables win.
    let torchrun = get("RANK").is_some() && get("WORLD_SIZE").is_some();
    match get(RENDEZVOUS_ENV).as_deref().map(str::trim) {
        None | Some("") | Some("auto") => {
            Ok(if started_by_pmix && !torchrun { PmixWanted::IfThere } else { PmixWanted::No })
        }
        Some("tcp-store") => Ok(PmixWanted::No),
        Some("pmix") if started_by_pmix => Ok(PmixWanted::Required),
        Some("pmix") => Err(EnvError(format!(
            "{RENDEZVOUS_ENV}=pmix, but no PMIx server started this process (it needs {} and one of {} set)",
            PMIX_VARS.join(", "),
            PMIX_SERVER_URI_VARS.join(", ")
        ))),
        Some(other) => Err(EnvError(format!(
            "environment variable {RENDEZVOUS_ENV}={} is not auto, pmix or tcp-store",
            quoted(other)
        ))),
    }
}

/// Under PMIx: where rank 0's store listens (MASTER_ADDR if set; loopback when every rank runs on
/// this node; else rank 0's host name as PMIx gives it), on MASTER_PORT if set, else on an
/// ephemeral port (0); rank 0 publishes the real address, the others read it from PMIx.
#[allow(clippy::type_complexity)]
fn pmix_meeting_point(
    get: &dyn Fn(&str) -> Option<String>,
    f: &PmixFacts,
    v: &RankVars,
) -> Result<((String, String), (u16, String)), EnvError> {
    let addr = if let Some(a) = get("MASTER_ADDR").filter(|s| !s.trim().is_empty()) {
        (a.trim().to_string(), "MASTER_ADDR, published through PMIx".to_string())
    } else if f.local_size == f.job_size {
        (
            "127.0.0.1".to_string(),
            format!(
                "every rank runs on this node (PMIx: pmix.local.size = pmix.job.size = {}): loopback",
                v.world_size
            ),
        )
    } else if !f.hostname.is_empty() {
        (f.hostname.clone(), "rank 0's host name from PMIx (pmix.hname), published through PMIx".to_string())
    } else {
        return Err(EnvError(format!(
            "MASTER_ADDR is not set, this PMIx job spans several nodes (pmix.local.size {} of pmix.job.size {}) and \
             PMIx gives no host name (pmix.hname) for rank 0 to listen on: set MASTER_ADDR to an address of rank 0's node",
            f.local_size, f.job_size
        )));
    };
    let port = match get("MASTER_PORT") {
        Some(_) => master_port(get, LauncherKind::Torchrun)?,
        None => (0, "an ephemeral port of rank 0's store, published through PMIx".to_string()),
    };
    Ok((addr, port))
}

impl LaunchEnv {
    /// Read the process environment (a value that is not UTF-8 is read lossily, so that its
    /// error names it instead of calling the variable unset).
    pub fn from_process() -> Result<Self, EnvError> {
        let get = |k: &str| std::env::var_os(k).map(|v| v.to_string_lossy().into_owned());
        let facts = match pmix_wanted(&get)? {
            PmixWanted::No => None,
            want => match PmixClient::get() {
                Ok(c) => Some(c.facts().clone()),
                Err(e) if want == PmixWanted::Required => {
                    return Err(EnvError(format!("{RENDEZVOUS_ENV}=pmix, but PMIx cannot be used: {e}")))
                }
                Err(e) => {
                    // Said once per process, at every log level: a PMIx launcher started it, so
                    // the TCP store is a fallback the user should know of.
                    static SAID: std::sync::Once = std::sync::Once::new();
                    SAID.call_once(|| {
                        eprintln!(
                            "mcore_init: warning: PMIx not used, rendezvous through the TCP store: {e} (a PMIx launcher \
                             started this process: {}; {} names a client library)",
                            started_by(&get),
                            crate::backend::pmix::LIBRARY_ENV
                        )
                    });
                    None
                }
            },
        };
        Self::from_lookup_with(&get, facts.as_ref())
    }

    /// Read from any lookup (tests pass a map), without PMIx.
    pub fn from_lookup(get: &dyn Fn(&str) -> Option<String>) -> Result<Self, EnvError> {
        Self::from_lookup_with(get, None)
    }

    /// Read from any lookup; with `pmix`, what PMIx said of this process and its job stands in
    /// for the launcher's rank variables, and the rendezvous runs through PMIx.
    pub fn from_lookup_with(get: &dyn Fn(&str) -> Option<String>, pmix: Option<&PmixFacts>) -> Result<Self, EnvError> {
        let v = match pmix {
            None => rank_vars(get)?,
            Some(f) => RankVars {
                rank: f.rank,
                world_size: bounded_world("the PMIx job size (pmix.job.size)", f.job_size)?,
                local_rank: f.local_rank,
                local_world_size: Some(f.local_size),
                launcher: rank_vars(get).map_or(LauncherKind::Pmix, |v| v.launcher),
            },
        };
        if v.world_size == 0 {
            return Err(EnvError("WORLD_SIZE is 0: a job needs at least one rank".into()));
        }
        if v.rank >= v.world_size {
            return Err(EnvError(format!(
                "rank {} is out of range for world size {} (check RANK / WORLD_SIZE)",
                v.rank, v.world_size
            )));
        }
        let local_world_size = v.local_world_size.unwrap_or(v.world_size);
        if local_world_size == 0 || v.local_rank >= local_world_size {
            return Err(EnvError(format!(
                "local rank {} is out of range for local world size {local_world_size}",
                v.local_rank
            )));
        }
        let ((master_addr, addr_why), (master_port, port_why)) = match pmix {
            None => (master_addr(get, &v)?, master_port(get, v.launcher)?),
            Some(f) => pmix_meeting_point(get, f, &v)?,
        };
        let mut job_id = JobId::from_lookup(get);
        if let Some(f) = pmix.filter(|_| job_id.var != "MCORE_JOB_ID") {
            job_id = JobId { id: f.nspace.clone(), var: "the PMIx namespace" };
        }
        let derived = port_why.starts_with("derived");
        let port_candidates = if derived { port_candidates(master_port, &job_id.id) } else { vec![master_port] };
        let use_agent_store = match get("TORCHELASTIC_USE_AGENT_STORE").filter(|_| pmix.is_none()) {
            None => false,
            Some(s) => match s.trim() {
                "True" | "true" | "1" => true,
                "False" | "false" | "0" | "" => false,
                other => {
                    return Err(EnvError(format!(
                        "environment variable TORCHELASTIC_USE_AGENT_STORE={} is not True or False",
                        quoted(other)
                    )))
                }
            },
        };
        let restart_count = match get("TORCHELASTIC_RESTART_COUNT") {
            Some(s) => parse_u32("TORCHELASTIC_RESTART_COUNT", &s)?,
            None => 0,
        };
        Ok(LaunchEnv {
            rank: v.rank,
            world_size: v.world_size,
            local_rank: v.local_rank,
            local_world_size,
            master_addr,
            master_port,
            use_agent_store,
            run_id: get("TORCHELASTIC_RUN_ID").unwrap_or_else(|| "none".into()),
            restart_count,
            launcher: v.launcher,
            port_candidates,
            job_id,
            store_token: StoreToken::from_lookup(get).map_err(EnvError)?,
            rendezvous_why: format!("address: {addr_why}; port: {port_why}"),
            rendezvous: if pmix.is_some() { Rendezvous::Pmix } else { Rendezvous::TcpStore },
        })
    }

    /// Whether this rank hosts the store server (rank 0, unless torchrun's agent already does).
    pub fn hosts_store(&self) -> bool {
        self.rank == 0 && !self.use_agent_store
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> Result<LaunchEnv, EnvError> {
        let m: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        LaunchEnv::from_lookup(&move |k| m.get(k).cloned())
    }

    #[test]
    fn torchrun_variables_with_agent_store() {
        let e = env(&[
            ("RANK", "3"),
            ("WORLD_SIZE", "8"),
            ("LOCAL_RANK", "3"),
            ("LOCAL_WORLD_SIZE", "4"),
            ("MASTER_ADDR", "127.0.0.1"),
            ("MASTER_PORT", "29512"),
            ("TORCHELASTIC_USE_AGENT_STORE", "True"),
            ("TORCHELASTIC_RUN_ID", "job7"),
            ("TORCHELASTIC_RESTART_COUNT", "2"),
        ])
        .unwrap();
        assert_eq!((e.rank, e.world_size, e.local_rank, e.local_world_size), (3, 8, 3, 4));
        assert_eq!((e.master_port, e.use_agent_store, e.restart_count), (29512, true, 2));
        assert_eq!(e.run_id, "job7");
        assert_eq!(e.launcher, LauncherKind::Torchrun);
        assert!(!e.hosts_store());
    }

    #[test]
    fn rank_zero_hosts_without_agent_store() {
        let e = env(&[("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "localhost")]).unwrap();
        assert!(e.hosts_store());
        assert_eq!(e.master_port, DEFAULT_MASTER_PORT);
        assert_eq!(e.local_rank, 0);
    }

    #[test]
    fn slurm_and_openmpi_fallbacks() {
        let s = env(&[
            ("SLURM_PROCID", "5"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_NTASKS_PER_NODE", "4(x2)"),
            ("MASTER_ADDR", "10.0.0.1"),
        ])
        .unwrap();
        assert_eq!((s.rank, s.world_size, s.local_rank, s.local_world_size), (5, 8, 1, 4));
        assert_eq!(s.launcher, LauncherKind::Slurm);
        let o = env(&[
            ("OMPI_COMM_WORLD_RANK", "2"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
            ("MASTER_ADDR", "h"),
        ])
        .unwrap();
        assert_eq!((o.rank, o.world_size, o.local_rank), (2, 4, 0));
        assert_eq!(o.launcher, LauncherKind::OpenMpi);
    }

    #[test]
    fn srun_needs_nothing_set_by_hand() {
        let step = |rank: &'static str, extra: &[(&'static str, &'static str)]| {
            let mut v = vec![
                ("SLURM_PROCID", rank),
                ("SLURM_NTASKS", "12"),
                ("SLURM_LOCALID", "0"),
                ("SLURM_NODEID", "2"),
                ("SLURM_STEP_TASKS_PER_NODE", "5(x2),2"),
                ("SLURM_TASKS_PER_NODE", "4(x3)"),
                ("SLURM_STEP_NODELIST", "gpu-a[07-08],gpu-b3"),
                ("SLURM_JOB_NODELIST", "other[1-9]"),
                ("SLURM_JOB_ID", "4242"),
                ("SLURM_STEP_ID", "3"),
            ];
            v.extend_from_slice(extra);
            env(&v).unwrap()
        };
        let e = step("10", &[]);
        assert_eq!((e.master_addr.as_str(), e.master_port), ("gpu-a07", slurm_port(4242, 3)));
        assert_eq!(e.local_world_size, 2, "node 2 of 5(x2),2");
        assert!(e.rendezvous_why.contains("SLURM_STEP_NODELIST") && e.rendezvous_why.contains("SLURM_JOB_ID=4242"));
        // Every rank of the step agrees; another step of the job gets another port.
        assert_eq!(step("0", &[("SLURM_NODEID", "0")]).master_port, e.master_port);
        assert_ne!(step("10", &[("SLURM_STEP_ID", "4")]).master_port, e.master_port);
        // The formula, as documented, stays in the unprivileged range below the ephemeral one.
        assert_eq!(slurm_port(4242, 3), 20000 + ((16 * 4242 + 3) % 12000) as u16);
        for (job, step) in [(0, 0), (u64::from(u32::MAX), 15), (749, 15), (u64::MAX, u64::MAX)] {
            assert!((20000..32000).contains(&slurm_port(job, step)));
        }
        let ports: std::collections::HashSet<u16> = (1000..1750).map(|j| slurm_port(j, 0)).collect();
        assert_eq!(ports.len(), 750, "750 consecutive jobs get 750 ports");
        // What is set by hand wins.
        let e = step("10", &[("MASTER_ADDR", "10.1.1.1"), ("MASTER_PORT", "29999")]);
        assert_eq!((e.master_addr.as_str(), e.master_port), ("10.1.1.1", 29999));
        // The job's list when the step's is missing; one node: loopback.
        let one = env(&[
            ("SLURM_PROCID", "3"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_LOCALID", "3"),
            ("SLURM_TASKS_PER_NODE", "8"),
            ("SLURM_JOB_NODELIST", "vm"),
            ("SLURM_JOB_ID", "7"),
        ])
        .unwrap();
        assert_eq!((one.master_addr.as_str(), one.local_world_size), ("127.0.0.1", 8));
        assert_eq!(one.master_port, slurm_port(7, 0));
        assert!(one.rendezvous_why.contains("SLURM_JOB_NODELIST='vm'"), "{}", one.rendezvous_why);
    }

    #[test]
    fn srun_errors_say_what_was_tried() {
        let base = [("SLURM_PROCID", "1"), ("SLURM_NTASKS", "2"), ("SLURM_JOB_ID", "5")];
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut v = base.to_vec();
            v.extend_from_slice(extra);
            env(&v).unwrap_err().0
        };
        let e = with(&[]);
        assert!(e.contains("MASTER_ADDR") && e.contains("SLURM_STEP_NODELIST, SLURM_JOB_NODELIST"), "{e}");
        let e = with(&[("SLURM_STEP_NODELIST", "node[01-04")]);
        assert!(e.contains("SLURM_STEP_NODELIST='node[01-04'") && e.contains("never closed"), "{e}");
        let e = with(&[("SLURM_STEP_NODELIST", "n[1-2]"), ("SLURM_STEP_ID", "batch")]);
        assert!(e.contains("SLURM_STEP_ID='batch'") && e.contains("MASTER_PORT"), "{e}");
        let e =
            with(&[("SLURM_STEP_NODELIST", "n[1-2]"), ("SLURM_STEP_TASKS_PER_NODE", "1(x1)"), ("SLURM_NODEID", "1")]);
        assert!(e.contains("SLURM_STEP_TASKS_PER_NODE='1(x1)'") && e.contains("node 1"), "{e}");
    }

    #[test]
    fn mpirun_on_one_node_needs_nothing_set_by_hand() {
        let rank = |r: &'static str, local: &'static str| {
            env(&[
                ("OMPI_COMM_WORLD_RANK", r),
                ("OMPI_COMM_WORLD_SIZE", "8"),
                ("OMPI_COMM_WORLD_LOCAL_RANK", r),
                ("OMPI_COMM_WORLD_LOCAL_SIZE", local),
                ("PMIX_NAMESPACE", "444858369"),
                ("OMPI_MCA_ess_base_jobid", "444858369"),
                // mpirun inside a Slurm allocation: the allocation's variables are not the ranks'.
                ("SLURM_PROCID", "0"),
                ("SLURM_NTASKS", "1"),
            ])
        };
        let (a, b) = (rank("0", "8").unwrap(), rank("7", "8").unwrap());
        assert_eq!((a.rank, b.rank, a.launcher), (0, 7, LauncherKind::OpenMpi));
        assert_eq!(a.master_addr, "127.0.0.1");
        assert_eq!((a.master_port, b.master_port), (hashed_port("444858369"), hashed_port("444858369")));
        assert!((20000..32000).contains(&a.master_port));
        assert!(a.rendezvous_why.contains("PMIX_NAMESPACE"), "{}", a.rendezvous_why);
        let e = rank("0", "4").unwrap_err().0;
        assert!(e.contains("OMPI_COMM_WORLD_LOCAL_SIZE='4'") && e.contains("-x MASTER_ADDR -x MASTER_PORT"), "{e}");
    }

    #[test]
    fn the_job_id_comes_from_the_first_variable_set() {
        let base = [("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "h")];
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut v = base.to_vec();
            v.extend_from_slice(extra);
            env(&v).unwrap().job_id
        };
        assert_eq!(with(&[]).id, "");
        assert!(with(&[]).describe().contains("no job id"));
        let all = [("SLURM_JOB_ID", "77"), ("TORCHELASTIC_RUN_ID", "tr"), ("MCORE_JOB_ID", "mine")];
        assert_eq!(with(&all), JobId { id: "mine".into(), var: "MCORE_JOB_ID" });
        assert_eq!(with(&all[..2]), JobId { id: "tr".into(), var: "TORCHELASTIC_RUN_ID" });
        assert_eq!(with(&[("SLURM_JOB_ID", "77"), ("TORCHELASTIC_RUN_ID", "none")]).id, "77");
        // The steps of one Slurm job, and mpirun jobs, are told apart (issue 34.1).
        let step = with(&[("SLURM_JOB_ID", "77"), ("SLURM_STEP_ID", "16")]);
        assert_eq!(step, JobId { id: "77.16".into(), var: "SLURM_JOB_ID.SLURM_STEP_ID" });
        assert_ne!(step, with(&[("SLURM_JOB_ID", "77"), ("SLURM_STEP_ID", "0")]));
        let ns = [("PMIX_NAMESPACE", "prterun-vm-4242@1"), ("SLURM_JOB_ID", "77")];
        assert_eq!(with(&ns), JobId { id: "prterun-vm-4242@1".into(), var: "PMIX_NAMESPACE" });
        assert_eq!(with(&[("OMPI_MCA_ess_base_jobid", "123")]).id, "123");
        assert_eq!(with(&[("MCORE_JOB_ID", "a b")]).describe(), "'a b' (from MCORE_JOB_ID)");
        let e = env(&[("RANK", "0"), ("WORLD_SIZE", "1"), ("MCORE_STORE_TOKEN", "")]).unwrap_err();
        assert!(e.0.contains("MCORE_STORE_TOKEN"), "{e}");
        let t = env(&[("RANK", "0"), ("WORLD_SIZE", "1"), ("MCORE_STORE_TOKEN", "s")]).unwrap();
        assert_eq!(t.store_token, StoreToken::new(b"s"));
    }

    /// Issue 34.1: the namespaces the issue names hash to one first port; their candidate lists
    /// part after it. A set MASTER_PORT is the only candidate.
    #[test]
    fn jobs_whose_derived_ports_collide_have_other_candidates() {
        let (a, b) = ("prterun-vm-4242@1", "prterun-vm-15301@1");
        assert_eq!(hashed_port(a), hashed_port(b), "the issue's colliding namespaces");
        let mpi = |ns: &'static str, extra: &[(&'static str, &'static str)]| {
            let mut v = vec![
                ("OMPI_COMM_WORLD_RANK", "1"),
                ("OMPI_COMM_WORLD_SIZE", "4"),
                ("OMPI_COMM_WORLD_LOCAL_SIZE", "4"),
                ("PMIX_NAMESPACE", ns),
            ];
            v.extend_from_slice(extra);
            env(&v).unwrap()
        };
        let (ea, eb) = (mpi(a, &[]), mpi(b, &[]));
        assert_eq!((ea.port_candidates[0], eb.port_candidates[0]), (ea.master_port, eb.master_port));
        assert_eq!(ea.port_candidates.len(), DERIVED_PORT_CANDIDATES);
        assert_ne!(ea.port_candidates[1..], eb.port_candidates[1..]);
        assert!(ea.port_candidates.iter().all(|p| (20000..32000).contains(p)));
        let distinct: std::collections::HashSet<_> = ea.port_candidates.iter().collect();
        assert_eq!(distinct.len(), DERIVED_PORT_CANDIDATES);
        assert_eq!(mpi(a, &[("MASTER_PORT", "29501")]).port_candidates, vec![29501]);
        // Steps 0 and 16 of one Slurm job: the same first port, other candidates after it.
        let step = |s: &'static str| {
            env(&[
                ("SLURM_PROCID", "0"),
                ("SLURM_NTASKS", "4"),
                ("SLURM_JOB_NODELIST", "vm"),
                ("SLURM_JOB_ID", "42"),
                ("SLURM_STEP_ID", s),
            ])
            .unwrap()
        };
        let (s0, s16) = (step("0"), step("16"));
        assert_eq!(s0.master_port, s16.master_port);
        assert_ne!(s0.job_id, s16.job_id);
        assert_ne!(s0.port_candidates[1..], s16.port_candidates[1..]);
    }

    fn facts(rank: u32, local_size: u32) -> PmixFacts {
        PmixFacts {
            nspace: "prterun-vm-4242@1".into(),
            rank,
            job_size: 8,
            local_rank: rank % local_size,
            local_size,
            hostname: "node-a".into(),
            node_id: Some(0),
            library: "test".into(),
        }
    }

    /// Under PMIx the rank, sizes and job id are PMIx's (not the launcher's variables); the
    /// store listens on an ephemeral port (0) on loopback when every rank runs on this node, on
    /// rank 0's host name otherwise; MASTER_ADDR / MASTER_PORT / MCORE_JOB_ID still win.
    #[test]
    fn under_pmix_the_facts_are_pmix_s_and_the_port_is_ephemeral() {
        let vars = |extra: &[(&'static str, &'static str)]| {
            let mut v = vec![("OMPI_COMM_WORLD_RANK", "5"), ("OMPI_COMM_WORLD_SIZE", "99"), ("PMIX_NAMESPACE", "x")];
            v.extend_from_slice(extra);
            let m: HashMap<String, String> = v.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            move |k: &str| m.get(k).cloned()
        };
        let e = LaunchEnv::from_lookup_with(&vars(&[]), Some(&facts(3, 8))).unwrap();
        assert_eq!((e.rank, e.world_size, e.local_rank, e.local_world_size), (3, 8, 3, 8));
        assert_eq!((e.master_addr.as_str(), e.master_port, e.rendezvous), ("127.0.0.1", 0, Rendezvous::Pmix));
        assert_eq!(e.port_candidates, vec![0]);
        assert_eq!(e.job_id, JobId { id: "prterun-vm-4242@1".into(), var: "the PMIx namespace" });
        assert_eq!(e.launcher, LauncherKind::OpenMpi);
        assert!(e.rendezvous_why.contains("pmix.local.size = pmix.job.size = 8"), "{}", e.rendezvous_why);
        // Two nodes: rank 0's host name.
        let e = LaunchEnv::from_lookup_with(&|_| None, Some(&facts(0, 4))).unwrap();
        assert_eq!((e.master_addr.as_str(), e.launcher, e.local_world_size), ("node-a", LauncherKind::Pmix, 4));
        let mut nameless = facts(0, 4);
        nameless.hostname.clear();
        let err = LaunchEnv::from_lookup_with(&|_| None, Some(&nameless)).unwrap_err();
        assert!(err.0.contains("pmix.hname") && err.0.contains("MASTER_ADDR"), "{err}");
        // What is set by hand wins.
        let set = vars(&[("MASTER_ADDR", "10.0.0.9"), ("MASTER_PORT", "29511"), ("MCORE_JOB_ID", "mine")]);
        let e = LaunchEnv::from_lookup_with(&set, Some(&facts(0, 4))).unwrap();
        assert_eq!((e.master_addr.as_str(), e.master_port, e.job_id.id.as_str()), ("10.0.0.9", 29511, "mine"));
        // Without facts: the TCP store, as before.
        assert_eq!(
            LaunchEnv::from_lookup(&vars(&[("OMPI_COMM_WORLD_LOCAL_SIZE", "99")])).unwrap().rendezvous,
            Rendezvous::TcpStore
        );
    }

    /// MCORE_RENDEZVOUS: auto tries PMIx only when a PMIx server started the process and no
    /// torchrun variables are set; pmix without a server and unknown values are named errors.
    #[test]
    fn the_rendezvous_switch() {
        let want = |pairs: &[(&str, &str)]| {
            let m: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            pmix_wanted(&move |k| m.get(k).cloned())
        };
        let server = [("PMIX_RANK", "0"), ("PMIX_NAMESPACE", "ns"), ("PMIX_SERVER_URI41", "x;tcp4://127.0.0.1:1")];
        assert_eq!(want(&server), Ok(PmixWanted::IfThere));
        assert_eq!(want(&server[..2]), Ok(PmixWanted::No), "no server URI");
        assert_eq!(want(&[server[0], server[1], server[2], ("RANK", "0"), ("WORLD_SIZE", "2")]), Ok(PmixWanted::No));
        assert_eq!(want(&[server[0], server[1], server[2], (RENDEZVOUS_ENV, "tcp-store")]), Ok(PmixWanted::No));
        assert_eq!(want(&[server[0], server[1], server[2], (RENDEZVOUS_ENV, "pmix")]), Ok(PmixWanted::Required));
        let e = want(&[(RENDEZVOUS_ENV, "pmix")]).unwrap_err();
        assert!(e.0.contains("MCORE_RENDEZVOUS=pmix") && e.0.contains("PMIX_SERVER_URI41"), "{e}");
        let e = want(&[(RENDEZVOUS_ENV, "carrier-pigeon")]).unwrap_err();
        assert!(e.0.contains("MCORE_RENDEZVOUS='carrier-pigeon'"), "{e}");
    }

    #[test]
    fn bad_values_are_named() {
        let e = env(&[("RANK", "x"), ("WORLD_SIZE", "2")]).unwrap_err();
        assert!(e.0.contains("RANK='x'"), "{e}");
        let e = env(&[("RANK", "4"), ("WORLD_SIZE", "4"), ("MASTER_ADDR", "h")]).unwrap_err();
        assert!(e.0.contains("rank 4") && e.0.contains("world size 4"), "{e}");
        let e = env(&[("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "h"), ("MASTER_PORT", "99999")]).unwrap_err();
        assert!(e.0.contains("MASTER_PORT='99999'"), "{e}");
        let e = env(&[("RANK", "1"), ("WORLD_SIZE", "2")]).unwrap_err();
        assert!(e.0.contains("MASTER_ADDR"), "{e}");
        let e = env(&[]).unwrap_err();
        assert!(e.0.contains("RANK and WORLD_SIZE"), "{e}");
        let e = env(&[("RANK", "0"), ("WORLD_SIZE", "1"), ("TORCHELASTIC_USE_AGENT_STORE", "maybe")]).unwrap_err();
        assert!(e.0.contains("'maybe'"), "{e}");
    }

    /// Issue 42: WORLD_SIZE=4000000000 was taken, and rank 0 aborted sizing a 16 GB list of ranks.
    /// Over the bound it is refused naming the variable and the value, under every launcher.
    #[test]
    fn a_world_over_the_bound_is_refused_naming_the_value() {
        let at_bound = MAX_WORLD_SIZE.to_string();
        let e = env(&[("RANK", "0"), ("WORLD_SIZE", &at_bound), ("MASTER_ADDR", "h")]).unwrap();
        assert_eq!(e.world_size, 131_072);
        let over = (MAX_WORLD_SIZE + 1).to_string();
        for (var, pairs) in [
            ("WORLD_SIZE=4000000000", vec![("RANK", "0"), ("WORLD_SIZE", "4000000000")]),
            ("WORLD_SIZE=131073", vec![("RANK", "0"), ("WORLD_SIZE", over.as_str())]),
            ("SLURM_NTASKS=4294967295", vec![("SLURM_PROCID", "0"), ("SLURM_NTASKS", "4294967295")]),
            ("OMPI_COMM_WORLD_SIZE=200000", vec![("OMPI_COMM_WORLD_RANK", "3"), ("OMPI_COMM_WORLD_SIZE", "200000")]),
        ] {
            let e = env(&pairs).unwrap_err();
            assert!(e.0.starts_with(&format!("{var} is more ranks than mcore_init brings up (at most 131072")), "{e}");
        }
    }

    #[test]
    fn megabyte_values_give_short_errors_that_name_the_variable() {
        let huge = "9".repeat(1 << 20);
        let cases = [
            ("RANK", vec![("RANK", huge.as_str()), ("WORLD_SIZE", "2")]),
            ("LOCAL_WORLD_SIZE", vec![("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_WORLD_SIZE", &huge)]),
            ("MASTER_PORT", vec![("RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_PORT", &huge)]),
            (
                "TORCHELASTIC_USE_AGENT_STORE",
                vec![("RANK", "0"), ("WORLD_SIZE", "1"), ("TORCHELASTIC_USE_AGENT_STORE", &huge)],
            ),
            (
                "TORCHELASTIC_RESTART_COUNT",
                vec![("RANK", "0"), ("WORLD_SIZE", "1"), ("TORCHELASTIC_RESTART_COUNT", &huge)],
            ),
        ];
        for (var, pairs) in cases {
            let e = env(&pairs).unwrap_err();
            assert!(
                e.0.len() < 1024 && e.0.contains(var) && e.0.contains("(1048576 bytes)"),
                "{var}: {} bytes",
                e.0.len()
            );
        }
    }
}
