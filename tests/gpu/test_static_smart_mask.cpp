// The static layout's smart-mask style (KVRT_STATIC_STYLE_SMART_MASK): a ring
// of S-1 rows per (layer, KV head) whose window never moves. Checked against
// a plain model of ExecuTorch's smart-mask cache and mask, written from their
// documented behaviour (static_attention_io_manager.h: rows written at
// cache_pos, wrapping; the mask opening from the left; the step's tokens
// causal after the cache's entries), and against a cell-layout cache holding
// the same tokens: the same attention. Removals, transfers and state loads
// between styles and layouts, and bad input.
#include "gpu_test.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>
#include <vector>

#include "common/random.hpp"
#include "kvrt/kvrt_vulkan.h"
#include "reference/half.hpp"

using namespace kvrt_test;

namespace {

constexpr uint32_t kLayers = 2, kHeads = 4, kKvHeads = 2, kDim = 8;

// Token `pos`'s value of (layer, head, d) in K or V of sequence `seq`:
// distinct per token and exact in f16.
float value(int32_t seq, int32_t pos, uint32_t layer, uint32_t head, uint32_t d, bool v) {
    const int32_t x = pos * 11 + seq * 389 + static_cast<int32_t>(layer * 97 + head * 13 + d * 5) + (v ? 7 : 0);
    return static_cast<float>(x % 1024) * 0.25f - 128.0f;
}

// Stores tokens [first, first + n) of `seq` (0 or 1) in `c` (every layer).
void store(kvrt_cache c, int32_t seq, int32_t first, uint32_t n) {
    const TokenValue of_seq[2] = {
        [](int32_t pos, uint32_t l, uint32_t h, uint32_t d, bool v) { return value(0, pos, l, h, d, v); },
        [](int32_t pos, uint32_t l, uint32_t h, uint32_t d, bool v) { return value(1, pos, l, h, d, v); }};
    REQUIRE((seq == 0 || seq == 1));
    store_values(c, seq, first, n, kLayers, kKvHeads, kDim, of_seq[seq]);
}

// ExecuTorch's smart-mask cache of one sequence: the position each of the
// W rows holds (-1: never written), the write position and the valid length.
struct SmartMaskModel {
    std::vector<int32_t> rows;
    uint32_t cache_pos = 0, valid_len = 0;

    explicit SmartMaskModel(uint32_t cache_len) : rows(cache_len, -1) {}

    void update(int32_t first_pos, uint32_t n) {
        for (uint32_t i = 0; i < n; ++i) {
            rows[cache_pos] = first_pos + static_cast<int32_t>(i);
            cache_pos = (cache_pos + 1) % static_cast<uint32_t>(rows.size());
        }
        valid_len = std::min<uint32_t>(valid_len + n, static_cast<uint32_t>(rows.size()));
    }

