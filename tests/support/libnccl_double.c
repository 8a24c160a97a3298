/*
 * libnccl_double.c: a TEST DOUBLE of libnccl.so.2 and of the few libcuda.so.1 calls the NCCL
 * backend makes. It exists to test the runtime's LOGIC without a GPU: how it drives NCCL's
 * non-blocking calls, out-parameters that NCCL writes after the call returned, deadlines, aborts,
 * version gates, and the orchestration of many communicators. It is not NCCL: there is no GPU
 * code, no transport, no algorithm; "device memory" is host memory, a stream is a token, and the
 * verifying all-reduce is a sum of int64 values exchanged through files. Nothing proven with this
 * double says that the backend works with the real NCCL; tests/backends/nccl_cpu.rs (the real library
 * without a GPU) and scripts/gpu-tests.sh (a GPU) do that.
 *
 * Behaviours it reproduces (measured on NCCL 2.28 with an H100, see docs/backends.md):
 * - ncclCommInitRankConfig with config.blocking = 0 returns ncclInProgress; a background thread
 *   completes the rendezvous of the nranks processes later; ncclCommGetAsyncError reports
 *   ncclInProgress until then. Inside ncclGroupStart/End the work starts at ncclGroupEnd.
 * - ncclCommSplit on a non-blocking parent returns ncclSuccess with *newcomm NOT yet written; a
 *   thread writes it about 20 ms later (MCORE_NCCL_DOUBLE_SPLIT_DELAY_MS), then the parent leaves
 *   ncclInProgress; the child then completes its own initialization.
 * - ncclCommShrink (NCCL 2.27+; nccl.h's signature and NCCL_SHRINK_* flag values) behaves as its
 *   split does: success at once on a non-blocking parent, the new communicator written late, the
 *   parent in ncclInProgress until then. The remaining ranks are renumbered in ascending order;
 *   excluded ranks do not take part. NCCL_SHRINK_ABORT has nothing to end here (the double's
 *   collectives finish inside their call); the flag is only checked and traced.
 * - ncclCommSuspend / ncclCommResume / ncclCommMemStats (NCCL 2.29.7+; nccl.h's signatures,
 *   NCCL_SUSPEND_MEM and ncclCommMemStat_t values): each communicator holds a heap block standing
 *   for its suspendable device memory (DOUBLE_SUSPENDABLE bytes, plus DOUBLE_PERSISTENT that a
 *   suspend keeps); a suspend frees the block, a resume allocates it again, so a use of the
 *   released memory is a use after free that ASan reports. A collective on a suspended
 *   communicator fails with ncclInvalidUsage. ncclCommSuspend refuses (ncclInvalidUsage), as NCCL
 *   does, a communicator that shares resources with its parent or children (a split with
 *   splitShare = 1, inherited by a split without a config, or NCCL_COMM_SPLIT_SHARE_RESOURCES=1,
 *   which overrides the config; the parent then shares too) and every one under
 *   NCCL_DISABLE_MEM_MANAGER=1. Built with -DMCORE_NCCL_DOUBLE_NO_SUSPEND, the
 *   library exports none of the three (a library that predates them).
 *
 * - ncclConfig_t by version: a config must be laid out as the reported version's
 *   NCCL_CONFIG_INITIALIZER lays it out (size = that version's sizeof, version = its code, or
 *   2.32.3's for anything newer); commName is read when the version has it (2.27+).
 * - ncclCommInitRankScalable (2.23+): several unique ids, one per root; every rank must pass the
 *   same list (checked in the rendezvous: a rank whose list differs fails the init).
 * - ncclSetEncryption (2.32.3+; a pre-shared key of at least 32 bytes), refused after this
 *   process's first ncclGetUniqueId. Built with -DMCORE_NCCL_DOUBLE_NO_TLS it models NVIDIA's PyPI
 *   build of 2.32.3, which has no TLS: ncclSetEncryption succeeds, then every init with a key set
 *   fails at its first connection with NCCL's message ("NCCL was built without TLS support but a
 *   pre-shared key was configured"), which, as in that build, is in the library file.
 *   -DMCORE_NCCL_DOUBLE_NO_TLS_UNMARKED fails the same way but composes the message at run time,
 *   so that the file does not carry it (a TLS-less build the runtime cannot recognise ahead).
 * - The parameter API (2.30.7+): ncclParamGetAllParameterKeys / ncclParamGetParameter with a few
 *   keys of the double's own (NCCL_DOUBLE_VERSION, NCCL_DOUBLE_ENCRYPTION).
 *
 * Switches (environment, read at each call):
 *   MCORE_NCCL_DOUBLE_DIR        folder for the rendezvous files (required by ncclGetUniqueId)
 *   MCORE_NCCL_DOUBLE_VERSION    ncclGetVersion's code (default 22803, i.e. 2.28.3); below 22700
 *                                (2.27) ncclCommShrink refuses with ncclInvalidUsage, as a library
 *                                without it cannot be called (the runtime must not call it then);
 *                                below 22907 (2.29.7) ncclCommSuspend/Resume/MemStats refuse so too
 *   MCORE_NCCL_DOUBLE_TRACE      "1": ncclCommShrink, the creating calls (with commName),
 *                                ncclSetEncryption, ncclGetUniqueId, ncclCommSuspend and
 *                                ncclCommResume print one line per call
 *   MCORE_NCCL_DOUBLE_SHRINK     "fail": shrinks end in ncclSystemError (after their exchange);
 *                                "hang": they never complete (MCORE_NCCL_DOUBLE_HANG_RANKS applies)
 *   MCORE_NCCL_DOUBLE_INIT       "hang": no init ever completes (the deadline/abort path)
 *   MCORE_NCCL_DOUBLE_SPLIT      "hang": splits never complete; "fail": they end in ncclSystemError
 *   MCORE_NCCL_DOUBLE_LATE_INIT  "1": init, too, writes *newcomm late (from its thread)
 *   MCORE_NCCL_DOUBLE_SPLIT_DELAY_MS  delay of the late *newcomm write of a split (default 20)
 *   MCORE_NCCL_DOUBLE_HANG_RANKS  comma-separated global ranks (the process's RANK) whose inits or
 *                                 splits hang; default: every process when a mode above is "hang"
 *   MCORE_CUDA_DOUBLE_DEVICES    cuDeviceGetCount (default 8)
 *
 * Checks a real library does not make: a late write whose target lies on the calling thread's
 * stack aborts the process with a message (the double cannot know whether that frame is still
 * alive, and the runtime must never hand out such storage). A late write into freed heap memory is
 * caught when this file is built with -fsanitize=address and libasan is preloaded.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { ok = 0, sysErr = 2, internalErr = 3, invalidArg = 4, invalidUsage = 5, remoteErr = 6, inProgress = 7 };
#define NOCOLOR (-1)
#define LIVE 0x6e63636cu
#define DEAD 0xdeadu

typedef struct { char internal[128]; } ncclUniqueId;
/* ncclConfig_t of NCCL 2.31/2.32; older versions are prefixes of it (the double reads only what
 * the reported version's size covers). */
