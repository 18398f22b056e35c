// The window group of a cache (kvrt_window_layout_desc): the windowed layers
// keep their rows in a group of fewer cells of their own, that takes every
// token the cache takes and drops the rows no window can see any more. The
// cache's cells stay the public ones; each links to the group cell that
// holds its rows in the windowed layers. The cell and paged layouts hold one
// (a static cache's windows are already bounded).
//
// The group's rows live in a cell store of window_cells cells (its table,
// arena, device mirror and kernels: cell_store.hpp), private to the group;
// the group keeps the links between the two and, per sequence, how far down the group
// is known to hold every row of its windows.
#pragma once

#include <algorithm>
#include <functional>
#include <memory>
#include <vector>

#include "cache/arena.hpp"
#include "cache/cell_store.hpp"
#include "cache/types.hpp"
#include "core/result.hpp"
#include "kv/cell_table.hpp"
#include "vk/stream.hpp"

namespace kvrt::cache {

// The loaded cells of a cache with a window group: each one's group cell,
// and for the paged layout the state's row of it in the windowed layers.
// `undo_table` gives the group's table back as it was before the load placed
// them (WindowGroup::plan_load).
struct GroupLoad {
    std::vector<uint32_t> cells, group_cells, rows;  // cache cell, group cell, windowed-layer row
    std::function<void()> undo_table;
};

class WindowGroup {
public:
    // The group of `owner`, whose geometry names its cells and windows.
    static Result create(Cache& owner, const kvrt_cache_desc& desc, std::unique_ptr<WindowGroup>* out);
    ~WindowGroup();

    // The group's rows and their table.
    CellStore& rows() { return *rows_; }
    const CellStore& rows() const { return *rows_; }
    kv::CellTable& table();
    const kv::CellTable& table() const;

    // The group cell holding `cell`'s rows, or -1.
    int32_t group_cell(uint32_t cell) const;
    // Links `cell` to group cell `group`.
    void link(uint32_t cell, uint32_t group) {
        group_of_[cell] = static_cast<int32_t>(group);
        cell_of_[group] = cell;
    }
    // Links the cells of a placement applied to the cache and of one applied
    // to the group, token by token.
    void link(const kv::Placement& cells, const kv::Placement& group);
    // The group cells of `n` cells for `op` on a windowed layer;
    // KVRT_ERROR_INVALID_ARGUMENT for a cell out of range or without rows there.
    Result map_cells(const char* op, uint32_t n, const uint32_t* cells, std::vector<uint32_t>* out) const;

    // kvrt_cache_seq_window_pos_min.
    Result seq_pos_min(int32_t seq, int32_t* out_pos) const;
    // KVRT_ERROR_INVALID_STATE unless the group holds every row of `seq` that
    // a query at `lowest` or later sees in a windowed layer (with sinks below
    // `n_keep`).
    Result check(int32_t seq, int32_t lowest) const;
    // Before a batch of `n` tokens is placed (after the cache planned it):
    // checks that the group holds every row the windows of the batch's
    // sequences need from their lowest positions on, drops the group's rows
    // no query there or later sees, and plans the group's cells.
    Result plan(const kv::Token* tokens, uint32_t n, bool tree, kv::Placement* out);
    // Every sequence's rows are counted at its next check.
    void forget_floors() { std::fill(floors_.known.begin(), floors_.known.end(), 0); }
    // After seq_cp(src, dst): dst's floor is at least src's.
    void copy_floor(int32_t src, int32_t dst);
    // The group holds every row of `seq`'s windows from position `floor` on.
    void set_floor(int32_t seq, int32_t floor);
    // Follows cell moves of a compaction in the links (and back, for undo).
    void move(const std::vector<kv::CellMove>& moves, bool back);
    // After a position change applied to both tables: a cell shared by
    // sequences moves for all of them, its group cell only when it still
    // holds the moved sequence. A group cell left behind follows its cell
    // when one sequence uses it (the move becomes its pending shift) and is
    // freed otherwise (a window that needs it then fails its check).
    void unlink_moved();

    // Records the writes of windowed layer `layer` (source layer src_layer)
    // for the cells the group holds; the others are skipped.
    Result record_writes(vk::Stream& s, uint32_t n, const uint32_t* cells, uint32_t layer, uint32_t src_layer,
                         const Source& k, const Source& v);
    // Records the writes of `array` in windowed layer `layer` of the cache
    // for `n` group cells, from layer 0 of `src` (state loads).
    Result record_rows(vk::Stream& s, Array array, uint32_t n, const uint32_t* group_cells, uint32_t layer,
                       const Source& src);
    // Records copies of group rows from[i] -> to[i], every windowed layer.
    Result record_copies(vk::Stream& s, const std::vector<uint32_t>& from, const std::vector<uint32_t>& to);
    // kvrt_cache_attention in windowed layer `layer` of the cache; `tree`
    // (may be null): the queries are the tokens of a tree, in the cache's
    // cells.
    Result attention(vk::Stream* stream, int32_t layer, uint32_t n_queries, const int32_t* positions,
                     const int32_t* seq_ids, const Source& q, const Output& out, const kvrt_attention_params& params,
                     const Tree* tree);

    // State loads: places `tokens` (of sequence `seq`, or of every sequence
    // when seq < 0, which replace what it held) in the group's table, in
    // cells free before the load where enough are, else in any the load
    // leaves free; each token's cell goes to out->group_cells and the
    // table's undo to out->undo_table (the caller runs it if the load fails
    // later; a failure here leaves the table as it was). Its record is the
    // replaced sequence's cells, or for a whole load a copy of the table.
    // commit_load links the loaded cells and returns the undo of the links
    // it changed.
    Result plan_load(int32_t seq, const std::vector<kv::Token>& tokens, GroupLoad* out);
    std::function<void()> commit_load(const GroupLoad& group);

    // Checks that the group and the cache agree: every group cell belongs to
    // a cell in use with its position and a superset of its sequences, and
    // the cell maps back to it (tests).
    Result verify() const;

private:
    explicit WindowGroup(Cache& owner) : owner_(owner) {}

    Cache& owner_;
    std::unique_ptr<CellStore> rows_;
    // Each cell's group cell (-1: none) and each group cell's cell; a link
    // holds while both agree and the group cell is in use.
    std::vector<int32_t> group_of_;
    std::vector<uint32_t> cell_of_;
    // Per sequence, while `known`: the group holds every position of the
    // sequence's cells at or above `floor` (and below n_keep), so a window
    // that starts there needs no count.
    struct Floors {
        std::vector<int32_t> floor;
        std::vector<uint8_t> known;
    };
    mutable Floors floors_;
};

}  // namespace kvrt::cache
