// The paged layout: a kv::BlockPool decides which cell holds each token
// (cell = block * B + slot), shares full blocks between sequences with
// copy-on-write, and registers them under their tokens for prefix reuse
// (kvrt_cache_paged_admit). The cell table mirrors what every sequence sees,
// so the kernels (stores, attention, shifts, reads) run unchanged on the
// pool's slots.
//
// Every mutation goes the same way: check and reserve everything (host
// memory, the table's index nodes); mark the pool's undo record and change
// the pool (which checks its own budget first and changes nothing on
// failure); compute from the table as it was what each changed sequence now
// sees (the cells it leaves and the cells it joins, with positions and
// pending shifts); record the device work (block copies, row writes); and
// only when that succeeded, edit the table and commit the pool. A failure in
// between rewinds the pool to the mark, at a cost proportional to what
// changed.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "cache/layout.hpp"
#include "kv/block_pool.hpp"

namespace kvrt::cache {

struct GroupLoad;

class PagedLayout final : public Layout {
public:
    static Result create(Cache& cache, const kvrt_cache_desc& desc, std::unique_ptr<Layout>* out,
                         std::unique_ptr<Arena>* out_arena);

    Result store(vk::Stream* stream, const kv::Token* tokens, uint32_t n, int32_t layer, const Source* k,
                 const Source* v, uint32_t* out_cells, bool tree) override;
    // A suffix of each sequence only; seq_cp copies whole sequences into
    // empty ones (a fork); seq_add moves a suffix (copying shared blocks).
    Result seq_rm(int32_t seq, int32_t p0, int32_t p1) override;
    Result seq_cp(int32_t src, int32_t dst, int32_t p0, int32_t p1) override;
    Result seq_add(int32_t seq, int32_t p0, int32_t p1, int32_t delta) override;
    Result seq_div(int32_t seq, int32_t p0, int32_t p1, int32_t d) override;
    Result seq_keep(int32_t seq) override;
    void clear() override;
    // The tree's tokens (checked cells, keep[i] for the kept ones) must be
    // their sequences' last tokens.
    Result tree_accept(uint32_t n, const int32_t* positions, const int32_t* seq_ids, const uint32_t* cells,
                       const std::vector<uint8_t>& keep) override;
    Result load(int32_t seq, const state::Plan& plan) override;
    Result require_cells(const char* op) const override;
    Result seq_cells(int32_t seq, std::vector<uint32_t>* out) const override;
    void drop_placed(int32_t seq, const uint32_t* cells, uint32_t n) override;

    // kvrt_cache_paged_admit / _append / _fork / _set_sharing /
    // _clear_registry / _get_stats / _get_cells.
    Result admit(int32_t seq, uint32_t n, const int32_t* token_ids, const int32_t* positions, uint64_t salt,
                 uint32_t* out_n_cached, uint32_t* out_cells);
    Result append(vk::Stream* stream, int32_t seq, uint32_t n, const int32_t* token_ids, const int32_t* positions,
                  uint32_t* out_cells);
    Result fork(int32_t src, int32_t dst);
    Result set_sharing(int32_t seq, bool on);
    Result clear_registry();
    Result stats(kvrt_paged_stats* out) const;
    Result get_cells(int32_t seq, uint32_t first, uint32_t max_cells, uint32_t* out_cells,
                     uint32_t* out_n_tokens) const;
    // Checks the block pool, the table, and that the table shows every
    // sequence exactly its block table's tokens (tests).
    Result verify() const;

private:
    explicit PagedLayout(Cache& cache) : Layout(cache) {}

    // A sequence's block table and length before a mutation.
    struct View {
        int32_t seq = 0;
        std::vector<uint32_t> table;
        uint32_t n_tokens = 0;
    };
    // The tokens of one sequence in a store or append.
    struct Run {
        int32_t seq = 0;
        std::vector<int32_t> ids, pos;
        std::vector<uint32_t> token_index;  // index of each in the batch
        View before;
        bool copied = false;
    };
    // The window group's side of the edits: block copies give the group rows
    // of the copied cells group cells of their own (copies of the rows,
    // recorded with the blocks'), and a cell that moves moves its group cell.
    // `set` holds group-cell edits by sequence, each sequence's ending at its
    // set_end entry.
    struct WindowEdits {
        std::vector<uint32_t> from, to;  // group rows to copy
        std::vector<uint32_t> cells;     // the cache's cell linked to to[i]
        std::vector<kv::CellSet> set;
        std::vector<size_t> set_end;
        uint32_t cursor = 0;  // where the search for free group cells goes on
    };
    // One sequence's edits in drop_ / set_: they end at drop_end and set_end
    // (and start where the previous span ends).
    struct EditSpan {
        int32_t seq = 0;
        size_t drop_end = 0, set_end = 0;
    };

