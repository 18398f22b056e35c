// Cache state: saving the cells of the whole cache or of one sequence in the
// state format (state/state_format.hpp), and applying a parsed state, all or
// nothing, in either layout and from any stored type.
//
// The table is never written directly: a load builds the new table on a copy
// through CellTable's own mutators (clear, seq_rm, plan with exact cells,
// apply), swaps it in once the rows are recorded, and swaps the old one back
// if the device work fails. The copy carries the table's record of changed
// cells, widened by every mutator, so the device mirror of the metadata is
// brought up to date by the next attention as after any other change.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <utility>

#include "cache/cache.hpp"
#include "cache/cell_layout.hpp"
#include "cache/paged_layout.hpp"
#include "cache/static_layout.hpp"
#include "core/checked.hpp"
#include "kv/format.hpp"

namespace kvrt::cache {

namespace {

bool same_scales(const std::vector<kv::StaticScale>& a, const std::vector<kv::StaticScale>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
        if (a[i].scale != b[i].scale || a[i].zero_point != b[i].zero_point) return false;
    return true;
}

// The rows of one array (K or V) of a plan as a Source for every layer at
// once (layer_stride apart), for the tokens `order` (record indices): the
// state's bytes in place when they can be given as they are, else a packed
// copy, else values decoded to f32 for the store kernels to quantize.
struct LoadRows {
    std::vector<uint8_t> owned;
    Source src;
};

// With `layer` >= 0, the rows of that layer only (layer_stride 0): the
// records in `order`, or every row the state has for the layer.
Result make_rows(const state::Plan& plan, Array array, const kv::RowGeometry& g, uint32_t n_kv_heads,
                 const std::vector<uint32_t>* order, LoadRows* out, int32_t layer = -1) {
    const state::Header& h = plan.desc.header;
    const bool is_k = array == Array::K;
    const uint32_t l0 = layer < 0 ? 0 : static_cast<uint32_t>(layer);
    const uint32_t n_layers = layer < 0 ? h.n_layers : 1;
    const kvrt_type from = is_k ? h.type_k : h.type_v;
    const uint32_t head_dim = is_k ? h.head_dim_k : h.head_dim_v;
    const std::vector<kv::StaticScale>& scales = is_k ? plan.desc.k_scales : plan.desc.v_scales;
    const uint64_t row = is_k ? plan.extents.k_row_bytes : plan.extents.v_row_bytes;
    const uint32_t n_tok = order ? static_cast<uint32_t>(order->size()) : plan.extents.rows(l0, h.n_cells);
    const uint64_t head_bytes = row / n_kv_heads;
    // Bytes as they are: the same type (and the same scales); F32 and F16
    // rows go through the store kernel as values, bit for bit.
    const uint64_t align = from == KVRT_TYPE_U8_STATIC ? 1 : (from == KVRT_TYPE_F32 || from == KVRT_TYPE_F16) ? 4 : 2;
    const bool same = from == g.type && same_scales(scales, g.scales) && head_bytes % align == 0;
    Source& s = out->src;
    s.type = same ? from : KVRT_TYPE_F32;
    s.head_stride = 0;
    const uint64_t first = is_k ? plan.extents.k_offset(l0) : plan.extents.v_offset(l0, h.n_cells);
    if (same && !order && first % align == 0 &&
        (layer >= 0 || (plan.extents.layer_offsets.empty() && plan.extents.layer_bytes % align == 0))) {
        s.host = plan.bytes;
        s.offset = first;
        s.row_stride = row;
        s.layer_stride = layer < 0 ? plan.extents.layer_bytes : 0;
        return KVRT_SUCCESS;
    }
    auto src_row = [&](uint32_t l, uint32_t t) {
        const uint32_t rec = order ? (*order)[t] : t;
        return (is_k ? plan.k_rows(l) : plan.v_rows(l)) + uint64_t{rec} * row;
    };
    // The copy's size, checked against what the host can address.
    const uint64_t unit = same ? row : uint64_t{n_kv_heads} * head_dim * 4;
    uint64_t total = 0;
    if (!checked_mul(uint64_t{n_layers} * n_tok, unit, &total) || total > SIZE_MAX)
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "converting the state needs %llu bytes of host memory",
                    static_cast<unsigned long long>(total));
    if (same) {
        out->owned.resize(static_cast<size_t>(total));
        for (uint32_t l = 0; l < n_layers; ++l)
            for (uint32_t t = 0; t < n_tok; ++t)
                std::memcpy(out->owned.data() + (uint64_t{l} * n_tok + t) * row, src_row(l0 + l, t),
                            static_cast<size_t>(row));
        s.row_stride = row;
    } else {
        const size_t elems = size_t{n_kv_heads} * head_dim;
        out->owned.resize(static_cast<size_t>(total));
        auto* f = reinterpret_cast<float*>(out->owned.data());
        for (uint32_t l = 0; l < n_layers; ++l)
            for (uint32_t t = 0; t < n_tok; ++t)
                kv::decode_row(from, src_row(l0 + l, t), elems, f + (size_t{l} * n_tok + t) * elems,
                               scales.empty() ? nullptr : &scales[l0 + l]);
        s.row_stride = elems * 4;
    }
    s.host = out->owned.data();
    s.offset = 0;
    s.layer_stride = layer < 0 ? s.row_stride * n_tok : 0;
    if (n_tok == 0) s.layer_stride = 0;
    return KVRT_SUCCESS;
}

}  // namespace

