// Rows a static graph writes itself (kvrt_cache_static_make_room, then
// kvrt_cache_place): the graph writes its tokens' rows right after the
// window, kvrt takes the accepted ones with no store and no copy, and
// rejected drafts cost no valid row. Checked against a cell-layout cache that
// stored only the accepted tokens: the same windows, the same attention.
#include "gpu_test.hpp"

#include <algorithm>
#include <vector>

#include "reference/half.hpp"

using namespace kvrt_test;

namespace {

constexpr uint32_t kLayers = 2, kHeads = 4, kKvHeads = 2, kDim = 8;

// Token `pos`'s value of (layer, head, d) in K or V; `draft` gives a
// rejected draft's (other) value at that position. Exact in f16.
float value(int32_t pos, uint32_t layer, uint32_t head, uint32_t d, bool v, bool draft = false) {
    const int32_t x = pos * 11 + static_cast<int32_t>(layer * 97 + head * 13 + d * 5) + (v ? 7 : 0) + (draft ? 501 : 0);
    return static_cast<float>(x % 1024) * 0.25f - 128.0f;
}

// Stores tokens [first, first + n) of sequence 0 in `c` (every layer).
void store(kvrt_cache c, int32_t first, uint32_t n) {
    store_values(c, 0, first, n, kLayers, kKvHeads, kDim,
                 [](int32_t pos, uint32_t l, uint32_t h, uint32_t d, bool v) { return value(pos, l, h, d, v); });
}

// What a graph does: writes the rows of `n` tokens from position `first`
// right after every window of sequence 0, the last `rejected` of them with
// draft values.
void graph_writes(kvrt_cache c, int32_t first, uint32_t n, uint32_t rejected) {
    for (uint32_t l = 0; l < kLayers; ++l)
        for (uint32_t h = 0; h < kKvHeads; ++h)
            for (kvrt_kv_array a : {KVRT_KV_ARRAY_K, KVRT_KV_ARRAY_V}) {
                kvrt_static_window w = KVRT_STATIC_WINDOW_INIT;
                KVRT_REQUIRE_OK(kvrt_cache_static_get_window(c, 0, static_cast<int32_t>(l), h, a, &w));
                REQUIRE(w.row_stride == kDim * 2u);
                std::vector<uint16_t> rows(size_t{n} * kDim);
                for (uint32_t i = 0; i < n; ++i)
                    for (uint32_t d = 0; d < kDim; ++d)
                        rows[size_t{i} * kDim + d] = kvrt::ref::f32_to_f16(
                            value(first + static_cast<int32_t>(i), l, h, d, a == KVRT_KV_ARRAY_V, i >= n - rejected));
                KVRT_REQUIRE_OK(kvrt_buffer_upload(w.buffer, w.offset + w.bytes, rows.data(), rows.size() * 2));
            }
}

}  // namespace

