//! The one error type of the topology engine.

use std::fmt;

/// What went wrong, coarse enough to map onto a status code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TopologyErrorKind {
    /// The parallel configuration cannot exist (sizes, order string, divisibility).
    InvalidConfig,
    /// A rank, group index or virtual stage is outside its range.
    OutOfRange,
    /// An unknown group-kind name, or a kind this layout does not have.
    UnknownKind,
    /// A user embedding-ranks callback failed or returned an unusable list.
    Callback,
}

/// An error of the topology engine: a kind and a message naming the offending values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopologyError {
    pub kind: TopologyErrorKind,
    pub message: String,
}

impl TopologyError {
    pub(crate) fn config(message: impl Into<String>) -> Self {
        TopologyError { kind: TopologyErrorKind::InvalidConfig, message: message.into() }
    }
    pub(crate) fn range(message: impl Into<String>) -> Self {
        TopologyError { kind: TopologyErrorKind::OutOfRange, message: message.into() }
    }
    pub(crate) fn unknown_kind(message: impl Into<String>) -> Self {
        TopologyError { kind: TopologyErrorKind::UnknownKind, message: message.into() }
    }
    pub(crate) fn callback(message: impl Into<String>) -> Self {
        TopologyError { kind: TopologyErrorKind::Callback, message: message.into() }
    }
}

impl fmt::Display for TopologyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for TopologyError {}
