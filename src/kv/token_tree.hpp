// Token trees: the draft tokens of speculative decoding verified in one
// batch (kvrt_batch_tree). Token i of a batch has a parent parents[i] < i in
// the same batch, or -1; it belongs to one sequence, its parent's, at a
// position above its parent's. Pure CPU code: the rules, each token's set of
// ancestors (what it may see of the tree), and what accepting branches keeps.
#pragma once

#include <cstdint>
#include <vector>

#include "core/result.hpp"

namespace kvrt::kv {

// The most tokens of one tree batch (KVRT_MAX_TREE_TOKENS).
constexpr uint32_t kMaxTreeTokens = 1024;

// Checks the rules above for a batch of n tokens with one sequence each
// (seq_ids[i]); `seq_counts` is the batch's seq_id_counts (NULL: one each).
// KVRT_ERROR_INVALID_ARGUMENT naming the first broken rule.
Result check_tree(uint32_t n, const int32_t* positions, const uint32_t* seq_counts, const int32_t* seq_ids,
                  const int32_t* parents);

// Words of one token's ancestor bits: ceil(n / 32).
inline uint32_t tree_words(uint32_t n) { return (n + 31) / 32; }

// For each token i, tree_words(n) words in which bit j (bit j % 32 of word
// j / 32) says that token j is i or one of its ancestors. `parents` must
// pass check_tree. KVRT_ERROR_OUT_OF_HOST_MEMORY possible.
Result tree_ancestors(uint32_t n, const int32_t* parents, std::vector<uint32_t>* out);

// keep[i] = 1 when token i is one of `leaves` or an ancestor of one. A leaf
// out of [0, n) is KVRT_ERROR_INVALID_ARGUMENT. KVRT_ERROR_OUT_OF_HOST_MEMORY
// possible.
Result tree_kept(uint32_t n, const int32_t* parents, uint32_t n_leaves, const int32_t* leaves,
                 std::vector<uint8_t>* keep);

}  // namespace kvrt::kv
