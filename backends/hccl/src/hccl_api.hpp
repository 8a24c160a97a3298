// Our own declarations of the HCCL C API (hccl_types.h / hccl_comm.h of hicann/hcomm), resolved at
// run time with dlopen/dlsym: no Ascend headers or libraries are needed to build.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace mcore_hccl {

using HcclResult = int32_t;  // an enum in C; read as int so unknown codes stay representable
using HcclComm = void *;
constexpr HcclResult HCCL_SUCCESS = 0;
constexpr HcclResult HCCL_E_TIMEOUT = 9;

constexpr size_t kRootInfoBytes = 4108;  // HCCL_ROOT_INFO_BYTES
struct HcclRootInfo {
  char internal[kRootInfoBytes];
};

constexpr uint32_t kConfigMagic = 0xf0f0f0f0;  // HCCL_COMM_CONFIG_MAGIC_WORD
constexpr uint32_t kConfigVersion = 10;        // HCCL_COMM_CONFIG_VERSION
constexpr uint32_t kNotSet = 0xffffffff;
constexpr size_t kCommNameBytes = 128;

// HcclCommConfig as of config version 10.
struct HcclCommConfig {
  char reserved[24];  // {size_t size; uint32_t magic; uint32_t version; uint64_t reserved}
  uint32_t hcclBufferSize;
  uint32_t hcclDeterministic;
  char hcclCommName[kCommNameBytes];
  char hcclUdi[128];
  uint32_t hcclOpExpansionMode;
  uint32_t hcclRdmaTrafficClass;
  uint32_t hcclRdmaServiceLevel;
  uint32_t hcclWorldRankID;
  uint64_t hcclJobID;
  uint8_t aclGraphZeroCopyEnable;
  int32_t hcclExecTimeOut;
  char hcclAlgo[1600];
  char hcclRetryEnable[50];
  char hcclRetryParams[128];
  char hcclBufferName[128];
  uint32_t hcclQos;
  uint64_t hcclSymWinMaxMemSizePerRank;
};

// HCCL's HcclCommConfigInit is static inline in its header, so it is re-implemented here.
void config_init(HcclCommConfig *config);

// The resolved entry points. Optional ones are nullptr when the library lacks them.
struct HcclApi {
  std::string path;
  HcclResult (*GetRootInfo)(HcclRootInfo *) = nullptr;
  HcclResult (*CommInitRootInfoConfig)(uint32_t, const HcclRootInfo *, uint32_t, const HcclCommConfig *,
                                       HcclComm *) = nullptr;
  HcclResult (*CommDestroy)(HcclComm) = nullptr;
  const char *(*GetErrorString)(HcclResult) = nullptr;
  HcclResult (*CreateSubCommConfig)(HcclComm *, uint32_t, uint32_t *, uint64_t, uint32_t, HcclCommConfig *,
                                    HcclComm *) = nullptr;  // optional
  int32_t (*AclrtSetDevice)(int32_t) = nullptr;             // from libascendcl.so, on demand

  // The process-wide API, loaded on first call; nullptr with *err set when loading failed.
  static const HcclApi *get(std::string *err);
  // Text for an HCCL result: HcclGetErrorString's when available.
  std::string describe(HcclResult rc) const;
};

// Resolve aclrtSetDevice (libascendcl.so) into the API once; false with *err naming the library.
bool load_acl(std::string *err);

}  // namespace mcore_hccl
