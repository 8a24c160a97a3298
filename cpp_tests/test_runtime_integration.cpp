// The runtime (mcore_initialize / mcore_destroy) through the C ABI.
//  * RuntimeErrors: error paths in this process (no launcher environment).
//  * RuntimeLifecycle: a world of one with the Gloo plugin, init/destroy cycles in this process
//    (runs under valgrind and ASan with the rest of the unit tests).
//  * RuntimeIntegration: real multi-process runs. The parent re-executes this binary
//    (readlink /proc/self/exe) once per rank with --gtest_filter=RuntimeIntegrationChild.* and
//    MCORE_TEST_CHILD=1, RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set; children still
//    running at the deadline are killed.
#include "test_util.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <thread>
#include <string>
#include <vector>

using mcore_test::last_error;
using mcore_test::ScopedEnv;

namespace {

constexpr double kDeadlineS = 120.0;

std::vector<std::string> split_ports(const char *s) {
    std::vector<std::string> out;
    std::stringstream ss(s ? s : "");
    std::string item;
    while (std::getline(ss, item, ',')) out.push_back(item);
    return out;
}

// Runs `argv` as `world` ranks with torchrun's variables; returns the exit codes.
std::vector<int> run_ranks(const std::vector<std::string> &argv, int world, const std::vector<std::string> &env) {
    std::vector<pid_t> pids;
    for (int r = 0; r < world; ++r) {
        std::vector<std::string> e = env;
        e.push_back("RANK=" + std::to_string(r));
        e.push_back("LOCAL_RANK=" + std::to_string(r));
        e.push_back("WORLD_SIZE=" + std::to_string(world));
        e.push_back("LOCAL_WORLD_SIZE=" + std::to_string(world));
        e.push_back("MASTER_ADDR=127.0.0.1");
        pids.push_back(mcore_test::spawn(argv, e));
    }
    return mcore_test::wait_all(pids, kDeadlineS);
}

}  // namespace

TEST(RuntimeErrors, InitializeWithoutRankNamesRank) {
    ScopedEnv a("RANK", nullptr), b("WORLD_SIZE", nullptr), c("LOCAL_RANK", nullptr),
        d("OMPI_COMM_WORLD_RANK", nullptr), e("PMI_RANK", nullptr), f("SLURM_PROCID", nullptr);
    mcore_init_args args;
    ASSERT_EQ(mcore_init_args_init(&args), MCORE_STATUS_OK);
    bool already = true;
    EXPECT_EQ(mcore_initialize(&args, &already), MCORE_STATUS_INVALID_ARGUMENT);
    EXPECT_NE(last_error().find("RANK"), std::string::npos) << last_error();
    EXPECT_TRUE(already);  // out-param untouched on failure
    EXPECT_FALSE(mcore_is_initialized());
}

TEST(RuntimeErrors, BadArguments) {
    EXPECT_EQ(mcore_init_args_init(nullptr), MCORE_STATUS_INVALID_ARGUMENT);
    EXPECT_EQ(mcore_initialize(nullptr, nullptr), MCORE_STATUS_INVALID_ARGUMENT);
    ScopedEnv a("RANK", "0"), b("WORLD_SIZE", "notanumber");
    mcore_init_args args;
    ASSERT_EQ(mcore_init_args_init(&args), MCORE_STATUS_OK);
    EXPECT_EQ(mcore_initialize(&args, nullptr), MCORE_STATUS_INVALID_ARGUMENT);
    EXPECT_NE(last_error().find("notanumber"), std::string::npos) << last_error();
}

