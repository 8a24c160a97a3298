// Per-rank RNG through the C ABI: Megatron policy seeds (docs/topology.md, "RNG seeds"), the named tracker,
// checkpoint round trip, corrupt blobs, Philox determinism.
#include "test_util.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

using mcore_test::last_error;

namespace {

struct TrackerDeleter {
    void operator()(mcore_rng_tracker *t) const { mcore_rng_tracker_destroy(t); }
};
using Tracker = std::unique_ptr<mcore_rng_tracker, TrackerDeleter>;

mcore_rng_coords coords(uint32_t rank, uint32_t tp_rank, uint32_t pp_rank, uint32_t dp_rank) {
    mcore_rng_coords c;
    EXPECT_EQ(mcore_rng_coords_default(&c), MCORE_STATUS_OK);
    c.world_size = 16;
    c.rank = rank;
    c.tp_rank = tp_rank;
    c.pp_rank = pp_rank;
    c.dp_rank = dp_rank;
    c.etp_rank = tp_rank;
    return c;
}

std::map<std::string, uint64_t> policy_seeds(const char *policy, int64_t seed, bool dp_random,
                                             const mcore_rng_coords &c) {
    size_t n = 0;
    EXPECT_EQ(mcore_rng_policy_seeds(policy, seed, dp_random, &c, nullptr, 0, nullptr, 0, &n),
              MCORE_STATUS_BUFFER_TOO_SMALL)
        << last_error();
    std::vector<mcore_rng_named_seed> out(n);
    size_t n2 = 0;
    EXPECT_EQ(mcore_rng_policy_seeds(policy, seed, dp_random, &c, nullptr, 0, out.data(), out.size(), &n2),
              MCORE_STATUS_OK)
        << last_error();
    std::map<std::string, uint64_t> m;
    for (size_t i = 0; i < n2; ++i) m[out[i].name] = out[i].seed;
    if (n2 > 0) {
        EXPECT_STREQ(out[0].name, "default");
    }
    return m;
}

Tracker seeded(const mcore_rng_coords &c, int64_t seed) {
    Tracker t(mcore_rng_tracker_create(&c));
    EXPECT_NE(t, nullptr) << last_error();
    EXPECT_EQ(mcore_rng_tracker_seed(t.get(), "megatron", seed, false, nullptr, 0), MCORE_STATUS_OK) << last_error();
    return t;
}

std::vector<uint8_t> save(const mcore_rng_tracker *t) {
    size_t n = 0;
    EXPECT_EQ(mcore_rng_tracker_save(t, nullptr, 0, &n), MCORE_STATUS_BUFFER_TOO_SMALL);
    std::vector<uint8_t> blob(n);
    EXPECT_EQ(mcore_rng_tracker_save(t, blob.data(), blob.size(), &n), MCORE_STATUS_OK) << last_error();
    EXPECT_EQ(n, blob.size());
    return blob;
}

}  // namespace

TEST(Rng, MegatronPolicySeeds) {
    // s = seed + 100*pp_rank; data-parallel = s; model-parallel = s + 2718 + tp_rank;
    // expert = s + 1024 + 100*ep_rank + etp_rank.
    const int64_t seed = 1234;
    auto m = policy_seeds("megatron", seed, false, coords(13, 1, 3, 0));
    const uint64_t s = 1234 + 300;
    EXPECT_EQ(m.at("default"), s);
    EXPECT_EQ(m.at("data-parallel-rng"), s);
    EXPECT_EQ(m.at("model-parallel-rng"), s + 2718 + 1);
    EXPECT_EQ(m.at("expert-parallel-rng"), s + 1024 + 1);
    // With data_parallel_random_init, the dp rank adds 10 per rank.
    auto d = policy_seeds("megatron", seed, true, coords(2, 0, 0, 1));
    EXPECT_EQ(d.at("default"), 1234u + 10);
    EXPECT_EQ(d.at("model-parallel-rng"), 1234u + 10 + 2718);
}

TEST(Rng, PolicyErrors) {
    mcore_rng_coords c = coords(0, 0, 0, 0);
    size_t n = 0;
    EXPECT_NE(mcore_rng_policy_seeds("no-such-policy", 1, false, &c, nullptr, 0, nullptr, 0, &n), MCORE_STATUS_OK);
    EXPECT_NE(last_error().find("no-such-policy"), std::string::npos) << last_error();
    EXPECT_EQ(mcore_rng_policy_seeds(nullptr, 1, false, &c, nullptr, 0, nullptr, 0, &n), MCORE_STATUS_INVALID_ARGUMENT);
    EXPECT_EQ(mcore_rng_coords_default(nullptr), MCORE_STATUS_INVALID_ARGUMENT);
}

