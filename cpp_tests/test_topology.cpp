// Topology through the C ABI: groups, enumeration, pipeline and embedding queries, the
// BUFFER_TOO_SMALL two-call pattern and error paths. Expected lists are derived by hand from
// the rank generator (docs/topology.md, "The rank generator": first token of "tp-cp-ep-dp-pp" varies fastest).
#include "test_util.h"

#include <atomic>
#include <memory>
#include <string>
#include <vector>

using mcore_test::last_error;
using Ranks = std::vector<uint32_t>;

namespace {

struct TopoDeleter {
    void operator()(mcore_topology *t) const { mcore_topology_destroy(t); }
};
using Topo = std::unique_ptr<mcore_topology, TopoDeleter>;

Topo make(uint32_t world, int32_t tp, int32_t pp, int32_t cp = 1, int32_t vpp = 0) {
    mcore_topology_config cfg;
    EXPECT_EQ(mcore_topology_config_init(&cfg), MCORE_STATUS_OK);
    cfg.tp = tp;
    cfg.pp = pp;
    cfg.cp = cp;
    cfg.vpp = vpp;
    mcore_topology *t = nullptr;
    EXPECT_EQ(mcore_topology_create(&cfg, world, &t), MCORE_STATUS_OK) << last_error();
    return Topo(t);
}

// The two-call pattern: ask for the size, then fetch.
Ranks group_ranks(const mcore_topology *t, uint32_t rank, int32_t kind) {
    size_t n = 0;
    mcore_status s = mcore_topology_group_ranks(t, rank, kind, nullptr, 0, &n);
    EXPECT_EQ(s, MCORE_STATUS_BUFFER_TOO_SMALL) << last_error();
    Ranks out(n);
    size_t n2 = 0;
    EXPECT_EQ(mcore_topology_group_ranks(t, rank, kind, out.data(), out.size(), &n2), MCORE_STATUS_OK)
        << last_error();
    EXPECT_EQ(n2, n);
    return out;
}

std::vector<Ranks> all_groups(const mcore_topology *t, int32_t kind) {
    uint64_t count = 0;
    EXPECT_EQ(mcore_topology_group_count(t, kind, &count), MCORE_STATUS_OK) << last_error();
    std::vector<Ranks> groups;
    for (uint64_t i = 0; i < count; ++i) {
        Ranks buf(64);
        size_t n = 0;
        EXPECT_EQ(mcore_topology_group_at(t, kind, i, buf.data(), buf.size(), &n), MCORE_STATUS_OK)
            << last_error();
        buf.resize(n);
        groups.push_back(buf);
    }
    return groups;
}

}  // namespace

TEST(Topology, CreateDestroyAndSizes) {
    Topo t = make(16, 2, 4);
    ASSERT_NE(t, nullptr);
    mcore_topology_sizes sz{};
    ASSERT_EQ(mcore_topology_get_sizes(t.get(), &sz), MCORE_STATUS_OK);
    EXPECT_EQ(sz.world_size, 16u);
    EXPECT_EQ(sz.tp, 2u);
    EXPECT_EQ(sz.pp, 4u);
    EXPECT_EQ(sz.cp, 1u);
    EXPECT_EQ(sz.dp, 2u);       // 16 / (2*4)
    EXPECT_EQ(sz.etp, 2u);      // defaults to tp
    EXPECT_EQ(sz.expert_dp, 2u);  // 16 / (etp*ep*pp)
    EXPECT_EQ(sz.vpp, 0u);
    mcore_topology_destroy(nullptr);  // accepted
}

