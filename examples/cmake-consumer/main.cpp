// A C++ program using the installed package (find_package(McoreInit)): 4 ranks under mcore-launch,
// tensor parallel 2 on Gloo; every rank all-reduces its rank over its tensor-parallel group.
#include <mcore_init.h>

#include <cstdint>
#include <cstdio>

int main() {
    if (mcore_abi_version() != MCORE_ABI_VERSION) {    // header and library agree
        std::fprintf(stderr, "ABI mismatch: header %d, library %u\n", MCORE_ABI_VERSION, mcore_abi_version());
        return 1;
    }
    mcore_topology_config layout;
    mcore_topology_config_init(&layout);
    layout.tp = 2;
    mcore_init_args args;
    mcore_init_args_init(&args);
    args.topology = &layout;
    args.backend = "gloo";
    if (mcore_initialize(&args, nullptr) != MCORE_STATUS_OK) {
        std::fprintf(stderr, "init failed: %s\n", mcore_last_error_message());
        return 1;
    }
    uint32_t rank = 0, world = 0;
    mcore_runtime_world(&rank, &world);
    int64_t sum[1] = {rank};
    if (mcore_runtime_allreduce_sum_i64(MCORE_GROUP_KIND_TENSOR_MODEL_PARALLEL, sum, 1) != MCORE_STATUS_OK) {
        std::fprintf(stderr, "all-reduce failed: %s\n", mcore_last_error_message());
        return 1;
    }
    int64_t first = rank - rank % 2;                   // tp peers: {first, first + 1}
    std::printf("rank %u of %u: tp group sum %lld (%s)\n", rank, world, (long long)sum[0],
                sum[0] == 2 * first + 1 ? "ok" : "WRONG");
    mcore_destroy();
    return sum[0] == 2 * first + 1 ? 0 : 1;
}
