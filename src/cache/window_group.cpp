// The window group of a cell cache (kvrt_window_layout_desc): the windowed
// layers keep their rows in a cache of their own, of fewer cells, that takes
// every token the cache takes and drops the rows no window can see any more.
// The cache's cells stay the public ones; each links to the group cell that
// holds its rows in the windowed layers.
#include <algorithm>
#include <climits>
#include <string>
#include <utility>
#include <vector>

#include "cache/cache.hpp"
#include "cache/strides.hpp"

namespace kvrt::cache {

Result Cache::create_window_group(const kvrt_cache_desc& desc) {
    kv::WindowGroupDesc wd;
    kv::window_group_desc(desc, geo_, &wd);
    const std::string label = std::string(desc.label && *desc.label ? desc.label : "kvrt cache") + " window group";
    wd.desc.label = label.c_str();
    KVRT_TRY(Cache::create(ctx_, wd.desc, &win_));
    try {
        win_of_.assign(geo_.capacity, -1);
        cell_of_.assign(geo_.window_cells, 0);
        win_floors_.floor.assign(geo_.max_seqs, 0);
        win_floors_.known.assign(geo_.max_seqs, 1);
    } catch (const std::bad_alloc&) {
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "out of host memory for the window group's links");
    }
    return KVRT_SUCCESS;
}

int32_t Cache::group_cell(uint32_t cell) const {
    if (!win_ || cell >= win_of_.size()) return -1;
    const int32_t w = win_of_[cell];
    if (w < 0 || cell_of_[static_cast<uint32_t>(w)] != cell || win_->table_.cell_is_empty(static_cast<uint32_t>(w)))
        return -1;
    return w;
}

Result Cache::require_no_window_group(const char* op) const {
    if (win_)
        return fail(KVRT_ERROR_UNSUPPORTED,
                    "%s is not available for a cache whose windowed layers keep a group of their own "
                    "(kvrt_window_layout_desc)",
                    op);
    return KVRT_SUCCESS;
}

Result Cache::seq_window_pos_min(int32_t seq, int32_t* out_pos) const {
    if (!out_pos) return fail(KVRT_ERROR_INVALID_ARGUMENT, "out_pos is NULL");
    if (seq < 0 || static_cast<uint32_t>(seq) >= geo_.max_seqs)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "sequence %d is out of range (0..%u)", seq, geo_.max_seqs - 1);
    if (!win_) {
        *out_pos = table_.seq_pos_min(seq);
        return KVRT_SUCCESS;
    }
    // Sinks below n_keep are never dropped; what counts is what follows them.
    int32_t p = win_->table_.seq_pos_from(seq, static_cast<int32_t>(std::min<uint32_t>(geo_.window_keep, INT32_MAX)));
    if (p < 0) p = win_->table_.seq_pos_min(seq);
    *out_pos = p;
    return KVRT_SUCCESS;
}

Result Cache::window_check(int32_t seq, int32_t lowest) const {
    WindowFloors& f = win_floors_;
    const uint32_t s = static_cast<uint32_t>(seq);
    // The rows a query at `lowest` or later can see: positions from
    // lowest - W + 1 on, and the sinks below n_keep.
    const int64_t from = std::max<int64_t>(0, int64_t{lowest} - geo_.window_span + 1);
    if (f.known[s] && from >= f.floor[s]) return KVRT_SUCCESS;
    // Count them: the group's cells of a sequence are a subset of the
    // cache's, so equal counts mean equal sets.
    const int32_t keep = static_cast<int32_t>(std::min<int64_t>(geo_.window_keep, from));
    const auto seen = [&](const kv::CellTable& t) {
        return t.seq_count(seq, static_cast<int32_t>(from), -1) + (keep > 0 ? t.seq_count(seq, 0, keep) : 0);
    };
    if (seen(table_) != seen(win_->table_)) {
        int32_t held = 0;
        (void)seq_window_pos_min(seq, &held);
        return fail(KVRT_ERROR_INVALID_STATE,
                    "the windowed layers no longer hold every position of sequence %d that position %d's window "
                    "(%u) reaches (they hold positions from %d on, and below %u); remove the sequence's positions "
                    "from %u on and evaluate them again",
                    seq, lowest, geo_.window_span, held, geo_.window_keep, geo_.window_keep);
    }
    f.floor[s] = static_cast<int32_t>(from);
    f.known[s] = 1;
    return KVRT_SUCCESS;
}