typedef struct {
  size_t size;
  unsigned magic, version;
  int blocking, cgaClusterSize, minCTAs, maxCTAs;
  const char *netName;
  int splitShare, trafficClass;
  const char *commName;
  int collnetEnable, CTAPolicy, shrinkShare, nvlsCTAs, nChannelsPerNetPeer, nvlinkCentricSched, graphUsageMode,
      numRmaCtx, maxP2pPeers, graphStreamOrdering, launchOrderImplicit, numRmaSig, rmaEagerInit, hostCftMode,
      nvlsHostMode;
} config_prefix;

typedef struct comm {
  unsigned magic;
  atomic_int state;
  atomic_int refs;
  atomic_int aborted;
  char id[200];
  int rank, nranks, blocking;
  unsigned ops, splits;
  /* Stands for the suspendable device memory (NULL while suspended). */
  unsigned char *mem;
  int suspended;
  /* splitShare of its config (what a split without a config inherits), and whether it shares
   * resources with a parent or a child (ncclCommSuspend refuses it then). */
  int split_share;
  atomic_int shares;
} comm;

/* The "device memory" a communicator of the double holds: released by a suspend, and kept. */
#define DOUBLE_SUSPENDABLE (4u << 20)
#define DOUBLE_PERSISTENT (64u << 10)

/* Process-wide like NCCL's (errors are set by background threads too); the text is advisory. */
static char last_error[512];
static pthread_mutex_t error_lock = PTHREAD_MUTEX_INITIALIZER;
static void set_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  pthread_mutex_lock(&error_lock);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  pthread_mutex_unlock(&error_lock);
  va_end(ap);
}

static const char *env(const char *k) { const char *v = getenv(k); return v && *v ? v : NULL; }
static int env_int(const char *k, int dflt) { const char *v = env(k); return v ? atoi(v) : dflt; }
static int env_is(const char *k, const char *want) { const char *v = env(k); return v && !strcmp(v, want); }
static void sleep_ms(int ms) { struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L}; nanosleep(&t, NULL); }

static int version(void) { return env_int("MCORE_NCCL_DOUBLE_VERSION", 22803); }
static int trace(void) { return env_is("MCORE_NCCL_DOUBLE_TRACE", "1"); }

/* sizeof(ncclConfig_t) in the nccl.h of version `v` (0 before 2.14): the sizes of NVIDIA's own
 * headers from 2.16.2 to 2.32.3 (docs/backends.md lists them). */
static size_t config_size_for(int v) {
  if (v < 21400) return 0;
  if (v < 21700) return 24;
  if (v < 21800) return 40;
  if (v < 22700) return 48;
  if (v < 22800) return 72;
  if (v < 22900) return 80;
  if (v < 23000) return 88;
  if (v < 23100) return 96;
  if (v < 23203) return 112; /* 2.31.2: no nvlsHostMode yet */
  return sizeof(config_prefix);
}

/* Check that `config` is laid out for the reported version; its commName (2.27+) into `name`. */
static int check_config(const char *call, const config_prefix *config, int rank, int nranks, char *name, size_t n) {
  if (name) name[0] = 0;
  if (!config) return ok;
  if (config->magic != 0xcafebeefu) { set_error("%s: config magic %#x is not NCCL_CONFIG_INITIALIZER's", call, config->magic); return invalidArg; }
  int v = version();
  size_t want = config_size_for(v);
  unsigned want_version = v > 23203 ? 23203u : (unsigned)v;
  if (config->size != want || config->version != want_version) {
    set_error("%s: ncclConfig_t of size %zu version %u, but NCCL %d's initializer sets size %zu version %u", call,
              config->size, config->version, v, want, want_version);
    return invalidArg;
  }
  if (name && v >= 22700 && config->commName) snprintf(name, n, "%s", config->commName);
  if (trace())
    fprintf(stderr, "libnccl double: config of %s: rank %d of %d commName=%s size=%zu version=%u launchOrderImplicit=%d\n",
            call, rank, nranks, name && name[0] ? name : "(none)", config->size, config->version,
            v >= 23100 ? config->launchOrderImplicit : -2 /* not in this version's struct */);
  return ok;
}

/* Whether mode `k` is "hang" in this process (every one unless MCORE_NCCL_DOUBLE_HANG_RANKS lists RANKs). */
static int hangs(const char *k) {
  if (!env_is(k, "hang")) return 0;
  const char *me = env("RANK");
  int rank = me ? atoi(me) : 0;
  const char *list = env("MCORE_NCCL_DOUBLE_HANG_RANKS");
  if (!list) return 1;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", list);
  for (char *save, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save))
    if (atoi(t) == rank) return 1;
  return 0;
}

static void unref(comm *c) {
  if (atomic_fetch_sub(&c->refs, 1) == 1) {
    c->magic = DEAD;
    free(c->mem);
    free(c);
  }
}

