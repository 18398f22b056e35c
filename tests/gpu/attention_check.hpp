// A harness for attention tests: a cache filled with random tokens of several
// sequences, the kernels' output for a batch of queries, and the
// double-precision reference computed from the cache's own (dequantized) K/V.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gpu_test.hpp"

namespace kvrt_test {

struct AttnCase {
    uint32_t layers = 1;
    uint32_t n_heads = 4, n_kv_heads = 2, dk = 64, dv = 64;
    uint32_t capacity = 256;
    kvrt_type k_type = KVRT_TYPE_F16, v_type = KVRT_TYPE_F16;
    kvrt_type q_type = KVRT_TYPE_F32, out_type = KVRT_TYPE_F32;
    uint32_t window = 0;            // of every layer
    uint32_t n_seqs = 1;            // sequences, each with `tokens_per_seq` tokens
    uint32_t tokens_per_seq = 100;
    uint32_t shared_prefix = 0;     // tokens of sequence 0 that the others share (seq_cp)
    uint32_t holes = 0;             // every holes-th token removed again (fragmentation)
    uint32_t interleave = 0;        // > 0: the sequences' own tokens stored in turns of this many
    uint32_t n_queries = 1;         // per sequence: the last positions of each
    uint32_t query_pos_shift = 0;   // added to the queries' positions
    kvrt_attention_params params = KVRT_ATTENTION_PARAMS_INIT;
    uint32_t seed = 1;
    // Static-scale K / V types: their scales (1 entry or one per layer),
    // chained as a kvrt_static_scales_desc when either is set.
    std::vector<QuantScale> k_scales, v_scales;
    // Run after the cache is filled (and its holes made), before the
    // queries: sequence operations, compaction, and more tokens through
    // `store` (positions, sequence), which the f32 comparison follows.
    using Store = std::function<void(const std::vector<int32_t>& positions, int32_t seq)>;
    std::function<void(kvrt_cache cache, const Store& store)> edit;
};

struct AttnOutcome {
    // Against the reference on the same dequantized K/V: the worst (query,
    // head) row's NMSE, so that an error confined to one row or one cell is
    // not diluted by the rest (a row the reference leaves all zero counts its
    // squared error).
    double nmse = 0;
    double nmse_all = 0;      // the same over all rows together
    double nmse_vs_f32 = 0;   // against the reference on the unquantized f32 inputs
    double max_abs = 0;
    uint64_t values = 0;
    bool guard_ok = true;     // sentinel words around the output untouched
};

// Builds the cache on `ctx`, runs attention for every layer, compares.
AttnOutcome run_attention_case(kvrt_context ctx, const AttnCase& c);

}  // namespace kvrt_test
