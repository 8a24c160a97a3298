/* Issue 34.4: every handle type destroyed while another thread is inside a call on it. Issue 46
 * F1: communicator handles cached at init, then suspend and resume (Gloo: recreate mode), used
 * by calling the plugin directly while mcore_comm_generation says they are current.
 * Built with AddressSanitizer by scripts/test.d/34-handle-races.sh (libasan then also
 * intercepts the Rust library's allocations: a freed handle read by a running call is a report
 * or a crash, either a failure here). For each type, RUNS times: a thread calls in a loop (or
 * waits) on the handle, the main thread destroys it meanwhile; every call must return OK or
 * INVALID_ARGUMENT ("the group was destroyed" / not a live handle), never crash.
 *
 * Usage: handle_races GLOO_PLUGIN   (the group part needs a world of one over the plugin;
 * RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT are set by the script). Prints one line per type. */
#define _POSIX_C_SOURCE 200809L
#include <mcore_backend.h>
#include <mcore_init.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RUNS 100

static int failures = 0;

#define CHECK(cond, ...)                                                                  \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                          \
            fprintf(stderr, __VA_ARGS__);                                                 \
            fprintf(stderr, " (last error: %s)\n", mcore_last_error_message());           \
            failures++;                                                                   \
        }                                                                                 \
    } while (0)

/* What one racing thread saw. */
struct race {
    void *handle;
    atomic_int started;
    int ok, refused, other;
    mcore_status other_status;
    char other_msg[256];
};

static void note(struct race *r, mcore_status s) {
    if (s == MCORE_STATUS_OK) {
        r->ok++;
    } else if (s == MCORE_STATUS_INVALID_ARGUMENT) {
        r->refused++;
    } else {
        r->other++;
        r->other_status = s;
        snprintf(r->other_msg, sizeof r->other_msg, "%s", mcore_last_error_message());
    }
}

