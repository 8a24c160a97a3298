// Group creation with HCCL: the logic the mcore_backend_v1 vtable slots will call.
#pragma once

#include <string>

#include "hccl_api.hpp"
#include "mcore_hccl.h"

namespace mcore_hccl {

// A status (MCORE_HCCL_*) and the message naming what failed.
struct Status {
  int32_t code = MCORE_HCCL_OK;
  std::string message;
  bool ok() const { return code == MCORE_HCCL_OK; }
};

// HCCL_CONNECT_TIMEOUT in seconds (default 120); code != OK when it is not a whole number.
Status connect_timeout_s(int64_t *out);

// The store key under which group `name` publishes its root info.
std::string root_info_key(const std::string &name);

Status hccl_create_group(const mcore_hccl_group_spec &spec, const mcore_hccl_store &store, HcclComm *out);
Status hccl_create_subgroup(HcclComm parent, const std::string &name, const uint32_t *parent_ranks, uint32_t n,
                            uint32_t sub_rank, uint64_t sub_comm_id, HcclComm *out);
Status hccl_destroy(HcclComm comm);

}  // namespace mcore_hccl