void Cache::window_copy_floor(int32_t src, int32_t dst) {
    if (!win_ || src == dst) return;
    WindowFloors& f = win_floors_;
    const uint32_t a = static_cast<uint32_t>(src), b = static_cast<uint32_t>(dst);
    f.floor[b] = std::max(f.floor[b], f.floor[a]);
    f.known[b] = f.known[b] && f.known[a];
}

Result Cache::window_plan(const kv::Token* tokens, uint32_t n, bool tree, kv::Placement* out) {
    // The lowest position of each sequence of the batch: (sequence, lowest)
    // pairs, by sequence.
    std::vector<std::pair<int32_t, int32_t>> lowest;
    try {
        for (uint32_t i = 0; i < n; ++i)
            for (uint32_t j = 0; j < tokens[i].n_seq; ++j) lowest.emplace_back(tokens[i].seq_ids[j], tokens[i].pos);
    } catch (const std::bad_alloc&) {
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "out of host memory for a batch of %u tokens", n);
    }
    std::sort(lowest.begin(), lowest.end());
    lowest.erase(std::unique(lowest.begin(), lowest.end(),
                             [](const auto& a, const auto& b) { return a.first == b.first; }),
                 lowest.end());
    for (const auto& [seq, pos] : lowest) KVRT_TRY(window_check(seq, pos));
    // Rows at positions <= lowest - W are out of every window of the batch
    // and of what follows it (kept: the sinks below n_keep).
    const int64_t keep = geo_.window_keep;
    for (const auto& [seq, pos] : lowest) {
        const int64_t end = int64_t{pos} - geo_.window_span + 1;
        if (end <= keep) continue;
        const int32_t first = win_->table_.seq_pos_from(seq, static_cast<int32_t>(keep));
        if (first >= 0 && first < end)
            KVRT_TRY(win_->table_.seq_rm(seq, static_cast<int32_t>(keep), static_cast<int32_t>(end)));
        int32_t& floor = win_floors_.floor[static_cast<uint32_t>(seq)];
        floor = std::max(floor, static_cast<int32_t>(end));
    }
    const Result r = win_->table_.plan(tokens, n, out, nullptr, tree);
    if (r == KVRT_ERROR_CACHE_FULL)
        return fail(KVRT_ERROR_CACHE_FULL,
                    "the window group (%u cells, %u in use) has no cell for each of %u tokens; size "
                    "kvrt_window_layout_desc.cells for max_seqs x (window + n_keep) plus the largest batch",
                    geo_.window_cells, win_->table_.used(), n);
    return r;
}

void Cache::window_link(const kv::Placement& cells, const kv::Placement& group) {
    for (uint32_t i = 0; i < cells.size(); ++i) {
        win_of_[cells.cells()[i]] = static_cast<int32_t>(group.cells()[i]);
        cell_of_[group.cells()[i]] = cells.cells()[i];
    }
}

Result Cache::window_cells(const char* op, uint32_t n, const uint32_t* cells, std::vector<uint32_t>* out) const {
    try {
        out->resize(n);
    } catch (const std::bad_alloc&) {
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "out of host memory for %u cells", n);
    }
    for (uint32_t i = 0; i < n; ++i) {
        if (cells[i] >= geo_.capacity)
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "cell %u is out of range (capacity %u)", cells[i], geo_.capacity);
        const int32_t w = group_cell(cells[i]);
        if (w < 0)
            return fail(KVRT_ERROR_INVALID_ARGUMENT,
                        "%s: the windowed layers hold no rows for cell %u (empty, or out of every window)", op,
                        cells[i]);
        (*out)[i] = static_cast<uint32_t>(w);
    }
    return KVRT_SUCCESS;
}

