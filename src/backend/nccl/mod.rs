//! The built-in NCCL backend's primitives: loading `libnccl.so.2` at run time (no CUDA needed to
//! build or to run the CPU parts), its version and feature gates, unique ids and their bytes for
//! the store, `ncclConfig_t`, and communicators created with a deadline.
//!
//! (Constants are `pub(crate)` or associated: cbindgen would put every public crate-level `const`
//! into the C header.)
//!
//! cudarc supplies the `sys` types; loading is ours (`loader`), because cudarc's loader looks for
//! other file names than the wheel's `libnccl.so.2` and panics on a missing library or symbol.

pub mod collective;
pub mod comm;
pub mod config;
pub mod error;
pub mod exchange;
pub mod factory;
pub mod join;
pub mod loader;
pub mod search;
pub mod unique_id;
pub mod version;

pub use comm::{Device, InitSpec, NcclComm};
pub use config::NcclConfig;
pub use error::NcclError;
pub use exchange::{share_unique_id, UNIQUE_ID_KEY};
pub use factory::NcclFactory;
pub use join::{JoinSpec, LaunchOrder};
pub use loader::cuda::CudaDriver;
pub use loader::nccl::NcclLibrary;
pub use search::LibrarySearch;
pub use unique_id::NcclUniqueId;
pub use version::{Feature, NcclVersion};
