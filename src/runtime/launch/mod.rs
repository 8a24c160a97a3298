//! What the launcher hands a rank and the store it opens: the environment, Slurm's host lists, this host's address, the store set-up (TCP or through PMIx).

pub mod env;
pub mod host;
pub mod hostlist;
pub(crate) mod pmix_rendezvous;
pub(crate) mod store_setup;