Result Cache::describe_state(int32_t seq, state::Description* out) const {
    if (seq < -1 || seq >= static_cast<int32_t>(geo_.max_seqs))
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "sequence %d is out of range (-1 or 0..%u)", seq, geo_.max_seqs - 1);
    state::Description d;
    state::Header& h = d.header;
    h.flags = (seq >= 0 ? state::kFlagSequence : 0) | (deferred_ ? state::kFlagDeferredRope : 0);
    h.n_layers = geo_.n_layers;
    h.n_kv_heads = geo_.n_kv_heads;
    h.head_dim_k = geo_.k.head_dim;
    h.head_dim_v = geo_.v.head_dim;
    h.type_k = geo_.k.type;
    h.type_v = geo_.v.type;
    h.layout = static_cast<uint32_t>(geo_.layout);
    h.capacity = table_.capacity();
    h.max_seqs = geo_.max_seqs;
    h.seq = seq;
    d.k_scales = geo_.k.scales;
    d.v_scales = geo_.v.scales;
    if (seq >= 0) {
        std::vector<uint32_t> cells;
        KVRT_TRY(table_.cells_of_seq(seq, &cells));
        for (uint32_t c : cells) {
            d.cells.push_back({c, table_.cell_pos(c), static_cast<uint32_t>(d.seq_ids.size()), 1});
            d.seq_ids.push_back(seq);
        }
    } else {
        for (uint32_t c = 0; c < table_.used_end(); ++c) {
            if (table_.cell_is_empty(c)) continue;
            state::CellRecord r{c, table_.cell_pos(c), static_cast<uint32_t>(d.seq_ids.size()), 0};
            for (uint32_t s = 0; s < geo_.max_seqs; ++s)
                if (table_.cell_has_seq(c, static_cast<int32_t>(s))) {
                    d.seq_ids.push_back(static_cast<int32_t>(s));
                    ++r.n_seq;
                }
            d.cells.push_back(r);
        }
    }
    h.n_cells = static_cast<uint32_t>(d.cells.size());
    if (group_) {
        // The group's rows: for each saved cell it holds, the (saved)
        // sequences it holds the cell for.
        h.flags |= state::kFlagWindowGroup;
        d.windowed.resize(geo_.n_layers);
        for (uint32_t l = 0; l < geo_.n_layers; ++l) d.windowed[l] = geo_.in_window_group(l);
        const kv::CellTable& g = group_->table();
        for (uint32_t i = 0; i < h.n_cells; ++i) {
            const state::CellRecord& c = d.cells[i];
            const int32_t w = group_cell(c.cell);
            if (w < 0) continue;
            state::GroupRecord r{i, static_cast<uint32_t>(d.group_seq_ids.size()), 0};
            for (uint32_t j = 0; j < c.n_seq; ++j) {
                const int32_t s = d.seq_ids[c.seq_begin + j];
                if (!g.cell_has_seq(static_cast<uint32_t>(w), s)) continue;
                d.group_seq_ids.push_back(s);
                ++r.n_seq;
            }
            if (r.n_seq) d.group.push_back(r);
        }
    }
    *out = std::move(d);
    return KVRT_SUCCESS;
}

