//! All random streams of one rank: the named Philox tracker (with the device's default generator)
//! and the CPU ChaCha streams, seeded by a policy and checkpointed together.

use super::chacha_streams::{CpuStreamState, CpuStreams};
use super::checkpoint::{self, Snapshot};
use super::policy::{apply_plan, seed_plan, RankCoordinates, SeedRequest, DEFAULT_STREAM};
use super::tracker::{PhiloxState, Tracker, DEFAULT_STATE_NAME};
use super::RngError;

/// What `restore` does when the blob's layout coordinates differ from this rank's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RestoreMode {
    /// A layout change is an error.
    #[default]
    Strict,
    /// Keep the seeds this rank derived for the new layout (call `seed` first) and take each
    /// stream's position (Philox offset, ChaCha word position) from the blob by name.
    Rederive,
}

#[derive(Debug, Clone)]
pub struct RankRng {
    coords: RankCoordinates,
    request: Option<SeedRequest>,
    tracker: Tracker,
    cpu: CpuStreams,
}

fn layout_diff(blob: &RankCoordinates, this: &RankCoordinates) -> Vec<String> {
    let fields = [
        ("world_size", blob.world_size, this.world_size),
        ("pp_rank", blob.pp_rank, this.pp_rank),
        ("dp_rank", blob.dp_rank, this.dp_rank),
        ("tp_rank", blob.tp_rank, this.tp_rank),
        ("cp_rank", blob.cp_rank, this.cp_rank),
        ("ep_rank", blob.ep_rank, this.ep_rank),
        ("etp_rank", blob.etp_rank, this.etp_rank),
    ];
    let mut out: Vec<String> = fields
        .iter()
        .filter(|(_, a, b)| a != b)
        .map(|(n, a, b)| format!("{n} {a} in the checkpoint, {b} here"))
        .collect();
    if blob.layout_fingerprint != this.layout_fingerprint {
        out.push(format!(
            "layout fingerprint {:016x} in the checkpoint, {:016x} here",
            blob.layout_fingerprint, this.layout_fingerprint
        ));
    }
    out
}

impl RankRng {
    /// Empty streams for the rank at `coords`.
    pub fn new(coords: RankCoordinates) -> Self {
        RankRng { coords, request: None, tracker: Tracker::new(), cpu: CpuStreams::new() }
    }

    pub fn coords(&self) -> &RankCoordinates {
        &self.coords
    }

    /// The request this rank was last seeded with.
    pub fn request(&self) -> Option<&SeedRequest> {
        self.request.as_ref()
    }

    pub fn tracker(&self) -> &Tracker {
        &self.tracker
    }

    pub fn tracker_mut(&mut self) -> &mut Tracker {
        &mut self.tracker
    }

    pub fn cpu(&self) -> &CpuStreams {
        &self.cpu
    }

    pub fn cpu_mut(&mut self) -> &mut CpuStreams {
        &mut self.cpu
    }

    /// Re-seeds every stream from the policy: the tracker as `model_parallel_cuda_manual_seed`
    /// leaves it, one CPU stream per name (`default` plus the tracker streams). On a seed
    /// collision the tracker is left as Megatron leaves it and the error is returned.
    pub fn seed(&mut self, req: &SeedRequest) -> Result<(), RngError> {
        let plan = seed_plan(req, &self.coords)?;
        self.request = None;
        self.cpu.clear();
        self.cpu.add(DEFAULT_STREAM, plan.cpu)?;
        for (name, seed) in &plan.tracker {
            self.cpu.add(name, *seed)?;
        }
        apply_plan(&plan, &mut self.tracker)?;
        self.request = Some(req.clone());
        Ok(())
    }

    /// The checkpoint blob of all streams (refused inside a scoped fork).
    pub fn save(&self) -> Result<Vec<u8>, RngError> {
        let inside = self.tracker.current_state_name();
        if inside != DEFAULT_STATE_NAME {
            return Err(RngError::Invalid(format!("cannot checkpoint RNG streams inside a fork of {inside}")));
        }
        Ok(checkpoint::encode(&Snapshot {
            coords: self.coords,
            request: self.request.clone(),
            generator: self.tracker.generator(),
            initialized: self.tracker.is_initialized(),
            states: self.tracker.get_states(),
            seeds: self.tracker.seeds().collect(),
            cpu: self.cpu.states(),
        }))
    }

    /// Restores a blob written by `save` on this global rank. Nothing changes on error.
    pub fn restore(&mut self, blob: &[u8], mode: RestoreMode) -> Result<(), RngError> {
        let snap = checkpoint::decode(blob)?;
        if snap.coords.rank != self.coords.rank {
            return Err(RngError::WrongRank { blob_rank: snap.coords.rank, this_rank: self.coords.rank });
        }
        let diff = layout_diff(&snap.coords, &self.coords);
        if diff.is_empty() {
            self.tracker =
                Tracker::from_parts(snap.states, snap.seeds.into_iter().collect(), snap.initialized, snap.generator);
            self.cpu.set_states(&snap.cpu)?;
            self.request = snap.request;
            return Ok(());
        }
        if mode == RestoreMode::Strict {
            return Err(RngError::LayoutChanged(diff.join(", ")));
        }
        self.rederive_from(snap)
    }

    fn rederive_from(&mut self, snap: Snapshot) -> Result<(), RngError> {
        let Some(mine) = &self.request else {
            return Err(RngError::Invalid(
                "re-deriving RNG seeds for a new layout needs this rank seeded first (seed with the policy, then restore)".into(),
            ));
        };
        match &snap.request {
            Some(theirs)
                if theirs.policy == mine.policy
                    && theirs.seed == mine.seed
                    && theirs.data_parallel_random_init == mine.data_parallel_random_init => {}
            Some(theirs) => {
                return Err(RngError::Invalid(format!(
                    "RNG checkpoint was seeded with policy {} seed {}, this rank with policy {} seed {}",
                    theirs.policy, theirs.seed, mine.policy, mine.seed
                )))
            }
            None => return Err(RngError::Invalid("RNG checkpoint records no seed policy to re-derive from".into())),
        }
        let mut tracker = self.tracker.clone();
        for (name, st) in &snap.states {
            if let Some(cur) = tracker.get(name) {
                tracker.set_state(name, PhiloxState { offset: st.offset, ..cur })?;
            }
        }
        if let Some(seed) = tracker.generator().seed {
            tracker.set_state(DEFAULT_STREAM, PhiloxState { seed, offset: snap.generator.offset })?;
        }
        let cpu: Vec<(String, CpuStreamState)> = self
            .cpu
            .states()
            .into_iter()
            .map(|(name, mut st)| {
                if let Some((_, old)) = snap.cpu.iter().find(|(n, _)| *n == name) {
                    st.word_pos = old.word_pos;
                }
                (name, st)
            })
            .collect();
        self.cpu.set_states(&cpu)?;
        self.tracker = tracker;
        Ok(())
    }
}