static comm *new_comm(const char *id, int rank, int nranks, int blocking) {
  comm *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->magic = LIVE;
  atomic_store(&c->state, inProgress);
  atomic_store(&c->refs, 1);
  snprintf(c->id, sizeof c->id, "%s", id);
  c->rank = rank;
  c->nranks = nranks;
  c->blocking = blocking;
  c->mem = malloc(DOUBLE_SUSPENDABLE);
  if (!c->mem) { free(c); return NULL; }
  memset(c->mem, rank & 0xff, DOUBLE_SUSPENDABLE);
  return c;
}

static int live(comm *c) { return c && c->magic == LIVE; }

/* ---- the exchange: every rank writes <dir>/<key>/r<rank> (atomically by rename) and reads all ---- */

static int mkdirs(char *path) {
  for (char *p = path + 1; *p; p++) {
    if (*p == '/') {
      *p = 0;
      if (mkdir(path, 0777) && errno != EEXIST) { *p = '/'; return -1; }
      *p = '/';
    }
  }
  return mkdir(path, 0777) && errno != EEXIST ? -1 : 0;
}

/* Publish `len` bytes as `rank` of `nranks` under `key`, then read every rank's into `all`
 * (nranks * len bytes). Returns 0, or -1 (error set) on I/O failure, abort or the 300 s bound. */
static int exchange(const char *key, int rank, int nranks, const void *mine, size_t len, void *all, atomic_int *aborted) {
  const char *dir = env("MCORE_NCCL_DOUBLE_DIR");
  if (!dir) { set_error("MCORE_NCCL_DOUBLE_DIR is not set"); return -1; }
  char path[1024], tmp[1100];
  snprintf(path, sizeof path, "%s/%s", dir, key);
  if (mkdirs(path)) { set_error("mkdir %s: %s", path, strerror(errno)); return -1; }
  snprintf(path, sizeof path, "%s/%s/r%d", dir, key, rank);
  snprintf(tmp, sizeof tmp, "%s.tmp%d", path, (int)getpid());
  FILE *f = fopen(tmp, "wb");
  if (!f || fwrite(mine, 1, len, f) != len || fclose(f) || rename(tmp, path)) {
    set_error("writing %s: %s", path, strerror(errno));
    return -1;
  }
  for (int r = 0; r < nranks; r++) {
    snprintf(path, sizeof path, "%s/%s/r%d", dir, key, r);
    for (int waited = 0;; waited++) {
      FILE *g = fopen(path, "rb");
      if (g) {
        size_t got = fread((char *)all + (size_t)r * len, 1, len, g);
        fclose(g);
        if (got != len) { set_error("%s holds %zu bytes, expected %zu", path, got, len); return -1; }
        break;
      }
      if (aborted && atomic_load(aborted)) { set_error("aborted while waiting for %s", path); return -1; }
      if (waited > 300000) { set_error("rank %d never wrote %s", r, path); return -1; }
      sleep_ms(1);
    }
  }
  return 0;
}

/* ---- late out-parameters ---- */

typedef struct { uintptr_t lo, hi; } stack_range;

static stack_range caller_stack(void) {
  stack_range s = {0, 0};
  pthread_attr_t a;
  void *base;
  size_t size;
  if (pthread_getattr_np(pthread_self(), &a) == 0) {
    if (pthread_attr_getstack(&a, &base, &size) == 0) { s.lo = (uintptr_t)base; s.hi = (uintptr_t)base + size; }
    pthread_attr_destroy(&a);
  }
  return s;
}

/* Write `value` into the caller's out-parameter after the call returned, refusing stack storage. */
static void late_write(const char *call, void **target, void *value, stack_range s) {
  uintptr_t t = (uintptr_t)target;
  if (t >= s.lo && t < s.hi) {
    fprintf(stderr,
            "libnccl double: FATAL: %s writes its out-parameter %p after returning, and it lies on the "
            "calling thread's stack [%p, %p): that frame may be gone (memory corruption in real NCCL)\n",
            call, (void *)target, (void *)s.lo, (void *)s.hi);
    abort();
  }
  *target = value; /* under ASan: heap-use-after-free if the caller freed the slot */
}

/* ---- version, ids, errors ---- */

int ncclGetVersion(int *v) { if (!v) return invalidArg; *v = version(); return ok; }

static atomic_int ids_made, encrypted;

int ncclGetUniqueId(ncclUniqueId *id) {
  static atomic_uint counter;
  if (!id) return invalidArg;
  atomic_store(&ids_made, 1);
  if (trace()) fprintf(stderr, "libnccl double: ncclGetUniqueId encrypted=%d\n", atomic_load(&encrypted));
  if (!env("MCORE_NCCL_DOUBLE_DIR")) { set_error("libnccl double: MCORE_NCCL_DOUBLE_DIR is not set"); return invalidUsage; }
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  memset(id, 0, sizeof *id);
  snprintf(id->internal, sizeof id->internal, "id-%d-%u-%ld%09ld", (int)getpid(), atomic_fetch_add(&counter, 1), (long)t.tv_sec, t.tv_nsec);
  return ok;
}

const char *ncclGetErrorString(int code) {
  switch (code) {
  case ok: return "no error (double)";
  case sysErr: return "system error (double)";
  case invalidArg: return "invalid argument (double)";
  case invalidUsage: return "invalid usage (double)";
  case inProgress: return "operation in progress (double)";
  default: return "error (double)";
  }
}

const char *ncclGetLastError(void *c) { (void)c; return last_error; }

/* ---- init ---- */

typedef struct {
  comm *c;
  void **late_target; /* NULL unless *newcomm is written by the thread */
  stack_range stack;
  char *ids; /* scalable init: the nids * 128 bytes of the roots' ids, which every rank must agree on */
  int nids;
} init_job;

