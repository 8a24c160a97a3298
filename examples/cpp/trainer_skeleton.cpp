// A minimal C++ trainer skeleton on mcore_init: run it under a launcher that sets torchrun's
// variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), e.g.
//   mcore-launch --nproc 2 -- trainer_skeleton --tp 2 [--backend gloo|nccl|<plugin.so>]
// It brings up the parallel state, fetches the tensor-parallel communicator handle (fetched
// again after a suspend/resume when the communicator generation moved), prints
// where this rank sits, takes the RNG streams the runtime seeded Megatron's way, forks the
// model-parallel stream once (what a dropout kernel would do), and tears everything down.
#include <mcore_init.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

bool check(mcore_status s, const char *what) {
    if (s == MCORE_STATUS_OK) return true;
    std::fprintf(stderr, "%s failed: %s: %s\n", what, mcore_status_str(s), mcore_last_error_message());
    return false;
}

struct Options {
    const char *backend = nullptr;  // NULL: the library's default (gloo)
    int tp = 1, pp = 1;
    int64_t seed = 1234;
};

bool parse(int argc, char **argv, Options *o) {
    for (int i = 1; i < argc; ++i) {
        std::string flag = argv[i];
        if (i + 1 >= argc) {
            std::fprintf(stderr, "%s needs a value\n", flag.c_str());
            return false;
        }
        const char *v = argv[++i];
        if (flag == "--backend") o->backend = v;
        else if (flag == "--tp") o->tp = std::atoi(v);
        else if (flag == "--pp") o->pp = std::atoi(v);
        else if (flag == "--seed") o->seed = std::atoll(v);
        else {
            std::fprintf(stderr, "unknown option %s (use --backend, --tp, --pp, --seed)\n", flag.c_str());
            return false;
        }
    }
    return true;
}

uint32_t group_rank(int32_t kind, uint32_t *size) {
    mcore_group_info info{};
    if (mcore_runtime_group(kind, &info) != MCORE_STATUS_OK) {
        *size = 0;
        return 0;
    }
    *size = info.size;
    return info.rank;
}

int train(const Options &opt) {
    mcore_topology_config layout;
    if (!check(mcore_topology_config_init(&layout), "mcore_topology_config_init")) return 1;
    layout.tp = opt.tp;
    layout.pp = opt.pp;
    mcore_init_args args;
    if (!check(mcore_init_args_init(&args), "mcore_init_args_init")) return 1;
    args.topology = &layout;
    args.backend = opt.backend;
    args.seed_rng = true;  // the runtime seeds this rank's streams Megatron's way
    args.seed = opt.seed;
    bool already = false;
    if (!check(mcore_initialize(&args, &already), "mcore_initialize")) return 1;

    uint32_t rank = 0, world = 0;
    if (!check(mcore_runtime_world(&rank, &world), "mcore_runtime_world")) return 1;
    // An ncclComm_t with NCCL: hand it to your own kernels. Cache it with the communicator
    // generation; it is valid while the generation reads the same.
    void *tp_comm = nullptr;
    uint64_t tp_comm_generation = 0;
    if (!check(mcore_comm_generation(&tp_comm_generation), "mcore_comm_generation") ||
        !check(mcore_runtime_communicator(MCORE_GROUP_KIND_TENSOR_MODEL_PARALLEL, &tp_comm),
               "mcore_runtime_communicator"))
        return 1;

    uint32_t tp_size = 0, pp_size = 0, dp_size = 0;
    uint32_t tp_rank = group_rank(MCORE_GROUP_KIND_TENSOR_MODEL_PARALLEL, &tp_size);
    uint32_t pp_rank = group_rank(MCORE_GROUP_KIND_PIPELINE_MODEL_PARALLEL, &pp_size);
    uint32_t dp_rank = group_rank(MCORE_GROUP_KIND_DATA_PARALLEL, &dp_size);
    uint32_t tp_ranks[64];
    size_t n = 0;
    if (!check(mcore_runtime_group_ranks(MCORE_GROUP_KIND_TENSOR_MODEL_PARALLEL, tp_ranks, 64, &n),
               "mcore_runtime_group_ranks"))
        return 1;
    std::string members;
    for (size_t i = 0; i < n; ++i) members += (i ? "," : "") + std::to_string(tp_ranks[i]);
    std::printf("rank %u/%u: tp %u/%u [%s] pp %u/%u dp %u/%u; pipeline next %d prev %d last %d; "
                "first stage %d, embedding %d; tp communicator %p\n",
                rank, world, tp_rank, tp_size, members.c_str(), pp_rank, pp_size, dp_rank, dp_size,
                mcore_get_pipeline_model_parallel_next_rank(), mcore_get_pipeline_model_parallel_prev_rank(),
                mcore_get_pipeline_model_parallel_last_rank(), mcore_is_pipeline_first_stage(-1),
                mcore_is_rank_in_embedding_group(-1), tp_comm);

    // Between phases (an RL engine lending its memory to generation): suspend and resume every
    // communicator, collectively. A backend without native suspend (Gloo, HCCL) creates them
    // again with new handles, and the generation moves on: fetch cached handles again.
    if (!check(mcore_suspend(nullptr, nullptr), "mcore_suspend")) return 1;
    if (!check(mcore_resume(nullptr, nullptr), "mcore_resume")) return 1;
    uint64_t now = 0;
    if (!check(mcore_comm_generation(&now), "mcore_comm_generation")) return 1;
    if (now != tp_comm_generation) {
        if (!check(mcore_runtime_communicator(MCORE_GROUP_KIND_TENSOR_MODEL_PARALLEL, &tp_comm),
                   "mcore_runtime_communicator"))
            return 1;
        tp_comm_generation = now;
        std::printf("rank %u: after suspend/resume the tp communicator was created again: %p\n", rank, tp_comm);
    }

    // Sanity check the communicator: every tp rank contributes 1.
    int64_t one = 1;
    if (!check(mcore_runtime_allreduce_sum_i64(MCORE_GROUP_KIND_TENSOR_MODEL_PARALLEL, &one, 1), "allreduce"))
        return 1;
    if (one != static_cast<int64_t>(tp_size)) {
        std::fprintf(stderr, "tp all-reduce gave %lld, expected %u\n", static_cast<long long>(one), tp_size);
        return 1;
    }

    // This rank's RNG streams, seeded at init like Megatron's model_parallel_cuda_manual_seed.
    mcore_rng_tracker *rng = nullptr;
    if (!check(mcore_runtime_rng_tracker(&rng), "mcore_runtime_rng_tracker")) return 1;
    int rc = 0;
    mcore_rng_state launch{};
    if (check(mcore_rng_tracker_fork(rng, "model-parallel-rng", 1024, &launch), "mcore_rng_tracker_fork")) {
        std::printf("rank %u: model-parallel-rng launch seed %llu offset %llu\n", rank,
                    static_cast<unsigned long long>(launch.seed), static_cast<unsigned long long>(launch.offset));
    } else {
        rc = 1;
    }
    mcore_rng_tracker_destroy(rng);
    if (!check(mcore_destroy(), "mcore_destroy")) return 1;
    return rc;
}

}  // namespace

int main(int argc, char **argv) {
    Options opt;
    if (!parse(argc, argv, &opt)) return 2;
    return train(opt);
}
