// Double-precision CPU reference for attention over the cell cache
// (SPEC.md section 4).
//
// For query token t, query head h (KV head g = h / (n_heads / n_kv_heads)) and
// each cell c visible to t:
//
//   s   = scale * dot(Q[t][h], K[c][g])              (double)
//   s   = softcap * tanh(s / softcap)                 if softcap != 0
//   s  += slope(h) * -|q.pos - cell.pos|              if max_bias != 0 (ALiBi)
//   out = sum_c exp(s_c - M) V[c][g] / (sum_c exp(s_c - M) + exp(sink_h - M))
//
// with M the largest of the s_c (and of sink_h), and the sink term only when
// learned sinks are given. This is the order ggml's flash_attn_ext uses (scale,
// then soft-cap, then the mask with its ALiBi term), and the sink is a raw
// logit: not scaled, not capped, no ALiBi.
//
// Visibility of cell c to query t (cell_visible):
//   - the cell is not empty (pos >= 0) and t's sequence is in the cell's set;
//   - causal (on by default): cell.pos <= q.pos;
//   - window W > 0: q.pos - cell.pos < W, except that cells with
//     pos < n_keep (StreamingLLM attention sinks) pass the window test; they
//     still need the sequence and causal tests;
//   - the cell is not hidden from the query (AttnQuery::hidden).
//
// A query (head) that sees no cell gets an all-zero output, as in ggml (which
// uses 1/S = 0 when the softmax sum S is 0). With a learned sink it is zero
// too: the numerator is an empty sum.
//
// ALiBi: ggml's slopes (ggml_soft_max / flash_attn_ext), with n = n_heads (the
// query heads) and n_log2 = 2^floor(log2(n)):
//   m0 = 2^(-max_bias / n_log2), m1 = 2^(-(max_bias / 2) / n_log2),
//   slope(h) = m0^(h+1) for h < n_log2, else m1^(2 (h - n_log2) + 1).
// The bias is slope * mask, where llama.cpp fills the KQ mask of an ALiBi model
// with -|q.pos - cell.pos| (llama-kv-cache.cpp, set_input_kq_mask). With the
// causal test that is slope * (cell.pos - q.pos); the absolute value only
// matters for non-causal attention. This reference computes in double, ggml in
// float.
#pragma once

#include <cstdint>
#include <vector>

namespace kvrt::ref {

// Metadata of one cache cell, as attention sees it.
struct AttnCell {
    int32_t pos = -1;              // position; -1 (any negative) = empty
    std::vector<int32_t> seq_ids;  // sequences that use the cell
};

// Position and sequence of one query token.
struct AttnQuery {
    int32_t pos = 0;
    int32_t seq_id = 0;
    // Optional: per cell (indexed like `cells`), nonzero when the query must
    // not see the cell whatever the rules below (the other branches of a
    // token tree). Null: no such cells.
    const std::vector<uint8_t>* hidden = nullptr;
};

// Geometry and options of one attention call.
struct AttnParams {
    int n_heads = 1;          // query heads
    int n_kv_heads = 1;       // KV heads; must divide n_heads
    int head_dim_k = 0;       // dk, length of Q and K head vectors
    int head_dim_v = 0;       // dv, length of V and output head vectors
    double scale = 1.0;       // multiplies Q.K (usually 1/sqrt(dk))
    bool causal = true;       // require cell.pos <= q.pos
    int32_t window = 0;       // sliding window W; 0 = none
    int32_t n_keep = 0;       // cells with pos < n_keep ignore the window
    double max_bias = 0.0;    // ALiBi max bias; 0 = no ALiBi
    double softcap = 0.0;     // logit soft-cap; 0 = none
    std::vector<float> sinks; // learned sink logit per query head; empty = none
};

// KV head read by query head h: h / (n_heads / n_kv_heads).
int kv_head_of(int h, int n_heads, int n_kv_heads);

// ggml's ALiBi slope of query head h (see above); 1 when max_bias <= 0.
double alibi_slope(int h, int n_heads, double max_bias);

// Whether `cell` is visible to `query` under the masks in `p`.
bool cell_visible(const AttnParams& p, const AttnCell& cell, const AttnQuery& query);

// Softmax weights of every cell for one query head: w[c] is 0 for a cell the
// query cannot see; with learned sinks the weights sum to less than 1 (the sink
// takes the rest). `q_head` points at dk floats, `k` at [n_cells][n_kv_heads][dk].
// All zero when no cell is visible.
std::vector<double> attention_weights(const AttnParams& p, const float* q_head,
                                      const AttnQuery& query, int h, const float* k,
                                      const std::vector<AttnCell>& cells);

// Full attention. q: [queries.size()][n_heads][dk], k: [cells.size()][n_kv_heads][dk],
// v: [cells.size()][n_kv_heads][dv], all dense float (already dequantized).
// Returns [queries.size()][n_heads][dv] in double. Throws std::invalid_argument
// for an inconsistent geometry (non-positive sizes, n_heads not a multiple of
// n_kv_heads, sinks of the wrong length, negative window or n_keep).
std::vector<double> attention(const AttnParams& p, const float* q,
                              const std::vector<AttnQuery>& queries, const float* k,
                              const float* v, const std::vector<AttnCell>& cells);

}  // namespace kvrt::ref