    // Entry i of row j of the mask of a graph of n_new inputs
    // (StaticAttentionMask: unmask over the cache, set_causal_mask after).
    bool attends(uint32_t n_new, uint32_t j, uint32_t i) const {
        const uint32_t cache_len = static_cast<uint32_t>(rows.size());
        return n_new > 0 && i < cache_len ? i < valid_len : i - cache_len <= j;
    }
};

// The rows of (layer, head, array) of `seq`'s window, as f16 bits.
std::vector<uint16_t> window_rows(kvrt_cache c, int32_t seq, uint32_t layer, uint32_t head, kvrt_kv_array a,
                                  kvrt_static_window* out = nullptr) {
    kvrt_static_window w = KVRT_STATIC_WINDOW_INIT;
    KVRT_REQUIRE_OK(kvrt_cache_static_get_window(c, seq, static_cast<int32_t>(layer), head, a, &w));
    REQUIRE(w.row_stride == kDim * 2u);
    std::vector<uint16_t> rows(w.bytes / 2);
    KVRT_REQUIRE_OK(kvrt_buffer_download(w.buffer, w.offset, rows.data(), w.bytes));
    if (out) *out = w;
    return rows;
}

// Every row the model says holds a position holds that token's K and V, in
// every window of `seq`; the window never moved from `offset0`.
void check_rows(kvrt_cache c, int32_t seq, const SmartMaskModel& m, const uint64_t offset0[2]) {
    for (uint32_t l = 0; l < kLayers; ++l)
        for (uint32_t h = 0; h < kKvHeads; ++h)
            for (kvrt_kv_array a : {KVRT_KV_ARRAY_K, KVRT_KV_ARRAY_V}) {
                kvrt_static_window w = KVRT_STATIC_WINDOW_INIT;
                const std::vector<uint16_t> rows = window_rows(c, seq, l, h, a, &w);
                if (l == 0 && h == 0) REQUIRE(w.offset == offset0[a == KVRT_KV_ARRAY_V]);
                REQUIRE(w.rows == m.rows.size());
                REQUIRE(w.n_valid == m.valid_len);
                for (uint32_t r = 0; r < w.rows; ++r) {
                    if (m.rows[r] < 0) continue;
                    for (uint32_t d = 0; d < kDim; ++d)
                        REQUIRE(rows[size_t{r} * kDim + d] ==
                                kvrt::ref::f32_to_f16(value(seq, m.rows[r], l, h, d, a == KVRT_KV_ARRAY_V)));
                }
            }
}

// The rows the f32 mask marks valid hold exactly the tokens of `held` (in any
// row order): layer 1, head 1, K and V.
void check_held(kvrt_cache c, int32_t seq, uint32_t S, const std::vector<int32_t>& held) {
    std::vector<float> mask(S, 1.0f);
    KVRT_REQUIRE_OK(kvrt_cache_static_get_mask(c, seq, KVRT_TYPE_F32, mask.data(), bytes_of(mask)));
    REQUIRE(mask[S - 1] == 0.0f);
    for (kvrt_kv_array a : {KVRT_KV_ARRAY_K, KVRT_KV_ARRAY_V}) {
        const std::vector<uint16_t> rows = window_rows(c, seq, 1, 1, a);
        std::multiset<int32_t> found;
        for (uint32_t r = 0; r + 1 < S; ++r) {
            if (mask[r] != 0.0f) {
                REQUIRE(mask[r] == -std::numeric_limits<float>::infinity());
                continue;
            }
            // Which held token's row is this?
            int32_t which = -1;
            for (int32_t p : held) {
                bool same = true;
                for (uint32_t d = 0; d < kDim && same; ++d)
                    same = rows[size_t{r} * kDim + d] ==
                           kvrt::ref::f32_to_f16(value(seq, p, 1, 1, d, a == KVRT_KV_ARRAY_V));
                if (same) which = p;
            }
            INFO("window row " << r);
            REQUIRE(which >= 0);
            found.insert(which);
        }
        REQUIRE(found == std::multiset<int32_t>(held.begin(), held.end()));
    }
}

AttentionGrid grid_to(int32_t max_pos, uint32_t seqs = 1) {
    AttentionGrid grid;
    grid.seqs = seqs;
    grid.heads = kHeads;
    grid.head_dim_k = grid.head_dim_v = kDim;
    grid.layer_windows.assign(kLayers, 0);
    grid.max_pos = max_pos;
    grid.step = 3;
    grid.params.scale = 0.05f;
    return grid;
}

uint32_t float_bits(float f) {
    uint32_t u = 0;
    std::memcpy(&u, &f, 4);
    return u;
}

}  // namespace

