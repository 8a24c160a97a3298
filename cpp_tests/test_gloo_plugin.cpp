// The Gloo plugin's vtable driven directly, as a plugin author would test it: its entry symbol
// through dlopen, and an in-memory mcore_backend_store written here (without multi_get, so the
// plugin's single-get path runs; the Rust tests cover multi_get). Ranks are threads of this
// process, so the split strategy also runs under valgrind and the sanitizers.
#include "test_util.h"

#include <dlfcn.h>

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

namespace {

// A key-value store shared by the "ranks" (threads) of one test; `get`/`wait` block up to 10 s.
class MemStore {
  public:
    MemStore() {
        c_.struct_size = sizeof(mcore_backend_store);
        c_.ctx = this;
        c_.set = &MemStore::set;
        c_.get = &MemStore::get;
        c_.wait = &MemStore::wait;
        c_.add = &MemStore::add;
        c_.error_message = &MemStore::error_message;
        c_.multi_get = nullptr;
    }
    const mcore_backend_store *c() const { return &c_; }

    std::vector<std::string> keys() {
        std::lock_guard<std::mutex> lock(mu_);
        std::vector<std::string> out;
        for (const auto &kv : kv_) out.push_back(kv.first);
        return out;
    }

  private:
    static MemStore *self(void *ctx) { return static_cast<MemStore *>(ctx); }

    static int32_t set(void *ctx, const char *key, const uint8_t *value, size_t len) {
        MemStore *s = self(ctx);
        {
            std::lock_guard<std::mutex> lock(s->mu_);
            s->kv_[key].assign(value, value + len);
        }
        s->cv_.notify_all();
        return MCORE_STATUS_OK;
    }

    // Waits for `keys` with `lock` held; false (and an error message naming the key) on timeout.
    bool wait_locked(std::unique_lock<std::mutex> &lock, const std::vector<std::string> &keys) {
        for (const auto &k : keys) {
            if (!cv_.wait_for(lock, std::chrono::seconds(10), [&] { return kv_.count(k) != 0; })) {
                thread_error() = "timed out waiting for store key(s) '" + k + "'";
                return false;
            }
        }
        return true;
    }

    static int32_t get(void *ctx, const char *key, uint8_t *buf, size_t buf_len, size_t *out_len) {
        MemStore *s = self(ctx);
        std::unique_lock<std::mutex> lock(s->mu_);
        if (!s->wait_locked(lock, {key})) return MCORE_STATUS_TIMEOUT;
        const std::vector<uint8_t> &v = s->kv_[key];
        *out_len = v.size();
        if (v.size() > buf_len) return MCORE_STATUS_BUFFER_TOO_SMALL;
        std::copy(v.begin(), v.end(), buf);
        return MCORE_STATUS_OK;
    }

    static int32_t wait(void *ctx, const char *const *keys, size_t n, uint64_t) {
        MemStore *s = self(ctx);
        std::unique_lock<std::mutex> lock(s->mu_);
        return s->wait_locked(lock, std::vector<std::string>(keys, keys + n)) ? MCORE_STATUS_OK
                                                                              : MCORE_STATUS_TIMEOUT;
    }

    static int32_t add(void *ctx, const char *key, int64_t delta, int64_t *out) {
        MemStore *s = self(ctx);
        std::lock_guard<std::mutex> lock(s->mu_);
        std::vector<uint8_t> &v = s->kv_[key];
        int64_t now = (v.empty() ? 0 : std::stoll(std::string(v.begin(), v.end()))) + delta;
        std::string text = std::to_string(now);
        v.assign(text.begin(), text.end());
        *out = now;
        return MCORE_STATUS_OK;
    }

    static std::string &thread_error() {
        thread_local std::string e;
        return e;
    }
    static const char *error_message(void *) { return thread_error().c_str(); }

