// A TEST DOUBLE of libhccl.so for the HCCL plugin's logic only: not HCCL, no device, no network.
// Modelled on HCCL's documented behaviour (hccl.h / hccl_types.h of CANN, the CANN API reference),
// not on the plugin's assumptions:
// - Config generations, chosen at build time (DOUBLE_GEN): 2 = the oldest (no
//   HcclGetCommConfigCapability, no HcclGetErrorString, config version 1: a struct larger than its
//   32 bytes fails with HCCL_E_MEMORY); 4 = capability 4 (buffer size, deterministic, comm name, op
//   expansion), larger structs accepted with only the known fields read; 12 = capability 12, the
//   "not set" value 0xffffffff understood. Before 12, 0xffffffff is not understood (HCCL_E_PARA)
//   and deterministic must be 0 or 1; from 12 it may be 2. HcclCreateSubCommConfig exists only in
//   generation 12 and not when built with DOUBLE_NO_SUBCOMM.
// - Every call needs the calling thread's current device (aclrtSetDevice, from the libascendcl
//   double); calls on a communicator need its device.
// - HcclCommDestroy answers HCCL_E_AGAIN while the communicator is busy: here the first
//   MCORE_HCCL_DOUBLE_DESTROY_AGAIN (default 2) calls on each communicator.
// - A communicator name already in use in the process is refused (HCCL_E_PARA).
// - The config each communicator got (HcclCommInitRootInfoConfig, HcclCreateSubCommConfig) is
//   written to <MCORE_HCCL_DOUBLE_DIR>/config.<comm name>, the fields this generation reads.
// - HcclCommInitClusterInfoMemConfig (with HcclCreateSubCommConfig): a rank table as a JSON
//   string; its "rank_id"s must be 0..n-1 in order (what a real table's are is not modelled).
// - HcclCommInitRootInfoConfig waits for all ranks up to HCCL_CONNECT_TIMEOUT + 20 s.
// - HcclAllReduce really sums across processes: its members meet in a directory named by the root
//   info under MCORE_HCCL_DOUBLE_DIR (default /tmp) and exchange files; the work runs when the
//   stream is synchronized. MCORE_HCCL_DOUBLE_NO_INT64=1: int64 is HCCL_E_NOT_SUPPORT (as on
//   products without int64 reduction).
// - HcclCommSuspend / HcclCommResume (generation 12 only): exported as newer CANN does, as the
//   reserved recovery calls Huawei documents (they release no memory). The plugin must never call
//   them for a memory suspend: each call here appends a line to <MCORE_HCCL_DOUBLE_DIR>/suspend_calls,
//   which the tests check stays absent.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../../src/hccl_api.hpp"
#include "acl_double.h"

#ifndef DOUBLE_GEN
#define DOUBLE_GEN 12
#endif

using namespace mcore_hccl;

