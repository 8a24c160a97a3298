//! The one rendezvous (`Meeting`), the store's key families, and the meetings before communicators exist: check-in, progress marks, blame.

pub mod checkin;
pub(crate) mod explain;
pub(crate) mod keys;
pub(crate) mod meet;
pub(crate) mod progress;