static void sleep_us(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

/* Calls on the handle until one is refused (the handle is gone) or 2000 calls are made. */
#define LOOP_UNTIL_REFUSED(r, call)                          \
    do {                                                     \
        atomic_store(&(r)->started, 1);                      \
        for (int i_ = 0; i_ < 2000; i_++) {                  \
            mcore_status s_ = (call);                        \
            note((r), s_);                                   \
            if (s_ != MCORE_STATUS_OK) break;                \
        }                                                    \
    } while (0)

static void *topology_caller(void *arg) {
    struct race *r = arg;
    uint64_t count;
    LOOP_UNTIL_REFUSED(r, mcore_topology_group_count(r->handle, MCORE_GROUP_KIND_DATA_PARALLEL, &count));
    return NULL;
}

static void *plan_caller(void *arg) {
    struct race *r = arg;
    int64_t out;
    LOOP_UNTIL_REFUSED(r, mcore_recovery_plan_new_rank(r->handle, 0, &out));
    return NULL;
}

static void *tracker_caller(void *arg) {
    struct race *r = arg;
    uint32_t buf[64];
    LOOP_UNTIL_REFUSED(r, mcore_rng_tracker_cpu_fill_u32(r->handle, "default", buf, 64));
    return NULL;
}

static void *store_waiter(void *arg) {
    struct race *r = arg;
    const char *keys[] = {"never-set"};
    atomic_store(&r->started, 1);
    /* Inside a wait when the handle is destroyed: it ends by its own 30 ms timeout, or is refused. */
    mcore_status s = mcore_store_wait(r->handle, keys, 1, 30);
    if (s == MCORE_STATUS_TIMEOUT) s = MCORE_STATUS_OK;
    note(r, s);
    return NULL;
}

static void *group_waiter(void *arg) {
    struct race *r = arg;
    atomic_store(&r->started, 1);
    note(r, mcore_group_wait(r->handle));
    return NULL;
}

/* Issue 46 F1: a cached communicator handle used by the plugin itself (as an engine passes an
 * ncclComm_t to NCCL): a freed one is an ASan report. In a world of one the sum is the value. */
static int use_comm(const mcore_backend_v1 *vt, void *comm) {
    int64_t v = 7;
    return comm && vt->allreduce_sum_i64(vt->user_data, comm, &v, 1) == 0 && v == 7;
}

static uint64_t generation(void) {
    uint64_t g = 0;
    CHECK(mcore_comm_generation(&g) == MCORE_STATUS_OK, "comm_generation");
    return g;
}

#define KINDS 26
#define PG_MAX 64

/* Every runtime handle (each kind, the default grid's pg collection) and a group made after init
 * cached, a suspend and a resume of every kind (recreate mode), then: the generation changed, so
 * the cached runtime handles are reported stale and fetched again (the fresh ones work); the
 * group's, which a suspend never touches, is the same and still works. Returns the runs made. */
static int cached_handles(const mcore_backend_v1 *vt) {
    void *cached[KINDS];
    int n_kinds = 0;
    uint64_t g0 = generation();
    for (int k = 0; k < KINDS; k++) {
        if (mcore_runtime_communicator(k, &cached[k]) != MCORE_STATUS_OK) cached[k] = NULL;
        else n_kinds++;
    }
    mcore_pg_entry pg[PG_MAX];
    size_t n_pg = 0;
    CHECK(mcore_grid_pg_collection(NULL, pg, PG_MAX, &n_pg) == MCORE_STATUS_OK && n_pg > 0, "pg_collection");
    const uint32_t ranks[] = {0};
    struct mcore_group *g = NULL;
    void *group_comm = NULL;
    CHECK(mcore_group_create("kept", ranks, 1, NULL, &g) == MCORE_STATUS_OK, "group_create kept");
    CHECK(g && mcore_group_communicator(g, &group_comm) == MCORE_STATUS_OK, "group_communicator");
    CHECK(n_kinds >= 5, "only %d kinds have a communicator", n_kinds);
    for (int k = 0; k < KINDS; k++) CHECK(!cached[k] || use_comm(vt, cached[k]), "kind %d before suspend", k);
    int runs = 0;
    for (int run = 0; run < 20; run++, runs++) {
        size_t n = 0;
        uint64_t before = generation();
        CHECK(mcore_suspend(NULL, &n) == MCORE_STATUS_OK && n > 0, "suspend (run %d): %zu", run, n);
        void *c = NULL;
        CHECK(mcore_runtime_communicator(MCORE_GROUP_KIND_TENSOR_MODEL_PARALLEL, &c) == MCORE_STATUS_SUSPENDED,
              "a suspended kind's handle is refused");
        CHECK(mcore_resume(NULL, &n) == MCORE_STATUS_OK && n > 0, "resume (run %d)", run);
        uint64_t after = generation();
        CHECK(after != before && after != g0, "recreate mode released the handles: generation %llu -> %llu",
              (unsigned long long)before, (unsigned long long)after);
        for (int k = 0; k < KINDS; k++) {
            if (!cached[k]) continue;
            /* Stale (the generation moved on): fetch again, never use the old one. */
            void *fresh = NULL;
            CHECK(mcore_runtime_communicator(k, &fresh) == MCORE_STATUS_OK && use_comm(vt, fresh), "kind %d", k);
            cached[k] = fresh;
        }
        size_t n_again = 0;
        CHECK(mcore_grid_pg_collection(NULL, pg, PG_MAX, &n_again) == MCORE_STATUS_OK && n_again == n_pg, "pg again");
        for (size_t i = 0; i < n_again; i++) CHECK(use_comm(vt, pg[i].comm), "pg field %s", pg[i].field);
        void *group_now = NULL;
        CHECK(mcore_group_communicator(g, &group_now) == MCORE_STATUS_OK && group_now == group_comm,
              "a suspend leaves a group made after init alone");
        CHECK(use_comm(vt, group_comm), "the cached group handle still works");
        CHECK(generation() == after, "nothing else moves the generation");
    }
    mcore_group_destroy(g);
    return runs;
}

typedef void *(*caller_fn)(void *);
typedef void (*destroy_fn)(void *);

/* Start `caller` on `handle`, destroy it once the thread runs (after `delay_us`), join, check. */
static void race_once(const char *what, void *handle, caller_fn caller, destroy_fn destroy, long delay_us,
                      int *ok, int *refused) {
    struct race r;
    memset(&r, 0, sizeof r);
    r.handle = handle;
    pthread_t t;
    if (pthread_create(&t, NULL, caller, &r) != 0) {
        CHECK(0, "%s: pthread_create", what);
        return;
    }
    while (!atomic_load(&r.started)) sleep_us(50);
    if (delay_us) sleep_us(delay_us);
    destroy(handle);
    pthread_join(t, NULL);
    CHECK(r.other == 0, "%s: a call returned status %d: %s", what, (int)r.other_status, r.other_msg);
    *ok += r.ok;
    *refused += r.refused;
}

static void destroy_topology(void *h) { mcore_topology_destroy(h); }
static void destroy_plan(void *h) { mcore_recovery_plan_destroy(h); }
static void destroy_tracker(void *h) { mcore_rng_tracker_destroy(h); }
static void destroy_store(void *h) { mcore_store_destroy(h); }
static void destroy_group(void *h) { mcore_group_destroy(h); }

static struct mcore_topology *make_topology(void) {
    mcore_topology_config c;
    if (mcore_topology_config_init(&c) != MCORE_STATUS_OK) return NULL;
    c.tp = 2;
    struct mcore_topology *t = NULL;
    if (mcore_topology_create(&c, 8, &t) != MCORE_STATUS_OK) return NULL;
    return t;
}

static void report(const char *what, int ok, int refused) {
    printf("handle_races %s: %d runs, %d calls answered, %d refused after the destroy, no crash\n", what, RUNS, ok,
           refused);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s GLOO_PLUGIN\n", argv[0]);
        return 2;
    }
    int ok, refused;

    ok = refused = 0;
    for (int i = 0; i < RUNS; i++) {
        struct mcore_topology *t = make_topology();
        CHECK(t != NULL, "topology_create");
        if (t) race_once("topology", t, topology_caller, destroy_topology, 100, &ok, &refused);
    }
    report("topology", ok, refused);

    ok = refused = 0;
    for (int i = 0; i < RUNS; i++) {
        struct mcore_topology *t = make_topology();
        const uint32_t failed[] = {7};
        struct mcore_recovery_plan *p = NULL;
        CHECK(t && mcore_recovery_plan_create(t, failed, 1, NULL, 0, &p) == MCORE_STATUS_OK, "plan_create");
        mcore_topology_destroy(t);
        if (p) race_once("recovery plan", p, plan_caller, destroy_plan, 100, &ok, &refused);
    }
    report("recovery plan", ok, refused);

    ok = refused = 0;
    for (int i = 0; i < RUNS; i++) {
        mcore_rng_coords c;
        memset(&c, 0, sizeof c);
        c.struct_size = sizeof c;
        c.world_size = 1;
        struct mcore_rng_tracker *tr = mcore_rng_tracker_create(&c);
        CHECK(tr != NULL, "rng_tracker_create");
        CHECK(tr && mcore_rng_tracker_cpu_add(tr, "default", 42) == MCORE_STATUS_OK, "rng_tracker_cpu_add");
        if (tr) race_once("rng tracker", tr, tracker_caller, destroy_tracker, 100, &ok, &refused);
    }
    report("rng tracker", ok, refused);

    ok = refused = 0;
    for (int i = 0; i < RUNS; i++) {
        struct mcore_store *s = NULL;
        CHECK(mcore_store_tcp_create("127.0.0.1", 0, true, 5000, &s) == MCORE_STATUS_OK, "store_tcp_create");
        if (s) race_once("store", s, store_waiter, destroy_store, 5000, &ok, &refused);
    }
    report("store", ok, refused);

    /* Groups: a world of one over the Gloo plugin, the group {0} made and waited for while destroyed. */
    mcore_init_args args;
    CHECK(mcore_init_args_init(&args) == MCORE_STATUS_OK, "init_args_init");
    args.backend = argv[1];
    args.timeout_ms = 30000;
    mcore_status s = mcore_initialize(&args, NULL);
    CHECK(s == MCORE_STATUS_OK, "initialize");
    if (s == MCORE_STATUS_OK) {
        ok = refused = 0;
        const uint32_t ranks[] = {0};
        for (int i = 0; i < RUNS; i++) {
            struct mcore_group *g = NULL;
            CHECK(mcore_group_create("g", ranks, 1, NULL, &g) == MCORE_STATUS_OK, "group_create (run %d)", i);
            if (g) race_once("group", g, group_waiter, destroy_group, 0, &ok, &refused);
        }
        report("group", ok, refused);
        /* Groups destroyed while their creation runs, then the runtime destroyed and the process
         * ended: no creation may call the plugin after mcore_destroy returned (one that did
         * crashed in Gloo's teardown at exit, 59 of 100 runs before the fix). */
        for (int i = 0; i < 20; i++) {
            char name[16];
            snprintf(name, sizeof name, "x%d", i);
            struct mcore_group *g = NULL;
            CHECK(mcore_group_create(name, ranks, 1, NULL, &g) == MCORE_STATUS_OK, "group_create %s", name);
            if (g) mcore_group_destroy(g);
        }
        /* The plugin the library loaded (the same path: the same instance and user_data). */
        void *so = dlopen(argv[1], RTLD_NOW | RTLD_NOLOAD);
        mcore_backend_plugin_v1_fn entry = so ? (mcore_backend_plugin_v1_fn)dlsym(so, "mcore_backend_plugin_v1") : NULL;
        const mcore_backend_v1 *vt = entry ? entry() : NULL;
        CHECK(vt && vt->allreduce_sum_i64, "the loaded plugin's vtable (%s)", so ? "no entry" : dlerror());
        if (vt && vt->allreduce_sum_i64) {
            int runs = cached_handles(vt);
            printf("handle_races cached communicators: %d suspend/resume runs (recreate mode), stale ones reported by "
                   "the generation, fresh and kept ones used, no crash\n",
                   runs);
        }
        uint64_t before_destroy = generation();
        CHECK(mcore_destroy() == MCORE_STATUS_OK, "destroy");
        CHECK(generation() != before_destroy, "destroy moves the generation on");
    }
    if (failures) {
        fprintf(stderr, "handle_races: %d failure(s)\n", failures);
        return 1;
    }
    return 0;
}
