// The static padded layout (SPEC 5): windows, masks and bytes moved while
// appending token by token, attention equal to the cell layout's on the same
// tokens, conversion between layouts both ways, and bad input.
#include "gpu_test.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "common/random.hpp"
#include "kv/static_window.hpp"
#include "kvrt/kvrt_vulkan.h"
#include "reference/attention.hpp"
#include "reference/half.hpp"
#include "reference/metrics.hpp"

using namespace kvrt_test;

namespace {

// The shape of these tests' caches: 2 layers, 4 query and 2 KV heads, head
// dims 8 (K) and 16 (V), F16; a test adds the layout and the cells.
struct Shape : CacheSpec {
    Shape() { shape(2, 4, 2, 8, 16); }
};

// The f32 value of token `pos`'s element (layer, head, d) of K (v = false) or
// V: distinct per token and exactly representable in f16.
float value(int32_t pos, uint32_t layer, uint32_t head, uint32_t d, bool v) {
    return static_cast<float>((pos * 7 + static_cast<int32_t>(layer * 131 + head * 17 + d * 3) + (v ? 5 : 0)) % 1024) -
           512.0f;
}

// One token's K and V rows of every layer ([layer][head][dim]).
void token_rows(const Shape& sh, int32_t pos, std::vector<float>* k, std::vector<float>* v) {
    k->assign(size_t{sh.layers} * sh.kv_heads * sh.dk, 0.0f);
    v->assign(size_t{sh.layers} * sh.kv_heads * sh.dv, 0.0f);
    for (uint32_t l = 0; l < sh.layers; ++l)
        for (uint32_t h = 0; h < sh.kv_heads; ++h) {
            for (uint32_t d = 0; d < sh.dk; ++d) (*k)[(size_t{l} * sh.kv_heads + h) * sh.dk + d] = value(pos, l, h, d, false);
            for (uint32_t d = 0; d < sh.dv; ++d) (*v)[(size_t{l} * sh.kv_heads + h) * sh.dv + d] = value(pos, l, h, d, true);
        }
}

// Stores tokens [first, first + n) of `seq` (all layers, f32 from host).
kvrt_result store_tokens(kvrt_cache c, const Shape& sh, int32_t seq, int32_t first, uint32_t n,
                         kvrt_stream stream = nullptr, uint32_t* cells = nullptr) {
    std::vector<int32_t> pos(n), seqs(n, seq);
    const size_t kl = size_t{sh.kv_heads} * sh.dk, vl = size_t{sh.kv_heads} * sh.dv;
    std::vector<float> k(kl * n * sh.layers), v(vl * n * sh.layers), tk, tv;
    for (uint32_t i = 0; i < n; ++i) {
        pos[i] = first + static_cast<int32_t>(i);
        token_rows(sh, pos[i], &tk, &tv);
        for (uint32_t l = 0; l < sh.layers; ++l) {
            std::copy_n(tk.data() + l * kl, kl, k.data() + (size_t{l} * n + i) * kl);
            std::copy_n(tv.data() + l * vl, vl, v.data() + (size_t{l} * n + i) * vl);
        }
    }
    kvrt_batch b = make_batch(n, pos.data(), seqs.data());
    kvrt_tensor_ref kr = host_tensor(k.data());
    kvrt_tensor_ref vr = host_tensor(v.data());
    return kvrt_cache_store(c, stream, &b, -1, &kr, &vr, cells);
}

// Checks every window of `seq` against the tokens of `positions` (oldest
// first): the window's last rows, bit for bit, and the mask.
void check_window_positions(kvrt_cache c, const Shape& sh, int32_t seq, uint32_t seq_len,
                            const std::vector<int32_t>& positions) {
    const uint32_t W = seq_len - 1;
    const uint32_t n_valid = static_cast<uint32_t>(positions.size());
    REQUIRE(n_valid <= W);
    for (uint32_t l = 0; l < sh.layers; ++l)
        for (uint32_t h = 0; h < sh.kv_heads; ++h)
            for (kvrt_kv_array a : {KVRT_KV_ARRAY_K, KVRT_KV_ARRAY_V}) {
                kvrt_static_window w = KVRT_STATIC_WINDOW_INIT;
                KVRT_REQUIRE_OK(kvrt_cache_static_get_window(c, seq, static_cast<int32_t>(l), h, a, &w));
                const uint32_t dim = a == KVRT_KV_ARRAY_K ? sh.dk : sh.dv;
                REQUIRE(w.rows == W);
                REQUIRE(w.row_stride == dim * 2u);
                REQUIRE(w.bytes == uint64_t{W} * w.row_stride);
                REQUIRE(w.n_valid == n_valid);
                REQUIRE(w.element_type == KVRT_TYPE_F16);
                REQUIRE(w.pos_first == (n_valid ? positions.front() : -1));
                REQUIRE(w.pos_last == (n_valid ? positions.back() : -1));
                uint64_t size = 0;
                KVRT_REQUIRE_OK(kvrt_buffer_get_size(w.buffer, &size));
                REQUIRE(w.offset + w.bytes <= size);
                // The window lies in one VkBuffer, bindable as is.
                VkBuffer vb = VK_NULL_HANDLE;
                VkDeviceSize vo = 0, contiguous = 0;
                KVRT_REQUIRE_OK(kvrt_buffer_get_vulkan(w.buffer, w.offset, &vb, &vo, &contiguous));
                REQUIRE(vb != VK_NULL_HANDLE);
                REQUIRE(contiguous >= w.bytes);
                std::vector<uint16_t> rows(size_t{W} * dim);
                KVRT_REQUIRE_OK(kvrt_buffer_download(w.buffer, w.offset, rows.data(), w.bytes));
                for (uint32_t r = W - n_valid; r < W; ++r) {
                    const int32_t pos = positions[r - (W - n_valid)];
                    for (uint32_t d = 0; d < dim; ++d) {
                        INFO("layer " << l << " head " << h << " array " << a << " row " << r << " pos " << pos);
                        REQUIRE(rows[size_t{r} * dim + d] ==
                                kvrt::ref::f32_to_f16(value(pos, l, h, d, a == KVRT_KV_ARRAY_V)));
                    }
                }
            }
    // The mask: padding first, then the valid rows and the new token.
    std::vector<float> m32(seq_len);
    std::vector<uint16_t> m16(seq_len);
    KVRT_REQUIRE_OK(kvrt_cache_static_get_mask(c, seq, KVRT_TYPE_F32, m32.data(), m32.size() * 4));
    KVRT_REQUIRE_OK(kvrt_cache_static_get_mask(c, seq, KVRT_TYPE_F16, m16.data(), m16.size() * 2));
    for (uint32_t i = 0; i < seq_len; ++i) {
        const bool pad = i < W - n_valid;
        REQUIRE(m32[i] == (pad ? -std::numeric_limits<float>::infinity() : 0.0f));
        REQUIRE(m16[i] == (pad ? 0xFC00u : 0u));
    }
}

// Checks every window of `seq` against the last `n_valid` tokens ending at `last_pos`.
void check_windows(kvrt_cache c, const Shape& sh, int32_t seq, uint32_t seq_len, uint32_t n_valid, int32_t last_pos) {
    std::vector<int32_t> positions(n_valid);
    for (uint32_t i = 0; i < n_valid; ++i) positions[i] = last_pos - static_cast<int32_t>(n_valid - 1 - i);
    check_window_positions(c, sh, seq, seq_len, positions);
}

}  // namespace

