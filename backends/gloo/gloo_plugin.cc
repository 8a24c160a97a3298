// The Gloo backend plugin for mcore_init (CPU communicators over TCP).
//
// Strategies: both; the library's `auto` strategy splits.
//  * Split (`create_world` + `split`): the world communicator is a gloo::rendezvous::Context
//    connected as a full mesh through the world's store (one TCP pair per peer). A split derives
//    its child from that mesh instead of connecting a new one (see split_slot_id): the child
//    shares the world's context (it keeps it alive: children outlive the world communicator)
//    and runs its collectives over the world's pairs among its members only, in a slot space of
//    its own; creating it sends nothing. A non-member (color -1) gets NULL. A rank thus opens
//    world size - 1 connections in all, whatever the number of groups.
//  * Per group (`create_group`): each group gets its own gloo::rendezvous::Context, connected as
//    a full mesh through the group's store (the library hands us a key space private to the
//    group, reached through the mcore_backend_store callbacks, valid during the call). Used on
//    request (`per-group`).
// Every communicator runs the same all-reduce (derived_allreduce) over its mesh, the world's
// and its own alike, so that an interrupt can end any of its waits.
// All contexts share one TCP device, bound to the first of: MCORE_GLOO_HOSTNAME (an address or
// host name), GLOO_SOCKET_IFNAME (an interface), the address the library advertises for this
// rank (`host_addr`: the local address of its connection to the rendezvous store, which peers
// on other hosts can reach), 127.0.0.1.
//
// Interrupt (`interrupt` slot): while the library says a peer failed, every wait of a creation
// or collective in flight ends at once (a creation's pairs are closed, a collective's buffer
// waits are aborted) and every new one fails, all with MCORE_STATUS_PEER_FAILED (see Flights).
//
// Deadlines: a group's `timeout_ms` is what is left of the init deadline. Every store wait of a
// full-mesh connect runs to that deadline (whatever timeout gloo asks for), and gloo's pair
// connect, which waits up to 5x the context timeout, runs with a context timeout of a fifth of
// it, so no connect outlives the deadline. Each collective runs to its communicator's timeout
// (a child's: its group's); a child's names the members it did not hear from.
//
// No C++ exception leaves this file: every slot catches, returns an mcore_status code and keeps
// the message for `last_error` (per thread).

#include <algorithm>
#include <unordered_map>
#include <unordered_set>
#include <mcore_backend.h>

#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/tcp/device.h>

#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
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

// The waits in flight, so that the `interrupt` slot can end them from another thread. A Flight
// lives on the waiting thread's stack for as long as its wait runs and holds how to end it;
// `interrupt(true)` ends every one (under the lock, so none is destroyed meanwhile) and, until
// `interrupt(false)`, ends each new one as it starts.
class Flights {
 public:
  class Flight {
   public:
    Flight(Flights& all, std::function<void()> stop) : all_(all), stop_(std::move(stop)) {
      std::lock_guard<std::mutex> lock(all_.mu_);
      all_.flying_.insert(this);
      if (all_.on_) end();
    }
    ~Flight() {
      std::lock_guard<std::mutex> lock(all_.mu_);
      all_.flying_.erase(this);
    }
    Flight(const Flight&) = delete;
    Flight& operator=(const Flight&) = delete;

    // Whether the wait was ended by an interrupt.
    bool ended() {
      std::lock_guard<std::mutex> lock(all_.mu_);
      return ended_;
    }

   private:
    friend class Flights;
    void end() {
      if (ended_) return;
      ended_ = true;
      stop_();
    }
    Flights& all_;
    std::function<void()> stop_;
    bool ended_ = false;
  };

  void interrupt(bool on) {
    std::lock_guard<std::mutex> lock(mu_);
    on_ = on;
    if (on)
      for (Flight* f : flying_) f->end();
  }

  bool on() {
    std::lock_guard<std::mutex> lock(mu_);
    return on_;
  }

 private:
  std::mutex mu_;
  bool on_ = false;
  std::unordered_set<Flight*> flying_;
};

Flights g_flights;

// The failure of a wait that an interrupt ended (`what`: the wait).
StatusError interrupted(const std::string& what) {
  return StatusError(MCORE_STATUS_PEER_FAILED,
                     what + ": ended because a peer failed (the library interrupted this backend's waits)");
}

