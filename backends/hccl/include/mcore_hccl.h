/* HCCL (Ascend) backend plugin of mcore_init: creates HCCL communicators for process groups.
 *
 * libhccl.so is opened at run time (MCORE_HCCL_LIBRARY, else "libhccl.so" through the loader path),
 * so the plugin builds and loads without the Ascend toolkit. Until the plugin is wired into the
 * mcore_backend_v1 vtable (entry symbol mcore_backend_plugin_v1), these C functions are its API.
 * Every function returns an mcore_status number (0 = ok) and, on failure, writes a NUL-terminated
 * message naming what failed into err (err_len bytes, may be 0). */
#ifndef MCORE_HCCL_H
#define MCORE_HCCL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Status numbers (the values of mcore_status in mcore_init.h). */
#define MCORE_HCCL_OK 0
#define MCORE_HCCL_INVALID_ARGUMENT 1
#define MCORE_HCCL_TIMEOUT 9
#define MCORE_HCCL_BACKEND 12
#define MCORE_HCCL_UNSUPPORTED 13
#define MCORE_HCCL_LIBRARY_LOAD 14
#define MCORE_HCCL_PEER_FAILED 19

/* The rendezvous store, as callbacks (user_data first). */
typedef struct mcore_hccl_store {
  void *user_data;
  /* Store value under key. Returns a status. */
  int32_t (*set)(void *user_data, const char *key, const uint8_t *value, size_t value_len);
  /* Wait up to timeout_ms for key; copy at most cap bytes into buf and its full length into
   * *out_len. Returns a status (MCORE_HCCL_TIMEOUT when the key did not appear). */
  int32_t (*get)(void *user_data, const char *key, uint8_t *buf, size_t cap, size_t *out_len, uint64_t timeout_ms);
} mcore_hccl_store;

/* One group to create on this rank. */
typedef struct mcore_hccl_group_spec {
  size_t struct_size;      /* sizeof(mcore_hccl_group_spec) */
  const char *name;        /* unique job-wide group name: store key prefix, comm name, messages */
  uint32_t size;           /* ranks in the group */
  uint32_t rank;           /* this rank's index in the group */
  uint64_t timeout_ms;     /* how long to wait for the root info in the store */
  int32_t device;          /* Ascend device to select with aclrtSetDevice, or -1 to keep the current */
  uint32_t buffer_size_mb; /* hcclBufferSize, 0 = HCCL's default (HCCL_BUFFSIZE or 200 MB) */
  uint32_t deterministic;  /* hcclDeterministic 0, 1 or 2; 0xffffffff = HCCL's default (HCCL_DETERMINISTIC) */
  const char *host_addr;   /* group rank 0's root-info interface (HCCL_IF_IP) unless HCCL_IF_IP or
                              HCCL_SOCKET_IFNAME is set; NULL = HCCL's choice */
  const char *options;     /* appended: "key=value" lines of torch_npu's hccl_config keys (hccl_buffer_size,
                              group_name, qos_traffic_class, qos_service_level, hccl_op_expansion_mode,
                              hccl_exec_timeout, hccl_algo, hccl_sdma_qos) for HcclCommConfig; other keys
                              are skipped; NULL = none. Read only when struct_size covers it. */
} mcore_hccl_group_spec;

/* Fill a spec with defaults (device -1 = the thread's current device, else LOCAL_RANK, else 0;
 * 300 s; HCCL's buffer size and deterministic setting). */
void mcore_hccl_group_spec_init(mcore_hccl_group_spec *spec);

/* Open libhccl.so and resolve its symbols (done once; later calls return the first result). */
int32_t mcore_hccl_load(char *err, size_t err_len);

/* Create this rank's communicator of a group: group rank 0 calls HcclGetRootInfo and publishes the
 * 4108 bytes under "<name>/hccl_root_info"; the others read them; every member announces itself
 * under "<name>/hccl_arrived/<rank>" and waits for the others (up to timeout_ms, naming the ranks
 * that did not come); then every member calls HcclCommInitRootInfoConfig (bounded by
 * HCCL_CONNECT_TIMEOUT). *out_comm (an opaque handle of this plugin) is written on success. */
int32_t mcore_hccl_create_group(const mcore_hccl_group_spec *spec, const mcore_hccl_store *store, void **out_comm,
                                char *err, size_t err_len);

/* Create a sub-communicator of parent from its ranks parent_ranks[0..n) (ascending), of which this
 * rank is index sub_rank, with HcclCreateSubCommConfig (only members call it). */
int32_t mcore_hccl_create_subgroup(void *parent, const char *name, const uint32_t *parent_ranks, uint32_t n,
                                   uint32_t sub_rank, uint64_t sub_comm_id, void **out_comm, char *err, size_t err_len);

/* HcclCommDestroy (retried while HCCL answers HCCL_E_AGAIN, within the group's timeout) on the
 * communicator's device, from any thread; frees its stream and buffers. NULL is a no-op. */
int32_t mcore_hccl_destroy(void *comm, char *err, size_t err_len);

/* In-place sum of count int64 values over the communicator (HcclAllReduce on the communicator's
 * stream with device buffers; int32 where the library does not support int64), bounded by the
 * group's timeout. */
int32_t mcore_hccl_allreduce_sum_i64(void *comm, int64_t *inout, size_t count, char *err, size_t err_len);

/* The connect timeout HCCL will use, in seconds (HCCL_CONNECT_TIMEOUT, default 120), or -1 and a
 * message when the variable is not a whole number of seconds in HCCL's documented 120..7200. */
int64_t mcore_hccl_connect_timeout_s(char *err, size_t err_len);

#ifdef __cplusplus
}
#endif
#endif