Result Cache::state_save(int32_t seq, void* out, uint64_t* size) {
    if (!size) return fail(KVRT_ERROR_INVALID_ARGUMENT, "size is NULL");
    state::Description d;
    state::Extents e;
    KVRT_TRY(describe_state(seq, &d));
    KVRT_TRY(state::extents_of(d, &e));
    if (!out) {
        *size = e.total;
        return KVRT_SUCCESS;
    }
    if (*size < e.total)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "buffer too small: the state needs %llu bytes, *size is %llu",
                    static_cast<unsigned long long>(e.total), static_cast<unsigned long long>(*size));
    // Saved K is rotated to the cells' current positions: pending shifts
    // first (deferred RoPE: they are metadata only and simply cleared).
    if (table_.has_pending_shift() || (group_ && group_->table().has_pending_shift())) KVRT_TRY(apply_shifts(nullptr));
    auto* b = static_cast<uint8_t*>(out);
    state::write_prefix(d, e, b);
    std::vector<uint32_t> cells(d.cells.size());
    for (size_t i = 0; i < cells.size(); ++i) cells[i] = d.cells[i].cell;
    std::vector<uint32_t> group_cells(d.group.size());
    for (size_t i = 0; i < group_cells.size(); ++i) group_cells[i] = cells[d.group[i].record];
    const uint32_t n = d.header.n_cells;
    for (uint32_t l = 0; l < geo_.n_layers; ++l) {
        // A windowed layer's rows: the cells the group holds, in order.
        const uint32_t rows = e.rows(l, n);
        const uint32_t* at = group_ && geo_.in_window_group(l) ? group_cells.data() : cells.data();
        KVRT_TRY(read_raw(static_cast<int32_t>(l), Array::K, rows, at, b + e.k_offset(l), rows * e.k_row_bytes));
        KVRT_TRY(read_raw(static_cast<int32_t>(l), Array::V, rows, at, b + e.v_offset(l, n), rows * e.v_row_bytes));
    }
    state::seal(b, e.total);
    *size = e.total;
    return KVRT_SUCCESS;
}

Result Cache::check_state_fits(int32_t seq, const state::Plan& plan) const {
    const state::Header& h = plan.desc.header;
    if (seq < -1 || seq >= static_cast<int32_t>(geo_.max_seqs))
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "sequence %d is out of range (-1 or 0..%u)", seq, geo_.max_seqs - 1);
    const bool one = h.flags & state::kFlagSequence;
    if (seq < 0 && one)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "the state holds sequence %d only; load it into a sequence (seq >= 0)",
                    h.seq);
    if (seq >= 0 && !one)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "the state holds the whole cache; load it with seq -1");
    if (h.n_layers != geo_.n_layers || h.n_kv_heads != geo_.n_kv_heads || h.head_dim_k != geo_.k.head_dim ||
        h.head_dim_v != geo_.v.head_dim)
        return fail(KVRT_ERROR_INVALID_ARGUMENT,
                    "the state's geometry (layers %u, KV heads %u, head dims %u, %u) differs from the cache's (%u, %u, "
                    "%u, %u)",
                    h.n_layers, h.n_kv_heads, h.head_dim_k, h.head_dim_v, geo_.n_layers, geo_.n_kv_heads,
                    geo_.k.head_dim, geo_.v.head_dim);
    if (bool(h.flags & state::kFlagDeferredRope) != deferred_)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "the state's K is stored %s, the cache %s",
                    deferred_ ? "rotated" : "before rotation (deferred RoPE)",
                    deferred_ ? "defers RoPE" : "stores it rotated");
    if (seq < 0)
        for (int32_t s : plan.desc.seq_ids)
            if (static_cast<uint32_t>(s) >= geo_.max_seqs)
                return fail(KVRT_ERROR_INVALID_ARGUMENT, "the state uses sequence %d; the cache has ids 0..%u", s,
                            geo_.max_seqs - 1);
    return KVRT_SUCCESS;
}