namespace {

constexpr char kMagic[] = "MCORE-HCCL-DOUBLE";
constexpr HcclResult HCCL_E_PTR = 2;
constexpr HcclResult HCCL_E_INTERNAL = 4;
using Clock = std::chrono::steady_clock;

struct DComm {
  std::string dir;
  uint32_t rank, n;
  int32_t device;
  std::string name;
  uint64_t seq = 0;
  int again_left;
};

std::mutex g_mu;
std::set<std::string> g_names;

int current_device() {
  int32_t d = -1;
  return aclrtGetDevice(&d) == 0 ? d : -1;
}

std::string base_dir() {
  const char *d = std::getenv("MCORE_HCCL_DOUBLE_DIR");
  return (d != nullptr && *d != '\0') ? d : "/tmp";
}

bool write_file(const std::string &path, const void *data, size_t n) {
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return false;
  bool ok = ::write(fd, data, n) == static_cast<ssize_t>(n);
  ::close(fd);
  return ok && ::rename(tmp.c_str(), path.c_str()) == 0;
}

bool read_file(const std::string &path, std::vector<char> *out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  out->assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  return true;
}

bool exists(const std::string &p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

// Wait until every member's file exists: 0 yes, 1 deadline, 2 aborted.
int wait_files(const std::string &prefix, uint32_t n, Clock::time_point deadline, const std::atomic<uint32_t> *abort_gen,
               uint32_t gen) {
  auto pause = std::chrono::microseconds(200);
  for (;;) {
    uint32_t have = 0;
    for (uint32_t r = 0; r < n; ++r) have += exists(prefix + std::to_string(r)) ? 1 : 0;
    if (have == n) return 0;
    if (abort_gen != nullptr && abort_gen->load() != gen) return 2;
    if (Clock::now() >= deadline) return 1;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(20000));
  }
}

int connect_timeout_s() {
  const char *v = std::getenv("HCCL_CONNECT_TIMEOUT");
  int s = v ? std::atoi(v) : 0;
  return s > 0 ? s : 120;
}

// The config as this generation reads it.
HcclResult check_config(const HcclCommConfig *cfg, std::string *name) {
  if (cfg == nullptr) return HCCL_E_PTR;
  ConfigInfo info;
  std::memcpy(&info, cfg->reserved, sizeof info);
  if (info.magic != kConfigMagic) return HCCL_E_PARA;
  if (info.size < 32) return HCCL_E_PARA;
#if DOUBLE_GEN <= 2
  if (info.size > 32) return HCCL_E_MEMORY;  // copied into its own 32-byte struct
#endif
  const bool not_set_known = DOUBLE_GEN >= 12;
  if (cfg->hcclBufferSize == kNotSet ? !not_set_known : cfg->hcclBufferSize < 1) return HCCL_E_PARA;
  if (cfg->hcclDeterministic == kNotSet ? !not_set_known : cfg->hcclDeterministic > (DOUBLE_GEN >= 12 ? 2u : 1u))
    return HCCL_E_PARA;
  name->clear();
#if DOUBLE_GEN > 2
  if (info.size >= 24 + 8 + kCommNameBytes) name->assign(cfg->hcclCommName, strnlen(cfg->hcclCommName, kCommNameBytes));
#endif
  return HCCL_SUCCESS;
}

// What the communicator got, as this generation reads it, in <MCORE_HCCL_DOUBLE_DIR>/config.<name>
// ('/' in the name as '_'): "field=value" lines, so tests can check what reached HcclCommConfig.
void record_config(const HcclCommConfig *cfg, const std::string &name) {
  if (name.empty()) return;
  std::string file = name;
  for (char &ch : file)
    if (ch == '/') ch = '_';
  std::ofstream f(base_dir() + "/config." + file, std::ios::trunc);
  f << "hcclBufferSize=" << cfg->hcclBufferSize << "\n"
    << "hcclDeterministic=" << cfg->hcclDeterministic << "\n"
    << "hcclUdi=" << std::string(cfg->hcclUdi, strnlen(cfg->hcclUdi, sizeof cfg->hcclUdi)) << "\n"
    << "hcclOpExpansionMode=" << cfg->hcclOpExpansionMode << "\n";
#if DOUBLE_GEN >= 12
  f << "hcclRdmaTrafficClass=" << cfg->hcclRdmaTrafficClass << "\n"
    << "hcclRdmaServiceLevel=" << cfg->hcclRdmaServiceLevel << "\n"
    << "hcclExecTimeOut=" << cfg->hcclExecTimeOut << "\n"
    << "hcclAlgo=" << std::string(cfg->hcclAlgo, strnlen(cfg->hcclAlgo, sizeof cfg->hcclAlgo)) << "\n"
    << "hcclQos=" << cfg->hcclQos << "\n";
#endif
}

HcclResult join(const std::string &dir, uint32_t n, uint32_t rank, const std::string &name, HcclComm *out) {
  int dev = current_device();
  if (dev < 0) return HCCL_E_RUNTIME;
  {
    std::lock_guard<std::mutex> l(g_mu);
    if (!name.empty() && g_names.count(name) != 0) return HCCL_E_PARA;  // name in use
    if (!name.empty()) g_names.insert(name);
  }
  ::mkdir(dir.c_str(), 0700);
  std::string pid = std::to_string(::getpid());
  HcclResult rc = HCCL_SUCCESS;
  if (!write_file(dir + "/member." + std::to_string(rank), pid.data(), pid.size())) rc = HCCL_E_INTERNAL;
  else if (wait_files(dir + "/member.", n, Clock::now() + std::chrono::seconds(connect_timeout_s() + 20), nullptr, 0) != 0)
    rc = HCCL_E_TIMEOUT;
  if (rc != HCCL_SUCCESS) {
    std::lock_guard<std::mutex> l(g_mu);
    g_names.erase(name);
    return rc;
  }
  const char *again = std::getenv("MCORE_HCCL_DOUBLE_DESTROY_AGAIN");
  *out = new DComm{dir, rank, n, dev, name, 0, again ? std::atoi(again) : 2};
  return HCCL_SUCCESS;
}

struct Op {
  DComm *c;
  uint64_t seq;
  const void *send;
  void *recv;
  uint64_t count;
  bool i64;
};

int run_op(void *ctx, Clock::time_point deadline, const std::atomic<uint32_t> *abort_gen, uint32_t gen) {
  auto *op = static_cast<Op *>(ctx);
  const size_t width = op->i64 ? 8 : 4;
  const std::string prefix = op->c->dir + "/op." + std::to_string(op->seq) + ".";
  const size_t bytes = op->count * width;
  std::vector<char> mine(bytes);
  if (bytes > 0) std::memcpy(mine.data(), op->send, bytes);
  if (!write_file(prefix + std::to_string(op->c->rank), mine.data(), bytes)) return 2;
  int w = wait_files(prefix, op->c->n, deadline, abort_gen, gen);
  if (w != 0) return w;
  std::vector<int64_t> sum(op->count, 0);
  for (uint32_t r = 0; r < op->c->n; ++r) {
    std::vector<char> data;
    if (!read_file(prefix + std::to_string(r), &data) || data.size() != bytes) return 2;
    for (uint64_t i = 0; i < op->count; ++i) {
      if (op->i64) {
        int64_t v;
        std::memcpy(&v, data.data() + i * 8, 8);
        sum[i] += v;
      } else {
        int32_t v;
        std::memcpy(&v, data.data() + i * 4, 4);
        sum[i] += v;
      }
    }
  }
  for (uint64_t i = 0; i < op->count; ++i) {
    if (op->i64) {
      std::memcpy(static_cast<char *>(op->recv) + i * 8, &sum[i], 8);
    } else {
      int32_t v = static_cast<int32_t>(sum[i]);
      std::memcpy(static_cast<char *>(op->recv) + i * 4, &v, 4);
    }
  }
  // Every member posted this op, so all have read the previous one: remove ours.
  if (op->seq > 0) ::unlink((op->c->dir + "/op." + std::to_string(op->seq - 1) + "." + std::to_string(op->c->rank)).c_str());
  return 0;
}

void drop_op(void *ctx) { delete static_cast<Op *>(ctx); }

HcclResult comm_call_ok(DComm *c, void *stream) {
  if (c == nullptr) return HCCL_E_PTR;
  if (current_device() != c->device) return HCCL_E_RUNTIME;
  if (stream != nullptr && acl_double_stream_device(stream) != c->device) return HCCL_E_PARA;
  return HCCL_SUCCESS;
}

}  // namespace

