// Tests of the HCCL plugin, loaded with dlopen as the runtime will load it. One case per process
// (the plugin loads libhccl.so once): hccl_plugin_test <case> <path to libmcore_hccl.so>.
#include <dlfcn.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "mcore_hccl.h"

namespace {

int g_failures = 0;
#define CHECK(cond, ...)                                                   \
  do {                                                                     \
    if (!(cond)) {                                                         \
      std::fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                   \
      std::fprintf(stderr, "\n");                                          \
      ++g_failures;                                                        \
    }                                                                      \
  } while (0)

struct Plugin {
  decltype(&mcore_hccl_load) load;
  decltype(&mcore_hccl_group_spec_init) spec_init;
  decltype(&mcore_hccl_create_group) create_group;
  decltype(&mcore_hccl_create_subgroup) create_subgroup;
  decltype(&mcore_hccl_destroy) destroy;
  decltype(&mcore_hccl_connect_timeout_s) connect_timeout_s;
  decltype(&mcore_hccl_allreduce_sum_i64) allreduce;
};

template <typename F>
void sym(void *h, const char *name, F *out) {
  *out = reinterpret_cast<F>(dlsym(h, name));
  if (*out == nullptr) {
    std::fprintf(stderr, "plugin lacks %s\n", name);
    std::exit(2);
  }
}

Plugin open_plugin(const char *path) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    std::fprintf(stderr, "cannot load plugin %s: %s\n", path, dlerror());
    std::exit(2);
  }
  Plugin p;
  sym(h, "mcore_hccl_load", &p.load);
  sym(h, "mcore_hccl_group_spec_init", &p.spec_init);
  sym(h, "mcore_hccl_create_group", &p.create_group);
  sym(h, "mcore_hccl_create_subgroup", &p.create_subgroup);
  sym(h, "mcore_hccl_destroy", &p.destroy);
  sym(h, "mcore_hccl_connect_timeout_s", &p.connect_timeout_s);
  sym(h, "mcore_hccl_allreduce_sum_i64", &p.allreduce);
  return p;
}

// An in-process store: set/get with a wait.
struct MemStore {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, std::vector<uint8_t>> kv;

  static int32_t set(void *ud, const char *key, const uint8_t *v, size_t n) {
    auto *s = static_cast<MemStore *>(ud);
    {
      std::lock_guard<std::mutex> l(s->mu);
      s->kv[key] = std::vector<uint8_t>(v, v + n);
    }
    s->cv.notify_all();
    return MCORE_HCCL_OK;
  }
  static int32_t get(void *ud, const char *key, uint8_t *buf, size_t cap, size_t *out_len, uint64_t timeout_ms) {
    auto *s = static_cast<MemStore *>(ud);
    std::unique_lock<std::mutex> l(s->mu);
    if (!s->cv.wait_for(l, std::chrono::milliseconds(timeout_ms), [&] { return s->kv.count(key) > 0; }))
      return MCORE_HCCL_TIMEOUT;
    const auto &v = s->kv[key];
    std::memcpy(buf, v.data(), std::min(cap, v.size()));
    *out_len = v.size();
    return MCORE_HCCL_OK;
  }
  mcore_hccl_store callbacks() { return mcore_hccl_store{this, &MemStore::set, &MemStore::get}; }
};

bool has(const char *text, const char *part) { return std::strstr(text, part) != nullptr; }

void case_no_library(const Plugin &p) {
  char err[1024] = "";
  int32_t rc = p.load(err, sizeof err);
  CHECK(rc == MCORE_HCCL_LIBRARY_LOAD, "status %d", rc);
  CHECK(has(err, "libhccl.so"), "message: %s", err);
  CHECK(has(err, "MCORE_HCCL_LIBRARY"), "message: %s", err);
  mcore_hccl_group_spec spec;
  p.spec_init(&spec);
  spec.name = "tensor_model_parallel/0";
  spec.size = 2;
  MemStore store;
  auto cb = store.callbacks();
  void *comm = reinterpret_cast<void *>(0x1);
  rc = p.create_group(&spec, &cb, &comm, err, sizeof err);
  CHECK(rc == MCORE_HCCL_LIBRARY_LOAD, "status %d", rc);
  CHECK(has(err, "tensor_model_parallel/0") && has(err, "libhccl.so"), "message: %s", err);
  CHECK(comm == reinterpret_cast<void *>(0x1), "out_comm written on failure");
  CHECK(p.destroy(nullptr, err, sizeof err) == MCORE_HCCL_OK, "destroy(NULL)");
}

