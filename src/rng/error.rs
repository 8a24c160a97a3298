//! The one error type of the rng module. Texts of the Megatron-shaped variants match
//! Megatron-Core's exception messages exactly (conformance vectors compare them).

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RngError {
    /// The training initializer's seed check (`Seed (X) should be a positive integer.`).
    BadSeed(String),
    /// A tracker `add` with a seed added before since the last reset.
    SeedExists(u64),
    /// A tracker `add` with a name already present.
    NameExists(String),
    /// A fork or lookup of a stream that was never added.
    NotAdded(String),
    /// A scoped fork left out of order (non-LIFO).
    ForkOrder { current: String, desired: String },
    /// A seed or offset computation overflowed 64 bits.
    Overflow(String),
    /// Bad input other than the above (policy text, group positions, ...).
    Invalid(String),
    /// A checkpoint blob that does not decode or fails its checksum.
    Corrupt(String),
    /// A checkpoint written by another global rank.
    WrongRank { blob_rank: u32, this_rank: u32 },
    /// A checkpoint written under another layout (without the re-derive option).
    LayoutChanged(String),
}

impl fmt::Display for RngError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RngError::BadSeed(s) => write!(f, "Seed ({s}) should be a positive integer."),
            RngError::SeedExists(s) => write!(f, "seed {s} already exists"),
            RngError::NameExists(n) => write!(f, "cuda rng state {n} already exists"),
            RngError::NotAdded(n) => write!(f, "cuda rng state {n} is not added"),
            RngError::ForkOrder { current, desired } => {
                write!(f, "current state name {current} is not the same as the desired state name {desired}.")
            }
            RngError::Overflow(m) | RngError::Invalid(m) | RngError::Corrupt(m) => f.write_str(m),
            RngError::WrongRank { blob_rank, this_rank } => write!(
                f,
                "RNG checkpoint was written by global rank {blob_rank}, but this is rank {this_rank}: \
                 load the checkpoint file of rank {this_rank}"
            ),
            RngError::LayoutChanged(m) => {
                write!(f, "RNG checkpoint layout differs: {m}; pass the re-derive option to re-seed for the new layout")
            }
        }
    }
}

impl std::error::Error for RngError {}
