//! Values and keys crossing the PMIx boundary: owned copies, never pointers into the library.

use super::*;

pub(super) fn string_of(chars: &[c_char]) -> String {
    let bytes: Vec<u8> = chars.iter().take_while(|c| **c != 0).map(|c| *c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

pub(super) fn key_cstring(key: &str) -> Result<CString, PmixError> {
    CString::new(key).map_err(|_| PmixError::new(format!("key {key:?} has a NUL")))
}

pub(super) fn key_text(key: &CStr) -> String {
    key.to_string_lossy().into_owned()
}

/// A value read back from PMIx: the type code and an owned copy of its data (the raw data only
/// for a number: no pointer into the library's memory is kept).
pub(super) struct Value(pub(super) RawValue, pub(super) Option<Vec<u8>>);

// SAFETY: it holds no pointer (see `Value::copy_of`).
unsafe impl Send for Value {}

impl Value {
    /// # Safety
    /// `raw` must be a valid `pmix_value_t`.
    pub(super) unsafe fn copy_of(raw: &RawValue) -> Value {
        // SAFETY (for each arm): the union member read is the one `kind` says is set.
        let owned = match raw.kind {
            PMIX_STRING if !unsafe { raw.data.string }.is_null() => {
                Some(unsafe { CStr::from_ptr(raw.data.string) }.to_bytes().to_vec())
            }
            PMIX_BYTE_OBJECT => {
                let bo = unsafe { raw.data.bo };
                Some(if bo.bytes.is_null() || bo.size == 0 {
                    Vec::new()
                } else {
                    unsafe { std::slice::from_raw_parts(bo.bytes as *const u8, bo.size) }.to_vec()
                })
            }
            _ => None,
        };
        let number = matches!(raw.kind, PMIX_UINT16 | PMIX_UINT32 | PMIX_UINT64 | PMIX_SIZE | PMIX_INT);
        let data = if number { raw.data } else { RawData { _whole: [0; 3] } };
        Value(RawValue { kind: raw.kind, data }, owned)
    }

    pub(super) fn number(&self) -> Option<u32> {
        // SAFETY: the member read is the one the type code names.
        let n: u64 = unsafe {
            match self.0.kind {
                PMIX_UINT16 => u64::from(self.0.data.uint16),
                PMIX_UINT32 => u64::from(self.0.data.uint32),
                PMIX_UINT64 => self.0.data.uint64,
                PMIX_SIZE => self.0.data.size as u64,
                PMIX_INT => u64::try_from(self.0.data.integer).ok()?,
                _ => return None,
            }
        };
        u32::try_from(n).ok()
    }

    pub(super) fn text(&self) -> Option<String> {
        (self.0.kind == PMIX_STRING)
            .then(|| String::from_utf8_lossy(self.1.as_deref().unwrap_or_default()).into_owned())
    }

    pub(super) fn bytes(&self) -> Option<Vec<u8>> {
        (self.0.kind == PMIX_BYTE_OBJECT).then(|| self.1.clone().unwrap_or_default())
    }
}
