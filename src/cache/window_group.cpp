// The window group (window_group.hpp): links, floors, the checks that a
// window still has its rows, and the group's side of stores, writes, moves
// and state loads.
#include "cache/window_group.hpp"

#include <algorithm>
#include <climits>
#include <string>
#include <utility>
#include <vector>

#include "cache/cache.hpp"
#include "cache/strides.hpp"

namespace kvrt::cache {

Result WindowGroup::create(Cache& owner, const kvrt_cache_desc& desc, std::unique_ptr<WindowGroup>* out) {
    const kv::CacheGeometry& geo = owner.geo_;
    std::unique_ptr<WindowGroup> g(new WindowGroup(owner));
    kv::WindowGroupDesc wd;
    kv::window_group_desc(desc, geo, &wd);
    const std::string label = std::string(desc.label && *desc.label ? desc.label : "kvrt cache") + " window group";
    wd.desc.label = label.c_str();
    KVRT_TRY(CellStore::create(owner.ctx_, wd.desc, &g->rows_));
    try {
        g->group_of_.assign(geo.capacity, -1);
        g->cell_of_.assign(geo.window_cells, 0);
        g->floors_.floor.assign(geo.max_seqs, 0);
        g->floors_.known.assign(geo.max_seqs, 1);
    } catch (const std::bad_alloc&) {
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "out of host memory for the window group's links");
    }
    *out = std::move(g);
    return KVRT_SUCCESS;
}

WindowGroup::~WindowGroup() = default;

kv::CellTable& WindowGroup::table() { return rows_->table_; }

const kv::CellTable& WindowGroup::table() const { return rows_->table_; }

int32_t WindowGroup::group_cell(uint32_t cell) const {
    if (cell >= group_of_.size()) return -1;
    const int32_t w = group_of_[cell];
    if (w < 0 || cell_of_[static_cast<uint32_t>(w)] != cell || rows_->table_.cell_is_empty(static_cast<uint32_t>(w)))
        return -1;
    return w;
}

Result WindowGroup::seq_pos_min(int32_t seq, int32_t* out_pos) const {
    // Sinks below n_keep are never dropped; what counts is what follows them.
    const int32_t keep = static_cast<int32_t>(std::min<uint32_t>(owner_.geo_.window_keep, INT32_MAX));
    int32_t p = rows_->table_.seq_pos_from(seq, keep);
    if (p < 0) p = rows_->table_.seq_pos_min(seq);
    *out_pos = p;
    return KVRT_SUCCESS;
}

Result WindowGroup::check(int32_t seq, int32_t lowest) const {
    Floors& f = floors_;
    const uint32_t s = static_cast<uint32_t>(seq);
    // The rows a query at `lowest` or later can see: positions from
    // lowest - W + 1 on, and the sinks below n_keep.
    const int64_t from = std::max<int64_t>(0, int64_t{lowest} - owner_.geo_.window_span + 1);
    if (f.known[s] && from >= f.floor[s]) return KVRT_SUCCESS;
    // Count them: the group's cells of a sequence are a subset of the
    // cache's, so equal counts mean equal sets.
    const int32_t keep = static_cast<int32_t>(std::min<int64_t>(owner_.geo_.window_keep, from));
    const auto seen = [&](const kv::CellTable& t) {
        return t.seq_count(seq, static_cast<int32_t>(from), -1) + (keep > 0 ? t.seq_count(seq, 0, keep) : 0);
    };
    if (seen(owner_.table_) != seen(rows_->table_)) {
        int32_t held = 0;
        (void)seq_pos_min(seq, &held);
        return fail(KVRT_ERROR_INVALID_STATE,
                    "the windowed layers no longer hold every position of sequence %d that position %d's window "
                    "(%u) reaches (they hold positions from %d on, and below %u); remove the sequence's positions "
                    "from %u on and evaluate them again",
                    seq, lowest, owner_.geo_.window_span, held, owner_.geo_.window_keep, owner_.geo_.window_keep);
    }
    f.floor[s] = static_cast<int32_t>(from);
    f.known[s] = 1;
    return KVRT_SUCCESS;
}

void WindowGroup::copy_floor(int32_t src, int32_t dst) {
    if (src == dst) return;
    Floors& f = floors_;
    const uint32_t a = static_cast<uint32_t>(src), b = static_cast<uint32_t>(dst);
    f.floor[b] = std::max(f.floor[b], f.floor[a]);
    f.known[b] = f.known[b] && f.known[a];
}

