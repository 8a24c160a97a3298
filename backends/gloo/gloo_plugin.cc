// The Gloo backend plugin for mcore_init (CPU communicators over TCP).
//
// Strategy: per group (`create_group`). Each group gets its own gloo::rendezvous::Context,
// connected as a full mesh through the group's store (the library hands us a key space private
// to the group, reached through the mcore_backend_store callbacks). All contexts share one TCP
// device, bound to 127.0.0.1 unless MCORE_GLOO_HOSTNAME (an address or host name) or
// GLOO_SOCKET_IFNAME (an interface) says otherwise.
//
// No C++ exception leaves this file: every slot catches, returns an mcore_status code and keeps
// the message for `last_error` (thread-local).

#include <algorithm>
#include <optional>
#include <unordered_map>
#include <mcore_init.h>

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace {

constexpr std::chrono::milliseconds kFallbackTimeout{30000};

thread_local std::string t_last_error;

// A failure that already knows its mcore_status.
struct StatusError : std::runtime_error {
  StatusError(int32_t status, const std::string& message) : std::runtime_error(message), status(status) {}
  int32_t status;
};

// gloo::rendezvous::Store over the library's mcore_backend_store callbacks.
class CallbackStore : public gloo::rendezvous::Store {
 public:
  // `global_ranks` (group_size entries) lets messages say whose key is missing.
  CallbackStore(const mcore_backend_store* store, std::chrono::milliseconds timeout,
                std::vector<uint32_t> global_ranks, size_t self_rank)
      : s_(store), timeout_(timeout), global_ranks_(std::move(global_ranks)), self_rank_(self_rank) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    check(s_->set(s_->ctx, key.c_str(), reinterpret_cast<const uint8_t*>(data.data()), data.size()), "set", key);
  }

  // Blocks until the key exists (gloo relies on it), bounded by the group timeout. The first
  // read of a peer's key fetches that key of every peer in one multi_get (when the library offers
  // it), so a group's rendezvous costs a fixed number of store round trips whatever its size.
  std::vector<char> get(const std::string& key) override {
    if (auto v = take_cached(key)) return std::move(*v);
    if (prefetch_family(key)) {
      if (auto v = take_cached(key)) return std::move(*v);
    }
    // One call with a buffer that usually fits; a second only when it does not.
    std::vector<char> out(4096);
    size_t len = 0;
    int32_t rc = s_->get(s_->ctx, key.c_str(), reinterpret_cast<uint8_t*>(out.data()), out.size(), &len);
    if (rc == MCORE_STATUS_BUFFER_TOO_SMALL) {
      out.resize(len);
      rc = s_->get(s_->ctx, key.c_str(), reinterpret_cast<uint8_t*>(out.data()), out.size(), &len);
    }
    check(rc, "get", key);
    out.resize(len);
    return out;
  }

  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }

  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    std::vector<const char*> ptrs;
    ptrs.reserve(keys.size());
    for (const auto& k : keys) ptrs.push_back(k.c_str());
    uint64_t ms = timeout.count() > 0 ? static_cast<uint64_t>(timeout.count()) : 0;
    check(s_->wait(s_->ctx, ptrs.data(), ptrs.size(), ms), "wait", keys.empty() ? std::string() : keys.front());
  }

 private:
  void check(int32_t rc, const char* op, const std::string& key) const {
    if (rc == MCORE_STATUS_OK) return;
    std::string detail;
    if (s_->struct_size >= offsetof(mcore_backend_store, error_message) + sizeof(s_->error_message) &&
        s_->error_message != nullptr) {
      const char* m = s_->error_message(s_->ctx);
      if (m != nullptr) detail = m;
    }
    if (detail.empty()) detail = "status " + std::to_string(rc);
    // Name the rank behind every key the store reports missing (else behind the key asked for).
    std::string ranks;
    for (size_t at = detail.find('\''); at != std::string::npos; at = detail.find('\'', at + 1)) {
      size_t end = detail.find('\'', at + 1);
      if (end == std::string::npos) break;
      ranks += whose(detail.substr(at + 1, end - at - 1));
      at = end;
    }
    throw StatusError(rc, std::string("store ") + op + " '" + key + "': " + detail + (ranks.empty() ? whose(key) : ranks));
  }

  // connectFullMesh keys each rank's pair addresses by its decimal group rank (`<r>`) and its
  // host name by `rank_<r>`.
  std::string whose(const std::string& full_key) const {
    std::string key = full_key.rfind("rank_", 0) == 0 ? full_key.substr(5) : full_key;
    if (key.empty() || key.size() > 9 || key.find_first_not_of("0123456789") != std::string::npos) return "";
    size_t r = std::stoul(key);
    if (r >= global_ranks_.size()) return "";
    return " (key of group rank " + key + " = global rank " + std::to_string(global_ranks_[r]) +
           ", which has not joined the group)";
  }

  std::optional<std::vector<char>> take_cached(const std::string& key) {
    auto it = cache_.find(key);
    if (it == cache_.end()) return std::nullopt;
    std::vector<char> v = std::move(it->second);
    cache_.erase(it);
    return v;
  }

  // connectFullMesh reads `<r>` of every peer r, and `rank_<r>` of every lower rank r (to find
  // its local rank): fetch exactly those keys of `key`'s family at once, so no rank waits for a
  // key gloo itself would not. False when `key` is of neither family or there is no multi_get.
  bool prefetch_family(const std::string& key) {
    const bool has_multi_get = s_->struct_size >= offsetof(mcore_backend_store, multi_get) + sizeof(s_->multi_get) &&
                               s_->multi_get != nullptr;
    const std::string family = key.rfind("rank_", 0) == 0 ? "rank_" : "";
    const std::string digits = key.substr(family.size());
    if (!has_multi_get || digits.empty() || digits.size() > 9 ||
        digits.find_first_not_of("0123456789") != std::string::npos || std::stoul(digits) >= global_ranks_.size()) {
      return false;
    }
    std::vector<std::string> keys;
    const size_t end = family.empty() ? global_ranks_.size() : self_rank_;
    for (size_t r = 0; r < end; ++r) {
      if (r != self_rank_) keys.push_back(family + std::to_string(r));
    }
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) return false;
    std::vector<const char*> ptrs;
    for (const auto& k : keys) ptrs.push_back(k.c_str());
    std::vector<size_t> lens(keys.size());
    std::vector<uint8_t> buf(64 * 1024);
    int32_t rc = s_->multi_get(s_->ctx, ptrs.data(), ptrs.size(), buf.data(), buf.size(), lens.data());
    if (rc == MCORE_STATUS_BUFFER_TOO_SMALL) {
      size_t total = 0;
      for (size_t l : lens) total += l;
      buf.resize(total);
      rc = s_->multi_get(s_->ctx, ptrs.data(), ptrs.size(), buf.data(), buf.size(), lens.data());
    }
    check(rc, "multi_get", key);
    size_t at = 0;
    for (size_t i = 0; i < keys.size(); ++i) {
      cache_[keys[i]] = std::vector<char>(buf.begin() + at, buf.begin() + at + lens[i]);
      at += lens[i];
    }
    return true;
  }

  const mcore_backend_store* s_;
  std::chrono::milliseconds timeout_;
  std::vector<uint32_t> global_ranks_;
  size_t self_rank_;
  std::unordered_map<std::string, std::vector<char>> cache_;
};

