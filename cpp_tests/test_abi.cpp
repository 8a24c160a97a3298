// ABI basics: versions, status text, the thread-local last error.
#include <gtest/gtest.h>
#include <mcore_init.h>

#include <string>
#include <thread>

extern "C" int mcore_header_c11_probe(void);

TEST(Abi, HeaderAndLibraryAgree) {
    EXPECT_EQ(mcore_abi_version(), static_cast<uint32_t>(MCORE_ABI_VERSION));
    EXPECT_STREQ(mcore_version_string(), MCORE_VERSION_STRING);
    EXPECT_EQ(mcore_header_c11_probe(), 0);
}

TEST(Abi, StatusTextForKnownAndUnknownCodes) {
    EXPECT_STREQ(mcore_status_str(MCORE_STATUS_OK), "ok");
    EXPECT_STREQ(mcore_status_str(MCORE_STATUS_TIMEOUT), "timed out");
    EXPECT_STREQ(mcore_status_str(12345), "unknown status code");
    EXPECT_STREQ(mcore_status_str(-1), "unknown status code");
}

TEST(Abi, LastErrorIsNeverNullAndPerThread) {
    ASSERT_NE(mcore_last_error_message(), nullptr);
    std::string other;
    std::thread t([&] { other = mcore_last_error_message(); });
    t.join();
    EXPECT_EQ(other, "");
}