#if defined(MCORE_NCCL_DOUBLE_NO_TLS)
#define NO_TLS 1
static void no_tls_error(void) { set_error("NCCL was built without TLS support but a pre-shared key was configured"); }
#elif defined(MCORE_NCCL_DOUBLE_NO_TLS_UNMARKED)
#define NO_TLS 1
static void no_tls_error(void) { set_error("%s was built without %s support but a pre-shared key was configured", "NCCL", "TLS"); }
#else
#define NO_TLS 0
static void no_tls_error(void) {}
#endif

static void *init_thread(void *p) {
  init_job *j = p;
  comm *c = j->c;
  if (j->late_target) {
    sleep_ms(10);
    late_write("ncclCommInitRankConfig", j->late_target, c, j->stack);
  }
  if (hangs("MCORE_NCCL_DOUBLE_INIT")) {
    while (!atomic_load(&c->aborted)) sleep_ms(1);
  } else if (NO_TLS && atomic_load(&encrypted)) {
    /* The first connection of a TLS-less build with a key set. */
    no_tls_error();
    sleep_ms(2);
    atomic_store(&c->state, sysErr);
  } else {
    char key[300];
    snprintf(key, sizeof key, "%s/init", c->id);
    int *all = calloc((size_t)c->nranks, sizeof(int));
    int rc = all ? exchange(key, c->rank, c->nranks, &c->nranks, sizeof(int), all, &c->aborted) : -1;
    int state = rc == 0 ? ok : sysErr;
    for (int r = 0; rc == 0 && r < c->nranks; r++)
      if (all[r] != c->nranks) { set_error("rank %d says nranks %d, this rank %d", r, all[r], c->nranks); state = invalidUsage; }
    free(all);
    if (state == ok && j->nids > 0) {
      /* Every rank must have been given the same roots' ids, in the same order. */
      size_t len = (size_t)j->nids * 128;
      char *ids = calloc((size_t)c->nranks, len);
      snprintf(key, sizeof key, "%s/scalable", c->id);
      rc = ids ? exchange(key, c->rank, c->nranks, j->ids, len, ids, &c->aborted) : -1;
      if (rc) state = sysErr;
      for (int r = 0; rc == 0 && r < c->nranks; r++)
        if (memcmp(ids + (size_t)r * len, j->ids, len)) {
          set_error("ncclCommInitRankScalable: rank %d was given other root ids than rank %d", r, c->rank);
          state = invalidUsage;
        }
      free(ids);
    }
    sleep_ms(2);
    atomic_store(&c->state, state);
  }
  unref(c);
  free(j->ids);
  free(j);
  return NULL;
}

static void start_init(init_job *j) {
  pthread_t t;
  atomic_fetch_add(&j->c->refs, 1);
  if (pthread_create(&t, NULL, init_thread, j) == 0) {
    pthread_detach(t);
  } else {
    atomic_store(&j->c->state, sysErr);
    unref(j->c);
    free(j->ids);
    free(j);
  }
}

static __thread int group_depth;
static __thread init_job *pending[256];
static __thread int npending;

int ncclGroupStart(void) { group_depth++; return ok; }

int ncclGroupEnd(void) {
  if (group_depth == 0) { set_error("ncclGroupEnd without ncclGroupStart"); return invalidUsage; }
  if (--group_depth > 0) return ok;
  int blocking = 1, n = npending;
  comm *cs[256];
  for (int i = 0; i < n; i++) {
    cs[i] = pending[i]->c;
    blocking &= cs[i]->blocking;
    atomic_fetch_add(&cs[i]->refs, 1);
    start_init(pending[i]);
  }
  npending = 0;
  int rc = ok;
  for (int i = 0; i < n; i++) {
    if (blocking) while (atomic_load(&cs[i]->state) == inProgress) sleep_ms(1);
    int s = atomic_load(&cs[i]->state);
    if (s != ok && (blocking || s != inProgress)) rc = s;
    else if (s == inProgress && rc == ok) rc = inProgress;
    unref(cs[i]);
  }
  return rc;
}

static int init_rank(const char *call, void **newcomm, int nranks, const ncclUniqueId *id, int rank,
                     config_prefix *config, const ncclUniqueId *ids, int nids) {
  if (!newcomm || nranks < 1 || rank < 0 || rank >= nranks) { set_error("bad init arguments (rank %d of %d)", rank, nranks); return invalidArg; }
  char name[128];
  int rc0 = check_config(call, config, rank, nranks, name, sizeof name);
  if (rc0 != ok) return rc0;
  int blocking = config ? config->blocking != 0 : 1;
  comm *c = new_comm(id->internal, rank, nranks, blocking);
  if (!c) return sysErr;
  c->split_share = config && version() >= 21800 && config->splitShare == 1;
  init_job *j = calloc(1, sizeof *j);
  if (!j) { unref(c); return sysErr; }
  j->c = c;
  if (nids > 0) {
    j->ids = malloc((size_t)nids * 128);
    if (!j->ids) { unref(c); free(j); return sysErr; }
    memcpy(j->ids, ids, (size_t)nids * 128);
    j->nids = nids;
  }
  if (env_is("MCORE_NCCL_DOUBLE_LATE_INIT", "1") && !blocking) {
    j->late_target = newcomm;
    j->stack = caller_stack();
  } else {
    *newcomm = c;
  }
  if (group_depth > 0) {
    if (npending == 256) { set_error("more than 256 inits in one group"); unref(c); free(j->ids); free(j); return invalidUsage; }
    pending[npending++] = j;
    return ok;
  }
  atomic_fetch_add(&c->refs, 1);
  start_init(j);
  int rc = inProgress;
  if (blocking) {
    while ((rc = atomic_load(&c->state)) == inProgress) sleep_ms(1);
  }
  unref(c);
  return rc;
}

int ncclCommInitRankConfig(void **newcomm, int nranks, ncclUniqueId id, int rank, config_prefix *config) {
  return init_rank("ncclCommInitRankConfig", newcomm, nranks, &id, rank, config, NULL, 0);
}

