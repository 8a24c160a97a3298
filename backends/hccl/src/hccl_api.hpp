// Our own declarations of the HCCL C API (hccl_types.h / hccl_comm.h of hicann/hcomm) and of the
// few AscendCL runtime calls the plugin needs (acl_rt.h), resolved at run time with dlopen/dlsym:
// no Ascend headers or libraries are needed to build.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace mcore_hccl {

using HcclResult = int32_t;  // an enum in C; read as int so unknown codes stay representable
using HcclComm = void *;
using aclrtStream = void *;
using aclError = int32_t;
constexpr HcclResult HCCL_SUCCESS = 0;
constexpr HcclResult HCCL_E_PARA = 1;
constexpr HcclResult HCCL_E_MEMORY = 3;
constexpr HcclResult HCCL_E_NOT_SUPPORT = 5;
constexpr HcclResult HCCL_E_TIMEOUT = 9;
constexpr HcclResult HCCL_E_TCP_CONNECT = 11;
constexpr HcclResult HCCL_E_ROCE_CONNECT = 12;
constexpr HcclResult HCCL_E_RUNTIME = 15;
constexpr HcclResult HCCL_E_NETWORK = 19;
constexpr HcclResult HCCL_E_AGAIN = 20;
constexpr HcclResult HCCL_E_REMOTE = 21;

constexpr int32_t HCCL_DATA_TYPE_INT32 = 2;
constexpr int32_t HCCL_DATA_TYPE_INT64 = 5;
constexpr int32_t HCCL_REDUCE_SUM = 0;

constexpr aclError ACL_SUCCESS = 0;
constexpr aclError ACL_ERROR_RT_STREAM_SYNC_TIMEOUT = 507046;
constexpr int32_t ACL_MEMCPY_HOST_TO_DEVICE = 1;
constexpr int32_t ACL_MEMCPY_DEVICE_TO_HOST = 2;
constexpr int32_t ACL_MEM_MALLOC_HUGE_FIRST = 0;

constexpr size_t kRootInfoBytes = 4108;  // HCCL_ROOT_INFO_BYTES
struct HcclRootInfo {
  char internal[kRootInfoBytes];
};

constexpr uint32_t kConfigMagic = 0xf0f0f0f0;  // HCCL_COMM_CONFIG_MAGIC_WORD
constexpr uint32_t kConfigVersion = 10;        // HCCL_COMM_CONFIG_VERSION
constexpr uint32_t kNotSet = 0xffffffff;
constexpr size_t kCommNameBytes = 128;

// HcclCommConfigCapability: HcclGetCommConfigCapability() returns the first value the library does
// not support (its HCCL_COMM_CONFIG_RESERVED), so option c is supported when c < capability.
enum ConfigCapability : uint32_t {
  CAP_BUFFER_SIZE = 0,
  CAP_DETERMINISTIC = 1,
  CAP_COMM_NAME = 2,
  CAP_OP_EXPANSION_MODE = 3,
  CAP_SUPPORT_INIT_BY_ENV = 4,
  CAP_WORLD_RANKID = 5,
  CAP_JOBID = 6,
  CAP_ACLGRAPH_ZEROCOPY_ENABLE = 7,
  CAP_EXEC_TIMEOUT = 8,
  CAP_ALGO = 9,
  CAP_RETRY = 10,
  CAP_BUFFER_NAME = 11,
};

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
// The struct as the first config version knew it: the info header, buffer size, deterministic.
constexpr size_t kConfigV1Bytes = 32;

// The config header's fields.
struct ConfigInfo {
  size_t size;
  uint32_t magic;
  uint32_t version;
  uint64_t reserved;
};
ConfigInfo config_info(const HcclCommConfig *config);

// HCCL's HcclCommConfigInit is static inline in its header, so it is re-implemented here.
void config_init(HcclCommConfig *config);

// The resolved entry points. Optional ones are nullptr when the library lacks them.
struct HcclApi {
  std::string path;
  HcclResult (*GetRootInfo)(HcclRootInfo *) = nullptr;
  HcclResult (*CommInitRootInfoConfig)(uint32_t, const HcclRootInfo *, uint32_t, const HcclCommConfig *,
                                       HcclComm *) = nullptr;
  HcclResult (*CommDestroy)(HcclComm) = nullptr;
  HcclResult (*AllReduce)(void *, void *, uint64_t, int32_t, int32_t, HcclComm, aclrtStream) = nullptr;
  HcclResult (*Barrier)(HcclComm, aclrtStream) = nullptr;
  const char *(*GetErrorString)(HcclResult) = nullptr;  // optional (unsupported on Ascend 950)
  HcclResult (*CreateSubCommConfig)(HcclComm *, uint32_t, uint32_t *, uint64_t, uint32_t, HcclCommConfig *,
                                    HcclComm *) = nullptr;  // optional
  uint32_t (*GetCommConfigCapability)() = nullptr;          // optional (older CANN lack it)
  HcclResult (*GetCommAsyncError)(HcclComm, HcclResult *) = nullptr;  // optional
  // optional: a communicator from a rank table given as a JSON string (the documented parent of
  // HcclCreateSubCommConfig)
  HcclResult (*CommInitClusterInfoMemConfig)(const char *, uint32_t, HcclCommConfig *, HcclComm *) = nullptr;

  // libascendcl.so (MCORE_HCCL_ACL_LIBRARY overrides the name).
  std::string acl_path;
  aclError (*SetDevice)(int32_t) = nullptr;
  aclError (*GetDevice)(int32_t *) = nullptr;
  aclError (*Malloc)(void **, size_t, int32_t) = nullptr;
  aclError (*Free)(void *) = nullptr;
  aclError (*Memcpy)(void *, size_t, const void *, size_t, int32_t) = nullptr;
  aclError (*CreateStream)(aclrtStream *) = nullptr;
  aclError (*DestroyStream)(aclrtStream) = nullptr;
  aclError (*SynchronizeStreamWithTimeout)(aclrtStream, int32_t) = nullptr;
  aclError (*DeviceTaskAbort)(int32_t, uint32_t) = nullptr;  // optional (newer CANN)

  // The process-wide API, loaded on first call; nullptr with *err set when loading failed.
  static const HcclApi *get(std::string *err);
  // Text for an HCCL result: HcclGetErrorString's when available.
  std::string describe(HcclResult rc) const;
  // The library's config capability (HcclGetCommConfigCapability, or CAP_COMM_NAME when the
  // library predates it: buffer size and deterministic only).
  uint32_t capability() const { return GetCommConfigCapability ? GetCommConfigCapability() : CAP_COMM_NAME; }
};

// Whether MCORE_LOG asks for debug lines; debug() writes one to stderr.
bool debug_enabled();
void debug(const std::string &line);
void warn(const std::string &line);

}  // namespace mcore_hccl