Result WindowGroup::plan(const kv::Token* tokens, uint32_t n, bool tree, kv::Placement* out) {
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
    for (const auto& [seq, pos] : lowest) KVRT_TRY(check(seq, pos));
    // Rows at positions <= lowest - W are out of every window of the batch
    // and of what follows it (kept: the sinks below n_keep).
    const int64_t keep = owner_.geo_.window_keep;
    for (const auto& [seq, pos] : lowest) {
        const int64_t end = int64_t{pos} - owner_.geo_.window_span + 1;
        if (end <= keep) continue;
        const int32_t first = rows_->table_.seq_pos_from(seq, static_cast<int32_t>(keep));
        if (first >= 0 && first < end)
            KVRT_TRY(rows_->table_.seq_rm(seq, static_cast<int32_t>(keep), static_cast<int32_t>(end)));
        int32_t& floor = floors_.floor[static_cast<uint32_t>(seq)];
        floor = std::max(floor, static_cast<int32_t>(end));
    }
    const Result r = rows_->table_.plan(tokens, n, out, nullptr, tree);
    if (r == KVRT_ERROR_CACHE_FULL)
        return fail(KVRT_ERROR_CACHE_FULL,
                    "the window group (%u cells, %u in use) has no cell for each of %u tokens; size "
                    "kvrt_window_layout_desc.cells for max_seqs x (window + n_keep) plus the largest batch",
                    owner_.geo_.window_cells, rows_->table_.used(), n);
    return r;
}

void WindowGroup::link(const kv::Placement& cells, const kv::Placement& group) {
    for (uint32_t i = 0; i < cells.size(); ++i) {
        group_of_[cells.cells()[i]] = static_cast<int32_t>(group.cells()[i]);
        cell_of_[group.cells()[i]] = cells.cells()[i];
    }
}

Result WindowGroup::map_cells(const char* op, uint32_t n, const uint32_t* cells, std::vector<uint32_t>* out) const {
    try {
        out->resize(n);
    } catch (const std::bad_alloc&) {
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "out of host memory for %u cells", n);
    }
    for (uint32_t i = 0; i < n; ++i) {
        if (cells[i] >= owner_.geo_.capacity)
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "cell %u is out of range (capacity %u)", cells[i],
                        owner_.geo_.capacity);
        const int32_t w = group_cell(cells[i]);
        if (w < 0)
            return fail(KVRT_ERROR_INVALID_ARGUMENT,
                        "%s: the windowed layers hold no rows for cell %u (empty, or out of every window)", op,
                        cells[i]);
        (*out)[i] = static_cast<uint32_t>(w);
    }
    return KVRT_SUCCESS;
}

Result WindowGroup::record_writes(vk::Stream& s, uint32_t n, const uint32_t* cells, uint32_t layer,
                                   uint32_t src_layer, const Source& k, const Source& v) {
    const uint32_t local = static_cast<uint32_t>(owner_.geo_.window_local[layer]);
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
            KVRT_TRY(rows_->record_array(s, array, n, group.data(), local, src_layer, src));
            continue;
        }
        // Runs of tokens whose rows the group holds, each a source of its own
        // with the strides resolved for the whole batch.
        const kv::RowGeometry& g = owner_.arena_->rows(array);
        const bool raw = src.type == g.type && src.type != KVRT_TYPE_F32 && src.type != KVRT_TYPE_F16;
        const uint64_t head_bytes = raw ? g.head_bytes : uint64_t{g.head_dim} * (src.type == KVRT_TYPE_F16 ? 2 : 4);
        const uint64_t align = raw ? (src.type == KVRT_TYPE_U8_STATIC ? 1 : 2) : 4;
        StridedRows rows;
        KVRT_TRY(resolve_strided("rows", src.offset, src.row_stride, src.head_stride, src.layer_stride,
                                 src_layer + 1, n, owner_.geo_.n_kv_heads, head_bytes, align, &rows));
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
            KVRT_TRY(rows_->record_array(s, array, end - i, group.data() + i, local, src_layer, run));
            i = end;
        }
    }
    return KVRT_SUCCESS;
}