TEST_CASE("smart-mask style: the ring and its masks match ExecuTorch's, and attend as the cell layout",
          "[static][smart-mask]") {
    GpuContext ctx;
    const uint32_t S = 10, W = S - 1;
    Cache ring = CacheSpec().shape(kLayers, kHeads, kKvHeads, kDim, kDim).type(KVRT_TYPE_F16).smart_mask_layout(S)
                     .cells(0, 2).create(ctx);
    Cache cells = CacheSpec().shape(kLayers, kHeads, kKvHeads, kDim, kDim).type(KVRT_TYPE_F16).cells(64, 2)
                      .create(ctx);
    kvrt_cache_info info = KVRT_CACHE_INFO_INIT;
    KVRT_REQUIRE_OK(kvrt_cache_get_info(ring, &info));
    REQUIRE(info.capacity == 2 * W);

    // Sequence 1 holds a few tokens throughout: its ring is its own.
    store(ring, 1, 0, 4);
    store(cells, 1, 0, 4);
    SmartMaskModel other(W);
    other.update(0, 4);

    uint64_t offset0[2] = {0, 0};
    for (kvrt_kv_array a : {KVRT_KV_ARRAY_K, KVRT_KV_ARRAY_V}) {
        kvrt_static_window w = KVRT_STATIC_WINDOW_INIT;
        KVRT_REQUIRE_OK(kvrt_cache_static_get_window(ring, 0, 0, 0, a, &w));
        REQUIRE(w.n_valid == 0);
        REQUIRE(w.rows == W);
        offset0[a == KVRT_KV_ARRAY_V] = w.offset;
        // A layer's heads are back to back: one [1, H, S-1, D] tensor at head
        // 0's offset, in one VkBuffer.
        for (uint32_t l = 0; l < kLayers; ++l) {
            kvrt_static_window w0 = KVRT_STATIC_WINDOW_INIT;
            KVRT_REQUIRE_OK(kvrt_cache_static_get_window(ring, 0, static_cast<int32_t>(l), 0, a, &w0));
            for (uint32_t h = 1; h < kKvHeads; ++h) {
                kvrt_static_window wh = KVRT_STATIC_WINDOW_INIT;
                KVRT_REQUIRE_OK(kvrt_cache_static_get_window(ring, 0, static_cast<int32_t>(l), h, a, &wh));
                REQUIRE(wh.buffer == w0.buffer);
                REQUIRE(wh.offset == w0.offset + h * w0.bytes);
            }
            VkBuffer vb = VK_NULL_HANDLE;
            VkDeviceSize at = 0, contiguous = 0;
            KVRT_REQUIRE_OK(kvrt_buffer_get_vulkan(w0.buffer, w0.offset, &vb, &at, &contiguous));
            REQUIRE(contiguous >= kKvHeads * w0.bytes);
        }
    }

    const float inf = std::numeric_limits<float>::infinity();
    struct Encoding {
        kvrt_mask_format format;
        uint32_t flags;
        float masked_value;
        uint32_t attend_bits, masked_bits;
    };
    const Encoding encodings[] = {
        {KVRT_MASK_F32, 0, 0.0f, float_bits(0.0f), float_bits(-inf)},
        {KVRT_MASK_F32, KVRT_MASK_FINITE, -65535.0f, float_bits(0.0f), float_bits(-65535.0f)},
        {KVRT_MASK_F16, 0, 0.0f, 0x0000, 0xFC00},
        {KVRT_MASK_U16, 0, 0.0f, 65535, 0},
    };

    SmartMaskModel model(W);
    int32_t next = 0;
    // Single tokens, prefill chunks that wrap the ring's end, and a whole ring.
    for (uint32_t n : {1u, 1u, 3u, 1u, 4u, 2u, 9u, 1u, 5u, 1u, 1u, 7u, 2u}) {
        INFO(n << " tokens from position " << next);
        store(ring, 0, next, n);
        store(cells, 0, next, n);
        model.update(next, n);
        next += static_cast<int32_t>(n);
        check_rows(ring, 0, model, offset0);
        kvrt_static_window w = KVRT_STATIC_WINDOW_INIT;
        KVRT_REQUIRE_OK(kvrt_cache_static_get_window(ring, 0, 1, 0, KVRT_KV_ARRAY_K, &w));
        REQUIRE(w.pos_last == next - 1);
        REQUIRE(w.pos_first == next - static_cast<int32_t>(w.n_valid));

        for (uint32_t n_new : {1u, 3u, W}) {
            const uint32_t L = W + n_new;  // the cache's W entries, then the step's tokens
            for (const Encoding& e : encodings) {
                INFO("a graph of " << n_new << " inputs, format " << e.format);
                kvrt_static_mask_desc d = KVRT_STATIC_MASK_DESC_INIT;
                d.format = e.format;
                d.flags = e.flags;
                d.masked_value = e.masked_value;
                d.n_new = n_new;
                const bool f32 = e.format == KVRT_MASK_F32;
                const size_t count = size_t{n_new} * L;
                std::vector<uint32_t> m32(count + 1, 0x12345678u);
                std::vector<uint16_t> m16(count + 1, 0x1234);
                void* out = f32 ? static_cast<void*>(m32.data()) : static_cast<void*>(m16.data());
                const uint64_t bytes = count * (f32 ? 4 : 2);
                REQUIRE(kvrt_cache_static_get_graph_mask(ring, 0, &d, out, bytes - 1) == KVRT_ERROR_INVALID_ARGUMENT);
                KVRT_REQUIRE_OK(kvrt_cache_static_get_graph_mask(ring, 0, &d, out, bytes));
                for (uint32_t j = 0; j < n_new; ++j)
                    for (uint32_t i = 0; i < L; ++i) {
                        const uint32_t want = model.attends(n_new, j, i) ? e.attend_bits : e.masked_bits;
                        const uint32_t got = f32 ? m32[size_t{j} * L + i] : m16[size_t{j} * L + i];
                        if (got != want) FAIL("row " << j << " entry " << i << ": " << got << ", want " << want);
                    }
                REQUIRE((f32 ? m32[count] == 0x12345678u : m16[count] == 0x1234));  // nothing past the mask
            }
        }
        // The decode mask of kvrt_cache_static_get_mask is the graph mask of one input.
        std::vector<float> mask(S);
        KVRT_REQUIRE_OK(kvrt_cache_static_get_mask(ring, 0, KVRT_TYPE_F32, mask.data(), bytes_of(mask)));
        for (uint32_t i = 0; i < S; ++i) REQUIRE((mask[i] == 0.0f) == model.attends(1, 0, i));

        // The cell cache holds the same tokens: the newest W.
        if (next > static_cast<int32_t>(W)) KVRT_REQUIRE_OK(kvrt_cache_seq_rm(cells, 0, -1, next - static_cast<int32_t>(W)));
        (void)same_attention(ring, cells, grid_to(next + 1, 2));
    }
    uint64_t offset1[2] = {0, 0};
    for (kvrt_kv_array a : {KVRT_KV_ARRAY_K, KVRT_KV_ARRAY_V}) {
        kvrt_static_window w = KVRT_STATIC_WINDOW_INIT;
        KVRT_REQUIRE_OK(kvrt_cache_static_get_window(ring, 1, 0, 0, a, &w));
        offset1[a == KVRT_KV_ARRAY_V] = w.offset;
    }
    REQUIRE(offset1[0] != offset0[0]);
    check_rows(ring, 1, other, offset1);
    kvrt_static_stats stats = KVRT_STATIC_STATS_INIT;
    KVRT_REQUIRE_OK(kvrt_cache_static_get_stats(ring, 0, &stats));
    REQUIRE(stats.rows_appended == static_cast<uint64_t>(next));
    REQUIRE(stats.slides == 0);  // appends never copy
    REQUIRE(stats.bytes_moved == 0);
    REQUIRE(ctx.validation_errors() == 0);
}

