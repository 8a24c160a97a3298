// Group creation, the verification collectives and teardown with HCCL: the logic the C API and the
// mcore_backend_v1 vtable slots call.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "hccl_api.hpp"
#include "mcore_hccl.h"

namespace mcore_hccl {

// A status (MCORE_HCCL_*) and the message naming what failed.
struct Status {
  int32_t code = MCORE_HCCL_OK;
  std::string message;
  bool ok() const { return code == MCORE_HCCL_OK; }
};

// This plugin's communicator: HCCL's handle and what its operations need on any thread.
struct Comm {
  HcclComm handle = nullptr;
  int32_t device = 0;             // set (aclrtSetDevice) before every HCCL call on this communicator
  aclrtStream stream = nullptr;   // the communicator's own stream
  void *buf = nullptr;            // device buffer of the verification all-reduce
  size_t buf_bytes = 0;
  bool int32_only = false;        // HcclAllReduce refused int64 (HCCL_E_NOT_SUPPORT): sum as int32
  std::string name;
  uint32_t rank = 0, size = 0;
  uint64_t timeout_ms = 0;        // the group's bound for each operation
  const void *world_store = nullptr;  // create_world's store (valid until this comm is destroyed)
};

// A group's per-kind options, in order: (key, value) from the "key=value" lines of
// mcore_backend_group_info.options (the per-kind YAML's keys; torch_npu's hccl_config names).
using Options = std::vector<std::pair<std::string, std::string>>;
Status parse_options(const char *text, const std::string &group, Options *out);

// spec.options where the spec's struct_size covers it, else NULL.
inline const char *spec_options(const mcore_hccl_group_spec &spec) {
  return spec.struct_size >= offsetof(mcore_hccl_group_spec, options) + sizeof(const char *) ? spec.options : nullptr;
}

// HCCL_CONNECT_TIMEOUT in seconds (default 120); code != OK when it is not a whole number in HCCL's
// documented range 120..7200.
Status connect_timeout_s(int64_t *out);

// The store key under which group `name` publishes its root info.
std::string root_info_key(const std::string &name);

Status hccl_create_group(const mcore_hccl_group_spec &spec, const mcore_hccl_store &store, Comm **out);
// With `cluster_info`, where the library has HcclCommInitClusterInfoMemConfig: the communicator
// from a rank table exchanged through the store (the documented parent of
// HcclCreateSubCommConfig); root info otherwise.
Status hccl_create_group(const mcore_hccl_group_spec &spec, const mcore_hccl_store &store, bool cluster_info,
                         Comm **out);
Status hccl_create_subgroup(Comm *parent, const std::string &name, const uint32_t *parent_ranks, uint32_t n,
                            uint32_t sub_rank, uint64_t sub_comm_id, const Options &options, Comm **out);
Status hccl_allreduce_sum_i64(Comm *comm, int64_t *inout, size_t count);
Status hccl_barrier(Comm *comm);
// Destroys the communicator (retrying HCCL_E_AGAIN); `abort` ends its device's tasks first
// (aclrtDeviceTaskAbort, where the runtime has it). The Comm is freed when HCCL released it.
Status hccl_destroy(Comm *comm, bool abort);

}  // namespace mcore_hccl
