//! The command line: usage and the options it parses into.

use crate::common::cli::{Flags, GRID_USAGE, LAYOUT_USAGE};
use crate::{after_init, common, fault, recovery};
use mcore_init::runtime::{self, InitArgs, SuspendRequest};
use mcore_init::topology::{MindSpeedOptions, TopologyConfig};
use std::time::Duration;

pub(crate) fn usage() -> String {
    format!(
        "usage: mcore-selftest {LAYOUT_USAGE} {GRID_USAGE} [--backend gloo|nccl|PATH] [--timeout SECONDS|none] [--cycles N] \
         [--seed S [--seed-policy megatron|roll|sharded:<kind>,...] [--data-parallel-random-init]] \
         [--comm-strategy auto|split|per-group] [--comm-config FILE.yaml] [--hccl-group-buffer NAME:MB;...] [--split-share] \
         [--device N] [--json] [--grids-disjoint-or-identical] [--mindspeed KEY=VALUE,...|default] \
         [--spares N] [--fail-rank R[,R...] [--fail-at before|during|verify|after] [--recovery-window SECONDS]] \
         [--fault RANK:start|checkin|created|verify|groups|destroy|recover:kill|stop|stop=SECONDS] \
         [--group NAME:R1,R2,... (repeatable) [--group-order given|shuffled:SEED] [--group-wait name|start] \
         [--group-timeout SECONDS] [--group-absent RANK]] \
         [--suspend-resume [GRID:]KIND[,KIND...]|[GRID:]all] [--suspend-each-kind]"
    )
}

pub(crate) struct Options {
    pub(crate) init: InitArgs,
    /// init → verify → destroy this many times; open fds and threads are compared between the
    /// end of the first and of the last cycle.
    pub(crate) cycles: u32,
    /// One JSON line instead of the human one (`--json`, and always with `--fail-rank`).
    pub(crate) json: bool,
    /// `--fail-rank R [--fail-at before|during|verify|after]`: rank R is killed and the survivors
    /// recover (docs/recovery.md); every rank prints its JSON line.
    pub(crate) fail: Option<recovery::FailOptions>,
    /// `--suspend-resume KINDS|all`: after verifying, suspend those kinds' communicators, check
    /// that using one is refused, resume them (timed), and verify every kind again.
    pub(crate) suspend: Option<SuspendRequest>,
    /// `--suspend-each-kind`: after verifying, suspend the layout's kinds one after another on
    /// every rank (kept suspended), rank 0 reading the device's free memory before and after each
    /// (NCCL: `cuMemGetInfo`; ranks meet through the store between steps); then resume all and
    /// verify every kind again.
    pub(crate) suspend_each: bool,
    /// `--group`: groups made after init by their members (see [`after_init`]).
    pub(crate) groups: after_init::GroupRun,
}

