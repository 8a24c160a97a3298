#include "hccl_group.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace mcore_hccl {

namespace {

constexpr int64_t kDefaultConnectTimeoutS = 120;  // HCCL's default for HCCL_CONNECT_TIMEOUT

Status fail(int32_t code, std::string message) { return Status{code, std::move(message)}; }

Status select_device(int32_t device, const std::string &group) {
  if (device < 0) return {};
  std::string err;
  if (!load_acl(&err)) return fail(MCORE_HCCL_LIBRARY_LOAD, "group " + group + ": " + err);
  std::string ignored;
  const HcclApi *api = HcclApi::get(&ignored);
  int32_t rc = api->AclrtSetDevice(device);
  if (rc != 0)
    return fail(MCORE_HCCL_BACKEND,
                "group " + group + ": aclrtSetDevice(" + std::to_string(device) + ") failed with " + std::to_string(rc));
  return {};
}

}  // namespace

Status connect_timeout_s(int64_t *out) {
  const char *v = std::getenv("HCCL_CONNECT_TIMEOUT");
  if (v == nullptr || *v == '\0') {
    *out = kDefaultConnectTimeoutS;
    return {};
  }
  char *end = nullptr;
  errno = 0;
  long long s = std::strtoll(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || s <= 0)
    return fail(MCORE_HCCL_INVALID_ARGUMENT,
                std::string("HCCL_CONNECT_TIMEOUT=") + v + " is not a positive whole number of seconds");
  *out = s;
  return {};
}

std::string root_info_key(const std::string &name) { return name + "/hccl_root_info"; }

Status hccl_create_group(const mcore_hccl_group_spec &spec, const mcore_hccl_store &store, HcclComm *out) {
  std::string name = spec.name != nullptr ? spec.name : "";
  if (name.empty()) return fail(MCORE_HCCL_INVALID_ARGUMENT, "group spec has no name");
  if (spec.size == 0 || spec.rank >= spec.size)
    return fail(MCORE_HCCL_INVALID_ARGUMENT, "group " + name + ": rank " + std::to_string(spec.rank) +
                                                 " is outside 0.." + std::to_string(spec.size));
  if (store.set == nullptr || store.get == nullptr)
    return fail(MCORE_HCCL_INVALID_ARGUMENT, "group " + name + ": store callbacks set/get must not be NULL");
  int64_t connect_s = 0;
  Status st = connect_timeout_s(&connect_s);
  if (!st.ok()) return st;
  std::string err;
  const HcclApi *api = HcclApi::get(&err);
  if (api == nullptr) return fail(MCORE_HCCL_LIBRARY_LOAD, "group " + name + ": " + err);
  st = select_device(spec.device, name);
  if (!st.ok()) return st;

  HcclRootInfo root{};
  const std::string key = root_info_key(name);
  if (spec.rank == 0) {
    HcclResult rc = api->GetRootInfo(&root);
    if (rc != HCCL_SUCCESS) return fail(MCORE_HCCL_BACKEND, "group " + name + ": HcclGetRootInfo failed: " + api->describe(rc));
    int32_t s = store.set(store.user_data, key.c_str(), reinterpret_cast<const uint8_t *>(root.internal), kRootInfoBytes);
    if (s != MCORE_HCCL_OK)
      return fail(s, "group " + name + ": publishing the root info under " + key + " failed (status " + std::to_string(s) + ")");
  } else {
    size_t len = 0;
    int32_t s = store.get(store.user_data, key.c_str(), reinterpret_cast<uint8_t *>(root.internal), kRootInfoBytes, &len,
                          spec.timeout_ms);
    if (s != MCORE_HCCL_OK)
      return fail(s, "group " + name + ": waiting " + std::to_string(spec.timeout_ms) + " ms for the root info under " +
                         key + " from group rank 0 failed (status " + std::to_string(s) + ")");
    if (len != kRootInfoBytes)
      return fail(MCORE_HCCL_BACKEND, "group " + name + ": root info under " + key + " is " + std::to_string(len) +
                                          " bytes, expected " + std::to_string(kRootInfoBytes));
  }

  HcclCommConfig config;
  config_init(&config);
  if (spec.buffer_size_mb != 0) config.hcclBufferSize = spec.buffer_size_mb;
  std::strncpy(config.hcclCommName, name.c_str(), kCommNameBytes - 1);
  HcclComm comm = nullptr;
  HcclResult rc = api->CommInitRootInfoConfig(spec.size, &root, spec.rank, &config, &comm);
  if (rc != HCCL_SUCCESS) {
    std::string msg = "group " + name + " (rank " + std::to_string(spec.rank) + " of " + std::to_string(spec.size) +
                      "): HcclCommInitRootInfoConfig failed: " + api->describe(rc);
    if (rc == HCCL_E_TIMEOUT)
      return fail(MCORE_HCCL_TIMEOUT, msg + "; peers did not connect within HCCL_CONNECT_TIMEOUT=" +
                                          std::to_string(connect_s) + " s");
    return fail(MCORE_HCCL_BACKEND, msg);
  }
  if (comm == nullptr)
    return fail(MCORE_HCCL_BACKEND, "group " + name + ": HcclCommInitRootInfoConfig returned no communicator");
  *out = comm;
  return {};
}

Status hccl_create_subgroup(HcclComm parent, const std::string &name, const uint32_t *parent_ranks, uint32_t n,
                            uint32_t sub_rank, uint64_t sub_comm_id, HcclComm *out) {
  if (parent == nullptr || parent_ranks == nullptr || n == 0 || sub_rank >= n)
    return fail(MCORE_HCCL_INVALID_ARGUMENT, "group " + name + ": sub-communicator needs a parent, ranks and sub_rank < " +
                                                 std::to_string(n));
  if (!std::is_sorted(parent_ranks, parent_ranks + n))
    return fail(MCORE_HCCL_INVALID_ARGUMENT, "group " + name + ": parent ranks must be ascending");
  std::string err;
  const HcclApi *api = HcclApi::get(&err);
  if (api == nullptr) return fail(MCORE_HCCL_LIBRARY_LOAD, "group " + name + ": " + err);
  if (api->CreateSubCommConfig == nullptr)
    return fail(MCORE_HCCL_UNSUPPORTED, "group " + name + ": " + api->path +
                                            " has no HcclCreateSubCommConfig; create the group from root info instead");
  std::vector<uint32_t> ranks(parent_ranks, parent_ranks + n);
  HcclCommConfig config;
  config_init(&config);
  std::strncpy(config.hcclCommName, name.c_str(), kCommNameBytes - 1);
  HcclComm comm = nullptr;
  HcclResult rc = api->CreateSubCommConfig(&parent, n, ranks.data(), sub_comm_id, sub_rank, &config, &comm);
  if (rc != HCCL_SUCCESS || comm == nullptr)
    return fail(MCORE_HCCL_BACKEND, "group " + name + ": HcclCreateSubCommConfig failed: " + api->describe(rc));
  *out = comm;
  return {};
}

Status hccl_destroy(HcclComm comm) {
  if (comm == nullptr) return {};
  std::string err;
  const HcclApi *api = HcclApi::get(&err);
  if (api == nullptr) return fail(MCORE_HCCL_LIBRARY_LOAD, err);
  HcclResult rc = api->CommDestroy(comm);
  if (rc != HCCL_SUCCESS) return fail(MCORE_HCCL_BACKEND, "HcclCommDestroy failed: " + api->describe(rc));
  return {};
}

}  // namespace mcore_hccl
