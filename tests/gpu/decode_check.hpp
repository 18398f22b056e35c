// The decode tests' own account of a cache (Mirror) and the check of kvrt's
// attention outputs against the double-precision reference of
// tests/reference/attention.hpp (AttentionCheck), both independent of kvrt.
//
// The mirror replays, on the CPU, the cell metadata the tests asked kvrt for:
// which cell holds which position of which sequences, plus the unrotated key
// and the value the model computed for every cell and layer. The check
// recomputes each checked attention call against two sets of K/V:
//
//   (a) the cache's own contents, read back dequantized with kvrt_cache_read:
//       the kernel's arithmetic alone, held to SPEC 8 (NMSE <= 1e-6);
//   (b) K and V as the model computed them in f32, each key rotated by the
//       RoPE reference (tests/reference/rope.hpp) straight to its cell's
//       current position: what the cache costs in total (storage type, and
//       the rounding of every RoPE shift applied since).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "decode_model.hpp"
#include "kvrt/kvrt.h"
#include "reference/attention.hpp"
#include "reference/rope.hpp"

namespace kvrt_test::decode {

// The mirror's copy of one cache cell.
struct MirrorCell {
    int32_t pos = -1;            // -1 = free
    uint64_t seqs = 0;           // bit s: sequence s uses the cell
    std::vector<float> k_raw;    // [n_layers][kv_dim], before RoPE
    std::vector<float> v;        // [n_layers][kv_dim]
};

// Cell metadata mirrored from the calls a test makes; the semantics are
// those documented in kvrt.h for the same operations. Sequence ids < 64.
class Mirror {
public:
    Mirror(const ModelConfig& cfg, uint32_t capacity);

    // kvrt_cache_place of one token of sequence `seq` into `cell`.
    void place(uint32_t cell, int32_t pos, int seq);
    // Records the K (unrotated) and V rows the model computed for `cell`.
    void set_layer(uint32_t cell, int layer, const float* k_raw, const float* v);
    // kvrt_cache_seq_rm / seq_cp / seq_add; p1 < 0 means no end.
    void seq_rm(int seq, int32_t p0, int32_t p1);
    void seq_cp(int src, int dst);
    void seq_add(int seq, int32_t p0, int32_t p1, int32_t delta);

    // -1 when the sequence has no cell.
    int32_t pos_min(int seq) const;
    int32_t pos_max(int seq) const;
    uint32_t used() const;
    // The cells in use, in cell order.
    std::vector<uint32_t> used_cells() const;
    const MirrorCell& cell(uint32_t c) const { return cells_[c]; }
    // The metadata of `cells` as the attention reference takes it.
    std::vector<kvrt::ref::AttnCell> attn_cells(const std::vector<uint32_t>& cells) const;

private:
    int kv_dim_;
    std::vector<MirrorCell> cells_;
};

// The model's attention as the reference computes it: causal, scale
// 1/sqrt(head_dim).
kvrt::ref::AttnParams attention_params(const ModelConfig& cfg);

// The worst figures over the compared calls; NMSE as in
// tests/reference/metrics.hpp, over all outputs of one call.
struct ErrorFigures {
    double max_abs = 0;
    double nmse = 0;
    std::string worst;  // where the worst NMSE was seen
};

// Folds the errors of `got` against `want` (one call) into *figures.
void fold(const float* got, const double* want, size_t n, const std::string& where, ErrorFigures* figures);

// One kvrt_cache_attention call as the check sees it.
struct AttentionCall {
    int layer = 0;
    int n = 0;
    const float* q = nullptr;          // [n][q_dim], as given to kvrt
    const int32_t* positions = nullptr;
    const int32_t* seq_ids = nullptr;  // one sequence per query
    const float* out = nullptr;        // [n][q_dim], kvrt's output
};

class AttentionCheck {
public:
    AttentionCheck(const ModelConfig& cfg, kvrt_type kv_type);

    // Compares `call` with both references. `cells` are the mirror's cells
    // the call sees and `cache_k` / `cache_v` their K and V in call.layer as
    // kvrt_cache_read returned them ([cells.size()][kv_dim]); `where` names
    // the call in the figures.
    void check(const AttentionCall& call, const Mirror& mirror, const std::vector<uint32_t>& cells,
               const float* cache_k, const float* cache_v, const std::string& where);

    // CHECKs the worst figures against the limits; REQUIREs that calls were
    // compared at all.
    void verify() const;

    uint64_t calls() const { return calls_; }
    const ErrorFigures& vs_cache() const { return vs_cache_; }
    const ErrorFigures& vs_fresh() const { return vs_fresh_; }
    // (a)'s limit: SPEC 8's attention bound, the same for every type.
    static double cache_limit() { return 1e-6; }
    // (b)'s limit for the cache's K/V type (see decode_check.cpp for the
    // measurements behind each).
    double fresh_limit() const { return fresh_limit_; }

private:
    ModelConfig cfg_;
    kvrt::ref::AttnParams params_;
    kvrt::ref::RopeParams rope_;
    double fresh_limit_;
    uint64_t calls_ = 0;
    ErrorFigures vs_cache_, vs_fresh_;
};

}  // namespace kvrt_test::decode
