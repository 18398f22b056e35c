// The paged layout's window group.
//
// The group stays a cell cache; the paged cache's cells are its block slots.
// Every paged mutation ends in per-sequence edits of the cache's table (cells
// a sequence leaves, cells it joins or that move), and the group follows
// them: a dropped cell's group cell loses the sequence; a cell that a block
// copy gave the sequence gets a copy of its source's group rows in a group
// cell of its own; a cell that moves moves its group cell. New tokens are
// placed in the group as in the cell layout, after the windows are checked.
#include <algorithm>
#include <climits>
#include <vector>

#include "cache/cache.hpp"
#include "cache/paged_layout.hpp"

namespace kvrt::cache {

Result PagedLayout::window_place(const std::vector<Run>& runs, uint32_t n, kv::Placement* out) {
    std::vector<kv::Token> tokens;
    try {
        tokens.resize(n);
    } catch (const std::bad_alloc&) {
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "out of host memory for a batch of %u tokens", n);
    }
    for (const Run& r : runs)
        for (size_t j = 0; j < r.pos.size(); ++j) tokens[r.token_index[j]] = {r.pos[j], &r.seq, 1};
    KVRT_TRY(c_.group_->plan(tokens.data(), n, false, out));
    return c_.group_->table().apply(*out);
}

Result PagedLayout::window_edits(int32_t seq, const kv::CellSet* set, size_t n_set,
                                 const std::vector<kv::BlockCopy>& copies, WindowEdits* out) const {
    if (!c_.group_) return KVRT_SUCCESS;
    const kv::CellTable& g = c_.group_->table();
    const uint32_t B = c_.geo_.block_size;
    try {
        for (size_t i = 0; i < n_set; ++i) {
            const kv::CellSet& e = set[i];
            uint32_t src = e.cell;
            for (const kv::BlockCopy& c : copies)
                if (c.dst == e.cell / B) {
                    src = c.src * B + e.cell % B;
                    break;
                }
            // A new token, or a cell the sequence joins as it is: nothing here.
            if (src == e.cell && !c_.table_.cell_has_seq(e.cell, seq)) continue;
            const int32_t w = c_.group_->group_cell(src);
            if (w < 0 || !g.cell_has_seq(static_cast<uint32_t>(w), seq)) continue;
            const uint32_t wc = static_cast<uint32_t>(w);
            const int32_t delta = static_cast<int32_t>(int64_t{g.cell_delta(wc)} + e.pos - g.cell_pos(wc));
            if (src == e.cell) {
                if (g.cell_pos(wc) != e.pos) out->set.push_back({wc, e.pos, delta});
                continue;
            }
            while (out->cursor < g.capacity() && !g.cell_is_empty(out->cursor)) ++out->cursor;
            if (out->cursor >= g.capacity())
                return fail(KVRT_ERROR_CACHE_FULL,
                            "the window group (%u cells, %u in use) has no cell for a copy of a shared block's "
                            "windowed rows",
                            c_.geo_.window_cells, g.used());
            const uint32_t to = out->cursor++;
            out->from.push_back(wc);
            out->to.push_back(to);
            out->cells.push_back(e.cell);
            out->set.push_back({to, e.pos, delta});
        }
        out->set_end.push_back(out->set.size());
    } catch (const std::bad_alloc&) {
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "out of host memory for the window group's edits");
    }
    return KVRT_SUCCESS;
}

Result PagedLayout::window_mirror(int32_t seq, const uint32_t* drop, size_t n_drop, const WindowEdits* group,
                                  size_t span) {
    if (!c_.group_) return KVRT_SUCCESS;
    kv::CellTable& g = c_.group_->table();
    group_drop_.clear();
    try {
        for (size_t i = 0; i < n_drop; ++i) {
            const int32_t w = c_.group_->group_cell(drop[i]);
            if (w >= 0 && g.cell_has_seq(static_cast<uint32_t>(w), seq))
                group_drop_.push_back(static_cast<uint32_t>(w));
        }
    } catch (const std::bad_alloc&) {
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "out of host memory for the window group's edits");
    }
    const kv::CellSet* set = nullptr;
    size_t n_set = 0;
    if (group && span < group->set_end.size()) {
        const size_t begin = span ? group->set_end[span - 1] : 0;
        set = group->set.data() + begin;
        n_set = group->set_end[span] - begin;
    }
    if (!group_drop_.empty() || n_set) KVRT_TRY(g.mirror_seq(seq, group_drop_.data(), group_drop_.size(), set, n_set));
    if (group)
        for (size_t i = 0; i < group->to.size(); ++i) {
            c_.group_->link(group->cells[i], group->to[i]);
        }
    return KVRT_SUCCESS;
}