int ncclCommInitRankScalable(void **newcomm, int nranks, int rank, int nids, ncclUniqueId *ids, config_prefix *config) {
  if (version() < 22300) { set_error("ncclCommInitRankScalable is NCCL 2.23's, this is %d", version()); return invalidUsage; }
  if (nids < 1 || nids > nranks || !ids) { set_error("ncclCommInitRankScalable: %d ids for %d ranks", nids, nranks); return invalidArg; }
  if (trace()) fprintf(stderr, "libnccl double: ncclCommInitRankScalable rank %d of %d with %d root ids\n", rank, nranks, nids);
  /* The communicator's identity is the first root's id, as every rank's rendezvous key. */
  return init_rank("ncclCommInitRankScalable", newcomm, nranks, &ids[0], rank, config, ids, nids);
}

/* ---- encryption (2.32.3+) and the parameter API (2.30.7+) ---- */

typedef struct { size_t size; unsigned magic, version; int mode; const char *psk; } encryption_config;

int ncclSetEncryption(const encryption_config *c) {
  if (version() < 23203) { set_error("ncclSetEncryption is NCCL 2.32.3's, this is %d", version()); return invalidUsage; }
  if (!c || c->magic != 0xcafebeefu) { set_error("ncclSetEncryption: config not initialized"); return invalidArg; }
  if (c->mode != 1 || !c->psk || strlen(c->psk) < 32) { set_error("ncclSetEncryption: mode %d needs a key of 32 bytes or more", c->mode); return invalidArg; }
  if (atomic_load(&ids_made)) { set_error("ncclSetEncryption after this process's first ncclGetUniqueId"); return invalidUsage; }
  atomic_store(&encrypted, 1);
  if (trace()) fprintf(stderr, "libnccl double: ncclSetEncryption mode %d key of %zu bytes\n", c->mode, strlen(c->psk));
  return ok;
}

int ncclParamGetAllParameterKeys(const char ***table, int *len) {
  static const char *keys[] = {"NCCL_DOUBLE_VERSION", "NCCL_DOUBLE_ENCRYPTION"};
  if (version() < 23007) return invalidUsage;
  if (!table || !len) return invalidArg;
  *table = keys;
  *len = 2;
  return ok;
}

int ncclParamGetParameter(const char *key, const char **value, int *len) {
  static __thread char buf[32];
  if (version() < 23007) return invalidUsage;
  if (!key || !value || !len) return invalidArg;
  if (!strcmp(key, "NCCL_DOUBLE_VERSION")) snprintf(buf, sizeof buf, "%d", version());
  else if (!strcmp(key, "NCCL_DOUBLE_ENCRYPTION")) snprintf(buf, sizeof buf, "%d", atomic_load(&encrypted));
  else { *value = NULL; *len = 0; return invalidArg; }
  *value = buf;
  *len = (int)strlen(buf);
  return ok;
}

/* ---- split ---- */

/* End of a split or shrink on its thread: write the child (NULL for a split's non-member) into
 * the caller's out-parameter late, let the parent leave ncclInProgress, then start the child's
 * own initialization over its members. */
static void hand_out_child(const char *call, comm *parent, comm *child, void **newcomm, stack_range stack) {
  late_write(call, newcomm, child, stack);
  atomic_store(&parent->state, ok);
  if (child) {
    init_job *ij = calloc(1, sizeof *ij);
    if (ij) {
      ij->c = child;
      start_init(ij);
    } else {
      atomic_store(&child->state, sysErr);
    }
  }
}

/* Run `job` (a split or shrink of `parent`; freed by `fn`) on its own thread, the parent in
 * ncclInProgress meanwhile. A non-blocking parent gets NCCL's answer at once (success, *newcomm
 * written later); a blocking one waits for the parent and then the child. */
static int start_on_parent(comm *parent, void *(*fn)(void *), void *job, void **newcomm) {
  atomic_store(&parent->state, inProgress);
  atomic_fetch_add(&parent->refs, 1);
  pthread_t t;
  if (pthread_create(&t, NULL, fn, job)) {
    atomic_store(&parent->state, ok);
    unref(parent);
    free(job);
    return sysErr;
  }
  pthread_detach(t);
  if (!parent->blocking) return ok;
  int s;
  while ((s = atomic_load(&parent->state)) == inProgress) sleep_ms(1);
  if (s == ok && *newcomm)
    while (atomic_load(&((comm *)*newcomm)->state) == inProgress) sleep_ms(1);
  return s;
}

typedef struct {
  comm *parent;
  int color, key, blocking;
  int split_share, shares; /* the child's config value, and whether it shares the parent's resources */
  unsigned seq;
  void **newcomm;
  stack_range stack;
} split_job;

static void *split_thread(void *p) {
  split_job *j = p;
  comm *parent = j->parent;
  if (hangs("MCORE_NCCL_DOUBLE_SPLIT")) {
    while (!atomic_load(&parent->aborted)) sleep_ms(1);
    goto out;
  }
  char key[300];
  snprintf(key, sizeof key, "%s/split%u", parent->id, j->seq);
  int mine[2] = {j->color, j->key};
  int *all = calloc((size_t)parent->nranks * 2, sizeof(int));
  if (!all || exchange(key, parent->rank, parent->nranks, mine, sizeof mine, all, &parent->aborted)) {
    free(all);
    atomic_store(&parent->state, sysErr);
    goto out;
  }
  if (env_is("MCORE_NCCL_DOUBLE_SPLIT", "fail")) {
    free(all);
    set_error("the split failed as asked (MCORE_NCCL_DOUBLE_SPLIT=fail)");
    atomic_store(&parent->state, sysErr);
    goto out;
  }
  comm *child = NULL;
  if (j->color != NOCOLOR) {
    /* Child rank: members ordered by (key, parent rank). */
    int size = 0, rank = 0;
    for (int r = 0; r < parent->nranks; r++) {
      if (all[2 * r] != j->color) continue;
      size++;
      if (all[2 * r + 1] < j->key || (all[2 * r + 1] == j->key && r < parent->rank)) rank++;
    }
    char id[200];
    snprintf(id, sizeof id, "%s/s%uc%d", parent->id, j->seq, j->color);
    child = new_comm(id, rank, size, j->blocking);
    if (child) {
      child->split_share = j->split_share;
      if (j->shares) {
        atomic_store(&child->shares, 1);
        atomic_store(&parent->shares, 1);
      }
    }
  }
  free(all);
  sleep_ms(env_int("MCORE_NCCL_DOUBLE_SPLIT_DELAY_MS", 20));
  hand_out_child("ncclCommSplit", parent, child, j->newcomm, j->stack);
out:
  unref(parent);
  free(j);
  return NULL;
}

