/* Plan recovery through the C API: 16 ranks, tp=2, pp=2; rank 5 fails. Its data-parallel replica
 * (ranks 4, 5, 12, 13) leaves and the 12 others form a tp=2 pp=2 dp=3 layout, order kept. */
#include "mcore_init.h"
#include <stdio.h>
#include <string.h>

#define CHECK(call) do { mcore_status s_ = (call); if (s_ != MCORE_STATUS_OK) { \
    fprintf(stderr, "%s: %s (%s)\n", #call, mcore_status_str(s_), mcore_last_error_message()); return 1; } } while (0)

int main(void) {
    mcore_topology_config cfg;
    CHECK(mcore_topology_config_init(&cfg));
    cfg.tp = 2;
    cfg.pp = 2;
    mcore_topology *topo = NULL;
    CHECK(mcore_topology_create(&cfg, 16, &topo));

    const uint32_t failed[] = {5};
    mcore_recovery_plan *plan = NULL;
    CHECK(mcore_recovery_plan_create(topo, failed, 1, NULL, 0, &plan));
    mcore_topology *next = NULL;
    CHECK(mcore_recovery_plan_topology(plan, &next));
    mcore_topology_sizes sizes;
    CHECK(mcore_topology_get_sizes(next, &sizes));
    uint32_t dropped[16];
    size_t n = 0;
    CHECK(mcore_recovery_plan_dropped(plan, false, dropped, 16, &n));
    int64_t new6 = -2, new5 = -2;
    CHECK(mcore_recovery_plan_new_rank(plan, 6, &new6));
    CHECK(mcore_recovery_plan_new_rank(plan, 5, &new5));
    printf("without rank 5: world %u (tp %u pp %u dp %u), %zu ranks dropped, rank 6 -> %lld\n", sizes.world_size,
           sizes.tp, sizes.pp, sizes.dp, n, (long long)new6);
    const uint32_t want[] = {4, 5, 12, 13};
    int ok = sizes.world_size == 12 && sizes.dp == 3 && n == 4 && memcmp(dropped, want, sizeof want) == 0 &&
             new6 == 4 && new5 == -1;

    /* A rank of every replica: no valid layout remains, said so. */
    const uint32_t every[] = {0, 2, 4, 6};
    mcore_recovery_plan *none = NULL;
    ok = ok && mcore_recovery_plan_create(topo, every, 4, NULL, 0, &none) == MCORE_STATUS_INVALID_CONFIG &&
         none == NULL && strstr(mcore_last_error_message(), "no valid layout remains") != NULL;
    mcore_topology_destroy(next);
    mcore_recovery_plan_destroy(plan);
    mcore_topology_destroy(topo);
    return ok ? 0 : 1;
}
