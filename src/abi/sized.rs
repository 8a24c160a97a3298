//! The one reader of caller structs that start with a `uint32_t struct_size`, and its one
//! compatibility rule (docs/abi.md, "Growing a struct"):
//!
//! * `struct_size` equal to the size of a released layout of the struct: the caller's bytes are
//!   read up to it, and fields appended after that release keep their defaults;
//! * larger than this library's layout (a caller built against a newer header): accepted when
//!   every byte beyond this library's layout is zero (the caller sets none of the newer fields),
//!   refused otherwise, because silently ignoring a setting would be worse than failing;
//! * anything else (0, garbage, a size that would end inside a field): refused.
//!
//! Every refusal is one typed error, which the C boundary reports as
//! `MCORE_STATUS_INVALID_ARGUMENT` naming the struct, the size given and the sizes accepted.

use std::fmt;
use std::mem::size_of;

/// A larger `struct_size` than ours is trusted for at most this many extra bytes: a newer header
/// appends a few fields, never kilobytes; a bigger number is garbage, not a struct to scan.
pub const MAX_NEWER_BYTES: usize = 1024;

/// Why a caller's struct was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SizedStructError {
    /// The C type, e.g. `mcore_init_args`.
    pub what: &'static str,
    /// The caller's `struct_size`.
    pub given: u32,
    /// The sizes of the released layouts this library reads (ascending; the last is its own).
    pub releases: &'static [u32],
    /// True when the size is larger than ours and a byte beyond ours is set.
    pub newer_fields_set: bool,
}

impl fmt::Display for SizedStructError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ours = self.releases.last().copied().unwrap_or(0);
        if self.newer_fields_set {
            write!(
                f,
                "{} struct_size {} is larger than this library's {ours} bytes and fields beyond byte {ours} are set: \
                 the caller was built against a newer header and uses options this library does not have",
                self.what, self.given
            )
        } else {
            let sizes: Vec<String> = self.releases.iter().map(u32::to_string).collect();
            write!(
                f,
                "{} struct_size {} is not the size of a layout this library knows ({} bytes): fill the struct \
                 with its _init function before setting fields",
                self.what,
                self.given,
                sizes.join(" or ")
            )
        }
    }
}

impl std::error::Error for SizedStructError {}

/// Read the caller's `T` at `ptr` under the rule above, starting from `defaults`.
///
/// `releases` lists the sizes of every released layout of `T`, ascending, the last being
/// `size_of::<T>()`; `T`'s first field is its `u32` `struct_size`.
///
/// # Safety
/// `ptr` is non-NULL and points to at least `struct_size` readable bytes (the caller's contract).
pub unsafe fn read_sized<T: Copy>(
    ptr: *const T,
    what: &'static str,
    releases: &'static [u32],
    defaults: T,
) -> Result<T, SizedStructError> {
    let ours = size_of::<T>();
    debug_assert_eq!(releases.last().map(|&s| s as usize), Some(ours), "{what}: the last release is ours");
    // SAFETY: every accepted struct begins with its u32 struct_size (caller contract).
    let given = unsafe { ptr.cast::<u32>().read_unaligned() };
    let refuse = |newer_fields_set| SizedStructError { what, given, releases, newer_fields_set };
    let g = given as usize;
    let n = if releases.contains(&given) {
        g
    } else if g > ours && g <= ours + MAX_NEWER_BYTES {
        // SAFETY: the caller declares g readable bytes at ptr.
        let tail = unsafe { std::slice::from_raw_parts(ptr.cast::<u8>().add(ours), g - ours) };
        if tail.iter().any(|&b| b != 0) {
            return Err(refuse(true));
        }
        ours
    } else {
        return Err(refuse(false));
    };
    let mut out = defaults;
    // SAFETY: n <= ours bytes, readable at ptr (caller contract) and writable in `out`; T is plain data.
    unsafe { std::ptr::copy_nonoverlapping(ptr.cast::<u8>(), (&mut out as *mut T).cast::<u8>(), n) };
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[repr(C)]
    #[derive(Clone, Copy, Debug, PartialEq)]
    struct V2 {
        struct_size: u32,
        a: u32,
        b: u64,
        c: u64,
    }
    const RELEASES: &[u32] = &[16, 24];
    const DEFAULTS: V2 = V2 { struct_size: 24, a: 1, b: 2, c: 3 };

    fn read(bytes: &[u8]) -> Result<V2, SizedStructError> {
        let mut buf = vec![0u64; bytes.len().div_ceil(8).max(4)];
        // SAFETY: buf has room for bytes.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.as_mut_ptr().cast::<u8>(), bytes.len()) };
        // SAFETY: buf holds at least struct_size bytes in every case below.
        unsafe { read_sized(buf.as_ptr().cast::<V2>(), "v2", RELEASES, DEFAULTS) }
    }

    fn bytes_of(size: u32, a: u32, b: u64, c: u64, extra: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&size.to_ne_bytes());
        v.extend_from_slice(&a.to_ne_bytes());
        v.extend_from_slice(&b.to_ne_bytes());
        v.extend_from_slice(&c.to_ne_bytes());
        v.extend_from_slice(extra);
        v
    }

    #[test]
    fn an_older_release_keeps_the_defaults_of_appended_fields() {
        let v = read(&bytes_of(16, 7, 8, 99, &[])).unwrap();
        assert_eq!((v.a, v.b, v.c), (7, 8, 3), "c was appended after the 16-byte release");
    }

    #[test]
    fn our_release_is_read_whole() {
        let v = read(&bytes_of(24, 7, 8, 9, &[])).unwrap();
        assert_eq!((v.a, v.b, v.c), (7, 8, 9));
    }

    #[test]
    fn a_newer_struct_is_read_when_its_new_fields_are_zero_and_refused_otherwise() {
        let v = read(&bytes_of(32, 7, 8, 9, &[0; 8])).unwrap();
        assert_eq!((v.a, v.b, v.c), (7, 8, 9));
        let e = read(&bytes_of(32, 7, 8, 9, &[0, 0, 1, 0, 0, 0, 0, 0])).unwrap_err();
        assert!(e.newer_fields_set);
        assert!(e.to_string().contains("newer header"), "{e}");
    }

    #[test]
    fn sizes_that_are_no_release_are_refused_and_named() {
        for size in [0u32, 4, 12, 20, 23, 25 + MAX_NEWER_BYTES as u32, u32::MAX] {
            let e = read(&bytes_of(size, 7, 8, 9, &[])).unwrap_err();
            assert!(!e.newer_fields_set);
            let text = e.to_string();
            assert!(text.contains(&format!("struct_size {size} ")) && text.contains("16 or 24"), "{text}");
        }
    }
}
