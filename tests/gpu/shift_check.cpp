#include "shift_check.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "common/random.hpp"
#include "reference/metrics.hpp"
#include "reference/quant.hpp"

namespace kvrt_test {

namespace ref = kvrt::ref;

ShiftCache::ShiftCache(kvrt_context ctx, kvrt_type t, kvrt_rope_desc rp, uint32_t capacity, kvrt_flags flags,
                       uint32_t head_dim)
    : type(t), dim(head_dim) {
    rp.next = nullptr;
    kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
    d.next = &rp;
    d.n_layers = layers;
    d.n_heads = kv_heads * 2;
    d.n_kv_heads = kv_heads;
    d.head_dim_k = dim;
    d.capacity = capacity;
    d.type_k = type;
    d.type_v = KVRT_TYPE_F16;
    d.flags = flags;
    KVRT_REQUIRE_OK(kvrt_cache_create(ctx, &d, cache.out()));
    rope.n_rot = rp.n_rot ? static_cast<int>(rp.n_rot) : static_cast<int>(dim);
    rope.neox = rp.mode == KVRT_ROPE_MODE_NEOX;
    if (rp.freq_base) rope.freq_base = rp.freq_base;
    if (rp.freq_scale) rope.freq_scale = rp.freq_scale;
    rope.ext_factor = rp.ext_factor;
    if (rp.attn_factor) rope.attn_factor = rp.attn_factor;
    if (rp.beta_fast) rope.beta_fast = rp.beta_fast;
    if (rp.beta_slow) rope.beta_slow = rp.beta_slow;
    rope.n_ctx_orig = static_cast<int>(rp.n_ctx_orig);
}

std::vector<uint32_t> ShiftCache::store(const std::vector<int32_t>& pos, int32_t seq, const std::vector<float>& raw,
                                        bool rotate) {
    const uint32_t n = static_cast<uint32_t>(pos.size());
    std::vector<float> one = rotate ? exact(pos, raw) : std::vector<float>(raw.begin(), raw.begin() + size_t{n} * row());
    std::vector<float> k;
    for (uint32_t l = 0; l < layers; ++l) k.insert(k.end(), one.begin(), one.end());
    std::vector<float> v(k.size());
    for (uint32_t l = 0; l < layers; ++l)
        for (size_t i = 0; i < size_t{n} * row(); ++i) v[size_t{l} * n * row() + i] = std::sin(3.0f * raw[i]);
    std::vector<int32_t> seqs(n, seq);
    const kvrt_batch b = make_batch(n, pos.data(), seqs.data());
    const kvrt_tensor_ref kr = host_tensor(k.data()), vr = host_tensor(v.data());
    std::vector<uint32_t> cells(n);
    KVRT_REQUIRE_OK(kvrt_cache_store(cache, nullptr, &b, -1, &kr, &vr, cells.data()));
    return cells;
}

std::vector<uint32_t> ShiftCache::store_bytes(const std::vector<int32_t>& pos, int32_t seq,
                                              const std::vector<float>& raw, const std::vector<uint8_t>& k_bytes) {
    const uint32_t n = static_cast<uint32_t>(pos.size());
    std::vector<uint8_t> k;
    for (uint32_t l = 0; l < layers; ++l) k.insert(k.end(), k_bytes.begin(), k_bytes.end());
    std::vector<float> v(size_t{layers} * n * row());
    for (uint32_t l = 0; l < layers; ++l)
        for (size_t i = 0; i < size_t{n} * row(); ++i) v[size_t{l} * n * row() + i] = std::sin(3.0f * raw[i]);
    std::vector<int32_t> seqs(n, seq);
    const kvrt_batch b = make_batch(n, pos.data(), seqs.data());
    const kvrt_tensor_ref kr = host_tensor(k.data(), type), vr = host_tensor(v.data());
    std::vector<uint32_t> cells(n);
    KVRT_REQUIRE_OK(kvrt_cache_store(cache, nullptr, &b, -1, &kr, &vr, cells.data()));
    return cells;
}

std::vector<float> ShiftCache::exact(const std::vector<int32_t>& pos, const std::vector<float>& raw) const {
    std::vector<float> out(pos.size() * row());
    for (size_t i = 0; i < pos.size(); ++i)
        for (uint32_t h = 0; h < kv_heads; ++h) {
            const float* in = &raw[(i * kv_heads + h) * dim];
            std::vector<double> tmp(in, in + dim), rot(dim);
            ref::rope_rotate(rope, tmp.data(), rot.data(), static_cast<int>(dim), pos[i]);
            for (uint32_t d = 0; d < dim; ++d) out[(i * kv_heads + h) * dim + d] = static_cast<float>(rot[d]);
        }
    return out;
}

std::vector<float> ShiftCache::read_k(const std::vector<uint32_t>& cells, uint32_t layer) const {
    std::vector<float> k(cells.size() * row());
    KVRT_REQUIRE_OK(kvrt_cache_read(cache, static_cast<int32_t>(layer), static_cast<uint32_t>(cells.size()),
                                    cells.data(), k.data(), bytes_of(k), nullptr, 0));
    return k;
}

std::vector<uint8_t> ShiftCache::read_k_bytes(const std::vector<uint32_t>& cells, uint32_t layer) const {
    std::vector<uint8_t> bytes(cells.size() * ref::row_bytes(ref_type(type), row()));
    KVRT_REQUIRE_OK(kvrt_cache_read_raw(cache, static_cast<int32_t>(layer), KVRT_KV_ARRAY_K,
                                        static_cast<uint32_t>(cells.size()), cells.data(), bytes.data(),
                                        bytes.size()));
    return bytes;
}

std::vector<uint8_t> ShiftCache::encode(const std::vector<float>& k) const {
    const size_t n = k.size() / row(), rb = ref::row_bytes(ref_type(type), row());
    std::vector<uint8_t> out(n * rb);
    for (size_t i = 0; i < n; ++i) ref::encode_row(ref_type(type), &k[i * row()], row(), &out[i * rb]);
    return out;
}

std::vector<float> ShiftCache::decode(const std::vector<uint8_t>& bytes) const {
    const size_t rb = ref::row_bytes(ref_type(type), row()), n = bytes.size() / rb;
    std::vector<float> out(n * row());
    for (size_t i = 0; i < n; ++i) ref::decode_row(ref_type(type), &bytes[i * rb], row(), &out[i * row()]);
    return out;
}

namespace {

// How the rotation's two products meet: both rounded, or one fused into the sum.
enum class Rounding { Separate, FuseFirst, FuseSecond };

// a * b rounded to f32 on its own. The volatile store keeps the compiler
// from fusing the product into a later add: GCC does that by default in C++
// (-ffp-contract=fast), even across statements, wherever the target has FMA
// (aarch64 has).
float product(float a, float b) {
    volatile float p = a * b;
    return p;
}

// p0 - p1 (minus) or p0 + p1, for products p0 = a0 * b0 and p1 = a1 * b1.
float combine(float a0, float b0, float a1, float b1, bool minus, Rounding r) {
    const float s1 = minus ? -a1 : a1;
    if (r == Rounding::FuseFirst) return std::fma(a0, b0, product(s1, b1));
    if (r == Rounding::FuseSecond) return std::fma(s1, b1, product(a0, b0));
    return product(a0, b0) + product(s1, b1);
}

// K rows rotated by their deltas as the shift kernel does it, with (cos, sin)
// as the library's table holds them (cos and sin of the angle in double,
// rounded to f32).
std::vector<float> rotate_rows(const ref::RopeParams& rope, uint32_t kv_heads, uint32_t dim,
                               const std::vector<float>& k, const std::vector<int32_t>& delta, Rounding r) {
    std::vector<float> x(k);
    for (size_t i = 0; i < delta.size(); ++i)
        for (uint32_t h = 0; h < kv_heads; ++h) {
            float* row = &x[(i * kv_heads + h) * dim];
            for (int p = 0; p < rope.n_rot / 2; ++p) {
                int a = 0, b = 0;
                ref::rope_pair_dims(rope, p, &a, &b);
                const double angle = ref::rope_angle(rope, p, delta[i]);
                const float c = static_cast<float>(std::cos(angle)), s = static_cast<float>(std::sin(angle));
                const float x0 = row[a], x1 = row[b];
                row[a] = combine(x0, c, x1, s, true, r);
                row[b] = combine(x0, s, x1, c, false, r);
            }
        }
    return x;
}

}  // namespace

std::vector<uint8_t> ShiftCache::shifted(const std::vector<float>& k, const std::vector<int32_t>& delta) const {
    return encode(rotate_rows(rope, kv_heads, dim, k, delta, Rounding::Separate));
}

std::vector<uint8_t> ShiftCache::shifted_fused(const std::vector<float>& k, const std::vector<int32_t>& delta,
                                               bool fused_first) const {
    return encode(rotate_rows(rope, kv_heads, dim, k, delta, fused_first ? Rounding::FuseFirst : Rounding::FuseSecond));
}

std::vector<std::vector<uint8_t>> ShiftCache::shift_roundings(const std::vector<float>& k,
                                                              const std::vector<int32_t>& delta) const {
    return {shifted(k, delta), shifted_fused(k, delta, true), shifted_fused(k, delta, false)};
}

std::vector<float> random_raw(uint32_t n, uint32_t row, uint32_t seed) {
    Rng rng(seed);
    std::normal_distribution<float> normal;
    std::vector<float> x(size_t{n} * row);
    for (auto& v : x) v = normal(rng);
    return x;
}

std::vector<int32_t> iota(int32_t first, uint32_t n) {
    std::vector<int32_t> p(n);
    for (uint32_t i = 0; i < n; ++i) p[i] = first + static_cast<int32_t>(i);
    return p;
}

kvrt_rope_desc rope_params(kvrt_rope_mode mode, uint32_t n_rot, bool yarn) {
    kvrt_rope_desc rp = KVRT_ROPE_DESC_INIT;
    rp.mode = mode;
    rp.n_rot = n_rot;
    if (yarn) {
        rp.freq_scale = 0.25f;
        rp.ext_factor = 1.0f;
        rp.n_ctx_orig = 4096;
        rp.freq_base = 500000.0f;
    }
    return rp;
}

std::vector<float> attend(const ShiftCache& c, int32_t qpos, int32_t seq, const std::vector<float>& q) {
    std::vector<float> out(size_t{c.kv_heads} * 2 * c.dim);
    const kvrt_tensor_ref qr = host_tensor(q.data());
    const kvrt_output_ref orf = host_output(out.data());
    const kvrt_batch queries = make_batch(1, &qpos, &seq);
    KVRT_REQUIRE_OK(kvrt_cache_attention(c.cache, nullptr, 0, &queries, &qr, &orf, nullptr));
    return out;
}

ReferenceDiff compare_with_reference(const ShiftCache& c, const std::vector<float>& got,
                                     const std::vector<uint8_t>& expect) {
    return compare_with_reference(c, got, std::vector<std::vector<uint8_t>>{expect});
}

ReferenceDiff compare_with_reference(const ShiftCache& c, const std::vector<float>& got,
                                     const std::vector<std::vector<uint8_t>>& expect) {
    ReferenceDiff d;
    REQUIRE(!expect.empty());
    std::vector<std::vector<float>> want;
    for (const auto& e : expect) {
        want.push_back(c.decode(e));
        REQUIRE(got.size() == want.back().size());
    }
    const ref::Type rt = ref_type(c.type);
    const size_t rb = ref::row_bytes(rt, c.row());
    d.values = got.size();
    d.nmse = ref::nmse(got, want[0]);
    for (size_t i = 0; i < got.size(); ++i) {
        double steps = -1;  // to the nearest expectation
        for (size_t j = 0; j < want.size() && steps != 0; ++j) {
            const float w = want[j][i];
            if (std::memcmp(&got[i], &w, 4) == 0) {
                steps = 0;
                break;
            }
            double step = ref::quant_step(rt, &expect[j][(i / c.row()) * rb], static_cast<int64_t>(i % c.row()));
            if (step == 0.0) {  // F32, F16: the spacing of values around the expected one
                int e = 0;
                std::frexp(w, &e);
                step = c.type == KVRT_TYPE_F16 ? std::ldexp(1.0, std::max(e - 11, -24)) : std::ldexp(1.0, e - 24);
            }
            const double s = std::fabs(double(got[i]) - double(w)) / step;
            if (steps < 0 || s < steps) steps = s;
        }
        if (steps != 0) ++d.differ;
        d.max_steps = std::max(d.max_steps, steps);
    }
    return d;
}

void check_reference(const ReferenceDiff& d, kvrt_type type) {
    INFO("against the reference shift: " << d.differ << " of " << d.values << " values differ, by up to "
                                         << d.max_steps << " steps; nmse " << d.nmse);
    CHECK(d.values > 0);
    if (type != KVRT_TYPE_F32) CHECK(d.differ * 1000 <= d.values);
    CHECK(d.max_steps <= 1.0);
}

uint64_t count_differences(const std::vector<float>& got, const std::vector<float>& expect) {
    uint64_t n = 0;
    for (size_t i = 0; i < got.size() && i < expect.size(); ++i) n += std::memcmp(&got[i], &expect[i], 4) != 0;
    return n + (got.size() > expect.size() ? got.size() - expect.size() : expect.size() - got.size());
}

}  // namespace kvrt_test
