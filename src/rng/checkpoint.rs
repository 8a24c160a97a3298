//! The checkpoint blob of a rank's streams: versioned, checksummed, little-endian.
//!
//! ```text
//! magic "MCORERNG" | u32 version (1) | u32 payload length | payload | u64 FNV-1a-64 of all before
//! payload: coordinates (8 × u32 + u64 fingerprint)
//!          u8 seeded [policy str, i64 seed, u8 dp_random_init, u32 n, n × (u32 rank, u32 size)]
//!          generator: u8 has_seed, u64 seed, u64 offset
//!          u8 initialized, u32 n, n × (str name, u64 seed, u64 offset)   named Philox states
//!          u32 n, n × u64                                               tracker seed set
//!          u32 n, n × (str name, u64 seed, u128 word position)           CPU streams
//! str = u32 length + UTF-8 bytes
//! ```

use super::chacha_streams::CpuStreamState;
use super::policy::{GroupPosition, RankCoordinates, SeedRequest};
use super::tracker::{Generator, PhiloxState};
use super::RngError;

pub const MAGIC: &[u8; 8] = b"MCORERNG";
pub const VERSION: u32 = 1;
const HEADER: usize = 16;
const TRAILER: usize = 8;

/// FNV-1a, 64-bit.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Everything a blob holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub coords: RankCoordinates,
    pub request: Option<SeedRequest>,
    pub generator: Generator,
    pub initialized: bool,
    pub states: Vec<(String, PhiloxState)>,
    pub seeds: Vec<u64>,
    pub cpu: Vec<(String, CpuStreamState)>,
}

struct Writer(Vec<u8>);

impl Writer {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn len(&mut self, n: usize) {
        self.u32(u32::try_from(n).unwrap_or(u32::MAX));
    }
    fn str(&mut self, s: &str) {
        self.len(s.len());
        self.0.extend_from_slice(s.as_bytes());
    }
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], RngError> {
        let end = self.pos.checked_add(n).filter(|e| *e <= self.buf.len()).ok_or_else(|| {
            RngError::Corrupt(format!("RNG checkpoint truncated: need {n} bytes at payload offset {}", self.pos))
        })?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, RngError> {
        Ok(self.take(1)?[0])
    }
    fn bool(&mut self) -> Result<bool, RngError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(RngError::Corrupt(format!("RNG checkpoint: flag byte {v} at payload offset {}", self.pos - 1))),
        }
    }
    fn u32(&mut self) -> Result<u32, RngError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap_or_default()))
    }
    fn u64(&mut self) -> Result<u64, RngError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap_or_default()))
    }
    fn count(&mut self, min_item: usize) -> Result<usize, RngError> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min_item) > self.buf.len() - self.pos {
            return Err(RngError::Corrupt(format!("RNG checkpoint: count {n} exceeds the remaining bytes")));
        }
        Ok(n)
    }
    fn str(&mut self) -> Result<String, RngError> {
        let n = self.count(1)?;
        String::from_utf8(self.take(n)?.to_vec())
            .map_err(|_| RngError::Corrupt("RNG checkpoint: a stream name is not UTF-8".into()))
    }
}