Result PagedLayout::window_admit_blocks(int32_t seq, uint32_t n, const int32_t* token_ids, const int32_t* positions,
                                  uint64_t salt, uint32_t* out_max_blocks) const {
    *out_max_blocks = UINT32_MAX;
    if (!c_.group_) return KVRT_SUCCESS;
    std::vector<uint32_t> blocks;
    std::vector<int32_t> lowest;  // lowest[t]: the lowest position of tokens t..n-1
    KVRT_TRY(pool_.match(seq, n, token_ids, positions, salt, &blocks));
    *out_max_blocks = 0;
    if (blocks.empty()) return KVRT_SUCCESS;
    try {
        lowest.resize(n);
    } catch (const std::bad_alloc&) {
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "out of host memory for a prompt of %u tokens", n);
    }
    lowest[n - 1] = positions[n - 1];
    for (uint32_t t = n - 1; t-- > 0;) lowest[t] = std::min(lowest[t + 1], positions[t]);
    // k blocks can be mapped when the group holds, of the tokens before
    // token k * B, every sink and every one at or above the window of the
    // lowest position computed from there on.
    const uint32_t B = c_.geo_.block_size;
    const int64_t keep = c_.geo_.window_keep;
    int64_t missing = INT64_MIN;  // highest position of a missing non-sink row so far
    for (uint32_t k = 1; k <= blocks.size(); ++k) {
        for (uint32_t t = (k - 1) * B; t < k * B; ++t) {
            if (c_.group_->group_cell(blocks[k - 1] * B + t % B) >= 0) continue;
            if (positions[t] < keep) return KVRT_SUCCESS;  // a sink: no more blocks
            missing = std::max<int64_t>(missing, positions[t]);
        }
        if (missing < int64_t{lowest[k * B]} - c_.geo_.window_span + 1) *out_max_blocks = k;
    }
    return KVRT_SUCCESS;
}

Result PagedLayout::window_admit_plan(int32_t seq, uint32_t n, const int32_t* positions, uint32_t n_cached,
                                kv::Placement* out) const {
    std::vector<kv::Token> tokens;
    try {
        tokens.resize(n - n_cached);
    } catch (const std::bad_alloc&) {
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "out of host memory for a prompt of %u tokens", n);
    }
    const int32_t* s = &seq;
    for (uint32_t t = n_cached; t < n; ++t) tokens[t - n_cached] = {positions[t], s, 1};
    const Result r = c_.group_->table().plan(tokens.data(), n - n_cached, out);
    if (r == KVRT_ERROR_CACHE_FULL)
        return fail(KVRT_ERROR_CACHE_FULL, "the window group (%u cells, %u in use) has no cell for each of %u tokens",
                    c_.geo_.window_cells, c_.group_->table().used(), n - n_cached);
    return r;
}

Result PagedLayout::window_admit(int32_t seq, uint32_t n, const int32_t* positions, uint32_t n_cached,
                           kv::Placement& group) {
    kv::CellTable& g = c_.group_->table();
    KVRT_TRY(g.apply(group));
    for (uint32_t t = n_cached; t < n; ++t) {
        const uint32_t c = pool_.slot(seq, t), w = group.cells()[t - n_cached];
        c_.group_->link(c, w);
    }
    // The cached rows the computed tokens see join the sequence.
    int32_t lowest = INT32_MAX;
    for (uint32_t t = n_cached; t < n; ++t) lowest = std::min(lowest, positions[t]);
    const int64_t from = int64_t{lowest} - c_.geo_.window_span + 1;
    std::vector<kv::CellSet> joins;
    try {
        for (uint32_t t = 0; t < n_cached; ++t) {
            if (positions[t] >= int64_t{c_.geo_.window_keep} && positions[t] < from) continue;
            const int32_t w = c_.group_->group_cell(pool_.slot(seq, t));
            if (w < 0) return fail(KVRT_ERROR_INTERNAL, "admit: the window group lost token %u's rows", t);
            joins.push_back({static_cast<uint32_t>(w), positions[t], g.cell_delta(static_cast<uint32_t>(w))});
        }
    } catch (const std::bad_alloc&) {
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "out of host memory for a prompt of %u tokens", n);
    }
    KVRT_TRY(g.mirror_seq(seq, nullptr, 0, joins.data(), joins.size()));
    c_.group_->set_floor(seq, static_cast<int32_t>(std::max<int64_t>(0, from)));
    return KVRT_SUCCESS;
}

}  // namespace kvrt::cache
