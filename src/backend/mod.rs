//! backend (placeholder; filled by its issue).

pub mod nccl;
