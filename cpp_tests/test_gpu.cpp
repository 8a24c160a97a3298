// NCCL in a world of one. Skips itself when no NCCL library or CUDA device is usable, so the
// `gpu` label exists everywhere and runs for real on a GPU machine.
#include "test_util.h"

#include <string>

using mcore_test::last_error;
using mcore_test::ScopedEnv;

TEST(Gpu, NcclWorldOfOne) {
    std::string port = std::to_string(mcore_test::free_port());
    ScopedEnv a("RANK", "0"), b("WORLD_SIZE", "1"), c("MASTER_ADDR", "127.0.0.1"), d("MASTER_PORT", port.c_str()),
        e("LOCAL_RANK", "0"), f("LOCAL_WORLD_SIZE", "1");
    mcore_init_args args;
    ASSERT_EQ(mcore_init_args_init(&args), MCORE_STATUS_OK);
    args.backend = "nccl";
    args.timeout_ms = 60000;
    bool already = true;
    mcore_status s = mcore_initialize(&args, &already);
    if (s == MCORE_STATUS_LIBRARY_LOAD || s == MCORE_STATUS_BACKEND || s == MCORE_STATUS_UNSUPPORTED ||
        s == MCORE_STATUS_VERSION_TOO_OLD) {
        std::string why = last_error();
        mcore_destroy();
        GTEST_SKIP() << "no usable NCCL/CUDA device: " << mcore_status_str(s) << ": " << why;
    }
    ASSERT_EQ(s, MCORE_STATUS_OK) << last_error();
    EXPECT_FALSE(already);
    mcore_group_info tp{};
    ASSERT_EQ(mcore_runtime_group(MCORE_GROUP_KIND_TENSOR_MODEL_PARALLEL, &tp), MCORE_STATUS_OK);
    EXPECT_EQ(tp.size, 1u);
    void *comm = nullptr;
    ASSERT_EQ(mcore_runtime_communicator(MCORE_GROUP_KIND_TENSOR_MODEL_PARALLEL, &comm), MCORE_STATUS_OK);
    EXPECT_NE(comm, nullptr);  // an ncclComm_t
    ASSERT_EQ(mcore_destroy(), MCORE_STATUS_OK) << last_error();
}
