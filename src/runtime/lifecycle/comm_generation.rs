//! The communicator generation: a process-wide number that changes exactly when communicator
//! handles the library gave out may have been released, so a caller that cached them knows to
//! fetch them again (the handle is the backend's own pointer, an `ncclComm_t`, which the caller
//! passes to the backend directly: the library cannot put an indirection of its own in between).
//!
//! It changes when a live runtime is taken out for a destroy or a recovery (every handle of the
//! runtime and of its groups made after init may go), and when a suspend releases a
//! communicator (recreate mode; its resume creates a new one). A native suspend keeps the
//! handle and leaves the number as it is.

use std::sync::atomic::{AtomicU64, Ordering};

static GENERATION: AtomicU64 = AtomicU64::new(1);

/// The current generation (1 before anything was released).
pub fn comm_generation() -> u64 {
    GENERATION.load(Ordering::SeqCst)
}

/// Handles given out so far may be released from now on: the next generation.
pub(crate) fn comm_handles_released() {
    GENERATION.fetch_add(1, Ordering::SeqCst);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_release_moves_the_generation_on() {
        let before = comm_generation();
        comm_handles_released();
        assert!(comm_generation() > before);
    }
}