TEST_CASE("static layout: windows, masks and bytes moved while appending", "[static]") {
    GpuContext ctx;
    const Shape sh;
    const uint32_t S = 64, W = S - 1;
    const double reserve = GENERATE(1.0, 1.5, 2.0, 3.0);
    INFO("R = " << reserve);
    Cache c = CacheSpec(sh).static_layout(S, reserve).cells(0, 1).create(ctx);
    const uint64_t per_row = uint64_t{sh.layers} * sh.kv_heads * (sh.dk + sh.dv) * 2;
    check_windows(c, sh, 0, S, 0, -1);
    // The cache's own memory is fixed; the context's too once the cache's
    // stream has its upload and scratch arenas (after a first full cycle).
    kvrt_cache_info info = KVRT_CACHE_INFO_INIT;
    KVRT_REQUIRE_OK(kvrt_cache_get_info(c, &info));
    const uint64_t cache_bytes = info.device_bytes;
    uint64_t bytes_before = 0;
    for (uint32_t t = 1; t <= 3 * W; ++t) {
        REQUIRE(store_tokens(c, sh, 0, static_cast<int32_t>(t - 1), 1) == KVRT_SUCCESS);
        if (t == 2 * W + 1) bytes_before = device_bytes(ctx);
        check_windows(c, sh, 0, S, std::min(t, W), static_cast<int32_t>(t - 1));
        kvrt_static_stats st = KVRT_STATIC_STATS_INIT;
        KVRT_REQUIRE_OK(kvrt_cache_static_get_stats(c, 0, &st));
        REQUIRE(st.rows_appended == t);
        REQUIRE(st.rows_moved == kvrt::kv::expected_rows_moved(S, reserve, t));
        REQUIRE(st.bytes_moved == st.rows_moved * per_row);
    }
    // Once full, R = 1 slides every token; R = 2 copies S-2 rows per S tokens.
    kvrt_static_stats st = KVRT_STATIC_STATS_INIT;
    KVRT_REQUIRE_OK(kvrt_cache_static_get_stats(c, -1, &st));
    if (reserve == 1.0) REQUIRE(st.slides >= 2 * W);
    if (reserve == 2.0) REQUIRE(st.slides == (3 * W) / (W + 1));
    REQUIRE(device_bytes(ctx) == bytes_before);  // the layout never grows
    KVRT_REQUIRE_OK(kvrt_cache_get_info(c, &info));
    REQUIRE(info.device_bytes == cache_bytes);
    REQUIRE(info.capacity == W);
    REQUIRE(info.used == W);
    REQUIRE(ctx.validation_errors() == 0);
}

TEST_CASE("static layout: chunks, several sequences, place and write, removal", "[static]") {
    GpuContext ctx;
    const Shape sh;
    const uint32_t S = 32, W = S - 1;
    Cache c = CacheSpec(sh).static_layout(S, 1.5).cells(0, 3).create(ctx);
    // Chunks of various sizes, two sequences interleaved.
    int32_t next[2] = {0, 100};
    const uint32_t chunks[] = {5, 31, 1, 17, 30, 2, 31, 9};
    for (uint32_t chunk : chunks) {
        for (int32_t seq : {0, 2}) {
            const int32_t idx = seq ? 1 : 0;
            REQUIRE(store_tokens(c, sh, seq, next[idx], chunk) == KVRT_SUCCESS);
            next[idx] += static_cast<int32_t>(chunk);
            const uint32_t held = std::min<uint32_t>(W, static_cast<uint32_t>(next[idx] - (seq ? 100 : 0)));
            check_windows(c, sh, seq, S, held, next[idx] - 1);
        }
    }
    check_windows(c, sh, 1, S, 0, -1);
    // place + layer-by-layer write lands in the same rows.
    {
        int32_t pos = next[0], seq = 0;
        kvrt_batch b = make_batch(1, &pos, &seq);
        uint32_t cell = 0;
        KVRT_REQUIRE_OK(kvrt_cache_place(c, &b, &cell));
        std::vector<float> k, v;
        token_rows(sh, pos, &k, &v);
        for (uint32_t l = 0; l < sh.layers; ++l) {
            kvrt_tensor_ref kr = host_tensor(k.data() + size_t{l} * sh.kv_heads * sh.dk);
            kvrt_tensor_ref vr = host_tensor(v.data() + size_t{l} * sh.kv_heads * sh.dv);
            KVRT_REQUIRE_OK(kvrt_cache_write(c, nullptr, 1, &cell, static_cast<int32_t>(l), &kr, &vr));
        }
        ++next[0];
        check_windows(c, sh, 0, S, W, next[0] - 1);
        // kvrt_cache_read of that cell gives the token back.
        std::vector<float> rk(size_t{sh.kv_heads} * sh.dk), rv(size_t{sh.kv_heads} * sh.dv);
        KVRT_REQUIRE_OK(kvrt_cache_read(c, 1, 1, &cell, rk.data(), bytes_of(rk), rv.data(), bytes_of(rv)));
        for (size_t i = 0; i < rk.size(); ++i) REQUIRE(rk[i] == k[size_t{sh.kv_heads} * sh.dk + i]);
        for (size_t i = 0; i < rv.size(); ++i) REQUIRE(rv[i] == v[size_t{sh.kv_heads} * sh.dv + i]);
    }
    // Positions must rise; a removal of all positions resets the window and
    // its counters.
    REQUIRE(store_tokens(c, sh, 0, next[0] - 1, 1) == KVRT_ERROR_INVALID_ARGUMENT);
    check_windows(c, sh, 0, S, W, next[0] - 1);
    KVRT_REQUIRE_OK(kvrt_cache_seq_rm(c, 0, -1, -1));
    check_windows(c, sh, 0, S, 0, -1);
    kvrt_static_stats st = KVRT_STATIC_STATS_INIT;
    KVRT_REQUIRE_OK(kvrt_cache_static_get_stats(c, 0, &st));
    REQUIRE(st.rows_appended == 0);
    REQUIRE(store_tokens(c, sh, 0, 3, 4) == KVRT_SUCCESS);
    check_windows(c, sh, 0, S, 4, 6);
    KVRT_REQUIRE_OK(kvrt_cache_seq_keep(c, 2));
    check_windows(c, sh, 0, S, 0, -1);
    check_windows(c, sh, 2, S, W, next[1] - 1);
    KVRT_REQUIRE_OK(kvrt_cache_clear(c));
    check_windows(c, sh, 2, S, 0, -1);
    REQUIRE(ctx.validation_errors() == 0);
}

