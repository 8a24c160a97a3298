//! The one status enum of the C ABI. Numbers are never reused; retired values stay as comments.

use std::ffi::CStr;

/// Result of every fallible `mcore_*` call. 0 is success; details of a failure are in
/// `mcore_last_error_message()` on the calling thread.
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub enum mcore_status {
    /// Success.
    Ok = 0,
    /// A NULL pointer, a bad length, a malformed string or an out-of-domain argument value.
    InvalidArgument = 1,
    /// A parallel layout that cannot exist (sizes, order string, divisibility).
    InvalidConfig = 2,
    /// A rank, index or stage outside its range.
    OutOfRange = 3,
    /// A named thing (group kind, RNG stream, store key, symbol) does not exist.
    NotFound = 4,
    /// A named thing (RNG stream, seed, backend) exists already.
    AlreadyExists = 5,
    /// The call needs an initialized runtime (or object) and there is none.
    NotInitialized = 6,
    /// Initialize was called again with a different configuration.
    AlreadyInitialized = 7,
    /// Ranks were started with different configurations.
    ConfigMismatch = 8,
    /// A wait ran out of time; the message names what it waited for.
    Timeout = 9,
    /// An operating-system I/O error (socket, file).
    Io = 10,
    /// A peer spoke a protocol we do not understand.
    Protocol = 11,
    /// A communicator backend reported an error.
    Backend = 12,
    /// The operation is not supported by this backend, library version or build.
    Unsupported = 13,
    /// A shared library could not be loaded or lacks a symbol.
    LibraryLoad = 14,
    /// A loaded library is older than a feature needs; the message names the version.
    VersionTooOld = 15,
    /// An output buffer is too small; `out_len` holds the size needed.
    BufferTooSmall = 16,
    /// A serialized blob is corrupt, truncated or of an unknown version.
    Corrupt = 17,
    /// The blob or request belongs to another rank or layout.
    WrongRank = 18,
    /// A peer process failed or disconnected.
    PeerFailed = 19,
    /// This rank is not a member of the requested group.
    NotMember = 20,
    /// The runtime is between states on another thread (an initialize or destroy in progress):
    /// refused at once instead of waiting; call again once that call has returned.
    Busy = 21,
    /// The communicator (its kind named in the message) is suspended: resume it first.
    Suspended = 22,
    /// A Rust panic was caught at the boundary (a bug: please report the message).
    Panic = 99,
}

impl mcore_status {
    /// Static English text for a status.
    pub fn as_str(self) -> &'static str {
        let t = self.text_nul();
        &t[..t.len() - 1]
    }

    /// The same text as a C string (static storage).
    pub fn c_text(self) -> &'static CStr {
        CStr::from_bytes_with_nul(self.text_nul().as_bytes()).expect("NUL-terminated literal")
    }

    fn text_nul(self) -> &'static str {
        use mcore_status::*;
        match self {
            Ok => "ok\0",
            InvalidArgument => "invalid argument\0",
            InvalidConfig => "invalid parallel configuration\0",
            OutOfRange => "value out of range\0",
            NotFound => "not found\0",
            AlreadyExists => "already exists\0",
            NotInitialized => "not initialized\0",
            AlreadyInitialized => "already initialized with a different configuration\0",
            ConfigMismatch => "ranks were started with different configurations\0",
            Timeout => "timed out\0",
            Io => "I/O error\0",
            Protocol => "protocol error\0",
            Backend => "communicator backend error\0",
            Unsupported => "unsupported\0",
            LibraryLoad => "shared library could not be loaded\0",
            VersionTooOld => "library version too old\0",
            BufferTooSmall => "buffer too small\0",
            Corrupt => "corrupt or unknown data\0",
            WrongRank => "belongs to another rank or layout\0",
            PeerFailed => "a peer failed\0",
            NotMember => "rank is not a member of the group\0",
            Busy => "busy: an initialize or destroy is in progress on another thread\0",
            Suspended => "the communicator is suspended: resume it first\0",
            Panic => "internal panic (bug)\0",
        }
    }

    /// The status for a raw code, for codes that come from C (never trusted as the enum).
    pub fn from_code(code: i32) -> Option<Self> {
        use mcore_status::*;
        const ALL: [mcore_status; 24] = [
            Ok,
            InvalidArgument,
            InvalidConfig,
            OutOfRange,
            NotFound,
            AlreadyExists,
            NotInitialized,
            AlreadyInitialized,
            ConfigMismatch,
            Timeout,
            Io,
            Protocol,
            Backend,
            Unsupported,
            LibraryLoad,
            VersionTooOld,
            BufferTooSmall,
            Corrupt,
            WrongRank,
            PeerFailed,
            NotMember,
            Busy,
            Suspended,
            Panic,
        ];
        ALL.into_iter().find(|s| *s as i32 == code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_text_matches_as_str_and_codes_round_trip() {
        for code in -1..=100 {
            if let Some(s) = mcore_status::from_code(code) {
                assert_eq!(s as i32, code);
                assert_eq!(s.c_text().to_str().unwrap(), s.as_str(), "code {code}");
            }
        }
    }
}