TEST_CASE("smart-mask style: removals keep the other rows and attend as the cell layout", "[static][smart-mask]") {
    GpuContext ctx;
    const uint32_t S = 12, W = S - 1;
    Cache ring = CacheSpec().shape(kLayers, kHeads, kKvHeads, kDim, kDim).type(KVRT_TYPE_F16).smart_mask_layout(S)
                     .cells(0, 1).create(ctx);
    Cache cells = CacheSpec().shape(kLayers, kHeads, kKvHeads, kDim, kDim).type(KVRT_TYPE_F16).cells(64, 1)
                      .create(ctx);
    Rng rng(2027);
    std::vector<int32_t> held;
    int32_t next = 0;
    uint64_t copies = 0;
    for (int step = 0; step < 40; ++step) {
        const uint32_t n = static_cast<uint32_t>(held.size());
        if (held.empty() || step % 3 != 2) {
            const uint32_t add = 1 + rng.below(step % 4 == 0 ? W : 3);
            INFO("step " << step << ": append " << add);
            store(ring, 0, next, add);
            store(cells, 0, next, add);
            for (uint32_t i = 0; i < add; ++i) held.push_back(next + static_cast<int32_t>(i));
            next += static_cast<int32_t>(add);
            if (held.size() > W) {
                const int32_t oldest = held[held.size() - W];
                held.erase(held.begin(), held.end() - W);
                KVRT_REQUIRE_OK(kvrt_cache_seq_rm(cells, 0, -1, oldest));
            }
        } else {
            // The newest (rejected drafts), the oldest, or a middle range.
            const uint32_t kind = rng.below(3);
            uint32_t first = rng.below(n), count = 1 + rng.below(n - first);
            if (kind == 0) count = n - first;
            if (kind == 1) first = 0;
            const int32_t p0 = held[first], p1 = held[first + count - 1] + 1;
            INFO("step " << step << ": remove [" << p0 << ", " << p1 << ")");
            kvrt_static_stats before = KVRT_STATIC_STATS_INIT, after = KVRT_STATIC_STATS_INIT;
            KVRT_REQUIRE_OK(kvrt_cache_static_get_stats(ring, 0, &before));
            KVRT_REQUIRE_OK(kvrt_cache_seq_rm(ring, 0, p0, p1));
            KVRT_REQUIRE_OK(kvrt_cache_seq_rm(cells, 0, p0, p1));
            KVRT_REQUIRE_OK(kvrt_cache_static_get_stats(ring, 0, &after));
            const uint32_t older = first, newer = n - first - count;
            if (count < n) {
                // Only a middle range moves rows: the smaller side.
                REQUIRE(after.rows_moved - before.rows_moved == (older && newer ? std::min(older, newer) : 0u));
                copies += after.slides - before.slides;
            } else {
                REQUIRE(after.rows_appended == 0);  // emptied: the counters start again
            }
            held.erase(held.begin() + first, held.begin() + first + count);
        }
        check_held(ring, 0, S, held);
        (void)same_attention(ring, cells, grid_to(next + 1));
    }
    REQUIRE(copies > 0);
    REQUIRE(ctx.validation_errors() == 0);
}

