// The Gloo backend plugin for mcore_init (CPU communicators over TCP).
//
// Strategies: both; the vtable sets MCORE_BACKEND_FLAG_PREFER_PER_GROUP, so the library's
// `auto` strategy creates groups one by one (a Gloo split costs a full mesh like create_group,
// plus the world's); `split` runs on request (and is how the split path is tested on CPU).
//  * Per group (`create_group`): each group gets its own gloo::rendezvous::Context, connected as
//    a full mesh through the group's store (the library hands us a key space private to the
//    group, reached through the mcore_backend_store callbacks, valid during the call).
//  * Split (`create_world` + `split`): the world communicator is created like a group and keeps
//    the store pointer, which the library keeps valid until the world is destroyed. A split
//    connects a new full mesh of the group's members through that store under a key prefix
//    private to the split (`split/<group name>/<n>/`, n = how many times this world was split
//    into that group name before); a non-member (color -1) does nothing. Children own their
//    context: they outlive the world communicator, which must only outlive their creation.
//    Gloo has no native split, so a split costs what create_group costs; it exists so the
//    library's split path runs with real processes on CPU.
// All contexts share one TCP device, bound to the first of: MCORE_GLOO_HOSTNAME (an address or
// host name), GLOO_SOCKET_IFNAME (an interface), the address the library advertises for this
// rank (`host_addr`: the local address of its connection to the rendezvous store, which peers
// on other hosts can reach), 127.0.0.1.
//
// Deadlines: a group's `timeout_ms` is what is left of the init deadline. Every store wait of a
// full-mesh connect runs to that deadline (whatever timeout gloo asks for), and gloo's pair
// connect, which waits up to 5x the context timeout, runs with a context timeout of a fifth of
// it, so no connect outlives the deadline.
//
// No C++ exception leaves this file: every slot catches, returns an mcore_status code and keeps
// the message for `last_error` (per thread).

#include <algorithm>
#include <optional>
#include <unordered_map>
#include <mcore_backend.h>

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
#include <thread>
#include <utility>
#include <vector>

namespace {

constexpr std::chrono::milliseconds kFallbackTimeout{30000};
// MCORE_TIMEOUT_MAX_MS (2^31 s, "no limit"): longer timeouts are clamped to it, so that the
// signed millisecond (and nanosecond) counts of std::chrono and Gloo never overflow.
constexpr uint64_t kMaxTimeoutMs = (uint64_t{1} << 31) * 1000;
std::chrono::milliseconds group_timeout(uint64_t ms, std::chrono::milliseconds fallback) {
  return ms > 0 ? std::chrono::milliseconds(static_cast<int64_t>(std::min(ms, kMaxTimeoutMs))) : fallback;
}

// The last failure of each thread, for `last_error`. A map under a mutex, not a thread_local:
// this library is dlopen'd, so a thread_local lives in dynamic TLS, which LeakSanitizer (GCC 12,
// glibc 2.36) misreads at exit and aborts the process ("Tracer caught signal 11"). A thread's
// entry exists only while its last slot call failed; std::unordered_map keeps an element's
// address across other threads' inserts, so `last_error`'s pointer stays valid until this
// thread's next call.
class LastErrors {
 public:
  void set(std::string message) {
    std::lock_guard<std::mutex> lock(mu_);
    if (message.empty()) {
      by_thread_.erase(std::this_thread::get_id());
    } else {
      by_thread_[std::this_thread::get_id()] = std::move(message);
    }
  }

  const char* get() {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_thread_.find(std::this_thread::get_id());
    return it == by_thread_.end() ? "" : it->second.c_str();
  }

 private:
  std::mutex mu_;
  std::unordered_map<std::thread::id, std::string> by_thread_;
};

LastErrors g_last_error;

// A failure that already knows its mcore_status.
struct StatusError : std::runtime_error {
  StatusError(int32_t status, const std::string& message) : std::runtime_error(message), status(status) {}
  int32_t status;
};

// gloo::rendezvous::Store over the library's mcore_backend_store callbacks.
class CallbackStore : public gloo::rendezvous::Store {
 public:
  // `global_ranks` (group_size entries) lets messages say whose key is missing. Every key gloo
  // uses is stored as `prefix + key` (the prefix keeps a split's keys apart from the world's).
  CallbackStore(const mcore_backend_store* store, std::chrono::milliseconds timeout,
                std::vector<uint32_t> global_ranks, size_t self_rank, std::string prefix)
      : s_(store),
        deadline_(std::chrono::steady_clock::now() + timeout),
        global_ranks_(std::move(global_ranks)),
        self_rank_(self_rank),
        prefix_(std::move(prefix)) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    const std::string full = prefix_ + key;
    check(s_->set(s_->ctx, full.c_str(), reinterpret_cast<const uint8_t*>(data.data()), data.size()), "set", full);
  }

