//! The description of one group a backend creates a communicator for.

use super::{BackendError, CommOptions};
use std::time::Duration;

/// One group as the runtime hands it to a backend: a unique name, its global ranks (ascending,
/// as `torch.distributed.new_group` orders them) and this process's place in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupInfo {
    /// Unique group name, equal on all members, e.g. `tensor_model_parallel/3`.
    pub name: String,
    /// This process's index in `global_ranks`.
    pub group_rank: u32,
    /// The group's global ranks, ascending.
    pub global_ranks: Vec<u32>,
    /// This process's global rank.
    pub global_rank: u32,
    /// Bound for the group's rendezvous and collectives (at most [`crate::timeout::NO_LIMIT`]).
    pub timeout: Duration,
    /// The address this process advertises to its peers (the local address of its connection
    /// to the rendezvous store); `None` when there is none to offer.
    pub host_addr: Option<String>,
    /// The device the caller asked for (backends that take one); `None` when none was given.
    pub device: Option<u32>,
    /// The options of the group's kind as `key=value` lines ([`CommOptions::lines`]) for a
    /// plugin backend; `None` when the kind sets none.
    pub options: Option<String>,
}

impl GroupInfo {
    /// The group `name` over `global_ranks` (ascending, distinct) as seen by `global_rank`.
    pub fn new(
        name: impl Into<String>,
        global_ranks: Vec<u32>,
        global_rank: u32,
        timeout: Duration,
    ) -> Result<Self, BackendError> {
        let name = name.into();
        if name.is_empty() || name.contains('\0') {
            return Err(BackendError::InvalidArgument(format!(
                "group name {name:?} must be non-empty and contain no NUL byte"
            )));
        }
        if global_ranks.is_empty() {
            return Err(BackendError::InvalidArgument(format!("group '{name}' has no ranks")));
        }
        if let Some(w) = global_ranks.windows(2).find(|w| w[0] >= w[1]) {
            return Err(BackendError::InvalidArgument(format!(
                "group '{name}': global ranks must be ascending and distinct, got {} before {}",
                w[0], w[1]
            )));
        }
        let group_rank = global_ranks
            .iter()
            .position(|&r| r == global_rank)
            .ok_or(BackendError::NotMember { group: name.clone(), rank: global_rank })?;
        Ok(GroupInfo {
            name,
            group_rank: group_rank as u32,
            global_ranks,
            global_rank,
            // Longer than no limit is no limit: a backend's signed millisecond count must hold it.
            timeout: crate::timeout::clamp(timeout),
            host_addr: None,
            device: None,
            options: None,
        })
    }

    /// The same group, with the address this process advertises to its peers.
    pub fn with_host_addr(mut self, addr: Option<&str>) -> Self {
        self.host_addr = addr.map(str::to_string);
        self
    }

    /// The same group, with the device the caller asked for.
    pub fn with_device(mut self, device: Option<u32>) -> Self {
        self.device = device;
        self
    }

    /// The same group, with its kind's options for a plugin backend (none when all are default).
    pub fn with_options(mut self, options: &CommOptions) -> Self {
        self.options = (!options.is_default()).then(|| options.lines());
        self
    }

    /// Number of ranks in the group.
    pub fn size(&self) -> u32 {
        self.global_ranks.len() as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_rank_is_the_index_and_bad_groups_are_named() {
        let t = Duration::from_secs(1);
        let g = GroupInfo::new("tp/1", vec![2, 3, 7], 7, t).unwrap();
        assert_eq!((g.group_rank, g.size()), (2, 3));
        let e = GroupInfo::new("tp/1", vec![2, 3], 5, t).unwrap_err();
        assert_eq!(e, BackendError::NotMember { group: "tp/1".into(), rank: 5 });
        let e = GroupInfo::new("dp/0", vec![3, 2], 2, t).unwrap_err();
        assert!(e.to_string().contains("3 before 2"), "{e}");
        assert!(GroupInfo::new("", vec![0], 0, t).is_err());
        assert!(GroupInfo::new("x", vec![], 0, t).is_err());
    }
}
