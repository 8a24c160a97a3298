//! `NcclConfig`: the communicator options this library sets, and the raw `ncclConfig_t` built from
//! it the way `NCCL_CONFIG_INITIALIZER` of the loaded version would (cudarc has no initializer).
//!
//! Every field of `ncclConfig_t` from 2.14 to 2.32 is known here ([`CONFIG_FIELDS`]: its YAML key,
//! its C name, the first release whose `nccl.h` has it). The struct handed to NCCL is laid out for
//! the loaded version: `size` is that version's `sizeof(ncclConfig_t)`, `version` its code (for a
//! library newer than 2.32.3: 2.32.3's size and code, as a program built against 2.32.3's header
//! would pass). A field the loaded library does not know is left out with a warning on stderr
//! naming the field and the version it needs, or refused when the config is strict.
#![forbid(unsafe_code)]

use super::error::NcclError;
use super::version::NcclVersion;
use crate::backend::options::OptionValue;
use crate::lock::Unpoisoned;
use std::collections::{BTreeMap, HashSet};
use std::ffi::{c_char, c_int, CString};
use std::mem::offset_of;
use std::sync::Mutex;

/// `ncclConfig_t.magic` of an initialized config.
pub(crate) const CONFIG_MAGIC: u32 = 0xcafe_beef;
/// `NCCL_CONFIG_UNDEF_INT`: "not set, use NCCL's default".
pub(crate) const UNDEF_INT: c_int = c_int::MIN;
/// NCCL's largest CGA cluster size.
pub(crate) const MAX_CGA_CLUSTER_SIZE: i32 = 8;
/// `MCORE_NCCL_STRICT_CONFIG=1`: every config is strict (a field newer than the loaded NCCL is an
/// error, not a warning).
pub const STRICT_ENV: &str = "MCORE_NCCL_STRICT_CONFIG";

/// The newest layout known here (`ncclConfig_v23100`, unchanged in 2.32.3).
const NEWEST: NcclVersion = NcclVersion::new(2, 32, 3);

/// How a field's value is written in YAML.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldKind {
    /// A C `int`.
    Int,
    /// A C `int` that is 0 or 1 (YAML `true`/`false`, or 0/1).
    Bool,
    /// A C string (`const char*`).
    Text,
}

/// One user-settable field of `ncclConfig_t`.
#[derive(Debug, Clone, Copy)]
pub struct ConfigField {
    /// The key of the per-kind YAML (snake_case of the C name).
    pub key: &'static str,
    /// The member of `ncclConfig_t`.
    pub c_name: &'static str,
    /// The first NCCL release whose `nccl.h` has the member.
    pub since: NcclVersion,
    pub kind: FieldKind,
}

const fn f(key: &'static str, c_name: &'static str, since: NcclVersion, kind: FieldKind) -> ConfigField {
    ConfigField { key, c_name, since, kind }
}

