//! Reproducible per-rank RNG (pure, no I/O): seed policies ([`policy`]), the named Philox stream
//! tracker with Megatron-Core's semantics ([`tracker`]), cuRAND-exact Philox4x32-10 on the CPU
//! ([`philox`]), named ChaCha CPU streams ([`chacha_streams`]), and a rank's streams together with
//! their checkpoint blob ([`rank_rng`], [`checkpoint`]).
#![forbid(unsafe_code)]

pub mod chacha_streams;
pub mod checkpoint;
mod error;
pub mod philox;
pub mod policy;
pub mod rank_rng;
pub mod tracker;

pub use chacha_streams::{CpuStreamState, CpuStreams};
pub use error::RngError;
pub use philox::CurandPhilox;
pub use policy::{
    check_training_seed, megatron_tracker_seeds, seed_plan, sharded_index, stream_seeds, GroupPosition,
    RankCoordinates, SeedPlan, SeedPolicy, SeedRequest, DEFAULT_STREAM,
};
pub use rank_rng::{RankRng, RestoreMode};
pub use tracker::{ForkFrame, Generator, PhiloxState, Tracker};