Result CellLayout::load(int32_t seq, const state::Plan& plan) {
    const state::Description& d = plan.desc;
    const uint32_t n = d.header.n_cells;
    kv::CellTable& t = c_.table_;
    const uint32_t cap = t.capacity();
    if (seq < 0 && n > cap) return fail(KVRT_ERROR_CACHE_FULL, "the state holds %u cells, the cache has %u", n, cap);
    std::vector<uint32_t> at(n);
    std::vector<kv::Token> tokens(n);
    bool saved_cells = true;
    for (uint32_t i = 0; i < n; ++i) {
        const state::CellRecord& c = d.cells[i];
        tokens[i] = seq < 0 ? kv::Token{c.pos, d.seq_ids.data() + c.seq_begin, c.n_seq} : kv::Token{c.pos, &seq, 1};
        saved_cells = saved_cells && c.cell < cap;
    }

    // The table changes in place; the transaction's journal puts it back if
    // anything after fails.
    vk::Transaction tx(&c_, nullptr, c_.own_);
    auto undo = std::make_shared<kv::LoadUndo>();
    if (seq < 0) {
        try {
            undo->whole = std::make_shared<kv::CellTable>(t);
        } catch (const std::bad_alloc&) {
            return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "out of host memory for the cache's cell table");
        }
        t.clear();
        tx.on_undo([&t, undo]() { undo->run(t); });
        // The saved cells when they exist here, else the lowest ones in order.
        for (uint32_t i = 0; i < n; ++i) at[i] = saved_cells ? d.cells[i].cell : i;
    } else {
        // Cells free before the load first (the saved ones when all are free,
        // so a swapped-out sequence comes back where it was): rows written
        // there cannot harm the cache as it was, whatever happens on the
        // device. Only when those are too few, also the sequence's own.
        for (uint32_t i = 0; i < n && saved_cells; ++i) saved_cells = t.cell_is_empty(d.cells[i].cell);
        uint32_t k = n;
        if (saved_cells)
            for (uint32_t i = 0; i < n; ++i) at[i] = d.cells[i].cell;
        else
            k = kv::first_free_cells(t, n, at.data());
        KVRT_TRY(t.remove_seq(seq, &undo->removed));
        tx.on_undo([&t, undo]() { undo->run(t); });
        if (k < n) k = kv::first_free_cells(t, n, at.data());
        if (k < n) return fail(KVRT_ERROR_CACHE_FULL, "the state holds %u cells, the cache has %u free for it", n, k);
    }
    // A saved table may hold one (sequence, position) pair in several cells
    // (an open token tree; seq_div merging positions).
    KVRT_TRY(t.plan(tokens.data(), n, &undo->placement, at.data(), true));
    KVRT_TRY(t.apply(undo->placement));
    if (c_.group_) return c_.load_group(tx, seq, plan, at);

    LoadRows k, v;
    KVRT_TRY(make_rows(plan, Array::K, c_.geo_.k, c_.geo_.n_kv_heads, nullptr, &k));
    KVRT_TRY(make_rows(plan, Array::V, c_.geo_.v, c_.geo_.n_kv_heads, nullptr, &v));
    KVRT_TRY(tx.begin());
    if (n) KVRT_TRY(c_.record_writes(tx.stream(), n, at.data(), -1, k.src, v.src));
    // Past a timed-out wait the rows land later: the new table describes them.
    tx.keep_on_timeout();
    return tx.finish();
}