// The mesh rendezvous over the library's mcore_backend_store callbacks: each rank sets its key
// `"<group rank>"`, then reads every peer's (see MeshContext).
class CallbackStore {
 public:
  // `global_ranks` (group_size entries) lets messages say whose key is missing.
  CallbackStore(const mcore_backend_store* store, std::chrono::milliseconds timeout,
                std::vector<uint32_t> global_ranks, size_t self_rank)
      : s_(store),
        deadline_(std::chrono::steady_clock::now() + timeout),
        global_ranks_(std::move(global_ranks)),
        self_rank_(self_rank) {}

  void set(const std::string& key, const std::vector<char>& data) {
    check(s_->set(s_->ctx, key.c_str(), reinterpret_cast<const uint8_t*>(data.data()), data.size()), "set", key);
  }

  // Peer `key`'s value, waiting for it until the group's deadline. The first read waits for
  // every peer's key and fetches them all in one multi_get (when the library offers it), so a
  // group's rendezvous costs a fixed number of store round trips whatever its size.
  std::vector<char> get(const std::string& key) {
    if (cache_.empty() && !prefetch_peers()) {
      wait_until_deadline({key});
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
    auto it = cache_.find(key);
    if (it == cache_.end()) throw StatusError(MCORE_STATUS_BACKEND, "store get '" + key + "': not a peer's key");
    return std::move(it->second);
  }

 private:
  // Waits for `keys` until the group's deadline (1 ms when passed).
  void wait_until_deadline(const std::vector<std::string>& keys) {
    std::vector<const char*> ptrs;
    ptrs.reserve(keys.size());
    for (const auto& k : keys) ptrs.push_back(k.c_str());
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - std::chrono::steady_clock::now());
    uint64_t ms = left.count() > 1 ? static_cast<uint64_t>(left.count()) : 1;
    check(s_->wait(s_->ctx, ptrs.data(), ptrs.size(), ms), "wait", keys.empty() ? std::string() : keys.front());
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

  // Keys are group ranks in decimal (`<r>`).
  std::string whose(const std::string& key) const {
    if (key.empty() || key.size() > 9 || key.find_first_not_of("0123456789") != std::string::npos) return "";
    size_t r = std::stoul(key);
    if (r >= global_ranks_.size()) return "";
    return " (key of group rank " + key + " = global rank " + std::to_string(global_ranks_[r]) +
           ", which has not joined the group)";
  }

  // Waits for every peer's key and fetches them in one multi_get into the cache. False when the
  // library offers no multi_get.
  bool prefetch_peers() {
    const bool has_multi_get = s_->struct_size >= offsetof(mcore_backend_store, multi_get) + sizeof(s_->multi_get) &&
                               s_->multi_get != nullptr;
    if (!has_multi_get) return false;
    std::vector<std::string> keys;
    for (size_t r = 0; r < global_ranks_.size(); ++r) {
      if (r != self_rank_) keys.push_back(std::to_string(r));
    }
    if (keys.empty()) return true;
    wait_until_deadline(keys);
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
    check(rc, "multi_get", keys.front());
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
  // Every peer's value by key, once prefetched.
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
  // Its own full mesh (create_group, create_world), or the world's, shared (a split: see
  // `members`).
  std::shared_ptr<gloo::rendezvous::Context> ctx;
  std::string name;
  std::chrono::milliseconds timeout;
  uint32_t next_tag = 0;
  // Set by create_world only: the world's ranks, so it can be split.
  uint32_t global_rank = 0;
  std::vector<uint32_t> global_ranks;
  // How many times this world was split into each group name (keeps re-splits' slots apart).
  std::unordered_map<std::string, uint32_t> splits;
  // Its members' ranks in the context `ctx` (a split's child: in the world's), in group order,
  // this rank's index among them, and the slot space of its messages (see derived_slot).
  std::vector<int> members;
  uint32_t group_rank = 0;
  uint64_t slot_id = 0;
  std::vector<uint32_t> member_globals;
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

// A full mesh like gloo's connectFullMesh (each rank publishes its pairs' addresses under its
// group rank, `"<r>"`, and reads every peer's), with two changes. No host-name keys (gloo uses
// them for a local rank that its TCP transport never reads). And the pairs connect in an order
// that waits for no peer: gloo connects them in rank order, and on the side that listens a
// connect waits for the peer to get there, so ranks wait on each other in chains; here the pairs
// where this rank dials out connect first, all at once (each is independent of the peer's
// progress: the kernel completes a connection to a listening socket, and each also waits for a
// tick of the device's event loop, which they then share), then the listening ones are waited for.
class MeshContext : public gloo::rendezvous::Context {
 public:
  using gloo::rendezvous::Context::Context;

  void connect_mesh(CallbackStore& store, const std::shared_ptr<gloo::transport::Device>& dev) {
    auto tctx = dev->createContext(rank, size);
    tctx->setTimeout(getTimeout());
    std::vector<char> all;
    for (int i = 0; i < size; ++i) {
      if (i == rank) continue;
      auto bytes = published(tctx->createPair(i)->address());
      all.insert(all.end(), bytes.begin(), bytes.end());
    }
    store.set(std::to_string(rank), all);
    std::vector<int> dial, listen;
    std::vector<std::vector<char>> peer(size);
    for (int i = 0; i < size; ++i) {
      if (i == rank) continue;
      auto theirs = store.get(std::to_string(i));
      if (theirs.size() % (size - 1) != 0)
        throw StatusError(MCORE_STATUS_PROTOCOL, "group rank " + std::to_string(i) + " published " +
                                                     std::to_string(theirs.size()) + " bytes of addresses for " +
                                                     std::to_string(size - 1) + " peers");
      const size_t len = theirs.size() / (size - 1);
      const size_t at = (rank > i ? rank - 1 : rank) * len;
      peer[i].assign(theirs.begin() + at, theirs.begin() + at + len);
      (dials(tctx->getPair(i)->address(), peer[i]) ? dial : listen).push_back(i);
    }
    // Only a listening pair waits on its peer (a dialling one ends as fast as the peer's kernel
    // answers): an interrupt closes the listening ones, which wakes their connects, and the mesh
    // fails. (Closing the dialling ones too would reset connections that a peer's gloo may be
    // taking at that moment, which it does not survive.)
    Flights::Flight flight(g_flights, [&tctx, &listen] {
      for (int i : listen) tctx->getPair(i)->close();
    });
    if (flight.ended()) throw interrupted("connecting the full mesh");
    std::vector<std::exception_ptr> errors(size);
    auto connect_one = [&](int i) {
      try {
        tctx->getPair(i)->connect(peer[i]);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    };
    std::vector<std::thread> threads;
    for (size_t k = 1; k < dial.size(); ++k) {
      try {
        threads.emplace_back(connect_one, dial[k]);
      } catch (...) {  // no thread to be had: connect it here
        connect_one(dial[k]);
      }
    }
    if (!dial.empty()) connect_one(dial[0]);
    for (auto& t : threads) t.join();
    auto first_error = [&] { return std::find_if(errors.begin(), errors.end(), [](auto& e) { return e != nullptr; }); };
    for (size_t k = 0; k < listen.size() && first_error() == errors.end() && !flight.ended(); ++k)
      connect_one(listen[k]);
    if (flight.ended()) throw interrupted("connecting the full mesh");
    if (first_error() != errors.end()) std::rethrow_exception(*first_error());
    device_ = dev;
    transportContext_ = std::move(tctx);
  }

 private:
  // `address` as gloo serializes it (its sockaddr_storage, then a sequence number), with the
  // storage past the family's sockaddr zeroed: gloo never writes it, and it would otherwise
  // leave the process uninitialized. Left as gloo made it if the layout is not that.
  static std::vector<char> published(const gloo::transport::Address& address) {
    auto bytes = address.bytes();
    const auto& ss = static_cast<const gloo::transport::tcp::Address&>(address).getSockaddr();
    const size_t used = ss.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
    if (bytes.size() >= sizeof(sockaddr_storage) && std::memcmp(bytes.data(), &ss, used) == 0)
      std::fill(bytes.begin() + used, bytes.begin() + sizeof(sockaddr_storage), 0);
    return bytes;
  }

  // Whether this side dials: gloo's rule (pair.cc, Pair::connect): the side whose address
  // compares greater (IP bytes, then the port as stored) connects, the other listens.
  static bool dials(const gloo::transport::Address& self, const std::vector<char>& peer_bytes) {
    const auto& a = static_cast<const gloo::transport::tcp::Address&>(self).getSockaddr();
    const gloo::transport::tcp::Address peer(peer_bytes);
    const auto& b = peer.getSockaddr();
    int rv = 0;
    if (a.ss_family == AF_INET && b.ss_family == AF_INET) {
      const auto* sa = reinterpret_cast<const sockaddr_in*>(&a);
      const auto* sb = reinterpret_cast<const sockaddr_in*>(&b);
      rv = std::memcmp(&sa->sin_addr, &sb->sin_addr, sizeof(in_addr));
      if (rv == 0) rv = sa->sin_port - sb->sin_port;
    } else if (a.ss_family == AF_INET6 && b.ss_family == AF_INET6) {
      const auto* sa = reinterpret_cast<const sockaddr_in6*>(&a);
      const auto* sb = reinterpret_cast<const sockaddr_in6*>(&b);
      rv = std::memcmp(&sa->sin6_addr, &sb->sin6_addr, sizeof(in6_addr));
      if (rv == 0) rv = sa->sin6_port - sb->sin6_port;
    }
    return rv > 0;
  }
};

// A context of `group`'s members connected as a full mesh through `store` (see MeshContext).
// Throws on failure (callers run it inside `guarded`).
std::unique_ptr<GlooComm> connect(Plugin* plugin, const mcore_backend_group_info* group,
                                  const mcore_backend_store* store, std::chrono::milliseconds timeout) {
  auto comm = std::make_unique<GlooComm>();
  comm->name = group->name != nullptr ? group->name : "";
  comm->timeout = timeout;
  auto ctx = std::make_shared<MeshContext>(static_cast<int>(group->group_rank), static_cast<int>(group->group_size));
  std::vector<uint32_t> ranks(group->global_ranks, group->global_ranks + group->group_size);
  CallbackStore cb(store, timeout, std::move(ranks), group->group_rank);
  const bool has_host_addr = group->struct_size >= offsetof(mcore_backend_group_info, host_addr) + sizeof(group->host_addr);
  auto device = plugin->get_device(has_host_addr ? group->host_addr : nullptr);
  // gloo waits up to 5x the context timeout for a pair to connect (see the file's header).
  ctx->setTimeout(std::max(timeout / 5, std::chrono::milliseconds(1)));
  ctx->connect_mesh(cb, device);
  ctx->setTimeout(timeout);
  comm->ctx = std::move(ctx);
  return comm;
}

// " (rank r of n)" of `group`.
std::string rank_of(const mcore_backend_group_info* group) {
  return " (rank " + std::to_string(group->group_rank) + " of " + std::to_string(group->group_size) + ")";
}

// create_group and create_world: a full mesh of the group through `store`. A world keeps the
// store (valid until it is destroyed, by the create_world contract) to rendezvous its splits.
uint64_t split_slot_id(const std::string& name, uint32_t n);

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
    if (g_flights.on()) throw interrupted("the creation");
    auto timeout = group_timeout(group->timeout_ms, kFallbackTimeout);
    auto comm = connect(plugin, group, store, timeout);
    // Its collectives are a child's over all of its own mesh, in a slot space no split uses.
    comm->group_rank = group->group_rank;
    comm->member_globals.assign(group->global_ranks, group->global_ranks + group->group_size);
    for (uint32_t i = 0; i < group->group_size; ++i) comm->members.push_back(static_cast<int>(i));
    comm->slot_id = split_slot_id(name, UINT32_MAX);
    if (world) {
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

// Splits derive their children from the world's full mesh instead of connecting new ones: a
// child is a view of the world context (its members' ranks in it, in group order) whose
// collectives run over the world's pairs, in a slot space of its own. Creating one is local (no
// store key, no connection, no message); its members meet at its first collective, which the
// library runs to verify it. A slot is kDerivedSlotPrefix in the top byte (gloo's own
// collectives use 0x01-0x08 there), 40 bits of FNV-1a of "<group name>/<n>" (n: how many
// times this world was split into that name before; every member counts alike), 15 bits of the
// child's collective counter and 1 bit for the phase. Different groups share a pair of ranks
// only under different names, so their slots differ unless two names hash alike in 40 bits.
constexpr uint64_t kDerivedSlotPrefix = 0xC5;

uint64_t split_slot_id(const std::string& name, uint32_t n) {
  uint64_t h = 1469598103934665603ull;
  const std::string text = name + "/" + std::to_string(n);
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return (kDerivedSlotPrefix << 56) | ((h & ((uint64_t{1} << 40) - 1)) << 16);
}

uint64_t derived_slot(const GlooComm* comm, uint32_t tag, uint32_t phase) {
  return comm->slot_id | (uint64_t{tag & 0x7fff} << 1) | phase;
}

// " (group rank r = global rank g)" of member `i` of a child.
std::string member_of(const GlooComm* comm, size_t i) {
  return " (group rank " + std::to_string(i) + " = global rank " + std::to_string(comm->member_globals[i]) + ")";
}

// Waits until `buf` has completed a recv (or a send) with each member in `peers` (indices into
// the child's members) by `deadline`. A timeout or failure names the members not done:
// "<timed out|failed> <what> (group rank r = global rank g)...".
void wait_members(const GlooComm* comm, gloo::transport::UnboundBuffer& buf, bool recv, const std::vector<size_t>& peers,
                  std::chrono::steady_clock::time_point deadline, const std::string& what) {
  std::vector<bool> done(peers.size(), false);
  for (size_t k = 0; k < peers.size(); ++k) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() < 1) left = std::chrono::milliseconds(1);
    int rank = -1;
    auto who = [&] {
      std::string w;
      for (size_t j = 0; j < peers.size(); ++j)
        if (!done[j]) w += member_of(comm, peers[j]);
      return w;
    };
    // An interrupt aborts the wait (it returns false) and fails it.
    Flights::Flight flight(g_flights, [&buf] {
      buf.abortWaitRecv();
      buf.abortWaitSend();
    });
    bool completed = false;
    try {
      completed = recv ? buf.waitRecv(&rank, left) : buf.waitSend(&rank, left);
    } catch (const gloo::IoException& e) {
      const bool timed_out = std::string(e.what()).find("Timed out") != std::string::npos;
      throw StatusError(timed_out ? MCORE_STATUS_TIMEOUT : MCORE_STATUS_PEER_FAILED,
                        (timed_out ? "timed out " : "failed ") + what + who() + " (gloo: " + e.what() + ")");
    }
    if (!completed || flight.ended()) throw interrupted(what + who());
    for (size_t j = 0; j < peers.size(); ++j) {
      if (!done[j] && comm->members[peers[j]] == rank) {
        done[j] = true;
        break;
      }
    }
  }
}

// In-place sum over a child: every member sends its values to group rank 0, which adds them in
// group order (wrapping, as two's complement) and sends the sum back. Two message rounds and
// 2 (n - 1) messages, over pairs that already exist.
void derived_allreduce(GlooComm* comm, int64_t* data, size_t count) {
  const size_t n = comm->members.size();
  if (n == 1 || count == 0) return;
  if (count > SIZE_MAX / sizeof(int64_t) / n)
    throw StatusError(MCORE_STATUS_INVALID_ARGUMENT, "count " + std::to_string(count) + " too large for a group of " +
                                                         std::to_string(n));
  const size_t bytes = count * sizeof(int64_t);
  const uint32_t tag = comm->next_tag++;
  const auto deadline = std::chrono::steady_clock::now() + comm->timeout;
  const std::string of = " of '" + comm->name + "'";
  if (comm->group_rank != 0) {
    const int root = comm->members[0];
    auto buf = comm->ctx->createUnboundBuffer(data, bytes);
    // The sum can only arrive after the root has all of this rank's values, so one buffer
    // serves both directions.
    buf->recv(root, derived_slot(comm, tag, 1));
    buf->send(root, derived_slot(comm, tag, 0));
    wait_members(comm, *buf, false, {0}, deadline, "sending values" + of + " to");
    wait_members(comm, *buf, true, {0}, deadline, "waiting for the sum" + of + " from");
    return;
  }
  // Root: receive the others' values in batches of at most ~8 MiB (at least one member each).
  const size_t batch = std::max<size_t>(1, std::min(n - 1, (size_t{8} << 20) / bytes));
  std::vector<int64_t> scratch(batch * count);
  auto rbuf = comm->ctx->createUnboundBuffer(scratch.data(), scratch.size() * sizeof(int64_t));
  std::vector<uint64_t> sum(data, data + count);
  for (size_t first = 1; first < n; first += batch) {
    std::vector<size_t> peers;
    for (size_t i = first; i < std::min(n, first + batch); ++i) {
      rbuf->recv(comm->members[i], derived_slot(comm, tag, 0), (i - first) * bytes, bytes);
      peers.push_back(i);
    }
    wait_members(comm, *rbuf, true, peers, deadline, "collecting values" + of + " from");
    for (size_t k = 0; k < peers.size(); ++k)
      for (size_t j = 0; j < count; ++j) sum[j] += static_cast<uint64_t>(scratch[k * count + j]);
  }
  for (size_t j = 0; j < count; ++j) data[j] = static_cast<int64_t>(sum[j]);
  auto sbuf = comm->ctx->createUnboundBuffer(data, bytes);
  std::vector<size_t> others;
  for (size_t i = 1; i < n; ++i) {
    sbuf->send(comm->members[i], derived_slot(comm, tag, 1));
    others.push_back(i);
  }
  wait_members(comm, *sbuf, false, others, deadline, "sending the sum" + of + " to");
}

// A split of a world communicator: a member gets a child derived from the world's mesh (see
// split_slot_id); a non-member (color -1, group NULL) gets NULL. Nothing is sent.
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
    if (parent->global_ranks.empty())
      return invalid(what + ": splits need a world communicator from create_world; '" + parent->name +
                     "' was made by create_group or split");
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
    (void)user_data;
    return guarded(what + rank_of(group), [&] {
      auto comm = std::make_unique<GlooComm>();
      comm->name = name;
      comm->timeout = group_timeout(group->timeout_ms, parent->timeout);
      comm->ctx = parent->ctx;
      comm->group_rank = group->group_rank;
      comm->member_globals.assign(group->global_ranks, group->global_ranks + group->group_size);
      for (uint32_t r : comm->member_globals) {
        auto at = std::find(parent->global_ranks.begin(), parent->global_ranks.end(), r);
        comm->members.push_back(static_cast<int>(at - parent->global_ranks.begin()));
      }
      comm->slot_id = split_slot_id(name, parent->splits[name]++);
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
      if (g_flights.on()) throw interrupted("the all-reduce");
      derived_allreduce(comm, inout, count);
    });
  });
}