  // Blocks until the key exists (gloo relies on it), bounded by the group's deadline. The first
  // read of a peer's key waits for that key of every peer and fetches them in one multi_get (when
  // the library offers it), so a group's rendezvous costs a fixed number of store round trips
  // whatever its size.
  std::vector<char> get(const std::string& key) override {
    if (auto v = take_cached(key)) return std::move(*v);
    if (prefetch_family(key)) {
      if (auto v = take_cached(key)) return std::move(*v);
    }
    wait_until_deadline({key});
    // One call with a buffer that usually fits; a second only when it does not.
    const std::string full = prefix_ + key;
    std::vector<char> out(4096);
    size_t len = 0;
    int32_t rc = s_->get(s_->ctx, full.c_str(), reinterpret_cast<uint8_t*>(out.data()), out.size(), &len);
    if (rc == MCORE_STATUS_BUFFER_TOO_SMALL) {
      out.resize(len);
      rc = s_->get(s_->ctx, full.c_str(), reinterpret_cast<uint8_t*>(out.data()), out.size(), &len);
    }
    check(rc, "get", full);
    out.resize(len);
    return out;
  }

  void wait(const std::vector<std::string>& keys) override { wait_for(keys); }

  // gloo passes its context timeout, which `connect` shortens for pair connects: store waits run
  // to the group's deadline instead.
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds&) override { wait_for(keys); }

 private:
  // Waits for gloo's `keys`: a peer key of a family gloo reads for every peer is prefetched with
  // its family (see prefetch_family).
  void wait_for(const std::vector<std::string>& keys) {
    if (std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return cache_.count(k) != 0; })) return;
    if (keys.size() == 1 && prefetch_family(keys.front())) return;
    wait_until_deadline(keys);
  }

  // Waits for gloo's `keys` (prefix added here) until the group's deadline (1 ms when passed).
  void wait_until_deadline(const std::vector<std::string>& keys) {
    const std::vector<std::string> full = prefixed(keys);
    std::vector<const char*> ptrs;
    ptrs.reserve(full.size());
    for (const auto& k : full) ptrs.push_back(k.c_str());
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - std::chrono::steady_clock::now());
    uint64_t ms = left.count() > 1 ? static_cast<uint64_t>(left.count()) : 1;
    check(s_->wait(s_->ctx, ptrs.data(), ptrs.size(), ms), "wait", full.empty() ? std::string() : full.front());
  }

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

  std::vector<std::string> prefixed(const std::vector<std::string>& keys) const {
    std::vector<std::string> out;
    out.reserve(keys.size());
    for (const auto& k : keys) out.push_back(prefix_ + k);
    return out;
  }

  // connectFullMesh keys each rank's pair addresses by its decimal group rank (`<r>`) and its
  // host name by `rank_<r>` (after our prefix).
  std::string whose(const std::string& store_key) const {
    if (store_key.compare(0, prefix_.size(), prefix_) != 0) return "";
    const std::string gloo_key = store_key.substr(prefix_.size());
    std::string key = gloo_key.rfind("rank_", 0) == 0 ? gloo_key.substr(5) : gloo_key;
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
  // `key` is gloo's key (families are recognized before the prefix is added).
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
    wait_until_deadline(keys);
    const std::vector<std::string> full = prefixed(keys);
    std::vector<const char*> ptrs;
    for (const auto& k : full) ptrs.push_back(k.c_str());
    std::vector<size_t> lens(keys.size());
    std::vector<uint8_t> buf(64 * 1024);
    int32_t rc = s_->multi_get(s_->ctx, ptrs.data(), ptrs.size(), buf.data(), buf.size(), lens.data());
    if (rc == MCORE_STATUS_BUFFER_TOO_SMALL) {
      size_t total = 0;
      for (size_t l : lens) total += l;
      buf.resize(total);
      rc = s_->multi_get(s_->ctx, ptrs.data(), ptrs.size(), buf.data(), buf.size(), lens.data());
    }
    check(rc, "multi_get", prefix_ + key);
    size_t at = 0;
    for (size_t i = 0; i < keys.size(); ++i) {
      cache_[keys[i]] = std::vector<char>(buf.begin() + at, buf.begin() + at + lens[i]);
      at += lens[i];
    }
    return true;
  }

  const mcore_backend_store* s_;
  std::chrono::steady_clock::time_point deadline_;
  std::vector<uint32_t> global_ranks_;
  size_t self_rank_;
  std::string prefix_;
  // Prefetched values by gloo key (without the prefix).
  std::unordered_map<std::string, std::vector<char>> cache_;
};