TEST_CASE("static layout: rows a graph writes after the window are placed with no copy", "[static]") {
    GpuContext ctx;
    const uint32_t S = 16, W = S - 1;
    // R = 2: 15 rows of room after a window of 15.
    Cache st = CacheSpec().shape(kLayers, kHeads, kKvHeads, kDim, kDim).type(KVRT_TYPE_F16).static_layout(S, 2.0)
                   .cells(0, 1).create(ctx);
    Cache cells = CacheSpec().shape(kLayers, kHeads, kKvHeads, kDim, kDim).type(KVRT_TYPE_F16).cells(64, 1).create(ctx);
    store(st, 0, 6);
    store(cells, 0, 6);
    int32_t next = 6;

    // (draft rows the graph writes, of which accepted): plain decode steps,
    // drafts partly and wholly accepted, one at the whole room.
    const std::vector<std::pair<uint32_t, uint32_t>> steps = {
        {1, 1}, {1, 1}, {4, 2}, {3, 3}, {5, 1}, {1, 1}, {6, 4}, {2, 0}, {15, 9}, {1, 1}, {4, 4}, {3, 1}, {1, 1}};
    uint64_t slides_seen = 0;
    for (const auto& [n, k] : steps) {
        INFO("a graph writes " << n << " rows from position " << next << ", " << k << " accepted");
        kvrt_static_stats before = KVRT_STATIC_STATS_INIT;
        KVRT_REQUIRE_OK(kvrt_cache_static_get_stats(st, 0, &before));
        KVRT_REQUIRE_OK(kvrt_cache_static_make_room(st, 0, n));
        graph_writes(st, next, n, n - k);
        if (k > 0) {
            std::vector<int32_t> pos(k), seqs(k, 0);
            for (uint32_t i = 0; i < k; ++i) pos[i] = next + static_cast<int32_t>(i);
            kvrt_batch b = make_batch(k, pos.data(), seqs.data());
            KVRT_REQUIRE_OK(kvrt_cache_place(st, &b, nullptr));
            store(cells, next, k);
            next += static_cast<int32_t>(k);
        }
        // Placing the rows moved nothing: only make_room may have slid.
        kvrt_static_stats after = KVRT_STATIC_STATS_INIT;
        KVRT_REQUIRE_OK(kvrt_cache_static_get_stats(st, 0, &after));
        REQUIRE(after.rows_appended == before.rows_appended + k);
        REQUIRE(after.slides - before.slides <= 1);
        slides_seen += after.slides - before.slides;

        // The window holds the newest min(next, W) tokens: no draft cost a row.
        kvrt_static_window w = KVRT_STATIC_WINDOW_INIT;
        KVRT_REQUIRE_OK(kvrt_cache_static_get_window(st, 0, 1, 1, KVRT_KV_ARRAY_K, &w));
        REQUIRE(w.n_valid == std::min<uint32_t>(static_cast<uint32_t>(next), W));
        REQUIRE(w.pos_last == next - 1);
        std::vector<uint16_t> rows(size_t{W} * kDim);
        KVRT_REQUIRE_OK(kvrt_buffer_download(w.buffer, w.offset, rows.data(), w.bytes));
        for (uint32_t r = W - w.n_valid; r < W; ++r) {
            const int32_t pos = next - static_cast<int32_t>(W - r);
            for (uint32_t d = 0; d < kDim; ++d)
                REQUIRE(rows[size_t{r} * kDim + d] == kvrt::ref::f32_to_f16(value(pos, 1, 1, d, false)));
        }

        // The same attention as the cell cache holding the window's tokens.
        if (next > static_cast<int32_t>(W)) KVRT_REQUIRE_OK(kvrt_cache_seq_rm(cells, 0, -1, next - static_cast<int32_t>(W)));
        AttentionGrid grid;
        grid.heads = kHeads;
        grid.head_dim_k = grid.head_dim_v = kDim;
        grid.layer_windows.assign(kLayers, 0);
        grid.max_pos = next;
        grid.step = 2;
        grid.params.scale = 0.05f;
        (void)same_attention(st, cells, grid);
    }
    REQUIRE(slides_seen > 0);  // the schedule ran out of room at least once
    REQUIRE(ctx.validation_errors() == 0);
}

TEST_CASE("static layout: making room refuses what it cannot do and changes nothing", "[static][errors]") {
    GpuContext ctx;
    const uint32_t S = 8;
    Cache tight = CacheSpec().shape(1, 2, 2, kDim, kDim).type(KVRT_TYPE_F16).static_layout(S, 1.0).cells(0, 1)
                      .create(ctx);
    Cache roomy = CacheSpec().shape(1, 2, 2, kDim, kDim).type(KVRT_TYPE_F16).static_layout(S, 1.5).cells(0, 2)
                      .create(ctx);
    Cache cells = CacheSpec().shape(1, 2, 2, kDim, kDim).type(KVRT_TYPE_F16).cells(16, 1).create(ctx);
    // R = 1: no room after the window at all.
    REQUIRE(kvrt_cache_static_make_room(tight, 0, 1) == KVRT_ERROR_INVALID_ARGUMENT);
    // R = 1.5 over 7 rows: ceil(10.5) - 7 = 4 rows of room.
    KVRT_REQUIRE_OK(kvrt_cache_static_make_room(roomy, 1, 4));
    REQUIRE(kvrt_cache_static_make_room(roomy, 0, 5) == KVRT_ERROR_INVALID_ARGUMENT);
    REQUIRE(kvrt_cache_static_make_room(roomy, 0, 0) == KVRT_ERROR_INVALID_ARGUMENT);
    REQUIRE(kvrt_cache_static_make_room(roomy, 2, 1) == KVRT_ERROR_INVALID_ARGUMENT);
    REQUIRE(kvrt_cache_static_make_room(roomy, -1, 1) == KVRT_ERROR_INVALID_ARGUMENT);
    REQUIRE(kvrt_cache_static_make_room(cells, 0, 1) == KVRT_ERROR_INVALID_ARGUMENT);
    REQUIRE(kvrt_cache_static_make_room(nullptr, 0, 1) == KVRT_ERROR_INVALID_HANDLE);
    REQUIRE(ctx.validation_errors() == 0);
}
