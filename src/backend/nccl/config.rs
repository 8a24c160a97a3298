//! `NcclConfig`: the communicator options this library sets, and the raw `ncclConfig_t` built
//! from it the way `NCCL_CONFIG_INITIALIZER` would (cudarc has no initializer).
#![forbid(unsafe_code)]

use super::error::NcclError;
use cudarc::nccl::sys::ncclConfig_t;
use std::ffi::{c_int, CString};

/// `ncclConfig_t.magic` of an initialized config.
pub(crate) const CONFIG_MAGIC: u32 = 0xcafe_beef;
/// `NCCL_CONFIG_UNDEF_INT`: "not set, use NCCL's default".
pub(crate) const UNDEF_INT: c_int = c_int::MIN;
/// The version our `ncclConfig_t` layout is declared with: cudarc's `nccl-02030` bindings (2.30's
/// struct without its last field). NCCL copies `min(size, its own size)` bytes and ignores fields
/// newer than `version`, so older and newer libraries both accept it.
pub(crate) const CONFIG_VERSION: u32 = 23000;
/// NCCL's largest CGA cluster size.
pub(crate) const MAX_CGA_CLUSTER_SIZE: i32 = 8;

/// Options for `ncclCommInitRankConfig` / `ncclCommSplit`. `None` leaves NCCL's default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NcclConfig {
    /// `blocking` (default false: non-blocking init, so a deadline can be enforced).
    pub blocking: bool,
    pub cga_cluster_size: Option<i32>,
    pub min_ctas: Option<i32>,
    pub max_ctas: Option<i32>,
    /// `netName`: the network plugin to use, e.g. "IB" or "Socket".
    pub net_name: Option<String>,
    /// `splitShare` (default false: children of a split do not share the parent's resources, so
    /// aborting one does not break the others).
    pub split_share: bool,
}

/// A raw config and the C string its `netName` points into; keep it alive across the call.
pub struct RawConfig {
    pub(crate) raw: ncclConfig_t,
    _net_name: Option<CString>,
}

impl NcclConfig {
    /// Check the values; the error names the bad one.
    pub fn validate(&self) -> Result<(), NcclError> {
        if let Some(c) = self.cga_cluster_size {
            if !(0..=MAX_CGA_CLUSTER_SIZE).contains(&c) {
                return Err(NcclError::invalid(format!("cga_cluster_size {c} is outside 0..={MAX_CGA_CLUSTER_SIZE}")));
            }
        }
        for (name, v) in [("min_ctas", self.min_ctas), ("max_ctas", self.max_ctas)] {
            if let Some(v) = v {
                if v < 1 {
                    return Err(NcclError::invalid(format!("{name} {v} must be at least 1")));
                }
            }
        }
        if let (Some(lo), Some(hi)) = (self.min_ctas, self.max_ctas) {
            if lo > hi {
                return Err(NcclError::invalid(format!("min_ctas {lo} is larger than max_ctas {hi}")));
            }
        }
        if let Some(n) = &self.net_name {
            if n.is_empty() || n.contains('\0') {
                return Err(NcclError::invalid(format!("net_name {n:?} must be non-empty and contain no NUL byte")));
            }
        }
        Ok(())
    }

    /// The `ncclConfig_t` NCCL reads: `size`, `magic`, `version` filled, every option we do not set
    /// left at `NCCL_CONFIG_UNDEF_INT` / NULL.
    pub fn to_raw(&self) -> Result<RawConfig, NcclError> {
        self.validate()?;
        let net_name = self.net_name.as_ref().map(|n| CString::new(n.as_str()).expect("validated: no NUL"));
        let opt = |v: Option<i32>| v.unwrap_or(UNDEF_INT);
        let raw = ncclConfig_t {
            size: std::mem::size_of::<ncclConfig_t>(),
            magic: CONFIG_MAGIC,
            version: CONFIG_VERSION,
            blocking: self.blocking as c_int,
            cgaClusterSize: opt(self.cga_cluster_size),
            minCTAs: opt(self.min_ctas),
            maxCTAs: opt(self.max_ctas),
            netName: net_name.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
            splitShare: self.split_share as c_int,
            trafficClass: UNDEF_INT,
            commName: std::ptr::null(),
            collnetEnable: UNDEF_INT,
            CTAPolicy: UNDEF_INT,
            shrinkShare: UNDEF_INT,
            nvlsCTAs: UNDEF_INT,
            nChannelsPerNetPeer: UNDEF_INT,
            nvlinkCentricSched: UNDEF_INT,
            graphUsageMode: UNDEF_INT,
            numRmaCtx: UNDEF_INT,
            maxP2pPeers: UNDEF_INT,
        };
        Ok(RawConfig { raw, _net_name: net_name })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_nonblocking_unshared_and_initialized() {
        let r = NcclConfig::default().to_raw().unwrap().raw;
        assert_eq!(r.size, std::mem::size_of::<ncclConfig_t>());
        assert_eq!(r.magic, 0xcafebeef);
        assert_eq!(r.version, CONFIG_VERSION);
        assert_eq!(r.blocking, 0);
        assert_eq!(r.splitShare, 0);
        assert_eq!(r.cgaClusterSize, i32::MIN);
        assert_eq!(r.maxP2pPeers, i32::MIN);
        assert!(r.netName.is_null() && r.commName.is_null());
    }

    #[test]
    fn set_values_reach_the_raw_struct() {
        let cfg = NcclConfig {
            blocking: true,
            cga_cluster_size: Some(4),
            min_ctas: Some(2),
            max_ctas: Some(16),
            net_name: Some("Socket".into()),
            split_share: true,
        };
        let rc = cfg.to_raw().unwrap();
        assert_eq!(
            (rc.raw.blocking, rc.raw.cgaClusterSize, rc.raw.minCTAs, rc.raw.maxCTAs, rc.raw.splitShare),
            (1, 4, 2, 16, 1)
        );
        let name = std::ffi::CStr::from_bytes_until_nul(rc._net_name.as_ref().unwrap().as_bytes_with_nul()).unwrap();
        assert_eq!(name.to_str().unwrap(), "Socket");
        assert_eq!(rc.raw.netName, rc._net_name.as_ref().unwrap().as_ptr());
    }

    #[test]
    fn bad_values_are_named() {
        let bad = |c: NcclConfig| c.to_raw().err().unwrap().to_string();
        assert!(bad(NcclConfig { cga_cluster_size: Some(9), ..Default::default() }).contains("cga_cluster_size 9"));
        assert!(bad(NcclConfig { min_ctas: Some(0), ..Default::default() }).contains("min_ctas 0"));
        assert!(bad(NcclConfig { min_ctas: Some(8), max_ctas: Some(4), ..Default::default() })
            .contains("min_ctas 8 is larger than max_ctas 4"));
        assert!(bad(NcclConfig { net_name: Some("a\0b".into()), ..Default::default() }).contains("net_name"));
    }
}
