//! The 128-byte NCCL unique id and its byte form for the rendezvous store.
#![forbid(unsafe_code)]

use super::error::NcclError;
use cudarc::nccl::sys::ncclUniqueId;
use std::fmt;

/// Bytes in an `ncclUniqueId` (`NCCL_UNIQUE_ID_BYTES`).
pub(crate) const UNIQUE_ID_BYTES: usize = 128;

/// An id made by `ncclGetUniqueId` on one rank and handed to every member of a group.
/// The process that made it must stay alive until every member has joined (it hosts the root).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct NcclUniqueId(pub(crate) [u8; UNIQUE_ID_BYTES]);

impl NcclUniqueId {
    /// The bytes stored under the group's key.
    pub fn to_bytes(&self) -> [u8; UNIQUE_ID_BYTES] {
        self.0
    }

    pub fn as_bytes(&self) -> &[u8; UNIQUE_ID_BYTES] {
        &self.0
    }

    /// Parse bytes read from the store; any other length is an error naming it.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, NcclError> {
        let arr: [u8; UNIQUE_ID_BYTES] = bytes.try_into().map_err(|_| {
            NcclError::invalid(format!("an NCCL unique id is {UNIQUE_ID_BYTES} bytes, got {}", bytes.len()))
        })?;
        Ok(NcclUniqueId(arr))
    }

    pub(crate) fn to_sys(self) -> ncclUniqueId {
        ncclUniqueId { internal: self.0.map(|b| b as std::ffi::c_char) }
    }

    pub(crate) fn from_sys(id: &ncclUniqueId) -> Self {
        NcclUniqueId(id.internal.map(|c| c as u8))
    }
}

impl fmt::Debug for NcclUniqueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NcclUniqueId(")?;
        for b in &self.0[..16] {
            write!(f, "{b:02x}")?;
        }
        write!(f, "…)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_round_trip_through_sys() {
        let mut raw = [0u8; UNIQUE_ID_BYTES];
        for (i, b) in raw.iter_mut().enumerate() {
            *b = (i * 7 + 200) as u8;
        }
        let id = NcclUniqueId::from_bytes(&raw).unwrap();
        assert_eq!(NcclUniqueId::from_sys(&id.to_sys()), id);
        assert_eq!(id.to_bytes(), raw);
    }

    #[test]
    fn wrong_length_is_named() {
        let e = NcclUniqueId::from_bytes(&[0u8; 127]).unwrap_err().to_string();
        assert!(e.contains("128 bytes, got 127"), "{e}");
    }
}
