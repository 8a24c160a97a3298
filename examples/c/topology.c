/* Build a Megatron-Core layout (16 ranks, tp=2, pp=4) and read rank 5's groups through the C API. */
#include "mcore_init.h"
#include <stdio.h>

#define CHECK(call) do { mcore_status s_ = (call); if (s_ != MCORE_STATUS_OK) { \
    fprintf(stderr, "%s: %s (%s)\n", #call, mcore_status_str(s_), mcore_last_error_message()); return 1; } } while (0)

int main(void) {
    mcore_topology_config cfg;
    CHECK(mcore_topology_config_init(&cfg));
    cfg.tp = 2;
    cfg.pp = 4;
    mcore_topology *topo = NULL;
    CHECK(mcore_topology_create(&cfg, 16, &topo));

    /* Rank 5's data-parallel group is [5, 7] (the example of docs/topology.md, "The rank generator"); rank 5 is its rank 0. */
    uint32_t ranks[16];
    size_t n = 0;
    CHECK(mcore_topology_group_ranks(topo, 5, MCORE_GROUP_KIND_DATA_PARALLEL, ranks, 16, &n));
    mcore_pipeline_info pipe;
    CHECK(mcore_topology_pipeline(topo, 5, &pipe));
    int32_t kind = -1;
    CHECK(mcore_group_kind_from_name("tensor_model_parallel", &kind));
    uint64_t tp_groups = 0;
    CHECK(mcore_topology_group_count(topo, kind, &tp_groups));
    printf("rank 5: dp group [%u, %u], pipeline stage %u of %u (next %u), %llu tp groups\n",
           ranks[0], ranks[1], pipe.stage, pipe.num_stages, pipe.next, (unsigned long long)tp_groups);
    int ok = n == 2 && ranks[0] == 5 && ranks[1] == 7 && pipe.stage == 1 && pipe.next == 9 && tp_groups == 8;

    /* A bad configuration is refused with a message naming the value. */
    mcore_topology *bad = NULL;
    cfg.tp = 3;
    ok = ok && mcore_topology_create(&cfg, 16, &bad) == MCORE_STATUS_INVALID_CONFIG && bad == NULL;
    mcore_topology_destroy(topo);
    return ok ? 0 : 1;
}
