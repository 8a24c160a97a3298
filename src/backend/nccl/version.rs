//! NCCL version codes (`ncclGetVersion`) and the version each feature needs.
#![forbid(unsafe_code)]

use super::error::NcclError;
use std::fmt;

/// A decoded NCCL version, e.g. 2.21.5.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NcclVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl NcclVersion {
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        NcclVersion { major, minor, patch }
    }

    /// Decode `ncclGetVersion`'s integer. Since 2.9 it is `major*10000 + minor*100 + patch`;
    /// before that `major*1000 + minor*100 + patch`.
    pub fn from_code(code: i32) -> Result<Self, NcclError> {
        if code <= 0 {
            return Err(NcclError::invalid(format!("NCCL version code {code} is not a version")));
        }
        let c = code as u32;
        Ok(if c >= 10000 {
            NcclVersion::new(c / 10000, (c % 10000) / 100, c % 100)
        } else {
            NcclVersion::new(c / 1000, (c % 1000) / 100, c % 100)
        })
    }

    /// The code NCCL ≥ 2.9 uses for this version (`NCCL_VERSION(X,Y,Z)`).
    pub const fn code(&self) -> u32 {
        self.major * 10000 + self.minor * 100 + self.patch
    }

    /// Fail with a message naming `feature` and the version it needs when `self` is older.
    pub fn require(&self, feature: Feature) -> Result<(), NcclError> {
        let needed = feature.needs();
        if *self >= needed {
            Ok(())
        } else {
            Err(NcclError::VersionTooOld {
                feature: feature.name().to_string(),
                needed: if needed.patch > 0 {
                    needed.to_string()
                } else {
                    format!("{}.{}", needed.major, needed.minor)
                },
                found: self.to_string(),
            })
        }
    }
}

impl fmt::Display for NcclVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// Features that exist only from some NCCL release on (first release whose `nccl.h` has them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feature {
    /// `ncclCommInitRankConfig` with `ncclConfig_t` (non-blocking init): 2.14.
    CommInitRankConfig,
    /// `ncclCommSplit` and `splitShare`: 2.18.
    CommSplit,
    /// Several ranks on one GPU with `NCCL_MULTI_RANK_GPU_ENABLE=1`: 2.30.
    MultiRankGpu,
    /// `ncclCommShrink` (a communicator without some of its ranks, recovery): 2.27.
    CommShrink,
    /// `ncclCommSuspend`/`ncclCommResume` (release a communicator's device memory and take it
    /// back): 2.29.7.
    CommSuspend,
    /// `ncclCommInitRankScalable` (several unique ids, one per root): 2.23.
    InitRankScalable,
    /// `ncclSetEncryption` (TLS with a pre-shared key for NCCL's own sockets): 2.32.3.
    Encryption,
    /// The parameter API (`ncclParamGetAllParameterKeys`, `ncclParamGetParameter`): 2.30.7.
    ParamApi,
    /// Creating communicators from several threads at once (init settings parsed reentrantly;
    /// NVIDIA/nccl #2361): 2.32.3.
    ConcurrentInit,
}

impl Feature {
    pub const fn needs(self) -> NcclVersion {
        match self {
            Feature::CommInitRankConfig => NcclVersion::new(2, 14, 0),
            Feature::CommSplit => NcclVersion::new(2, 18, 0),
            Feature::MultiRankGpu => NcclVersion::new(2, 30, 0),
            Feature::CommShrink => NcclVersion::new(2, 27, 0),
            Feature::CommSuspend => NcclVersion::new(2, 29, 7),
            Feature::InitRankScalable => NcclVersion::new(2, 23, 0),
            Feature::Encryption => NcclVersion::new(2, 32, 3),
            Feature::ParamApi => NcclVersion::new(2, 30, 7),
            Feature::ConcurrentInit => NcclVersion::new(2, 32, 3),
        }
    }

    pub const fn name(self) -> &'static str {
        match self {
            Feature::CommInitRankConfig => "ncclCommInitRankConfig (non-blocking communicator init)",
            Feature::CommSplit => "ncclCommSplit",
            Feature::MultiRankGpu => "several ranks per GPU (NCCL_MULTI_RANK_GPU_ENABLE)",
            Feature::CommShrink => "ncclCommShrink",
            Feature::CommSuspend => "ncclCommSuspend/ncclCommResume",
            Feature::InitRankScalable => "ncclCommInitRankScalable (scalable init)",
            Feature::Encryption => "ncclSetEncryption (encrypted NCCL sockets)",
            Feature::ParamApi => "the NCCL parameter API",
            Feature::ConcurrentInit => "creating communicators from several threads at once",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_new_and_old_codes() {
        assert_eq!(NcclVersion::from_code(21805).unwrap(), NcclVersion::new(2, 18, 5));
        assert_eq!(NcclVersion::from_code(23203).unwrap().to_string(), "2.32.3");
        assert_eq!(NcclVersion::from_code(2708).unwrap(), NcclVersion::new(2, 7, 8));
        assert_eq!(NcclVersion::new(2, 18, 5).code(), 21805);
        assert!(NcclVersion::from_code(0).is_err());
        assert!(NcclVersion::from_code(-3).is_err());
    }

    #[test]
    fn require_names_feature_and_needed_version() {
        let old = NcclVersion::new(2, 17, 1);
        let e = old.require(Feature::CommSplit).unwrap_err().to_string();
        assert!(e.contains("ncclCommSplit needs NCCL 2.18"), "{e}");
        assert!(e.contains("2.17.1"), "{e}");
        assert!(old.require(Feature::CommInitRankConfig).is_ok());
        let e = NcclVersion::new(2, 13, 4).require(Feature::CommInitRankConfig).unwrap_err().to_string();
        assert!(e.contains("needs NCCL 2.14"), "{e}");
        assert!(NcclVersion::new(2, 30, 0).require(Feature::MultiRankGpu).is_ok());
        assert!(NcclVersion::new(2, 29, 9).require(Feature::MultiRankGpu).is_err());
        let e = NcclVersion::new(2, 26, 6).require(Feature::CommShrink).unwrap_err().to_string();
        assert!(e.contains("ncclCommShrink needs NCCL 2.27") && e.contains("2.26.6"), "{e}");
        assert!(NcclVersion::new(2, 27, 3).require(Feature::CommShrink).is_ok());
    }
}
