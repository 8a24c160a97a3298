//! Version information. `MCORE_VERSION_MAJOR/MINOR/PATCH` are written into the header from
//! Cargo.toml by the generator; the ABI version is bumped on any incompatible ABI change.

use std::ffi::c_char;

/// ABI version of the public API: bumped on incompatible changes (CHANGELOG.md says what changed).
/// The plugin ABI has its own version (`MCORE_BACKEND_ABI_VERSION_V1`).
pub const MCORE_ABI_VERSION: u32 = 2;

/// The ABI version this library was built with (compare with `MCORE_ABI_VERSION` from the header).
#[no_mangle]
pub extern "C" fn mcore_abi_version() -> u32 {
    MCORE_ABI_VERSION
}

/// The library version, e.g. "0.1.0". Static, never NULL.
#[no_mangle]
pub extern "C" fn mcore_version_string() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}
