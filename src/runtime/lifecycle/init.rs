//! The idempotent initializer's entry points and the process-global slot of the live runtime.
//!
//! Process-global state lives in one [`IdempotentSlot`]: `initialize` with the same settings is a
//! no-op, with other settings an error naming the differences; `destroy` tears everything down
//! (communicators, store client, store server) so that `initialize` works again. The bring-up
//! itself is [`super::bring_up`]; what a transition keeps when it does not end up (a spare's
//! check-in, a failed attempt kept for recovery, a lingering store) is [`super::pending`]'s, held
//! in the same slot.

use super::bring_up::{bring_up, Carried};
use super::init_args::{default_factory, settings_of, BackendResolver, InitArgs};
use super::pending::{check_in_spare, Kept, RuntimeClaim};
use super::runtime_state::Runtime;
use super::settings::{IdempotentSlot, InitOutcome, SlotError};
use crate::runtime::error::RuntimeError;
use crate::runtime::launch::env::LaunchEnv;

/// The runtime's one lifecycle: idle, a transition running (initialize, recovery, destroy), up,
/// or not up but keeping what recovery or a lingering store host needs ([`Kept`]).
static RUNTIME: IdempotentSlot<Runtime, Kept> = IdempotentSlot::new();

/// What the runtime reads as while a recovery runs, and while a destroy does.
pub(crate) const RECOVERING: &str = "a recovery is in progress";
pub(crate) const DESTROYING: &str = "a destroy is in progress";

/// MindSpeed's per-group HCCL buffer string (`dp:200;tp:300;exp:400`), applied to the per-kind
/// communicator options by [`initialize`] (`CommConfig::add_group_buffers`).
pub const GROUP_BUFFER_ENV: &str = "MCORE_HCCL_GROUP_BUFFER";

/// Initialize from the process environment. Same settings again: `Ok(AlreadyUp)`, nothing done.
pub fn initialize(mut args: InitArgs) -> Result<InitOutcome, RuntimeError> {
    warn_typos_once();
    // A rank stopped by SIGINT or SIGTERM while it waits says for what (`wait_words`).
    crate::wait_words::install();
    // PMIx_Init (a blocking call, made on first use of the client) ends within the init timeout.
    crate::backend::pmix::limit_init(args.timeout);
    let env = LaunchEnv::from_process()?;
    if let Some(text) = std::env::var(GROUP_BUFFER_ENV).ok().filter(|t| !t.trim().is_empty()) {
        args.comm_config.add_group_buffers(&text, GROUP_BUFFER_ENV).map_err(RuntimeError::InvalidArgument)?;
    }
    initialize_with(args, env, &default_factory)
}

/// The process's `MCORE_*` typos and an unknown `MCORE_LOG` level, one warning each
/// ([`crate::env_vars::typo_warnings`]), once per process and only on a node's first rank
/// (`LOCAL_RANK` 0 or unset): the ranks of a node share their environment.
fn warn_typos_once() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if std::env::var("LOCAL_RANK").is_ok_and(|r| r.trim() != "0") {
            return;
        }
        let mut vars: Vec<(String, String)> = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.to_string_lossy().into_owned())))
            .filter(|(k, _)| k.starts_with("MCORE_"))
            .collect();
        vars.sort();
        for line in crate::env_vars::typo_warnings(vars.iter().map(|(k, v)| (k.as_str(), v.as_str()))) {
            eprintln!("{line}");
        }
    });
}

/// Initialize with an explicit environment and backend resolution (tests, embedders).
pub fn initialize_with(args: InitArgs, env: LaunchEnv, factory: &BackendResolver) -> Result<InitOutcome, RuntimeError> {
    let settings = settings_of(&args, env.world_size);
    let fingerprint = settings.fingerprint();
    RUNTIME
        .init(settings, |claim| bring_up_claimed(claim, &args, env, fingerprint.as_bytes(), factory, None))
        .map_err(from_slot)
}

