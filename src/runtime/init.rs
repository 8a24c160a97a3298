//! The idempotent initializer's entry points and the process-global slot of the live runtime.
//!
//! Process-global state lives in one [`IdempotentSlot`]: `initialize` with the same settings is a
//! no-op, with other settings an error naming the differences; `destroy` tears everything down
//! (communicators, store client, store server) so that `initialize` works again. The bring-up
//! itself is [`super::bring_up`]; a spare's, and a failed attempt kept for recovery, are
//! [`super::pending`]'s.

use super::bring_up::{bring_up, Carried};
use super::env::LaunchEnv;
use super::error::RuntimeError;
use super::init_args::{default_factory, settings_of, BackendResolver, InitArgs};
use super::pending::{check_in_spare, discard_pending, is_spare};
use super::runtime_state::Runtime;
use super::settings::{IdempotentSlot, InitOutcome, SlotError};

static RUNTIME: IdempotentSlot<Runtime> = IdempotentSlot::new();

/// Initialize from the process environment. Same settings again: `Ok(AlreadyUp)`, nothing done.
pub fn initialize(args: InitArgs) -> Result<InitOutcome, RuntimeError> {
    let env = LaunchEnv::from_process()?;
    initialize_with(args, env, &default_factory)
}

/// Initialize with an explicit environment and backend resolution (tests, embedders).
pub fn initialize_with(args: InitArgs, env: LaunchEnv, factory: &BackendResolver) -> Result<InitOutcome, RuntimeError> {
    init_slot(args, env, factory, None)
}

/// Bring up the layout `args` describes on `env` with what a recovery carries (see
/// [`Carried`]), the backend resolved by [`default_factory`].
pub(super) fn initialize_on_store(
    args: InitArgs,
    env: LaunchEnv,
    carried: Carried,
) -> Result<InitOutcome, RuntimeError> {
    init_slot(args, env, &default_factory, Some(carried))
}

fn init_slot(
    args: InitArgs,
    env: LaunchEnv,
    factory: &BackendResolver,
    carried: Option<Carried>,
) -> Result<InitOutcome, RuntimeError> {
    let settings = settings_of(&args, env.world_size);
    let fingerprint = settings.fingerprint();
    let keep = carried.as_ref().map(|c| c.timeout);
    let fresh = carried.is_none();
    if env.rank >= args.layout_world(env.world_size)? {
        if is_spare() {
            return Ok(InitOutcome::Spare);
        }
        if fresh {
            discard_pending();
        }
        // A spare has no communicators to be given.
        let reuse = carried.map(|c| (c.store, c.attempt));
        return check_in_spare(&args, env, fingerprint.as_bytes(), reuse).map(|()| InitOutcome::Spare);
    }
    RUNTIME
        .init(settings, || {
            if fresh {
                // A new attempt: the store of a failed one that nobody recovered goes.
                discard_pending();
            }
            let mut rt = bring_up(&args, env, fingerprint.as_bytes(), factory, carried)?;
            if let Some(t) = keep {
                (rt.timeout, rt.args.timeout) = (t, t);
            }
            Ok(rt)
        })
        .map_err(|e| match e {
            SlotError::DifferentSettings(diff) => RuntimeError::AlreadyInitialized(diff),
            SlotError::Busy(what) => RuntimeError::Busy(what.into()),
            SlotError::BringUp(e) => e,
        })
}

/// Take the live runtime out (recovery tears it down its own way). Waits for other threads
/// still using it (a collective in progress) at most the runtime's timeout; `Busy` past that.
pub(super) fn take_runtime() -> Result<Option<Runtime>, RuntimeError> {
    RUNTIME.take(|rt| rt.timeout).map(|taken| taken.map(|(_, rt)| rt)).map_err(|what| RuntimeError::Busy(what.into()))
}

/// Whether the runtime is initialized.
pub fn is_initialized() -> bool {
    RUNTIME.is_up()
}

/// Run `f` with the live runtime.
pub fn with_runtime<R>(f: impl FnOnce(&Runtime) -> R) -> Result<R, RuntimeError> {
    RUNTIME.with(f).ok_or(RuntimeError::NotInitialized)
}