Result Cache::record_window_writes(vk::Stream& s, uint32_t n, const uint32_t* cells, uint32_t layer,
                                   uint32_t src_layer, const Source& k, const Source& v) {
    const uint32_t local = static_cast<uint32_t>(geo_.window_local[layer]);
    std::vector<uint32_t> group(n);
    std::vector<uint8_t> held(n);
    bool all = true;
    for (uint32_t i = 0; i < n; ++i) {
        const int32_t w = group_cell(cells[i]);
        held[i] = w >= 0;
        group[i] = w < 0 ? 0 : static_cast<uint32_t>(w);
        all = all && w >= 0;
    }
    for (Array array : {Array::K, Array::V}) {
        const Source& src = array == Array::K ? k : v;
        if (all) {
            KVRT_TRY(win_->record_array(s, array, n, group.data(), local, src_layer, src));
            continue;
        }
        // Runs of tokens whose rows the group holds, each a source of its own
        // with the strides resolved for the whole batch.
        const kv::RowGeometry& g = arena_->rows(array);
        const bool raw = src.type == g.type && src.type != KVRT_TYPE_F32 && src.type != KVRT_TYPE_F16;
        const uint64_t head_bytes = raw ? g.head_bytes : uint64_t{g.head_dim} * (src.type == KVRT_TYPE_F16 ? 2 : 4);
        const uint64_t align = raw ? (src.type == KVRT_TYPE_U8_STATIC ? 1 : 2) : 4;
        StridedRows rows;
        KVRT_TRY(resolve_strided("rows", src.offset, src.row_stride, src.head_stride, src.layer_stride,
                                 src_layer + 1, n, geo_.n_kv_heads, head_bytes, align, &rows));
        for (uint32_t i = 0; i < n;) {
            if (!held[i]) {
                ++i;
                continue;
            }
            uint32_t end = i;
            while (end < n && held[end]) ++end;
            Source run = src;
            run.offset = rows.offset + uint64_t{i} * rows.row;
            run.row_stride = rows.row;
            run.head_stride = rows.head;
            run.layer_stride = rows.layer;
            KVRT_TRY(win_->record_array(s, array, end - i, group.data() + i, local, src_layer, run));
            i = end;
        }
    }
    return KVRT_SUCCESS;
}

Result Cache::window_attention(vk::Stream* stream, int32_t layer, uint32_t n_queries, const int32_t* positions,
                               const int32_t* seq_ids, const Source& q, const Output& out,
                               const kvrt_attention_params& params, const Tree* tree) {
    if (n_queries == 0) return KVRT_SUCCESS;
    if (!positions || !seq_ids) return fail(KVRT_ERROR_INVALID_ARGUMENT, "positions or seq_ids is NULL");
    if (params.n_keep > geo_.window_keep)
        return fail(KVRT_ERROR_INVALID_ARGUMENT,
                    "n_keep %u in windowed layer %d: the window group keeps positions below %u only", params.n_keep,
                    layer, geo_.window_keep);
    // Each sequence's lowest query decides which rows its window needs.
    for (uint32_t i = 0; i < n_queries; ++i) {
        if (positions[i] < 0) return fail(KVRT_ERROR_INVALID_ARGUMENT, "query %u has position %d", i, positions[i]);
        if (seq_ids[i] < 0 || static_cast<uint32_t>(seq_ids[i]) >= geo_.max_seqs)
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "query %u has sequence %d (max_seqs %u)", i, seq_ids[i],
                        geo_.max_seqs);
        KVRT_TRY(window_check(seq_ids[i], positions[i]));
    }
    const uint32_t local = static_cast<uint32_t>(geo_.window_local[static_cast<uint32_t>(layer)]);
    if (!tree) return win_->attention(stream, static_cast<int32_t>(local), n_queries, positions, seq_ids, q, out, params);
    if (!tree->cells) return fail(KVRT_ERROR_INVALID_ARGUMENT, "the tree's cells are NULL");
    std::vector<uint32_t> group;
    KVRT_TRY(window_cells("a token tree", n_queries, tree->cells, &group));
    const Tree mapped{tree->parents, group.data()};
    return win_->attention(stream, static_cast<int32_t>(local), n_queries, positions, seq_ids, q, out, params,
                           &mapped);
}