int ncclCommSplit(void *parent_, int color, int key, void **newcomm, config_prefix *config) {
  comm *parent = parent_;
  if (!live(parent) || !newcomm) { set_error("ncclCommSplit: bad parent or newcomm"); return invalidArg; }
  if (group_depth > 0) { set_error("the double does not model ncclCommSplit inside a group"); return invalidUsage; }
  if (atomic_load(&parent->state) != ok) {
    set_error("ncclCommSplit on a parent in state %d (still in progress or failed)", atomic_load(&parent->state));
    return invalidUsage;
  }
  char name[128];
  int rc0 = check_config("ncclCommSplit", config, parent->rank, parent->nranks, name, sizeof name);
  if (rc0 != ok) return rc0;
  split_job *j = calloc(1, sizeof *j);
  if (!j) return sysErr;
  j->parent = parent;
  j->color = color;
  j->key = key;
  j->blocking = config ? config->blocking != 0 : parent->blocking;
  /* NCCL_COMM_SPLIT_SHARE_RESOURCES, when set, overrides the config's splitShare. */
  j->split_share = config ? config->splitShare == 1 : parent->split_share;
  j->shares = env("NCCL_COMM_SPLIT_SHARE_RESOURCES") ? env_int("NCCL_COMM_SPLIT_SHARE_RESOURCES", 0) == 1 : j->split_share;
  j->seq = parent->splits++;
  j->newcomm = newcomm;
  j->stack = parent->blocking ? (stack_range){0, 0} : caller_stack();
  return start_on_parent(parent, split_thread, j, newcomm);
}

/* ---- shrink (NCCL 2.27+) ---- */

#define SHRINK_ABORT 0x01 /* NCCL_SHRINK_ABORT; NCCL_SHRINK_DEFAULT is 0 */

typedef struct {
  comm *parent;
  int rank, size, blocking;
  long sig; /* the excluded set, which every remaining rank must pass alike */
  unsigned seq;
  void **newcomm;
  stack_range stack;
} shrink_job;

static void *shrink_thread(void *p) {
  shrink_job *j = p;
  comm *parent = j->parent;
  if (hangs("MCORE_NCCL_DOUBLE_SHRINK")) {
    while (!atomic_load(&parent->aborted)) sleep_ms(1);
    goto out;
  }
  char key[300];
  snprintf(key, sizeof key, "%s/shrink%u", parent->id, j->seq);
  long *all = calloc((size_t)j->size, sizeof(long));
  if (!all || exchange(key, j->rank, j->size, &j->sig, sizeof j->sig, all, &parent->aborted)) {
    free(all);
    atomic_store(&parent->state, sysErr);
    goto out;
  }
  for (int r = 0; r < j->size; r++) {
    if (all[r] != j->sig) {
      set_error("ncclCommShrink: remaining rank %d excludes other ranks than this one", r);
      free(all);
      atomic_store(&parent->state, invalidUsage);
      goto out;
    }
  }
  free(all);
  if (env_is("MCORE_NCCL_DOUBLE_SHRINK", "fail")) {
    set_error("the shrink failed as asked (MCORE_NCCL_DOUBLE_SHRINK=fail)");
    atomic_store(&parent->state, sysErr);
    goto out;
  }
  char id[200];
  snprintf(id, sizeof id, "%s/k%u", parent->id, j->seq);
  comm *child = new_comm(id, j->rank, j->size, j->blocking);
  sleep_ms(env_int("MCORE_NCCL_DOUBLE_SPLIT_DELAY_MS", 20));
  hand_out_child("ncclCommShrink", parent, child, j->newcomm, j->stack);
out:
  unref(parent);
  free(j);
  return NULL;
}

int ncclCommShrink(void *parent_, int *exclude, int nexclude, void **newcomm, config_prefix *config, int flags) {
  comm *parent = parent_;
  int version = env_int("MCORE_NCCL_DOUBLE_VERSION", 22803);
  if (version < 22700) {
    set_error("ncclCommShrink called on a library that reports version %d: NCCL has it from 2.27", version);
    return invalidUsage;
  }
  if (!live(parent) || !newcomm || nexclude < 0 || (nexclude > 0 && !exclude)) {
    set_error("ncclCommShrink: bad parent, newcomm or exclude list");
    return invalidArg;
  }
  if (flags & ~SHRINK_ABORT) { set_error("ncclCommShrink: unknown flags %#x", flags); return invalidArg; }
  int rc0 = check_config("ncclCommShrink", config, parent->rank, parent->nranks, NULL, 0);
  if (rc0 != ok) return rc0;
  if (group_depth > 0) { set_error("the double does not model ncclCommShrink inside a group"); return invalidUsage; }
  if (atomic_load(&parent->state) != ok) {
    set_error("ncclCommShrink on a parent in state %d (still in progress or failed)", atomic_load(&parent->state));
    return invalidUsage;
  }
  /* Validate the list and derive this rank's place; the signature is order-independent. */
  int below = 0;
  long sig = 0;
  char *seen = calloc((size_t)parent->nranks, 1);
  if (!seen) return sysErr;
  for (int i = 0; i < nexclude; i++) {
    int r = exclude[i];
    if (r < 0 || r >= parent->nranks || seen[r] || r == parent->rank) {
      set_error("ncclCommShrink: excluded rank %d is out of range, repeated or the caller's own", r);
      free(seen);
      return invalidArg;
    }
    seen[r] = 1;
    below += r < parent->rank;
    sig += (long)(r + 1) * 1000003L + (long)r * r;
  }
  free(seen);
  if (env_is("MCORE_NCCL_DOUBLE_TRACE", "1")) {
    fprintf(stderr, "libnccl double: ncclCommShrink rank %d of %d excluding %d rank(s) flags %d -> rank %d of %d\n",
            parent->rank, parent->nranks, nexclude, flags, parent->rank - below, parent->nranks - nexclude);
  }
  shrink_job *j = calloc(1, sizeof *j);
  if (!j) return sysErr;
  j->parent = parent;
  j->rank = parent->rank - below;
  j->size = parent->nranks - nexclude;
  j->blocking = config ? config->blocking != 0 : parent->blocking;
  j->sig = sig;
  j->seq = parent->splits++;
  j->newcomm = newcomm;
  j->stack = parent->blocking ? (stack_range){0, 0} : caller_stack();
  return start_on_parent(parent, shrink_thread, j, newcomm);
}

