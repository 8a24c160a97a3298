//! The launcher's environment: who am I, how many are we, where is the store.
//!
//! torchrun's variables first (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
//! MASTER_PORT, TORCHELASTIC_USE_AGENT_STORE, TORCHELASTIC_RUN_ID, TORCHELASTIC_RESTART_COUNT),
//! then Slurm (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID) and OpenMPI (OMPI_COMM_WORLD_RANK,
//! OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK) as fallbacks for the rank variables.
//!
//! The job id ([`JobId`], checked at rendezvous so that two jobs on one MASTER_ADDR:MASTER_PORT
//! never mix) is the first set of MCORE_JOB_ID (an explicit override), TORCHELASTIC_RUN_ID
//! (torchrun's `--rdzv-id`; its default `none` counts as unset) and SLURM_JOB_ID. The store's
//! shared secret comes from MCORE_STORE_TOKEN or MCORE_STORE_TOKEN_FILE
//! ([`crate::store::StoreToken`]).

use crate::quote::quoted;
use crate::store::StoreToken;
use std::fmt;

/// The variables a job id is read from, first set first.
pub const JOB_ID_VARS: [&str; 3] = ["MCORE_JOB_ID", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID"];

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
}

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
    /// The job this rank belongs to (see the module docs).
    pub job_id: JobId,
    /// The shared secret clients of the store must prove they hold; None: anyone is served.
    pub store_token: Option<StoreToken>,
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
    const CONVENTIONS: [(LauncherKind, [&str; 4]); 3] = [
        (LauncherKind::Torchrun, ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"]),
        (LauncherKind::Slurm, ["SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"]),
        (
            LauncherKind::OpenMpi,
            [
                "OMPI_COMM_WORLD_RANK",
                "OMPI_COMM_WORLD_SIZE",
                "OMPI_COMM_WORLD_LOCAL_RANK",
                "OMPI_COMM_WORLD_LOCAL_SIZE",
            ],
        ),
    ];
    for (launcher, [rank_v, size_v, local_v, local_size_v]) in CONVENTIONS {
        let (Some(rank), Some(size)) = (get(rank_v), get(size_v)) else { continue };
        let rank = parse_u32(rank_v, &rank)?;
        let world_size = parse_u32(size_v, &size)?;
        let local_rank = match get(local_v) {
            Some(v) => parse_u32(local_v, &v)?,
            None => rank,
        };
        // Slurm's tasks-per-node may read "4(x2)"; take the leading number.
        let local_world_size = match get(local_size_v) {
            Some(v) => {
                let head: String = v.chars().take_while(|c| c.is_ascii_digit()).collect();
                Some(parse_u32(local_size_v, &head).map_err(|_| {
                    EnvError(format!(
                        "environment variable {local_size_v}={} is not a non-negative integer",
                        quoted(&v)
                    ))
                })?)
            }
            None => None,
        };
        return Ok(RankVars { rank, world_size, local_rank, local_world_size, launcher });
    }
    Err(EnvError(
        "no launcher environment: set RANK and WORLD_SIZE (torchrun / mcore-launch), or run under Slurm \
         (SLURM_PROCID, SLURM_NTASKS) or OpenMPI (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE)"
            .to_string(),
    ))
}

impl LaunchEnv {
    /// Read the process environment (a value that is not UTF-8 is read lossily, so that its
    /// error names it instead of calling the variable unset).
    pub fn from_process() -> Result<Self, EnvError> {
        Self::from_lookup(&|k| std::env::var_os(k).map(|v| v.to_string_lossy().into_owned()))
    }

    /// Read from any lookup (tests pass a map).
    pub fn from_lookup(get: &dyn Fn(&str) -> Option<String>) -> Result<Self, EnvError> {
        let v = rank_vars(get)?;
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
        let master_addr = get("MASTER_ADDR").filter(|s| !s.trim().is_empty());
        let master_addr = match (master_addr, v.world_size) {
            (Some(a), _) => a.trim().to_string(),
            (None, 1) => "127.0.0.1".to_string(),
            (None, _) => {
                return Err(EnvError(
                    "MASTER_ADDR is not set: every rank needs the address of the rendezvous store".into(),
                ))
            }
        };
        let master_port = match get("MASTER_PORT") {
            Some(p) => p.trim().parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(|| {
                EnvError(format!("environment variable MASTER_PORT={} is not a port number (1-65535)", quoted(&p)))
            })?,
            None => DEFAULT_MASTER_PORT,
        };
        let use_agent_store = match get("TORCHELASTIC_USE_AGENT_STORE") {
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
            job_id: JobId::from_lookup(get),
            store_token: StoreToken::from_lookup(get).map_err(EnvError)?,
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
        assert_eq!(with(&[("MCORE_JOB_ID", "a b")]).describe(), "'a b' (from MCORE_JOB_ID)");
        let e = env(&[("RANK", "0"), ("WORLD_SIZE", "1"), ("MCORE_STORE_TOKEN", "")]).unwrap_err();
        assert!(e.0.contains("MCORE_STORE_TOKEN"), "{e}");
        let t = env(&[("RANK", "0"), ("WORLD_SIZE", "1"), ("MCORE_STORE_TOKEN", "s")]).unwrap();
        assert_eq!(t.store_token, StoreToken::new(b"s"));
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