/// The options of `args`, the init timeout `env_timeout` (`MCORE_INIT_TIMEOUT`'s) unless
/// `--timeout` gives one.
pub(crate) fn parse_args(args: &[String], env_timeout: Duration) -> Result<Option<Options>, String> {
    let mut init = InitArgs { topology: TopologyConfig::default(), ..InitArgs::default() };
    let mut cycles = 1;
    let mut json = false;
    let (mut fail_rank, mut window, mut fail_at) = (None, None, None);
    let mut suspend = None;
    let mut suspend_each = false;
    init.timeout = env_timeout;
    let mut groups = after_init::GroupRun::default();
    let mut flags = Flags::new(args);
    let mut grids = common::cli::GridArgs::default();
    while let Some((flag, inline)) = flags.next() {
        if grids.flag(flag, inline, &mut flags)? {
            continue;
        }
        match flag {
            "--group" => groups.specs.push(after_init::parse_group(flags.value(flag, inline)?)?),
            "--group-order" => groups.order = after_init::parse_order(flags.value(flag, inline)?)?,
            "--group-wait" => {
                groups.wait_in_start_order = match flags.value(flag, inline)? {
                    "name" => false,
                    "start" => true,
                    other => return Err(format!("--group-wait '{other}': expected name or start")),
                }
            }
            "--group-timeout" => {
                groups.timeout = Some(mcore_init::timeout::parse_seconds(flag, flags.value(flag, inline)?)?);
            }
            "--group-absent" => groups.absent = Some(common::cli::number(flag, flags.value(flag, inline)?)?),
            "-h" | "--help" => return Ok(None),
            "--backend" => init.backend = flags.value(flag, inline)?.to_string(),
            "--seed" => {
                let v = flags.value(flag, inline)?;
                init.seed = Some(v.trim().parse::<i64>().map_err(|_| format!("--seed: '{v}' is not an integer"))?);
            }
            "--seed-policy" => {
                let v = flags.value(flag, inline)?;
                init.seed_policy = v.parse().map_err(|e| format!("--seed-policy: {e}"))?;
            }
            "--data-parallel-random-init" => init.data_parallel_random_init = true,
            "--comm-strategy" => {
                init.comm_strategy = flags.value(flag, inline)?.parse().map_err(|e| format!("--comm-strategy: {e}"))?;
            }
            "--comm-config" => {
                let path = flags.value(flag, inline)?;
                init.comm_config
                    .add_yaml_file(std::path::Path::new(path))
                    .map_err(|e| format!("--comm-config: {e}"))?;
            }
            "--hccl-group-buffer" => init
                .comm_config
                .add_group_buffers(flags.value(flag, inline)?, "--hccl-group-buffer")
                .map_err(|e| e.to_string())?,
            "--split-share" => init.comm_config.default.split_share = Some(true),
            "--mindspeed" => {
                let text = flags.value(flag, inline)?;
                init.mindspeed = Some(MindSpeedOptions::parse(text).map_err(|e| format!("--mindspeed: {e}"))?);
            }
            "--json" if inline.is_some() => return Err("--json takes no value".into()),
            "--json" => json = true,
            "--device" => init.device = Some(common::cli::number(flag, flags.value(flag, inline)?)?),
            "--cycles" => {
                cycles = common::cli::number(flag, flags.value(flag, inline)?)?;
                if cycles == 0 {
                    return Err("--cycles: must be at least 1".into());
                }
            }
            "--fail-rank" => {
                let v = flags.value(flag, inline)?;
                fail_rank = Some(v.split(',').map(|r| common::cli::number(flag, r)).collect::<Result<Vec<u32>, _>>()?);
            }
            "--spares" => init.spares = common::cli::number(flag, flags.value(flag, inline)?)?,
            "--grids-disjoint-or-identical" if inline.is_some() => {
                return Err("--grids-disjoint-or-identical takes no value".into())
            }
            "--grids-disjoint-or-identical" => init.grids_disjoint_or_identical = true,
            "--fail-at" => fail_at = Some(flags.value(flag, inline)?.parse::<recovery::FailAt>()?),
            "--recovery-window" => {
                window = Some(mcore_init::timeout::parse_seconds(flag, flags.value(flag, inline)?)?);
            }
            "--timeout" => {
                init.timeout = mcore_init::timeout::parse_seconds(flag, flags.value(flag, inline)?)?;
            }
            "--fault" => fault::arm(flags.value(flag, inline)?)?,
            "--suspend-each-kind" if inline.is_some() => return Err("--suspend-each-kind takes no value".into()),
            "--suspend-each-kind" => suspend_each = true,
            "--suspend-resume" => {
                // [GRID:]KIND[,KIND...] or [GRID:]all.
                let v = flags.value(flag, inline)?.trim();
                let (grid, list) = match v.split_once(':') {
                    Some((g, l)) => (Some(g.trim().to_string()), l.trim()),
                    None => (None, v),
                };
                let mut req = match list {
                    "all" => SuspendRequest::all(),
                    "" => return Err("--suspend-resume: name kinds (comma-separated) or all".into()),
                    list => SuspendRequest::kinds(list.split(',').map(str::trim)),
                };
                req.grid = grid;
                suspend = Some(req);
            }
            _ => return Err(format!("unknown option '{flag}'")),
        }
    }
    // The first grid (the plain layout flags' `default`, or the first --grid when no plain
    // flag was given) and the others, each seeded as the first is (from its own coordinates).
    let mut list = grids.finish()?.into_iter();
    let first = list.next().expect("finish gives at least one grid");
    (init.topology, init.grid_name) = (first.config, first.name);
    init.grids = list.map(|g| runtime::GridSpec { name: g.name, topology: g.config, seed: init.seed }).collect();
    let fail = match (fail_rank, window, fail_at) {
        (Some(ranks), window, at) if cycles == 1 => {
            Some(recovery::FailOptions { ranks, at: at.unwrap_or(recovery::FailAt::After), window })
        }
        (Some(_), ..) => return Err("--fail-rank runs one cycle: drop --cycles".into()),
        (None, Some(_), _) => return Err("--recovery-window needs --fail-rank R".into()),
        (None, _, Some(_)) => return Err("--fail-at needs --fail-rank R".into()),
        (None, None, None) => None,
    };
    // A recovery run reports in JSON (every rank's outcome: recovered, left, or the refusal), as
    // the scripts that drive it read it; the human line is its "line" field.
    let json = json || fail.is_some();
    if (suspend.is_some() || suspend_each) && (fail.is_some() || cycles > 1) {
        return Err("--suspend-resume and --suspend-each-kind run one cycle without --fail-rank".into());
    }
    if suspend.is_some() && suspend_each {
        return Err("--suspend-resume and --suspend-each-kind: choose one".into());
    }
    if groups.specs.is_empty()
        && (groups.timeout.is_some() || groups.absent.is_some() || groups.order.is_some() || groups.wait_in_start_order)
    {
        return Err("--group-order, --group-timeout and --group-absent need --group NAME:R1,R2,...".into());
    }
    if !groups.specs.is_empty() && fail.is_some() {
        return Err("--group and --fail-rank do not go together".into());
    }
    Ok(Some(Options { init, cycles, json, fail, suspend, suspend_each, groups }))
}
