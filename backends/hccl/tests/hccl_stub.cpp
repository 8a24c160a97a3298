// A stand-in libhccl.so for testing the plugin's logic without Ascend hardware: HCCL's entry points
// (minus HcclCreateSubCommConfig) that check their arguments and record what they were given.
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

#include "hccl_api.hpp"

using namespace mcore_hccl;

namespace {
std::mutex g_mu;
HcclRootInfo g_root;
int g_roots = 0;
int g_inits = 0;
std::string g_log;
}  // namespace

extern "C" {

HcclResult HcclGetRootInfo(HcclRootInfo *info) {
  std::lock_guard<std::mutex> l(g_mu);
  for (size_t i = 0; i < kRootInfoBytes; ++i) info->internal[i] = static_cast<char>((i * 31 + 7 + g_roots) & 0xff);
  g_root = *info;
  ++g_roots;
  return HCCL_SUCCESS;
}

HcclResult HcclCommInitRootInfoConfig(uint32_t n, const HcclRootInfo *root, uint32_t rank, const HcclCommConfig *cfg,
                                      HcclComm *comm) {
  std::lock_guard<std::mutex> l(g_mu);
  size_t size;
  uint32_t magic, version;
  std::memcpy(&size, cfg->reserved, sizeof size);
  std::memcpy(&magic, cfg->reserved + 8, sizeof magic);
  std::memcpy(&version, cfg->reserved + 12, sizeof version);
  if (magic != kConfigMagic || version != kConfigVersion || size != sizeof(HcclCommConfig)) return 1;  // HCCL_E_PARA
  if (n == 3) return HCCL_E_TIMEOUT;  // the tests' way to ask for a connect timeout
  bool same = g_roots > 0 && std::memcmp(root->internal, g_root.internal, kRootInfoBytes) == 0;
  char line[512];
  std::snprintf(line, sizeof line, "init n=%u rank=%u name=%s buf=%u det=%u exec=%d same_root=%d;", n, rank,
                cfg->hcclCommName, cfg->hcclBufferSize, cfg->hcclDeterministic, cfg->hcclExecTimeOut, same ? 1 : 0);
  g_log += line;
  ++g_inits;
  *comm = new int(static_cast<int>(rank));
  return HCCL_SUCCESS;
}

HcclResult HcclCommDestroy(HcclComm comm) {
  delete static_cast<int *>(comm);
  return HCCL_SUCCESS;
}

const char *HcclGetErrorString(HcclResult code) { return code == HCCL_E_TIMEOUT ? "stub: timeout" : "stub: error"; }

// For the tests: what the inits were given.
const char *hccl_stub_log() { return g_log.c_str(); }

}  // extern "C"
