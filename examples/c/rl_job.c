/* An RL job's layout in one initialization: a trainer grid (tp 2, pp 2) and a rollout engine
 * grid (tp 4), either colocated on every rank or side by side (the trainer on the first half of
 * the world, the rollout on the second), then a weight-sync group made after init by its members
 * only: trainer rank 0 and every rollout tensor-parallel leader. Every other rank does nothing
 * for it.
 *
 *   mcore-launch --nproc 16 -- rl_job [colocated|side-by-side]     (backend: MCORE_EXAMPLE_BACKEND,
 *                                                                    default "gloo")
 *
 * Prints one line per rank: its place in both grids and, for the weight-sync members, the
 * verified sum over the group. Exits 1 on any error (the message names what failed). */
#include <mcore_init.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what) {
    fprintf(stderr, "rl_job: %s: %s\n", what, mcore_last_error_message());
    mcore_destroy();
    return 1;
}

/* "tp 1/2" for this rank's group of `kind` in `grid`, or "-" when it has none there. */
static void place(const char *grid, mcore_group_kind kind, const char *label, char *out, size_t len) {
    mcore_group_info info;
    if (mcore_grid_group(grid, kind, &info) == MCORE_STATUS_OK) {
        snprintf(out, len, "%s %u/%u", label, info.rank, info.size);
    } else {
        snprintf(out, len, "%s -", label);
    }
}

int main(int argc, char **argv) {
    int side_by_side = argc > 1 && strcmp(argv[1], "side-by-side") == 0;
    const char *world_env = getenv("WORLD_SIZE");
    const char *backend = getenv("MCORE_EXAMPLE_BACKEND");
    uint32_t world = world_env ? (uint32_t)strtoul(world_env, NULL, 10) : 1;
    if (world < 8 || world % 8 != 0) {
        fprintf(stderr, "rl_job: run me under mcore-launch or torchrun with a multiple of 8 ranks (WORLD_SIZE=%s)\n",
                world_env ? world_env : "unset");
        return 2;
    }
    uint32_t half = world / 2;

    /* The trainer: the first grid, the default one every mcore_runtime_* call answers. */
    mcore_topology_config train;
    mcore_topology_config_init(&train);
    train.tp = 2;
    train.pp = 2;
    /* The rollout engine: tp 4 over the same ranks, or over the second half. */
    mcore_topology_config rollout;
    mcore_topology_config_init(&rollout);
    rollout.tp = 4;
    if (side_by_side) {
        train.local_world_size = half;
        rollout.rank_offset = half;
        rollout.local_world_size = half;
    }
    mcore_grid_spec rollout_grid;
    mcore_grid_spec_init(&rollout_grid);
    rollout_grid.name = "rollout";
    rollout_grid.topology = &rollout;
    rollout_grid.seed_rng = true; /* its own tracker, from its own coordinates */
    rollout_grid.seed = 7;
    const mcore_grid_spec *grids[] = {&rollout_grid};

    mcore_init_args args;
    mcore_init_args_init(&args);
    args.topology = &train;
    args.grid_name = "train";
    args.grids = grids;
    args.grids_len = 1;
    args.backend = backend ? backend : "gloo";
    args.seed_rng = true;
    args.seed = 1234;
    if (mcore_initialize(&args, NULL) != MCORE_STATUS_OK) return fail("mcore_initialize");

    uint32_t rank, size;
    if (mcore_runtime_world(&rank, &size) != MCORE_STATUS_OK) return fail("mcore_runtime_world");
    char t_tp[32], t_pp[32], t_dp[32], r_tp[32], r_dp[32];
    place("train", MCORE_GROUP_KIND_TENSOR_MODEL_PARALLEL, "tp", t_tp, sizeof t_tp);
    place("train", MCORE_GROUP_KIND_PIPELINE_MODEL_PARALLEL, "pp", t_pp, sizeof t_pp);
    place("train", MCORE_GROUP_KIND_DATA_PARALLEL, "dp", t_dp, sizeof t_dp);
    place("rollout", MCORE_GROUP_KIND_TENSOR_MODEL_PARALLEL, "tp", r_tp, sizeof r_tp);
    place("rollout", MCORE_GROUP_KIND_DATA_PARALLEL, "dp", r_dp, sizeof r_dp);

    /* Weight sync: trainer rank 0 plus each rollout tp leader (the rollout grid's first rank,
     * every 4th after it). Only these ranks call mcore_group_create. */
    uint32_t members[64];
    size_t n = 0;
    uint32_t first = side_by_side ? half : 0;
    if (first != 0) members[n++] = 0;
    for (uint32_t r = first; r < world && n < 64; r += 4) members[n++] = r;
    int member = 0;
    for (size_t i = 0; i < n; i++) member |= members[i] == rank;
    char sync[64] = "weight-sync -";
    if (member) {
        mcore_group *ws = NULL;
        if (mcore_group_create("weight-sync", members, n, NULL, &ws) != MCORE_STATUS_OK) return fail("weight-sync create");
        if (mcore_group_wait(ws) != MCORE_STATUS_OK) {
            mcore_group_destroy(ws);
            return fail("weight-sync wait");
        }
        int64_t values[2] = {(int64_t)rank, 1};
        if (mcore_group_allreduce_sum_i64(ws, values, 2) != MCORE_STATUS_OK) {
            mcore_group_destroy(ws);
            return fail("weight-sync all-reduce");
        }
        int64_t want = 0;
        for (size_t i = 0; i < n; i++) want += members[i];
        mcore_group_destroy(ws);
        if (values[0] != want || values[1] != (int64_t)n) {
            fprintf(stderr, "rl_job: weight-sync all-reduce gave [%lld, %lld], want [%lld, %zu]\n",
                    (long long)values[0], (long long)values[1], (long long)want, n);
            mcore_destroy();
            return 1;
        }
        snprintf(sync, sizeof sync, "weight-sync %zu members, sum %lld ok", n, (long long)values[0]);
    }
    printf("rank %u: train %s %s %s | rollout %s %s | %s\n", rank, t_tp, t_pp, t_dp, r_tp, r_dp, sync);
    if (mcore_destroy() != MCORE_STATUS_OK) return fail("mcore_destroy");
    return 0;
}
