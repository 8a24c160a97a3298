#include <mcore_init.h>
#include <stdio.h>

int main(void) {                       /* run under mcore-launch, torchrun, srun or mpirun */
    mcore_topology_config layout;      /* the parallel layout: sizes, order */
    mcore_topology_config_init(&layout);
    layout.tp = 2;
    layout.pp = 2;
    mcore_init_args args;
    mcore_init_args_init(&args);
    args.topology = &layout;
    args.backend = "gloo";             /* or "nccl", or a plugin path */
    args.seed_rng = true;              /* seed this rank's RNG streams (megatron policy) */
    args.seed = 1234;
    if (mcore_initialize(&args, NULL) != MCORE_STATUS_OK) {
        fprintf(stderr, "init failed: %s\n", mcore_last_error_message());
        return 1;
    }
    int64_t ones[1] = {1};             /* an all-reduce over this rank's tensor-parallel group */
    if (mcore_runtime_allreduce_sum_i64(MCORE_GROUP_KIND_TENSOR_MODEL_PARALLEL, ones, 1) != MCORE_STATUS_OK) {
        fprintf(stderr, "all-reduce failed: %s\n", mcore_last_error_message());
        return 1;
    }
    printf("tp rank %d of %d (sum %lld), pp stage %d\n", mcore_get_tensor_model_parallel_rank(),
           mcore_get_tensor_model_parallel_world_size(), (long long)ones[0],
           mcore_get_pipeline_model_parallel_rank());
    void *tp_comm = NULL;              /* ncclComm_t for NCCL, the plugin's handle otherwise */
    mcore_runtime_communicator(MCORE_GROUP_KIND_TENSOR_MODEL_PARALLEL, &tp_comm);
    mcore_destroy();
    return 0;
}
