// The KV cache object: a cell store (cell_store.hpp: geometry, cell table,
// device rows and the kernels over them) with a layout on top that places
// tokens (layout.hpp) and, for windowed layers that keep fewer rows, a window
// group (window_group.hpp). The cache is the front of the C API's cache
// calls: it validates what is common, records device work and commits it,
// and asks its layout for everything that depends on the arrangement.
#pragma once

#include <algorithm>
#include <functional>
#include <memory>
#include <vector>

#include "cache/cell_store.hpp"
#include "cache/layout.hpp"
#include "cache/types.hpp"
#include "cache/window_group.hpp"
#include "core/result.hpp"
#include "kv/cell_table.hpp"
#include "kv/geometry.hpp"
#include "kv/rope.hpp"
#include "ops/attention.hpp"
#include "state/state_format.hpp"
#include "vk/stream.hpp"
#include "vk/transaction.hpp"

namespace kvrt::cache {

class StaticLayout;
class PagedLayout;

class Cache : public CellStore {
public:
    static Result create(vk::Context& ctx, const kvrt_cache_desc& desc, std::unique_ptr<Cache>* out);
    ~Cache() override;

    // kvrt_cache_store: place and write, all or nothing. `stream` null:
    // synchronous. `tree`: the tokens form a token tree (checked by the
    // caller), whose siblings may share (sequence, position) pairs.
    Result store(vk::Stream* stream, const kv::Token* tokens, uint32_t n, int32_t layer, const Source& k,
                 const Source& v, uint32_t* out_cells, bool tree = false);
    // kvrt_cache_place.
    Result place(const kv::Token* tokens, uint32_t n, uint32_t* out_cells, bool tree = false);
    // kvrt_cache_write.
    Result write(vk::Stream* stream, uint32_t n, const uint32_t* cells, int32_t layer, const Source& k,
                 const Source& v);
    // kvrt_cache_read, kvrt_cache_read_raw, kvrt_cache_apply_shifts and
    // kvrt_cache_attention, for the cache's own layers or its window
    // group's.
    Result read(int32_t layer, uint32_t n, const uint32_t* cells, float* k_out, float* v_out) override;
    Result read_raw(int32_t layer, Array array, uint32_t n, const uint32_t* cells, void* out,
                    uint64_t out_bytes) override;
    Result apply_shifts(vk::Stream* stream) override;
    Result attention(vk::Stream* stream, int32_t layer, uint32_t n_queries, const int32_t* positions,
                     const int32_t* seq_ids, const Source& q, const Output& out, const kvrt_attention_params& params,
                     const Tree* tree = nullptr) override;
    // kvrt_cache_compact.
    Result compact(vk::Stream* stream, double threshold, uint32_t max_moves, uint32_t* out_moved);

    void fill_info(kvrt_cache_info* out) const;

    // Sequence operations of the C API that depend on the layout (the others
    // go to the table directly, after require_cells()).
    Result seq_rm(int32_t seq, int32_t p0, int32_t p1);
    Result seq_keep(int32_t seq);
    void clear();
    // KVRT_ERROR_UNSUPPORTED, naming `op`, unless the layout places cells
    // freely (the cell layout).
    Result require_cells(const char* op) const;
    // kvrt_cache_seq_cp / _seq_add / _seq_div in every layout.
    Result seq_cp(int32_t src, int32_t dst, int32_t p0, int32_t p1);
    Result seq_add(int32_t seq, int32_t p0, int32_t p1, int32_t delta);
    Result seq_div(int32_t seq, int32_t p0, int32_t p1, int32_t d);

    // ---- Window group (window_group.cpp) ----
    // The windowed layers' own group of cells (kvrt_window_layout_desc), or
    // null.
    const CellStore* window_group() const { return group_ ? &group_->rows() : nullptr; }
    // kvrt_cache_seq_window_pos_min.
    Result seq_window_pos_min(int32_t seq, int32_t* out_pos) const;
    // The group cell holding `cell`'s rows, or -1.
    int32_t group_cell(uint32_t cell) const;
    // Checks that the group and the cache agree: every group cell belongs to
    // a cell in use with its position and a superset of its sequences, and
    // the cell maps back to it (tests).
    Result window_verify() const;
    // KVRT_ERROR_UNSUPPORTED, naming `op`, for a cache with a window group.
    Result require_no_window_group(const char* op) const;