extern "C" {

HcclResult HcclGetRootInfo(HcclRootInfo *info) {
  if (info == nullptr) return HCCL_E_PTR;
  if (current_device() < 0) return HCCL_E_RUNTIME;
  std::memset(info->internal, 0, kRootInfoBytes);
  std::random_device rd;
  char id[64];
  std::snprintf(id, sizeof id, "%s-%08x%08x%08x", kMagic, rd(), rd(), static_cast<unsigned>(::getpid()));
  std::string dir = base_dir() + "/" + id;
  if (dir.size() >= kRootInfoBytes) return HCCL_E_PARA;
  std::memcpy(info->internal, dir.data(), dir.size());
  return HCCL_SUCCESS;
}

HcclResult HcclCommInitRootInfoConfig(uint32_t n, const HcclRootInfo *root, uint32_t rank, const HcclCommConfig *cfg,
                                      HcclComm *comm) {
  if (root == nullptr || comm == nullptr) return HCCL_E_PTR;
  if (n == 0 || rank >= n) return HCCL_E_PARA;
  std::string name;
  HcclResult rc = check_config(cfg, &name);
  if (rc != HCCL_SUCCESS) return rc;
  std::string dir(root->internal, strnlen(root->internal, kRootInfoBytes));
  if (dir.find(kMagic) == std::string::npos) return HCCL_E_PARA;
  record_config(cfg, name);
  return join(dir, n, rank, name, comm);
}

#if DOUBLE_GEN >= 12 && !defined(DOUBLE_NO_SUBCOMM)
// The rank table as a JSON string (version 1.0): the ranks are its "rank_id" entries, which must
// number 0..n-1 and include `rank`; members meet in a directory named by a hash of the text (all
// members pass the same table).
HcclResult HcclCommInitClusterInfoMemConfig(const char *table, uint32_t rank, HcclCommConfig *cfg, HcclComm *comm) {
  if (table == nullptr || comm == nullptr) return HCCL_E_PTR;
  const std::string t(table);
  if (t.find("\"version\":\"1.0\"") == std::string::npos || t.find("\"server_list\"") == std::string::npos)
    return HCCL_E_PARA;
  uint32_t n = 0;
  for (size_t at = t.find("\"rank_id\":\""); at != std::string::npos; at = t.find("\"rank_id\":\"", at + 1)) {
    if (std::strtoul(t.c_str() + at + 11, nullptr, 10) != n) return HCCL_E_PARA;  // ranks 0..n-1 in order
    ++n;
  }
  if (n == 0 || rank >= n) return HCCL_E_PARA;
  std::string name;
  HcclResult rc = check_config(cfg, &name);
  if (rc != HCCL_SUCCESS) return rc;
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : t) h = (h ^ ch) * 1099511628211ull;
  char dir[64];
  std::snprintf(dir, sizeof dir, "/%s-cluster-%016llx", kMagic, static_cast<unsigned long long>(h));
  record_config(cfg, name);
  return join(base_dir() + dir, n, rank, name, comm);
}

