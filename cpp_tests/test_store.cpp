// The TCP rendezvous store through the C ABI: a server on 127.0.0.1 (port 0) and a client.
#include "test_util.h"

#include <memory>
#include <string>
#include <vector>

using mcore_test::last_error;

namespace {

struct StoreDeleter {
    void operator()(mcore_store *s) const { mcore_store_destroy(s); }
};
using Store = std::unique_ptr<mcore_store, StoreDeleter>;

Store server(uint64_t timeout_ms = 5000) {
    mcore_store *s = nullptr;
    EXPECT_EQ(mcore_store_tcp_create("127.0.0.1", 0, true, timeout_ms, &s), MCORE_STATUS_OK) << last_error();
    return Store(s);
}

Store client_of(mcore_store *srv, uint64_t timeout_ms = 5000) {
    uint16_t port = 0;
    EXPECT_EQ(mcore_store_tcp_port(srv, &port), MCORE_STATUS_OK);
    EXPECT_NE(port, 0);
    mcore_store *c = nullptr;
    EXPECT_EQ(mcore_store_tcp_create("127.0.0.1", port, false, timeout_ms, &c), MCORE_STATUS_OK) << last_error();
    return Store(c);
}

void set(mcore_store *s, const char *key, const std::string &v) {
    ASSERT_EQ(mcore_store_set(s, key, reinterpret_cast<const uint8_t *>(v.data()), v.size()), MCORE_STATUS_OK)
        << last_error();
}

std::string get(mcore_store *s, const char *key) {
    size_t need = 0;
    mcore_status st = mcore_store_get(s, key, nullptr, 0, &need);
    if (st == MCORE_STATUS_OK) return std::string();  // empty value
    EXPECT_EQ(st, MCORE_STATUS_BUFFER_TOO_SMALL) << last_error();
    std::string v(need, '\0');
    size_t got = 0;
    EXPECT_EQ(mcore_store_get(s, key, reinterpret_cast<uint8_t *>(v.data()), v.size(), &got), MCORE_STATUS_OK)
        << last_error();
    EXPECT_EQ(got, need);
    return v;
}

}  // namespace

TEST(Store, ServerAndClientShareKeys) {
    Store srv = server();
    ASSERT_NE(srv, nullptr);
    Store cli = client_of(srv.get());
    ASSERT_NE(cli, nullptr);
    set(srv.get(), "alpha", "from-server");
    set(cli.get(), "beta", std::string("bin\0ary", 7));
    EXPECT_EQ(get(cli.get(), "alpha"), "from-server");
    EXPECT_EQ(get(srv.get(), "beta"), std::string("bin\0ary", 7));
    set(cli.get(), "alpha", "overwritten");
    EXPECT_EQ(get(cli.get(), "alpha"), "overwritten");  // ordered after the set on this connection
    EXPECT_EQ(get(srv.get(), "alpha"), "overwritten");
}

TEST(Store, AddCheckDeleteNumKeys) {
    Store srv = server();
    Store cli = client_of(srv.get());
    int64_t v = 0;
    ASSERT_EQ(mcore_store_add(cli.get(), "counter", 5, &v), MCORE_STATUS_OK);
    EXPECT_EQ(v, 5);
    ASSERT_EQ(mcore_store_add(srv.get(), "counter", -7, &v), MCORE_STATUS_OK);
    EXPECT_EQ(v, -2);
    EXPECT_EQ(mcore_store_add(srv.get(), "counter", 1, nullptr), MCORE_STATUS_OK);

    const char *keys[] = {"counter", "later"};
    bool ready = true;
    ASSERT_EQ(mcore_store_check(cli.get(), keys, 2, &ready), MCORE_STATUS_OK);
    EXPECT_FALSE(ready);
    // A set on one connection becomes visible to another in time (TCPStore's set has no reply).
    set(srv.get(), "later", "x");
    EXPECT_EQ(mcore_store_wait(cli.get(), keys, 2, 1000), MCORE_STATUS_OK) << last_error();
    ASSERT_EQ(mcore_store_check(cli.get(), keys, 2, &ready), MCORE_STATUS_OK);
    EXPECT_TRUE(ready);

    int64_t n_before = -1, n_after = -1;
    ASSERT_EQ(mcore_store_num_keys(cli.get(), &n_before), MCORE_STATUS_OK);
    bool deleted = false;
    ASSERT_EQ(mcore_store_delete_key(cli.get(), "later", &deleted), MCORE_STATUS_OK);
    EXPECT_TRUE(deleted);
    ASSERT_EQ(mcore_store_delete_key(cli.get(), "later", &deleted), MCORE_STATUS_OK);
    EXPECT_FALSE(deleted);
    ASSERT_EQ(mcore_store_num_keys(srv.get(), &n_after), MCORE_STATUS_OK);
    EXPECT_EQ(n_after, n_before - 1);
}

TEST(Store, WaitForKeySetByAnotherThread) {
    Store srv = server();
    Store cli = client_of(srv.get());
    std::thread writer([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        const std::string v = "late";
        mcore_store_set(srv.get(), "late-key", reinterpret_cast<const uint8_t *>(v.data()), v.size());
    });
    EXPECT_EQ(get(cli.get(), "late-key"), "late");
    writer.join();
}