Result WindowGroup::attention(vk::Stream* stream, int32_t layer, uint32_t n_queries, const int32_t* positions,
                               const int32_t* seq_ids, const Source& q, const Output& out,
                               const kvrt_attention_params& params, const Tree* tree) {
    if (n_queries == 0) return KVRT_SUCCESS;
    if (!positions || !seq_ids) return fail(KVRT_ERROR_INVALID_ARGUMENT, "positions or seq_ids is NULL");
    if (params.n_keep > owner_.geo_.window_keep)
        return fail(KVRT_ERROR_INVALID_ARGUMENT,
                    "n_keep %u in windowed layer %d: the window group keeps positions below %u only", params.n_keep,
                    layer, owner_.geo_.window_keep);
    // Each sequence's lowest query decides which rows its window needs.
    for (uint32_t i = 0; i < n_queries; ++i) {
        if (positions[i] < 0) return fail(KVRT_ERROR_INVALID_ARGUMENT, "query %u has position %d", i, positions[i]);
        if (seq_ids[i] < 0 || static_cast<uint32_t>(seq_ids[i]) >= owner_.geo_.max_seqs)
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "query %u has sequence %d (max_seqs %u)", i, seq_ids[i],
                        owner_.geo_.max_seqs);
        KVRT_TRY(check(seq_ids[i], positions[i]));
    }
    const uint32_t local = static_cast<uint32_t>(owner_.geo_.window_local[static_cast<uint32_t>(layer)]);
    if (!tree)
        return rows_->attention(stream, static_cast<int32_t>(local), n_queries, positions, seq_ids, q, out, params);
    if (!tree->cells) return fail(KVRT_ERROR_INVALID_ARGUMENT, "the tree's cells are NULL");
    std::vector<uint32_t> group;
    KVRT_TRY(map_cells("a token tree", n_queries, tree->cells, &group));
    const Tree mapped{tree->parents, group.data()};
    return rows_->attention(stream, static_cast<int32_t>(local), n_queries, positions, seq_ids, q, out, params,
                           &mapped);
}

void WindowGroup::move(const std::vector<kv::CellMove>& moves, bool back) {
    const auto move = [this](uint32_t from, uint32_t to) {
        const int32_t w = group_cell(from);
        group_of_[to] = w;
        group_of_[from] = -1;
        if (w >= 0) cell_of_[static_cast<uint32_t>(w)] = to;
    };
    if (!back) {
        for (const kv::CellMove& m : moves) move(m.src_cell, m.dst_cell);
        return;
    }
    for (auto it = moves.rbegin(); it != moves.rend(); ++it) move(it->dst_cell, it->src_cell);
}

void WindowGroup::unlink_moved() {
    // Positions moved: every floor is counted again.
    forget_floors();
    kv::CellTable& g = rows_->table_;
    for (uint32_t w = 0; w < g.used_end(); ++w) {
        if (g.cell_is_empty(w)) continue;
        const uint32_t c = cell_of_[w];
        const bool linked = group_cell(c) == static_cast<int32_t>(w);
        if (linked && owner_.table_.cell_pos(c) == g.cell_pos(w)) continue;
        // A group cell of one sequence follows its cell, with the move as a
        // pending shift of its K rows; one of several is freed.
        int32_t only = -1;
        uint32_t count = 0;
        for (uint32_t s = 0; s < owner_.geo_.max_seqs && count < 2; ++s)
            if (g.cell_has_seq(w, static_cast<int32_t>(s))) {
                only = static_cast<int32_t>(s);
                ++count;
            }
        if (linked && count == 1 && g.reserve(1) == KVRT_SUCCESS) {
            const int64_t delta = int64_t{g.cell_delta(w)} + owner_.table_.cell_pos(c) - g.cell_pos(w);
            if (delta >= INT32_MIN && delta <= INT32_MAX) {
                const kv::CellSet to{w, owner_.table_.cell_pos(c), static_cast<int32_t>(delta)};
                if (g.mirror_seq(only, nullptr, 0, &to, 1) == KVRT_SUCCESS) continue;
            }
        }
        (void)g.release_cell(w, g.cell_epoch(w));
    }
}

