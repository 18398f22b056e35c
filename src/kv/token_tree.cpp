#include "kv/token_tree.hpp"

#include <new>

namespace kvrt::kv {

Result check_tree(uint32_t n, const int32_t* positions, const uint32_t* seq_counts, const int32_t* seq_ids,
                  const int32_t* parents) {
    if (n > kMaxTreeTokens)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "a token tree has %u tokens; at most %u are allowed", n,
                    kMaxTreeTokens);
    if (n == 0) return KVRT_SUCCESS;
    if (!parents) return fail(KVRT_ERROR_INVALID_ARGUMENT, "the tree's parents is NULL");
    if (!positions || !seq_ids) return fail(KVRT_ERROR_INVALID_ARGUMENT, "the tree's positions or seq_ids is NULL");
    for (uint32_t i = 0; i < n; ++i) {
        if (seq_counts && seq_counts[i] != 1)
            return fail(KVRT_ERROR_INVALID_ARGUMENT,
                        "tree token %u lists %u sequences; each token of a tree belongs to exactly one", i,
                        seq_counts[i]);
        const int32_t p = parents[i];
        if (p < 0) {
            if (p != -1) return fail(KVRT_ERROR_INVALID_ARGUMENT, "tree token %u has parent %d (a root is -1)", i, p);
            continue;
        }
        if (static_cast<uint32_t>(p) >= i)
            return fail(KVRT_ERROR_INVALID_ARGUMENT,
                        "tree token %u has parent %d; a parent comes earlier in the batch", i, p);
        if (seq_ids[p] != seq_ids[i])
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "tree token %u is in sequence %d, its parent %d in %d", i,
                        seq_ids[i], p, seq_ids[p]);
        if (positions[p] >= positions[i])
            return fail(KVRT_ERROR_INVALID_ARGUMENT,
                        "tree token %u has position %d, not above its parent %d's position %d", i, positions[i], p,
                        positions[p]);
    }
    return KVRT_SUCCESS;
}

Result tree_ancestors(uint32_t n, const int32_t* parents, std::vector<uint32_t>* out) {
    const uint32_t w = tree_words(n);
    try {
        out->assign(size_t{n} * w, 0u);
    } catch (const std::bad_alloc&) {
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "out of host memory for the ancestors of %u tree tokens", n);
    }
    for (uint32_t i = 0; i < n; ++i) {
        uint32_t* row = out->data() + size_t{i} * w;
        // Parents come first: the parent's row is complete.
        if (parents[i] >= 0) {
            const uint32_t* up = out->data() + size_t(parents[i]) * w;
            for (uint32_t k = 0; k < w; ++k) row[k] = up[k];
        }
        row[i / 32] |= 1u << (i % 32);
    }
    return KVRT_SUCCESS;
}

Result tree_kept(uint32_t n, const int32_t* parents, uint32_t n_leaves, const int32_t* leaves,
                 std::vector<uint8_t>* keep) {
    if (n_leaves > 0 && !leaves) return fail(KVRT_ERROR_INVALID_ARGUMENT, "leaves is NULL");
    for (uint32_t i = 0; i < n_leaves; ++i)
        if (leaves[i] < 0 || static_cast<uint32_t>(leaves[i]) >= n)
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "leaf %u is token %d; the tree has %u tokens", i, leaves[i], n);
    try {
        keep->assign(n, 0);
    } catch (const std::bad_alloc&) {
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "out of host memory for a tree of %u tokens", n);
    }
    for (uint32_t i = 0; i < n_leaves; ++i)
        for (int32_t t = leaves[i]; t >= 0 && !(*keep)[size_t(t)]; t = parents[t]) (*keep)[size_t(t)] = 1;
    return KVRT_SUCCESS;
}

}  // namespace kvrt::kv
