#include "hccl_api.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

namespace mcore_hccl {

void config_init(HcclCommConfig *config) {
  std::memset(config, 0, sizeof(*config));
  struct Info {
    size_t size;
    uint32_t magic;
    uint32_t version;
    uint64_t reserved;
  };
  static_assert(sizeof(Info) == sizeof(config->reserved), "HcclCommConfig info header is 24 bytes");
  Info info{sizeof(HcclCommConfig), kConfigMagic, kConfigVersion, 0};
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

namespace {

std::mutex g_mutex;
bool g_tried = false;
HcclApi g_api;
std::string g_error;

template <typename F>
bool resolve(void *handle, const char *name, F *out, const std::string &path, std::string *err) {
  dlerror();
  void *p = dlsym(handle, name);
  if (p == nullptr) {
    if (err != nullptr) {
      const char *why = dlerror();
      *err = path + " is not a usable HCCL library: symbol " + name + " is missing (" + (why ? why : "not found") + ")";
    }
    return false;
  }
  *out = reinterpret_cast<F>(p);
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
  if (!resolve(h, "HcclGetRootInfo", &api.GetRootInfo, path, err) ||
      !resolve(h, "HcclCommInitRootInfoConfig", &api.CommInitRootInfoConfig, path, err) ||
      !resolve(h, "HcclCommDestroy", &api.CommDestroy, path, err) ||
      !resolve(h, "HcclGetErrorString", &api.GetErrorString, path, err)) {
    dlclose(h);
    return false;
  }
  resolve(h, "HcclCreateSubCommConfig", &api.CreateSubCommConfig, path, nullptr);
  g_api = api;  // the handle stays open for the process
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

bool load_acl(std::string *err) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_api.AclrtSetDevice != nullptr) return true;
  void *h = dlopen("libascendcl.so", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char *why = dlerror();
    *err = std::string("libascendcl.so could not be loaded to select the device (") + (why ? why : "unknown error") + ")";
    return false;
  }
  return resolve(h, "aclrtSetDevice", &g_api.AclrtSetDevice, "libascendcl.so", err);
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