void case_missing_symbols(const Plugin &p) {
  char err[1024] = "";
  int32_t rc = p.load(err, sizeof err);
  CHECK(rc == MCORE_HCCL_LIBRARY_LOAD, "status %d", rc);
  CHECK(has(err, "libm.so.6") && has(err, "HcclGetRootInfo"), "message: %s", err);
}

// A group of one on the calling thread (no current device: the plugin sets one), an all-reduce
// through device buffers and the stream, and HcclCommDestroy (busy twice in the double) from
// another thread, which has no current device of its own.
void case_one_rank(const Plugin &p) {
  MemStore store;
  auto cb = store.callbacks();
  mcore_hccl_group_spec spec;
  p.spec_init(&spec);
  spec.name = "tp/0";
  spec.size = 1;
  spec.timeout_ms = 10000;
  spec.buffer_size_mb = 64;
  spec.host_addr = "127.0.0.1";
  const char *ifname = std::getenv("HCCL_SOCKET_IFNAME");
  void *comm = nullptr;
  char err[1024] = "";
  int32_t rc = p.create_group(&spec, &cb, &comm, err, sizeof err);
  CHECK(rc == MCORE_HCCL_OK && comm != nullptr, "create: %d %s", rc, err);
  if (comm == nullptr) return;
  // No current device on this thread: the plugin set MCORE_HCCL_DEVICE's, else 0 (no LOCAL_RANK).
  void *acl = dlopen(std::getenv("MCORE_HCCL_ACL_LIBRARY"), RTLD_NOW | RTLD_NOLOAD);
  auto get_device = acl ? reinterpret_cast<int32_t (*)(int32_t *)>(dlsym(acl, "aclrtGetDevice")) : nullptr;
  int32_t dev = -1;
  const char *want_dev = std::getenv("MCORE_HCCL_DEVICE");
  CHECK(get_device != nullptr && get_device(&dev) == 0 && dev == (want_dev ? std::atoi(want_dev) : 0),
        "current device %d", dev);
  // The root's interface: the group's host_addr, unless HCCL_SOCKET_IFNAME chose one.
  const char *ip = std::getenv("HCCL_IF_IP");
  if (ifname == nullptr) CHECK(ip != nullptr && std::strcmp(ip, "127.0.0.1") == 0, "HCCL_IF_IP=%s", ip ? ip : "(unset)");
  else CHECK(ip == nullptr, "HCCL_IF_IP=%s set although HCCL_SOCKET_IFNAME=%s", ip, ifname);
  CHECK(store.kv.count("tp/0/hccl_root_info") == 1 && store.kv["tp/0/hccl_root_info"].size() == 4108, "root info stored");
  void *again = nullptr;
  rc = p.create_group(&spec, &cb, &again, err, sizeof err);
  void *lib = dlopen(std::getenv("MCORE_HCCL_LIBRARY"), RTLD_NOW | RTLD_NOLOAD);
  if (lib != nullptr && dlsym(lib, "HcclGetCommConfigCapability") != nullptr) {  // names are sent
    CHECK(rc != MCORE_HCCL_OK && has(err, "tp/0"), "a second live communicator named tp/0 was accepted: %d %s", rc, err);
  } else {  // the oldest config has no name: a second communicator is fine
    CHECK(rc == MCORE_HCCL_OK, "second communicator: %d %s", rc, err);
    CHECK(p.destroy(again, err, sizeof err) == MCORE_HCCL_OK, "destroy: %s", err);
  }
  int64_t v[3] = {5, -7, 1LL << 40};
  rc = p.allreduce(comm, v, 3, err, sizeof err);
  const char *no64 = std::getenv("MCORE_HCCL_DOUBLE_NO_INT64");
  if (no64 != nullptr && std::strcmp(no64, "1") == 0) {
    CHECK(rc == MCORE_HCCL_UNSUPPORTED && has(err, "int32"), "2^40 summed as int32: %d %s", rc, err);
    v[2] = 9;
    rc = p.allreduce(comm, v, 3, err, sizeof err);
    CHECK(rc == MCORE_HCCL_OK && v[0] == 5 && v[1] == -7 && v[2] == 9, "int32 sum: %d %s", rc, err);
  } else {
    CHECK(rc == MCORE_HCCL_OK && v[0] == 5 && v[1] == -7 && v[2] == (1LL << 40), "sum: %d %s", rc, err);
  }
  std::thread t([&] { rc = p.destroy(comm, err, sizeof err); });
  t.join();
  CHECK(rc == MCORE_HCCL_OK, "destroy from another thread: %s", err);
}