TEST_CASE("smart-mask style: transfers and states move between styles and layouts", "[static][smart-mask]") {
    GpuContext ctx;
    const uint32_t S = 10, W = S - 1;
    const CacheSpec shape = CacheSpec().shape(kLayers, kHeads, kKvHeads, kDim, kDim).type(KVRT_TYPE_F16);
    Cache ring = CacheSpec(shape).smart_mask_layout(S).cells(0, 2).create(ctx);
    Cache shift = CacheSpec(shape).static_layout(S, 2.0).cells(0, 2).create(ctx);
    Cache cells = CacheSpec(shape).cells(64, 2).create(ctx);

    // 23 tokens into the ring: it wrapped twice and holds the newest 9.
    store(ring, 0, 0, 9);
    store(ring, 0, 9, 9);
    store(ring, 0, 18, 5);
    store(cells, 0, 14, W);
    (void)same_attention(ring, cells, grid_to(23));

    // Ring -> cells and back into the ring's other sequence.
    uint32_t n = 0;
    KVRT_REQUIRE_OK(kvrt_cache_seq_transfer(ring, 0, cells, 1, &n));
    REQUIRE(n == W);
    int32_t lo = 0, hi = 0;
    KVRT_REQUIRE_OK(kvrt_cache_seq_pos_min(cells, 1, &lo));
    KVRT_REQUIRE_OK(kvrt_cache_seq_pos_max(cells, 1, &hi));
    REQUIRE(lo == 14);
    REQUIRE(hi == 22);
    KVRT_REQUIRE_OK(kvrt_cache_seq_transfer(cells, 1, ring, 1, &n));
    REQUIRE(n == W);
    // Filled in position order from empty: right-padded, rows 0..8 = positions 14..22.
    SmartMaskModel fresh(W);
    fresh.update(14, W);
    // Sequence 1's rows are sequence 0's tokens (the values of seq 0).
    for (uint32_t l = 0; l < kLayers; ++l)
        for (uint32_t h = 0; h < kKvHeads; ++h)
            for (kvrt_kv_array a : {KVRT_KV_ARRAY_K, KVRT_KV_ARRAY_V}) {
                const std::vector<uint16_t> rows = window_rows(ring, 1, l, h, a);
                for (uint32_t r = 0; r < W; ++r)
                    for (uint32_t d = 0; d < kDim; ++d)
                        REQUIRE(rows[size_t{r} * kDim + d] ==
                                kvrt::ref::f32_to_f16(value(0, fresh.rows[r], l, h, d, a == KVRT_KV_ARRAY_V)));
            }

    // Ring -> shift-pointer: the same tokens, left-padded there.
    KVRT_REQUIRE_OK(kvrt_cache_seq_transfer(ring, 0, shift, 0, &n));
    REQUIRE(n == W);
    (void)same_attention(shift, cells, grid_to(23));

    // A state saved from the ring loads into the shift-pointer style and the
    // cell layout, and a cell state into the ring: the same attention.
    const std::vector<uint8_t> from_ring = save_state(ring, 0);
    Cache shift2 = CacheSpec(shape).static_layout(S, 1.5).cells(0, 1).create(ctx);
    KVRT_REQUIRE_OK(kvrt_cache_state_load(shift2, 0, from_ring.data(), from_ring.size()));
    Cache cells2 = CacheSpec(shape).cells(32, 1).create(ctx);
    KVRT_REQUIRE_OK(kvrt_cache_state_load(cells2, 0, from_ring.data(), from_ring.size()));
    (void)same_attention(shift2, cells2, grid_to(23));
    (void)same_attention(shift2, ring, grid_to(23));

    store(cells2, 0, 23, 4);  // 13 tokens: the ring takes the newest 9
    const std::vector<uint8_t> from_cells = save_state(cells2, 0);
    Cache ring2 = CacheSpec(shape).smart_mask_layout(S).cells(0, 1).create(ctx);
    KVRT_REQUIRE_OK(kvrt_cache_state_load(ring2, 0, from_cells.data(), from_cells.size()));
    KVRT_REQUIRE_OK(kvrt_cache_seq_rm(cells2, 0, -1, 27 - static_cast<int32_t>(W)));
    (void)same_attention(ring2, cells2, grid_to(27));
    // A whole-cache state of the ring loads into a ring again.
    const std::vector<uint8_t> whole = save_state(ring, -1);
    Cache ring3 = CacheSpec(shape).smart_mask_layout(S).cells(0, 2).create(ctx);
    KVRT_REQUIRE_OK(kvrt_cache_state_load(ring3, -1, whole.data(), whole.size()));
    (void)same_attention(ring3, ring, grid_to(23, 2));
    REQUIRE(ctx.validation_errors() == 0);
}

