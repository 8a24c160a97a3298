/* Per-rank RNG from C: seed a rank's streams with Megatron's policy, launch "kernels" on the
 * model-parallel stream, reproduce their numbers with the CPU Philox, checkpoint and restore. */
#include "mcore_init.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                    \
    do {                                                                               \
        mcore_status st_ = (call);                                                     \
        if (st_ != MCORE_STATUS_OK) {                                                  \
            fprintf(stderr, "%s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call,        \
                    mcore_status_str(st_), mcore_last_error_message());                \
            return 1;                                                                  \
        }                                                                              \
    } while (0)

#define EXPECT(cond)                                                                   \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);        \
            return 1;                                                                  \
        }                                                                              \
    } while (0)

int main(void) {
    /* rank 5 of 8 with tp=2, pp=2: pp_rank 1, tp_rank 1 */
    mcore_rng_coords coords;
    CHECK(mcore_rng_coords_default(&coords));
    coords.world_size = 8;
    coords.rank = 5;
    coords.pp_rank = 1;
    coords.tp_rank = 1;
    coords.dp_rank = 0;

    mcore_rng_named_seed seeds[8];
    size_t n = 0;
    CHECK(mcore_rng_policy_seeds("megatron", 1234, false, &coords, NULL, 0, seeds, 8, &n));
    EXPECT(n == 4);
    for (size_t i = 0; i < n; i++) printf("rank %u %-20s %llu\n", coords.rank, seeds[i].name, (unsigned long long)seeds[i].seed);
    EXPECT(strcmp(seeds[2].name, "model-parallel-rng") == 0 && seeds[2].seed == 1234 + 100 + 2718 + 1);

    mcore_rng_tracker *t = mcore_rng_tracker_create(&coords);
    EXPECT(t != NULL);
    CHECK(mcore_rng_tracker_seed(t, "megatron", 1234, false, NULL, 0));

    /* a dropout kernel that needs 10 numbers per thread: launch state, then the numbers thread 0 gets */
    mcore_rng_state launch;
    CHECK(mcore_rng_tracker_fork(t, "model-parallel-rng", 10, &launch));
    EXPECT(launch.seed == 4053 && launch.offset == 0);
    float u[10];
    CHECK(mcore_rng_philox_fill_uniform(launch.seed, 0, launch.offset, u, 10));
    for (int i = 0; i < 10; i++) EXPECT(u[i] > 0.0f && u[i] <= 1.0f);

    /* checkpoint, draw, restore, draw again: the same launch offsets and CPU numbers */
    size_t need = 0;
    EXPECT(mcore_rng_tracker_save(t, NULL, 0, &need) == MCORE_STATUS_BUFFER_TOO_SMALL && need > 0);
    unsigned char *blob = malloc(need);
    EXPECT(blob != NULL);
    size_t len = 0;
    CHECK(mcore_rng_tracker_save(t, blob, need, &len));
    mcore_rng_state a, b;
    uint32_t x[4], y[4];
    CHECK(mcore_rng_tracker_fork(t, "model-parallel-rng", 10, &a));
    EXPECT(a.offset == 12); /* 10 rounded up to a multiple of 4 */
    CHECK(mcore_rng_tracker_cpu_fill_u32(t, "default", x, 4));
    CHECK(mcore_rng_tracker_restore(t, blob, len, 0));
    CHECK(mcore_rng_tracker_fork(t, "model-parallel-rng", 10, &b));
    CHECK(mcore_rng_tracker_cpu_fill_u32(t, "default", y, 4));
    EXPECT(a.seed == b.seed && a.offset == b.offset && memcmp(x, y, sizeof x) == 0);

    /* another rank's tracker refuses this blob */
    coords.rank = 7;
    mcore_rng_tracker *other = mcore_rng_tracker_create(&coords);
    EXPECT(other != NULL);
    EXPECT(mcore_rng_tracker_restore(other, blob, len, 0) == MCORE_STATUS_WRONG_RANK);
    printf("restore on rank 7: %s\n", mcore_last_error_message());

    mcore_rng_tracker_destroy(other);
    mcore_rng_tracker_destroy(t);
    free(blob);
    return 0;
}