// Deterministic 2 on a library that does not understand it: refused naming the capability;
// deterministic 1 works there.
void case_strict_refused(const Plugin &p) {
  MemStore store;
  auto cb = store.callbacks();
  mcore_hccl_group_spec spec;
  p.spec_init(&spec);
  spec.name = "dp/0";
  spec.size = 1;
  spec.timeout_ms = 10000;
  spec.deterministic = 2;
  void *comm = nullptr;
  char err[1024] = "";
  int32_t rc = p.create_group(&spec, &cb, &comm, err, sizeof err);
  CHECK(rc == MCORE_HCCL_UNSUPPORTED && has(err, "HCCL_COMM_CONFIG_EXEC_TIMEOUT") && has(err, "dp/0"), "%d %s", rc, err);
  spec.deterministic = 1;
  rc = p.create_group(&spec, &cb, &comm, err, sizeof err);
  CHECK(rc == MCORE_HCCL_OK, "deterministic 1: %d %s", rc, err);
  CHECK(p.destroy(comm, err, sizeof err) == MCORE_HCCL_OK, "destroy: %s", err);
}

// Rank 0 of 2 whose peer never comes: ends at the group's bound naming the missing rank.
void case_peer_missing(const Plugin &p) {
  MemStore store;
  auto cb = store.callbacks();
  mcore_hccl_group_spec spec;
  p.spec_init(&spec);
  spec.name = "pp/1";
  spec.size = 2;
  spec.timeout_ms = 300;
  void *comm = nullptr;
  char err[1024] = "";
  auto t0 = std::chrono::steady_clock::now();
  int32_t rc = p.create_group(&spec, &cb, &comm, err, sizeof err);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(rc == MCORE_HCCL_TIMEOUT, "status %d: %s", rc, err);
  CHECK(has(err, "pp/1") && has(err, "rank(s) 1 of 2 did not arrive"), "message: %s", err);
  CHECK(s < 0.3 + 5.0, "ended %.1f s after a 0.3 s bound", s);
  CHECK(comm == nullptr, "out_comm written on failure");
}

void case_store_timeout(const Plugin &p) {
  MemStore store;
  auto cb = store.callbacks();
  mcore_hccl_group_spec spec;
  p.spec_init(&spec);
  spec.name = "dp/3";
  spec.size = 2;
  spec.rank = 1;
  spec.timeout_ms = 100;
  void *comm = nullptr;
  char err[1024] = "";
  int32_t rc = p.create_group(&spec, &cb, &comm, err, sizeof err);
  CHECK(rc == MCORE_HCCL_TIMEOUT, "status %d", rc);
  CHECK(has(err, "dp/3") && has(err, "100 ms") && has(err, "dp/3/hccl_root_info"), "message: %s", err);
  CHECK(comm == nullptr, "out_comm written on failure");
}

void case_connect_timeout(const Plugin &p) {
  char err[1024] = "";
  CHECK(p.connect_timeout_s(err, sizeof err) == 300, "HCCL_CONNECT_TIMEOUT=300 read as %lld", (long long)p.connect_timeout_s(err, sizeof err));
}