TEST_CASE("static layout: a dropped recording gives the windows back", "[static]") {
    GpuContext ctx;
    const Shape sh;
    const uint32_t S = 16, W = S - 1;
    Cache c = CacheSpec(sh).static_layout(S, 1.0).cells(0, 1).create(ctx);
    REQUIRE(store_tokens(c, sh, 0, 0, W) == KVRT_SUCCESS);
    {
        Stream s(ctx);
        KVRT_REQUIRE_OK(kvrt_stream_begin(s));
        REQUIRE(store_tokens(c, sh, 0, static_cast<int32_t>(W), 3, s) == KVRT_SUCCESS);
        kvrt_static_window w = KVRT_STATIC_WINDOW_INIT;
        KVRT_REQUIRE_OK(kvrt_cache_static_get_window(c, 0, 0, 0, KVRT_KV_ARRAY_K, &w));
        REQUIRE(w.pos_last == static_cast<int32_t>(W) + 2);
    }  // destroyed without submitting
    check_windows(c, sh, 0, S, W, static_cast<int32_t>(W) - 1);
    // The same append through a submitted stream.
    {
        Stream s(ctx);
        run_stream(s, [&]() { REQUIRE(store_tokens(c, sh, 0, static_cast<int32_t>(W), 3, s) == KVRT_SUCCESS); });
    }
    check_windows(c, sh, 0, S, W, static_cast<int32_t>(W) + 2);
    REQUIRE(ctx.validation_errors() == 0);
}

namespace {

// Runs decode and a prefill chunk over layer `layer` of `c` for the last
// `n_q` positions ending at `last`, returning the outputs.
std::vector<float> attend(kvrt_cache c, const Shape& sh, uint32_t layer, int32_t last, uint32_t n_q,
                          const std::vector<float>& q, const kvrt_attention_params* params) {
    std::vector<int32_t> pos(n_q), seqs(n_q, 0);
    for (uint32_t i = 0; i < n_q; ++i) pos[i] = last - static_cast<int32_t>(n_q - 1 - i);
    std::vector<float> out(size_t{n_q} * sh.heads * sh.dv, -1.0f);
    kvrt_tensor_ref qr = host_tensor(q.data());
    kvrt_output_ref o = host_output(out.data());
    const kvrt_batch queries = make_batch(n_q, pos.data(), seqs.data());
    const kvrt_result r = kvrt_cache_attention(c, nullptr, static_cast<int32_t>(layer), &queries, &qr, &o, params);
    INFO(kvrt_last_error_message());
    REQUIRE(r == KVRT_SUCCESS);
    return out;
}

}  // namespace

TEST_CASE("static layout: attention equals the cell layout's on the same tokens", "[static][attention]") {
    KVRT_EACH_KERNEL_VARIANT(variant);
    GpuContext ctx(variant.flags);
    Shape sh;
    sh.heads = 8;
    sh.kv_heads = 2;
    sh.dk = 64;
    sh.dv = 32;
    const uint32_t S = 48, W = S - 1;
    const double reserve = GENERATE(1.0, 2.0);
    Cache st = CacheSpec(sh).static_layout(S, reserve).cells(0, 1).create(ctx);
    Cache cells = CacheSpec(sh).cells(256, 1).create(ctx);
    // 100 tokens: the static window keeps the last 47; the cell cache gets
    // exactly those.
    const int32_t total = 100;
    for (int32_t p = 0; p < total; p += 10) REQUIRE(store_tokens(st, sh, 0, p, 10) == KVRT_SUCCESS);
    REQUIRE(store_tokens(cells, sh, 0, total - static_cast<int32_t>(W), W) == KVRT_SUCCESS);
    Rng rng(7);
    std::normal_distribution<float> nd(0.0f, 0.01f);
    kvrt_attention_params params = KVRT_ATTENTION_PARAMS_INIT;
    params.scale = 0.002f;  // the rows hold values up to 512
    for (uint32_t n_q : {1u, 5u}) {
        std::vector<float> q(size_t{n_q} * sh.heads * sh.dk);
        for (float& x : q) x = nd(rng);
        for (uint32_t l = 0; l < sh.layers; ++l) {
            const std::vector<float> a = attend(st, sh, l, total - 1, n_q, q, &params);
            const std::vector<float> b = attend(cells, sh, l, total - 1, n_q, q, &params);
            // The double-precision reference on the window's tokens.
            std::vector<kvrt::ref::AttnCell> rc(W);
            std::vector<float> k, v, ks, vs;
            for (uint32_t i = 0; i < W; ++i) {
                const int32_t pos = total - static_cast<int32_t>(W) + static_cast<int32_t>(i);
                rc[i].pos = pos;
                rc[i].seq_ids = {0};
                token_rows(sh, pos, &ks, &vs);
                k.insert(k.end(), ks.begin() + l * sh.kv_heads * sh.dk, ks.begin() + (l + 1) * sh.kv_heads * sh.dk);
                v.insert(v.end(), vs.begin() + l * sh.kv_heads * sh.dv, vs.begin() + (l + 1) * sh.kv_heads * sh.dv);
            }
            kvrt::ref::AttnParams rp;
            rp.n_heads = static_cast<int>(sh.heads);
            rp.n_kv_heads = static_cast<int>(sh.kv_heads);
            rp.head_dim_k = static_cast<int>(sh.dk);
            rp.head_dim_v = static_cast<int>(sh.dv);
            rp.scale = params.scale;
            std::vector<kvrt::ref::AttnQuery> qs(n_q);
            for (uint32_t i = 0; i < n_q; ++i) qs[i] = {total - 1 - static_cast<int32_t>(n_q - 1 - i), 0};
            const std::vector<double> want = kvrt::ref::attention(rp, q.data(), qs, k.data(), v.data(), rc);
            double num = 0, den = 0, diff = 0;
            for (size_t i = 0; i < want.size(); ++i) {
                num += (a[i] - want[i]) * (a[i] - want[i]);
                den += want[i] * want[i];
                diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
            }
            INFO("layer " << l << " queries " << n_q << " nmse " << num / den << " max |static - cells| " << diff);
            REQUIRE(num / den <= 1e-6);
            REQUIRE(diff <= 1e-5 * std::sqrt(den / static_cast<double>(want.size())) + 1e-30);
        }
    }
    REQUIRE(ctx.validation_errors() == 0);
}