TEST_CASE("smart-mask style: its size, and what it refuses", "[static][smart-mask][errors]") {
    GpuContext ctx;
    // SPEC 5's Llama-7B (32 layers, 32 heads, D = 128, 16-bit, S = 2048) with
    // the ring's R = 1: 2 * 32 * 32 * 2047 * 128 * 2 bytes.
    kvrt_cache_estimate e = KVRT_CACHE_ESTIMATE_INIT;
    KVRT_REQUIRE_OK(CacheSpec().shape(32, 32, 32, 128).type(KVRT_TYPE_F16).smart_mask_layout(2048).cells(0, 1)
                        .estimate(nullptr, &e));
    REQUIRE(e.data_bytes == 1073217536ull);
    // A small one allocates what its estimate says (up to the driver's rounding).
    const CacheSpec small = CacheSpec().shape(kLayers, kHeads, kKvHeads, kDim, kDim).type(KVRT_TYPE_F16)
                                .smart_mask_layout(33).cells(0, 3);
    KVRT_REQUIRE_OK(small.estimate(ctx, &e));
    REQUIRE(e.data_bytes == 2ull * 3 * kLayers * kKvHeads * 32 * kDim * 2);
    Cache c = small.create(ctx);
    kvrt_cache_info info = KVRT_CACHE_INFO_INIT;
    KVRT_REQUIRE_OK(kvrt_cache_get_info(c, &info));
    REQUIRE(info.device_bytes == e.device_bytes);
    REQUIRE(info.capacity == 3 * 32);

    // Another reserve than 1: the ring has none.
    Cache none;
    CacheSpec bad = small;
    bad.reserve = 2.0;
    REQUIRE(bad.try_create(ctx, &none) == KVRT_ERROR_INVALID_ARGUMENT);
    REQUIRE(std::string(kvrt_last_error_message()).find("smart-mask") != std::string::npos);
    bad.reserve = 1.0;
    KVRT_REQUIRE_OK(bad.try_create(ctx, &none));
    // No room after the window.
    REQUIRE(kvrt_cache_static_make_room(c, 0, 1) == KVRT_ERROR_INVALID_ARGUMENT);
    // Unknown styles, and the style on another layout.
    kvrt_static_style_desc style = KVRT_STATIC_STYLE_DESC_INIT;
    style.style = static_cast<kvrt_static_style>(2);
    CacheSpec unknown = CacheSpec().shape(kLayers, kHeads, kKvHeads, kDim, kDim).static_layout(8);
    unknown.next = &style;
    Cache out;
    REQUIRE(unknown.try_create(ctx, &out) == KVRT_ERROR_INVALID_ARGUMENT);
    REQUIRE(out.get() == nullptr);
    style.style = KVRT_STATIC_STYLE_SMART_MASK;
    CacheSpec on_cells = CacheSpec().shape(kLayers, kHeads, kKvHeads, kDim, kDim).cells(16, 1);
    on_cells.next = &style;
    REQUIRE(on_cells.try_create(ctx, &out) == KVRT_ERROR_INVALID_ARGUMENT);
    REQUIRE(on_cells.estimate(ctx, &e) == KVRT_ERROR_INVALID_ARGUMENT);
    // Chained twice.
    kvrt_static_style_desc twice = KVRT_STATIC_STYLE_DESC_INIT;
    twice.next = &style;
    style.next = nullptr;
    CacheSpec repeated = CacheSpec().shape(kLayers, kHeads, kKvHeads, kDim, kDim).static_layout(8);
    repeated.next = &twice;
    REQUIRE(repeated.try_create(ctx, &out) == KVRT_ERROR_INVALID_ARGUMENT);
    // The explicit default style is the shift-pointer layout.
    style.style = KVRT_STATIC_STYLE_SHIFT_POINTER;
    CacheSpec plain = CacheSpec().shape(kLayers, kHeads, kKvHeads, kDim, kDim).static_layout(8);
    plain.next = &style;
    KVRT_REQUIRE_OK(plain.try_create(ctx, &out));
    KVRT_REQUIRE_OK(kvrt_cache_static_make_room(out, 0, 1));
    REQUIRE(ctx.validation_errors() == 0);
}