Result WindowGroup::verify() const {
    KVRT_TRY(owner_.table_.verify());
    KVRT_TRY(rows_->table_.verify());
    const kv::CellTable& g = rows_->table_;
    for (uint32_t w = 0; w < g.capacity(); ++w) {
        if (g.cell_is_empty(w)) continue;
        const uint32_t c = cell_of_[w];
        if (c >= owner_.geo_.capacity || owner_.table_.cell_is_empty(c) || group_of_[c] != static_cast<int32_t>(w))
            return fail(KVRT_ERROR_INTERNAL, "group cell %u is not linked to a cell in use (cell %u)", w, c);
        if (owner_.table_.cell_pos(c) != g.cell_pos(w))
            return fail(KVRT_ERROR_INTERNAL, "group cell %u has position %d, its cell %u %d", w, g.cell_pos(w), c,
                        owner_.table_.cell_pos(c));
        for (uint32_t s = 0; s < owner_.geo_.max_seqs; ++s)
            if (g.cell_has_seq(w, static_cast<int32_t>(s)) && !owner_.table_.cell_has_seq(c, static_cast<int32_t>(s)))
                return fail(KVRT_ERROR_INTERNAL, "group cell %u has sequence %u, its cell %u not", w, s, c);
    }
    return KVRT_SUCCESS;
}

void WindowGroup::set_floor(int32_t seq, int32_t floor) {
    floors_.floor[static_cast<uint32_t>(seq)] = floor;
    floors_.known[static_cast<uint32_t>(seq)] = 1;
}

Result WindowGroup::record_rows(vk::Stream& s, Array array, uint32_t n, const uint32_t* group_cells, uint32_t layer,
                                const Source& src) {
    return rows_->record_array(s, array, n, group_cells, static_cast<uint32_t>(owner_.geo_.window_local[layer]), 0,
                               src);
}

Result WindowGroup::record_copies(vk::Stream& s, const std::vector<uint32_t>& from, const std::vector<uint32_t>& to) {
    return rows_->record_copy_cells(s, *rows_, from, to);
}

Result WindowGroup::plan_load(int32_t seq, const std::vector<kv::Token>& tokens, GroupLoad* out) {
    const uint32_t m = static_cast<uint32_t>(tokens.size());
    kv::CellTable& t = rows_->table_;
    auto undo = std::make_shared<kv::LoadUndo>();
    out->group_cells.resize(m);
    uint32_t k = m;
    if (seq < 0) {
        try {
            undo->whole = std::make_shared<kv::CellTable>(t);
        } catch (const std::bad_alloc&) {
            return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "out of host memory for the window group's cell table");
        }
        k = kv::first_free_cells(t, m, out->group_cells.data());  // free before the load
        t.clear();
    } else {
        k = kv::first_free_cells(t, m, out->group_cells.data());
        KVRT_TRY(t.remove_seq(seq, &undo->removed));
    }
    // From here on a failure gives the table back before it returns.
    Result r = KVRT_SUCCESS;
    if (k < m) {
        k = kv::first_free_cells(t, m, out->group_cells.data());  // also the cells the load frees
        if (k < m)
            r = fail(KVRT_ERROR_CACHE_FULL, "the state's windowed layers hold %u cells, the window group has %u for them",
                     m, k);
    }
    if (r == KVRT_SUCCESS) r = t.plan(tokens.data(), m, &undo->placement, out->group_cells.data(), true);
    if (r == KVRT_SUCCESS) r = t.apply(undo->placement);
    if (r != KVRT_SUCCESS) {
        undo->run(t);
        return r;
    }
    out->undo_table = [&t, undo]() { undo->run(t); };
    return KVRT_SUCCESS;
}

std::function<void()> WindowGroup::commit_load(const GroupLoad& group) {
    // The links this changes, as they were.
    auto links = std::make_shared<std::pair<std::vector<std::pair<uint32_t, int32_t>>,
                                            std::vector<std::pair<uint32_t, uint32_t>>>>();
    links->first.reserve(group.cells.size());
    links->second.reserve(group.cells.size());
    for (size_t i = 0; i < group.cells.size(); ++i) {
        links->first.emplace_back(group.cells[i], group_of_[group.cells[i]]);
        links->second.emplace_back(group.group_cells[i], cell_of_[group.group_cells[i]]);
        group_of_[group.cells[i]] = static_cast<int32_t>(group.group_cells[i]);
        cell_of_[group.group_cells[i]] = group.cells[i];
    }
    forget_floors();
    return [this, links]() {
        for (auto it = links->second.rbegin(); it != links->second.rend(); ++it) cell_of_[it->first] = it->second;
        for (auto it = links->first.rbegin(); it != links->first.rend(); ++it) group_of_[it->first] = it->second;
        forget_floors();
    };
}

}  // namespace kvrt::cache