int32_t gloo_barrier(void*, void* comm_ptr) {
  return slot_boundary("barrier", [&]() -> int32_t {
    if (comm_ptr == nullptr) return invalid("gloo barrier: comm is NULL");
    auto* comm = static_cast<GlooComm*>(comm_ptr);
    return guarded("gloo barrier on group '" + comm->name + "'", [&] {
      if (g_flights.on()) throw interrupted("the barrier");
      int64_t token = 0;
      derived_allreduce(comm, &token, 1);
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

// Ends every wait in flight and fails new ones until turned off (see Flights). Takes only the
// flights' lock and the locks of the buffers and pairs it ends, which no waiter holds while it
// waits.
void gloo_interrupt(void*, bool on) {
  try {
    g_flights.interrupt(on);
  } catch (...) {
  }
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
  vt.interrupt = &gloo_interrupt;
  // Splits are derived from the world's mesh (no flag asks for per group). Contexts of
  // create_group are independent (own pairs, own listening sockets; the shared device is created
  // under a lock and its event loop takes registrations from any thread), so create_group may
  // run for several groups at once; collectives of different communicators, a world's children
  // included (each in its own slots), may run on several threads at once.
  vt.flags = MCORE_BACKEND_FLAG_CONCURRENT_CREATE;
  // suspend, resume and mem_stat stay NULL: a Gloo context holds no device memory to give back,
  // so the library's suspend destroys the contexts and its resume creates them again (recreate
  // mode, docs/backends.md).
  return vt;
}

const mcore_backend_v1 g_vtable = make_vtable();

}  // namespace

extern "C" __attribute__((visibility("default"))) const mcore_backend_v1* mcore_backend_plugin_v1(void) {
  return &g_vtable;
}