Result Cache::load_group(vk::Transaction& tx, int32_t seq, const state::Plan& plan, const std::vector<uint32_t>& at) {
    const state::Description& d = plan.desc;
    const uint32_t n = d.header.n_cells;
    const bool saved_group = d.header.flags & state::kFlagWindowGroup;
    // The group's records: the state's, or, from a state without a group,
    // every cell for all its sequences (its windowed rows are the cells').
    std::vector<state::GroupRecord> records;
    const std::vector<state::GroupRecord>* group = &d.group;
    if (!saved_group) {
        records.resize(n);
        for (uint32_t i = 0; i < n; ++i) records[i] = {i, d.cells[i].seq_begin, d.cells[i].n_seq};
        group = &records;
    }
    const std::vector<int32_t>& group_ids = saved_group ? d.group_seq_ids : d.seq_ids;
    const uint32_t n_group = static_cast<uint32_t>(group->size());

    // The new group table and each record's group cell.
    std::vector<kv::Token> tokens(n_group);
    GroupLoad g_load;
    for (uint32_t i = 0; i < n_group; ++i) {
        const state::GroupRecord& g = (*group)[i];
        tokens[i] = seq < 0 ? kv::Token{d.cells[g.record].pos, group_ids.data() + g.seq_begin, g.n_seq}
                            : kv::Token{d.cells[g.record].pos, &seq, 1};
        g_load.cells.push_back(at[g.record]);
    }
    KVRT_TRY(group_->plan_load(seq, tokens, &g_load));
    tx.on_undo(g_load.undo_table);

    // The rows, layer by layer: a windowed layer's are the group's records
    // (from a state without a group: those of every cell).
    KVRT_TRY(tx.begin());
    for (uint32_t l = 0; l < geo_.n_layers; ++l) {
        const bool windowed = geo_.in_window_group(l);
        const uint32_t rows = windowed ? n_group : n;
        if (!rows) continue;
        for (Array array : {Array::K, Array::V}) {
            LoadRows r;
            KVRT_TRY(make_rows(plan, array, array == Array::K ? geo_.k : geo_.v, geo_.n_kv_heads, nullptr, &r,
                               static_cast<int32_t>(l)));
            if (windowed)
                KVRT_TRY(group_->record_rows(tx.stream(), array, rows, g_load.group_cells.data(), l, r.src));
            else
                KVRT_TRY(record_array(tx.stream(), array, rows, at.data(), l, 0, r.src));
        }
    }
    // The group's table and links; the undo puts them back (the cache's
    // table has its own entry in the journal).
    tx.on_undo(group_->commit_load(g_load));
    tx.keep_on_timeout();
    return tx.finish();
}

Result StaticLayout::load(int32_t seq, const state::Plan& plan) {
    const state::Description& d = plan.desc;
    // Tokens per sequence in rising position order (a cell shared by several
    // sequences becomes a row of each one's window), the newest S-1 kept.
    std::vector<std::vector<std::pair<int32_t, uint32_t>>> per_seq(c_.geo_.max_seqs);  // (pos, record)
    for (uint32_t i = 0; i < d.header.n_cells; ++i) {
        const state::CellRecord& c = d.cells[i];
        for (uint32_t j = 0; j < c.n_seq; ++j) {
            const int32_t s = seq >= 0 ? seq : d.seq_ids[c.seq_begin + j];
            per_seq[static_cast<size_t>(s)].emplace_back(c.pos, i);
        }
    }
    std::vector<uint32_t> order;
    std::vector<int32_t> seq_of;
    std::vector<kv::Token> tokens;
    const uint32_t W = geometry_.window_rows;
    for (uint32_t s = 0; s < c_.geo_.max_seqs; ++s) {
        auto& list = per_seq[s];
        std::sort(list.begin(), list.end());
        const size_t first = list.size() > W ? list.size() - W : 0;
        for (size_t i = first; i < list.size(); ++i) {
            order.push_back(list[i].second);
            seq_of.push_back(static_cast<int32_t>(s));
            tokens.push_back(kv::Token{list[i].first, nullptr, 1});
        }
    }
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i].seq_ids = &seq_of[i];
    LoadRows k, v;
    KVRT_TRY(make_rows(plan, Array::K, c_.geo_.k, c_.geo_.n_kv_heads, &order, &k));
    KVRT_TRY(make_rows(plan, Array::V, c_.geo_.v, c_.geo_.n_kv_heads, &order, &v));

    // Empty the sequences being replaced, then append; on failure the table
    // and the windows as they were come back.
    kv::CellTable table_before = c_.table_;
    std::vector<kv::StaticWindow> windows_before = windows_;
    Result r = seq < 0 ? (clear(), KVRT_SUCCESS) : seq_rm(seq, -1, -1);
    if (r == KVRT_SUCCESS && !tokens.empty())
        r = append(nullptr, tokens.data(), static_cast<uint32_t>(tokens.size()), -1, &k.src, &v.src, nullptr);
    if (r != KVRT_SUCCESS && r != KVRT_ERROR_TIMEOUT) {
        std::swap(c_.table_, table_before);
        windows_ = std::move(windows_before);
    }
    return r;
}