void Cache::window_move(const std::vector<kv::CellMove>& moves, bool back) {
    if (!win_) return;
    const auto move = [this](uint32_t from, uint32_t to) {
        const int32_t w = group_cell(from);
        win_of_[to] = w;
        win_of_[from] = -1;
        if (w >= 0) cell_of_[static_cast<uint32_t>(w)] = to;
    };
    if (!back) {
        for (const kv::CellMove& m : moves) move(m.src_cell, m.dst_cell);
        return;
    }
    for (auto it = moves.rbegin(); it != moves.rend(); ++it) move(it->dst_cell, it->src_cell);
}

void Cache::window_unlink_moved() {
    // Positions moved: every floor is counted again.
    window_forget_floors();
    kv::CellTable& g = win_->table_;
    for (uint32_t w = 0; w < g.used_end(); ++w) {
        if (g.cell_is_empty(w)) continue;
        const uint32_t c = cell_of_[w];
        const bool linked = group_cell(c) == static_cast<int32_t>(w);
        if (linked && table_.cell_pos(c) == g.cell_pos(w)) continue;
        // A group cell of one sequence follows its cell, with the move as a
        // pending shift of its K rows; one of several is freed.
        int32_t only = -1;
        uint32_t count = 0;
        for (uint32_t s = 0; s < geo_.max_seqs && count < 2; ++s)
            if (g.cell_has_seq(w, static_cast<int32_t>(s))) {
                only = static_cast<int32_t>(s);
                ++count;
            }
        if (linked && count == 1 && g.reserve(1) == KVRT_SUCCESS) {
            const int64_t delta = int64_t{g.cell_delta(w)} + table_.cell_pos(c) - g.cell_pos(w);
            if (delta >= INT32_MIN && delta <= INT32_MAX) {
                const kv::CellSet to{w, table_.cell_pos(c), static_cast<int32_t>(delta)};
                if (g.mirror_seq(only, nullptr, 0, &to, 1) == KVRT_SUCCESS) continue;
            }
        }
        (void)g.release_cell(w, g.cell_epoch(w));
    }
}

Result Cache::window_verify() const {
    if (!win_) return KVRT_SUCCESS;
    KVRT_TRY(table_.verify());
    KVRT_TRY(win_->table_.verify());
    const kv::CellTable& g = win_->table_;
    for (uint32_t w = 0; w < g.capacity(); ++w) {
        if (g.cell_is_empty(w)) continue;
        const uint32_t c = cell_of_[w];
        if (c >= geo_.capacity || table_.cell_is_empty(c) || win_of_[c] != static_cast<int32_t>(w))
            return fail(KVRT_ERROR_INTERNAL, "group cell %u is not linked to a cell in use (cell %u)", w, c);
        if (table_.cell_pos(c) != g.cell_pos(w))
            return fail(KVRT_ERROR_INTERNAL, "group cell %u has position %d, its cell %u %d", w, g.cell_pos(w), c,
                        table_.cell_pos(c));
        for (uint32_t s = 0; s < geo_.max_seqs; ++s)
            if (g.cell_has_seq(w, static_cast<int32_t>(s)) && !table_.cell_has_seq(c, static_cast<int32_t>(s)))
                return fail(KVRT_ERROR_INTERNAL, "group cell %u has sequence %u, its cell %u not", w, s, c);
    }
    return KVRT_SUCCESS;
}

}  // namespace kvrt::cache