TEST(RuntimeErrors, GettersBeforeInit) {
    ASSERT_FALSE(mcore_is_initialized());
    EXPECT_EQ(mcore_get_pipeline_model_parallel_next_rank(), -1);
    EXPECT_NE(last_error().find("not initialized"), std::string::npos) << last_error();
    EXPECT_EQ(mcore_get_pipeline_model_parallel_prev_rank(), -1);
    EXPECT_EQ(mcore_get_pipeline_model_parallel_last_rank(), -1);
    EXPECT_EQ(mcore_get_virtual_pipeline_model_parallel_world_size(), -1);
    EXPECT_EQ(mcore_is_pipeline_first_stage(-1), -1);
    EXPECT_EQ(mcore_is_rank_in_embedding_group(-1), -1);
    uint32_t rank = 77, world = 77;
    EXPECT_EQ(mcore_runtime_world(&rank, &world), MCORE_STATUS_NOT_INITIALIZED);
    EXPECT_EQ(rank, 77u);
    mcore_group_info info{};
    EXPECT_EQ(mcore_runtime_group(MCORE_GROUP_KIND_TENSOR_MODEL_PARALLEL, &info), MCORE_STATUS_NOT_INITIALIZED);
    int64_t v = 1;
    EXPECT_EQ(mcore_runtime_allreduce_sum_i64(MCORE_GROUP_KIND_TENSOR_MODEL_PARALLEL, &v, 1),
              MCORE_STATUS_NOT_INITIALIZED);
    EXPECT_FALSE(last_error().empty());
    EXPECT_EQ(mcore_destroy(), MCORE_STATUS_OK);  // nothing to tear down is fine
}

TEST(RuntimeLifecycle, WorldOfOneInitDestroyCycles) {
#ifndef MCORE_TEST_GLOO_PLUGIN
    GTEST_SKIP() << "the package has no Gloo plugin (MCORE_INIT_GLOO_PLUGIN unset)";
#else
    for (int cycle = 0; cycle < 3; ++cycle) {
        std::string port = std::to_string(mcore_test::free_port());
        ScopedEnv a("RANK", "0"), b("WORLD_SIZE", "1"), c("MASTER_ADDR", "127.0.0.1"),
            d("MASTER_PORT", port.c_str()), e("LOCAL_RANK", "0"), f("LOCAL_WORLD_SIZE", "1");
        mcore_init_args args;
        ASSERT_EQ(mcore_init_args_init(&args), MCORE_STATUS_OK);
        args.backend = MCORE_TEST_GLOO_PLUGIN;
        args.timeout_ms = 30000;
        bool already = true;
        ASSERT_EQ(mcore_initialize(&args, &already), MCORE_STATUS_OK) << last_error();
        EXPECT_FALSE(already);
        EXPECT_TRUE(mcore_is_initialized());
        ASSERT_EQ(mcore_initialize(&args, &already), MCORE_STATUS_OK) << last_error();
        EXPECT_TRUE(already);
        uint32_t rank = 9, world = 9;
        ASSERT_EQ(mcore_runtime_world(&rank, &world), MCORE_STATUS_OK);
        EXPECT_EQ(rank, 0u);
        EXPECT_EQ(world, 1u);
        int64_t v[2] = {5, -3};
        ASSERT_EQ(mcore_runtime_allreduce_sum_i64(MCORE_GROUP_KIND_DATA_PARALLEL, v, 2), MCORE_STATUS_OK)
            << last_error();
        EXPECT_EQ(v[0], 5);
        EXPECT_EQ(v[1], -3);
        // Issue 34.7: a number that is no kind is INVALID_ARGUMENT naming it, not NOT_MEMBER of
        // a hierarchical level no layout has.
        uint32_t ranks[4];
        size_t n_ranks = 0;
        EXPECT_EQ(mcore_grid_group_ranks(nullptr, 9999, ranks, 4, &n_ranks), MCORE_STATUS_INVALID_ARGUMENT);
        EXPECT_NE(last_error().find("unknown group kind 9999"), std::string::npos) << last_error();
        mcore_group_info info;
        EXPECT_EQ(mcore_runtime_group(-5, &info), MCORE_STATUS_INVALID_ARGUMENT);
        EXPECT_NE(last_error().find("unknown group kind -5"), std::string::npos) << last_error();
        EXPECT_EQ(mcore_get_pipeline_model_parallel_next_rank(), 0);
        EXPECT_EQ(mcore_is_pipeline_first_stage(-1), 1);
        EXPECT_EQ(mcore_is_rank_in_embedding_group(-1), 1);
        ASSERT_EQ(mcore_destroy(), MCORE_STATUS_OK) << last_error();
        EXPECT_FALSE(mcore_is_initialized());
    }
#endif
}

