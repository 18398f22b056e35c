// The masks of static graphs (kvrt_cache_static_get_graph_mask): every
// encoding and every number of new rows per step, against a plain model of
// the graphs' documented mask (ExecuTorch's static attention, the Qualcomm
// runners: the past first, left-padded, then the step's new tokens,
// causal), and the past such a graph binds: the window's last S-N rows.
#include "gpu_test.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "reference/half.hpp"

using namespace kvrt_test;

namespace {

constexpr uint32_t kLayers = 1, kKvHeads = 2, kDim = 8;

// Token `pos`'s value of (head, d) in K (v false) or V: distinct per token
// and exact in f16.
float value(int32_t pos, uint32_t head, uint32_t d, bool v) {
    return static_cast<float>((pos * 13 + static_cast<int32_t>(head * 5 + d) + (v ? 3 : 0)) % 2048) - 1024.0f;
}

kvrt_result append(kvrt_cache c, int32_t pos) {
    std::vector<float> k(kKvHeads * kDim), v(kKvHeads * kDim);
    for (uint32_t h = 0; h < kKvHeads; ++h)
        for (uint32_t d = 0; d < kDim; ++d) {
            k[h * kDim + d] = value(pos, h, d, false);
            v[h * kDim + d] = value(pos, h, d, true);
        }
    const int32_t seq = 0;
    kvrt_batch b = make_batch(1, &pos, &seq);
    kvrt_tensor_ref kr = host_tensor(k.data()), vr = host_tensor(v.data());
    return kvrt_cache_store(c, nullptr, &b, -1, &kr, &vr, nullptr);
}

// The plain model: does row j of a graph of n_new new rows attend entry i,
// with `held` tokens in the window of S-1 rows?
bool attends(uint32_t S, uint32_t n_new, uint32_t held, uint32_t j, uint32_t i) {
    const uint32_t past = S - n_new;
    if (i >= past) return i - past <= j;              // the step's own tokens, causal
    const uint32_t valid = std::min({held, S - 1, past});  // the newest rows of the past
    return i >= past - valid;
}

struct Encoding {
    const char* name;
    kvrt_mask_format format;
    uint32_t flags;
    float masked_value;
    uint32_t attend_bits, masked_bits;  // the entry's expected bits (f32: as float bits)
};

uint32_t float_bits(float f) {
    uint32_t u = 0;
    std::memcpy(&u, &f, 4);
    return u;
}

}  // namespace