TEST(Topology, World16Tp2Pp4Groups) {
    Topo t = make(16, 2, 4);
    // tp: consecutive pairs; dp: stride tp=2 within each pp stage; pp: stride 16/4 = 4.
    std::vector<Ranks> tp, dp, pp, mp;
    for (uint32_t i = 0; i < 8; ++i) tp.push_back({2 * i, 2 * i + 1});
    for (uint32_t stage = 0; stage < 4; ++stage)
        for (uint32_t t0 = 0; t0 < 2; ++t0) dp.push_back({4 * stage + t0, 4 * stage + t0 + 2});
    for (uint32_t i = 0; i < 4; ++i) pp.push_back({i, i + 4, i + 8, i + 12});
    // model parallel (tp-pp): all ranks sharing the dp coordinate.
    mp.push_back({0, 1, 4, 5, 8, 9, 12, 13});
    mp.push_back({2, 3, 6, 7, 10, 11, 14, 15});
    EXPECT_EQ(all_groups(t.get(), MCORE_GROUP_KIND_TENSOR_MODEL_PARALLEL), tp);
    EXPECT_EQ(all_groups(t.get(), MCORE_GROUP_KIND_DATA_PARALLEL), dp);
    EXPECT_EQ(all_groups(t.get(), MCORE_GROUP_KIND_PIPELINE_MODEL_PARALLEL), pp);
    EXPECT_EQ(all_groups(t.get(), MCORE_GROUP_KIND_MODEL_PARALLEL), mp);

    for (uint32_t r = 0; r < 16; ++r) {
        EXPECT_EQ(group_ranks(t.get(), r, MCORE_GROUP_KIND_TENSOR_MODEL_PARALLEL), tp[r / 2]) << r;
        EXPECT_EQ(group_ranks(t.get(), r, MCORE_GROUP_KIND_PIPELINE_MODEL_PARALLEL), pp[r % 4]) << r;
        mcore_group_info info{};
        ASSERT_EQ(mcore_topology_group(t.get(), r, MCORE_GROUP_KIND_TENSOR_MODEL_PARALLEL, &info),
                  MCORE_STATUS_OK);
        EXPECT_EQ(info.index, r / 2);
        EXPECT_EQ(info.rank, r % 2);
        EXPECT_EQ(info.size, 2u);
        ASSERT_EQ(mcore_topology_group(t.get(), r, MCORE_GROUP_KIND_PIPELINE_MODEL_PARALLEL, &info),
                  MCORE_STATUS_OK);
        EXPECT_EQ(info.index, r % 4);
        EXPECT_EQ(info.rank, r / 4);
        EXPECT_EQ(info.size, 4u);
        ASSERT_EQ(mcore_topology_group(t.get(), r, MCORE_GROUP_KIND_DATA_PARALLEL, &info), MCORE_STATUS_OK);
        EXPECT_EQ(info.rank, (r / 2) % 2);
        EXPECT_EQ(info.size, 2u);
    }
}