// Issue #23: while one thread waits in mcore_initialize (rank 1 of 2 never comes), queries from
// another thread answer at once (not initialized) and a second initialize is refused at once
// (MCORE_STATUS_BUSY), 100 times each; the waiting initialize still ends with its timeout.
TEST(RuntimeLifecycle, QueriesAnswerAtOnceWhileInitializeWaits) {
#ifndef MCORE_TEST_GLOO_PLUGIN
    GTEST_SKIP() << "the package has no Gloo plugin (MCORE_INIT_GLOO_PLUGIN unset)";
#else
    std::string port = std::to_string(mcore_test::free_port());
    ScopedEnv a("RANK", "0"), b("WORLD_SIZE", "2"), c("MASTER_ADDR", "127.0.0.1"), d("MASTER_PORT", port.c_str()),
        e("LOCAL_RANK", "0"), f("LOCAL_WORLD_SIZE", "2");
    mcore_init_args args;
    ASSERT_EQ(mcore_init_args_init(&args), MCORE_STATUS_OK);
    args.backend = MCORE_TEST_GLOO_PLUGIN;
    args.timeout_ms = 4000;
    std::atomic<bool> done{false};
    mcore_status init_status = MCORE_STATUS_OK;
    std::string init_error;
    std::thread waiter([&] {
        init_status = mcore_initialize(&args, nullptr);
        init_error = last_error();
        done = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // into the check-in wait
    double worst_ms = 0;
    for (int i = 0; i < 100; ++i) {
        auto t0 = std::chrono::steady_clock::now();
        EXPECT_FALSE(mcore_is_initialized());
        uint32_t rank = 9, world = 9;
        EXPECT_EQ(mcore_runtime_world(&rank, &world), MCORE_STATUS_NOT_INITIALIZED);
        EXPECT_EQ(mcore_get_pipeline_model_parallel_next_rank(), -1);
        bool already = false;
        EXPECT_EQ(mcore_initialize(&args, &already), MCORE_STATUS_BUSY);
        double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        worst_ms = std::max(worst_ms, ms);
        EXPECT_LT(ms, 100.0) << "query " << i << " waited for the initialize of another thread";
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_NE(last_error().find("in progress"), std::string::npos) << last_error();
    EXPECT_FALSE(done.load()) << "the initialize ended before the queries were done: " << init_error;
    waiter.join();
    EXPECT_EQ(init_status, MCORE_STATUS_TIMEOUT) << init_error;
    EXPECT_NE(init_error.find("1"), std::string::npos) << init_error;
    EXPECT_FALSE(mcore_is_initialized());
    std::printf("queries during a waiting initialize: worst %.3f ms of 100\n", worst_ms);
#endif
}

// One rank of RuntimeIntegration.FourRanksTp2 (skipped unless started by it).
TEST(RuntimeIntegrationChild, Rank) {
    const char *child = std::getenv("MCORE_TEST_CHILD");
    if (child == nullptr || std::string(child) != "1") GTEST_SKIP() << "runs only as a child rank";
#ifndef MCORE_TEST_GLOO_PLUGIN
    GTEST_SKIP() << "no Gloo plugin";
#else
    const uint32_t my_rank = static_cast<uint32_t>(std::atoi(std::getenv("RANK")));
    const std::vector<std::string> ports = split_ports(std::getenv("MCORE_TEST_PORTS"));
    ASSERT_FALSE(ports.empty());
    for (size_t cycle = 0; cycle < ports.size(); ++cycle) {
        SCOPED_TRACE("cycle " + std::to_string(cycle));
        ::setenv("MASTER_PORT", ports[cycle].c_str(), 1);
        mcore_topology_config layout;
        ASSERT_EQ(mcore_topology_config_init(&layout), MCORE_STATUS_OK);
        layout.tp = 2;
        mcore_init_args args;
        ASSERT_EQ(mcore_init_args_init(&args), MCORE_STATUS_OK);
        args.topology = &layout;
        args.backend = MCORE_TEST_GLOO_PLUGIN;
        args.timeout_ms = 60000;
        bool already = true;
        ASSERT_EQ(mcore_initialize(&args, &already), MCORE_STATUS_OK) << last_error();
        EXPECT_FALSE(already);

        uint32_t rank = 99, world = 99;
        ASSERT_EQ(mcore_runtime_world(&rank, &world), MCORE_STATUS_OK);
        EXPECT_EQ(rank, my_rank);
        EXPECT_EQ(world, 4u);
        // World 4, tp=2 -> tp groups [0,1],[2,3]; dp groups [0,2],[1,3].
        mcore_group_info tp{};
        ASSERT_EQ(mcore_runtime_group(MCORE_GROUP_KIND_TENSOR_MODEL_PARALLEL, &tp), MCORE_STATUS_OK);
        EXPECT_EQ(tp.rank, my_rank % 2);
        EXPECT_EQ(tp.size, 2u);
        EXPECT_EQ(tp.index, my_rank / 2);
        uint32_t members[4] = {};
        size_t n = 0;
        ASSERT_EQ(mcore_runtime_group_ranks(MCORE_GROUP_KIND_DATA_PARALLEL, members, 4, &n), MCORE_STATUS_OK);
        ASSERT_EQ(n, 2u);
        EXPECT_EQ(members[0], my_rank % 2);
        EXPECT_EQ(members[1], my_rank % 2 + 2);
        void *comm = nullptr;
        ASSERT_EQ(mcore_runtime_communicator(MCORE_GROUP_KIND_TENSOR_MODEL_PARALLEL, &comm), MCORE_STATUS_OK);
        EXPECT_NE(comm, nullptr);

        // Sum of (rank+1) over the tp group {2k, 2k+1} is 4k+3; of rank*10 over dp {j, j+2} is 20j+20.
        int64_t v[2] = {static_cast<int64_t>(my_rank) + 1, static_cast<int64_t>(cycle)};
        ASSERT_EQ(mcore_runtime_allreduce_sum_i64(MCORE_GROUP_KIND_TENSOR_MODEL_PARALLEL, v, 2), MCORE_STATUS_OK)
            << last_error();
        EXPECT_EQ(v[0], 4 * static_cast<int64_t>(my_rank / 2) + 3);
        EXPECT_EQ(v[1], 2 * static_cast<int64_t>(cycle));
        int64_t w = static_cast<int64_t>(my_rank) * 10;
        ASSERT_EQ(mcore_runtime_allreduce_sum_i64(MCORE_GROUP_KIND_DATA_PARALLEL, &w, 1), MCORE_STATUS_OK);
        EXPECT_EQ(w, 20 * static_cast<int64_t>(my_rank % 2) + 20);

        ASSERT_EQ(mcore_initialize(&args, &already), MCORE_STATUS_OK) << last_error();
        EXPECT_TRUE(already);
        // Other settings while initialized: refused, naming what differs; the state stays.
        mcore_topology_config other_layout = layout;
        other_layout.tp = 4;
        mcore_init_args other = args;
        other.topology = &other_layout;
        EXPECT_EQ(mcore_initialize(&other, &already), MCORE_STATUS_ALREADY_INITIALIZED);
        EXPECT_NE(last_error().find("tp"), std::string::npos) << last_error();
        EXPECT_TRUE(mcore_is_initialized());
        ASSERT_EQ(mcore_runtime_barrier(MCORE_GROUP_KIND_TENSOR_AND_DATA_PARALLEL), MCORE_STATUS_OK) << last_error();
        ASSERT_EQ(mcore_destroy(), MCORE_STATUS_OK) << last_error();
        EXPECT_FALSE(mcore_is_initialized());
        EXPECT_EQ(mcore_get_pipeline_model_parallel_next_rank(), -1);
    }
#endif
}

// Recovery through the C API: 5 ranks, tp 2 on ranks 0-3 and rank 4 a spare. Rank 1 SIGKILLs
// itself after init; ranks 0, 2, 3 find it with mcore_check_health and call mcore_reinitialize
// with the suspects; the spare stands by in mcore_reinitialize and takes rank 1's place. Every
// survivor then all-reduces over the new layout's tp and dp groups.
TEST(RuntimeIntegrationChild, Recovery) {
    const char *child = std::getenv("MCORE_TEST_CHILD");
    if (child == nullptr || std::string(child) != "recovery") GTEST_SKIP() << "runs only as a child rank";
#ifndef MCORE_TEST_GLOO_PLUGIN
    GTEST_SKIP() << "no Gloo plugin";
#else
    const uint32_t my_rank = static_cast<uint32_t>(std::atoi(std::getenv("RANK")));
    mcore_topology_config layout;
    ASSERT_EQ(mcore_topology_config_init(&layout), MCORE_STATUS_OK);
    layout.tp = 2;
    mcore_init_args args;
    ASSERT_EQ(mcore_init_args_init(&args), MCORE_STATUS_OK);
    EXPECT_EQ(args.spares, 0u);
    args.topology = &layout;
    args.backend = MCORE_TEST_GLOO_PLUGIN;
    args.timeout_ms = 60000;
    args.spares = 1;
    ASSERT_EQ(mcore_initialize(&args, nullptr), MCORE_STATUS_OK) << last_error();
    EXPECT_EQ(mcore_is_spare(), my_rank == 4);
    EXPECT_EQ(mcore_is_initialized(), my_rank != 4);
    uint32_t suspects[8] = {};
    size_t n_suspects = 0;
    if (my_rank != 4) {
        bool healthy = false;
        ASSERT_EQ(mcore_check_health(30.0, &healthy, suspects, 8, &n_suspects), MCORE_STATUS_OK) << last_error();
        EXPECT_TRUE(healthy);
        EXPECT_EQ(n_suspects, 0u);
        if (my_rank == 1) ::kill(::getpid(), SIGKILL);
        ASSERT_EQ(mcore_check_health(2.0, &healthy, suspects, 8, &n_suspects), MCORE_STATUS_OK) << last_error();
        EXPECT_FALSE(healthy);
        ASSERT_EQ(n_suspects, 1u);
        EXPECT_EQ(suspects[0], 1u);
    }
    uint32_t failed[8] = {};
    mcore_recovery_result result{};
    ASSERT_EQ(mcore_reinitialize(suspects, n_suspects, 0.0, failed, 8, &result), MCORE_STATUS_OK) << last_error();
    const uint32_t new_rank = my_rank == 4 ? 1 : my_rank;
    EXPECT_FALSE(result.left);
    EXPECT_EQ(result.old_rank, my_rank);
    EXPECT_EQ(result.new_rank, new_rank);
    EXPECT_EQ(result.old_world_size, 5u);
    EXPECT_EQ(result.new_world_size, 4u);
    ASSERT_EQ(result.n_failed, 1u);
    EXPECT_EQ(failed[0], 1u);
    EXPECT_FALSE(mcore_is_spare());
    uint32_t rank = 99, world = 99;
    ASSERT_EQ(mcore_runtime_world(&rank, &world), MCORE_STATUS_OK);
    EXPECT_EQ(rank, new_rank);
    EXPECT_EQ(world, 4u);
    // tp {0,1} {2,3}: the sum of rank + 1 is 4k + 3; dp {0,2} {1,3}: of rank * 10, 20j + 20.
    int64_t v = static_cast<int64_t>(new_rank) + 1;
    ASSERT_EQ(mcore_runtime_allreduce_sum_i64(MCORE_GROUP_KIND_TENSOR_MODEL_PARALLEL, &v, 1), MCORE_STATUS_OK)
        << last_error();
    EXPECT_EQ(v, 4 * static_cast<int64_t>(new_rank / 2) + 3);
    int64_t w = static_cast<int64_t>(new_rank) * 10;
    ASSERT_EQ(mcore_runtime_allreduce_sum_i64(MCORE_GROUP_KIND_DATA_PARALLEL, &w, 1), MCORE_STATUS_OK);
    EXPECT_EQ(w, 20 * static_cast<int64_t>(new_rank % 2) + 20);
    ASSERT_EQ(mcore_destroy(), MCORE_STATUS_OK) << last_error();
#endif
}

TEST(RuntimeIntegration, RecoveryWithASpareThroughTheCApi) {
#ifndef MCORE_TEST_GLOO_PLUGIN
    GTEST_SKIP() << "the package has no Gloo plugin (MCORE_INIT_GLOO_PLUGIN unset)";
#else
    char self[4096] = {};
    ssize_t len = ::readlink("/proc/self/exe", self, sizeof self - 1);
    ASSERT_GT(len, 0);
    const std::string port = std::to_string(mcore_test::free_port());
    std::vector<int> codes = run_ranks({std::string(self, static_cast<size_t>(len)),
                                        "--gtest_filter=RuntimeIntegrationChild.Recovery", "--gtest_brief=1"},
                                       5, {"MCORE_TEST_CHILD=recovery", "MASTER_PORT=" + port});
    for (size_t r = 0; r < codes.size(); ++r) {
        if (r == 1) {
            EXPECT_EQ(codes[r], 128 + SIGKILL) << "rank 1 was to die by SIGKILL";
        } else {
            EXPECT_EQ(codes[r], 0) << "rank " << r << " (-1: killed at deadline)";
        }
    }
#endif
}

TEST(RuntimeIntegration, FourRanksTp2InitDestroyCycles) {
#ifndef MCORE_TEST_GLOO_PLUGIN
    GTEST_SKIP() << "the package has no Gloo plugin (MCORE_INIT_GLOO_PLUGIN unset)";
#else
    // Three init/destroy cycles on the same MASTER_PORT: after mcore_destroy rank 0 hosts the
    // store there again and the other ranks find it (MCORE_TEST_PORTS lists one port per cycle).
    const std::string port = std::to_string(mcore_test::free_port());
    const std::string ports = port + "," + port + "," + port;
    // readlink, not the path itself: under valgrind, exec("/proc/self/exe") would start the
    // valgrind tool; readlink is answered with the test binary.
    char self[4096] = {};
    ssize_t len = ::readlink("/proc/self/exe", self, sizeof self - 1);
    ASSERT_GT(len, 0);
    std::vector<int> codes = run_ranks(
        {std::string(self, static_cast<size_t>(len)), "--gtest_filter=RuntimeIntegrationChild.Rank", "--gtest_brief=1"}, 4,
        {"MCORE_TEST_CHILD=1", "MCORE_TEST_PORTS=" + ports, "MASTER_PORT=" + port});
    for (size_t r = 0; r < codes.size(); ++r) EXPECT_EQ(codes[r], 0) << "rank " << r << " (-1: killed at deadline)";
#endif
}

TEST(RuntimeIntegration, TrainerSkeletonTwoRanks) {
#if !defined(MCORE_TEST_GLOO_PLUGIN) || !defined(MCORE_TEST_TRAINER)
    GTEST_SKIP() << "no Gloo plugin or trainer example";
#else
    std::string port = std::to_string(mcore_test::free_port());
    std::vector<int> codes = run_ranks({MCORE_TEST_TRAINER, "--backend", MCORE_TEST_GLOO_PLUGIN, "--tp", "2"}, 2,
                                       {"MASTER_PORT=" + port});
    for (size_t r = 0; r < codes.size(); ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
#endif
}
