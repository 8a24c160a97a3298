//! The one error type of the NCCL backend, and its mapping to the C ABI's status codes.
#![forbid(unsafe_code)]

use crate::store::StoreError;
use std::fmt;
use std::time::Duration;

/// Why an NCCL operation failed. Every variant's message names what to do or what was waited for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NcclError {
    /// No candidate file could be opened; each entry is `(path or name, why)`.
    LibraryNotFound { library: String, tried: Vec<(String, String)>, hint: String },
    /// The library opened but lacks a symbol this backend needs.
    MissingSymbol { library: String, path: String, symbol: String, detail: String },
    /// The loaded library is older than what a feature needs.
    VersionTooOld { feature: String, needed: String, found: String },
    /// An NCCL or CUDA call returned an error.
    Call { call: String, code: i32, name: String, detail: String },
    /// A deadline passed while waiting for `what`.
    Timeout { what: String, deadline: Duration },
    /// A bad argument from the caller, named.
    InvalidArgument(String),
    /// The rendezvous store failed while doing `what` (e.g. publishing a group's unique id).
    Store { what: String, error: StoreError },
    /// A peer failed and the runtime ended the wait for `what` (the communicator is not used again).
    Interrupted { what: String },
}

impl NcclError {
    pub(crate) fn invalid(msg: impl Into<String>) -> Self {
        NcclError::InvalidArgument(msg.into())
    }
}

impl fmt::Display for NcclError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NcclError::LibraryNotFound { library, tried, hint } => {
                write!(f, "{library} could not be loaded; tried:")?;
                for (path, why) in tried {
                    write!(f, " [{path}: {why}]")?;
                }
                write!(f, ". {hint}")
            }
            NcclError::MissingSymbol { library, path, symbol, detail } => write!(
                f,
                "{path} is not a usable {library}: symbol {symbol} is missing ({detail}); point at the right library"
            ),
            NcclError::VersionTooOld { feature, needed, found } => {
                write!(f, "{feature} needs NCCL {needed} or newer, but the loaded NCCL is {found}")
            }
            NcclError::Call { call, code, name, detail } => {
                write!(f, "{call} failed: {name} (code {code})")?;
                if !detail.is_empty() {
                    write!(f, ": {detail}")?;
                }
                Ok(())
            }
            NcclError::Timeout { what, deadline } => {
                write!(f, "timed out after {:.3} s waiting for {what}", deadline.as_secs_f64())
            }
            NcclError::InvalidArgument(msg) => write!(f, "invalid argument: {msg}"),
            NcclError::Store { what, error } => write!(f, "{what}: {error}"),
            NcclError::Interrupted { what } => {
                write!(f, "a peer failed: the wait for {what} was ended (the communicator is not used again)")
            }
        }
    }
}

impl std::error::Error for NcclError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_lists_every_path_tried() {
        let e = NcclError::LibraryNotFound {
            library: "NCCL".into(),
            tried: vec![
                ("/a/libnccl.so.2".into(), "no such file".into()),
                ("libnccl.so.2".into(), "not on the loader path".into()),
            ],
            hint: "set MCORE_NCCL_LIBRARY".into(),
        };
        let text = e.to_string();
        assert!(text.contains("/a/libnccl.so.2: no such file"), "{text}");
        assert!(text.contains("libnccl.so.2: not on the loader path"), "{text}");
        assert!(matches!(e, NcclError::LibraryNotFound { .. }));
    }

    #[test]
    fn timeout_names_what_and_deadline() {
        let e = NcclError::Timeout { what: "group tp/0".into(), deadline: Duration::from_millis(1500) };
        assert_eq!(e.to_string(), "timed out after 1.500 s waiting for group tp/0");
    }
}