    Result view(int32_t seq, View* out) const;
    Result reserve(size_t n_set, size_t n_drop);
    // What `before.seq` now sees against what it saw, as cell-table edits.
    void diff(const View& before, const std::vector<kv::BlockCopy>& copies, std::vector<uint32_t>* drop,
              std::vector<kv::CellSet>* set) const;
    Result apply(int32_t seq, const std::vector<uint32_t>& drop, const std::vector<kv::CellSet>& set,
                 const WindowEdits* group = nullptr);
    Result mirror(const View& before, const std::vector<kv::BlockCopy>& copies);
    Result commit(const std::vector<EditSpan>& spans, const WindowEdits* group = nullptr);
    // Cuts `seq` to its first `keep` tokens (forget: unregistering what it
    // drops, for rows never written).
    Result cut(int32_t seq, uint32_t keep, bool forget);
    Result split_runs(const kv::Token* tokens, uint32_t n, std::vector<Run>* out) const;
    Result extend(vk::Stream* stream, std::vector<Run>& runs, uint32_t n, int32_t layer, const Source* k,
                  const Source* v, uint32_t* out_cells);
    // The load's window group (state.cpp): places the group's cells of the
    // loaded cells (per_seq: each loaded sequence's records, in token order)
    // in its table (WindowGroup::plan_load: out->undo_table gives it back).
    Result plan_group_load(int32_t seq, const state::Plan& plan, const std::vector<std::vector<uint32_t>>& per_seq,
                           uint32_t first, uint32_t last, GroupLoad* out) const;
    // Records the copies of whole blocks and the group's rows of them, as
    // one operation named `label` in `s`.
    Result record_block_copies(vk::Stream& s, const char* label, const std::vector<kv::BlockCopy>& copies,
                               const WindowEdits& group);

    // The window group's side (paged_window.cpp). window_place: checks the
    // windows of the runs' sequences, drops what they no longer see and
    // places the batch's tokens (in batch order) in the group (applied; undo
    // with rollback until the group changes again).
    Result window_place(const std::vector<Run>& runs, uint32_t n, kv::Placement* out);
    // Adds to `out` the group's side of the cache's edits set[0..n_set) of
    // `seq` (before they are applied), with `copies` the mutation's block
    // copies. KVRT_ERROR_CACHE_FULL when the group has no cell for a copy.
    Result window_edits(int32_t seq, const kv::CellSet* set, size_t n_set, const std::vector<kv::BlockCopy>& copies,
                        WindowEdits* out) const;
    // Applies the group's side of one sequence's edits, after the cache's:
    // the group cells of the dropped cells lose `seq`, then `group`'s sets
    // [set_begin, set_end) apply and its copies are linked.
    Result window_mirror(int32_t seq, const uint32_t* drop, size_t n_drop, const WindowEdits* group, size_t span);
    // admit: the most leading blocks of the prompt whose windowed rows the
    // group still holds for what the first computed token and the ones after
    // it see.
    Result window_admit_blocks(int32_t seq, uint32_t n, const int32_t* token_ids, const int32_t* positions,
                               uint64_t salt, uint32_t* out_max_blocks) const;
    // Plans group cells for tokens n_cached .. n - 1 of a prompt.
    Result window_admit_plan(int32_t seq, uint32_t n, const int32_t* positions, uint32_t n_cached,
                             kv::Placement* out) const;
    // After admit mapped n_cached tokens of `seq`: places the rest (the
    // planned `group`) and joins the group cells of the cached rows that the
    // computed tokens see.
    Result window_admit(int32_t seq, uint32_t n, const int32_t* positions, uint32_t n_cached, kv::Placement& group);

    // The blocks (their undo record gives a failed call's changes back), and
    // reusable work lists.
    kv::BlockPool pool_;
    kv::BlockWork work_;
    std::vector<uint32_t> drop_;
    std::vector<kv::CellSet> set_;
    std::vector<uint32_t> group_drop_;  // group cells to drop
};

}  // namespace kvrt::cache
