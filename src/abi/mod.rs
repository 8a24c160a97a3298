//! The C types shared by the public API (`include/mcore_init.h`) and the backend plugin ABI
//! (`include/mcore_backend.h`): status codes, the plugin vtable and its companions, and the one
//! reader of caller structs that carry a `struct_size`. A leaf: it imports nothing from the crate.

pub mod backend;
pub mod sized;
pub mod status;

pub use sized::{read_sized, SizedStructError};
pub use status::mcore_status;