HcclResult HcclCreateSubCommConfig(HcclComm *parent, uint32_t n, uint32_t *ranks, uint64_t id, uint32_t sub_rank,
                                   HcclCommConfig *cfg, HcclComm *out) {
  if (parent == nullptr || ranks == nullptr || out == nullptr) return HCCL_E_PTR;
  auto *p = static_cast<DComm *>(*parent);
  HcclResult rc = comm_call_ok(p, nullptr);
  if (rc != HCCL_SUCCESS) return rc;
  if (n == 0 || sub_rank >= n || ranks[sub_rank] != p->rank) return HCCL_E_PARA;
  std::string name;
  rc = check_config(cfg, &name);
  if (rc != HCCL_SUCCESS) return rc;
  record_config(cfg, name);
  char sub[40];
  std::snprintf(sub, sizeof sub, "/sub-%016llx", static_cast<unsigned long long>(id));
  return join(p->dir + sub, n, sub_rank, name, out);
}
#endif

HcclResult HcclAllReduce(void *send, void *recv, uint64_t count, int32_t dtype, int32_t op, HcclComm comm, void *stream) {
  auto *c = static_cast<DComm *>(comm);
  HcclResult rc = comm_call_ok(c, stream);
  if (rc != HCCL_SUCCESS) return rc;
  if (stream == nullptr || op != HCCL_REDUCE_SUM) return HCCL_E_PARA;
  if (dtype == HCCL_DATA_TYPE_INT64) {
    const char *no64 = std::getenv("MCORE_HCCL_DOUBLE_NO_INT64");
    if (no64 != nullptr && std::strcmp(no64, "1") == 0) return HCCL_E_NOT_SUPPORT;
  } else if (dtype != HCCL_DATA_TYPE_INT32) {
    return HCCL_E_NOT_SUPPORT;
  }
  const size_t bytes = count * (dtype == HCCL_DATA_TYPE_INT64 ? 8 : 4);
  if (count == 0 || !acl_double_is_device_mem(send, bytes) || !acl_double_is_device_mem(recv, bytes)) return HCCL_E_PARA;
  auto *o = new Op{c, c->seq++, send, recv, count, dtype == HCCL_DATA_TYPE_INT64};
  acl_double_enqueue(stream, &run_op, &drop_op, o);
  return HCCL_SUCCESS;
}