TEST_CASE("static layout: a sequence moves between layouts bit for bit", "[static]") {
    GpuContext ctx;
    const Shape sh;
    const uint32_t S = 40, W = S - 1;
    Cache cells = CacheSpec(sh).cells(128, 4).create(ctx);
    Cache st = CacheSpec(sh).static_layout(S, 2.0).cells(0, 2).create(ctx);
    // Cells -> static: 60 tokens; the window takes the newest 39.
    REQUIRE(store_tokens(cells, sh, 1, 10, 60) == KVRT_SUCCESS);
    uint32_t n = 0;
    KVRT_REQUIRE_OK(kvrt_cache_seq_transfer(cells, 1, st, 1, &n));
    REQUIRE(n == W);
    check_windows(st, sh, 1, S, W, 69);
    // Appending continues from there.
    REQUIRE(store_tokens(st, sh, 1, 70, 5) == KVRT_SUCCESS);
    check_windows(st, sh, 1, S, W, 74);
    // Static -> cells, into another sequence: every row equal.
    KVRT_REQUIRE_OK(kvrt_cache_seq_transfer(st, 1, cells, 3, &n));
    REQUIRE(n == W);
    int32_t lo = 0, hi = 0;
    KVRT_REQUIRE_OK(kvrt_cache_seq_pos_min(cells, 3, &lo));
    KVRT_REQUIRE_OK(kvrt_cache_seq_pos_max(cells, 3, &hi));
    REQUIRE(lo == 74 - static_cast<int32_t>(W) + 1);
    REQUIRE(hi == 74);
    // Back again into the static cache's other sequence: same windows.
    KVRT_REQUIRE_OK(kvrt_cache_seq_transfer(cells, 3, st, 0, &n));
    check_windows(st, sh, 0, S, W, 74);
    for (uint32_t l = 0; l < sh.layers; ++l)
        for (uint32_t h = 0; h < sh.kv_heads; ++h)
            for (kvrt_kv_array a : {KVRT_KV_ARRAY_K, KVRT_KV_ARRAY_V}) {
                kvrt_static_window w0 = KVRT_STATIC_WINDOW_INIT, w1 = KVRT_STATIC_WINDOW_INIT;
                KVRT_REQUIRE_OK(kvrt_cache_static_get_window(st, 0, static_cast<int32_t>(l), h, a, &w0));
                KVRT_REQUIRE_OK(kvrt_cache_static_get_window(st, 1, static_cast<int32_t>(l), h, a, &w1));
                std::vector<uint8_t> b0(w0.bytes), b1(w1.bytes);
                KVRT_REQUIRE_OK(kvrt_buffer_download(w0.buffer, w0.offset, b0.data(), w0.bytes));
                KVRT_REQUIRE_OK(kvrt_buffer_download(w1.buffer, w1.offset, b1.data(), w1.bytes));
                REQUIRE(b0 == b1);
            }
    // Errors: a destination in use, mismatched types, unknown sequences.
    REQUIRE(kvrt_cache_seq_transfer(cells, 3, st, 0, &n) == KVRT_ERROR_INVALID_ARGUMENT);
    Shape other = sh;
    other.type(KVRT_TYPE_F32);
    Cache f32 = CacheSpec(other).static_layout(S, 2.0).cells(0, 1).create(ctx);
    REQUIRE(kvrt_cache_seq_transfer(cells, 3, f32, 0, &n) == KVRT_ERROR_INVALID_ARGUMENT);
    REQUIRE(kvrt_cache_seq_transfer(cells, 3, st, 5, &n) == KVRT_ERROR_INVALID_ARGUMENT);
    REQUIRE(kvrt_cache_seq_transfer(cells, -1, st, 0, &n) == KVRT_ERROR_INVALID_ARGUMENT);
    // A full cell cache refuses and keeps nothing.
    Cache small = CacheSpec(sh).cells(16, 1).create(ctx);
    REQUIRE(kvrt_cache_seq_transfer(st, 1, small, 0, &n) == KVRT_ERROR_CACHE_FULL);
    kvrt_cache_info info = KVRT_CACHE_INFO_INIT;
    KVRT_REQUIRE_OK(kvrt_cache_get_info(small, &info));
    REQUIRE(info.used == 0);
    REQUIRE(ctx.validation_errors() == 0);
}

