// The static-scale integer K/V types (U8_STATIC, U16_STATIC) on the device:
// store (f32 and f16 input, per-layer or shared scales) gives the CPU
// reference's codes bit for bit, padding zeroed and every other byte of the
// cache untouched; readback decodes them exactly; attention (decode, prefill,
// GQA, both kernel variants, mixed with other types) meets SPEC 8 against the
// double-precision reference; RoPE shifts re-quantize with the layer's scale;
// and creation rejects every malformed scales descriptor.
#include "attention_check.hpp"
#include "gpu_test.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "api/handles.hpp"
#include "common/random.hpp"
#include "reference/half.hpp"
#include "reference/metrics.hpp"
#include "reference/quant.hpp"
#include "reference/rope.hpp"

using namespace kvrt_test;
namespace ref = kvrt::ref;

namespace {

constexpr uint8_t kSentinel = 0xA5;

ref::StaticType static_type(kvrt_type t) {
    return t == KVRT_TYPE_U8_STATIC ? ref::StaticType::U8 : ref::StaticType::U16;
}

// Scales of `layers` layers that all differ, in scale and zero point, between
// layers and between K and V: a kernel given another layer's or the other
// array's scale fails every comparison. Powers of two make x = (k + 0.5) *
// scale an exact half after the multiply; the others exercise the rounding of
// the product itself. Zero points near both ends make saturation one-sided.
std::vector<QuantScale> make_scales(kvrt_type t, bool v, uint32_t layers) {
    static const QuantScale u8_k[] = {{1.0f / 16, 128}, {0.0371f, 3}, {0.25f, 250}, {0.013f, 60}};
    static const QuantScale u8_v[] = {{1.0f / 32, 100}, {0.0517f, 200}, {0.5f, 0}, {0.0093f, 255}};
    static const QuantScale u16_k[] = {{1.0f / 1024, 32768}, {3.7e-4f, 1000}, {0.01f, 65000}, {1.0f / 4096, 20000}};
    static const QuantScale u16_v[] = {{1.0f / 2048, 30000}, {2.9e-4f, 64000}, {0.02f, 0}, {1.3e-3f, 65535}};
    const QuantScale* table = t == KVRT_TYPE_U8_STATIC ? (v ? u8_v : u8_k) : (v ? u16_v : u16_k);
    std::vector<QuantScale> out;
    for (uint32_t l = 0; l < layers; ++l) out.push_back(table[l % 4]);
    return out;
}

// A cell-layout cache of static-scale (or other) K/V types.
struct Spec {
    uint32_t layers = 3, kv_heads = 3, dk = 6, dv = 10, capacity = 40;
    kvrt_type k_type = KVRT_TYPE_U8_STATIC, v_type = KVRT_TYPE_U8_STATIC;
    bool shared_scale = false;  // count = 1 instead of n_layers
    kvrt_rope_desc rope = KVRT_ROPE_DESC_INIT;
    kvrt_flags flags = 0;
    // Scales to use instead of make_scales' (count entries).
    std::vector<QuantScale> k_scales, v_scales;
};

struct StaticCache {
    Cache cache;
    Spec spec;
    std::vector<QuantScale> k_scales, v_scales;  // per layer, as given

    StaticCache(kvrt_context ctx, const Spec& s) : spec(s) {
        const uint32_t count = s.shared_scale ? 1 : s.layers;
        if (is_static_scale(s.k_type))
            k_scales = s.k_scales.empty() ? make_scales(s.k_type, false, count) : s.k_scales;
        if (is_static_scale(s.v_type))
            v_scales = s.v_scales.empty() ? make_scales(s.v_type, true, count) : s.v_scales;
        // The scales and the RoPE, both chained (a default RoPE desc is the
        // same as none).
        StaticScales sd(k_scales, v_scales);
        kvrt_rope_desc rope = s.rope;
        rope.next = nullptr;
        sd.desc()->next = &rope;
        kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
        d.next = sd.desc();
        d.n_layers = s.layers;
        d.n_heads = s.kv_heads * 2;
        d.n_kv_heads = s.kv_heads;
        d.head_dim_k = s.dk;
        d.head_dim_v = s.dv;
        d.capacity = s.capacity;
        d.type_k = s.k_type;
        d.type_v = s.v_type;
        d.flags = s.flags;
        KVRT_REQUIRE_OK(kvrt_cache_create(ctx, &d, cache.out()));
    }
    StaticCache(const StaticCache&) = delete;
    StaticCache& operator=(const StaticCache&) = delete;

    QuantScale scale(bool v, uint32_t layer) const {
        const auto& s = v ? v_scales : k_scales;
        return s[spec.shared_scale ? 0 : layer];
    }
    uint32_t elems(bool v) const { return spec.kv_heads * (v ? spec.dv : spec.dk); }