/* ---- queries and teardown ---- */

int ncclCommGetAsyncError(void *c_, int *state) {
  comm *c = c_;
  if (!live(c) || !state) return invalidArg;
  *state = atomic_load(&c->state);
  return ok;
}

int ncclCommCount(void *c_, int *n) { comm *c = c_; if (!live(c) || !n) return invalidArg; *n = c->nranks; return ok; }
int ncclCommUserRank(void *c_, int *r) { comm *c = c_; if (!live(c) || !r) return invalidArg; *r = c->rank; return ok; }
int ncclCommFinalize(void *c_) { return live(c_) ? ok : invalidArg; }

static int release(void *c_) {
  comm *c = c_;
  if (!live(c)) return invalidArg;
  atomic_store(&c->aborted, 1);
  unref(c);
  return ok;
}

/* Communicators (by id) some rank of this process aborted: destroying one of them afterwards is
 * refused, as NCCL 2.31.2's destroy would wait untimed for peers that aborted (the rule: after
 * any abort, release with abort). */
static char aborted_ids[256][200];
static int naborted;
static pthread_mutex_t aborted_lock = PTHREAD_MUTEX_INITIALIZER;

int ncclCommAbort(void *c_) {
  comm *c = c_;
  if (live(c)) {
    pthread_mutex_lock(&aborted_lock);
    if (naborted < 256) snprintf(aborted_ids[naborted++], sizeof aborted_ids[0], "%s", c->id);
    pthread_mutex_unlock(&aborted_lock);
  }
  return release(c);
}

int ncclCommDestroy(void *c_) {
  comm *c = c_;
  if (!live(c)) return invalidArg;
  int after_abort = 0;
  pthread_mutex_lock(&aborted_lock);
  for (int i = 0; i < naborted; i++) after_abort |= !strcmp(aborted_ids[i], c->id);
  pthread_mutex_unlock(&aborted_lock);
  if (after_abort) {
    set_error("ncclCommDestroy of a communicator a rank aborted (it would wait for that rank forever)");
    return invalidUsage;
  }
  return release(c);
}

/* Bytes per value of the data types the double moves (ncclUint8 = 1, ncclInt64 = 4, ncclFloat32 = 7). */
static size_t dtype_size(int dtype) { return dtype == 1 ? 1 : dtype == 4 ? 8 : dtype == 7 ? 4 : 0; }

/* Every rank's `bytes` of the collective's next step into a new buffer (NULL, error set, on failure). */
static char *collective_exchange(comm *c, const char *call, const void *send, size_t bytes) {
  if (atomic_load(&c->state) != ok) { set_error("%s on a communicator in state %d", call, atomic_load(&c->state)); return NULL; }
  if (c->suspended) { set_error("%s on a suspended communicator (resume it first)", call); return NULL; }
  /* Touch the "device memory" (a use after free under ASan if a suspend released it). */
  if (c->mem[0] != (unsigned char)(c->rank & 0xff)) { set_error("the double's memory block was overwritten"); return NULL; }
  char key[300];
  snprintf(key, sizeof key, "%s/ar%u", c->id, c->ops++);
  char *all = calloc((size_t)c->nranks, bytes ? bytes : 1);
  if (!all) return NULL;
  if (exchange(key, c->rank, c->nranks, send, bytes, all, &c->aborted)) { free(all); return NULL; }
  return all;
}

/* In-place or not: sums of int64 or float32 (ncclSum = 0), done before the call returns. */
int ncclAllReduce(const void *send, void *recv, size_t count, int dtype, int op, void *c_, void *stream) {
  comm *c = c_;
  (void)stream;
  if (!live(c)) return invalidArg;
  if ((dtype != 4 && dtype != 7) || op != 0) { set_error("the double sums int64 and float32 only (dtype %d, op %d)", dtype, op); return invalidArg; }
  char *all = collective_exchange(c, "all-reduce", send, count * dtype_size(dtype));
  if (!all) return atomic_load(&c->state) != ok || c->suspended ? invalidUsage : sysErr;
  for (size_t i = 0; i < count; i++) {
    if (dtype == 4) {
      int64_t s = 0;
      for (int r = 0; r < c->nranks; r++) s += ((int64_t *)all)[(size_t)r * count + i];
      ((int64_t *)recv)[i] = s;
    } else {
      float s = 0;
      for (int r = 0; r < c->nranks; r++) s += ((float *)all)[(size_t)r * count + i];
      ((float *)recv)[i] = s;
    }
  }
  free(all);
  return ok;
}

/* Every rank sends its buffer; each takes the root's. */
int ncclBroadcast(const void *send, void *recv, size_t count, int dtype, int root, void *c_, void *stream) {
  comm *c = c_;
  (void)stream;
  if (!live(c)) return invalidArg;
  size_t size = dtype_size(dtype);
  if (!size) { set_error("the double broadcasts uint8, int64 and float32 only (dtype %d)", dtype); return invalidArg; }
  if (root < 0 || root >= c->nranks) { set_error("ncclBroadcast: root %d of %d ranks", root, c->nranks); return invalidArg; }
  size_t bytes = count * size;
  char *all = collective_exchange(c, "broadcast", send, bytes);
  if (!all) return atomic_load(&c->state) != ok || c->suspended ? invalidUsage : sysErr;
  memcpy(recv, all + (size_t)root * bytes, bytes);
  free(all);
  return ok;
}

