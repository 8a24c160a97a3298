/* A trainer rank joining a weight-sync group from NCCL's unique id, with no rendezvous store and
 * no mcore_initialize (docs/id-groups.md). Usage:
 *
 *   id_group_trainer RANK WORLD ID_FILE [TIMEOUT_MS [BYTES]]
 *
 * Rank 0 mints the id and writes its standard base64 into ID_FILE (a rollout engine would get it
 * in its init info as nccl_unique_id_b64); the other ranks, trainers or foreign peers, read it
 * from there. Every rank joins with vLLM's warm-up all-reduce inside the join, then rank 0
 * broadcasts BYTES bytes (default 1 MiB) whose values every rank checks. One line per rank on
 * stdout; exit status 0 when all went well, 3 when the join timed out, 1 otherwise. Without
 * arguments it prints this usage and exits 0 (scripts/gpu-tests.sh runs it on GPUs). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, nanosleep */
#include <mcore_init.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static unsigned char pattern(size_t i) { return (unsigned char)((i * 131 + 7) % 251); }

/* Rank 0: mint the id, write its base64 to `path` (renamed into place). */
static int publish(const char *path, uint8_t id[128]) {
    size_t n = 0;
    char text[256], tmp[4096];
    if (mcore_unique_id_create("nccl", id, 128, &n) != MCORE_STATUS_OK ||
        mcore_unique_id_to_base64(id, n, text, sizeof text, &n) != MCORE_STATUS_OK) {
        fprintf(stderr, "rank 0: cannot mint the id: %s\n", mcore_last_error_message());
        return 1;
    }
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0 || rename(tmp, path) != 0) {
        perror(path);
        return 1;
    }
    return 0;
}

/* Other ranks: wait up to `timeout_ms` for `path`, decode it into `id`. */
static int receive(const char *path, uint8_t id[128], double timeout_ms) {
    char text[256] = {0};
    double start = now_ms();
    for (;;) {
        FILE *f = fopen(path, "r");
        if (f) {
            size_t got = fread(text, 1, sizeof text - 1, f);
            fclose(f);
            text[got] = 0;
            break;
        }
        if (now_ms() - start > timeout_ms) {
            fprintf(stderr, "no id in %s after %.0f ms\n", path, timeout_ms);
            return 1;
        }
        struct timespec t = {0, 5000000};
        nanosleep(&t, NULL);
    }
    size_t n = 0;
    if (mcore_unique_id_from_base64(text, id, 128, &n) != MCORE_STATUS_OK || n != 128) {
        fprintf(stderr, "bad id in %s: %s\n", path, mcore_last_error_message());
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s RANK WORLD ID_FILE [TIMEOUT_MS [BYTES]]\n", argv[0]);
        return 0;
    }
    uint32_t rank = (uint32_t)strtoul(argv[1], NULL, 10), world = (uint32_t)strtoul(argv[2], NULL, 10);
    uint64_t timeout_ms = argc > 4 ? strtoull(argv[4], NULL, 10) : 120000;
    size_t bytes = argc > 5 ? (size_t)strtoull(argv[5], NULL, 10) : (size_t)1 << 20;
    uint8_t id[128];
    if (rank == 0 ? publish(argv[3], id) : receive(argv[3], id, (double)timeout_ms)) return 1;

    mcore_id_group_args args;
    mcore_id_group_args_init(&args);
    args.name = "weight_sync";
    args.id = id;
    args.id_len = sizeof id;
    args.world_size = world;
    args.rank = rank;
    args.timeout_ms = timeout_ms;
    args.warmup = true;                /* the one-element float all-reduce vLLM's workers issue */
    mcore_id_group *group = NULL;
    double start = now_ms();
    mcore_status s = mcore_id_group_join(&args, &group);
    double took = now_ms() - start;
    if (s != MCORE_STATUS_OK) {
        printf("trainer rank %u of %u: join failed after %.0f ms: %s: %s\n", rank, world, took, mcore_status_str(s),
               mcore_last_error_message());
        return s == MCORE_STATUS_TIMEOUT ? 3 : 1;
    }
    unsigned char *buf = malloc(bytes ? bytes : 1);
    for (size_t i = 0; i < bytes; i++) buf[i] = rank == 0 ? pattern(i) : 0;
    double bstart = now_ms();
    s = mcore_id_group_broadcast(group, buf, bytes, 0);
    double btook = now_ms() - bstart;
    size_t bad = 0;
    for (size_t i = 0; s == MCORE_STATUS_OK && i < bytes; i++) bad += buf[i] != pattern(i);
    void *comm = NULL;
    mcore_id_group_communicator(group, &comm);
    printf("trainer rank %u of %u: joined with warm-up in %.0f ms, communicator %s, broadcast of %zu bytes %s in "
           "%.1f ms (%zu wrong)\n",
           rank, world, took, comm ? "set" : "NULL", bytes, s == MCORE_STATUS_OK ? "done" : mcore_last_error_message(),
           btook, bad);
    free(buf);
    mcore_id_group_destroy(group);
    return s == MCORE_STATUS_OK && bad == 0 && comm ? 0 : 1;
}
