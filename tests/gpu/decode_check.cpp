// The decode tests' cell mirror and attention check; see decode_check.hpp.
#include "decode_check.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "reference/metrics.hpp"

namespace kvrt_test::decode {

namespace ref = kvrt::ref;

namespace {

bool in_range(int32_t pos, int32_t p0, int32_t p1) { return pos >= p0 && (p1 < 0 || pos < p1); }

uint64_t bit(int seq) { return uint64_t{1} << seq; }

// Limits of check (b): the NMSE of kvrt's attention outputs against K/V the
// model computed in f32, each key rotated in double straight to its cell's
// current position. The error comes from the storage type and, for keys that
// moved, from the rounding of each in-place RoPE shift (a quantized key is
// quantized again after every rotation). Worst values measured on lavapipe
// with the same heads and a wider model (d_model 512, SwiGLU 1024), over both
// ways of making room, 1, 2 and 4 sequences, capacities 64 and 256 (4 x
// capacity steps, checked every 16 steps), and the limits set above them:
//   f32   2.8e-13 (rounding only)   limit 1e-10
//   f16   1.2e-7                    limit 1e-6
//   q8_0  8.0e-5                    limit 1e-3
//   q4_0  2.5e-2                    limit 1e-1
// 4-bit codes alone cost about 1e-2, so for q4_0 this is a coarse check: keys
// rotated 3 positions off measured 0.18 (f16) and 0.25 (q4_0). Check (a) is
// the precise one for every type.
// The static-scale types (static layout only; no shifts, one scale per layer
// calibrated on the prompt, test_decode_static.cpp) over capacities 64 and
// 256, 1, 2 and 4 sequences, reserves 2, 1.5 and 1:
//   u8_static   2.4e-4 (a step of 1.25 max|x| / 127: rounding alone is
//               about 1e-4 of unit-scale K/V)           limit 1e-3
//   u16_static  9.6e-9 (steps 256 times finer)          limit 1e-6
// f16 and f32 in the static layout measured 7.0e-8 and 2.1e-13, inside
// their limits above. The window checks compare the stored bytes exactly.
// The model of these tests (decode_model.hpp) stays within the same figures
// in the runs of test_decode_*.cpp: f16 9.8e-8, q8_0 6.3e-5, q4_0 1.8e-2,
// u8_static 1.6e-4, u16_static 6.9e-9, f32 1.4e-13.
double fresh_nmse_limit(kvrt_type type) {
    switch (type) {
        case KVRT_TYPE_F32: return 1e-10;
        case KVRT_TYPE_Q8_0: return 1e-3;
        case KVRT_TYPE_Q4_0: return 1e-1;
        case KVRT_TYPE_U8_STATIC: return 1e-3;
        case KVRT_TYPE_U16_STATIC: return 1e-6;
        default: return 1e-6;  // F16
    }
}

}  // namespace

kvrt::ref::AttnParams attention_params(const ModelConfig& cfg) {
    ref::AttnParams p;
    p.n_heads = cfg.n_heads;
    p.n_kv_heads = cfg.n_kv_heads;
    p.head_dim_k = p.head_dim_v = cfg.head_dim;
    p.scale = 1.0 / std::sqrt(static_cast<double>(cfg.head_dim));
    return p;
}

void fold(const float* got, const double* want, size_t n, const std::string& where, ErrorFigures* figures) {
    const double nmse = ref::nmse(got, want, n);
    figures->max_abs = std::max(figures->max_abs, ref::max_abs_diff(got, want, n));
    // A NaN is the worst of all, and stays.
    const bool worse = figures->worst.empty() || std::isnan(nmse) || nmse > figures->nmse;
    if (worse && !std::isnan(figures->nmse)) {
        figures->nmse = nmse;
        figures->worst = where;
    }
}

// ---- Mirror -------------------------------------------------------------------

Mirror::Mirror(const ModelConfig& cfg, uint32_t capacity) : kv_dim_(cfg.kv_dim()), cells_(capacity) {
    for (MirrorCell& c : cells_) {
        c.k_raw.assign(static_cast<size_t>(cfg.n_layers) * static_cast<size_t>(kv_dim_), 0.0f);
        c.v.assign(c.k_raw.size(), 0.0f);
    }
}

void Mirror::place(uint32_t cell, int32_t pos, int seq) {
    cells_[cell].pos = pos;
    cells_[cell].seqs = bit(seq);
}

void Mirror::set_layer(uint32_t cell, int layer, const float* k_raw, const float* v) {
    const size_t off = static_cast<size_t>(layer) * static_cast<size_t>(kv_dim_);
    std::copy_n(k_raw, kv_dim_, cells_[cell].k_raw.data() + off);
    std::copy_n(v, kv_dim_, cells_[cell].v.data() + off);
}

void Mirror::seq_rm(int seq, int32_t p0, int32_t p1) {
    for (MirrorCell& c : cells_) {
        if (c.pos < 0 || !(c.seqs & bit(seq)) || !in_range(c.pos, p0, p1)) continue;
        c.seqs &= ~bit(seq);
        if (!c.seqs) c.pos = -1;
    }
}

void Mirror::seq_cp(int src, int dst) {
    for (MirrorCell& c : cells_)
        if (c.pos >= 0 && (c.seqs & bit(src))) c.seqs |= bit(dst);
}

void Mirror::seq_add(int seq, int32_t p0, int32_t p1, int32_t delta) {
    for (MirrorCell& c : cells_) {
        if (c.pos < 0 || !(c.seqs & bit(seq)) || !in_range(c.pos, p0, p1)) continue;
        c.pos += delta;  // for every sequence of the cell, as kvrt (and llama.cpp) do
        if (c.pos < 0) {
            c.pos = -1;
            c.seqs = 0;
        }
    }
}

int32_t Mirror::pos_min(int seq) const {
    int32_t p = -1;
    for (const MirrorCell& c : cells_)
        if (c.pos >= 0 && (c.seqs & bit(seq)) && (p < 0 || c.pos < p)) p = c.pos;
    return p;
}

int32_t Mirror::pos_max(int seq) const {
    int32_t p = -1;
    for (const MirrorCell& c : cells_)
        if (c.pos >= 0 && (c.seqs & bit(seq))) p = std::max(p, c.pos);
    return p;
}

uint32_t Mirror::used() const {
    return static_cast<uint32_t>(std::count_if(cells_.begin(), cells_.end(), [](const MirrorCell& c) { return c.pos >= 0; }));
}

std::vector<uint32_t> Mirror::used_cells() const {
    std::vector<uint32_t> out;
    for (uint32_t c = 0; c < cells_.size(); ++c)
        if (cells_[c].pos >= 0) out.push_back(c);
    return out;
}

std::vector<ref::AttnCell> Mirror::attn_cells(const std::vector<uint32_t>& cells) const {
    std::vector<ref::AttnCell> out(cells.size());
    for (size_t i = 0; i < cells.size(); ++i) {
        const MirrorCell& c = cells_[cells[i]];
        out[i].pos = c.pos;
        for (int s = 0; s < 64; ++s)
            if (c.seqs & bit(s)) out[i].seq_ids.push_back(s);
    }
    return out;
}

// ---- AttentionCheck -------------------------------------------------------------

AttentionCheck::AttentionCheck(const ModelConfig& cfg, kvrt_type kv_type)
    : cfg_(cfg), params_(attention_params(cfg)), fresh_limit_(fresh_nmse_limit(kv_type)) {
    rope_.n_rot = cfg.head_dim;
    rope_.freq_base = cfg.rope_base;
}

void AttentionCheck::check(const AttentionCall& call, const Mirror& mirror, const std::vector<uint32_t>& cells,
                           const float* cache_k, const float* cache_v, const std::string& where) {
    const size_t kvd = static_cast<size_t>(cfg_.kv_dim()), dh = static_cast<size_t>(cfg_.head_dim);
    const size_t layer_off = static_cast<size_t>(call.layer) * kvd;
    const size_t n_out = static_cast<size_t>(call.n) * static_cast<size_t>(cfg_.q_dim());
    const std::vector<ref::AttnCell> meta = mirror.attn_cells(cells);
    std::vector<ref::AttnQuery> queries(static_cast<size_t>(call.n));
    for (size_t t = 0; t < queries.size(); ++t) queries[t] = {call.positions[t], call.seq_ids[t]};

    // (a) the cache's own K/V.
    fold(call.out, ref::attention(params_, call.q, queries, cache_k, cache_v, meta).data(), n_out, where, &vs_cache_);

    // (b) K/V as computed in f32, keys rotated by the reference to the current position.
    std::vector<float> k_fresh(cells.size() * kvd), v_fresh(cells.size() * kvd);
    for (size_t c = 0; c < cells.size(); ++c) {
        const MirrorCell& cell = mirror.cell(cells[c]);
        std::copy_n(cell.v.data() + layer_off, kvd, v_fresh.data() + c * kvd);
        for (size_t h = 0; h < static_cast<size_t>(cfg_.n_kv_heads); ++h) {
            const float* raw = cell.k_raw.data() + layer_off + h * dh;
            const std::vector<double> rotated = ref::rope_rotate(rope_, std::vector<float>(raw, raw + dh), cell.pos);
            std::transform(rotated.begin(), rotated.end(), k_fresh.data() + c * kvd + h * dh,
                           [](double x) { return static_cast<float>(x); });
        }
    }
    fold(call.out, ref::attention(params_, call.q, queries, k_fresh.data(), v_fresh.data(), meta).data(), n_out, where,
         &vs_fresh_);
    ++calls_;
}

void AttentionCheck::verify() const {
    REQUIRE(calls_ > 0);
    INFO(calls_ << " attention calls compared");
    {
        INFO("(a) against the cache's own K/V: worst NMSE " << vs_cache_.nmse << " at " << vs_cache_.worst
                                                            << ", max abs " << vs_cache_.max_abs);
        CHECK(vs_cache_.nmse <= cache_limit());
    }
    INFO("(b) against K/V in f32, RoPE by the reference: worst NMSE " << vs_fresh_.nmse << " at " << vs_fresh_.worst
                                                                      << ", max abs " << vs_fresh_.max_abs);
    CHECK(vs_fresh_.nmse <= fresh_limit_);
}

}  // namespace kvrt_test::decode
