#include "attention_check.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "api/handles.hpp"
#include "common/random.hpp"
#include "reference/attention.hpp"
#include "reference/half.hpp"
#include "reference/metrics.hpp"

namespace kvrt_test {

namespace {

constexpr uint32_t kGuard = 64;  // sentinel words on each side of the output
constexpr uint32_t kSentinel = 0x7FBADBADu;

std::vector<uint8_t> encode(const std::vector<float>& x, kvrt_type t) {
    std::vector<uint8_t> out(x.size() * kvrt_type_block_bytes(t));
    for (size_t i = 0; i < x.size(); ++i) {
        if (t == KVRT_TYPE_F16) {
            const uint16_t h = kvrt::ref::f32_to_f16(x[i]);
            std::memcpy(&out[2 * i], &h, 2);
        } else {
            std::memcpy(&out[4 * i], &x[i], 4);
        }
    }
    return out;
}

}  // namespace

AttnOutcome run_attention_case(kvrt_context ctx, const AttnCase& c) {
    AttnOutcome outcome;
    kvrt_cache_desc desc = KVRT_CACHE_DESC_INIT;
    desc.n_layers = c.layers;
    desc.n_heads = c.n_heads;
    desc.n_kv_heads = c.n_kv_heads;
    desc.head_dim_k = c.dk;
    desc.head_dim_v = c.dv;
    desc.capacity = c.capacity;
    desc.type_k = c.k_type;
    desc.type_v = c.v_type;
    std::vector<uint32_t> windows(c.layers, c.window);
    desc.layer_windows = windows.data();
    StaticScales scales(c.k_scales, c.v_scales);
    if (!c.k_scales.empty() || !c.v_scales.empty()) desc.next = scales.desc();
    Cache cache;
    KVRT_REQUIRE_OK(kvrt_cache_create(ctx, &desc, cache.out()));

    Rng rng(c.seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const uint32_t ke = c.n_kv_heads * c.dk, ve = c.n_kv_heads * c.dv;
    // Unquantized K/V of every cell, per layer, for the f32 comparison.
    std::vector<std::vector<float>> k_f32(c.layers, std::vector<float>(size_t{c.capacity} * ke)),
        v_f32(c.layers, std::vector<float>(size_t{c.capacity} * ve));

    auto store = [&](const std::vector<int32_t>& pos, int32_t seq) {
        const uint32_t n = static_cast<uint32_t>(pos.size());
        std::vector<float> k(size_t{c.layers} * n * ke), v(size_t{c.layers} * n * ve);
        for (auto& x : k) x = normal(rng);
        for (auto& x : v) x = normal(rng);
        std::vector<int32_t> seqs(n, seq);
        const kvrt_batch b = make_batch(n, pos.data(), seqs.data());
        const kvrt_tensor_ref kr = host_tensor(k.data()), vr = host_tensor(v.data());
        std::vector<uint32_t> cells(n);
        KVRT_REQUIRE_OK(kvrt_cache_store(cache, nullptr, &b, -1, &kr, &vr, cells.data()));
        for (uint32_t l = 0; l < c.layers; ++l)
            for (uint32_t i = 0; i < n; ++i) {
                std::memcpy(&k_f32[l][size_t{cells[i]} * ke], &k[(size_t{l} * n + i) * ke], ke * 4);
                std::memcpy(&v_f32[l][size_t{cells[i]} * ve], &v[(size_t{l} * n + i) * ve], ve * 4);
            }
    };

    // Sequence 0 first; the others share its first `shared_prefix` tokens and
    // add their own, in batches of 37, or with `interleave`, all sequences
    // in turns (continuous batching).
    const auto batch_of = [&](uint32_t from, uint32_t n) {
        std::vector<int32_t> pos;
        for (uint32_t q = from; q < std::min(c.tokens_per_seq, from + n); ++q) pos.push_back(static_cast<int32_t>(q));
        return pos;
    };
    if (c.interleave > 0) {
        if (c.shared_prefix > 0) store(batch_of(0, c.shared_prefix), 0);
        for (uint32_t s = 1; s < c.n_seqs && c.shared_prefix > 0; ++s)
            KVRT_REQUIRE_OK(kvrt_cache_seq_cp(cache, 0, static_cast<int32_t>(s), 0, static_cast<int32_t>(c.shared_prefix)));
        for (uint32_t p = c.shared_prefix; p < c.tokens_per_seq; p += c.interleave)
            for (uint32_t s = 0; s < c.n_seqs; ++s) store(batch_of(p, c.interleave), static_cast<int32_t>(s));
    }
    for (uint32_t s = 0; s < c.n_seqs && c.interleave == 0; ++s) {
        const uint32_t start = s == 0 ? 0 : c.shared_prefix;
        if (s > 0 && c.shared_prefix > 0)
            KVRT_REQUIRE_OK(kvrt_cache_seq_cp(cache, 0, static_cast<int32_t>(s), 0, static_cast<int32_t>(c.shared_prefix)));
        for (uint32_t p = start; p < c.tokens_per_seq; p += 37) store(batch_of(p, 37), static_cast<int32_t>(s));
    }
    if (c.holes > 0)
        for (uint32_t s = 0; s < c.n_seqs; ++s)
            for (uint32_t p = c.shared_prefix + 1; p + c.n_queries < c.tokens_per_seq; p += c.holes)
                KVRT_REQUIRE_OK(kvrt_cache_seq_rm(cache, static_cast<int32_t>(s), static_cast<int32_t>(p),
                                                  static_cast<int32_t>(p + 1)));
    if (c.edit) c.edit(cache, store);

    // Queries: the last n_queries positions of every sequence.
    std::vector<int32_t> qpos, qseq;
    for (uint32_t s = 0; s < c.n_seqs; ++s)
        for (uint32_t i = 0; i < c.n_queries; ++i) {
            qpos.push_back(static_cast<int32_t>(c.tokens_per_seq - c.n_queries + i + c.query_pos_shift));
            qseq.push_back(static_cast<int32_t>(s));
        }
    const uint32_t nq = static_cast<uint32_t>(qpos.size());
    const uint32_t qe = c.n_heads * c.dk, oe = c.n_heads * c.dv;

    // Reference inputs: the cells as the table sees them.
    const auto& table = kvrt::api::cache_of(cache.get())->table();
    std::vector<kvrt::ref::AttnCell> ref_cells(c.capacity);
    for (uint32_t cell = 0; cell < c.capacity; ++cell) {
        ref_cells[cell].pos = table.cell_pos(cell);
        for (uint32_t s = 0; s < c.n_seqs; ++s)
            if (table.cell_has_seq(cell, static_cast<int32_t>(s))) ref_cells[cell].seq_ids.push_back(static_cast<int32_t>(s));
    }
    std::vector<kvrt::ref::AttnQuery> ref_q(nq);
    for (uint32_t i = 0; i < nq; ++i) ref_q[i] = {qpos[i], qseq[i]};
    kvrt::ref::AttnParams rp;
    rp.n_heads = static_cast<int>(c.n_heads);
    rp.n_kv_heads = static_cast<int>(c.n_kv_heads);
    rp.head_dim_k = static_cast<int>(c.dk);
    rp.head_dim_v = static_cast<int>(c.dv);
    rp.scale = c.params.scale != 0.0f ? c.params.scale : 1.0 / std::sqrt(static_cast<double>(c.dk));
    rp.causal = !(c.params.flags & KVRT_ATTENTION_NON_CAUSAL);
    rp.window = static_cast<int32_t>(c.window);
    rp.n_keep = static_cast<int32_t>(c.params.n_keep);
    rp.max_bias = c.params.max_bias;
    rp.softcap = c.params.softcap;
    if (c.params.sinks) rp.sinks.assign(c.params.sinks, c.params.sinks + c.n_heads);

    std::vector<uint32_t> all_cells(c.capacity);
    for (uint32_t i = 0; i < c.capacity; ++i) all_cells[i] = i;
    double err = 0, ref_norm = 0, err32 = 0, ref32_norm = 0;
    const size_t out_bytes = size_t{nq} * oe * kvrt_type_block_bytes(c.out_type);
    kvrt_buffer out_buf = nullptr;
    kvrt_buffer_desc bd = KVRT_BUFFER_DESC_INIT;
    bd.size = out_bytes + 2 * 4 * kGuard;
    KVRT_REQUIRE_OK(kvrt_buffer_create(ctx, &bd, &out_buf));
    for (uint32_t l = 0; l < c.layers; ++l) {
        std::vector<float> q(size_t{nq} * qe);
        for (auto& x : q) x = normal(rng);
        if (c.q_type == KVRT_TYPE_F16)
            for (auto& x : q) x = kvrt::ref::round_to_f16(x);
        const auto qbytes = encode(q, c.q_type);
        const kvrt_tensor_ref qr = host_tensor(qbytes.data(), c.q_type);
        std::vector<uint32_t> guard(bd.size / 4, kSentinel);
        KVRT_REQUIRE_OK(kvrt_buffer_upload(out_buf, 0, guard.data(), bd.size));
        const kvrt_output_ref orf = buffer_output(out_buf, 4 * kGuard, c.out_type);
        const kvrt_batch queries = make_batch(nq, qpos.data(), qseq.data());
        KVRT_REQUIRE_OK(kvrt_cache_attention(cache, nullptr, static_cast<int32_t>(l), &queries, &qr, &orf, &c.params));
        std::vector<uint32_t> back(bd.size / 4);
        KVRT_REQUIRE_OK(kvrt_buffer_download(out_buf, 0, back.data(), bd.size));
        for (uint32_t i = 0; i < kGuard; ++i)
            outcome.guard_ok = outcome.guard_ok && back[i] == kSentinel && back[back.size() - 1 - i] == kSentinel;
        std::vector<float> got(size_t{nq} * oe);
        if (c.out_type == KVRT_TYPE_F16) {
            const auto* h = reinterpret_cast<const uint16_t*>(back.data() + kGuard);
            for (size_t i = 0; i < got.size(); ++i) got[i] = kvrt::ref::f16_to_f32(h[i]);
        } else {
            std::memcpy(got.data(), back.data() + kGuard, got.size() * 4);
        }

        // The cache's own K/V, dequantized, are the reference's inputs.
        std::vector<float> kd(size_t{c.capacity} * ke), vd(size_t{c.capacity} * ve);
        KVRT_REQUIRE_OK(kvrt_cache_read(cache, static_cast<int32_t>(l), c.capacity, all_cells.data(), kd.data(),
                                        bytes_of(kd), vd.data(), bytes_of(vd)));
        const auto expect = kvrt::ref::attention(rp, q.data(), ref_q, kd.data(), vd.data(), ref_cells);
        const auto expect32 = kvrt::ref::attention(rp, q.data(), ref_q, k_f32[l].data(), v_f32[l].data(), ref_cells);
        for (size_t i = 0; i < got.size(); ++i) {
            const double d = got[i] - expect[i];
            err += d * d;
            ref_norm += expect[i] * expect[i];
            const double d32 = got[i] - expect32[i];
            err32 += d32 * d32;
            ref32_norm += expect32[i] * expect32[i];
            outcome.max_abs = std::max(outcome.max_abs, std::abs(d));
        }
        // Each (query, head) row on its own.
        const bool debug = std::getenv("KVRT_TEST_DEBUG") != nullptr;  // prints every row's error
        for (uint32_t qi = 0; qi < nq; ++qi)
            for (uint32_t h = 0; h < c.n_heads; ++h) {
                const size_t at = size_t{qi} * oe + size_t{h} * c.dv;
                double e = 0, n = 0;
                for (uint32_t j = 0; j < c.dv; ++j) {
                    const double d = got[at + j] - expect[at + j];
                    e += d * d;
                    n += expect[at + j] * expect[at + j];
                }
                // NaN (a kernel that wrote one) is the worst of all.
                const double row = std::isnan(e) ? HUGE_VAL : n > 0 ? e / n : e;
                outcome.nmse = std::max(outcome.nmse, row);
                if (debug) std::printf("layer %u query %u pos %d head %u nmse %g\n", l, qi, qpos[qi], h, row);
            }
        outcome.values += got.size();
    }
    outcome.nmse_all = ref_norm > 0 ? err / ref_norm : err;
    outcome.nmse_vs_f32 = ref32_norm > 0 ? err32 / ref32_norm : err32;
    kvrt_buffer_destroy(out_buf);
    return outcome;
}

}  // namespace kvrt_test