Result PagedLayout::plan_group_load(int32_t seq, const state::Plan& plan,
                                    const std::vector<std::vector<uint32_t>>& per_seq,
                                    uint32_t first, uint32_t last, GroupLoad* out) const {
    const state::Description& d = plan.desc;
    const uint32_t n = d.header.n_cells;
    const bool saved_group = d.header.flags & state::kFlagWindowGroup;
    // Each record's group record (a state without a group: itself, for all
    // its sequences).
    std::vector<int32_t> group_of(n, -1);
    for (size_t j = 0; j < d.group.size(); ++j) group_of[d.group[j].record] = static_cast<int32_t>(j);
    const auto held = [&](uint32_t record, int32_t s) {
        if (!saved_group) return true;
        const int32_t j = group_of[record];
        if (j < 0) return false;
        if (seq >= 0) return true;  // a sequence state's records are the sequence's
        const state::GroupRecord& g = d.group[static_cast<size_t>(j)];
        const int32_t* ids = d.group_seq_ids.data() + g.seq_begin;
        return std::binary_search(ids, ids + g.n_seq, s);
    };
    // Per loaded cell of the pool, its group token.
    std::vector<int32_t> token_of(c_.geo_.capacity, -1);
    std::vector<int32_t> pos;
    std::vector<std::vector<int32_t>> seqs;
    for (uint32_t s = first; s < last; ++s) {
        const std::vector<uint32_t>& list = per_seq[s];
        for (uint32_t t = 0; t < list.size(); ++t) {
            if (!held(list[t], static_cast<int32_t>(s))) continue;
            const uint32_t c = pool_.slot(static_cast<int32_t>(s), t);
            if (token_of[c] < 0) {
                token_of[c] = static_cast<int32_t>(out->cells.size());
                out->cells.push_back(c);
                out->rows.push_back(saved_group ? static_cast<uint32_t>(group_of[list[t]]) : list[t]);
                pos.push_back(d.cells[list[t]].pos);
                seqs.emplace_back();
            }
            seqs[static_cast<size_t>(token_of[c])].push_back(static_cast<int32_t>(s));
        }
    }
    std::vector<kv::Token> tokens(out->cells.size());
    for (size_t i = 0; i < tokens.size(); ++i)
        tokens[i] = {pos[i], seqs[i].data(), static_cast<uint32_t>(seqs[i].size())};
    return c_.group_->plan_load(seq, tokens, out);
}

Result Cache::record_group_load(vk::Stream& stream, const state::Plan& plan, const std::vector<uint32_t>& cells,
                                const std::vector<uint32_t>& order, const GroupLoad& group) {
    for (uint32_t l = 0; l < geo_.n_layers; ++l) {
        const bool windowed = geo_.in_window_group(l);
        const uint32_t rows = static_cast<uint32_t>(windowed ? group.cells.size() : cells.size());
        if (!rows) continue;
        for (Array array : {Array::K, Array::V}) {
            LoadRows r;
            KVRT_TRY(make_rows(plan, array, array == Array::K ? geo_.k : geo_.v, geo_.n_kv_heads,
                               windowed ? &group.rows : &order, &r, static_cast<int32_t>(l)));
            if (windowed)
                KVRT_TRY(group_->record_rows(stream, array, rows, group.group_cells.data(), l, r.src));
            else
                KVRT_TRY(record_array(stream, array, rows, cells.data(), l, 0, r.src));
        }
    }
    return KVRT_SUCCESS;
}


