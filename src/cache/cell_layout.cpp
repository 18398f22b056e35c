// The cell layout's operations; its state load is in state.cpp.
#include "cache/cell_layout.hpp"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "cache/cache.hpp"
#include "kv/compaction.hpp"
#include "ops/rows.hpp"

namespace kvrt::cache {

namespace {

// A placed batch, so that it can be given back if its data never reaches the
// device: exactly (rollback) while it is the table's latest change, otherwise
// cell by cell, freeing each cell that still holds the token placed there.
struct PlacedBatch {
    kv::Placement placement;
    std::vector<uint64_t> epochs;  // of placement.cells(), right after apply

    void remember(const kv::CellTable& table) {
        epochs.clear();
        for (uint32_t c : placement.cells()) epochs.push_back(table.cell_epoch(c));
    }

    void give_back(kv::CellTable& table) {
        if (!placement.applied()) return;
        // The exact rollback's refusal is expected, and must not replace the
        // detail message of the failure that is being undone.
        const std::string message = last_error_message();
        if (table.rollback(placement) == KVRT_SUCCESS) return;
        (void)fail(KVRT_SUCCESS, "%s", message.c_str());
        for (size_t i = 0; i < epochs.size(); ++i) (void)table.release_cell(placement.cells()[i], epochs[i]);
        epochs.clear();
    }
};

}  // namespace

Result CellLayout::create(Cache& cache, const kvrt_cache_desc& desc, std::unique_ptr<Layout>* out,
                          std::unique_ptr<Arena>* out_arena) {
    std::unique_ptr<CellArena> arena;
    KVRT_TRY(CellArena::create(cache.ctx_, cache.geo_, desc.label, &arena));
    *out = std::unique_ptr<Layout>(new CellLayout(cache));
    *out_arena = std::move(arena);
    return KVRT_SUCCESS;
}

double CellLayout::fragmentation() const { return c_.table_.fragmentation(); }

Result CellLayout::store(vk::Stream* stream, const kv::Token* tokens, uint32_t n, int32_t layer, const Source* k,
                         const Source* v, uint32_t* out_cells, bool tree) {
    if (!k) return place(tokens, n, out_cells, tree);
    KVRT_TRY(c_.check_write(n, layer, *k, *v));
    if (stream) KVRT_TRY(stream->require_recording());
    auto batch = std::make_shared<PlacedBatch>();
    KVRT_TRY(c_.table_.plan(tokens, n, &batch->placement, nullptr, tree));
    if (n == 0) return KVRT_SUCCESS;
    auto group = c_.group_ ? std::make_shared<PlacedBatch>() : nullptr;
    if (group) KVRT_TRY(c_.group_->plan(tokens, n, tree, &group->placement));

    vk::Transaction tx(&c_, stream, c_.own_);
    KVRT_TRY(tx.begin());
    KVRT_TRY(c_.table_.apply(batch->placement));
    batch->remember(c_.table_);
    if (group) {
        KVRT_TRY(c_.group_->table().apply(group->placement));
        group->remember(c_.group_->table());
        c_.group_->link(batch->placement, group->placement);
    }
    tx.on_undo([this, batch, group]() {
        batch->give_back(c_.table_);
        if (!group) return;
        group->give_back(c_.group_->table());
        // Given back cell by cell, the two groups may differ: count again.
        c_.group_->forget_floors();
    });
    KVRT_TRY(c_.record_writes(tx.stream(), n, batch->placement.cells().data(), layer, *k, *v));
    KVRT_TRY(tx.finish());
    if (out_cells) std::copy(batch->placement.cells().begin(), batch->placement.cells().end(), out_cells);
    return KVRT_SUCCESS;
}

Result CellLayout::place(const kv::Token* tokens, uint32_t n, uint32_t* out_cells, bool tree) {
    kv::Placement p, group;
    KVRT_TRY(c_.table_.plan(tokens, n, &p, nullptr, tree));
    if (n == 0) return KVRT_SUCCESS;
    if (c_.group_) KVRT_TRY(c_.group_->plan(tokens, n, tree, &group));
    KVRT_TRY(c_.table_.apply(p));
    if (c_.group_) {
        KVRT_TRY(c_.group_->table().apply(group));
        c_.group_->link(p, group);
    }
    if (out_cells) std::copy(p.cells().begin(), p.cells().end(), out_cells);
    return KVRT_SUCCESS;
}

Result CellLayout::compact(vk::Stream* stream, double threshold, uint32_t max_moves, uint32_t* out_moved) {
    auto moves = std::make_shared<std::vector<kv::CellMove>>();
    KVRT_TRY(kv::plan_compaction(c_.table_, threshold, max_moves ? max_moves : UINT32_MAX, moves.get()));
    if (moves->empty()) return KVRT_SUCCESS;

    vk::Transaction tx(&c_, stream, c_.own_);
    KVRT_TRY(tx.begin());
    vk::Stream* s = &tx.stream();
    s->begin_op("compact");
    Result r = KVRT_SUCCESS;
    for (uint32_t l = 0; l < c_.geo_.n_layers && r == KVRT_SUCCESS; ++l) {
        if (c_.geo_.in_window_group(l)) continue;  // the group's rows do not move
        for (Array array : {Array::K, Array::V}) {
            const kv::RowGeometry& g = c_.arena_->rows(array);
            std::map<std::pair<size_t, size_t>, std::vector<ops::RowPair>> groups;
            for (const kv::CellMove& m : *moves) {
                const RowLocation from = c_.arena_->locate(array, l, m.src_cell);
                const RowLocation to = c_.arena_->locate(array, l, m.dst_cell);
                groups[{from.piece, to.piece}].push_back(
                    {static_cast<uint32_t>(from.offset / 4), static_cast<uint32_t>(to.offset / 4)});
            }
            const RowLocation any = c_.arena_->locate(array, l, 0);
            for (const auto& [pieces, rows] : groups) {
                r = ops::record_copy_rows(*s, {any.buffer, pieces.first, g.stride},
                                          {any.buffer, pieces.second, g.stride},
                                          g.stride, rows);
                if (r != KVRT_SUCCESS) break;
            }
            if (r != KVRT_SUCCESS) break;
        }
    }
    s->end_op();
    // Rows were copied only into free cells (or not at all): nothing to undo.
    KVRT_TRY(r);
    KVRT_TRY(tx.finish());
    // The metadata follows the data: at once for a synchronous call (the copy
    // completed); for a stream, now, so that later operations recorded in it
    // see the new cells, with an undo that moves cells back if the recording
    // never reaches the device (registered after commit: for the stream only).
    KVRT_TRY(c_.table_.apply_moves(*moves));
    if (c_.group_) c_.group_->move(*moves, false);
    tx.on_undo([this, moves]() {
        for (auto it = moves->rbegin(); it != moves->rend(); ++it) {
            if (c_.table_.cell_is_empty(it->dst_cell) || !c_.table_.cell_is_empty(it->src_cell)) continue;
            const kv::CellMove back{it->dst_cell, it->src_cell};
            (void)c_.table_.apply_moves(&back, 1);
            if (c_.group_) c_.group_->move({back}, false);
        }
    });
    if (out_moved) *out_moved = static_cast<uint32_t>(moves->size());
    return KVRT_SUCCESS;
}

Result CellLayout::seq_rm(int32_t seq, int32_t p0, int32_t p1) {
    KVRT_TRY(c_.table_.seq_rm(seq, p0, p1));
    // The group's cells of a sequence are among the cache's: the same
    // removal cannot fail there.
    if (c_.group_) KVRT_TRY(c_.group_->table().seq_rm(seq, p0, p1));
    return KVRT_SUCCESS;
}

Result CellLayout::seq_cp(int32_t src, int32_t dst, int32_t p0, int32_t p1) {
    KVRT_TRY(c_.table_.seq_cp(src, dst, p0, p1));
    if (c_.group_) {
        KVRT_TRY(c_.group_->table().seq_cp(src, dst, p0, p1));
        c_.group_->copy_floor(src, dst);
    }
    return KVRT_SUCCESS;
}

Result CellLayout::seq_add(int32_t seq, int32_t p0, int32_t p1, int32_t delta) {
    KVRT_TRY(c_.table_.seq_add(seq, p0, p1, delta));
    if (c_.group_) {
        KVRT_TRY(c_.group_->table().seq_add(seq, p0, p1, delta));
        c_.group_->unlink_moved();
    }
    return KVRT_SUCCESS;
}

Result CellLayout::seq_div(int32_t seq, int32_t p0, int32_t p1, int32_t d) {
    KVRT_TRY(c_.table_.seq_div(seq, p0, p1, d));
    if (c_.group_) {
        KVRT_TRY(c_.group_->table().seq_div(seq, p0, p1, d));
        c_.group_->unlink_moved();
    }
    return KVRT_SUCCESS;
}

Result CellLayout::seq_keep(int32_t seq) {
    KVRT_TRY(c_.table_.seq_keep(seq));
    if (c_.group_) KVRT_TRY(c_.group_->table().seq_keep(seq));
    return KVRT_SUCCESS;
}

void CellLayout::clear() {
    c_.table_.clear();
    if (c_.group_) c_.group_->table().clear();
}

Result CellLayout::tree_accept(uint32_t n, const int32_t* positions, const int32_t* seq_ids, const uint32_t* tree_cells,
                               const std::vector<uint8_t>& keep) {
    std::vector<uint32_t> cells;
    std::vector<int32_t> pos, seqs;
    try {
        for (uint32_t i = 0; i < n; ++i) {
            if (keep[i]) continue;
            cells.push_back(tree_cells[i]);
            pos.push_back(positions[i]);
            seqs.push_back(seq_ids[i]);
        }
    } catch (const std::bad_alloc&) {
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "out of host memory for a tree of %u tokens", n);
    }
    // The group's cells of the removed tokens (those it still holds), found
    // before the cache's cells change.
    std::vector<uint32_t> group;
    std::vector<int32_t> group_pos, group_seqs;
    try {
        for (size_t i = 0; c_.group_ && i < cells.size(); ++i) {
            const int32_t w = c_.group_->group_cell(cells[i]);
            if (w < 0 || !c_.group_->table().cell_has_seq(static_cast<uint32_t>(w), seqs[i])) continue;
            group.push_back(static_cast<uint32_t>(w));
            group_pos.push_back(pos[i]);
            group_seqs.push_back(seqs[i]);
        }
    } catch (const std::bad_alloc&) {
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "out of host memory for a tree of %u tokens", n);
    }
    // Checks every cell (distinct, still holding its token) before it
    // changes any.
    KVRT_TRY(c_.table_.remove_cells(cells.data(), pos.data(), seqs.data(), static_cast<uint32_t>(cells.size())));
    if (c_.group_)
        KVRT_TRY(c_.group_->table().remove_cells(group.data(), group_pos.data(), group_seqs.data(),
                                           static_cast<uint32_t>(group.size())));
    return KVRT_SUCCESS;
}


}  // namespace kvrt::cache
