#include "hccl_api.hpp"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <strings.h>

namespace mcore_hccl {

ConfigInfo config_info(const HcclCommConfig *config) {
  ConfigInfo info;
  static_assert(sizeof(ConfigInfo) == sizeof(config->reserved), "HcclCommConfig info header is 24 bytes");
  std::memcpy(&info, config->reserved, sizeof(info));
  return info;
}

void config_init(HcclCommConfig *config) {
  std::memset(config, 0, sizeof(*config));
  ConfigInfo info{sizeof(HcclCommConfig), kConfigMagic, kConfigVersion, 0};
  std::memcpy(config->reserved, &info, sizeof(info));
  config->hcclBufferSize = kNotSet;
  config->hcclDeterministic = kNotSet;
  config->hcclOpExpansionMode = 0;
  config->hcclRdmaTrafficClass = kNotSet;
  config->hcclRdmaServiceLevel = kNotSet;
  config->hcclExecTimeOut = static_cast<int32_t>(kNotSet);
  config->hcclQos = kNotSet;
  config->hcclSymWinMaxMemSizePerRank = 16;  // HCCL_DEFAULT_SYMMETRIC_MEMORY_STRIDE
}

bool debug_enabled() {
  const char *v = std::getenv("MCORE_LOG");
  return v != nullptr && strcasecmp(v, "debug") == 0;
}

void debug(const std::string &line) {
  if (debug_enabled()) std::fprintf(stderr, "mcore_init hccl: debug: %s\n", line.c_str());
}

void warn(const std::string &line) { std::fprintf(stderr, "mcore_init hccl: warning: %s\n", line.c_str()); }

namespace {

std::mutex g_mutex;
bool g_tried = false;
HcclApi g_api;
std::string g_error;

template <typename F>
bool resolve(void *handle, const char *name, F *out, const std::string &path, const char *what, std::string *err) {
  dlerror();
  void *p = dlsym(handle, name);
  if (p == nullptr) {
    if (err != nullptr) {
      const char *why = dlerror();
      *err = path + " is not a usable " + what + " library: symbol " + name + " is missing (" +
             (why ? why : "not found") + ")";
    }
    return false;
  }
  *out = reinterpret_cast<F>(p);
  return true;
}

bool load_acl(HcclApi *api, std::string *err) {
  const char *env = std::getenv("MCORE_HCCL_ACL_LIBRARY");
  std::string path = (env != nullptr && *env != '\0') ? env : "libascendcl.so";
  void *h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char *why = dlerror();
    *err = "libascendcl.so could not be loaded (tried " + path + ": " + (why ? why : "unknown error") +
           "); HCCL needs it for the device, its buffers and streams. Source the CANN toolkit's set_env.sh, or set "
           "MCORE_HCCL_ACL_LIBRARY to the file";
    return false;
  }
  api->acl_path = path;
  const char *w = "AscendCL";
  if (!resolve(h, "aclrtSetDevice", &api->SetDevice, path, w, err) ||
      !resolve(h, "aclrtGetDevice", &api->GetDevice, path, w, err) ||
      !resolve(h, "aclrtMalloc", &api->Malloc, path, w, err) || !resolve(h, "aclrtFree", &api->Free, path, w, err) ||
      !resolve(h, "aclrtMemcpy", &api->Memcpy, path, w, err) ||
      !resolve(h, "aclrtCreateStream", &api->CreateStream, path, w, err) ||
      !resolve(h, "aclrtDestroyStream", &api->DestroyStream, path, w, err) ||
      !resolve(h, "aclrtSynchronizeStreamWithTimeout", &api->SynchronizeStreamWithTimeout, path, w, err)) {
    dlclose(h);
    return false;
  }
  resolve(h, "aclrtDeviceTaskAbort", &api->DeviceTaskAbort, path, w, nullptr);
  return true;
}

bool load_locked(std::string *err) {
  const char *env = std::getenv("MCORE_HCCL_LIBRARY");
  std::string path = (env != nullptr && *env != '\0') ? env : "libhccl.so";
  void *h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char *why = dlerror();
    *err = "libhccl.so could not be loaded (tried " + path + ": " + (why ? why : "unknown error") +
           "). Source the CANN toolkit's set_env.sh so libhccl.so is on LD_LIBRARY_PATH, or set "
           "MCORE_HCCL_LIBRARY to the file";
    return false;
  }
  HcclApi api;
  api.path = path;
  const char *w = "HCCL";
  if (!resolve(h, "HcclGetRootInfo", &api.GetRootInfo, path, w, err) ||
      !resolve(h, "HcclCommInitRootInfoConfig", &api.CommInitRootInfoConfig, path, w, err) ||
      !resolve(h, "HcclCommDestroy", &api.CommDestroy, path, w, err) ||
      !resolve(h, "HcclAllReduce", &api.AllReduce, path, w, err) ||
      !resolve(h, "HcclBarrier", &api.Barrier, path, w, err)) {
    dlclose(h);
    return false;
  }
  resolve(h, "HcclGetErrorString", &api.GetErrorString, path, w, nullptr);
  resolve(h, "HcclCreateSubCommConfig", &api.CreateSubCommConfig, path, w, nullptr);
  resolve(h, "HcclGetCommConfigCapability", &api.GetCommConfigCapability, path, w, nullptr);
  resolve(h, "HcclGetCommAsyncError", &api.GetCommAsyncError, path, w, nullptr);
  resolve(h, "HcclCommInitClusterInfoMemConfig", &api.CommInitClusterInfoMemConfig, path, w, nullptr);
  // After libhccl.so, whose own dependency on libascendcl.so is then already loaded: one copy of
  // the runtime (and of its per-thread current device) serves both.
  if (!load_acl(&api, err)) return false;
  debug(path + " loaded: config capability " + std::to_string(api.capability()) +
        (api.GetCommConfigCapability ? "" : " (no HcclGetCommConfigCapability)") +
        (api.CreateSubCommConfig ? "" : ", no HcclCreateSubCommConfig") +
        (api.DeviceTaskAbort ? "" : ", no aclrtDeviceTaskAbort"));
  g_api = api;  // the handles stay open for the process
  return true;
}

}  // namespace

const HcclApi *HcclApi::get(std::string *err) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_tried) {
    g_tried = true;
    if (!load_locked(&g_error)) g_api.GetRootInfo = nullptr;
  }
  if (g_api.GetRootInfo == nullptr) {
    if (err != nullptr) *err = g_error;
    return nullptr;
  }
  return &g_api;
}

std::string HcclApi::describe(HcclResult rc) const {
  std::string text = "HCCL error " + std::to_string(rc);
  if (GetErrorString != nullptr) {
    const char *s = GetErrorString(rc);
    if (s != nullptr && *s != '\0') text += std::string(" (") + s + ")";
  }
  return text;
}

}  // namespace mcore_hccl