    // The device buffer of one (layer, array) and the byte offset of a cell's
    // row in its address space, through the cache's internals.
    kvrt::vk::Buffer& buffer(bool v, uint32_t layer) const {
        const auto at = kvrt::api::cache_of(cache)->arena().locate(v ? kvrt::cache::Array::V : kvrt::cache::Array::K, layer, 0);
        return *const_cast<kvrt::vk::Buffer*>(at.buffer);
    }
    uint64_t row_offset(bool v, uint32_t layer, uint32_t cell) const {
        const auto at = kvrt::api::cache_of(cache)->arena().locate(v ? kvrt::cache::Array::V : kvrt::cache::Array::K, layer, cell);
        return at.piece * at.buffer->piece_bytes() + at.offset;
    }
    uint64_t stride(bool v) const {
        const auto& g = kvrt::api::cache_of(cache)->geometry();
        return (v ? g.v : g.k).stride;
    }
};

// Input values for `rows` rows of `n` values quantized with (scale, zp):
// values that saturate far above and below the range, infinities, NaN, both
// zeros, exact halves (k + 0.5) * scale, the float just below a half, the
// range's edges and half a step past them, tiny values, and uniform values
// over the range and slightly past it for the rest.
std::vector<float> make_values(uint32_t rows, uint32_t n, QuantScale q, uint32_t qmax, uint32_t seed) {
    const float s = q.scale;
    const float zp = static_cast<float>(q.zero_point), top = static_cast<float>(qmax) - zp;
    const float inf = std::numeric_limits<float>::infinity();
    const std::vector<float> specials = {
        0.0f, -0.0f, 1e30f, -1e30f, inf, -inf, std::numeric_limits<float>::quiet_NaN(), 65504.0f, -65504.0f,
        0.5f * s, -0.5f * s, 1.5f * s, -1.5f * s, 2.5f * s, -2.5f * s, 3.5f * s, -3.5f * s,
        0.49999997f * s, -0.49999997f * s, top * s, (top + 0.5f) * s, (top - 0.5f) * s, -zp * s, (-zp - 0.5f) * s,
        (-zp + 0.5f) * s, 1e-3f * s, -1e-3f * s, 1e-38f};
    Rng rng(seed);
    std::uniform_real_distribution<float> uniform((-zp - 4.0f) * s, (top + 4.0f) * s);
    std::vector<float> x(size_t{rows} * n);
    for (auto& v : x) v = uniform(rng);
    // The specials in `groups` groups of at most n, one group per row in
    // turn, at positions that move from row to row (over heads and words).
    const size_t groups = (specials.size() + n - 1) / n;
    REQUIRE(rows >= groups);
    for (uint32_t r = 0; r < rows; ++r) {
        size_t j = 0;
        for (size_t i = 0; i < specials.size(); ++i)
            if (i % groups == r % groups) x[size_t{r} * n + (r * 7 + j++) % n] = specials[i];
    }
    return x;
}

// The cache's view of an input: f16 input is rounded to f16 first.
std::vector<float> effective(std::vector<float> x, kvrt_type input) {
    if (input == KVRT_TYPE_F16)
        for (auto& v : x) v = ref::round_to_f16(v);
    return x;
}

std::vector<uint8_t> to_bytes(const std::vector<float>& x, kvrt_type input) {
    return ref::encode_values(x, input == KVRT_TYPE_F16);
}

struct Tally {
    uint64_t values = 0, bytes = 0;
};

// Stores tokens into a fragmented static-scale cache (all layers at once, then
// the last layer alone) and checks every byte of every layer's K and V
// buffers: stored rows hold the reference codes and zero padding, everything
// else still holds the sentinel it was filled with; and readback gives the
// reference's dequantized values, bit for bit.
void run_store_case(kvrt_context ctx, const Spec& spec, kvrt_type input, Tally* tally) {
    StaticCache c(ctx, spec);
    const uint32_t L = spec.layers;

    // Fragment the table so the tokens land in scattered cells.
    {
        std::vector<int32_t> pos(spec.capacity / 2), seq(spec.capacity / 2, 7);
        for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(i);
        const kvrt_batch b = make_batch(static_cast<uint32_t>(pos.size()), pos.data(), seq.data());
        KVRT_REQUIRE_OK(kvrt_cache_place(c.cache, &b, nullptr));
        for (int32_t p = 0; p < static_cast<int32_t>(pos.size()); p += 3)
            KVRT_REQUIRE_OK(kvrt_cache_seq_rm(c.cache, 7, p, p + 1));
    }
    // Every byte of the cache's buffers starts as the sentinel.
    std::vector<std::vector<uint8_t>> image[2];
    for (int a = 0; a < 2; ++a)
        for (uint32_t l = 0; l < L; ++l) {
            kvrt::vk::Buffer& b = c.buffer(a == 1, l);
            image[a].emplace_back(static_cast<size_t>(b.size()), kSentinel);
            REQUIRE(b.upload(0, image[a][l].data(), b.size()) == KVRT_SUCCESS);
        }

    // Input per array: layer blocks of n rows, each layer's values made for
    // its own scale.
    const uint32_t n = 13;
    std::vector<float> in[2];
    for (int a = 0; a < 2; ++a) {
        const bool v = a == 1;
        const kvrt_type t = v ? spec.v_type : spec.k_type;
        for (uint32_t l = 0; l < L; ++l) {
            const auto x = make_values(n, c.elems(v), c.scale(v, l), ref::static_qmax(static_type(t)), 100 * l + a);
            in[a].insert(in[a].end(), x.begin(), x.end());
        }
    }
    const std::vector<uint8_t> kb = to_bytes(in[0], input), vb = to_bytes(in[1], input);
    const std::vector<float> seen[2] = {effective(in[0], input), effective(in[1], input)};

    // Expected image and values of one stored row.
    auto expect_row = [&](bool v, uint32_t layer, uint32_t cell, const float* x, std::vector<float>* values) {
        const kvrt_type t = v ? spec.v_type : spec.k_type;
        const QuantScale q = c.scale(v, layer);
        const uint32_t e = c.elems(v);
        std::vector<uint8_t> codes(e * ref::static_code_bytes(static_type(t)));
        ref::encode_row_static(static_type(t), x, e, q.scale, q.zero_point, codes.data());
        uint8_t* row = &image[v ? 1 : 0][layer][static_cast<size_t>(c.row_offset(v, layer, cell))];
        std::memcpy(row, codes.data(), codes.size());
        std::fill(row + codes.size(), row + c.stride(v), uint8_t{0});  // the padding
        values->resize(e);
        ref::decode_row_static(static_type(t), codes.data(), e, q.scale, q.zero_point, values->data());
    };
    auto check = [&](uint32_t layer, const std::vector<uint32_t>& cells, const std::vector<const float*>& k_in,
                     const std::vector<const float*>& v_in) {
        const uint32_t ke = c.elems(false), ve = c.elems(true);
        std::vector<float> kg(size_t{ke} * cells.size()), vg(size_t{ve} * cells.size());
        KVRT_REQUIRE_OK(kvrt_cache_read(c.cache, static_cast<int32_t>(layer), static_cast<uint32_t>(cells.size()),
                                        cells.data(), kg.data(), bytes_of(kg), vg.data(), bytes_of(vg)));
        for (size_t i = 0; i < cells.size(); ++i) {
            std::vector<float> ek, ev;
            expect_row(false, layer, cells[i], k_in[i], &ek);
            expect_row(true, layer, cells[i], v_in[i], &ev);
            for (uint32_t j = 0; j < ke; ++j) {
                INFO("layer " << layer << " cell " << cells[i] << " K value " << j << ": input " << k_in[i][j]
                              << ", got " << kg[i * ke + j] << ", expected " << ek[j]);
                REQUIRE(std::memcmp(&kg[i * ke + j], &ek[j], 4) == 0);
            }
            for (uint32_t j = 0; j < ve; ++j) {
                INFO("layer " << layer << " cell " << cells[i] << " V value " << j << ": input " << v_in[i][j]
                              << ", got " << vg[i * ve + j] << ", expected " << ev[j]);
                REQUIRE(std::memcmp(&vg[i * ve + j], &ev[j], 4) == 0);
            }
            tally->values += ke + ve;
        }
    };

    // All layers in one call.
    std::vector<int32_t> pos(n), seq(n, 1);
    for (uint32_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(100 + i);
    const kvrt_batch batch = make_batch(n, pos.data(), seq.data());
    const kvrt_tensor_ref k = host_tensor(kb.data(), input), v = host_tensor(vb.data(), input);
    std::vector<uint32_t> cells(n);
    KVRT_REQUIRE_OK(kvrt_cache_store(c.cache, nullptr, &batch, -1, &k, &v, cells.data()));
    for (uint32_t l = 0; l < L; ++l) {
        std::vector<const float*> kp, vp;
        for (uint32_t i = 0; i < n; ++i) {
            kp.push_back(&seen[0][(size_t{l} * n + i) * c.elems(false)]);
            vp.push_back(&seen[1][(size_t{l} * n + i) * c.elems(true)]);
        }
        check(l, cells, kp, vp);
    }

    // The last layer alone, from layer block 0's rows: quantized with the last
    // layer's scale; the other layers of those cells keep their sentinel.
    for (uint32_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(200 + i);
    std::vector<uint32_t> cells2(n);
    KVRT_REQUIRE_OK(kvrt_cache_store(c.cache, nullptr, &batch, static_cast<int32_t>(L - 1), &k, &v, cells2.data()));
    {
        std::vector<const float*> kp, vp;
        for (uint32_t i = 0; i < n; ++i) {
            kp.push_back(&seen[0][size_t{i} * c.elems(false)]);
            vp.push_back(&seen[1][size_t{i} * c.elems(true)]);
        }
        check(L - 1, cells2, kp, vp);
    }

    // Every byte of every buffer: the stored rows, their zeroed padding, and
    // the sentinel everywhere else (other cells, other layers, piece tails).
    for (int a = 0; a < 2; ++a)
        for (uint32_t l = 0; l < L; ++l) {
            kvrt::vk::Buffer& b = c.buffer(a == 1, l);
            std::vector<uint8_t> got(static_cast<size_t>(b.size()));
            REQUIRE(b.download(0, got.data(), b.size()) == KVRT_SUCCESS);
            const auto diff = std::mismatch(got.begin(), got.end(), image[a][l].begin());
            INFO((a ? "V" : "K") << " layer " << l << ": first differing byte at " << (diff.first - got.begin())
                                 << " of " << got.size() << " (stride " << c.stride(a == 1) << ")");
            CHECK(diff.first == got.end());
            tally->bytes += got.size();
        }
}

}  // namespace

TEST_CASE("static-scale store gives the reference's codes, zeroed padding, and nothing else", "[static-types]") {
    KVRT_EACH_KERNEL_VARIANT(variant);
    // A small binding limit splits the layers into pieces.
    for (uint64_t binding : {uint64_t{0}, uint64_t{4096}}) {
        GpuContext ctx(variant.flags, binding);
        for (kvrt_type t : {KVRT_TYPE_U8_STATIC, KVRT_TYPE_U16_STATIC}) {
            for (bool shared : {false, true}) {
                for (kvrt_type input : {KVRT_TYPE_F32, KVRT_TYPE_F16}) {
                    Tally tally;
                    // Odd shapes: U8 rows of 18 and 30 bytes (a word half
                    // padding; heads 2-byte aligned), and wide heads over
                    // several pieces.
                    Spec odd;
                    odd.k_type = odd.v_type = t;
                    odd.shared_scale = shared;
                    Spec wide = odd;
                    wide.layers = 2;
                    wide.kv_heads = 2;
                    wide.dk = 64;
                    wide.dv = 32;
                    wide.capacity = 160;
                    for (const Spec& s : {odd, wide}) {
                        INFO(kvrt_type_name(t) << (shared ? " shared scale" : " per-layer scales") << ", " << kvrt_type_name(input)
                                     << " input, dims " << s.dk << "/" << s.dv << ", binding " << binding);
                        run_store_case(ctx, s, input, &tally);
                    }
                    CHECK(tally.values > 0);
                    CHECK(tally.bytes > 0);
                }
            }
        }
        CHECK(ctx.validation_errors() == 0);
    }
}

TEST_CASE("static-scale K and V mix with other types in one cache", "[static-types]") {
    GpuContext ctx;
    Tally tally;
    Spec s;
    s.layers = 2;
    s.dk = 32;
    s.dv = 6;
    s.k_type = KVRT_TYPE_U16_STATIC;
    s.v_type = KVRT_TYPE_U8_STATIC;
    run_store_case(ctx, s, KVRT_TYPE_F32, &tally);
    CHECK(tally.values > 0);

    // A static-scale array next to an F16 one: only its own scales are given.
    StaticCache mixed(ctx, [] {
        Spec m;
        m.layers = 2;
        m.dk = 8;
        m.dv = 8;
        m.k_type = KVRT_TYPE_F16;
        m.v_type = KVRT_TYPE_U8_STATIC;
        return m;
    }());
    std::vector<float> k(2 * 3 * 8), v(2 * 3 * 8);
    for (size_t i = 0; i < k.size(); ++i) k[i] = v[i] = 0.125f * static_cast<float>(i % 17) - 1.0f;
    int32_t pos = 0, seq = 0;
    const kvrt_batch b = make_batch(1, &pos, &seq);
    const kvrt_tensor_ref kr = host_tensor(k.data()), vr = host_tensor(v.data());
    uint32_t cell = 0;
    KVRT_REQUIRE_OK(kvrt_cache_store(mixed.cache, nullptr, &b, -1, &kr, &vr, &cell));
    for (uint32_t l = 0; l < 2; ++l) {
        std::vector<float> kg(24), vg(24), ev(24);
        KVRT_REQUIRE_OK(kvrt_cache_read(mixed.cache, static_cast<int32_t>(l), 1, &cell, kg.data(), bytes_of(kg),
                                        vg.data(), bytes_of(vg)));
        const QuantScale q = mixed.scale(true, l);
        std::vector<uint8_t> codes(24);
        ref::encode_row_static(ref::StaticType::U8, &v[l * 24], 24, q.scale, q.zero_point, codes.data());
        ref::decode_row_static(ref::StaticType::U8, codes.data(), 24, q.scale, q.zero_point, ev.data());
        CHECK(std::memcmp(kg.data(), &k[l * 24], 24 * 4) == 0);  // exact in f16
        CHECK(std::memcmp(vg.data(), ev.data(), 24 * 4) == 0);
    }
    CHECK(ctx.validation_errors() == 0);
}

TEST_CASE("attention over static-scale K/V meets SPEC 8 in decode and prefill, with GQA", "[static-types]") {
    const kvrt_type pairs[][2] = {{KVRT_TYPE_U8_STATIC, KVRT_TYPE_U8_STATIC}, {KVRT_TYPE_U16_STATIC, KVRT_TYPE_U16_STATIC},
                                  {KVRT_TYPE_U8_STATIC, KVRT_TYPE_U16_STATIC}, {KVRT_TYPE_U16_STATIC, KVRT_TYPE_F16},
                                  {KVRT_TYPE_F32, KVRT_TYPE_U8_STATIC},        {KVRT_TYPE_Q8_0, KVRT_TYPE_U16_STATIC}};
    KVRT_EACH_KERNEL_VARIANT(variant);
    GpuContext ctx(variant.flags);
    size_t case_index = 0;
    for (const auto& pair : pairs) {
        for (uint32_t nq : {1u, 8u}) {  // decode; a prefill chunk under the causal mask
            // Prefill for the pairs that cover each static type as K and as V
            // (U8 V heads of 72 values included); decode for every pair. The
            // dequantization is the same code in both; each pipeline costs
            // lavapipe seconds to compile.
            const bool prefill_pair = (pair[0] == KVRT_TYPE_U8_STATIC && pair[1] == KVRT_TYPE_U16_STATIC) ||
                                      (pair[0] == KVRT_TYPE_U16_STATIC && pair[1] == KVRT_TYPE_F16) ||
                                      (pair[0] == KVRT_TYPE_F32 && pair[1] == KVRT_TYPE_U8_STATIC);
            if (nq > 1 && !prefill_pair) continue;
            if (!sweep_case_runs(case_index++, variant)) continue;
            AttnCase c;
            c.layers = 2;
            c.n_heads = 8;
            c.n_kv_heads = 2;  // GQA 4:1
            c.dk = 64;
            c.dv = pair[1] == KVRT_TYPE_U8_STATIC ? 72 : 64;  // U8 V heads 8-byte aligned but not 16
            c.k_type = pair[0];
            c.v_type = pair[1];
            c.n_seqs = 2;
            c.shared_prefix = 20;
            c.tokens_per_seq = 90;
            c.n_queries = nq;
            c.q_type = nq == 1 ? KVRT_TYPE_F32 : KVRT_TYPE_F16;
            c.seed = 17 + nq;
            // Inputs are N(0, 1): ranges of about +-4 (U8) and +-8 (U16).
            if (is_static_scale(pair[0]))
                c.k_scales = pair[0] == KVRT_TYPE_U8_STATIC
                                 ? std::vector<QuantScale>{{4.0f / 127, 127}, {0.045f, 120}}
                                 : std::vector<QuantScale>{{1.0f / 4096, 32768}, {2.6e-4f, 31000}};
            if (is_static_scale(pair[1]))
                c.v_scales = pair[1] == KVRT_TYPE_U8_STATIC
                                 ? std::vector<QuantScale>{{0.035f, 130}, {1.0f / 32, 125}}
                                 : std::vector<QuantScale>{{2.4e-4f, 33000}, {1.0f / 8192, 32768}};
            // Both arrays with scales: the same count.
            if (!c.k_scales.empty() && !c.v_scales.empty()) REQUIRE(c.k_scales.size() == c.v_scales.size());
            const AttnOutcome o = run_attention_case(ctx, c);
            INFO(kvrt_type_name(pair[0]) << " K, " << kvrt_type_name(pair[1]) << " V, " << nq << " queries: nmse "
                                         << o.nmse << " (vs f32 inputs " << o.nmse_vs_f32 << "), max abs " << o.max_abs);
            CHECK(o.values > 0);
            CHECK(o.nmse <= 1e-6);
            CHECK(o.guard_ok);
            // And the stored codes stay close to the f32 inputs (a store
            // and readback that agreed on a wrong scale would not).
            CHECK(o.nmse_vs_f32 < 1e-2);
            if (nq == 1)
                std::printf("attention %s K / %s V, %s kernels: nmse %.3g on the same dequantized K/V, %.3g "
                            "against f32 inputs\n",
                            kvrt_type_name(pair[0]), kvrt_type_name(pair[1]), variant.name.c_str(), o.nmse,
                            o.nmse_vs_f32);
        }
    }
    CHECK(ctx.validation_errors() == 0);
}

namespace {

ref::RopeParams ref_rope(const kvrt_rope_desc& rp, uint32_t dim) {
    ref::RopeParams r;
    r.n_rot = rp.n_rot ? static_cast<int>(rp.n_rot) : static_cast<int>(dim);
    r.neox = rp.mode == KVRT_ROPE_MODE_NEOX;
    return r;
}

// K of n tokens: uniform values within 60% of the smaller side of each
// layer's range, so rotated pairs (|x| grows by up to sqrt 2) stay in range.
std::vector<float> rope_inputs(const StaticCache& c, uint32_t n, uint32_t seed) {
    Rng rng(seed);
    std::vector<float> k;
    const uint32_t qmax = ref::static_qmax(static_type(c.spec.k_type));
    for (uint32_t l = 0; l < c.spec.layers; ++l) {
        const QuantScale q = c.scale(false, l);
        const float half = 0.6f * static_cast<float>(std::min<int32_t>(q.zero_point, static_cast<int32_t>(qmax) - q.zero_point)) * q.scale;
        std::uniform_real_distribution<float> u(-half, half);
        for (uint32_t i = 0; i < n * c.elems(false); ++i) k.push_back(u(rng));
    }
    return k;
}

std::vector<float> read_layer(const StaticCache& c, bool v, uint32_t layer, const std::vector<uint32_t>& cells) {
    std::vector<float> out(cells.size() * c.elems(v));
    KVRT_REQUIRE_OK(kvrt_cache_read(c.cache, static_cast<int32_t>(layer), static_cast<uint32_t>(cells.size()),
                                    cells.data(), v ? nullptr : out.data(), v ? 0 : bytes_of(out),
                                    v ? out.data() : nullptr, v ? bytes_of(out) : 0));
    return out;
}

}  // namespace

TEST_CASE("RoPE shift of static-scale K re-quantizes with each layer's scale", "[static-types]") {
    KVRT_EACH_KERNEL_VARIANT(variant);
    GpuContext ctx(variant.flags);
    for (kvrt_type t : {KVRT_TYPE_U8_STATIC, KVRT_TYPE_U16_STATIC}) {
        for (kvrt_rope_mode mode : {KVRT_ROPE_MODE_NORMAL, KVRT_ROPE_MODE_NEOX}) {
            // Whole and partial rotation. Rows of whole words take the
            // streaming kernel, U8 rotating 22 of 32 dims keeps the codes
            // of the rest of its last word, and U8 heads of 10 bytes (2-byte
            // aligned) and NeoX pairs that are not whole words take the row
            // kernel.
            for (uint32_t dim : {64u, 32u, 10u}) {
                Spec s;
                s.layers = 2;
                s.kv_heads = 3;
                s.dk = dim;
                s.dv = 8;
                s.capacity = 64;
                s.k_type = t;
                s.v_type = KVRT_TYPE_U8_STATIC;
                s.rope.mode = mode;
                s.rope.n_rot = dim == 64 ? 48 : dim == 32 ? 22 : 0;
                // Zero points near the middle, so rotated values keep a wide range.
                s.k_scales = t == KVRT_TYPE_U8_STATIC
                                 ? std::vector<QuantScale>{{1.0f / 16, 128}, {0.0371f, 120}}
                                 : std::vector<QuantScale>{{1.0f / 1024, 32768}, {3.7e-4f, 30000}};
                StaticCache c(ctx, s);
                const ref::RopeParams rp = ref_rope(s.rope, dim);
                const uint32_t n = 40, ke = c.elems(false);
                const auto k = rope_inputs(c, n, dim + mode);
                std::vector<float> v(size_t{s.layers} * n * c.elems(true), 0.25f);
                std::vector<int32_t> pos(n), seq(n, 0);
                for (uint32_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(50 + i);
                const kvrt_batch b = make_batch(n, pos.data(), seq.data());
                const kvrt_tensor_ref kr = host_tensor(k.data());
                const kvrt_tensor_ref vr = host_tensor(v.data());
                std::vector<uint32_t> cells(n);
                KVRT_REQUIRE_OK(kvrt_cache_store(c.cache, nullptr, &b, -1, &kr, &vr, cells.data()));

                std::vector<std::vector<float>> k_before, v_before;
                for (uint32_t l = 0; l < s.layers; ++l) {
                    k_before.push_back(read_layer(c, false, l, cells));
                    v_before.push_back(read_layer(c, true, l, cells));
                }
                const int32_t d = -37;
                KVRT_REQUIRE_OK(kvrt_cache_seq_add(c.cache, 0, 0, -1, d));
                KVRT_REQUIRE_OK(kvrt_cache_apply_shifts(c.cache, nullptr));

                uint64_t values = 0, exact = 0;
                for (uint32_t l = 0; l < s.layers; ++l) {
                    const QuantScale q = c.scale(false, l);
                    const auto after = read_layer(c, false, l, cells);
                    // The reference: the stored (dequantized) K rotated in
                    // double precision, rounded to f32, quantized again.
                    for (uint32_t i = 0; i < n * s.kv_heads; ++i) {
                        const std::vector<float> head(&k_before[l][size_t{i} * dim], &k_before[l][size_t{i} * dim] + dim);
                        const auto rot = ref::rope_shift(rp, head, d);
                        for (uint32_t j = 0; j < dim; ++j) {
                            const float x = static_cast<float>(rot[j]);
                            const float expect = ref::dequantize_static(
                                ref::quantize_static(static_type(t), x, 1.0f / q.scale, q.zero_point), q.scale, q.zero_point);
                            const float got = after[size_t{i} * dim + j];
                            ++values;
                            if (got == expect) {
                                ++exact;
                                continue;
                            }
                            // f32 rotation against double: a value that lies
                            // within rounding of a half step may round the
                            // other way, by one code at most.
                            INFO(kvrt_type_name(t) << " mode " << mode << " dim " << dim << " layer " << l << " head row " << i
                                         << " dim " << j << ": got " << got << ", expected " << expect << " (rotated "
                                         << rot[j] << ", step " << q.scale << ")");
                            REQUIRE(std::abs(double(got) - double(expect)) <= double(q.scale) * 1.0001);
                        }
                    }
                    // V never moves.
                    CHECK(read_layer(c, true, l, cells) == v_before[l]);
                }
                INFO(kvrt_type_name(t) << " mode " << mode << " dim " << dim << ": " << exact << " of " << values << " exact");
                CHECK(values == uint64_t{s.layers} * n * ke);
                CHECK(static_cast<double>(exact) >= 0.99 * static_cast<double>(values));
            }
        }
    }
    CHECK(ctx.validation_errors() == 0);
}

TEST_CASE("deferred RoPE over static-scale K: shifts leave K alone and attention follows the positions",
          "[static-types]") {
    KVRT_EACH_KERNEL_VARIANT(variant);
    GpuContext ctx(variant.flags);
    for (kvrt_type t : {KVRT_TYPE_U8_STATIC, KVRT_TYPE_U16_STATIC}) {
        Spec s;
        s.layers = 1;
        s.kv_heads = 2;
        s.dk = 64;
        s.dv = 64;
        s.capacity = 128;
        s.k_type = s.v_type = t;
        s.rope.mode = KVRT_ROPE_MODE_NEOX;
        s.flags = KVRT_CACHE_DEFERRED_ROPE;
        StaticCache shifted(ctx, s), fresh(ctx, s);
        const uint32_t n = 60;
        const auto k = rope_inputs(shifted, n, 3);
        std::vector<float> v(k.size());
        for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.7f * static_cast<float>(i));
        auto store = [&](StaticCache& c, int32_t first) {
            std::vector<int32_t> pos(n), seq(n, 0);
            for (uint32_t i = 0; i < n; ++i) pos[i] = first + static_cast<int32_t>(i);
            const kvrt_batch b = make_batch(n, pos.data(), seq.data());
            const kvrt_tensor_ref kr = host_tensor(k.data());
            const kvrt_tensor_ref vr = host_tensor(v.data());
            std::vector<uint32_t> cells(n);
            KVRT_REQUIRE_OK(kvrt_cache_store(c.cache, nullptr, &b, -1, &kr, &vr, cells.data()));
            return cells;
        };
        const auto cells = store(shifted, 0);
        store(fresh, 25);
        const auto before = read_layer(shifted, false, 0, cells);
        KVRT_REQUIRE_OK(kvrt_cache_seq_add(shifted.cache, 0, 0, -1, 25));
        KVRT_REQUIRE_OK(kvrt_cache_apply_shifts(shifted.cache, nullptr));
        CHECK(read_layer(shifted, false, 0, cells) == before);

        Rng rng(9);
        std::normal_distribution<float> normal;
        std::vector<float> q(size_t{s.kv_heads} * 2 * s.dk);
        for (auto& x : q) x = normal(rng);
        auto attend = [&](const StaticCache& c) {
            std::vector<float> out(size_t{s.kv_heads} * 2 * s.dv);
            int32_t qpos = 25 + static_cast<int32_t>(n), seq = 0;
            const kvrt_tensor_ref qr = host_tensor(q.data());
            const kvrt_output_ref orf = host_output(out.data());
            const kvrt_batch queries = make_batch(1, &qpos, &seq);
            KVRT_REQUIRE_OK(kvrt_cache_attention(c.cache, nullptr, 0, &queries, &qr, &orf, nullptr));
            return out;
        };
        const auto a = attend(shifted), b = attend(fresh);
        const double e = ref::nmse(a, b);
        INFO(kvrt_type_name(t) << ": nmse " << e);
        CHECK(e <= 1e-12);  // the same codes at the same positions
        double norm = 0;
        for (float x : a) norm += double(x) * x;
        CHECK(norm > 0);
    }
    CHECK(ctx.validation_errors() == 0);
}

TEST_CASE("cache creation rejects malformed static scales with a message", "[static-types]") {
    GpuContext ctx;
    const float good_scales[3] = {0.1f, 0.2f, 0.3f};
    const int32_t good_zero_points[3] = {128, 0, 255};
    float bad_scales[3];
    int32_t bad_zero_points[3];
    kvrt_static_scales_desc sd = KVRT_STATIC_SCALES_DESC_INIT;
    kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
    auto reset = [&](kvrt_type tk, kvrt_type tv) {
        d = kvrt_cache_desc KVRT_CACHE_DESC_INIT;
        d.n_layers = 3;
        d.n_heads = 4;
        d.n_kv_heads = 2;
        d.head_dim_k = 16;
        d.capacity = 16;
        d.type_k = tk;
        d.type_v = tv;
        sd = kvrt_static_scales_desc KVRT_STATIC_SCALES_DESC_INIT;
        sd.count = 3;
        if (is_static_scale(tk)) {
            sd.k_scales = good_scales;
            sd.k_zero_points = good_zero_points;
        }
        if (is_static_scale(tv)) {
            sd.v_scales = good_scales;
            sd.v_zero_points = good_zero_points;
        }
        d.next = &sd;
        std::copy(good_scales, good_scales + 3, bad_scales);
        std::copy(good_zero_points, good_zero_points + 3, bad_zero_points);
    };
    auto fails = [&](const std::string& what) {
        INFO(what);
        kvrt_cache out = reinterpret_cast<kvrt_cache>(&sd);  // anything but NULL
        const kvrt_result r = kvrt_cache_create(ctx, &d, &out);
        const std::string message = kvrt_last_error_message();
        INFO(kvrt_result_string(r) << ": \"" << message << "\"");
        CHECK(r == KVRT_ERROR_INVALID_ARGUMENT);
        CHECK(!message.empty());
        CHECK(out == nullptr);
        kvrt_cache_estimate e = KVRT_CACHE_ESTIMATE_INIT;
        CHECK(kvrt_cache_estimate_size(ctx, &d, &e) == KVRT_ERROR_INVALID_ARGUMENT);
    };

    // The baseline is accepted, so each failure below is its one change.
    reset(KVRT_TYPE_U8_STATIC, KVRT_TYPE_U16_STATIC);
    Cache ok;
    KVRT_REQUIRE_OK(kvrt_cache_create(ctx, &d, ok.out()));
    ok.reset();

    reset(KVRT_TYPE_U8_STATIC, KVRT_TYPE_F16);
    d.next = nullptr;
    fails("U8 K without a scales descriptor");
    reset(KVRT_TYPE_F16, KVRT_TYPE_U16_STATIC);
    sd.v_scales = nullptr;
    sd.v_zero_points = nullptr;
    fails("U16 V with the descriptor but no V scales");
    reset(KVRT_TYPE_U8_STATIC, KVRT_TYPE_U8_STATIC);
    sd.k_zero_points = nullptr;
    fails("K scales without K zero points");
    reset(KVRT_TYPE_U8_STATIC, KVRT_TYPE_U8_STATIC);
    sd.v_scales = nullptr;
    fails("V zero points without V scales");
    for (uint32_t count : {0u, 2u, 4u}) {
        reset(KVRT_TYPE_U8_STATIC, KVRT_TYPE_U8_STATIC);
        sd.count = count;
        fails("count " + std::to_string(count) + " with 3 layers");
    }
    for (float scale : {0.0f, -0.0f, -0.5f, std::numeric_limits<float>::infinity(),
                        std::numeric_limits<float>::quiet_NaN(), 1e-45f /* 1/scale overflows */,
                        1e-39f /* subnormal */}) {
        for (bool v : {false, true}) {
            reset(KVRT_TYPE_U16_STATIC, KVRT_TYPE_U8_STATIC);
            bad_scales[2] = scale;
            (v ? sd.v_scales : sd.k_scales) = bad_scales;
            fails((v ? "V scale " : "K scale ") + std::to_string(scale) + " in layer 2");
        }
    }
    const std::pair<kvrt_type, int32_t> zero_points[] = {{KVRT_TYPE_U8_STATIC, -1},
                                                         {KVRT_TYPE_U8_STATIC, 256},
                                                         {KVRT_TYPE_U16_STATIC, -1},
                                                         {KVRT_TYPE_U16_STATIC, 65536}};
    for (const auto& [t, zp] : zero_points) {
        for (bool v : {false, true}) {
            reset(t, t);
            bad_zero_points[1] = zp;
            (v ? sd.v_zero_points : sd.k_zero_points) = bad_zero_points;
            fails(std::string(kvrt_type_name(t)) + (v ? " V" : " K") + " zero point " + std::to_string(zp));
        }
    }
    reset(KVRT_TYPE_F16, KVRT_TYPE_U8_STATIC);
    sd.k_scales = good_scales;
    sd.k_zero_points = good_zero_points;
    fails("K scales for an F16 K");
    reset(KVRT_TYPE_U8_STATIC, KVRT_TYPE_Q8_0);
    d.head_dim_k = 32;
    sd.v_scales = good_scales;
    sd.v_zero_points = good_zero_points;
    fails("V scales for a Q8_0 V");
    // A second scales descriptor in the chain.
    reset(KVRT_TYPE_U8_STATIC, KVRT_TYPE_U8_STATIC);
    kvrt_static_scales_desc again = sd;
    sd.next = &again;
    fails("two scales descriptors");
    CHECK(ctx.validation_errors() == 0);
}
