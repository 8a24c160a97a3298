// The plugin's C entry points (see include/mcore_hccl.h). No exception crosses them.
#include <cstddef>
#include <cstring>
#include <exception>

#include "hccl_group.hpp"

namespace {

int32_t report(const mcore_hccl::Status &st, char *err, size_t err_len) {
  if (!st.ok() && err != nullptr && err_len > 0) {
    size_t n = std::min(err_len - 1, st.message.size());
    std::memcpy(err, st.message.data(), n);
    err[n] = '\0';
  }
  return st.code;
}

template <typename F>
int32_t guarded(char *err, size_t err_len, F body) {
  try {
    return report(body(), err, err_len);
  } catch (const std::exception &e) {
    return report({MCORE_HCCL_BACKEND, std::string("internal error: ") + e.what()}, err, err_len);
  } catch (...) {
    return report({MCORE_HCCL_BACKEND, "internal error"}, err, err_len);
  }
}

}  // namespace

extern "C" {

void mcore_hccl_group_spec_init(mcore_hccl_group_spec *spec) {
  if (spec == nullptr) return;
  std::memset(spec, 0, sizeof(*spec));
  spec->struct_size = sizeof(*spec);
  spec->timeout_ms = 300000;
  spec->device = -1;
  spec->deterministic = 0xffffffffu;
}

int32_t mcore_hccl_load(char *err, size_t err_len) {
  return guarded(err, err_len, [] {
    std::string why;
    if (mcore_hccl::HcclApi::get(&why) == nullptr) return mcore_hccl::Status{MCORE_HCCL_LIBRARY_LOAD, why};
    return mcore_hccl::Status{};
  });
}

int32_t mcore_hccl_create_group(const mcore_hccl_group_spec *spec, const mcore_hccl_store *store, void **out_comm,
                                char *err, size_t err_len) {
  return guarded(err, err_len, [&] {
    if (spec == nullptr || store == nullptr || out_comm == nullptr)
      return mcore_hccl::Status{MCORE_HCCL_INVALID_ARGUMENT, "spec, store and out_comm must not be NULL"};
    // The spec before `options` was appended is still read.
    if (spec->struct_size < offsetof(mcore_hccl_group_spec, options))
      return mcore_hccl::Status{MCORE_HCCL_INVALID_ARGUMENT,
                                "spec->struct_size " + std::to_string(spec->struct_size) +
                                    " is smaller than mcore_hccl_group_spec; fill it with mcore_hccl_group_spec_init"};
    mcore_hccl::Comm *c = nullptr;
    mcore_hccl::Status st = mcore_hccl::hccl_create_group(*spec, *store, &c);
    if (st.ok()) *out_comm = c;
    return st;
  });
}

int32_t mcore_hccl_create_subgroup(void *parent, const char *name, const uint32_t *parent_ranks, uint32_t n,
                                   uint32_t sub_rank, uint64_t sub_comm_id, void **out_comm, char *err, size_t err_len) {
  return guarded(err, err_len, [&] {
    if (out_comm == nullptr) return mcore_hccl::Status{MCORE_HCCL_INVALID_ARGUMENT, "out_comm must not be NULL"};
    mcore_hccl::Comm *c = nullptr;
    mcore_hccl::Status st = mcore_hccl::hccl_create_subgroup(static_cast<mcore_hccl::Comm *>(parent), name ? name : "",
                                                             parent_ranks, n, sub_rank, sub_comm_id, {}, &c);
    if (st.ok()) *out_comm = c;
    return st;
  });
}

int32_t mcore_hccl_destroy(void *comm, char *err, size_t err_len) {
  return guarded(err, err_len, [&] { return mcore_hccl::hccl_destroy(static_cast<mcore_hccl::Comm *>(comm), false); });
}

int32_t mcore_hccl_allreduce_sum_i64(void *comm, int64_t *inout, size_t count, char *err, size_t err_len) {
  return guarded(err, err_len, [&] {
    return mcore_hccl::hccl_allreduce_sum_i64(static_cast<mcore_hccl::Comm *>(comm), inout, count);
  });
}

int64_t mcore_hccl_connect_timeout_s(char *err, size_t err_len) {
  int64_t s = -1;
  int32_t rc = guarded(err, err_len, [&] { return mcore_hccl::connect_timeout_s(&s); });
  return rc == MCORE_HCCL_OK ? s : -1;
}

}  // extern "C"
