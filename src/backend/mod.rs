//! backend (placeholder; filled by its issue).