TEST(Rng, TrackerForkAdvancesOnlyThatStream) {
    Tracker t = seeded(coords(1, 1, 0, 0), 42);
    mcore_rng_state before{}, launch{}, after{}, dflt{};
    ASSERT_EQ(mcore_rng_tracker_get_state(t.get(), "model-parallel-rng", &before), MCORE_STATUS_OK);
    EXPECT_EQ(before.seed, 42u + 2718 + 1);
    EXPECT_EQ(before.offset, 0u);
    ASSERT_EQ(mcore_rng_tracker_fork(t.get(), "model-parallel-rng", 5, &launch), MCORE_STATUS_OK);
    EXPECT_EQ(launch.seed, before.seed);
    EXPECT_EQ(launch.offset, 0u);
    ASSERT_EQ(mcore_rng_tracker_get_state(t.get(), "model-parallel-rng", &after), MCORE_STATUS_OK);
    EXPECT_EQ(after.offset, 8u);  // 5 rounded up to a multiple of 4
    ASSERT_EQ(mcore_rng_tracker_get_state(t.get(), "default", &dflt), MCORE_STATUS_OK);
    EXPECT_EQ(dflt.seed, 42u);
    EXPECT_EQ(dflt.offset, 0u);
    mcore_rng_state s{};
    EXPECT_EQ(mcore_rng_tracker_fork(t.get(), "not-added", 4, &s), MCORE_STATUS_NOT_FOUND);
    EXPECT_NE(last_error().find("not-added"), std::string::npos) << last_error();
}

TEST(Rng, TrackerAddAndDuplicates) {
    mcore_rng_coords c = coords(0, 0, 0, 0);
    Tracker t(mcore_rng_tracker_create(&c));
    ASSERT_NE(t, nullptr);
    ASSERT_EQ(mcore_rng_tracker_add(t.get(), "mine", 777), MCORE_STATUS_OK);
    EXPECT_EQ(mcore_rng_tracker_add(t.get(), "other", 777), MCORE_STATUS_ALREADY_EXISTS);
    EXPECT_NE(last_error().find("seed 777 already exists"), std::string::npos) << last_error();
    EXPECT_EQ(mcore_rng_tracker_add(t.get(), "mine", 778), MCORE_STATUS_ALREADY_EXISTS);
    EXPECT_NE(last_error().find("mine"), std::string::npos) << last_error();
    ASSERT_EQ(mcore_rng_tracker_reset(t.get()), MCORE_STATUS_OK);
    EXPECT_EQ(mcore_rng_tracker_add(t.get(), "mine", 777), MCORE_STATUS_OK) << last_error();
    EXPECT_EQ(mcore_rng_tracker_add(nullptr, "x", 1), MCORE_STATUS_INVALID_ARGUMENT);
    EXPECT_EQ(mcore_rng_tracker_add(t.get(), nullptr, 1), MCORE_STATUS_INVALID_ARGUMENT);
}

TEST(Rng, SaveRestoreRoundTrip) {
    mcore_rng_coords c = coords(5, 1, 0, 2);
    Tracker t = seeded(c, 9);
    mcore_rng_state tmp{};
    ASSERT_EQ(mcore_rng_tracker_fork(t.get(), "model-parallel-rng", 12, &tmp), MCORE_STATUS_OK);
    ASSERT_EQ(mcore_rng_tracker_cpu_add(t.get(), "shuffle", 31), MCORE_STATUS_OK);
    std::vector<uint8_t> blob = save(t.get());
    std::vector<uint32_t> expect_words(6), got_words(6);
    ASSERT_EQ(mcore_rng_tracker_cpu_fill_u32(t.get(), "shuffle", expect_words.data(), 6), MCORE_STATUS_OK);
    mcore_rng_state expected_mp{};
    ASSERT_EQ(mcore_rng_tracker_get_state(t.get(), "model-parallel-rng", &expected_mp), MCORE_STATUS_OK);

    // A fresh tracker of the same rank restores the saved positions exactly.
    Tracker u(mcore_rng_tracker_create(&c));
    ASSERT_EQ(mcore_rng_tracker_restore(u.get(), blob.data(), blob.size(), 0), MCORE_STATUS_OK) << last_error();
    mcore_rng_state got{};
    ASSERT_EQ(mcore_rng_tracker_get_state(u.get(), "model-parallel-rng", &got), MCORE_STATUS_OK);
    EXPECT_EQ(got.seed, expected_mp.seed);
    EXPECT_EQ(got.offset, 12u);
    ASSERT_EQ(mcore_rng_tracker_cpu_fill_u32(u.get(), "shuffle", got_words.data(), 6), MCORE_STATUS_OK);
    EXPECT_EQ(got_words, expect_words);
    EXPECT_EQ(save(u.get()).size(), blob.size());

    // Another rank's blob is refused.
    mcore_rng_coords other = coords(6, 0, 0, 3);
    Tracker w(mcore_rng_tracker_create(&other));
    EXPECT_EQ(mcore_rng_tracker_restore(w.get(), blob.data(), blob.size(), 0), MCORE_STATUS_WRONG_RANK);
    EXPECT_FALSE(last_error().empty());
}

