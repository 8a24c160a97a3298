/*
 * nccl_interpose.c: a TEST DOUBLE of an interposing NCCL shim such as NVIDIA's nccl_checkpoint
 * (contrib/nccl_checkpoint, for cuda-checkpoint), which is LD_PRELOADed and defines NCCL's calls
 * itself, forwarding each to the next definition (dlsym(RTLD_NEXT)). This one only counts: every
 * call prints "nccl interpose: <call> #<n>" on stderr, then forwards. It sees a call only when the
 * caller resolves NCCL's symbols through the process's global scope (MCORE_NCCL_GLOBAL_SYMBOLS=1);
 * a private dlopen + dlsym(handle) bypasses it. Used by tests/nccl_double/nccl_double.rs with the libnccl double
 * as the library underneath.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

static atomic_int calls;

static void *next(const char *name) {
  void *f = dlsym(RTLD_NEXT, name);
  if (!f) {
    fprintf(stderr, "nccl interpose: no next definition of %s\n", name);
    abort();
  }
  return f;
}

#define COUNT(name) fprintf(stderr, "nccl interpose: %s #%d\n", name, atomic_fetch_add(&calls, 1) + 1)

typedef struct { char internal[128]; } ncclUniqueId;

int ncclGetUniqueId(ncclUniqueId *id) {
  COUNT("ncclGetUniqueId");
  return ((int (*)(ncclUniqueId *))next("ncclGetUniqueId"))(id);
}

int ncclCommInitRankConfig(void **comm, int nranks, ncclUniqueId id, int rank, void *config) {
  COUNT("ncclCommInitRankConfig");
  return ((int (*)(void **, int, ncclUniqueId, int, void *))next("ncclCommInitRankConfig"))(comm, nranks, id, rank, config);
}

int ncclCommSplit(void *comm, int color, int key, void **newcomm, void *config) {
  COUNT("ncclCommSplit");
  return ((int (*)(void *, int, int, void **, void *))next("ncclCommSplit"))(comm, color, key, newcomm, config);
}

int ncclCommAbort(void *comm) {
  COUNT("ncclCommAbort");
  return ((int (*)(void *))next("ncclCommAbort"))(comm);
}

int ncclCommDestroy(void *comm) {
  COUNT("ncclCommDestroy");
  return ((int (*)(void *))next("ncclCommDestroy"))(comm);
}