/// Every user field, in the struct's order (each release appends). Checked against NVIDIA's own
/// `nccl.h` of every release on the package registry, 2.16.2 to 2.32.3 (the table with the
/// headers' hashes, offsets and sizes is in docs/backends.md, pinned by the unit test
/// `offsets_match_nvidias_headers`; `scripts/nccl-headers.sh` remakes it): a field's version is
/// its release series when it came with the series' first release (`x.y.0`, equivalent for every
/// release there is), else the exact release: `graphStreamOrdering` 2.30.5 (NCCL's own gate,
/// between 2.30.4 without it and 2.30.7 with it) and `nvlsHostMode` 2.32.3 (2.31.2's header has
/// not got it, although NCCL honours it for a config of version 2.31.0 and up). `blocking` 2.14:
/// older than the registry's wheels (NVIDIA's git tags, REFERENCE's reading).
pub const CONFIG_FIELDS: [ConfigField; 23] = {
    use FieldKind::{Bool, Int, Text};
    [
        f("blocking", "blocking", NcclVersion::new(2, 14, 0), Bool),
        f("cga_cluster_size", "cgaClusterSize", NcclVersion::new(2, 17, 0), Int),
        f("min_ctas", "minCTAs", NcclVersion::new(2, 17, 0), Int),
        f("max_ctas", "maxCTAs", NcclVersion::new(2, 17, 0), Int),
        f("net_name", "netName", NcclVersion::new(2, 17, 0), Text),
        f("split_share", "splitShare", NcclVersion::new(2, 18, 0), Bool),
        f("traffic_class", "trafficClass", NcclVersion::new(2, 26, 0), Int),
        f("comm_name", "commName", NcclVersion::new(2, 27, 0), Text),
        f("collnet_enable", "collnetEnable", NcclVersion::new(2, 27, 0), Bool),
        f("cta_policy", "CTAPolicy", NcclVersion::new(2, 27, 0), Int),
        f("shrink_share", "shrinkShare", NcclVersion::new(2, 27, 0), Bool),
        f("nvls_ctas", "nvlsCTAs", NcclVersion::new(2, 27, 0), Int),
        f("n_channels_per_net_peer", "nChannelsPerNetPeer", NcclVersion::new(2, 28, 0), Int),
        f("nvlink_centric_sched", "nvlinkCentricSched", NcclVersion::new(2, 28, 0), Int),
        f("graph_usage_mode", "graphUsageMode", NcclVersion::new(2, 29, 0), Int),
        f("num_rma_ctx", "numRmaCtx", NcclVersion::new(2, 29, 0), Int),
        f("max_p2p_peers", "maxP2pPeers", NcclVersion::new(2, 30, 0), Int),
        f("graph_stream_ordering", "graphStreamOrdering", NcclVersion::new(2, 30, 5), Int),
        f("launch_order_implicit", "launchOrderImplicit", NcclVersion::new(2, 31, 0), Int),
        f("num_rma_sig", "numRmaSig", NcclVersion::new(2, 31, 0), Int),
        f("rma_eager_init", "rmaEagerInit", NcclVersion::new(2, 31, 0), Int),
        f("host_cft_mode", "hostCftMode", NcclVersion::new(2, 31, 0), Int),
        f("nvls_host_mode", "nvlsHostMode", NcclVersion::new(2, 32, 3), Int),
    ]
};

/// The field of YAML key `key`.
pub fn config_field(key: &str) -> Option<&'static ConfigField> {
    CONFIG_FIELDS.iter().find(|f| f.key == key)
}

/// `ncclConfig_t` of NCCL 2.31/2.32 (`ncclConfig_v23100`); older versions are prefixes of it.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
#[allow(non_snake_case)]
pub struct ConfigStruct {
    pub size: usize,
    pub magic: u32,
    pub version: u32,
    pub blocking: c_int,
    pub cgaClusterSize: c_int,
    pub minCTAs: c_int,
    pub maxCTAs: c_int,
    pub netName: *const c_char,
    pub splitShare: c_int,
    pub trafficClass: c_int,
    pub commName: *const c_char,
    pub collnetEnable: c_int,
    pub CTAPolicy: c_int,
    pub shrinkShare: c_int,
    pub nvlsCTAs: c_int,
    pub nChannelsPerNetPeer: c_int,
    pub nvlinkCentricSched: c_int,
    pub graphUsageMode: c_int,
    pub numRmaCtx: c_int,
    pub maxP2pPeers: c_int,
    pub graphStreamOrdering: c_int,
    pub launchOrderImplicit: c_int,
    pub numRmaSig: c_int,
    pub rmaEagerInit: c_int,
    pub hostCftMode: c_int,
    pub nvlsHostMode: c_int,
}

