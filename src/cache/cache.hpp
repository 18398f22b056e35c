// The KV cache object: geometry, cell metadata (kv::CellTable), device rows
// (an Arena), and the operations that keep the two consistent.
#pragma once

#include <algorithm>
#include <functional>
#include <memory>
#include <vector>

#include "cache/arena.hpp"
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

// Rows of a caller's tensor, resolved from a kvrt_tensor_ref (data the cache
// reads: Source) or a kvrt_output_ref (rows attention writes: Output): for
// each token one row per head at offset + layer * layer_stride +
// token * row_stride + head * head_stride.
template <class Host>
struct TensorRows {
    // Source: F32, F16 or a stored type; Output: F32 or F16.
    kvrt_type type = KVRT_TYPE_F32;
    const vk::Buffer* buffer = nullptr;  // device rows, or
    Host* host = nullptr;                // host rows (an output's: synchronous calls only)
    uint64_t offset = 0;
    // Zero strides are resolved as cache/strides.hpp says: head_stride one
    // head row, row_stride n_heads * head_stride (the heads of one token back
    // to back), layer_stride max(n_tokens * row_stride, n_heads * head_stride).
    uint64_t row_stride = 0;
    uint64_t head_stride = 0;
    uint64_t layer_stride = 0;
};
using Source = TensorRows<const uint8_t>;
using Output = TensorRows<void>;

class Cache {
public:
    static Result create(vk::Context& ctx, const kvrt_cache_desc& desc, std::unique_ptr<Cache>* out);
    Cache(const Cache&) = delete;
    Cache& operator=(const Cache&) = delete;
    ~Cache();

    vk::Context& context() const { return ctx_; }
    const kv::CacheGeometry& geometry() const { return geo_; }
    kv::CellTable& table() { return table_; }
    const kv::CellTable& table() const { return table_; }
    const Arena& arena() const { return *arena_; }

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
    // kvrt_cache_read.
    Result read(int32_t layer, uint32_t n, const uint32_t* cells, float* k_out, float* v_out);
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
    const Cache* window_group() const { return group_ ? &group_->rows() : nullptr; }
    // Sequences whose list of cells is current (cell_lists.cpp).
    uint32_t current_lists() const {
        return lists_.revision == table_.revision() ? static_cast<uint32_t>(lists_.listed.size()) : 0;
    }
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
    Result paged_layout(const char* op, PagedLayout** out);
    // kvrt_cache_seq_transfer (transfer.cpp), into this cache; refuses
    // src_seq of this cache as dst_seq.
    Result transfer_from(Cache& src, int32_t src_seq, int32_t dst_seq, uint32_t* out_count);

    // kvrt_cache_apply_shifts.
    Result apply_shifts(vk::Stream* stream);
    // kvrt_cache_context_shift / kvrt_cache_discard_for_reevaluation.
    Result context_shift(int32_t seq, int32_t n_keep, int32_t n_discard, int32_t* out_n_past);
    Result discard_for_reevaluation(int32_t seq, int32_t n_keep, int32_t n_discard, int32_t* src_pos,
                                    int32_t* dst_pos, int32_t* count);
    const kv::Rope& rope() const { return rope_math_; }

    // ---- Stored bytes (raw.cpp) ----
    // kvrt_cache_read_raw: the stored bytes of `n` cells of (layer, array),
    // each cell's head rows back to back with no padding.
    Result read_raw(int32_t layer, Array array, uint32_t n, const uint32_t* cells, void* out, uint64_t out_bytes);
    // ---- end of stored bytes ----

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

    using Tree = cache::Tree;
    // kvrt_cache_attention. `tree` (may be null): the queries are the tokens
    // of a tree.
    Result attention(vk::Stream* stream, int32_t layer, uint32_t n_queries, const int32_t* positions,
                     const int32_t* seq_ids, const Source& q, const Output& out, const kvrt_attention_params& params,
                     const Tree* tree = nullptr);
    // kvrt_cache_tree_accept (tree.cpp).
    Result tree_accept(uint32_t n, const int32_t* positions, const int32_t* seq_ids, const Tree& tree,
                       uint32_t n_leaves, const int32_t* leaves);

private:
    friend class Layout;
    friend class CellLayout;
    friend class StaticLayout;
    friend class PagedLayout;
    friend class WindowGroup;

    explicit Cache(vk::Context& ctx) : ctx_(ctx), own_(ctx, "kvrt cache", vk::PrivateStream::AfterFailure::Wait) {}

    // Checks everything about a write before anything changes.
    Result check_source(const char* what, const Source& s, uint32_t n, int32_t layer,
                        const kv::RowGeometry& g) const;
    Result check_write(uint32_t n, int32_t layer, const Source& k, const Source& v) const;
    Result record_writes(vk::Stream& s, uint32_t n, const uint32_t* cells, int32_t layer, const Source& k,
                         const Source& v);
    Result record_array(vk::Stream& s, Array array, uint32_t n, const uint32_t* cells, uint32_t layer,
                        uint32_t src_layer, const Source& src);