struct Plugin {
  std::mutex mu;
  std::shared_ptr<gloo::transport::Device> device;

  std::shared_ptr<gloo::transport::Device> get_device() {
    std::lock_guard<std::mutex> lock(mu);
    if (!device) {
      gloo::transport::tcp::attr attr;
      const char* host = std::getenv("MCORE_GLOO_HOSTNAME");
      const char* iface = std::getenv("GLOO_SOCKET_IFNAME");
      if (host != nullptr && *host != '\0') {
        attr.hostname = host;
      } else if (iface != nullptr && *iface != '\0') {
        attr.iface = iface;
      } else {
        attr.hostname = "127.0.0.1";
      }
      device = gloo::transport::tcp::CreateDevice(attr);
    }
    return device;
  }
};

Plugin g_plugin;

struct GlooComm {
  std::shared_ptr<gloo::rendezvous::Context> ctx;
  std::string name;
  std::chrono::milliseconds timeout;
  uint32_t next_tag = 0;
};

template <typename F>
int32_t guarded(const std::string& what, F&& body) {
  try {
    body();
    t_last_error.clear();
    return MCORE_STATUS_OK;
  } catch (const StatusError& e) {
    t_last_error = what + ": " + e.what();
    return e.status;
  } catch (const gloo::IoException& e) {
    t_last_error = what + ": gloo I/O error: " + e.what();
    return MCORE_STATUS_PEER_FAILED;
  } catch (const std::exception& e) {
    t_last_error = what + ": " + e.what();
    return MCORE_STATUS_BACKEND;
  } catch (...) {
    t_last_error = what + ": unknown C++ exception";
    return MCORE_STATUS_BACKEND;
  }
}

int32_t invalid(const std::string& message) {
  t_last_error = message;
  return MCORE_STATUS_INVALID_ARGUMENT;
}