TEST_CASE("static layout: bad input is refused with a clear error", "[static][errors]") {
    GpuContext ctx;
    const Shape sh;
    auto create = [&](uint32_t seq_len, double reserve, kvrt_type type = KVRT_TYPE_F16, uint32_t capacity = 0,
                      bool chain = true, uint32_t dim = 8) {
        kvrt_static_layout_desc sl = KVRT_STATIC_LAYOUT_DESC_INIT;
        sl.seq_len = seq_len;
        sl.reserve = reserve;
        kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
        d.n_layers = 1;
        d.n_heads = 2;
        d.n_kv_heads = 2;
        d.head_dim_k = dim;
        d.type_k = d.type_v = type;
        d.capacity = capacity;
        d.layout = KVRT_LAYOUT_STATIC;
        if (chain) d.next = &sl;
        Cache c;
        const kvrt_result r = kvrt_cache_create(ctx, &d, c.out());
        if (r != KVRT_SUCCESS) {
            REQUIRE(c == nullptr);
            REQUIRE(std::strlen(kvrt_last_error_message()) > 0);
        }
        return r;
    };
    REQUIRE(create(1, 2.0) == KVRT_ERROR_INVALID_ARGUMENT);
    REQUIRE(create(0, 2.0) == KVRT_ERROR_INVALID_ARGUMENT);
    REQUIRE(create(64, 0.5) == KVRT_ERROR_INVALID_ARGUMENT);
    REQUIRE(create(64, std::nan("")) == KVRT_ERROR_INVALID_ARGUMENT);
    REQUIRE(create(64, std::numeric_limits<double>::infinity()) == KVRT_ERROR_INVALID_ARGUMENT);
    REQUIRE(create(64, 2.0, KVRT_TYPE_F16, 100) == KVRT_ERROR_INVALID_ARGUMENT);
    REQUIRE(create(64, 2.0, KVRT_TYPE_F16, 0, false) == KVRT_ERROR_INVALID_ARGUMENT);
    REQUIRE(create(64, 2.0, KVRT_TYPE_Q8_0, 0, true, 64) == KVRT_ERROR_INVALID_ARGUMENT);
    {
        // Rows must be whole 32-bit words: 6 one-byte values are not.
        const float scale = 0.5f;
        const int32_t zero_point = 128;
        kvrt_static_scales_desc sc = KVRT_STATIC_SCALES_DESC_INIT;
        sc.count = 1;
        sc.k_scales = sc.v_scales = &scale;
        sc.k_zero_points = sc.v_zero_points = &zero_point;
        kvrt_static_layout_desc sl = KVRT_STATIC_LAYOUT_DESC_INIT;
        sl.seq_len = 64;
        sl.next = &sc;
        kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
        d.n_layers = d.n_heads = d.n_kv_heads = 1;
        d.head_dim_k = 6;
        d.type_k = d.type_v = KVRT_TYPE_U8_STATIC;
        d.layout = KVRT_LAYOUT_STATIC;
        d.next = &sl;
        Cache c;
        REQUIRE(kvrt_cache_create(ctx, &d, c.out()) == KVRT_ERROR_INVALID_ARGUMENT);
        REQUIRE(std::strstr(kvrt_last_error_message(), "multiple of 4") != nullptr);
        d.head_dim_k = 8;
        KVRT_REQUIRE_OK(kvrt_cache_create(ctx, &d, c.out()));
    }
    REQUIRE(create(64, 2.0) == KVRT_SUCCESS);
    REQUIRE(create(2, 1.0) == KVRT_SUCCESS);
    // Larger than one binding for one sequence's layer: refused, not split.
    REQUIRE(create(1u << 24, 2.0, KVRT_TYPE_F32, 0, true, 1024) == KVRT_ERROR_UNSUPPORTED);
    {
        // An unknown struct in the chain.
        kvrt_context_stats bogus = KVRT_CONTEXT_STATS_INIT;
        kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
        d.n_layers = d.n_heads = d.n_kv_heads = 1;
        d.head_dim_k = 8;
        d.capacity = 8;
        d.next = &bogus;
        Cache c;
        REQUIRE(kvrt_cache_create(ctx, &d, c.out()) == KVRT_ERROR_INVALID_ARGUMENT);
    }

    Cache c = CacheSpec(sh).static_layout(16, 2.0).cells(0, 2).create(ctx);
    kvrt_static_window w = KVRT_STATIC_WINDOW_INIT;
    REQUIRE(kvrt_cache_static_get_window(c, 0, static_cast<int32_t>(sh.layers), 0, KVRT_KV_ARRAY_K, &w) == KVRT_ERROR_INVALID_ARGUMENT);
    REQUIRE(std::strstr(kvrt_last_error_message(), "layer") != nullptr);
    REQUIRE(kvrt_cache_static_get_window(c, 0, 0, sh.kv_heads, KVRT_KV_ARRAY_K, &w) == KVRT_ERROR_INVALID_ARGUMENT);
    REQUIRE(std::strstr(kvrt_last_error_message(), "head") != nullptr);
    REQUIRE(kvrt_cache_static_get_window(c, 2, 0, 0, KVRT_KV_ARRAY_K, &w) == KVRT_ERROR_INVALID_ARGUMENT);
    REQUIRE(kvrt_cache_static_get_window(c, -1, 0, 0, KVRT_KV_ARRAY_K, &w) == KVRT_ERROR_INVALID_ARGUMENT);
    REQUIRE(kvrt_cache_static_get_window(c, 0, 0, 0, KVRT_KV_ARRAY_UNDEFINED, &w) == KVRT_ERROR_INVALID_ARGUMENT);
    REQUIRE(kvrt_cache_static_get_window(c, 0, 0, 0, KVRT_KV_ARRAY_K, nullptr) == KVRT_ERROR_INVALID_ARGUMENT);
    std::vector<float> mask(16);
    REQUIRE(kvrt_cache_static_get_mask(c, 0, KVRT_TYPE_F32, mask.data(), 15 * 4) == KVRT_ERROR_INVALID_ARGUMENT);
    REQUIRE(kvrt_cache_static_get_mask(c, 0, KVRT_TYPE_Q8_0, mask.data(), 16 * 4) == KVRT_ERROR_INVALID_ARGUMENT);
    REQUIRE(kvrt_cache_static_get_mask(c, 0, KVRT_TYPE_F32, nullptr, 16 * 4) == KVRT_ERROR_INVALID_ARGUMENT);
    // Operations that do not fit fixed windows.
    REQUIRE(store_tokens(c, sh, 0, 0, 4) == KVRT_SUCCESS);
    REQUIRE(kvrt_cache_seq_cp(c, 0, 1, -1, -1) == KVRT_ERROR_UNSUPPORTED);
    REQUIRE(kvrt_cache_seq_add(c, 0, -1, -1, 3) == KVRT_ERROR_UNSUPPORTED);
    REQUIRE(kvrt_cache_seq_div(c, 0, -1, -1, 2) == KVRT_ERROR_UNSUPPORTED);
    REQUIRE(kvrt_cache_context_shift(c, 0, 0, 0, nullptr) == KVRT_ERROR_UNSUPPORTED);
    REQUIRE(store_tokens(c, sh, 0, 4, 16) == KVRT_ERROR_INVALID_ARGUMENT);  // more than S-1 at once
    {
        int32_t pos = 10, ids[2] = {0, 1};
        uint32_t count = 2;
        kvrt_batch b = make_batch(1, &pos, ids, &count);
        REQUIRE(kvrt_cache_place(c, &b, nullptr) == KVRT_ERROR_INVALID_ARGUMENT);  // two sequences
    }
    check_windows(c, sh, 0, 16, 4, 3);  // nothing changed
    // The window buffers belong to the cache.
    KVRT_REQUIRE_OK(kvrt_cache_static_get_window(c, 0, 0, 0, KVRT_KV_ARRAY_V, &w));
    kvrt_buffer_destroy(w.buffer);
    uint64_t size = 0;
    KVRT_REQUIRE_OK(kvrt_buffer_get_size(w.buffer, &size));
    // Functions of the static layout on a cell cache.
    Cache cells = CacheSpec(sh).cells(32, 1).create(ctx);
    REQUIRE(kvrt_cache_static_get_window(cells, 0, 0, 0, KVRT_KV_ARRAY_K, &w) == KVRT_ERROR_INVALID_ARGUMENT);
    REQUIRE(kvrt_cache_static_get_mask(cells, 0, KVRT_TYPE_F32, mask.data(), 64) == KVRT_ERROR_INVALID_ARGUMENT);
    kvrt_static_stats st = KVRT_STATIC_STATS_INIT;
    REQUIRE(kvrt_cache_static_get_stats(cells, 0, &st) == KVRT_ERROR_INVALID_ARGUMENT);
    REQUIRE(ctx.validation_errors() == 0);
}