    // Sends the cells whose metadata changed since the last call to the
    // device mirror, recorded into `s` (the kernels after it see them); if the
    // recording is dropped, the cells count as changed again.
    Result sync_meta(vk::Stream& s);
    // The runs of cells of `layer` an attention over [first, end) reads.
    void attention_segments(uint32_t layer, uint32_t first, uint32_t end, std::vector<ops::AttnSegment>* out) const;

    // Per-sequence lists of cells (cell_lists.cpp). create_lists: the
    // buffer, for a cell-layout cache of several sequences whose mirror is
    // one piece. update_lists: before an attention, builds in `s` the lists
    // of the queries' sequences whose cells fill at most half their run,
    // unless the current lists already hold them; the kernels read a list
    // only while it is current (list_of). If the recording is dropped, no
    // list is current.
    Result create_lists(const char* label);
    Result update_lists(vk::Stream& s, uint32_t n_queries, const int32_t* seq_ids);
    // The current list of `seq` as (first word, cells); (0, 0) when none.
    void list_of(int32_t seq, uint32_t* first, uint32_t* count) const;

    Result record_attention(vk::Stream& s, uint32_t layer, uint32_t n_queries, const int32_t* positions,
                            const int32_t* seq_ids, const Source& q, const vk::BufferUse& out_use,
                            uint64_t out_offset, uint64_t out_stride, uint64_t out_head_stride,
                            kvrt_type out_type, const kvrt_attention_params& params, const ops::AttnTree* tree);
    // The kernels' view of a token tree among n queries (tree.cpp): checks
    // that cell i holds query i's position and sequence, each cell once.
    Result tree_inputs(uint32_t n, const int32_t* positions, const int32_t* seq_ids, const Tree& tree,
                       ops::AttnTree* out) const;

    // Records the pending shifts into the transaction's stream and clears
    // them, with an undo that restores them.
    Result record_shifts(vk::Transaction& tx);

    // Row copies between this cache and `src` (or within it) for the
    // tokens in src_cells -> dst_cells, every layer, K and V (transfer.cpp).
    Result record_copy_cells(vk::Stream& s, const Cache& src, const std::vector<uint32_t>& src_cells,
                             const std::vector<uint32_t>& dst_cells);

    // State (state.cpp): the description of `seq`'s state (-1: all cells);
    // applying a parsed plan to either layout.
    Result describe_state(int32_t seq, state::Description* out) const;
    Result check_state_fits(int32_t seq, const state::Plan& plan) const;
    // The cell layout's load with a window group: the cache's table is planned in
    // `other` (cells `at`, one per record); places the group's records and
    // writes every layer's rows.
    Result load_group(int32_t seq, const state::Plan& plan, const std::vector<uint32_t>& at,
                      const std::shared_ptr<kv::CellTable>& other);
    // The paged layout's load with a window group (state.cpp): after
    // PagedLayout::plan_group_load, records every layer's rows.
    Result record_group_load(vk::Stream& stream, const state::Plan& plan, const std::vector<uint32_t>& cells,
                             const std::vector<uint32_t>& order, const GroupLoad& group);
    // A swap-in target: a sequence id in range that holds no token.
    Result check_swap_in(int32_t seq) const;

    vk::Context& ctx_;
    kv::CacheGeometry geo_;
    kv::CellTable table_;
    std::unique_ptr<Arena> arena_;
    // Where tokens go, and the metadata beyond the table that says so.
    std::unique_ptr<Layout> layout_;
    // The device mirror of the table's positions and sequence sets, which the
    // attention kernel reads (kv::CellTable's device mirror).
    std::unique_ptr<vk::Buffer> meta_;
    // Per-sequence lists of cells, built on the device from the mirror
    // (buffer null: this cache has none). They are current while `revision`
    // is the table's; per sequence, its list's first word and length (0: not
    // listed).
    struct CellLists {
        std::unique_ptr<vk::Buffer> buffer;
        uint64_t revision = 0;
        std::vector<uint32_t> first, count;
        std::vector<int32_t> listed;
        // Which sequences an update has looked at: seen[seq] == call.
        std::vector<uint32_t> seen;
        uint32_t call = 0;
    };
    CellLists lists_;
    std::vector<uint32_t> windows_;
    kv::Rope rope_math_;
    bool deferred_ = false;
    // Deferred RoPE: the kernels' position table (kv::Rope::position_table),
    // written once at creation; null without deferred RoPE.
    std::unique_ptr<vk::Buffer> rope_table_;
    vk::PrivateStream own_;  // for synchronous calls
    // The windowed layers' group of cells (kvrt_window_layout_desc), or null.
    std::unique_ptr<WindowGroup> group_;
};

}  // namespace kvrt::cache