TEST(Topology, ContextParallelLayout) {
    // W=8 tp=2 cp=2 -> dp=2; tp stride 1, cp stride 2, dp stride 4.
    Topo t = make(8, 2, 1, 2);
    EXPECT_EQ(all_groups(t.get(), MCORE_GROUP_KIND_CONTEXT_PARALLEL),
              (std::vector<Ranks>{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
    EXPECT_EQ(all_groups(t.get(), MCORE_GROUP_KIND_DATA_PARALLEL),
              (std::vector<Ranks>{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
    EXPECT_EQ(all_groups(t.get(), MCORE_GROUP_KIND_DATA_PARALLEL_WITH_CP),
              (std::vector<Ranks>{{0, 2, 4, 6}, {1, 3, 5, 7}}));
    EXPECT_EQ(all_groups(t.get(), MCORE_GROUP_KIND_TENSOR_AND_CONTEXT_PARALLEL),
              (std::vector<Ranks>{{0, 1, 2, 3}, {4, 5, 6, 7}}));
}

TEST(Topology, KindEnumerationAndNames) {
    Topo t = make(16, 2, 4);
    size_t count = 0;
    ASSERT_EQ(mcore_topology_kind_count(t.get(), &count), MCORE_STATUS_OK);
    EXPECT_GE(count, 19u);  // the flat kinds (hierarchical levels only with hcp sizes)
    bool saw_tp = false, saw_embedding = false;
    for (size_t i = 0; i < count; ++i) {
        int32_t kind = -1;
        ASSERT_EQ(mcore_topology_kind_at(t.get(), i, &kind), MCORE_STATUS_OK);
        saw_tp |= kind == MCORE_GROUP_KIND_TENSOR_MODEL_PARALLEL;
        saw_embedding |= kind == MCORE_GROUP_KIND_EMBEDDING;
        // Every kind has a name that maps back to it.
        size_t need = 0;
        ASSERT_EQ(mcore_group_kind_name(kind, nullptr, 0, &need), MCORE_STATUS_BUFFER_TOO_SMALL);
        std::string name(need, '\0');
        ASSERT_EQ(mcore_group_kind_name(kind, name.data(), name.size(), &need), MCORE_STATUS_OK);
        name.resize(need - 1);
        int32_t back = -1;
        ASSERT_EQ(mcore_group_kind_from_name(name.c_str(), &back), MCORE_STATUS_OK) << name;
        EXPECT_EQ(back, kind) << name;
    }
    EXPECT_TRUE(saw_tp);
    EXPECT_TRUE(saw_embedding);
    int32_t kind = -1;
    EXPECT_EQ(mcore_topology_kind_at(t.get(), count, &kind), MCORE_STATUS_OUT_OF_RANGE);
    EXPECT_EQ(kind, -1);  // out-params untouched on error
    EXPECT_EQ(mcore_group_kind_from_name("no_such_kind", &kind), MCORE_STATUS_NOT_FOUND);
    EXPECT_NE(last_error().find("no_such_kind"), std::string::npos) << last_error();
}

TEST(Topology, PipelineNeighboursWrap) {
    Topo t = make(16, 2, 4);
    mcore_pipeline_info p{};
    ASSERT_EQ(mcore_topology_pipeline(t.get(), 5, &p), MCORE_STATUS_OK);  // pp group [1,5,9,13]
    EXPECT_EQ(p.stage, 1u);
    EXPECT_EQ(p.num_stages, 4u);
    EXPECT_EQ(p.first, 1u);
    EXPECT_EQ(p.last, 13u);
    EXPECT_EQ(p.next, 9u);
    EXPECT_EQ(p.prev, 1u);
    ASSERT_EQ(mcore_topology_pipeline(t.get(), 13, &p), MCORE_STATUS_OK);
    EXPECT_EQ(p.stage, 3u);
    EXPECT_EQ(p.next, 1u);  // wraps to the first stage
    EXPECT_EQ(p.prev, 9u);
    ASSERT_EQ(mcore_topology_pipeline(t.get(), 0, &p), MCORE_STATUS_OK);
    EXPECT_EQ(p.prev, 12u);  // wraps to the last stage
    bool first = false, last = true;
    ASSERT_EQ(mcore_topology_is_pipeline_first_stage(t.get(), 2, -1, &first), MCORE_STATUS_OK);
    EXPECT_TRUE(first);
    ASSERT_EQ(mcore_topology_is_pipeline_last_stage(t.get(), 2, -1, &last), MCORE_STATUS_OK);
    EXPECT_FALSE(last);
    ASSERT_EQ(mcore_topology_is_pipeline_last_stage(t.get(), 14, -1, &last), MCORE_STATUS_OK);
    EXPECT_TRUE(last);
}

TEST(Topology, EmbeddingMembership) {
    Topo t = make(16, 2, 4);
    // Default embedding ranks: first and last stage of each pp group; position embedding: first.
    EXPECT_EQ(group_ranks(t.get(), 0, MCORE_GROUP_KIND_EMBEDDING), (Ranks{0, 12}));
    EXPECT_EQ(group_ranks(t.get(), 15, MCORE_GROUP_KIND_EMBEDDING), (Ranks{3, 15}));
    EXPECT_EQ(group_ranks(t.get(), 1, MCORE_GROUP_KIND_POSITION_EMBEDDING), (Ranks{1}));
    mcore_group_info info{};
    EXPECT_EQ(mcore_topology_group(t.get(), 4, MCORE_GROUP_KIND_EMBEDDING, &info), MCORE_STATUS_NOT_MEMBER);
    EXPECT_NE(last_error().find('4'), std::string::npos) << last_error();
    bool in = true;
    ASSERT_EQ(mcore_topology_is_rank_in_embedding_group(t.get(), 8, -1, &in), MCORE_STATUS_OK);
    EXPECT_FALSE(in);
    ASSERT_EQ(mcore_topology_is_rank_in_embedding_group(t.get(), 12, -1, &in), MCORE_STATUS_OK);
    EXPECT_TRUE(in);
}

TEST(Topology, EmbeddingWithVirtualPipeline) {
    // W=4 pp=4 vpp=2: pp group [0,1,2,3], embedding [0,3].
    Topo t = make(4, 1, 4, 1, 2);
    bool in = false;
    ASSERT_EQ(mcore_topology_is_rank_in_embedding_group(t.get(), 0, 0, &in), MCORE_STATUS_OK);
    EXPECT_TRUE(in);
    ASSERT_EQ(mcore_topology_is_rank_in_embedding_group(t.get(), 0, 1, &in), MCORE_STATUS_OK);
    EXPECT_FALSE(in);
    ASSERT_EQ(mcore_topology_is_rank_in_embedding_group(t.get(), 3, 1, &in), MCORE_STATUS_OK);
    EXPECT_TRUE(in);
    ASSERT_EQ(mcore_topology_is_rank_in_embedding_group(t.get(), 3, 0, &in), MCORE_STATUS_OK);
    EXPECT_FALSE(in);
    bool first = false;
    EXPECT_EQ(mcore_topology_is_pipeline_first_stage(t.get(), 0, 2, &first), MCORE_STATUS_OUT_OF_RANGE);
}

namespace {
std::atomic<int> g_freed{0};
int32_t last_stage_only(void *, const uint32_t *ranks, size_t n, uint32_t *out, size_t cap, size_t *out_len) {
    if (n == 0 || cap < 1) return 1;
    out[0] = ranks[n - 1];
    *out_len = 1;
    return 0;
}
}  // namespace

TEST(Topology, CustomEmbeddingCallbackAndUserDataFreedOnce) {
    g_freed = 0;
    mcore_topology_config cfg;
    ASSERT_EQ(mcore_topology_config_init(&cfg), MCORE_STATUS_OK);
    cfg.tp = 2;
    cfg.pp = 4;
    cfg.embedding_ranks = last_stage_only;
    cfg.user_data = new int(7);
    cfg.user_data_free = [](void *p) {
        delete static_cast<int *>(p);
        ++g_freed;
    };
    mcore_topology *t = nullptr;
    ASSERT_EQ(mcore_topology_create(&cfg, 16, &t), MCORE_STATUS_OK) << last_error();
    EXPECT_EQ(group_ranks(t, 13, MCORE_GROUP_KIND_EMBEDDING), (Ranks{13}));
    mcore_group_info info{};
    EXPECT_EQ(mcore_topology_group(t, 1, MCORE_GROUP_KIND_EMBEDDING, &info), MCORE_STATUS_NOT_MEMBER);
    EXPECT_EQ(g_freed, 0);
    mcore_topology_destroy(t);
    EXPECT_EQ(g_freed, 1);
}

TEST(Topology, BufferTooSmallReportsSizeAndLeavesBuffer) {
    Topo t = make(16, 2, 4);
    Ranks buf(2, 999);
    size_t n = 0;
    EXPECT_EQ(mcore_topology_group_ranks(t.get(), 0, MCORE_GROUP_KIND_PIPELINE_MODEL_PARALLEL, buf.data(), 2, &n),
              MCORE_STATUS_BUFFER_TOO_SMALL);
    EXPECT_EQ(n, 4u);
    n = 0;
    EXPECT_EQ(mcore_topology_group_at(t.get(), MCORE_GROUP_KIND_MODEL_PARALLEL, 0, buf.data(), 2, &n),
              MCORE_STATUS_BUFFER_TOO_SMALL);
    EXPECT_EQ(n, 8u);
}

TEST(Topology, CreateDestroyCycles) {
    for (int i = 0; i < 50; ++i) {
        Topo t = make(64, 4, 2, 2);
        ASSERT_NE(t, nullptr);
        EXPECT_EQ(group_ranks(t.get(), 63, MCORE_GROUP_KIND_TENSOR_MODEL_PARALLEL), (Ranks{60, 61, 62, 63}));
    }
}

TEST(TopologyErrors, NullPointers) {
    EXPECT_EQ(mcore_topology_config_init(nullptr), MCORE_STATUS_INVALID_ARGUMENT);
    mcore_topology *t = nullptr;
    EXPECT_EQ(mcore_topology_create(nullptr, 8, &t), MCORE_STATUS_INVALID_ARGUMENT);
    EXPECT_FALSE(last_error().empty());
    mcore_topology_config cfg;
    ASSERT_EQ(mcore_topology_config_init(&cfg), MCORE_STATUS_OK);
    EXPECT_EQ(mcore_topology_create(&cfg, 8, nullptr), MCORE_STATUS_INVALID_ARGUMENT);
    mcore_topology_sizes sz;
    EXPECT_EQ(mcore_topology_get_sizes(nullptr, &sz), MCORE_STATUS_INVALID_ARGUMENT);
    Topo ok = make(8, 2, 1);
    EXPECT_EQ(mcore_topology_get_sizes(ok.get(), nullptr), MCORE_STATUS_INVALID_ARGUMENT);
    size_t n = 0;
    EXPECT_EQ(mcore_topology_group_ranks(ok.get(), 0, 0, nullptr, 4, &n), MCORE_STATUS_INVALID_ARGUMENT);
    EXPECT_EQ(mcore_topology_group_ranks(ok.get(), 0, 0, nullptr, 0, nullptr), MCORE_STATUS_INVALID_ARGUMENT);
    EXPECT_EQ(mcore_group_kind_from_name(nullptr, nullptr), MCORE_STATUS_INVALID_ARGUMENT);
}

TEST(TopologyErrors, NegativeSizeNamed) {
    mcore_topology_config cfg;
    ASSERT_EQ(mcore_topology_config_init(&cfg), MCORE_STATUS_OK);
    cfg.tp = -3;
    mcore_topology *t = reinterpret_cast<mcore_topology *>(0x1);
    mcore_status s = mcore_topology_create(&cfg, 8, &t);
    EXPECT_TRUE(s == MCORE_STATUS_INVALID_ARGUMENT || s == MCORE_STATUS_INVALID_CONFIG) << s;
    EXPECT_NE(last_error().find("-3"), std::string::npos) << last_error();
    EXPECT_EQ(t, reinterpret_cast<mcore_topology *>(0x1));  // untouched on failure
}

TEST(TopologyErrors, WorldNotDivisibleNamed) {
    mcore_topology_config cfg;
    ASSERT_EQ(mcore_topology_config_init(&cfg), MCORE_STATUS_OK);
    cfg.tp = 4;
    mcore_topology *t = nullptr;
    EXPECT_EQ(mcore_topology_create(&cfg, 10, &t), MCORE_STATUS_INVALID_CONFIG);
    EXPECT_NE(last_error().find("10"), std::string::npos) << last_error();
    EXPECT_EQ(t, nullptr);
}

TEST(TopologyErrors, RankAndKindOutOfRange) {
    Topo t = make(8, 2, 1);
    mcore_group_info info{};
    EXPECT_EQ(mcore_topology_group(t.get(), 8, MCORE_GROUP_KIND_TENSOR_MODEL_PARALLEL, &info),
              MCORE_STATUS_OUT_OF_RANGE);
    EXPECT_NE(last_error().find('8'), std::string::npos) << last_error();
    mcore_status s = mcore_topology_group(t.get(), 0, 777, &info);
    EXPECT_TRUE(s == MCORE_STATUS_NOT_FOUND || s == MCORE_STATUS_INVALID_ARGUMENT) << s;
    EXPECT_NE(last_error().find("777"), std::string::npos) << last_error();
    // A valid call clears the last error.
    ASSERT_EQ(mcore_topology_group(t.get(), 0, MCORE_GROUP_KIND_TENSOR_MODEL_PARALLEL, &info), MCORE_STATUS_OK);
    EXPECT_EQ(last_error(), "");
}