TEST_CASE("static layout: the estimate reproduces SPEC 5", "[static][estimate]") {
    kvrt_static_layout_desc sl = KVRT_STATIC_LAYOUT_DESC_INIT;
    sl.seq_len = 2048;
    sl.reserve = 2.0;
    kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
    d.n_layers = 32;
    d.n_heads = 32;
    d.n_kv_heads = 32;
    d.head_dim_k = 128;
    d.layout = KVRT_LAYOUT_STATIC;
    d.next = &sl;
    kvrt_cache_estimate e = KVRT_CACHE_ESTIMATE_INIT;
    KVRT_REQUIRE_OK(kvrt_cache_estimate_size(nullptr, &d, &e));
    REQUIRE(e.data_bytes == 2146435072ull);
    REQUIRE(e.bytes_per_token == 524288ull);
    sl.reserve = 1.5;
    KVRT_REQUIRE_OK(kvrt_cache_estimate_size(nullptr, &d, &e));
    REQUIRE(e.data_bytes == 1610088448ull);
    // And the device bytes a real (small) static cache allocates.
    GpuContext ctx;
    const Shape sh;
    kvrt_static_layout_desc s2 = KVRT_STATIC_LAYOUT_DESC_INIT;
    s2.seq_len = 100;
    s2.reserve = 1.5;
    kvrt_cache_desc d2 = KVRT_CACHE_DESC_INIT;
    d2.n_layers = sh.layers;
    d2.n_heads = sh.heads;
    d2.n_kv_heads = sh.kv_heads;
    d2.head_dim_k = sh.dk;
    d2.head_dim_v = sh.dv;
    d2.max_seqs = 3;
    d2.layout = KVRT_LAYOUT_STATIC;
    d2.next = &s2;
    KVRT_REQUIRE_OK(kvrt_cache_estimate_size(ctx, &d2, &e));
    REQUIRE(e.data_bytes == 3ull * sh.layers * sh.kv_heads * 149 * (sh.dk + sh.dv) * 2);
    const uint64_t before = device_bytes(ctx);
    Cache c;
    KVRT_REQUIRE_OK(kvrt_cache_create(ctx, &d2, c.out()));
    REQUIRE(device_bytes(ctx) - before >= e.device_bytes);
    REQUIRE(device_bytes(ctx) - before <= e.device_bytes + 2 * sh.layers * 4096);
}

TEST_CASE("static layout: sequences spread over several pieces", "[static][attention]") {
    // A 4 KiB binding limit puts each sequence's regions of a layer in a piece
    // of their own: windows, slides and attention must address every piece.
    KVRT_EACH_KERNEL_VARIANT(variant);
    GpuContext ctx(variant.flags, 4096);
    Shape sh;
    sh.dk = sh.dv = 8;
    const uint32_t S = 64, W = S - 1;
    Cache c = CacheSpec(sh).static_layout(S, 2.0).cells(0, 3).create(ctx);
    for (int32_t seq = 0; seq < 3; ++seq) {
        const uint32_t n = 40 + 30 * static_cast<uint32_t>(seq);  // 40, 70, 100 tokens
        for (uint32_t p = 0; p < n; p += 10) REQUIRE(store_tokens(c, sh, seq, static_cast<int32_t>(p), 10) == KVRT_SUCCESS);
        check_windows(c, sh, seq, S, std::min(n, W), static_cast<int32_t>(n) - 1);
    }
    kvrt_static_window w0 = KVRT_STATIC_WINDOW_INIT, w2 = KVRT_STATIC_WINDOW_INIT;
    KVRT_REQUIRE_OK(kvrt_cache_static_get_window(c, 0, 0, 0, KVRT_KV_ARRAY_K, &w0));
    KVRT_REQUIRE_OK(kvrt_cache_static_get_window(c, 2, 0, 0, KVRT_KV_ARRAY_K, &w2));
    VkBuffer b0 = VK_NULL_HANDLE, b2 = VK_NULL_HANDLE;
    VkDeviceSize o = 0, n = 0;
    KVRT_REQUIRE_OK(kvrt_buffer_get_vulkan(w0.buffer, w0.offset, &b0, &o, &n));
    KVRT_REQUIRE_OK(kvrt_buffer_get_vulkan(w2.buffer, w2.offset, &b2, &o, &n));
    REQUIRE(b0 != b2);  // different pieces
    // One attention call with a query of each sequence, against a cell cache
    // holding the same windows.
    Cache cells = CacheSpec(sh).cells(256, 3).create(ctx);
    const int32_t last[3] = {39, 69, 99};
    for (int32_t seq = 0; seq < 3; ++seq) {
        const uint32_t held = std::min<uint32_t>(W, static_cast<uint32_t>(last[seq]) + 1);
        REQUIRE(store_tokens(cells, sh, seq, last[seq] + 1 - static_cast<int32_t>(held), held) == KVRT_SUCCESS);
    }
    std::vector<float> q(3 * sh.heads * sh.dk);
    Rng rng(3);
    std::normal_distribution<float> nd(0.0f, 0.01f);
    for (float& x : q) x = nd(rng);
    const int32_t pos[3] = {last[0], last[1], last[2]}, seqs[3] = {0, 1, 2};
    kvrt_attention_params params = KVRT_ATTENTION_PARAMS_INIT;
    params.scale = 0.002f;
    for (uint32_t l = 0; l < sh.layers; ++l) {
        std::vector<float> a(3 * sh.heads * sh.dv), b(a.size());
        kvrt_tensor_ref qr = host_tensor(q.data());
        kvrt_output_ref oa = host_output(a.data()), ob = host_output(b.data());
        const kvrt_batch queries = make_batch(3, pos, seqs);
        KVRT_REQUIRE_OK(kvrt_cache_attention(c, nullptr, static_cast<int32_t>(l), &queries, &qr, &oa, &params));
        KVRT_REQUIRE_OK(kvrt_cache_attention(cells, nullptr, static_cast<int32_t>(l), &queries, &qr, &ob, &params));
        for (size_t i = 0; i < a.size(); ++i) REQUIRE(a[i] == Approx(b[i]).epsilon(1e-5).margin(1e-3));
    }
    REQUIRE(ctx.validation_errors() == 0);
}

