//! The 128-byte NCCL unique id, its byte form for the rendezvous store and its standard base64
//! form (RFC 4648 with padding, not URL-safe: what vLLM's `nccl_unique_id_b64` carries).
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

    /// Standard base64 (RFC 4648 alphabet with `+` and `/`, padded): 172 characters.
    pub fn to_base64(&self) -> String {
        base64_encode(&self.0)
    }

    /// Parse standard base64 of 128 bytes; the error names what is wrong (a character outside
    /// the alphabet and its position, URL-safe text, the decoded length).
    pub fn from_base64(text: &str) -> Result<Self, NcclError> {
        Self::from_bytes(&base64_decode(text).map_err(NcclError::invalid)?)
    }

    pub(crate) fn to_sys(self) -> ncclUniqueId {
        ncclUniqueId { internal: self.0.map(|b| b as std::ffi::c_char) }
    }

    pub(crate) fn from_sys(id: &ncclUniqueId) -> Self {
        NcclUniqueId(id.internal.map(|c| c as u8))
    }
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 of `bytes`, padded with `=`.
pub fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The bytes of standard, padded base64 `text` (surrounding whitespace ignored); the error names
/// the first problem.
pub fn base64_decode(text: &str) -> Result<Vec<u8>, String> {
    let t = text.trim().as_bytes();
    if t.len() % 4 != 0 {
        return Err(format!("base64 text of {} characters: padded base64 comes in groups of 4", t.len()));
    }
    let pad = t.iter().rev().take_while(|&&c| c == b'=').count();
    if pad > 2 {
        return Err(format!("base64 text ends in {pad} '=' (at most 2)"));
    }
    let mut out = Vec::with_capacity(t.len() / 4 * 3);
    for (q, quad) in t.chunks(4).enumerate() {
        let mut n = 0u32;
        for (i, &c) in quad.iter().enumerate() {
            let at = q * 4 + i;
            let v = match c {
                b'=' if at >= t.len() - pad => 0,
                b'-' | b'_' => {
                    return Err(format!(
                        "character {:?} at {at} is URL-safe base64; standard base64 (with '+' and '/') is expected",
                        c as char
                    ))
                }
                _ => ALPHABET.iter().position(|&a| a == c).ok_or_else(|| {
                    format!(
                        "character {} at {at} is not standard base64",
                        crate::quote::debug(&(c as char).to_string())
                    )
                })? as u32,
            };
            n = (n << 6) | v;
        }
        out.extend_from_slice(&n.to_be_bytes()[1..]);
    }
    out.truncate(out.len() - pad);
    Ok(out)
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
    fn base64_is_the_standard_alphabet_with_padding() {
        // RFC 4648 section 10's test vectors.
        for (plain, b64) in
            [("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foob", "Zm9vYg=="), ("fooba", "Zm9vYmE=")]
        {
            assert_eq!(base64_encode(plain.as_bytes()), b64);
            assert_eq!(base64_decode(b64).unwrap(), plain.as_bytes());
        }
        // The characters of index 62 and 63 are '+' and '/', not URL-safe '-' and '_'.
        assert_eq!(base64_encode(&[0xfb, 0xff]), "+/8=");
        let e = base64_decode("-_8=").unwrap_err();
        assert!(e.contains("URL-safe"), "{e}");
        assert!(base64_decode("Zm9").unwrap_err().contains("groups of 4"));
        assert!(base64_decode("Zm9v!A==").unwrap_err().contains("at 4"));
        assert!(base64_decode("Z=9v").is_err(), "padding only at the end");
    }

    #[test]
    fn an_id_survives_base64_and_its_length_is_checked() {
        let raw: Vec<u8> = (0..128u32).map(|i| (i * 37 + 11) as u8).collect();
        let id = NcclUniqueId::from_bytes(&raw).unwrap();
        let text = id.to_base64();
        assert_eq!(text.len(), 172);
        assert_eq!(NcclUniqueId::from_base64(&text).unwrap(), id);
        let short = base64_encode(&raw[..127]);
        assert!(NcclUniqueId::from_base64(&short).unwrap_err().to_string().contains("128 bytes, got 127"));
    }

    #[test]
    fn wrong_length_is_named() {
        let e = NcclUniqueId::from_bytes(&[0u8; 127]).unwrap_err().to_string();
        assert!(e.contains("128 bytes, got 127"), "{e}");
    }
}