/// Bring up the layout `args` describes on `env` with what a recovery carries (see
/// [`Carried`]), the backend resolved by [`default_factory`], as the transition `claim` holds.
pub(crate) fn initialize_on_store(
    claim: RuntimeClaim,
    args: InitArgs,
    env: LaunchEnv,
    carried: Carried,
) -> Result<InitOutcome, RuntimeError> {
    let settings = settings_of(&args, env.world_size);
    let fingerprint = settings.fingerprint();
    claim
        .bring_up(settings, |claim| {
            bring_up_claimed(claim, &args, env, fingerprint.as_bytes(), &default_factory, Some(carried))
        })
        .map_err(from_slot)
}

fn from_slot(e: SlotError<RuntimeError>) -> RuntimeError {
    match e {
        SlotError::DifferentSettings(diff) => RuntimeError::AlreadyInitialized(diff),
        SlotError::Busy(what) => RuntimeError::Busy(what.into()),
        SlotError::BringUp(e) => e,
    }
}

/// One bring-up (`None`: this rank is a spare, kept in the claim standing by).
fn bring_up_claimed(
    claim: &mut RuntimeClaim,
    args: &InitArgs,
    env: LaunchEnv,
    fingerprint: &[u8],
    factory: &BackendResolver,
    carried: Option<Carried>,
) -> Result<Option<Runtime>, RuntimeError> {
    let spare = env.rank >= args.layout_world(env.world_size)?;
    if carried.is_none() {
        if spare && claim.kept().is_some_and(Kept::is_spare) {
            // Standing by already.
            return Ok(None);
        }
        // A new attempt: what an earlier one kept goes (the store of a failed attempt that
        // nobody recovered, a spare of an earlier layout, a lingering store host's server).
        if let Some(kept) = claim.take_kept() {
            kept.release();
        }
    }
    if spare {
        // A spare has no communicators to be given.
        let reuse = carried.map(|c| (c.store, c.attempt));
        claim.keep(Kept::Attempt(Box::new(check_in_spare(args, env, fingerprint, reuse)?)));
        return Ok(None);
    }
    let keep = carried.as_ref().map(|c| c.timeout);
    let mut rt = bring_up(claim, args, env, fingerprint, factory, carried)?;
    if let Some(t) = keep {
        (rt.timeout, rt.args.timeout) = (t, t);
    }
    Ok(Some(rt))
}

/// Claim the runtime for the transition `what`: the live runtime taken out (after other threads
/// still using it, a collective in progress, finish: at most the runtime's timeout; `Busy` past
/// that), or what it kept (in the claim).
pub(crate) fn claim_runtime(
    what: &'static str,
) -> Result<(RuntimeClaim, Option<(super::settings::Settings, Runtime)>), RuntimeError> {
    let claimed = RUNTIME.claim(what, |rt| rt.timeout).map_err(|what| RuntimeError::Busy(what.into()))?;
    if claimed.1.is_some() {
        // The live runtime is out: a destroy or a recovery releases its communicators.
        super::comm_generation::comm_handles_released();
    }
    Ok(claimed)
}

/// Whether the runtime is initialized.
pub fn is_initialized() -> bool {
    RUNTIME.is_up()
}

/// Whether a spare is standing by in this process (see [`InitArgs::spares`]).
pub fn is_spare() -> bool {
    RUNTIME.with_kept(Kept::is_spare).unwrap_or(false)
}

/// Run `f` with the live runtime.
pub fn with_runtime<R>(f: impl FnOnce(&Runtime) -> R) -> Result<R, RuntimeError> {
    RUNTIME.with(f).ok_or(RuntimeError::NotInitialized)
}

/// Tear down what `initialize` brought up, or let go of what the runtime kept (see
/// [`crate::runtime::destroy`]). `false` when there was nothing.
pub(crate) fn destroy() -> Result<bool, RuntimeError> {
    let (mut claim, state) = claim_runtime(DESTROYING)?;
    match state {
        Some((_, runtime)) => {
            super::leave::teardown(runtime);
            Ok(true)
        }
        None => Ok(claim.take_kept().map(Kept::release).is_some()),
    }
}