pub fn encode(s: &Snapshot) -> Vec<u8> {
    let mut w = Writer(Vec::with_capacity(256));
    let c = &s.coords;
    for v in [c.world_size, c.rank, c.pp_rank, c.dp_rank, c.tp_rank, c.cp_rank, c.ep_rank, c.etp_rank] {
        w.u32(v);
    }
    w.u64(c.layout_fingerprint);
    match &s.request {
        None => w.u8(0),
        Some(r) => {
            w.u8(1);
            w.str(&r.policy.to_string());
            w.u64(r.seed as u64);
            w.u8(u8::from(r.data_parallel_random_init));
            w.len(r.positions.len());
            for p in &r.positions {
                w.u32(p.rank);
                w.u32(p.size);
            }
        }
    }
    w.u8(u8::from(s.generator.seed.is_some()));
    w.u64(s.generator.seed.unwrap_or(0));
    w.u64(s.generator.offset);
    w.u8(u8::from(s.initialized));
    w.len(s.states.len());
    for (name, st) in &s.states {
        w.str(name);
        w.u64(st.seed);
        w.u64(st.offset);
    }
    w.len(s.seeds.len());
    for v in &s.seeds {
        w.u64(*v);
    }
    w.len(s.cpu.len());
    for (name, st) in &s.cpu {
        w.str(name);
        w.u64(st.seed);
        w.0.extend_from_slice(&st.word_pos.to_le_bytes());
    }
    let payload = w.0;
    let mut out = Vec::with_capacity(HEADER + payload.len() + TRAILER);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&payload);
    let sum = fnv1a64(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

pub fn decode(blob: &[u8]) -> Result<Snapshot, RngError> {
    if blob.len() < HEADER + TRAILER || &blob[..8] != MAGIC {
        return Err(RngError::Corrupt(format!(
            "not an RNG checkpoint ({} bytes, expected the magic \"MCORERNG\")",
            blob.len()
        )));
    }
    let version = u32::from_le_bytes(blob[8..12].try_into().unwrap_or_default());
    if version != VERSION {
        return Err(RngError::Corrupt(format!(
            "RNG checkpoint version {version} is not supported (this library reads {VERSION})"
        )));
    }
    let len = u32::from_le_bytes(blob[12..16].try_into().unwrap_or_default()) as usize;
    if HEADER + len + TRAILER != blob.len() {
        return Err(RngError::Corrupt(format!(
            "RNG checkpoint length mismatch: header says {} bytes, got {}",
            HEADER + len + TRAILER,
            blob.len()
        )));
    }
    let body = &blob[..HEADER + len];
    let want = u64::from_le_bytes(blob[HEADER + len..].try_into().unwrap_or_default());
    let got = fnv1a64(body);
    if want != got {
        return Err(RngError::Corrupt(format!(
            "RNG checkpoint checksum mismatch (stored {want:016x}, computed {got:016x})"
        )));
    }
    let mut r = Reader { buf: &body[HEADER..], pos: 0 };
    let mut v = [0u32; 8];
    for x in &mut v {
        *x = r.u32()?;
    }
    let coords = RankCoordinates {
        world_size: v[0],
        rank: v[1],
        pp_rank: v[2],
        dp_rank: v[3],
        tp_rank: v[4],
        cp_rank: v[5],
        ep_rank: v[6],
        etp_rank: v[7],
        layout_fingerprint: r.u64()?,
        ..Default::default()
    };
    let request = if r.bool()? {
        let policy = r.str()?.parse().map_err(|e| RngError::Corrupt(format!("RNG checkpoint policy: {e}")))?;
        let seed = r.u64()? as i64;
        let data_parallel_random_init = r.bool()?;
        let n = r.count(8)?;
        let mut positions = Vec::with_capacity(n);
        for _ in 0..n {
            positions.push(GroupPosition { rank: r.u32()?, size: r.u32()? });
        }
        Some(SeedRequest { policy, seed, data_parallel_random_init, positions })
    } else {
        None
    };
    let has_seed = r.bool()?;
    let gseed = r.u64()?;
    let generator = Generator { seed: has_seed.then_some(gseed), offset: r.u64()? };
    let initialized = r.bool()?;
    let n = r.count(20)?;
    let mut states = Vec::with_capacity(n);
    for _ in 0..n {
        let name = r.str()?;
        states.push((name, PhiloxState { seed: r.u64()?, offset: r.u64()? }));
    }
    let n = r.count(8)?;
    let mut seeds = Vec::with_capacity(n);
    for _ in 0..n {
        seeds.push(r.u64()?);
    }
    let n = r.count(28)?;
    let mut cpu = Vec::with_capacity(n);
    for _ in 0..n {
        let name = r.str()?;
        let seed = r.u64()?;
        let word_pos = u128::from_le_bytes(r.take(16)?.try_into().unwrap_or_default());
        cpu.push((name, CpuStreamState { seed, word_pos }));
    }
    if r.pos != r.buf.len() {
        return Err(RngError::Corrupt(format!("RNG checkpoint has {} trailing payload bytes", r.buf.len() - r.pos)));
    }
    Ok(Snapshot { coords, request, generator, initialized, states, seeds, cpu })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a64_reference_values() {
        // published FNV-1a 64 test values
        assert_eq!(fnv1a64(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a64(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x85944171f73967e8);
    }

    #[test]
    fn every_single_byte_flip_is_rejected() {
        let snap = Snapshot {
            coords: RankCoordinates { world_size: 8, rank: 5, tp_rank: 1, ..Default::default() },
            request: Some(SeedRequest {
                policy: "sharded:tensor_model_parallel".parse().unwrap(),
                seed: 3,
                data_parallel_random_init: false,
                positions: vec![GroupPosition { rank: 1, size: 2 }],
            }),
            generator: Generator { seed: Some(4), offset: 8 },
            initialized: true,
            states: vec![("a".into(), PhiloxState { seed: 1, offset: 2 })],
            seeds: vec![1],
            cpu: vec![("default".into(), CpuStreamState { seed: 4, word_pos: 77 })],
        };
        let blob = encode(&snap);
        assert_eq!(decode(&blob).unwrap(), snap);
        for i in 0..blob.len() {
            let mut bad = blob.clone();
            bad[i] ^= 0x40;
            assert!(matches!(decode(&bad), Err(RngError::Corrupt(_))), "flip at byte {i} accepted");
        }
        for cut in 0..blob.len() {
            assert!(decode(&blob[..cut]).is_err());
        }
    }
}