HcclResult HcclBarrier(HcclComm comm, void *stream) {
  auto *c = static_cast<DComm *>(comm);
  HcclResult rc = comm_call_ok(c, stream);
  if (rc != HCCL_SUCCESS) return rc;
  if (stream == nullptr) return HCCL_E_PARA;
  auto *o = new Op{c, c->seq++, nullptr, nullptr, 0, true};
  acl_double_enqueue(stream, &run_op, &drop_op, o);
  return HCCL_SUCCESS;
}

HcclResult HcclCommDestroy(HcclComm comm) {
  auto *c = static_cast<DComm *>(comm);
  HcclResult rc = comm_call_ok(c, nullptr);
  if (rc != HCCL_SUCCESS) return rc;
  if (c->again_left > 0) {
    --c->again_left;
    return HCCL_E_AGAIN;
  }
  {
    std::lock_guard<std::mutex> l(g_mu);
    g_names.erase(c->name);
  }
  delete c;
  return HCCL_SUCCESS;
}

#if DOUBLE_GEN >= 12
namespace {
HcclResult note_reserved_call(HcclComm comm, const char *call) {
  auto *c = static_cast<DComm *>(comm);
  HcclResult rc = comm_call_ok(c, nullptr);
  if (rc != HCCL_SUCCESS) return rc;
  std::ofstream(base_dir() + "/suspend_calls", std::ios::app) << call << " " << c->name << "\n";
  return HCCL_SUCCESS;  // releases nothing
}
}  // namespace
HcclResult HcclCommSuspend(HcclComm comm) { return note_reserved_call(comm, "HcclCommSuspend"); }
HcclResult HcclCommResume(HcclComm comm) { return note_reserved_call(comm, "HcclCommResume"); }
#endif

HcclResult HcclGetCommAsyncError(HcclComm comm, HcclResult *err) {
  if (comm == nullptr || err == nullptr) return HCCL_E_PTR;
  *err = HCCL_SUCCESS;
  return HCCL_SUCCESS;
}

#if DOUBLE_GEN > 2
uint32_t HcclGetCommConfigCapability() { return DOUBLE_GEN; }

const char *HcclGetErrorString(HcclResult code) {
  switch (code) {
    case HCCL_E_PARA: return "double: parameter error";
    case HCCL_E_MEMORY: return "double: memory error";
    case HCCL_E_TIMEOUT: return "double: timeout";
    case HCCL_E_AGAIN: return "double: try again";
    case HCCL_E_RUNTIME: return "double: runtime error (no current device?)";
    default: return "double: error";
  }
}
#endif

}  // extern "C"