/// Offset just past member `c_name`.
fn end_of(c_name: &str) -> usize {
    macro_rules! end {
        ($m:ident, $t:ty) => {
            offset_of!(ConfigStruct, $m) + std::mem::size_of::<$t>()
        };
    }
    match c_name {
        "blocking" => end!(blocking, c_int),
        "cgaClusterSize" => end!(cgaClusterSize, c_int),
        "minCTAs" => end!(minCTAs, c_int),
        "maxCTAs" => end!(maxCTAs, c_int),
        "netName" => end!(netName, *const c_char),
        "splitShare" => end!(splitShare, c_int),
        "trafficClass" => end!(trafficClass, c_int),
        "commName" => end!(commName, *const c_char),
        "collnetEnable" => end!(collnetEnable, c_int),
        "CTAPolicy" => end!(CTAPolicy, c_int),
        "shrinkShare" => end!(shrinkShare, c_int),
        "nvlsCTAs" => end!(nvlsCTAs, c_int),
        "nChannelsPerNetPeer" => end!(nChannelsPerNetPeer, c_int),
        "nvlinkCentricSched" => end!(nvlinkCentricSched, c_int),
        "graphUsageMode" => end!(graphUsageMode, c_int),
        "numRmaCtx" => end!(numRmaCtx, c_int),
        "maxP2pPeers" => end!(maxP2pPeers, c_int),
        "graphStreamOrdering" => end!(graphStreamOrdering, c_int),
        "launchOrderImplicit" => end!(launchOrderImplicit, c_int),
        "numRmaSig" => end!(numRmaSig, c_int),
        "rmaEagerInit" => end!(rmaEagerInit, c_int),
        "hostCftMode" => end!(hostCftMode, c_int),
        _ => end!(nvlsHostMode, c_int),
    }
}

/// `sizeof(ncclConfig_t)` of version `v`'s `nccl.h` (its last member's end, rounded up to the
/// struct's 8-byte alignment); `None` before 2.14 (no config).
pub fn layout_size(v: NcclVersion) -> Option<usize> {
    let last = CONFIG_FIELDS.iter().rev().find(|f| f.since <= v.min(NEWEST))?;
    let align = std::mem::align_of::<ConfigStruct>();
    Some(end_of(last.c_name).div_ceil(align) * align)
}

/// The `(size, version)` NCCL's initializer sets when built against the header that matches
/// `loaded` (2.32.3's for anything newer).
pub fn header_of(loaded: NcclVersion) -> Option<(usize, u32)> {
    Some((layout_size(loaded)?, loaded.min(NEWEST).code()))
}

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
    /// The other fields by YAML key ([`CONFIG_FIELDS`]), e.g. `traffic_class`, `comm_name`.
    pub more: BTreeMap<String, OptionValue>,
    /// `commName` when `more` sets none: the communicator's group name (set by the factory).
    pub default_name: Option<String>,
    /// A field newer than the loaded NCCL is an error (else a warning and left out).
    pub strict: bool,
}

/// A raw config and the C strings its pointers point into; keep it alive across the call.
pub struct RawConfig {
    pub(crate) raw: ConfigStruct,
    _strings: Vec<CString>,
    /// `(C name, value)` of every field written, for the debug log.
    pub(crate) written: Vec<(&'static str, String)>,
}

/// Print `msg` on stderr unless a warning with the same `key` was printed in this process.
pub(crate) fn warn_once_for(key: String, msg: String) {
    static SEEN: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    let mut seen = SEEN.locked();
    if seen.get_or_insert_with(HashSet::new).insert(key) {
        eprintln!("mcore_init: warning: {msg}");
    }
}

fn strict_env() -> bool {
    std::env::var(STRICT_ENV).is_ok_and(|v| v.trim() == "1")
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
        for (key, value) in &self.more {
            let field = config_field(key).ok_or_else(|| {
                NcclError::invalid(format!("{} is not an ncclConfig_t field", crate::quote::quoted(key)))
            })?;
            match (field.kind, value) {
                (FieldKind::Int, OptionValue::Int(_)) | (FieldKind::Bool, OptionValue::Bool(_)) => {}
                (FieldKind::Text, OptionValue::Text(t)) if !t.is_empty() && !t.contains('\0') => {}
                (FieldKind::Text, OptionValue::Text(t)) => {
                    return Err(NcclError::invalid(format!("{key} {t:?} must be non-empty and contain no NUL byte")))
                }
                (kind, v) => return Err(NcclError::invalid(format!("{key} must be {kind:?}, got {v}"))),
            }
        }
        if let Some(n) = &self.default_name {
            if n.contains('\0') {
                return Err(NcclError::invalid(format!("communicator name {n:?} contains a NUL byte")));
            }
        }
        Ok(())
    }