    mcore_backend_store c_{};
    std::mutex mu_;
    std::condition_variable cv_;
    std::map<std::string, std::vector<uint8_t>> kv_;
};

// One group description with the storage its pointers point into.
struct Group {
    Group(std::string name, std::vector<uint32_t> ranks, uint32_t me) : name_(std::move(name)), ranks_(std::move(ranks)) {
        info.struct_size = sizeof(mcore_backend_group_info);
        info.group_size = static_cast<uint32_t>(ranks_.size());
        info.group_rank = static_cast<uint32_t>(std::find(ranks_.begin(), ranks_.end(), me) - ranks_.begin());
        info.global_rank = me;
        info.name = name_.c_str();
        info.global_ranks = ranks_.data();
        info.timeout_ms = 10000;
    }
    std::string name_;
    std::vector<uint32_t> ranks_;
    mcore_backend_group_info info{};
};

#ifdef MCORE_TEST_GLOO_PLUGIN
const mcore_backend_v1 *gloo_vtable() {
    // Kept loaded for the process (the library never unloads plugins either).
    void *lib = ::dlopen(MCORE_TEST_GLOO_PLUGIN, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return nullptr;
    auto entry = reinterpret_cast<mcore_backend_plugin_v1_fn>(::dlsym(lib, "mcore_backend_plugin_v1"));
    return entry != nullptr ? entry() : nullptr;
}

std::string plugin_error(const mcore_backend_v1 *vt) { return vt->last_error(vt->user_data); }

// [global rank, 1] summed over `comm`.
std::vector<int64_t> rank_sum(const mcore_backend_v1 *vt, void *comm, uint32_t rank) {
    std::vector<int64_t> v = {static_cast<int64_t>(rank), 1};
    if (vt->allreduce_sum_i64(vt->user_data, comm, v.data(), v.size()) != MCORE_STATUS_OK) return {};
    return v;
}
#endif

}  // namespace

TEST(GlooPlugin, SplitErrorsAndAWorldOfOne) {
#ifndef MCORE_TEST_GLOO_PLUGIN
    GTEST_SKIP() << "the package has no Gloo plugin (MCORE_INIT_GLOO_PLUGIN unset)";
#else
    const mcore_backend_v1 *vt = gloo_vtable();
    ASSERT_NE(vt, nullptr) << ::dlerror();
    ASSERT_NE(vt->create_world, nullptr);
    ASSERT_NE(vt->split, nullptr);
    MemStore store;
    Group world("world", {0}, 0), tp("tp/0", {0}, 0), sub("tp/0/sub", {0}, 0);
    void *w = nullptr;
    ASSERT_EQ(vt->create_world(vt->user_data, &world.info, store.c(), &w), MCORE_STATUS_OK) << plugin_error(vt);
    ASSERT_NE(w, nullptr);

    // A rank that joins no group gets NULL; a NULL group with a color is refused.
    void *out = reinterpret_cast<void *>(0x1);
    EXPECT_EQ(vt->split(vt->user_data, w, -1, 0, nullptr, &out), MCORE_STATUS_OK);
    EXPECT_EQ(out, nullptr);
    EXPECT_EQ(vt->split(vt->user_data, w, 2, 0, nullptr, &out), MCORE_STATUS_INVALID_ARGUMENT);
    EXPECT_NE(plugin_error(vt).find("color is 2"), std::string::npos) << plugin_error(vt);
    // The key must be the group rank.
    EXPECT_EQ(vt->split(vt->user_data, w, 0, 3, &tp.info, &out), MCORE_STATUS_INVALID_ARGUMENT);
    EXPECT_NE(plugin_error(vt).find("key 3 disagrees with group rank 0"), std::string::npos) << plugin_error(vt);

    void *child = nullptr;
    const size_t keys_of_world = store.keys().size();
    ASSERT_EQ(vt->split(vt->user_data, w, 0, 0, &tp.info, &child), MCORE_STATUS_OK) << plugin_error(vt);
    ASSERT_NE(child, nullptr);
    // The split derived its child from the world's mesh: it wrote no key.
    EXPECT_EQ(store.keys().size(), keys_of_world);
    // A child is not a world: it cannot be split.
    EXPECT_EQ(vt->split(vt->user_data, child, 0, 0, &sub.info, &out), MCORE_STATUS_INVALID_ARGUMENT);
    EXPECT_NE(plugin_error(vt).find("splits need a world communicator from create_world"), std::string::npos)
        << plugin_error(vt);

    // The child outlives the world.
    ASSERT_EQ(vt->destroy_comm(vt->user_data, w), MCORE_STATUS_OK);
    EXPECT_EQ(rank_sum(vt, child, 0), (std::vector<int64_t>{0, 1})) << plugin_error(vt);
    EXPECT_EQ(vt->destroy_comm(vt->user_data, child), MCORE_STATUS_OK);

    // Neither is a communicator from create_group a world.
    void *g = nullptr;
    ASSERT_EQ(vt->create_group(vt->user_data, &tp.info, store.c(), &g), MCORE_STATUS_OK) << plugin_error(vt);
    EXPECT_EQ(vt->split(vt->user_data, g, 0, 0, &sub.info, &out), MCORE_STATUS_INVALID_ARGUMENT);
    EXPECT_NE(plugin_error(vt).find("'tp/0' was made by create_group or split"), std::string::npos)
        << plugin_error(vt);
    EXPECT_EQ(vt->destroy_comm(vt->user_data, g), MCORE_STATUS_OK);
#endif
}

// Two ranks as two threads: a world, a split both join ({0,1}) and one only rank 0 joins ({0}).
TEST(GlooPlugin, SplitTwoRanksAsThreads) {
#ifndef MCORE_TEST_GLOO_PLUGIN
    GTEST_SKIP() << "the package has no Gloo plugin (MCORE_INIT_GLOO_PLUGIN unset)";
#else
    const mcore_backend_v1 *vt = gloo_vtable();
    ASSERT_NE(vt, nullptr) << ::dlerror();
    MemStore store;
    std::vector<std::string> failures(2);
    auto rank_main = [&](uint32_t rank) {
        std::string &fail = failures[rank];
        Group world("world", {0, 1}, rank), both("both", {0, 1}, rank), first("first", {0}, 0);
        void *w = nullptr, *a = nullptr, *b = nullptr;
        if (vt->create_world(vt->user_data, &world.info, store.c(), &w) != MCORE_STATUS_OK) {
            fail = "create_world: " + plugin_error(vt);
            return;
        }
        if (vt->split(vt->user_data, w, 0, static_cast<int32_t>(rank), &both.info, &a) != MCORE_STATUS_OK)
            fail = "split both: " + plugin_error(vt);
        else if (vt->split(vt->user_data, w, rank == 0 ? 0 : -1, 0, rank == 0 ? &first.info : nullptr, &b) !=
                 MCORE_STATUS_OK)
            fail = "split first: " + plugin_error(vt);
        vt->destroy_comm(vt->user_data, w);
        if (fail.empty() && (a == nullptr || (b != nullptr) != (rank == 0)))
            fail = "wrong communicators from split";
        if (fail.empty() && rank_sum(vt, a, rank) != std::vector<int64_t>{1, 2})
            fail = "allreduce on 'both' after the world was destroyed: " + plugin_error(vt);
        if (fail.empty() && b != nullptr && rank_sum(vt, b, rank) != std::vector<int64_t>{0, 1})
            fail = "allreduce on 'first': " + plugin_error(vt);
        if (a != nullptr) vt->destroy_comm(vt->user_data, a);
        if (b != nullptr) vt->destroy_comm(vt->user_data, b);
    };
    std::thread r0(rank_main, 0), r1(rank_main, 1);
    r0.join();
    r1.join();
    EXPECT_EQ(failures[0], "");
    EXPECT_EQ(failures[1], "");
#endif
}
