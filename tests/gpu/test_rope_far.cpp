// RoPE at far positions (SPEC 3 and 8): every angle exact at any position and
// delta up to 2^24, whatever the device's sin and cos do outside [-pi, pi].
//
// A new user's check: a cache with deferred RoPE, f32 K and V, head dim 128,
// 32 tokens stored raw at positions P0 .. P0 + 31, one query at P0 + 32
// rotated on the host in double; the attention output against the
// double-precision reference over K rotated in double (tests/reference), in
// normal and NeoX pairing, with and without YaRN, in every attention kernel
// (kvrt's pick, portable, tiled, shuffle). And the same K stored rotated at
// position 0 and moved to P0 by one shift. SPEC 8 bounds deferred attention
// by 1e-10 at every position up to 2^24 and a shift of f32 K by 1e-7.
//
// KVRT_ROPE_FAR_TABLE=1 prints the NMSE of each case (the table of the docs).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "gpu_test.hpp"
#include "reference/attention.hpp"
#include "reference/metrics.hpp"
#include "reference/rope.hpp"
#include "common/random.hpp"

using namespace kvrt_test;
namespace ref = kvrt::ref;

namespace {

constexpr uint32_t kDim = 128, kKvHeads = 2, kHeads = 4, kTokens = 32;

// The first positions of the table: up to 2^24 (SPEC's bound), and one far
// past it (positions are any non-negative int32).
const int32_t kFirstPositions[] = {0, 10000, 131000, 1000000, 4000000, 16000000, 16777216 - 40, 1000000000};

struct RopeCase {
    const char* name;
    kvrt_rope_mode mode;
    bool yarn;
};
const RopeCase kRopeCases[] = {
    {"normal", KVRT_ROPE_MODE_NORMAL, false},
    {"neox", KVRT_ROPE_MODE_NEOX, false},
    {"normal yarn", KVRT_ROPE_MODE_NORMAL, true},
    {"neox yarn", KVRT_ROPE_MODE_NEOX, true},
};

kvrt_rope_desc rope_desc(const RopeCase& rc) {
    kvrt_rope_desc r = KVRT_ROPE_DESC_INIT;
    r.mode = rc.mode;
    r.freq_base = 500000.0f;  // Llama 3's base: the slowest pairs turn least
    if (rc.yarn) {
        // A 4x YaRN extension of an 8K model (Qwen2.5 style).
        r.freq_scale = 0.25f;
        r.ext_factor = 1.0f;
        r.n_ctx_orig = 8192;
        r.beta_fast = 32.0f;
        r.beta_slow = 1.0f;
    }
    return r;
}

ref::RopeParams ref_rope(const kvrt_rope_desc& r) {
    ref::RopeParams p;
    p.n_rot = static_cast<int>(kDim);
    p.neox = r.mode == KVRT_ROPE_MODE_NEOX;
    p.freq_base = r.freq_base;
    if (r.freq_scale != 0.0f) p.freq_scale = r.freq_scale;
    p.ext_factor = r.ext_factor;
    if (r.beta_fast != 0.0f) p.beta_fast = r.beta_fast;
    if (r.beta_slow != 0.0f) p.beta_slow = r.beta_slow;
    p.n_ctx_orig = static_cast<int>(r.n_ctx_orig);
    return p;
}

std::vector<float> random_values(size_t n, uint32_t seed) { return Rng(seed).normal(n); }

// Head vectors (n of them, `dim` values each) rotated in double to
// positions first + i / heads_per_token, rounded to f32.
std::vector<float> rotated(const ref::RopeParams& p, const std::vector<float>& raw, uint32_t heads_per_token,
                           int64_t first) {
    std::vector<float> out(raw.size());
    std::vector<double> in(kDim), rot(kDim);
    for (size_t h = 0; h < raw.size() / kDim; ++h) {
        for (uint32_t d = 0; d < kDim; ++d) in[d] = raw[h * kDim + d];
        ref::rope_rotate(p, in.data(), rot.data(), static_cast<int>(kDim), static_cast<double>(first + h / heads_per_token));
        for (uint32_t d = 0; d < kDim; ++d) out[h * kDim + d] = static_cast<float>(rot[d]);
    }
    return out;
}

// One far-position case: the attention of the query against the reference.
struct FarCache {
    Cache cache;
    FarCache(kvrt_context ctx, const kvrt_rope_desc& rope, kvrt_flags flags) {
        kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
        d.next = &rope;
        d.n_layers = 1;
        d.n_heads = kHeads;
        d.n_kv_heads = kKvHeads;
        d.head_dim_k = kDim;
        d.capacity = 64;
        d.type_k = KVRT_TYPE_F32;
        d.type_v = KVRT_TYPE_F32;
        d.flags = flags;
        KVRT_REQUIRE_OK(kvrt_cache_create(ctx, &d, cache.out()));
    }
    FarCache(const FarCache&) = delete;
    FarCache& operator=(const FarCache&) = delete;