    /// Every field set, `(field, value)`, in struct order (`comm_name` from `default_name` when
    /// not set).
    pub fn fields_set(&self) -> Vec<(&'static ConfigField, OptionValue)> {
        let mut out = Vec::new();
        for field in &CONFIG_FIELDS {
            let v = match field.key {
                "blocking" => Some(OptionValue::Bool(self.blocking)),
                "cga_cluster_size" => self.cga_cluster_size.map(OptionValue::Int),
                "min_ctas" => self.min_ctas.map(OptionValue::Int),
                "max_ctas" => self.max_ctas.map(OptionValue::Int),
                "net_name" => self.net_name.clone().map(OptionValue::Text),
                "split_share" => Some(OptionValue::Bool(self.split_share)),
                "comm_name" => self
                    .more
                    .get("comm_name")
                    .cloned()
                    .or_else(|| self.default_name.clone().filter(|n| !n.is_empty()).map(OptionValue::Text)),
                key => self.more.get(key).cloned(),
            };
            if let Some(v) = v {
                out.push((field, v));
            }
        }
        out
    }

    /// The fields set that `loaded` does not know: `(key, C name, version needed)`. The library's
    /// own defaults (`blocking`, `split_share` false, the default name) are not counted.
    pub fn too_new(&self, loaded: NcclVersion) -> Vec<(&'static str, &'static str, NcclVersion)> {
        self.fields_set()
            .into_iter()
            .filter(|(f, _)| f.since > loaded)
            .filter(|(f, v)| match f.key {
                "blocking" | "split_share" => *v == OptionValue::Bool(true),
                "comm_name" => self.more.contains_key("comm_name"),
                _ => true,
            })
            .map(|(f, _)| (f.key, f.c_name, f.since))
            .collect()
    }

    /// The warnings for fields newer than `loaded`, or (strict, or `MCORE_NCCL_STRICT_CONFIG=1`)
    /// the error naming the first one.
    pub fn check_version(&self, loaded: NcclVersion, what: &str) -> Result<Vec<String>, NcclError> {
        Ok(self.version_warnings(loaded, what)?.into_iter().map(|(_, w)| w).collect())
    }

    /// [`NcclConfig::check_version`]'s warnings printed, once per field and process.
    pub fn warn_too_new(&self, loaded: NcclVersion, what: &str) -> Result<(), NcclError> {
        for (key, w) in self.version_warnings(loaded, what)? {
            warn_once_for(format!("too new: {key}"), w);
        }
        Ok(())
    }