struct Plugin {
  std::mutex mu;
  std::shared_ptr<gloo::transport::Device> device;

  // The device, created on first use at the address chosen as the file's header says
  // (`host_addr`: the library's advertised address, NULL when it offers none).
  std::shared_ptr<gloo::transport::Device> get_device(const char* host_addr) {
    std::lock_guard<std::mutex> lock(mu);
    if (!device) {
      gloo::transport::tcp::attr attr;
      const char* host = std::getenv("MCORE_GLOO_HOSTNAME");
      const char* iface = std::getenv("GLOO_SOCKET_IFNAME");
      if (host != nullptr && *host != '\0') {
        attr.hostname = host;
      } else if (iface != nullptr && *iface != '\0') {
        attr.iface = iface;
      } else if (host_addr != nullptr && *host_addr != '\0') {
        attr.hostname = host_addr;
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
  // Set by create_world only: the store the library keeps valid until this communicator is
  // destroyed, and the world's ranks, so it can be split.
  const mcore_backend_store* store = nullptr;
  uint32_t global_rank = 0;
  std::vector<uint32_t> global_ranks;
  // How many times this world was split into each group name (keeps re-splits' keys apart).
  std::unordered_map<std::string, uint32_t> splits;
};

// Catches what escapes a slot's whole body (also std::bad_alloc while building a message), so
// no exception leaves the plugin.
template <typename F>
int32_t slot_boundary(const char* slot, F&& body) noexcept {
  try {
    return body();
  } catch (...) {
    try {
      g_last_error.set(std::string("gloo ") + slot + ": unexpected C++ exception");
    } catch (...) {
    }
    return MCORE_STATUS_BACKEND;
  }
}

template <typename F>
int32_t guarded(const std::string& what, F&& body) {
  try {
    body();
    g_last_error.set("");
    return MCORE_STATUS_OK;
  } catch (const StatusError& e) {
    g_last_error.set(what + ": " + e.what());
    return e.status;
  } catch (const gloo::IoException& e) {
    g_last_error.set(what + ": gloo I/O error: " + e.what());
    return MCORE_STATUS_PEER_FAILED;
  } catch (const std::exception& e) {
    g_last_error.set(what + ": " + e.what());
    return MCORE_STATUS_BACKEND;
  } catch (...) {
    g_last_error.set(what + ": unknown C++ exception");
    return MCORE_STATUS_BACKEND;
  }
}

int32_t invalid(const std::string& message) {
  g_last_error.set(message);
  return MCORE_STATUS_INVALID_ARGUMENT;
}

// What is wrong with `group` for `op` ("" = nothing).
std::string check_group(const std::string& op, const mcore_backend_group_info* group) {
  if (group->struct_size < offsetof(mcore_backend_group_info, timeout_ms) + sizeof(group->timeout_ms))
    return op + ": group info struct_size " + std::to_string(group->struct_size) + " too small";
  std::string name = group->name != nullptr ? group->name : "";
  if (group->group_size == 0 || group->group_rank >= group->group_size)
    return op + " '" + name + "': group rank " + std::to_string(group->group_rank) +
           " outside group size " + std::to_string(group->group_size);
  if (group->global_ranks == nullptr)
    return op + " '" + name + "': global_ranks is NULL for a group of " +
           std::to_string(group->group_size);
  return "";
}

// A context of `group`'s members connected as a full mesh through `store`, every key under
// `prefix`. Throws on failure (callers run it inside `guarded`).
std::unique_ptr<GlooComm> connect(Plugin* plugin, const mcore_backend_group_info* group,
                                  const mcore_backend_store* store, std::chrono::milliseconds timeout,
                                  const std::string& prefix) {
  auto comm = std::make_unique<GlooComm>();
  comm->name = group->name != nullptr ? group->name : "";
  comm->timeout = timeout;
  comm->ctx = std::make_shared<gloo::rendezvous::Context>(static_cast<int>(group->group_rank),
                                                          static_cast<int>(group->group_size));
  std::vector<uint32_t> ranks(group->global_ranks, group->global_ranks + group->group_size);
  CallbackStore cb(store, timeout, std::move(ranks), group->group_rank, prefix);
  const bool has_host_addr = group->struct_size >= offsetof(mcore_backend_group_info, host_addr) + sizeof(group->host_addr);
  auto device = plugin->get_device(has_host_addr ? group->host_addr : nullptr);
  // gloo waits up to 5x the context timeout for a pair to connect (see the file's header).
  comm->ctx->setTimeout(std::max(timeout / 5, std::chrono::milliseconds(1)));
  comm->ctx->connectFullMesh(cb, device);
  comm->ctx->setTimeout(timeout);
  return comm;
}

// " (rank r of n)" of `group`.
std::string rank_of(const mcore_backend_group_info* group) {
  return " (rank " + std::to_string(group->group_rank) + " of " + std::to_string(group->group_size) + ")";
}

// create_group and create_world: a full mesh of the group through `store`. A world keeps the
// store (valid until it is destroyed, by the create_world contract) to rendezvous its splits.
int32_t create(const char* op, void* user_data, const mcore_backend_group_info* group,
               const mcore_backend_store* store, void** out_comm, bool world) {
  if (group == nullptr || store == nullptr || out_comm == nullptr)
    return invalid(std::string("gloo ") + op + ": NULL argument");
  std::string bad = check_group(std::string("gloo ") + op, group);
  if (!bad.empty()) return invalid(bad);
  if (store->struct_size < offsetof(mcore_backend_store, add) + sizeof(store->add) || store->set == nullptr ||
      store->get == nullptr || store->wait == nullptr)
    return invalid(std::string("gloo ") + op + ": the store lacks set/get/wait callbacks");
  auto* plugin = static_cast<Plugin*>(user_data);
  const std::string name = group->name != nullptr ? group->name : "";
  return guarded("gloo connectFullMesh for group '" + name + "'" + rank_of(group), [&] {
    auto timeout = group_timeout(group->timeout_ms, kFallbackTimeout);
    auto comm = connect(plugin, group, store, timeout, "");
    if (world) {
      comm->store = store;
      comm->global_rank = group->global_rank;
      comm->global_ranks.assign(group->global_ranks, group->global_ranks + group->group_size);
    }
    *out_comm = comm.release();
  });
}

int32_t gloo_create_group(void* user_data, const mcore_backend_group_info* group, const mcore_backend_store* store,
                          void** out_comm) {
  return slot_boundary("create_group",
                       [&] { return create("create_group", user_data, group, store, out_comm, false); });
}

int32_t gloo_create_world(void* user_data, const mcore_backend_group_info* group, const mcore_backend_store* store,
                          void** out_comm) {
  return slot_boundary("create_world",
                       [&] { return create("create_world", user_data, group, store, out_comm, true); });
}

// A split of a world communicator: members connect a new full mesh through the world's store
// under `split/<group name>/<n>/`; a non-member (color -1, group NULL) gets NULL and does nothing.
int32_t gloo_split(void* user_data, void* parent_ptr, int32_t color, int32_t key, const mcore_backend_group_info* group,
                   void** out_comm) {
  return slot_boundary("split", [&]() -> int32_t {
    if (out_comm == nullptr) return invalid("gloo split: out_comm is NULL");
    if (parent_ptr == nullptr) return invalid("gloo split: parent communicator is NULL");
    auto* parent = static_cast<GlooComm*>(parent_ptr);
    if (group == nullptr) {
      if (color != -1)
        return invalid("gloo split of '" + parent->name + "': group is NULL but color is " + std::to_string(color) +
                       " (a rank that joins no group passes color -1)");
      *out_comm = nullptr;
      g_last_error.set("");
      return MCORE_STATUS_OK;
    }
    std::string bad = check_group("gloo split", group);
    if (!bad.empty()) return invalid(bad);
    const std::string name = group->name != nullptr ? group->name : "";
    const std::string what = "gloo split of '" + parent->name + "' into '" + name + "'";
    if (color < 0)
      return invalid(what + ": color " + std::to_string(color) + " with a group (only a non-member passes -1)");
    if (parent->store == nullptr)
      return invalid(what + ": splits need a world communicator from create_world; '" + parent->name +
                     "' was made by create_group or split and has no store to rendezvous through");
    if (key < 0 || static_cast<uint32_t>(key) != group->group_rank)
      return invalid(what + ": key " + std::to_string(key) + " disagrees with group rank " +
                     std::to_string(group->group_rank) +
                     " (this backend orders a group's ranks by global rank: pass key = group_rank)");
    if (group->global_rank != parent->global_rank || group->global_ranks[group->group_rank] != group->global_rank)
      return invalid(what + ": global rank " + std::to_string(group->global_rank) + " at group rank " +
                     std::to_string(group->group_rank) + " is not this process (global rank " +
                     std::to_string(parent->global_rank) + " of the world)");
    for (uint32_t i = 0; i < group->group_size; ++i) {
      const uint32_t r = group->global_ranks[i];
      if (std::find(parent->global_ranks.begin(), parent->global_ranks.end(), r) == parent->global_ranks.end())
        return invalid(what + ": global rank " + std::to_string(r) + " is not in the world of " +
                       std::to_string(parent->global_ranks.size()) + " ranks");
    }
    auto* plugin = static_cast<Plugin*>(user_data);
    return guarded(what + rank_of(group) + ", connectFullMesh", [&] {
      auto timeout = group_timeout(group->timeout_ms, parent->timeout);
      const uint32_t n = parent->splits[name]++;
      auto comm = connect(plugin, group, parent->store, timeout, "split/" + name + "/" + std::to_string(n) + "/");
      *out_comm = comm.release();
    });
  });
}

int32_t gloo_allreduce_sum_i64(void*, void* comm_ptr, int64_t* inout, size_t count) {
  return slot_boundary("allreduce_sum_i64", [&]() -> int32_t {
    if (comm_ptr == nullptr) return invalid("gloo allreduce_sum_i64: comm is NULL");
    if (inout == nullptr && count != 0)
      return invalid("gloo allreduce_sum_i64: buffer is NULL, count " + std::to_string(count));
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
  });
}

int32_t gloo_barrier(void*, void* comm_ptr) {
  return slot_boundary("barrier", [&]() -> int32_t {
    if (comm_ptr == nullptr) return invalid("gloo barrier: comm is NULL");
    auto* comm = static_cast<GlooComm*>(comm_ptr);
    return guarded("gloo barrier on group '" + comm->name + "'", [&] {
      gloo::BarrierOptions opts(comm->ctx);
      opts.setTag(comm->next_tag++);
      opts.setTimeout(comm->timeout);
      gloo::barrier(opts);
    });
  });
}

// Deletes the context (closing its pairs). A world's store is not touched: children of its
// splits own their contexts and stay usable.
int32_t gloo_destroy_comm(void*, void* comm_ptr) {
  return slot_boundary("destroy_comm", [&]() -> int32_t {
    if (comm_ptr == nullptr) return MCORE_STATUS_OK;
    auto* comm = static_cast<GlooComm*>(comm_ptr);
    std::string name = comm->name;
    return guarded("gloo destroy_comm on group '" + name + "'", [&] { delete comm; });
  });
}

const char* gloo_last_error(void*) {
  try {
    return g_last_error.get();
  } catch (...) {
    return "gloo: last error unavailable";
  }
}

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
  vt.create_world = &gloo_create_world;
  vt.split = &gloo_split;
  vt.create_group = &gloo_create_group;
  vt.allreduce_sum_i64 = &gloo_allreduce_sum_i64;
  vt.barrier = &gloo_barrier;
  vt.destroy_comm = &gloo_destroy_comm;
  vt.last_error = &gloo_last_error;
  vt.finalize = &gloo_finalize;
  // Gloo has no native split: each split is a full mesh like create_group, plus the world mesh.
  // Contexts are independent (own pairs, own listening sockets; the shared device is created
  // under a lock and its event loop takes registrations from any thread), so create_group may
  // run for several groups at once: the library then connects a rank's meshes concurrently.
  vt.flags = MCORE_BACKEND_FLAG_PREFER_PER_GROUP | MCORE_BACKEND_FLAG_CONCURRENT_CREATE;
  return vt;
}

const mcore_backend_v1 g_vtable = make_vtable();

}  // namespace

extern "C" __attribute__((visibility("default"))) const mcore_backend_v1* mcore_backend_plugin_v1(void) {
  return &g_vtable;
}