int32_t gloo_create_group(void* user_data, const mcore_backend_group_info* group, const mcore_backend_store* store,
                          void** out_comm) {
  if (group == nullptr || store == nullptr || out_comm == nullptr) return invalid("gloo create_group: NULL argument");
  if (group->struct_size < offsetof(mcore_backend_group_info, timeout_ms) + sizeof(group->timeout_ms))
    return invalid("gloo create_group: group info struct_size " + std::to_string(group->struct_size) + " too small");
  if (store->struct_size < offsetof(mcore_backend_store, add) + sizeof(store->add) || store->set == nullptr ||
      store->get == nullptr || store->wait == nullptr)
    return invalid("gloo create_group: the store lacks set/get/wait callbacks");
  std::string name = group->name != nullptr ? group->name : "";
  if (group->group_size == 0 || group->group_rank >= group->group_size)
    return invalid("gloo create_group '" + name + "': group rank " + std::to_string(group->group_rank) +
                   " outside group size " + std::to_string(group->group_size));
  auto* plugin = static_cast<Plugin*>(user_data);
  std::string what = "gloo connectFullMesh for group '" + name + "' (rank " + std::to_string(group->group_rank) +
                     " of " + std::to_string(group->group_size) + ")";
  return guarded(what, [&] {
    auto timeout = group->timeout_ms > 0 ? std::chrono::milliseconds(group->timeout_ms) : kFallbackTimeout;
    auto comm = std::make_unique<GlooComm>();
    comm->name = name;
    comm->timeout = timeout;
    comm->ctx = std::make_shared<gloo::rendezvous::Context>(static_cast<int>(group->group_rank),
                                                            static_cast<int>(group->group_size));
    comm->ctx->setTimeout(timeout);
    std::vector<uint32_t> ranks;
    if (group->global_ranks != nullptr) ranks.assign(group->global_ranks, group->global_ranks + group->group_size);
    CallbackStore cb(store, timeout, std::move(ranks), group->group_rank);
    auto device = plugin->get_device();
    comm->ctx->connectFullMesh(cb, device);
    *out_comm = comm.release();
  });
}

int32_t gloo_allreduce_sum_i64(void*, void* comm_ptr, int64_t* inout, size_t count) {
  if (comm_ptr == nullptr) return invalid("gloo allreduce_sum_i64: comm is NULL");
  if (inout == nullptr && count != 0) return invalid("gloo allreduce_sum_i64: buffer is NULL, count " + std::to_string(count));
  auto* comm = static_cast<GlooComm*>(comm_ptr);
  return guarded("gloo allreduce_sum_i64 on group '" + comm->name + "'", [&] {
    if (count == 0) return;
    gloo::AllreduceOptions opts(comm->ctx);
    opts.setOutput(inout, count);
    void (*sum)(void*, const void*, const void*, size_t) = &gloo::sum<int64_t>;
    opts.setReduceFunction(sum);
    opts.setTag(comm->next_tag++);
    opts.setTimeout(comm->timeout);
    gloo::allreduce(opts);
  });
}

int32_t gloo_barrier(void*, void* comm_ptr) {
  if (comm_ptr == nullptr) return invalid("gloo barrier: comm is NULL");
  auto* comm = static_cast<GlooComm*>(comm_ptr);
  return guarded("gloo barrier on group '" + comm->name + "'", [&] {
    gloo::BarrierOptions opts(comm->ctx);
    opts.setTag(comm->next_tag++);
    opts.setTimeout(comm->timeout);
    gloo::barrier(opts);
  });
}

int32_t gloo_destroy_comm(void*, void* comm_ptr) {
  if (comm_ptr == nullptr) return MCORE_STATUS_OK;
  auto* comm = static_cast<GlooComm*>(comm_ptr);
  std::string name = comm->name;
  return guarded("gloo destroy_comm on group '" + name + "'", [&] { delete comm; });
}

const char* gloo_last_error(void*) { return t_last_error.c_str(); }

void gloo_finalize(void* user_data) {
  auto* plugin = static_cast<Plugin*>(user_data);
  try {
    std::lock_guard<std::mutex> lock(plugin->mu);
    plugin->device.reset();
  } catch (...) {
  }
}

mcore_backend_v1 make_vtable() {
  mcore_backend_v1 vt{};
  vt.struct_size = sizeof(mcore_backend_v1);
  vt.abi_version = MCORE_BACKEND_ABI_VERSION_V1;
  vt.name = "gloo";
  vt.user_data = &g_plugin;
  vt.create_world = nullptr;
  vt.split = nullptr;
  vt.create_group = &gloo_create_group;
  vt.allreduce_sum_i64 = &gloo_allreduce_sum_i64;
  vt.barrier = &gloo_barrier;
  vt.destroy_comm = &gloo_destroy_comm;
  vt.last_error = &gloo_last_error;
  vt.finalize = &gloo_finalize;
  return vt;
}

const mcore_backend_v1 g_vtable = make_vtable();

}  // namespace

extern "C" __attribute__((visibility("default"))) const mcore_backend_v1* mcore_backend_plugin_v1(void) {
  return &g_vtable;
}