void case_bad_connect_timeout(const Plugin &p) {
  char err[1024] = "";
  CHECK(p.connect_timeout_s(err, sizeof err) == -1, "accepted HCCL_CONNECT_TIMEOUT=60");
  CHECK(has(err, "HCCL_CONNECT_TIMEOUT=60") && has(err, "120..7200"), "message: %s", err);
  MemStore store;
  auto cb = store.callbacks();
  mcore_hccl_group_spec spec;
  p.spec_init(&spec);
  spec.name = "ep/0";
  spec.size = 1;
  void *comm = nullptr;
  CHECK(p.create_group(&spec, &cb, &comm, err, sizeof err) == MCORE_HCCL_INVALID_ARGUMENT, "status");
}

void case_no_subcomm(const Plugin &p) {
  MemStore store;
  auto cb = store.callbacks();
  mcore_hccl_group_spec spec;
  p.spec_init(&spec);
  spec.name = "world";
  spec.size = 1;
  void *world = nullptr;
  char err[1024] = "";
  CHECK(p.create_group(&spec, &cb, &world, err, sizeof err) == MCORE_HCCL_OK, "world: %s", err);
  uint32_t ranks[1] = {0};
  void *sub = nullptr;
  int32_t rc = p.create_subgroup(world, "tp/0", ranks, 1, 0, 42, &sub, err, sizeof err);
  CHECK(rc == MCORE_HCCL_UNSUPPORTED, "status %d", rc);
  CHECK(has(err, "HcclCreateSubCommConfig") && has(err, "tp/0"), "message: %s", err);
  CHECK(p.destroy(world, err, sizeof err) == MCORE_HCCL_OK, "destroy: %s", err);
}

void case_bad_spec(const Plugin &p) {
  MemStore store;
  auto cb = store.callbacks();
  mcore_hccl_group_spec spec;
  p.spec_init(&spec);
  CHECK(spec.struct_size == sizeof spec && spec.device == -1 && spec.timeout_ms == 300000, "defaults");
  spec.name = "cp/2";
  spec.size = 2;
  spec.rank = 2;
  void *comm = nullptr;
  char err[1024] = "";
  CHECK(p.create_group(&spec, &cb, &comm, err, sizeof err) == MCORE_HCCL_INVALID_ARGUMENT, "rank 2 of 2 accepted");
  CHECK(has(err, "cp/2: rank 2 is outside 0..2"), "message: %s", err);
  spec.struct_size = 8;
  spec.rank = 0;
  CHECK(p.create_group(&spec, &cb, &comm, err, sizeof err) == MCORE_HCCL_INVALID_ARGUMENT, "small struct_size accepted");
  CHECK(has(err, "struct_size 8"), "message: %s", err);
  CHECK(p.create_group(nullptr, &cb, &comm, err, sizeof err) == MCORE_HCCL_INVALID_ARGUMENT, "NULL spec accepted");
}

}  // namespace

int main(int argc, char **argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s <case> <libmcore_hccl.so>\n", argv[0]);
    return 2;
  }
  Plugin p = open_plugin(argv[2]);
  std::string c = argv[1];
  if (c == "no_library") case_no_library(p);
  else if (c == "missing_symbols") case_missing_symbols(p);
  else if (c == "one_rank") case_one_rank(p);
  else if (c == "strict_refused") case_strict_refused(p);
  else if (c == "peer_missing") case_peer_missing(p);
  else if (c == "store_timeout") case_store_timeout(p);
  else if (c == "connect_timeout") case_connect_timeout(p);
  else if (c == "bad_connect_timeout") case_bad_connect_timeout(p);
  else if (c == "no_subcomm") case_no_subcomm(p);
  else if (c == "bad_spec") case_bad_spec(p);
  else {
    std::fprintf(stderr, "unknown case %s\n", c.c_str());
    return 2;
  }
  std::printf("%s: %s\n", c.c_str(), g_failures == 0 ? "ok" : "FAILED");
  return g_failures == 0 ? 0 : 1;
}
