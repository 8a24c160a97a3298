//! Backends as the runtime sees them: a `Backend` creates communicators, a `Comm` verifies itself.

use super::{Backend, Comm, GroupInfo};
use crate::runtime::comm::{CommFactory, Communicator};
use crate::store::Store;
use std::ffi::c_void;
use std::sync::Arc;

impl CommFactory for Backend {
    fn name(&self) -> &str {
        Backend::name(self)
    }

    fn create_group(&self, group: &GroupInfo, store: Arc<dyn Store>) -> Result<Box<dyn Communicator>, String> {
        Backend::create_group(self, group, store)
            .map(|c| Box::new(c) as Box<dyn Communicator>)
            .map_err(|e| e.to_string())
    }
}

impl Communicator for Comm {
    fn allreduce_sum_i64(&mut self, values: &mut [i64]) -> Result<(), String> {
        Comm::allreduce_sum_i64(self, values).map_err(|e| e.to_string())
    }

    fn barrier(&mut self) -> Result<(), String> {
        Comm::barrier(self).map_err(|e| e.to_string())
    }

    fn raw_handle(&self) -> *mut c_void {
        Comm::raw_handle(self)
    }
}