/* ---- suspend / resume / memory statistics (NCCL 2.29.7+) ---- */

#ifndef MCORE_NCCL_DOUBLE_NO_SUSPEND
#define SUSPEND_MEM 0x01
static int suspend_gate(const char *call, comm *c) {
  int version = env_int("MCORE_NCCL_DOUBLE_VERSION", 22803);
  if (version < 22907) {
    set_error("%s called on a library that reports version %d: NCCL has it from 2.29.7", call, version);
    return invalidUsage;
  }
  if (!live(c)) { set_error("%s: bad communicator", call); return invalidArg; }
  if (atomic_load(&c->state) != ok) { set_error("%s on a communicator in state %d", call, atomic_load(&c->state)); return invalidUsage; }
  return ok;
}

int ncclCommSuspend(void *c_, int flags) {
  comm *c = c_;
  int rc = suspend_gate("ncclCommSuspend", c);
  if (rc) return rc;
  if (flags & ~SUSPEND_MEM) { set_error("ncclCommSuspend: unknown flags %#x", flags); return invalidArg; }
  if (c->suspended) { set_error("ncclCommSuspend: already suspended"); return invalidUsage; }
  /* NCCL refuses these (ncclInvalidUsage): a communicator sharing resources with its parent or
   * children, and any under NCCL_DISABLE_MEM_MANAGER=1. */
  if (atomic_load(&c->shares) || env_is("NCCL_DISABLE_MEM_MANAGER", "1")) {
    if (trace()) fprintf(stderr, "libnccl double: ncclCommSuspend refused rank %d of %d\n", c->rank, c->nranks);
    set_error("ncclCommSuspend: %s", atomic_load(&c->shares) ? "the communicator shares resources with its parent or children"
                                                              : "NCCL_DISABLE_MEM_MANAGER=1");
    return invalidUsage;
  }
  if (env_is("MCORE_NCCL_DOUBLE_TRACE", "1"))
    fprintf(stderr, "libnccl double: ncclCommSuspend rank %d of %d flags %d\n", c->rank, c->nranks, flags);
  if (flags & SUSPEND_MEM) { free(c->mem); c->mem = NULL; }
  c->suspended = 1;
  return ok;
}

int ncclCommResume(void *c_) {
  comm *c = c_;
  int rc = suspend_gate("ncclCommResume", c);
  if (rc) return rc;
  if (!c->suspended) { set_error("ncclCommResume: not suspended"); return invalidUsage; }
  if (env_is("MCORE_NCCL_DOUBLE_TRACE", "1"))
    fprintf(stderr, "libnccl double: ncclCommResume rank %d of %d\n", c->rank, c->nranks);
  if (!c->mem) {
    c->mem = malloc(DOUBLE_SUSPENDABLE);
    if (!c->mem) return sysErr;
    memset(c->mem, c->rank & 0xff, DOUBLE_SUSPENDABLE);
  }
  c->suspended = 0;
  return ok;
}

int ncclCommMemStats(void *c_, int stat, uint64_t *value) {
  comm *c = c_;
  int rc = suspend_gate("ncclCommMemStats", c);
  if (rc) return rc;
  if (!value) return invalidArg;
  uint64_t held = c->mem ? DOUBLE_SUSPENDABLE : 0;
  switch (stat) {
    case 0: *value = held; break;                                   /* ncclStatGpuMemSuspend */
    case 1: *value = c->mem ? 0 : 1; break;                         /* ncclStatGpuMemSuspended */
    case 2: *value = DOUBLE_PERSISTENT; break;                      /* ncclStatGpuMemPersist */
    case 3: *value = held + DOUBLE_PERSISTENT; break;               /* ncclStatGpuMemTotal */
    default: set_error("ncclCommMemStats: unknown stat %d", stat); return invalidArg;
  }
  return ok;
}
#endif

/* ---- libcuda.so.1: host-memory stand-ins ---- */

int cuInit(unsigned flags) { (void)flags; return 0; }
int cuDriverGetVersion(int *v) { *v = 12080; return 0; }
int cuDeviceGetCount(int *n) { *n = env_int("MCORE_CUDA_DOUBLE_DEVICES", 8); return 0; }
int cuDeviceGet(int *dev, int ordinal) { *dev = ordinal; return 0; }
int cuDevicePrimaryCtxRetain(void **ctx, int dev) { *ctx = (void *)(uintptr_t)(0x1000 + dev); return 0; }
int cuCtxSetCurrent(void *ctx) { (void)ctx; return 0; }
int cuMemAlloc_v2(unsigned long long *p, size_t bytes) { void *m = malloc(bytes); if (!m) return 2; *p = (uintptr_t)m; return 0; }
int cuMemFree_v2(unsigned long long p) { free((void *)(uintptr_t)p); return 0; }
int cuMemcpyHtoD_v2(unsigned long long dst, const void *src, size_t n) { memcpy((void *)(uintptr_t)dst, src, n); return 0; }
int cuMemcpyDtoH_v2(void *dst, unsigned long long src, size_t n) { memcpy(dst, (void *)(uintptr_t)src, n); return 0; }
int cuStreamCreate(void **s, unsigned flags) { (void)flags; *s = malloc(1); return *s ? 0 : 2; }
int cuStreamQuery(void *s) { (void)s; return 0; }
int cuStreamDestroy_v2(void *s) { free(s); return 0; }
/* No device memory here: a fixed "80 GiB, all free" (the selftest's per-kind report reads it). */
int cuMemGetInfo_v2(size_t *free_, size_t *total) { *free_ = (size_t)80 << 30; *total = (size_t)80 << 30; return 0; }
int cuGetErrorString(int code, const char **s) { (void)code; *s = "CUDA error (double)"; return 0; }
