//! The one error type of the backend module.

use crate::abi::{mcore_status, SizedStructError};
use crate::quote::{clip, quoted};
use std::fmt;

/// What went wrong registering, loading or using a backend. Every variant names the backend,
/// path, group or value involved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendError {
    /// A plugin file could not be loaded or lacks its entry symbol.
    Load { path: String, reason: String },
    /// A vtable of another ABI version.
    Abi(String),
    /// A vtable whose `struct_size` is no layout this library reads; `origin` says whose.
    StructSize { origin: String, error: SizedStructError },
    /// A vtable that is malformed otherwise (NULL name, no creation strategy, ...).
    InvalidVtable(String),
    /// A backend of this name is registered already.
    AlreadyExists(String),
    /// No backend of this name; `known` lists the registered ones, `hint` what to do (where a
    /// plugin of that name was looked for, a near-miss name).
    NotFound { name: String, known: Vec<String>, hint: String },
    /// The backend leaves the slot a call needs NULL.
    Unsupported { backend: String, op: &'static str },
    /// A bad argument from the caller (group description, buffer), named.
    InvalidArgument(String),
    /// This rank is not in the group it asked for.
    NotMember { group: String, rank: u32 },
    /// The backend returned a failure status; `message` is its `last_error` (or the store's).
    Plugin { backend: String, op: &'static str, group: String, status: mcore_status, message: String },
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackendError::Load { path, reason } => {
                write!(f, "cannot load backend plugin {}: {}", quoted(path), clip(reason))
            }
            BackendError::Abi(m) | BackendError::InvalidVtable(m) | BackendError::InvalidArgument(m) => f.write_str(m),
            BackendError::StructSize { origin, error } => write!(f, "{origin}: {error}"),
            BackendError::AlreadyExists(name) => {
                write!(f, "a backend named {} is registered already (unregister it first)", quoted(name))
            }
            BackendError::NotFound { name, known, hint } => write!(
                f,
                "no backend named {} (registered: {}); {hint}",
                quoted(name),
                if known.is_empty() { "none".to_string() } else { known.join(", ") }
            ),
            BackendError::Unsupported { backend, op } => {
                write!(f, "backend '{backend}' does not support {op} (its vtable slot is NULL)")
            }
            BackendError::NotMember { group, rank } => {
                write!(f, "global rank {rank} is not a member of group '{group}'")
            }
            BackendError::Plugin { backend, op, group, status, message } => {
                write!(f, "backend '{backend}' {op} failed for group '{group}' ({}): {message}", status.as_str())
            }
        }
    }
}

impl std::error::Error for BackendError {}