TEST_CASE("static layout: deferred RoPE attends like the cell layout", "[static][attention]") {
    KVRT_EACH_KERNEL_VARIANT(variant);
    GpuContext ctx(variant.flags);
    Shape sh;
    sh.dk = sh.dv = 32;
    const uint32_t S = 24, W = S - 1;
    Cache st = CacheSpec(sh).static_layout(S, 0.0).cells(0, 1).with_flags(KVRT_CACHE_DEFERRED_ROPE).create(ctx);
    Cache cells = CacheSpec(sh).cells(64, 1).with_flags(KVRT_CACHE_DEFERRED_ROPE).create(ctx);
    REQUIRE(store_tokens(st, sh, 0, 0, 20) == KVRT_SUCCESS);
    REQUIRE(store_tokens(st, sh, 0, 20, 20) == KVRT_SUCCESS);
    REQUIRE(store_tokens(cells, sh, 0, 40 - static_cast<int32_t>(W), W) == KVRT_SUCCESS);
    std::vector<float> q(sh.heads * sh.dk);
    for (size_t i = 0; i < q.size(); ++i) q[i] = 0.001f * static_cast<float>(i % 7);
    kvrt_attention_params params = KVRT_ATTENTION_PARAMS_INIT;
    params.scale = 0.002f;
    const std::vector<float> a = attend(st, sh, 1, 39, 1, q, &params);
    const std::vector<float> b = attend(cells, sh, 1, 39, 1, q, &params);
    for (size_t i = 0; i < a.size(); ++i) REQUIRE(a[i] == Approx(b[i]).epsilon(1e-5).margin(1e-3));
    REQUIRE(ctx.validation_errors() == 0);
}

namespace {

// One query per sequence that holds tokens, at its next position, over layer
// `layer` of both caches: the outputs must agree.
void same_attention(kvrt_cache st, kvrt_cache cells, const Shape& sh, const std::vector<std::vector<int32_t>>& held,
                    uint32_t layer) {
    std::vector<int32_t> pos, seqs;
    for (size_t s = 0; s < held.size(); ++s)
        if (!held[s].empty()) {
            pos.push_back(held[s].back() + 1);
            seqs.push_back(static_cast<int32_t>(s));
        }
    if (pos.empty()) return;
    const uint32_t n = static_cast<uint32_t>(pos.size());
    std::vector<float> q(size_t{n} * sh.heads * sh.dk);
    for (size_t i = 0; i < q.size(); ++i) q[i] = 0.01f * static_cast<float>((i * 37) % 11) - 0.05f;
    std::vector<float> a(size_t{n} * sh.heads * sh.dv, -1.0f), b(a.size(), -2.0f);
    kvrt_attention_params params = KVRT_ATTENTION_PARAMS_INIT;
    params.scale = 0.002f;
    kvrt_tensor_ref qr = host_tensor(q.data());
    kvrt_output_ref oa = host_output(a.data()), ob = host_output(b.data());
    const kvrt_batch queries = make_batch(n, pos.data(), seqs.data());
    KVRT_REQUIRE_OK(kvrt_cache_attention(st, nullptr, static_cast<int32_t>(layer), &queries, &qr, &oa, &params));
    KVRT_REQUIRE_OK(kvrt_cache_attention(cells, nullptr, static_cast<int32_t>(layer), &queries, &qr, &ob, &params));
    for (size_t i = 0; i < a.size(); ++i) REQUIRE(a[i] == Approx(b[i]).epsilon(1e-5).margin(1e-3));
}

}  // namespace

TEST_CASE("static layout: removing any range keeps the other rows and attends like the cell layout", "[static]") {
    // Random appends and removals (suffixes as a rejected draft, prefixes,
    // middles, every sequence at once) on a static cache and a cell cache;
    // a model list of positions says what each window must hold, bit for bit.
    GpuContext ctx;
    Shape sh;
    sh.dk = sh.dv = 16;
    const uint32_t S = 24, W = S - 1;
    const double reserve = GENERATE(1.0, 1.5, 2.0);
    INFO("R = " << reserve);
    Cache st = CacheSpec(sh).static_layout(S, reserve).cells(0, 2).create(ctx);
    Cache cells = CacheSpec(sh).cells(128, 2).create(ctx);
    std::vector<std::vector<int32_t>> held(2);
    Rng rng(static_cast<uint32_t>(reserve * 10));
    uint64_t copies = 0;
    for (int step = 0; step < 60; ++step) {
        const int32_t seq = static_cast<int32_t>(rng() % 2);
        std::vector<int32_t>& h = held[static_cast<size_t>(seq)];
        const uint32_t kind = h.empty() ? 0 : rng() % 5;
        INFO("step " << step << " sequence " << seq << " kind " << kind << " held " << h.size());
        kvrt_static_stats before = KVRT_STATIC_STATS_INIT;
        KVRT_REQUIRE_OK(kvrt_cache_static_get_stats(st, -1, &before));
        if (kind == 0) {
            const uint32_t n = 1 + rng() % 7;
            const int32_t first = h.empty() ? static_cast<int32_t>(rng() % 50) : h.back() + 1;
            REQUIRE(store_tokens(st, sh, seq, first, n) == KVRT_SUCCESS);
            REQUIRE(store_tokens(cells, sh, seq, first, n) == KVRT_SUCCESS);
            for (uint32_t i = 0; i < n; ++i) h.push_back(first + static_cast<int32_t>(i));
            if (h.size() > W) {
                // The window keeps the newest W: the cell cache drops the rest too.
                h.erase(h.begin(), h.end() - W);
                KVRT_REQUIRE_OK(kvrt_cache_seq_rm(cells, seq, -1, h.front()));
            }
        } else {
            // A range of positions: kinds 1-2 a suffix, 3 a prefix, 4 a middle
            // (or, one time in four, the same range of every sequence).
            const size_t n = h.size();
            const size_t i0 = rng() % n, i1 = i0 + 1 + rng() % (n - i0);
            int32_t p0 = h[i0], p1 = i1 < n ? h[i1] : -1;
            if (kind <= 2) p1 = rng() % 2 ? -1 : h.back() + 1 + static_cast<int32_t>(rng() % 3);
            if (kind == 3) p0 = rng() % 2 ? -1 : h.front() - static_cast<int32_t>(rng() % 3);
            const int32_t target = kind == 4 && rng() % 4 == 0 ? -1 : seq;
            INFO("removing [" << p0 << ", " << p1 << ") of sequence " << target);
            const kvrt_result r = kvrt_cache_seq_rm(st, target, p0, p1);
            INFO(kvrt_last_error_message());
            REQUIRE(r == KVRT_SUCCESS);
            KVRT_REQUIRE_OK(kvrt_cache_seq_rm(cells, target, p0, p1));
            for (size_t s = 0; s < held.size(); ++s) {
                if (target >= 0 && s != static_cast<size_t>(target)) continue;
                auto& hs = held[s];
                hs.erase(std::remove_if(hs.begin(), hs.end(),
                                        [&](int32_t p) { return p >= std::max(p0, 0) && (p1 < 0 || p < p1); }),
                         hs.end());
            }
        }
        kvrt_static_stats after = KVRT_STATIC_STATS_INIT;
        KVRT_REQUIRE_OK(kvrt_cache_static_get_stats(st, -1, &after));
        if (kind != 0 && after.slides > before.slides) ++copies;
        for (int32_t s = 0; s < 2; ++s) check_window_positions(st, sh, s, S, held[static_cast<size_t>(s)]);
        same_attention(st, cells, sh, held, static_cast<uint32_t>(step) % sh.layers);
    }
    REQUIRE(copies > 0);  // removals that moved rows ran
    if (reserve > 1.0) {
        // Drafts of 3 tokens (at most a quarter of the spare rows), each batch
        // rejected again: even the batch that slides the window comes out
        // without a copy.
        std::vector<int32_t>& h = held[0];
        const int32_t base = h.empty() ? 0 : h.back() + 1;
        KVRT_REQUIRE_OK(kvrt_cache_seq_rm(st, 0, -1, -1));
        h.clear();
        for (int32_t p = base; h.size() < 5; ++p) {
            REQUIRE(store_tokens(st, sh, 0, p, 1) == KVRT_SUCCESS);
            h.push_back(p);
        }
        bool slid = false;
        int rounds = 0;
        for (; !slid; ++rounds) {
            INFO("draft round " << rounds);
            kvrt_static_stats a = KVRT_STATIC_STATS_INIT, b = KVRT_STATIC_STATS_INIT;
            KVRT_REQUIRE_OK(kvrt_cache_static_get_stats(st, 0, &a));
            REQUIRE(store_tokens(st, sh, 0, h.back() + 1, 3) == KVRT_SUCCESS);
            KVRT_REQUIRE_OK(kvrt_cache_static_get_stats(st, 0, &b));
            slid = b.slides > a.slides;
            KVRT_REQUIRE_OK(kvrt_cache_seq_rm(st, 0, h.back() + 1, -1));
            KVRT_REQUIRE_OK(kvrt_cache_static_get_stats(st, 0, &a));
            REQUIRE(a.slides == b.slides);  // the removal copied nothing
            // The drafts pushed the oldest rows out of a full window; then
            // one more token.
            h.erase(h.begin(), h.begin() + static_cast<ptrdiff_t>(std::max<size_t>(h.size() + 3, W) - W));
            REQUIRE(store_tokens(st, sh, 0, h.back() + 1, 1) == KVRT_SUCCESS);
            h.push_back(h.back() + 1);
            check_window_positions(st, sh, 0, S, h);
            REQUIRE(rounds < 100);
        }
        REQUIRE(rounds > 1);  // drafts before the slide too
    }
    // Discard and re-evaluate: the suffix from n_keep on goes.
    for (int32_t s = 0; s < 2; ++s) {
        std::vector<int32_t>& h = held[static_cast<size_t>(s)];
        if (h.size() < 4) continue;
        const int32_t n_keep = h[h.size() / 2];
        int32_t src = 0, dst = 0, count = 0;
        KVRT_REQUIRE_OK(kvrt_cache_discard_for_reevaluation(st, s, n_keep, 0, &src, &dst, &count));
        REQUIRE(dst == n_keep);
        h.erase(std::lower_bound(h.begin(), h.end(), n_keep), h.end());
        check_window_positions(st, sh, s, S, h);
    }
    REQUIRE(ctx.validation_errors() == 0);
}

