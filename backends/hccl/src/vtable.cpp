// The plugin's mcore_backend_v1 vtable (entry symbol mcore_backend_plugin_v1): HCCL communicators
// per group from root info exchanged through the library's store (preferred under `auto`), or
// sub-communicators of a world communicator with HcclCreateSubCommConfig, falling back to root
// info per group when the library lacks that call or it fails. The verification collectives run
// on each communicator's own stream with device buffers; the device is remembered per
// communicator so destroy and abort work from any thread.
#include <mcore_backend.h>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include "hccl_group.hpp"

namespace {

using mcore_hccl::Comm;
using mcore_hccl::Status;

thread_local std::string t_last_error;

int32_t report(const Status &st) {
  if (!st.ok()) t_last_error = st.message;
  return st.code;
}

template <typename F>
int32_t guarded(F body) {
  try {
    return report(body());
  } catch (const std::exception &e) {
    return report({MCORE_HCCL_BACKEND, std::string("HCCL plugin internal error: ") + e.what()});
  } catch (...) {
    return report({MCORE_HCCL_BACKEND, "HCCL plugin internal error"});
  }
}

// mcore_hccl_store over the library's mcore_backend_store, with a key prefix (a split's own keys
// in the world's store). The library's get waits up to the store's timeout; with `wait` the
// plugin's own bound applies.
struct PrefixedStore {
  const mcore_backend_store *store;
  std::string prefix;
};
int32_t store_set(void *ud, const char *key, const uint8_t *v, size_t n) {
  auto *p = static_cast<PrefixedStore *>(ud);
  std::string k = p->prefix + key;
  return p->store->set(p->store->ctx, k.c_str(), v, n);
}
int32_t store_get(void *ud, const char *key, uint8_t *buf, size_t cap, size_t *out_len, uint64_t timeout_ms) {
  auto *p = static_cast<PrefixedStore *>(ud);
  std::string k = p->prefix + key;
  if (p->store->wait != nullptr) {
    const char *keys[1] = {k.c_str()};
    int32_t s = p->store->wait(p->store->ctx, keys, 1, timeout_ms == 0 ? 1 : timeout_ms);
    if (s != MCORE_HCCL_OK) return s;
  }
  return p->store->get(p->store->ctx, k.c_str(), buf, cap, out_len);
}

// A stable sub-communicator id from the group name (FNV-1a), equal on every member.
uint64_t sub_comm_id(const char *name) {
  uint64_t h = 1469598103934665603ull;
  for (const char *p = name; *p != '\0'; ++p) h = (h ^ static_cast<uint8_t>(*p)) * 1099511628211ull;
  return h;
}

const char *host_addr(const mcore_backend_group_info *g) {
  if (g->struct_size >= offsetof(mcore_backend_group_info, host_addr) + sizeof(const char *)) return g->host_addr;
  return nullptr;
}

// The group's per-kind options ("key=value" lines), when the library is new enough to pass them.
const char *group_options(const mcore_backend_group_info *g) {
  if (g->struct_size >= offsetof(mcore_backend_group_info, options) + sizeof(const char *)) return g->options;
  return nullptr;
}

uint32_t env_u32(const char *name, uint32_t dflt) {
  const char *v = std::getenv(name);
  if (v == nullptr || *v == '\0') return dflt;
  char *end = nullptr;
  unsigned long x = std::strtoul(v, &end, 10);
  return (*end == '\0' && x <= 0xffffffffu) ? static_cast<uint32_t>(x) : dflt;
}

Status create_from_root_info(const mcore_backend_group_info *group, const mcore_backend_store *store,
                             const std::string &prefix, Comm **out, bool cluster_info = false) {
  mcore_hccl_group_spec spec;
  mcore_hccl_group_spec_init(&spec);
  spec.name = group->name;
  spec.size = group->group_size;
  spec.rank = group->group_rank;
  spec.timeout_ms = group->timeout_ms;
  spec.host_addr = host_addr(group);
  // The device mcore_initialize was given (-1: none), when the library is new enough to pass it.
  if (group->struct_size >= offsetof(mcore_backend_group_info, device) + sizeof(int32_t)) spec.device = group->device;
  spec.buffer_size_mb = env_u32("MCORE_HCCL_BUFFER_MB", 0);
  spec.deterministic = env_u32("MCORE_HCCL_DETERMINISTIC", 0xffffffffu);
  spec.options = group_options(group);
  PrefixedStore ps{store, prefix};
  mcore_hccl_store cb{&ps, &store_set, &store_get};
  return mcore_hccl::hccl_create_group(spec, cb, cluster_info, out);
}

int32_t create(void *, const mcore_backend_group_info *group, const mcore_backend_store *store, void **out_comm, bool world) {
  return guarded([&] {
    if (group == nullptr || store == nullptr || out_comm == nullptr || store->set == nullptr || store->get == nullptr)
      return Status{MCORE_HCCL_INVALID_ARGUMENT, "HCCL plugin: group, store and out_comm are required"};
    Comm *c = nullptr;
    // The world: from a rank table (HcclCommInitClusterInfoMemConfig) where the library has it.
    Status st = create_from_root_info(group, store, "", &c, world);
    if (st.ok()) {
      if (world) c->world_store = store;  // valid until this communicator is destroyed
      *out_comm = c;
    }
    return st;
  });
}
int32_t create_group(void *ud, const mcore_backend_group_info *g, const mcore_backend_store *s, void **out) {
  return create(ud, g, s, out, false);
}
int32_t create_world(void *ud, const mcore_backend_group_info *g, const mcore_backend_store *s, void **out) {
  return create(ud, g, s, out, true);
}

int32_t split(void *, void *parent, int32_t color, int32_t, const mcore_backend_group_info *group, void **out_comm) {
  return guarded([&] {
    if (out_comm == nullptr) return Status{MCORE_HCCL_INVALID_ARGUMENT, "HCCL plugin: out_comm is NULL"};
    if (color < 0) {  // not a member: HCCL sub-communicators are created by members only
      *out_comm = nullptr;
      return Status{};
    }
    if (group == nullptr || parent == nullptr)
      return Status{MCORE_HCCL_INVALID_ARGUMENT, "HCCL plugin: split without a group or parent"};
    auto *world = static_cast<Comm *>(parent);
    Comm *c = nullptr;
    mcore_hccl::Options options;
    Status st = mcore_hccl::parse_options(group_options(group), group->name, &options);
    if (!st.ok()) return st;
    // The parent is the world communicator, so the group's global ranks are its parent ranks.
    st = mcore_hccl::hccl_create_subgroup(world, group->name, group->global_ranks, group->group_size,
                                          group->group_rank, sub_comm_id(group->name), options, &c);
    if (!st.ok()) {
      if (world->world_store == nullptr) return st;
      mcore_hccl::debug("group " + std::string(group->name) + ": split failed (" + st.message +
                        "); falling back to a communicator from root info");
      st = create_from_root_info(group, static_cast<const mcore_backend_store *>(world->world_store),
                                 std::string("hccl_split/") + group->name + "/", &c);
    }
    if (st.ok()) *out_comm = c;
    return st;
  });
}

int32_t allreduce(void *, void *comm, int64_t *inout, size_t count) {
  return guarded([&] { return mcore_hccl::hccl_allreduce_sum_i64(static_cast<Comm *>(comm), inout, count); });
}

int32_t barrier(void *, void *comm) {
  return guarded([&] { return mcore_hccl::hccl_barrier(static_cast<Comm *>(comm)); });
}

int32_t destroy(void *, void *comm) {
  return guarded([&] { return mcore_hccl::hccl_destroy(static_cast<Comm *>(comm), false); });
}

int32_t abort_comm(void *, void *comm) {
  return guarded([&] { return mcore_hccl::hccl_destroy(static_cast<Comm *>(comm), true); });
}

const char *last_error(void *) { return t_last_error.c_str(); }

mcore_backend_v1 make_vtable() {
  mcore_backend_v1 vt;
  std::memset(&vt, 0, sizeof vt);
  vt.struct_size = sizeof vt;
  vt.abi_version = MCORE_BACKEND_ABI_VERSION_V1;
  vt.name = "hccl";
  vt.create_world = &create_world;
  vt.split = &split;
  vt.create_group = &create_group;
  vt.allreduce_sum_i64 = &allreduce;
  vt.barrier = &barrier;
  vt.destroy_comm = &destroy;
  vt.abort_comm = &abort_comm;
  // No suspend/resume slots: the library destroys a communicator on suspend and creates it again
  // on resume. HcclCommSuspend/HcclCommResume are reserved recovery calls after an uncorrectable
  // on-chip memory error (A2/A3) that release no memory, and HCCL's memory-range calls
  // (HcclCommSetMemoryRange, HcclCommActivateCommMemory) map user memory for zero-copy, not
  // HCCL's own buffers (docs/backends.md, "HCCL"). HCCL reports no per-communicator memory.
  vt.last_error = &last_error;
  // No interrupt slot: HCCL has no abort and no non-blocking init, and destroying a communicator
  // under a call blocked in it is not allowed; a call blocked in HCCL when a peer dies runs to
  // HCCL_CONNECT_TIMEOUT / HCCL_EXEC_TIMEOUT (the library's store waits still end at once).
  // Sub-communicators of a root-info world are experimental in HCCL (torch_npu enables them only
  // behind ROOTINFO_SUBCOMM_ENABLE=1): `auto` creates groups from root info unless asked.
  const char *sub = std::getenv("ROOTINFO_SUBCOMM_ENABLE");
  vt.flags = (sub != nullptr && std::strcmp(sub, "1") == 0) ? 0 : MCORE_BACKEND_FLAG_PREFER_PER_GROUP;
  vt.flags |= MCORE_BACKEND_FLAG_TAKES_DEVICE | MCORE_BACKEND_FLAG_TAKES_OPTIONS;
  return vt;
}

}  // namespace

extern "C" const mcore_backend_v1 *mcore_backend_plugin_v1(void) {
  static const mcore_backend_v1 vtable = make_vtable();
  return &vtable;
}