    /// Each field newer than `loaded` with its warning, or the strict error.
    fn version_warnings(&self, loaded: NcclVersion, what: &str) -> Result<Vec<(&'static str, String)>, NcclError> {
        let strict = self.strict || strict_env();
        let warnings: Vec<(&'static str, String)> = self
            .too_new(loaded)
            .into_iter()
            .map(|(key, c, since)| {
                let w = format!(
                    "{what}: communicator option {key} (ncclConfig_t.{c}) needs NCCL {}.{}{}, the loaded NCCL is {loaded}{}",
                    since.major,
                    since.minor,
                    if since.patch > 0 { format!(".{}", since.patch) } else { String::new() },
                    if strict { "" } else { ": left out" }
                );
                (key, w)
            })
            .collect();
        if strict {
            if let Some((_, m)) = warnings.first() {
                return Err(NcclError::invalid(format!("{m} (strict config)")));
            }
        }
        Ok(warnings)
    }

    /// The `ncclConfig_t` the loaded version `loaded` reads: `size`, `magic`, `version` as its
    /// initializer sets them, every option not set left at `NCCL_CONFIG_UNDEF_INT` / NULL, fields
    /// newer than `loaded` left out with a warning (an error when strict).
    pub fn to_raw(&self, loaded: NcclVersion, what: &str) -> Result<RawConfig, NcclError> {
        self.validate()?;
        // One warning per field and process (the option check at plan time usually gave it).
        self.warn_too_new(loaded, what)?;
        let (size, version) = header_of(loaded)
            .ok_or_else(|| NcclError::invalid(format!("NCCL {loaded} has no ncclConfig_t (it appeared in 2.14)")))?;
        let mut raw = ConfigStruct {
            size,
            magic: CONFIG_MAGIC,
            version,
            blocking: UNDEF_INT,
            cgaClusterSize: UNDEF_INT,
            minCTAs: UNDEF_INT,
            maxCTAs: UNDEF_INT,
            netName: std::ptr::null(),
            splitShare: UNDEF_INT,
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
            graphStreamOrdering: UNDEF_INT,
            launchOrderImplicit: UNDEF_INT,
            numRmaSig: UNDEF_INT,
            rmaEagerInit: UNDEF_INT,
            hostCftMode: UNDEF_INT,
            nvlsHostMode: UNDEF_INT,
        };
        let mut strings = Vec::new();
        let mut written = Vec::new();
        for (field, value) in self.fields_set() {
            if field.since > loaded {
                continue;
            }
            written.push((field.c_name, value.to_string()));
            let int = match &value {
                OptionValue::Int(v) => *v,
                OptionValue::Bool(b) => *b as c_int,
                OptionValue::Text(t) => {
                    let c = CString::new(t.as_str()).expect("validated: no NUL");
                    let p = c.as_ptr();
                    strings.push(c);
                    match field.c_name {
                        "netName" => raw.netName = p,
                        _ => raw.commName = p,
                    }
                    continue;
                }
            };
            let slot = match field.c_name {
                "blocking" => &mut raw.blocking,
                "cgaClusterSize" => &mut raw.cgaClusterSize,
                "minCTAs" => &mut raw.minCTAs,
                "maxCTAs" => &mut raw.maxCTAs,
                "splitShare" => &mut raw.splitShare,
                "trafficClass" => &mut raw.trafficClass,
                "collnetEnable" => &mut raw.collnetEnable,
                "CTAPolicy" => &mut raw.CTAPolicy,
                "shrinkShare" => &mut raw.shrinkShare,
                "nvlsCTAs" => &mut raw.nvlsCTAs,
                "nChannelsPerNetPeer" => &mut raw.nChannelsPerNetPeer,
                "nvlinkCentricSched" => &mut raw.nvlinkCentricSched,
                "graphUsageMode" => &mut raw.graphUsageMode,
                "numRmaCtx" => &mut raw.numRmaCtx,
                "maxP2pPeers" => &mut raw.maxP2pPeers,
                "graphStreamOrdering" => &mut raw.graphStreamOrdering,
                "launchOrderImplicit" => &mut raw.launchOrderImplicit,
                "numRmaSig" => &mut raw.numRmaSig,
                "rmaEagerInit" => &mut raw.rmaEagerInit,
                "hostCftMode" => &mut raw.hostCftMode,
                _ => &mut raw.nvlsHostMode,
            };
            *slot = int;
        }
        Ok(RawConfig { raw, _strings: strings, written })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V2_28: NcclVersion = NcclVersion::new(2, 28, 3);

    #[test]
    fn layout_sizes_match_each_releases_header() {
        // 2.14: size_t + 2 unsigned + int = 20, padded to 24.
        assert_eq!(layout_size(NcclVersion::new(2, 14, 3)), Some(24));
        // 2.17: + 3 int (32) + netName pointer at 32 = 40.
        assert_eq!(layout_size(NcclVersion::new(2, 17, 1)), Some(40));
        assert_eq!(layout_size(NcclVersion::new(2, 18, 1)), Some(48));
        assert_eq!(layout_size(NcclVersion::new(2, 25, 1)), Some(48));
        assert_eq!(layout_size(NcclVersion::new(2, 26, 2)), Some(48));
        // 2.27: commName at 48, then 4 ints: 72.
        assert_eq!(layout_size(NcclVersion::new(2, 27, 3)), Some(72));
        assert_eq!(layout_size(NcclVersion::new(2, 30, 7)), Some(96));
        assert_eq!(layout_size(NcclVersion::new(2, 30, 4)), Some(96), "graphStreamOrdering padding");
        assert_eq!(layout_size(NcclVersion::new(2, 31, 2)), Some(112), "no nvlsHostMode before 2.32.3");
        assert_eq!(layout_size(NcclVersion::new(2, 32, 3)), Some(std::mem::size_of::<ConfigStruct>()));
        assert_eq!(layout_size(NcclVersion::new(2, 40, 0)), Some(std::mem::size_of::<ConfigStruct>()));
        assert_eq!(layout_size(NcclVersion::new(2, 13, 0)), None);
        assert_eq!(header_of(NcclVersion::new(2, 99, 1)).unwrap().1, 23203);
        assert_eq!(header_of(V2_28).unwrap().1, 22803);
        // cudarc's binding (2.30's struct up to maxP2pPeers) agrees with ours.
        assert_eq!(
            layout_size(NcclVersion::new(2, 30, 3)),
            Some(std::mem::size_of::<cudarc::nccl::sys::ncclConfig_t>())
        );
    }

    #[test]
    fn default_is_nonblocking_unshared_and_initialized() {
        let r = NcclConfig::default().to_raw(V2_28, "t").unwrap().raw;
        assert_eq!(r.size, 80);
        assert_eq!(r.magic, 0xcafebeef);
        assert_eq!(r.version, 22803);
        assert_eq!(r.blocking, 0);
        assert_eq!(r.splitShare, 0);
        assert_eq!(r.cgaClusterSize, i32::MIN);
        assert_eq!(r.maxP2pPeers, i32::MIN);
        assert!(r.netName.is_null() && r.commName.is_null());
    }

    #[test]
    fn set_values_reach_the_raw_struct() {
        let mut cfg = NcclConfig {
            blocking: true,
            cga_cluster_size: Some(4),
            min_ctas: Some(2),
            max_ctas: Some(16),
            net_name: Some("Socket".into()),
            split_share: true,
            default_name: Some("tensor_model_parallel/0".into()),
            ..Default::default()
        };
        cfg.more.insert("traffic_class".into(), OptionValue::Int(3));
        cfg.more.insert("nvls_host_mode".into(), OptionValue::Int(1));
        let rc = cfg.to_raw(NcclVersion::new(2, 32, 3), "t").unwrap();
        assert_eq!(
            (rc.raw.blocking, rc.raw.cgaClusterSize, rc.raw.minCTAs, rc.raw.maxCTAs, rc.raw.splitShare),
            (1, 4, 2, 16, 1)
        );
        assert_eq!((rc.raw.trafficClass, rc.raw.nvlsHostMode), (3, 1));
        // SAFETY-free check through the owned strings.
        let names: Vec<&str> = rc._strings.iter().map(|c| c.to_str().unwrap()).collect();
        assert_eq!(names, ["Socket", "tensor_model_parallel/0"]);
        assert_eq!(rc.raw.netName, rc._strings[0].as_ptr());
        assert_eq!(rc.raw.commName, rc._strings[1].as_ptr());
    }

    #[test]
    fn fields_newer_than_the_library_warn_or_fail_when_strict() {
        let mut cfg = NcclConfig::default();
        cfg.more.insert("max_p2p_peers".into(), OptionValue::Int(4));
        let w = cfg.check_version(V2_28, "group dp/0").unwrap();
        assert_eq!(w.len(), 1);
        assert!(
            w[0].contains("max_p2p_peers (ncclConfig_t.maxP2pPeers) needs NCCL 2.30, the loaded NCCL is 2.28.3"),
            "{}",
            w[0]
        );
        let raw = cfg.to_raw(V2_28, "group dp/0").unwrap();
        assert_eq!(raw.raw.maxP2pPeers, UNDEF_INT, "left out");
        cfg.strict = true;
        let e = cfg.to_raw(V2_28, "group dp/0").err().unwrap().to_string();
        assert!(e.contains("maxP2pPeers") && e.contains("2.30") && e.contains("strict"), "{e}");
        // The default name is not a user setting: no warning on 2.26.
        let named = NcclConfig { default_name: Some("w".into()), ..Default::default() };
        assert!(named.check_version(NcclVersion::new(2, 26, 6), "w").unwrap().is_empty());
    }

    #[test]
    fn bad_values_are_named() {
        let bad = |c: NcclConfig| c.to_raw(V2_28, "t").err().unwrap().to_string();
        assert!(bad(NcclConfig { cga_cluster_size: Some(9), ..Default::default() }).contains("cga_cluster_size 9"));
        assert!(bad(NcclConfig { min_ctas: Some(0), ..Default::default() }).contains("min_ctas 0"));
        assert!(bad(NcclConfig { min_ctas: Some(8), max_ctas: Some(4), ..Default::default() })
            .contains("min_ctas 8 is larger than max_ctas 4"));
        assert!(bad(NcclConfig { net_name: Some("a\0b".into()), ..Default::default() }).contains("net_name"));
        let mut c = NcclConfig::default();
        c.more.insert("traffic_clas".into(), OptionValue::Int(1));
        assert!(bad(c).contains("'traffic_clas' is not an ncclConfig_t field"));
    }

    /// One line of docs/backends.md's table of NVIDIA's headers.
    struct Header {
        version: NcclVersion,
        /// `sizeof(ncclConfig_t)`.
        size: usize,
        /// `NCCL_VERSION_CODE`.
        code: u32,
        /// `(member, offset)` in the header's order.
        members: Vec<(String, usize)>,
    }

    fn nvidia_headers() -> Vec<Header> {
        let doc = include_str!("../../../docs/backends.md");
        let begin = doc.find("<!-- nccl-headers begin -->").expect("table start");
        let end = doc.find("<!-- nccl-headers end -->").expect("table end");
        let mut out = Vec::new();
        for line in doc[begin..end].lines().filter(|l| l.starts_with("2.")) {
            let words: Vec<&str> = line.split_whitespace().collect();
            let v: Vec<u32> = words[0].split('.').map(|n| n.parse().unwrap()).collect();
            let members = words[4..]
                .iter()
                .filter_map(|w| w.split_once('@'))
                .map(|(m, o)| (m.to_string(), o.parse().unwrap()))
                .collect();
            assert_eq!(words[1].len(), 64, "a sha256: {line}");
            out.push(Header {
                version: NcclVersion::new(v[0], v[1], v[2]),
                size: words[2].parse().unwrap(),
                code: words[3].parse().unwrap(),
                members,
            });
        }
        out
    }

    #[test]
    fn offsets_match_nvidias_headers() {
        let headers = nvidia_headers();
        assert_eq!(headers.len(), 29, "2.16.2 to 2.32.3");
        for Header { version: v, size, code, members } in &headers {
            assert_eq!(layout_size(*v), Some(*size), "sizeof(ncclConfig_t) of {v}");
            assert_eq!(header_of(*v).unwrap(), (*size, *code), "initializer of {v}");
            // The header's members are the table's fields known at `v`, in order, at our offsets.
            let known: Vec<&str> = CONFIG_FIELDS.iter().filter(|f| f.since <= *v).map(|f| f.c_name).collect();
            let theirs: Vec<&str> = members.iter().map(|(m, _)| m.as_str()).collect();
            assert_eq!(theirs, known, "members of {v}'s ncclConfig_t");
            for (m, off) in members {
                assert_eq!(
                    end_of(m) - if matches!(m.as_str(), "netName" | "commName") { 8 } else { 4 },
                    *off,
                    "{m} in {v}"
                );
            }
        }
        assert_eq!(std::mem::size_of::<ConfigStruct>(), headers.last().unwrap().size, "2.32.3's struct");
    }

    #[test]
    fn every_key_is_snake_case_of_its_c_name_and_versions_only_grow() {
        for w in CONFIG_FIELDS.windows(2) {
            assert!(w[0].since <= w[1].since, "{} before {}", w[0].c_name, w[1].c_name);
        }
        for fld in &CONFIG_FIELDS {
            assert_eq!(fld.key.replace('_', ""), fld.c_name.to_lowercase(), "{}", fld.c_name);
        }
    }
}