TEST_CASE("static layout: a removal that fails at any point leaves the windows as they were", "[static][faults]") {
    GpuContext ctx;
    const Shape sh;
    const uint32_t S = 16, W = S - 1;
    // R = 1: the window always starts at row 0, so dropping the newest rows
    // copies the others (overlapping: through scratch memory).
    Cache c = CacheSpec(sh).static_layout(S, 1.0).cells(0, 1).create(ctx);
    REQUIRE(store_tokens(c, sh, 0, 0, W) == KVRT_SUCCESS);
    int32_t last = static_cast<int32_t>(W) - 1;
    for (uint64_t n = 1;; ++n) {
        INFO("fault point " << n);
        uint64_t passed = 0;
        const kvrt_result r = with_fault_point(n, &passed, [&] { return kvrt_cache_seq_rm(c, 0, last - 1, -1); });
        INFO("result " << r << ": " << kvrt_last_error_message());
        // A timeout keeps the removal: the copy was submitted.
        const bool removed = r == KVRT_SUCCESS || r == KVRT_ERROR_TIMEOUT;
        check_windows(c, sh, 0, S, removed ? W - 2 : W, removed ? last - 2 : last);
        if (passed < n) {
            REQUIRE(r == KVRT_SUCCESS);  // the armed point was never reached: all points covered
            break;
        }
        REQUIRE(store_tokens(c, sh, 0, removed ? last - 1 : last + 1, removed ? 2 : 1) == KVRT_SUCCESS);
        if (!removed) ++last;
    }
    REQUIRE(ctx.validation_errors() == 0);
}

TEST_CASE("static layout: an append that fails at any point leaves the windows as they were", "[static][faults]") {
    GpuContext ctx;
    const Shape sh;
    const uint32_t S = 16, W = S - 1;
    // R = 1: every append slides through scratch memory, the longest path.
    Cache c = CacheSpec(sh).static_layout(S, 1.0).cells(0, 1).create(ctx);
    REQUIRE(store_tokens(c, sh, 0, 0, W) == KVRT_SUCCESS);
    int32_t last = static_cast<int32_t>(W) - 1;
    for (const bool with_stream : {false, true}) {
        for (uint64_t n = 1;; ++n) {
            INFO("fault point " << n << (with_stream ? ", recorded into a stream" : ", synchronous"));
            Stream s(ctx);
            if (with_stream) KVRT_REQUIRE_OK(kvrt_stream_begin(s));
            uint64_t passed = 0;
            const kvrt_result r = with_fault_point(n, &passed, [&] {
                return store_tokens(c, sh, 0, last + 1, 1, with_stream ? static_cast<kvrt_stream>(s) : nullptr);
            });
            INFO("result " << r << ": " << kvrt_last_error_message());
            if (with_stream) {
                const kvrt_result submitted = kvrt_stream_submit(s);
                if (r == KVRT_SUCCESS) {
                    REQUIRE(submitted == KVRT_SUCCESS);
                    KVRT_REQUIRE_OK(kvrt_stream_wait(s, 60ull * 1000 * 1000 * 1000));
                } else {
                    REQUIRE(submitted == KVRT_ERROR_INVALID_STATE);  // the partial recording never runs
                }
            }
            // A timeout keeps the append: the work was submitted.
            if (r == KVRT_SUCCESS || r == KVRT_ERROR_TIMEOUT) ++last;
            check_windows(c, sh, 0, S, W, last);
            if (passed < n) {
                REQUIRE(r == KVRT_SUCCESS);  // the armed point was never reached: all points covered
                break;
            }
        }
    }
    REQUIRE(ctx.validation_errors() == 0);
}
