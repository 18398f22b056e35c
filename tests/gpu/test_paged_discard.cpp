// kvrt_cache_discard_for_reevaluation in the paged layout: the suffix from
// n_keep on goes, the engine stores the tokens it is told to evaluate again,
// and attention then equals a cell cache that went through the same steps;
// a fork that shared the removed blocks keeps seeing its own tokens.
#include "gpu_test.hpp"

#include <vector>

#include "paged_check.hpp"
#include "reference/metrics.hpp"

using namespace kvrt_test;
using namespace kvrt_test::paged;

TEST_CASE("paged layout: discard and re-evaluate equals the cell layout", "[paged]") {
    GpuContext ctx;
    Shape sh;
    Cache paged = CacheSpec(sh).cells(256, 2).paged(16).create(ctx);
    Cache cells = CacheSpec(sh).cells(256, 2).create(ctx);
    const Prompt p = prompt(50, 3);
    CHECK(admit(paged, sh, 0, p) == 0);
    std::vector<uint32_t> stored(p.ids.size());
    {
        std::vector<int32_t> seqs(p.ids.size(), 0);
        const kvrt_batch b = make_batch(static_cast<uint32_t>(p.ids.size()), p.pos.data(), seqs.data());
        KVRT_REQUIRE_OK(kvrt_cache_place(cells, &b, stored.data()));
        write_rows(cells, sh, p.ids, p.pos, 0, stored.data());
    }
    // Sequence 1 shares every block of sequence 0 (and the cell cache's
    // sequence 1 every cell).
    KVRT_REQUIRE_OK(kvrt_cache_paged_fork(paged, 0, 1));
    KVRT_REQUIRE_OK(kvrt_cache_seq_cp(cells, 0, 1, -1, -1));
    std::vector<float> q(size_t{sh.heads} * sh.dk);
    for (size_t i = 0; i < q.size(); ++i) q[i] = 0.01f * static_cast<float>(i % 17) - 0.05f;
    const std::vector<float> fork_before = attend(paged, sh, 1, {1}, {49}, q);

    int32_t src[2] = {}, dst[2] = {}, count[2] = {};
    KVRT_REQUIRE_OK(kvrt_cache_discard_for_reevaluation(paged, 0, 4, 0, &src[0], &dst[0], &count[0]));
    KVRT_REQUIRE_OK(kvrt_cache_discard_for_reevaluation(cells, 0, 4, 0, &src[1], &dst[1], &count[1]));
    CHECK(src[0] == 27);  // 4 + (50 - 4) / 2
    CHECK(dst[0] == 4);
    CHECK(count[0] == 23);
    CHECK(src[0] == src[1]);
    CHECK(dst[0] == dst[1]);
    CHECK(count[0] == count[1]);
    int32_t last = -1;
    KVRT_REQUIRE_OK(kvrt_cache_seq_pos_max(paged, 0, &last));
    CHECK(last == 3);
    verify(paged);

    // The engine evaluates the tokens again at their new positions.
    Prompt again;
    for (int32_t i = 0; i < count[0]; ++i) {
        again.ids.push_back(p.ids[static_cast<size_t>(src[0] + i)]);
        again.pos.push_back(dst[0] + i);
    }
    std::vector<uint32_t> new_cells(again.ids.size());
    KVRT_REQUIRE_OK(kvrt_cache_paged_append(paged, nullptr, 0, static_cast<uint32_t>(again.ids.size()),
                                            again.ids.data(), again.pos.data(), new_cells.data()));
    write_rows(paged, sh, again.ids, again.pos, 0, new_cells.data());
    {
        std::vector<int32_t> seqs(again.ids.size(), 0);
        const kvrt_batch b = make_batch(static_cast<uint32_t>(again.ids.size()), again.pos.data(), seqs.data());
        std::vector<uint32_t> cc(again.ids.size());
        KVRT_REQUIRE_OK(kvrt_cache_place(cells, &b, cc.data()));
        write_rows(cells, sh, again.ids, again.pos, 0, cc.data());
    }
    verify(paged);
    const int32_t end = dst[0] + count[0] - 1;
    for (uint32_t layer = 0; layer < sh.layers; ++layer) {
        INFO("layer " << layer);
        const std::vector<float> a = attend(paged, sh, layer, {0, 1}, {end, 49}, std::vector<float>(2 * q.size(), 0.1f));
        const std::vector<float> b = attend(cells, sh, layer, {0, 1}, {end, 49}, std::vector<float>(2 * q.size(), 0.1f));
        CHECK(kvrt::ref::nmse(a, b) <= 1e-10);
    }
    // The fork still sees its 50 tokens, unchanged.
    CHECK(kvrt::ref::nmse(attend(paged, sh, 1, {1}, {49}, q), fork_before) == 0.0);
    CHECK(paged_cells(paged, 1).size() == 50);
    REQUIRE(ctx.validation_errors() == 0);
}