TEST_CASE("smart-mask style: a removal that fails at any point leaves the ring as it was",
          "[static][smart-mask][faults]") {
    GpuContext ctx;
    const uint32_t S = 12, W = S - 1;
    Cache ring = CacheSpec().shape(kLayers, kHeads, kKvHeads, kDim, kDim).type(KVRT_TYPE_F16).smart_mask_layout(S)
                     .cells(0, 1).create(ctx);
    // 15 tokens: the ring wrapped, rows 0..3 hold positions 11..14 and rows
    // 4..10 positions 4..10. Removing [10, 12) moves the newer side
    // (positions 12..14 in rows 1..3) back by 2, across the ring's end: row 1
    // to row 10, rows 2..3 to rows 0..1, two copies.
    store(ring, 0, 0, W);
    store(ring, 0, static_cast<int32_t>(W), 4);
    std::vector<int32_t> held;
    for (int32_t p = 4; p < 15; ++p) held.push_back(p);
    for (uint64_t n = 1;; ++n) {
        INFO("fault point " << n);
        uint64_t passed = 0;
        const kvrt_result r = with_fault_point(n, &passed, [&] { return kvrt_cache_seq_rm(ring, 0, 10, 12); });
        INFO("result " << r << ": " << kvrt_last_error_message());
        const bool removed = r == KVRT_SUCCESS || r == KVRT_ERROR_TIMEOUT;  // a timeout keeps it
        std::vector<int32_t> want = held;
        if (removed) want.erase(std::remove_if(want.begin(), want.end(), [](int32_t p) { return p >= 10 && p < 12; }),
                                want.end());
        check_held(ring, 0, S, want);
        if (passed < n) {
            REQUIRE(r == KVRT_SUCCESS);  // the armed point was never reached: all points covered
            break;
        }
        if (removed) {
            // Put positions 10..11 back by rebuilding the same ring.
            KVRT_REQUIRE_OK(kvrt_cache_seq_rm(ring, 0, -1, -1));
            store(ring, 0, 0, W);
            store(ring, 0, static_cast<int32_t>(W), 4);
        }
    }
    REQUIRE(ctx.validation_errors() == 0);
}