TEST_CASE("static layout: graph masks in every encoding match the graphs' model", "[static]") {
    GpuContext ctx;
    const uint32_t S = 16, W = S - 1;
    Cache c = CacheSpec().shape(kLayers, 4, kKvHeads, kDim, kDim).type(KVRT_TYPE_F16).static_layout(S, 2.0).cells(0, 1)
                  .create(ctx);
    const float inf = std::numeric_limits<float>::infinity();
    const Encoding encodings[] = {
        {"f32 0/-inf", KVRT_MASK_F32, 0, 0.0f, float_bits(0.0f), float_bits(-inf)},
        {"f32 0/-65535", KVRT_MASK_F32, KVRT_MASK_FINITE, -65535.0f, float_bits(0.0f), float_bits(-65535.0f)},
        {"f16 0/-inf", KVRT_MASK_F16, 0, 0.0f, 0x0000, 0xFC00},
        {"f16 0/-1000", KVRT_MASK_F16, KVRT_MASK_FINITE, -1000.0f, 0x0000, kvrt::ref::f32_to_f16(-1000.0f)},
        // Below -65504, half rounds to -inf.
        {"f16 0/-65535", KVRT_MASK_F16, KVRT_MASK_FINITE, -65535.0f, 0x0000, 0xFC00},
        {"u16 65535/0", KVRT_MASK_U16, 0, 0.0f, 65535, 0},
    };
    REQUIRE(kvrt::ref::f32_to_f16(-1000.0f) == 0xE3D0);

    for (uint32_t held = 0; held <= S + 6; ++held) {
        if (held) REQUIRE(append(c, static_cast<int32_t>(held - 1)) == KVRT_SUCCESS);
        kvrt_static_window win = KVRT_STATIC_WINDOW_INIT;
        KVRT_REQUIRE_OK(kvrt_cache_static_get_window(c, 0, 0, 1, KVRT_KV_ARRAY_V, &win));
        REQUIRE(win.n_valid == std::min(held, W));
        for (uint32_t n_new : {1u, 2u, 5u, W}) {
            INFO(held << " tokens held, a graph of " << n_new << " new rows");
            const size_t count = size_t{n_new} * S;
            for (const Encoding& e : encodings) {
                INFO(e.name);
                kvrt_static_mask_desc d = KVRT_STATIC_MASK_DESC_INIT;
                d.format = e.format;
                d.flags = e.flags;
                d.masked_value = e.masked_value;
                d.n_new = n_new;
                const bool f32 = e.format == KVRT_MASK_F32;
                std::vector<uint32_t> m32(count, 0x12345678u);
                std::vector<uint16_t> m16(count, 0x1234);
                void* out = f32 ? static_cast<void*>(m32.data()) : static_cast<void*>(m16.data());
                const uint64_t bytes = count * (f32 ? 4 : 2);
                KVRT_REQUIRE_OK(kvrt_cache_static_get_graph_mask(c, 0, &d, out, bytes));
                for (uint32_t j = 0; j < n_new; ++j)
                    for (uint32_t i = 0; i < S; ++i) {
                        const uint32_t want = attends(S, n_new, held, j, i) ? e.attend_bits : e.masked_bits;
                        const uint32_t got = f32 ? m32[size_t{j} * S + i] : m16[size_t{j} * S + i];
                        if (got != want) FAIL("row " << j << " entry " << i << ": " << got << ", want " << want);
                    }
                // One entry short is refused and writes nothing.
                std::vector<uint32_t> short32(count, 7u);
                REQUIRE(kvrt_cache_static_get_graph_mask(c, 0, &d, short32.data(), bytes - 1) ==
                        KVRT_ERROR_INVALID_ARGUMENT);
                REQUIRE(std::all_of(short32.begin(), short32.end(), [](uint32_t x) { return x == 7u; }));
            }

            // The past a graph of n_new rows binds: the window's last S-N
            // rows, at offset + (N-1) * row_stride; its valid rows are the
            // newest tokens, oldest first.
            const uint32_t past = S - n_new, valid = std::min({held, W, past});
            std::vector<uint16_t> rows(size_t{past} * kDim);
            KVRT_REQUIRE_OK(kvrt_buffer_download(win.buffer, win.offset + uint64_t{n_new - 1} * win.row_stride,
                                                 rows.data(), uint64_t{past} * win.row_stride));
            for (uint32_t r = past - valid; r < past; ++r) {
                const int32_t pos = static_cast<int32_t>(held) - static_cast<int32_t>(past - r);
                for (uint32_t dd = 0; dd < kDim; ++dd)
                    REQUIRE(rows[size_t{r} * kDim + dd] == kvrt::ref::f32_to_f16(value(pos, 1, dd, true)));
            }
        }

        // A decode graph's mask is kvrt_cache_static_get_mask's, and NULL
        // asks for it in f32.
        std::vector<float> plain(S), graph(S, 1.0f);
        std::vector<uint16_t> plain16(S), graph16(S, 1);
        KVRT_REQUIRE_OK(kvrt_cache_static_get_mask(c, 0, KVRT_TYPE_F32, plain.data(), S * 4));
        KVRT_REQUIRE_OK(kvrt_cache_static_get_graph_mask(c, 0, nullptr, graph.data(), S * 4));
        REQUIRE(std::memcmp(plain.data(), graph.data(), S * 4) == 0);
        KVRT_REQUIRE_OK(kvrt_cache_static_get_mask(c, 0, KVRT_TYPE_F16, plain16.data(), S * 2));
        kvrt_static_mask_desc d16 = KVRT_STATIC_MASK_DESC_INIT;
        d16.format = KVRT_MASK_F16;
        d16.n_new = 0;  // 0 means 1
        KVRT_REQUIRE_OK(kvrt_cache_static_get_graph_mask(c, 0, &d16, graph16.data(), S * 2));
        REQUIRE(plain16 == graph16);
    }
    REQUIRE(ctx.validation_errors() == 0);
}
