// A TEST DOUBLE of libascendcl.so for the HCCL plugin's logic only: not AscendCL, no device.
// Modelled on AscendCL's documented behaviour (acl_rt.h): the current device is per thread
// (aclrtSetDevice / aclrtGetDevice, which fails while none is set); memory from aclrtMalloc is
// "device" memory that only aclrtMemcpy with the right direction reads or writes; work on a stream
// runs when the stream is synchronized, bounded by aclrtSynchronizeStreamWithTimeout's timeout
// (ACL_ERROR_RT_STREAM_SYNC_TIMEOUT on expiry); aclrtDeviceTaskAbort ends a device's pending work.
// libhccl's double (hccl_double.cpp) queues its collectives through acl_double_enqueue.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "acl_double.h"

namespace {

constexpr int32_t kDevices = 16;
constexpr int32_t ACL_ERROR_INVALID_PARAM = 100000;
constexpr int32_t ACL_ERROR_RT_CONTEXT_NULL = 107002;  // no current device/context on this thread
constexpr int32_t ACL_ERROR_RT_STREAM_SYNC_TIMEOUT = 507046;
constexpr int32_t ACL_ERROR_RT_INTERNAL = 507899;

thread_local int32_t t_device = -1;

std::mutex g_mu;
std::map<const char *, std::pair<size_t, int32_t>> g_device_mem;  // start -> (bytes, device)
std::atomic<uint32_t> g_abort_gen[kDevices];

struct Task {
  acl_double_task_fn run;
  void (*drop)(void *);
  void *ctx;
};
struct Stream {
  int32_t device;
  std::vector<Task> tasks;
};

bool in_device_mem(const void *p, size_t n) {
  std::lock_guard<std::mutex> l(g_mu);
  auto *c = static_cast<const char *>(p);
  auto it = g_device_mem.upper_bound(c);
  if (it == g_device_mem.begin()) return false;
  --it;
  return c >= it->first && c + n <= it->first + it->second.first;
}

}  // namespace

extern "C" {

int32_t aclrtSetDevice(int32_t device) {
  if (device < 0 || device >= kDevices) return ACL_ERROR_INVALID_PARAM;
  t_device = device;
  return 0;
}

int32_t aclrtGetDevice(int32_t *device) {
  if (device == nullptr) return ACL_ERROR_INVALID_PARAM;
  if (t_device < 0) return ACL_ERROR_RT_CONTEXT_NULL;
  *device = t_device;
  return 0;
}

int32_t aclrtMalloc(void **p, size_t size, int32_t) {
  if (p == nullptr || size == 0) return ACL_ERROR_INVALID_PARAM;
  if (t_device < 0) return ACL_ERROR_RT_CONTEXT_NULL;
  char *m = static_cast<char *>(std::calloc(1, size));
  if (m == nullptr) return ACL_ERROR_RT_INTERNAL;
  std::lock_guard<std::mutex> l(g_mu);
  g_device_mem[m] = {size, t_device};
  *p = m;
  return 0;
}

int32_t aclrtFree(void *p) {
  std::lock_guard<std::mutex> l(g_mu);
  auto it = g_device_mem.find(static_cast<const char *>(p));
  if (it == g_device_mem.end()) return ACL_ERROR_INVALID_PARAM;
  g_device_mem.erase(it);
  std::free(p);
  return 0;
}

int32_t aclrtMemcpy(void *dst, size_t dest_max, const void *src, size_t count, int32_t kind) {
  if (dst == nullptr || src == nullptr || count > dest_max) return ACL_ERROR_INVALID_PARAM;
  if (t_device < 0) return ACL_ERROR_RT_CONTEXT_NULL;
  bool ok = false;
  if (kind == 1) ok = in_device_mem(dst, count) && !in_device_mem(src, count);       // host to device
  else if (kind == 2) ok = in_device_mem(src, count) && !in_device_mem(dst, count);  // device to host
  else if (kind == 3) ok = in_device_mem(src, count) && in_device_mem(dst, count);
  if (!ok) return ACL_ERROR_INVALID_PARAM;
  std::memmove(dst, src, count);
  return 0;
}

int32_t aclrtCreateStream(void **stream) {
  if (stream == nullptr) return ACL_ERROR_INVALID_PARAM;
  if (t_device < 0) return ACL_ERROR_RT_CONTEXT_NULL;
  *stream = new Stream{t_device, {}};
  return 0;
}

int32_t aclrtDestroyStream(void *stream) {
  if (stream == nullptr) return ACL_ERROR_INVALID_PARAM;
  auto *s = static_cast<Stream *>(stream);
  for (auto &t : s->tasks) t.drop(t.ctx);
  delete s;
  return 0;
}

int32_t aclrtSynchronizeStreamWithTimeout(void *stream, int32_t timeout_ms) {
  if (stream == nullptr) return ACL_ERROR_INVALID_PARAM;
  auto *s = static_cast<Stream *>(stream);
  if (t_device != s->device) return ACL_ERROR_RT_CONTEXT_NULL;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(timeout_ms < 0 ? 24LL * 3600 * 1000 : timeout_ms);
  const uint32_t gen = g_abort_gen[s->device].load();
  int32_t rc = 0;
  size_t i = 0;
  for (; i < s->tasks.size(); ++i) {
    Task &t = s->tasks[i];
    int r = t.run(t.ctx, deadline, &g_abort_gen[s->device], gen);
    t.drop(t.ctx);
    if (r != 0) {
      rc = r == 1 ? ACL_ERROR_RT_STREAM_SYNC_TIMEOUT : ACL_ERROR_RT_INTERNAL;
      ++i;
      break;
    }
  }
  for (; i < s->tasks.size(); ++i) s->tasks[i].drop(s->tasks[i].ctx);
  s->tasks.clear();
  return rc;
}

int32_t aclrtDeviceTaskAbort(int32_t device, uint32_t) {
  if (device < 0 || device >= kDevices) return ACL_ERROR_INVALID_PARAM;
  g_abort_gen[device].fetch_add(1);
  return 0;
}

// Double-only entry points for libhccl's double.
int32_t acl_double_enqueue(void *stream, acl_double_task_fn run, void (*drop)(void *), void *ctx) {
  if (stream == nullptr) return ACL_ERROR_INVALID_PARAM;
  static_cast<Stream *>(stream)->tasks.push_back(Task{run, drop, ctx});
  return 0;
}
int32_t acl_double_stream_device(void *stream) { return stream ? static_cast<Stream *>(stream)->device : -1; }
int acl_double_is_device_mem(const void *p, size_t n) { return in_device_mem(p, n) ? 1 : 0; }

}  // extern "C"