TEST(Rng, CorruptBlobRejectedAndNothingChanges) {
    mcore_rng_coords c = coords(0, 0, 0, 0);
    Tracker t = seeded(c, 100);
    std::vector<uint8_t> blob = save(t.get());
    ASSERT_GT(blob.size(), 8u);
    mcore_rng_state tmp{};
    ASSERT_EQ(mcore_rng_tracker_fork(t.get(), "data-parallel-rng", 4, &tmp), MCORE_STATUS_OK);
    mcore_rng_state before{};
    ASSERT_EQ(mcore_rng_tracker_get_state(t.get(), "data-parallel-rng", &before), MCORE_STATUS_OK);

    std::vector<uint8_t> truncated(blob.begin(), blob.end() - 3);
    EXPECT_EQ(mcore_rng_tracker_restore(t.get(), truncated.data(), truncated.size(), 0), MCORE_STATUS_CORRUPT);
    std::vector<uint8_t> flipped = blob;
    flipped[flipped.size() / 2] ^= 0x5a;
    EXPECT_EQ(mcore_rng_tracker_restore(t.get(), flipped.data(), flipped.size(), 0), MCORE_STATUS_CORRUPT);
    std::vector<uint8_t> junk(blob.size(), 0xee);
    EXPECT_EQ(mcore_rng_tracker_restore(t.get(), junk.data(), junk.size(), 0), MCORE_STATUS_CORRUPT);
    EXPECT_EQ(mcore_rng_tracker_restore(t.get(), nullptr, 10, 0), MCORE_STATUS_INVALID_ARGUMENT);

    mcore_rng_state after{};
    ASSERT_EQ(mcore_rng_tracker_get_state(t.get(), "data-parallel-rng", &after), MCORE_STATUS_OK);
    EXPECT_EQ(after.seed, before.seed);
    EXPECT_EQ(after.offset, before.offset);
    size_t n = 0;
    uint8_t small[4];
    EXPECT_EQ(mcore_rng_tracker_save(t.get(), small, sizeof small, &n), MCORE_STATUS_BUFFER_TOO_SMALL);
    EXPECT_EQ(n, blob.size());
}

TEST(Rng, PhiloxFillDeterministicAndSkipsAhead) {
    std::vector<uint32_t> a(16), b(16), c(12), other(16);
    ASSERT_EQ(mcore_rng_philox_fill_u32(1234, 0, 0, a.data(), a.size()), MCORE_STATUS_OK);
    ASSERT_EQ(mcore_rng_philox_fill_u32(1234, 0, 0, b.data(), b.size()), MCORE_STATUS_OK);
    EXPECT_EQ(a, b);
    // curand_init's offset skips that many 32-bit outputs.
    ASSERT_EQ(mcore_rng_philox_fill_u32(1234, 0, 4, c.data(), c.size()), MCORE_STATUS_OK);
    EXPECT_EQ(c, std::vector<uint32_t>(a.begin() + 4, a.end()));
    ASSERT_EQ(mcore_rng_philox_fill_u32(1234, 1, 0, other.data(), other.size()), MCORE_STATUS_OK);
    EXPECT_NE(other, a);
    std::vector<float> u(64);
    ASSERT_EQ(mcore_rng_philox_fill_uniform(7, 0, 0, u.data(), u.size()), MCORE_STATUS_OK);
    for (float x : u) {
        EXPECT_GT(x, 0.0f);
        EXPECT_LE(x, 1.0f);
    }
    EXPECT_EQ(mcore_rng_philox_fill_u32(1, 0, 0, nullptr, 0), MCORE_STATUS_OK);
    EXPECT_EQ(mcore_rng_philox_fill_u32(1, 0, 0, nullptr, 3), MCORE_STATUS_INVALID_ARGUMENT);
}

TEST(Rng, CreateDestroyCycles) {
    for (uint32_t i = 0; i < 100; ++i) {
        Tracker t = seeded(coords(i % 16, i % 2, (i / 2) % 4, 0), 1 + i);
        mcore_rng_state s{};
        ASSERT_EQ(mcore_rng_tracker_fork(t.get(), "model-parallel-rng", 4, &s), MCORE_STATUS_OK);
        EXPECT_EQ(s.seed, 1 + i + 100 * ((i / 2) % 4) + 2718 + i % 2);
    }
}