TEST(Store, PrefixViews) {
    Store srv = server();
    Store cli = client_of(srv.get());
    mcore_store *a_raw = nullptr, *b_raw = nullptr;
    ASSERT_EQ(mcore_store_prefix_create(cli.get(), "groupA", &a_raw), MCORE_STATUS_OK) << last_error();
    ASSERT_EQ(mcore_store_prefix_create(srv.get(), "groupB", &b_raw), MCORE_STATUS_OK) << last_error();
    Store a(a_raw), b(b_raw);
    set(a.get(), "k", "in-A");
    set(b.get(), "k", "in-B");
    EXPECT_EQ(get(srv.get(), "groupA/k"), "in-A");
    EXPECT_EQ(get(cli.get(), "groupB/k"), "in-B");
    EXPECT_EQ(get(a.get(), "k"), "in-A");
    bool ready = true;
    const char *k[] = {"only-in-b"};
    set(b.get(), "only-in-b", "1");
    ASSERT_EQ(mcore_store_check(a.get(), k, 1, &ready), MCORE_STATUS_OK);
    EXPECT_FALSE(ready);
    // Nested prefixes compose, and a view outlives its base handle.
    mcore_store *nested_raw = nullptr;
    ASSERT_EQ(mcore_store_prefix_create(a.get(), "inner", &nested_raw), MCORE_STATUS_OK);
    Store nested(nested_raw);
    a.reset();
    cli.reset();
    set(nested.get(), "x", "deep");
    EXPECT_EQ(get(srv.get(), "groupA/inner/x"), "deep");
    uint16_t p1 = 0, p2 = 1;
    ASSERT_EQ(mcore_store_tcp_port(nested.get(), &p1), MCORE_STATUS_OK);
    ASSERT_EQ(mcore_store_tcp_port(srv.get(), &p2), MCORE_STATUS_OK);
    EXPECT_EQ(p1, p2);
}

TEST(Store, WaitTimeoutNamesTheKey) {
    Store srv = server(300);
    const char *keys[] = {"never-set-key"};
    EXPECT_EQ(mcore_store_wait(srv.get(), keys, 1, 150), MCORE_STATUS_TIMEOUT);
    EXPECT_NE(last_error().find("never-set-key"), std::string::npos) << last_error();
    size_t n = 0;
    EXPECT_EQ(mcore_store_get(srv.get(), "missing-get-key", nullptr, 0, &n), MCORE_STATUS_TIMEOUT);
    EXPECT_NE(last_error().find("missing-get-key"), std::string::npos) << last_error();
}

TEST(StoreErrors, NullArguments) {
    mcore_store *s = nullptr;
    EXPECT_EQ(mcore_store_tcp_create(nullptr, 0, true, 1000, &s), MCORE_STATUS_INVALID_ARGUMENT);
    EXPECT_EQ(mcore_store_tcp_create("127.0.0.1", 0, true, 1000, nullptr), MCORE_STATUS_INVALID_ARGUMENT);
    EXPECT_EQ(mcore_store_set(nullptr, "k", nullptr, 0), MCORE_STATUS_INVALID_ARGUMENT);
    Store srv = server();
    EXPECT_EQ(mcore_store_set(srv.get(), nullptr, nullptr, 0), MCORE_STATUS_INVALID_ARGUMENT);
    EXPECT_EQ(mcore_store_set(srv.get(), "k", nullptr, 3), MCORE_STATUS_INVALID_ARGUMENT);
    EXPECT_EQ(mcore_store_get(srv.get(), "k", nullptr, 4, nullptr), MCORE_STATUS_INVALID_ARGUMENT);
    EXPECT_EQ(mcore_store_check(srv.get(), nullptr, 2, nullptr), MCORE_STATUS_INVALID_ARGUMENT);
    EXPECT_EQ(mcore_store_prefix_create(srv.get(), nullptr, &s), MCORE_STATUS_INVALID_ARGUMENT);
    EXPECT_EQ(s, nullptr);
    EXPECT_FALSE(last_error().empty());
    mcore_store_destroy(nullptr);
}

TEST(StoreErrors, ClientWithoutServerFailsInTime) {
    uint16_t port = mcore_test::free_port();
    ASSERT_NE(port, 0);
    mcore_store *s = nullptr;
    mcore_status st = mcore_store_tcp_create("127.0.0.1", port, false, 300, &s);
    EXPECT_TRUE(st == MCORE_STATUS_TIMEOUT || st == MCORE_STATUS_IO) << mcore_status_str(st);
    EXPECT_EQ(s, nullptr);
    EXPECT_NE(last_error().find(std::to_string(port)), std::string::npos) << last_error();
}

TEST(StoreErrors, PortInUse) {
    Store srv = server();
    uint16_t port = 0;
    ASSERT_EQ(mcore_store_tcp_port(srv.get(), &port), MCORE_STATUS_OK);
    mcore_store *s = nullptr;
    EXPECT_NE(mcore_store_tcp_create("127.0.0.1", port, true, 300, &s), MCORE_STATUS_OK);
    EXPECT_EQ(s, nullptr);
    EXPECT_NE(last_error().find(std::to_string(port)), std::string::npos) << last_error();
}

TEST(Store, CreateDestroyCycles) {
    for (int i = 0; i < 20; ++i) {
        Store srv = server();
        Store cli = client_of(srv.get());
        int64_t v = 0;
        ASSERT_EQ(mcore_store_add(cli.get(), "n", i, &v), MCORE_STATUS_OK);
        EXPECT_EQ(v, i);
    }
}