Result PagedLayout::load(int32_t seq, const state::Plan& plan) {
    const state::Description& d = plan.desc;
    const uint32_t B = c_.geo_.block_size;
    const uint32_t first = seq < 0 ? 0 : uint32_t(seq), last = seq < 0 ? c_.geo_.max_seqs : first + 1;
    // Each loaded sequence's records in rising position order (saved order
    // among equal positions), and what each sequence held before.
    std::vector<std::vector<uint32_t>> per_seq;
    std::vector<View> before(last - first);
    std::vector<uint32_t> cells, order;
    size_t n_set = 0, n_drop = 0;
    // What puts the table back: each replaced sequence as it was (their
    // sizes are what the load changes in the table).
    auto saved = std::make_shared<std::vector<kv::SeqRemoval>>();
    try {
        per_seq.resize(c_.geo_.max_seqs);
        for (uint32_t i = 0; i < d.header.n_cells; ++i) {
            const state::CellRecord& c = d.cells[i];
            for (uint32_t j = 0; j < c.n_seq; ++j)
                per_seq[size_t(seq >= 0 ? seq : d.seq_ids[c.seq_begin + j])].push_back(i);
        }
        for (uint32_t s = first; s < last; ++s) {
            std::vector<uint32_t>& list = per_seq[s];
            std::stable_sort(list.begin(), list.end(),
                             [&](uint32_t a, uint32_t b) { return d.cells[a].pos < d.cells[b].pos; });
            KVRT_TRY(view(int32_t(s), &before[s - first]));
            n_set += list.size();
            n_drop += before[s - first].n_tokens;
        }
        cells.reserve(n_set);
        order.reserve(n_set);
        saved->resize(last - first);
    } catch (const std::bad_alloc&) {
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "out of host memory to load %u cells", d.header.n_cells);
    }
    for (uint32_t s = first; s < last; ++s) KVRT_TRY(c_.table_.save_seq(int32_t(s), &(*saved)[s - first]));
    KVRT_TRY(reserve(n_set, n_drop));
    // The pool's undo record gives back what the load changes in it, the
    // saved sequences the table.
    auto restore = [this, saved]() {
        pool_.rewind();
        c_.table_.restore_seqs(saved->data(), saved->size());
    };
    pool_.mark();

    // The pool: the replaced sequences emptied, then each loaded one in turn.
    // A whole-cache state keeps its sharing where it can: a sequence whose
    // first tokens are the same saved cells as an earlier sequence's maps
    // that one's blocks for as many whole blocks as they fill (a fork cut
    // back); its other tokens get blocks of their own. Loaded blocks hold no
    // token ids, so they are never registered (the registry is cleared by a
    // whole-cache load).
    for (uint32_t s = first; s < last; ++s) (void)pool_.truncate(int32_t(s), 0);
    if (seq < 0) pool_.clear_registry();
    std::vector<int32_t> ids, pos;
    Result r = KVRT_SUCCESS;
    for (uint32_t s = first; s < last && r == KVRT_SUCCESS; ++s) {
        const std::vector<uint32_t>& list = per_seq[s];
        if (list.empty()) continue;
        uint32_t shared = 0, from = 0;
        for (uint32_t t = first; t < s; ++t) {
            const std::vector<uint32_t>& other = per_seq[t];
            const size_t most = std::min(list.size(), other.size());
            size_t k = 0;
            while (k < most && list[k] == other[k]) ++k;
            const uint32_t whole = uint32_t(k / B * B);
            if (whole > shared) shared = whole, from = t;
        }
        if (shared) {
            r = pool_.fork(int32_t(from), int32_t(s));
            if (r == KVRT_SUCCESS) r = pool_.truncate(int32_t(s), shared);
            if (r != KVRT_SUCCESS) break;
        }
        const uint32_t n = uint32_t(list.size()) - shared;
        try {
            ids.assign(n, kv::BlockPool::unknown_token);
            pos.resize(n);
        } catch (const std::bad_alloc&) {
            r = fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "out of host memory to load %u tokens", n);
            break;
        }
        for (uint32_t i = 0; i < n; ++i) pos[i] = d.cells[list[shared + i]].pos;
        if (n) r = pool_.append(int32_t(s), n, ids.data(), pos.data(), &work_);
        if (r == KVRT_SUCCESS && !work_.copies.empty())
            r = fail(KVRT_ERROR_INTERNAL, "paged layout: loading sequence %u copied a block", s);
        for (uint32_t i = 0; i < n && r == KVRT_SUCCESS; ++i) {
            cells.push_back(pool_.slot(int32_t(s), shared + i));
            order.push_back(list[shared + i]);
        }
    }
    if (r != KVRT_SUCCESS) {
        restore();
        return r;
    }

    // The window group's cells: one per loaded cell whose record the group
    // held for the sequence (for all the sequences that map the cell).
    GroupLoad group;
    if (c_.group_) r = plan_group_load(seq, plan, per_seq, first, last, &group);
    if (r != KVRT_SUCCESS) {
        restore();
        return r;
    }
    // From here on, the group's table too.
    const auto undo_tables = [restore, group_table = group.undo_table]() {
        if (group_table) group_table();
        restore();
    };

    // The rows, in one submission.
    LoadRows k, v;
    const uint32_t n = uint32_t(cells.size());
    vk::Transaction tx(&c_, nullptr, c_.own_);
    if (!c_.group_) {
        r = make_rows(plan, Array::K, c_.geo_.k, c_.geo_.n_kv_heads, &order, &k);
        if (r == KVRT_SUCCESS) r = make_rows(plan, Array::V, c_.geo_.v, c_.geo_.n_kv_heads, &order, &v);
        if (r == KVRT_SUCCESS) r = tx.begin();
        if (r == KVRT_SUCCESS && n) r = c_.record_writes(tx.stream(), n, cells.data(), -1, k.src, v.src);
    } else {
        r = tx.begin();
        if (r == KVRT_SUCCESS) r = c_.record_group_load(tx.stream(), plan, cells, order, group);
    }

    // The table: every replaced sequence leaves its cells, then every loaded
    // one joins its new ones (fresh rows: no pending shift).
    for (uint32_t s = first; s < last && r == KVRT_SUCCESS; ++s) {
        const View& b = before[s - first];
        drop_.clear();
        for (size_t i = 0; i < b.table.size(); ++i)
            for (uint32_t j = 0; j < B && uint64_t(i) * B + j < b.n_tokens; ++j) drop_.push_back(b.table[i] * B + j);
        r = c_.table_.mirror_seq(int32_t(s), drop_.data(), drop_.size(), nullptr, 0);
    }
    for (uint32_t s = first; s < last && r == KVRT_SUCCESS; ++s) {
        set_.clear();
        const uint32_t len = pool_.seq_length(int32_t(s));
        for (uint32_t t = 0; t < len; ++t) {
            const uint32_t c = pool_.slot(int32_t(s), t);
            set_.push_back({c, pool_.positions()[c], 0});
        }
        r = c_.table_.mirror_seq(int32_t(s), nullptr, 0, set_.data(), set_.size());
    }
    if (r != KVRT_SUCCESS) {
        undo_tables();
        return r;
    }
    if (c_.group_) {
        auto undo_links = c_.group_->commit_load(group);
        tx.on_undo([undo_tables, undo_links]() {
            undo_links();
            undo_tables();
        });
    } else {
        tx.on_undo(undo_tables);
    }
    // Past a timed-out wait the rows land later: the new pool and table describe them.
    tx.keep_on_timeout();
    r = tx.finish();
    // Kept: done, or submitted and landing later. Otherwise the transaction
    // runs the undo (the rewind) as it goes.
    if (r == KVRT_SUCCESS || r == KVRT_ERROR_TIMEOUT) pool_.commit();
    return r;
}