    std::vector<uint32_t> store(int32_t first, const std::vector<float>& k, const std::vector<float>& v) {
        std::vector<int32_t> pos(kTokens), seq(kTokens, 0);
        for (uint32_t i = 0; i < kTokens; ++i) pos[i] = first + static_cast<int32_t>(i);
        const kvrt_batch b = make_batch(kTokens, pos.data(), seq.data());
        const kvrt_tensor_ref kr = host_tensor(k.data()), vr = host_tensor(v.data());
        std::vector<uint32_t> cells(kTokens);
        KVRT_REQUIRE_OK(kvrt_cache_store(cache, nullptr, &b, -1, &kr, &vr, cells.data()));
        return cells;
    }
    std::vector<float> attend(int32_t qpos, const std::vector<float>& q) const {
        std::vector<float> out(size_t{kHeads} * kDim);
        int32_t seq = 0;
        const kvrt_tensor_ref qr = host_tensor(q.data());
        const kvrt_output_ref orf = host_output(out.data());
        const kvrt_batch b = make_batch(1, &qpos, &seq);
        KVRT_REQUIRE_OK(kvrt_cache_attention(cache, nullptr, 0, &b, &qr, &orf, nullptr));
        return out;
    }
};

// The reference: the query against K rotated in double at its positions.
std::vector<double> reference(const ref::RopeParams& p, int64_t first, const std::vector<float>& raw_k,
                              const std::vector<float>& v, const std::vector<float>& q) {
    const std::vector<float> k = rotated(p, raw_k, kKvHeads, first);
    ref::AttnParams ap;
    ap.n_heads = kHeads;
    ap.n_kv_heads = kKvHeads;
    ap.head_dim_k = ap.head_dim_v = kDim;
    ap.scale = 1.0 / std::sqrt(static_cast<double>(kDim));
    std::vector<ref::AttnCell> cells(kTokens);
    for (uint32_t i = 0; i < kTokens; ++i) cells[i] = {static_cast<int32_t>(first + i), {0}};
    const std::vector<ref::AttnQuery> queries{{static_cast<int32_t>(first + kTokens), 0}};
    return ref::attention(ap, q.data(), queries, k.data(), v.data(), cells);
}

bool print_table() {
    const char* e = std::getenv("KVRT_ROPE_FAR_TABLE");
    return e && *e == '1';
}

}  // namespace

TEST_CASE("deferred RoPE attention is exact at any position up to 2^24 and beyond", "[shift][rope-far]") {
    const KernelVariant variant = GENERATE(from_range(pick_and_forced_variants()));
    INFO("kernels: " << variant.name);
    GpuContext ctx(variant.flags);
    const std::vector<float> raw_k = random_values(size_t{kTokens} * kKvHeads * kDim, 11);
    const std::vector<float> v = random_values(size_t{kTokens} * kKvHeads * kDim, 12);
    const std::vector<float> raw_q = random_values(size_t{kHeads} * kDim, 13);
    for (const RopeCase& rc : kRopeCases) {
        const kvrt_rope_desc rope = rope_desc(rc);
        const ref::RopeParams p = ref_rope(rope);
        for (int32_t first : kFirstPositions) {
            FarCache c(ctx, rope, KVRT_CACHE_DEFERRED_ROPE);
            c.store(first, raw_k, v);
            const int32_t qpos = first + static_cast<int32_t>(kTokens);
            const std::vector<float> q = rotated(p, raw_q, kHeads, qpos);
            const double e = ref::nmse(c.attend(qpos, q), reference(p, first, raw_k, v, q));
            if (print_table()) std::printf("deferred %-8s %-12s P0 %10d nmse %.2g\n", variant.name.c_str(), rc.name, first, e);
            INFO(rc.name << " P0 " << first << " nmse " << e);
            CHECK(e <= 1e-10);
        }
    }
}

TEST_CASE("a shift of f32 K to any position up to 2^24 is exact", "[shift][rope-far]") {
    GpuContext ctx;
    const std::vector<float> raw_k = random_values(size_t{kTokens} * kKvHeads * kDim, 21);
    const std::vector<float> v = random_values(size_t{kTokens} * kKvHeads * kDim, 22);
    for (const RopeCase& rc : kRopeCases) {
        const kvrt_rope_desc rope = rope_desc(rc);
        const ref::RopeParams p = ref_rope(rope);
        for (int32_t first : kFirstPositions) {
            if (first == 0) continue;
            // K rotated on the host at 0 .. 31, moved to `first` by one shift.
            FarCache c(ctx, rope, 0);
            const std::vector<uint32_t> cells = c.store(0, rotated(p, raw_k, kKvHeads, 0), v);
            KVRT_REQUIRE_OK(kvrt_cache_seq_add(c.cache, 0, 0, -1, first));
            KVRT_REQUIRE_OK(kvrt_cache_apply_shifts(c.cache, nullptr));
            std::vector<float> k(raw_k.size());
            KVRT_REQUIRE_OK(kvrt_cache_read(c.cache, 0, kTokens, cells.data(), k.data(), bytes_of(k), nullptr, 0));
            // The exact K at the new positions, rotated in double from the raw
            // K (a shift is a pure rotation; the magnitude came with the store).
            const std::vector<float> want = rotated(p, raw_k, kKvHeads, first);
            const double e = ref::nmse(k, want);
            if (print_table()) std::printf("shift    %-12s P0 %10d nmse %.2g\n", rc.name, first, e);
            INFO(rc.name << " delta " << first << " nmse " << e);
            CHECK(e <= 1e-7);
        }
    }
}
