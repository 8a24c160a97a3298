//! runtime (placeholder; filled by its issue).
#![forbid(unsafe_code)]