Result Cache::state_load(int32_t seq, const void* data, uint64_t size) {
    state::Plan plan;
    KVRT_TRY(state::parse(data, size, &plan));
    KVRT_TRY(check_state_fits(seq, plan));
    if (plan.desc.header.flags & state::kFlagWindowGroup) {
        if (!group_)
            return fail(KVRT_ERROR_INVALID_ARGUMENT,
                        "the state keeps its windowed layers' rows in a window group (the cells their windows still "
                        "see); load it into a cache with the same windowed layers and a kvrt_window_layout_desc");
        for (uint32_t l = 0; l < geo_.n_layers; ++l)
            if (plan.desc.windowed[l] != geo_.in_window_group(l))
                return fail(KVRT_ERROR_INVALID_ARGUMENT,
                            "layer %u is %s in the state but %s in the cache's window group", l,
                            plan.desc.windowed[l] ? "windowed" : "not windowed",
                            geo_.in_window_group(l) ? "is" : "is not");
    }
    return layout_->load(seq, plan);
}

Result Cache::seq_swap_out(int32_t seq, void* out, uint64_t* size) {
    if (seq < 0 || seq >= static_cast<int32_t>(geo_.max_seqs))
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "sequence %d is out of range (0..%u)", seq, geo_.max_seqs - 1);
    KVRT_TRY(state_save(seq, out, size));
    if (out) KVRT_TRY(seq_rm(seq, -1, -1));
    return KVRT_SUCCESS;
}

Result Cache::check_swap_in(int32_t seq) const {
    if (seq < 0 || seq >= static_cast<int32_t>(geo_.max_seqs))
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "sequence %d is out of range (0..%u)", seq, geo_.max_seqs - 1);
    if (table_.seq_cell_count(seq) != 0)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "sequence %d holds %u tokens; swap in needs it empty", seq,
                    table_.seq_cell_count(seq));
    return KVRT_SUCCESS;
}

Result Cache::seq_swap_in(int32_t seq, const void* data, uint64_t size) {
    KVRT_TRY(check_swap_in(seq));
    return state_load(seq, data, size);
}

}  // namespace kvrt::cache
