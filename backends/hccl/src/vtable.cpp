// The plugin's mcore_backend_v1 vtable (entry symbol mcore_backend_plugin_v1): HCCL communicators
// per group from root info exchanged through the library's store, and sub-communicators of a
// world communicator with HcclCreateSubCommConfig. The device is the caller's (aclrtSetDevice
// before initializing). No verification collective yet (allreduce_sum_i64 / barrier are NULL).
#include <mcore_backend.h>

#include <cstring>
#include <exception>
#include <string>

#include "hccl_group.hpp"

namespace {

thread_local std::string t_last_error;

int32_t report(const mcore_hccl::Status &st) {
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

// mcore_hccl_store over the library's mcore_backend_store (whose get waits up to its own timeout).
int32_t store_set(void *ud, const char *key, const uint8_t *v, size_t n) {
  auto *s = static_cast<const mcore_backend_store *>(ud);
  return s->set(s->ctx, key, v, n);
}
int32_t store_get(void *ud, const char *key, uint8_t *buf, size_t cap, size_t *out_len, uint64_t) {
  auto *s = static_cast<const mcore_backend_store *>(ud);
  return s->get(s->ctx, key, buf, cap, out_len);
}

// A stable sub-communicator id from the group name (FNV-1a), equal on every member.
uint64_t sub_comm_id(const char *name) {
  uint64_t h = 1469598103934665603ull;
  for (const char *p = name; *p != '\0'; ++p) h = (h ^ static_cast<uint8_t>(*p)) * 1099511628211ull;
  return h;
}

int32_t create(void *, const mcore_backend_group_info *group, const mcore_backend_store *store, void **out_comm) {
  return guarded([&] {
    if (group == nullptr || store == nullptr || out_comm == nullptr || store->set == nullptr || store->get == nullptr)
      return mcore_hccl::Status{MCORE_HCCL_INVALID_ARGUMENT, "HCCL plugin: group, store and out_comm are required"};
    mcore_hccl_group_spec spec;
    mcore_hccl_group_spec_init(&spec);
    spec.name = group->name;
    spec.size = group->group_size;
    spec.rank = group->group_rank;
    spec.timeout_ms = group->timeout_ms;
    mcore_hccl_store cb{const_cast<mcore_backend_store *>(store), &store_set, &store_get};
    return mcore_hccl::hccl_create_group(spec, cb, out_comm);
  });
}

int32_t split(void *, void *parent, int32_t color, int32_t, const mcore_backend_group_info *group, void **out_comm) {
  return guarded([&] {
    if (out_comm == nullptr) return mcore_hccl::Status{MCORE_HCCL_INVALID_ARGUMENT, "HCCL plugin: out_comm is NULL"};
    if (color < 0) {  // not a member: HCCL sub-communicators are created by members only
      *out_comm = nullptr;
      return mcore_hccl::Status{};
    }
    if (group == nullptr) return mcore_hccl::Status{MCORE_HCCL_INVALID_ARGUMENT, "HCCL plugin: split without a group"};
    // The parent is the world communicator, so the group's global ranks are its parent ranks.
    return mcore_hccl::hccl_create_subgroup(parent, group->name, group->global_ranks, group->group_size,
                                            group->group_rank, sub_comm_id(group->name), out_comm);
  });
}

int32_t destroy(void *, void *comm) {
  return guarded([&] { return mcore_hccl::hccl_destroy(comm); });
}

const char *last_error(void *) { return t_last_error.c_str(); }

mcore_backend_v1 make_vtable() {
  mcore_backend_v1 vt;
  std::memset(&vt, 0, sizeof vt);
  vt.struct_size = sizeof vt;
  vt.abi_version = MCORE_BACKEND_ABI_VERSION_V1;
  vt.name = "hccl";
  vt.create_world = &create;
  vt.split = &split;
  vt.create_group = &create;
  vt.destroy_comm = &destroy;
  vt.last_error = &last_error;
  return vt;
}

const mcore_backend_v1 g_vtable = make_vtable();

}  // namespace

extern "C" const mcore_backend_v1 *mcore_backend_plugin_v1(void) { return &g_vtable; }
