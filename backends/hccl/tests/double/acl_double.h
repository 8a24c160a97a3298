// Shared between the test doubles of libascendcl.so and libhccl.so (not part of either real API).
#pragma once
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>

// A queued piece of stream work: 0 done, 1 ran past the deadline, 2 failed (or aborted).
typedef int (*acl_double_task_fn)(void *ctx, std::chrono::steady_clock::time_point deadline,
                                  const std::atomic<uint32_t> *abort_gen, uint32_t gen_at_start);

extern "C" {
int32_t aclrtGetDevice(int32_t *device);
int32_t acl_double_enqueue(void *stream, acl_double_task_fn run, void (*drop)(void *), void *ctx);
int32_t acl_double_stream_device(void *stream);
int acl_double_is_device_mem(const void *p, size_t n);
}