    // ---- The layout (layout.hpp) ----
    // The layout's own operations (kvrt_static.h, kvrt_paged.h): the layout
    // when the cache has it, else the error for `op`
    // (KVRT_ERROR_INVALID_ARGUMENT for the static layout's queries,
    // KVRT_ERROR_UNSUPPORTED for the paged layout's operations).
    Result static_layout(const char* op, const StaticLayout** out) const;
    Result static_layout(const char* op, StaticLayout** out);
    Result paged_layout(const char* op, PagedLayout** out);
    // kvrt_cache_seq_transfer (transfer.cpp), into this cache; refuses
    // src_seq of this cache as dst_seq.
    Result transfer_from(Cache& src, int32_t src_seq, int32_t dst_seq, uint32_t* out_count);

    // kvrt_cache_context_shift / kvrt_cache_discard_for_reevaluation.
    Result context_shift(int32_t seq, int32_t n_keep, int32_t n_discard, int32_t* out_n_past);
    Result discard_for_reevaluation(int32_t seq, int32_t n_keep, int32_t n_discard, int32_t* src_pos,
                                    int32_t* dst_pos, int32_t* count);


    // ---- State (state.cpp, state_file.cpp) ----
    // kvrt_cache_state_save: the state of `seq` (-1: the whole cache). With
    // `out` null, writes its size to *size and changes nothing; otherwise
    // applies pending shifts, then writes the state when *size holds it.
    Result state_save(int32_t seq, void* out, uint64_t* size);
    // kvrt_cache_state_load: replaces the whole cache (seq -1, a whole-cache
    // state) or sequence `seq` (a sequence state), all or nothing.
    Result state_load(int32_t seq, const void* data, uint64_t size);
    // kvrt_cache_state_save_file / _load_file (written atomically).
    Result state_save_file(int32_t seq, const char* path);
    Result state_load_file(int32_t seq, const char* path);
    // kvrt_cache_seq_swap_out / _out_file / _in / _in_file.
    Result seq_swap_out(int32_t seq, void* out, uint64_t* size);
    Result seq_swap_out_file(int32_t seq, const char* path);
    Result seq_swap_in(int32_t seq, const void* data, uint64_t size);
    Result seq_swap_in_file(int32_t seq, const char* path);
    // ---- end of state ----

    // kvrt_cache_tree_accept (tree.cpp).
    Result tree_accept(uint32_t n, const int32_t* positions, const int32_t* seq_ids, const Tree& tree,
                       uint32_t n_leaves, const int32_t* leaves);

private:
    friend class Layout;
    friend class CellLayout;
    friend class StaticLayout;
    friend class PagedLayout;
    friend class WindowGroup;

    explicit Cache(vk::Context& ctx) : CellStore(ctx) {}

    // The layout's choices (cell_store.hpp).
    void attention_cells(uint32_t layer, uint32_t n_queries, const int32_t* seq_ids,
                         std::vector<ops::AttnSegment>* out, uint32_t* out_cells) const override;
    Result require_trees(const char* op) const override;

    // Records the writes of every layer (layer < 0) or one, the window
    // group's rows included (store_rows.cpp).
    Result record_writes(vk::Stream& s, uint32_t n, const uint32_t* cells, int32_t layer, const Source& k,
                         const Source& v);

    // State (state.cpp): the description of `seq`'s state (-1: all cells);
    // applying a parsed plan to either layout.
    Result describe_state(int32_t seq, state::Description* out) const;
    Result check_state_fits(int32_t seq, const state::Plan& plan) const;
    // The cell layout's load with a window group, in transaction `tx` once
    // the cache's table holds the state's cells (cells `at`, one per
    // record): places the group's records and writes every layer's rows.
    Result load_group(vk::Transaction& tx, int32_t seq, const state::Plan& plan, const std::vector<uint32_t>& at);
    // The paged layout's load with a window group (state.cpp): after
    // PagedLayout::plan_group_load, records every layer's rows.
    Result record_group_load(vk::Stream& stream, const state::Plan& plan, const std::vector<uint32_t>& cells,
                             const std::vector<uint32_t>& order, const GroupLoad& group);
    // A swap-in target: a sequence id in range that holds no token.
    Result check_swap_in(int32_t seq) const;

    // Where tokens go, and the metadata beyond the table that says so.
    std::unique_ptr<Layout> layout_;
    // The windowed layers' group of cells (kvrt_window_layout_desc), or null.
    std::unique_ptr<WindowGroup> group_;
};

}  // namespace kvrt::cache
