// Token trees (kvrt_batch_tree): the kernels' view of a tree among the
// queries of an attention, and the end of a tree's verification.
#include <algorithm>
#include <new>
#include <vector>

#include "cache/cache.hpp"
#include "kv/token_tree.hpp"

namespace kvrt::cache {

namespace {

// Cell i holds token i: in range, in use, at its position, in its sequence.
Result check_tree_cells(const kv::CellTable& t, uint32_t n, const int32_t* positions, const int32_t* seq_ids,
                        const uint32_t* cells) {
    if (n > 0 && !cells) return fail(KVRT_ERROR_INVALID_ARGUMENT, "the tree's cells is NULL");
    for (uint32_t i = 0; i < n; ++i) {
        const uint32_t c = cells[i];
        if (c >= t.capacity() || t.cell_is_empty(c))
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "tree token %u's cell %u is out of range or empty", i, c);
        if (t.cell_pos(c) != positions[i] || !t.cell_has_seq(c, seq_ids[i]))
            return fail(KVRT_ERROR_INVALID_ARGUMENT,
                        "tree token %u's cell %u holds position %d, not position %d of sequence %d", i, c,
                        t.cell_pos(c), positions[i], seq_ids[i]);
    }
    try {
        std::vector<uint32_t> sorted(cells, cells + n);
        std::sort(sorted.begin(), sorted.end());
        const auto dup = std::adjacent_find(sorted.begin(), sorted.end());
        if (dup != sorted.end()) return fail(KVRT_ERROR_INVALID_ARGUMENT, "two tree tokens share cell %u", *dup);
    } catch (const std::bad_alloc&) {
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "out of host memory for a tree of %u tokens", n);
    }
    return KVRT_SUCCESS;
}

}  // namespace

Result CellStore::tree_inputs(uint32_t n, const int32_t* positions, const int32_t* seq_ids, const Tree& tree,
                          ops::AttnTree* out) const {
    KVRT_TRY(check_tree_cells(table_, n, positions, seq_ids, tree.cells));
    out->words = kv::tree_words(n);
    if (n == 0) return KVRT_SUCCESS;
    const auto [lo, hi] = std::minmax_element(tree.cells, tree.cells + n);
    out->first_cell = *lo;
    try {
        out->map.assign(size_t{*hi} - *lo + 1, ops::AttnTree::kNoNode);
    } catch (const std::bad_alloc&) {
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "out of host memory for a tree over %u cells", *hi - *lo + 1);
    }
    for (uint32_t i = 0; i < n; ++i) out->map[tree.cells[i] - *lo] = i;
    return kv::tree_ancestors(n, tree.parents, &out->ancestors);
}

Result Cache::tree_accept(uint32_t n, const int32_t* positions, const int32_t* seq_ids, const Tree& tree,
                          uint32_t n_leaves, const int32_t* leaves) {
    KVRT_TRY(layout_->require_trees("kvrt_cache_tree_accept"));
    KVRT_TRY(check_tree_cells(table_, n, positions, seq_ids, tree.cells));
    std::vector<uint8_t> keep;
    KVRT_TRY(kv::tree_kept(n, tree.parents, n_leaves, leaves, &keep));
    return layout_->tree_accept(n, positions, seq_ids, tree.cells, keep);
}

}  // namespace kvrt::cache