TEST_CASE("static layout: one tensor of all heads per layer where the windows stay at the region's start",
          "[static][smart-mask]") {
    // The smart-mask ring, and the shift pointer with R = 1 (whose window
    // always starts at row 0), keep a layer's windows head after head at
    // every step; with R > 1 the heads' regions are ceil(R(S-1)) rows apart.
    GpuContext ctx;
    const uint32_t S = 9, W = S - 1;
    const CacheSpec shape = CacheSpec().shape(kLayers, kHeads, kKvHeads, kDim, kDim).type(KVRT_TYPE_F16);
    Cache ring = CacheSpec(shape).smart_mask_layout(S).cells(0, 2).create(ctx);
    Cache r1 = CacheSpec(shape).static_layout(S, 1.0).cells(0, 2).create(ctx);
    Cache r2 = CacheSpec(shape).static_layout(S, 2.0).cells(0, 2).create(ctx);
    int32_t next = 0;
    for (uint32_t n : {3u, 1u, 6u, 2u, 8u, 1u}) {
        for (kvrt_cache c : {ring.get(), r1.get(), r2.get()}) store(c, 1, next, n);
        next += static_cast<int32_t>(n);
        for (kvrt_cache c : {ring.get(), r1.get(), r2.get()}) {
            const bool per_layer = c != r2.get();
            for (kvrt_kv_array a : {KVRT_KV_ARRAY_K, KVRT_KV_ARRAY_V}) {
                kvrt_static_window w0 = KVRT_STATIC_WINDOW_INIT, w1 = KVRT_STATIC_WINDOW_INIT;
                KVRT_REQUIRE_OK(kvrt_cache_static_get_window(c, 1, 1, 0, a, &w0));
                KVRT_REQUIRE_OK(kvrt_cache_static_get_window(c, 1, 1, 1, a, &w1));
                REQUIRE(w0.n_valid == std::min<uint32_t>(static_cast<uint32_t>(next), W));
                const uint64_t apart = w1.offset - w0.offset;
                if (per_layer)
                    REQUIRE(apart == w0.bytes);
                else
                    REQUIRE(apart == 2 * w0.bytes);  // ceil(2 (S-1)) rows per region
            }
        }
    }
    REQUIRE(ctx.validation_errors() == 0);
}
