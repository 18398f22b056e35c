// The rows of a set of cells, and everything the kernels need to run over
// them: the geometry, the cell table (kv::CellTable) and its device mirror,
// the arena that places each cell's rows, the per-sequence cell lists, RoPE
// (and deferred RoPE's position table), and a private stream for synchronous
// calls. A store records row writes, K shifts, attention, row copies and
// reads; it does not decide where tokens go.
//
// A cache (cache::Cache) is a store with a layout on top that places tokens
// and keeps the rules of its arrangement, and maybe a window group. A window
// group's rows are a plain store of the group's cells: every cell below the
// table's n_attend() is read by an attention, as in the cell layout.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "cache/arena.hpp"
#include "cache/types.hpp"
#include "core/result.hpp"
#include "kv/cell_table.hpp"
#include "kv/geometry.hpp"
#include "kv/rope.hpp"
#include "ops/attention.hpp"
#include "vk/stream.hpp"
#include "vk/transaction.hpp"

namespace kvrt::cache {

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

class CellStore {
public:
    // A plain store of the cells `desc` describes, in the cell layout's
    // arena (a window group's rows).
    static Result create(vk::Context& ctx, const kvrt_cache_desc& desc, std::unique_ptr<CellStore>* out);
    CellStore(const CellStore&) = delete;
    CellStore& operator=(const CellStore&) = delete;
    virtual ~CellStore();

    vk::Context& context() const { return ctx_; }
    const kv::CacheGeometry& geometry() const { return geo_; }
    kv::CellTable& table() { return table_; }
    const kv::CellTable& table() const { return table_; }
    const Arena& arena() const { return *arena_; }
    const kv::Rope& rope() const { return rope_math_; }
    // Sequences whose list of cells is current (cell_lists.cpp).
    uint32_t current_lists() const {
        return lists_.revision == table_.revision() ? static_cast<uint32_t>(lists_.listed.size()) : 0;
    }

    // kvrt_cache_read: `n` cells of `layer`, decoded to f32.
    virtual Result read(int32_t layer, uint32_t n, const uint32_t* cells, float* k_out, float* v_out);
    // kvrt_cache_read_raw: the stored bytes of `n` cells of (layer, array),
    // each cell's head rows back to back with no padding (raw.cpp).
    virtual Result read_raw(int32_t layer, Array array, uint32_t n, const uint32_t* cells, void* out,
                            uint64_t out_bytes);
    // kvrt_cache_apply_shifts.
    virtual Result apply_shifts(vk::Stream* stream);
    // kvrt_cache_attention (attention.cpp). `tree` (may be null): the
    // queries are the tokens of a tree.
    virtual Result attention(vk::Stream* stream, int32_t layer, uint32_t n_queries, const int32_t* positions,
                             const int32_t* seq_ids, const Source& q, const Output& out,
                             const kvrt_attention_params& params, const Tree* tree = nullptr);

protected:
    explicit CellStore(vk::Context& ctx)
        : ctx_(ctx), own_(ctx, "kvrt cache", vk::PrivateStream::AfterFailure::Wait) {}

    // Creation in two steps around the arena, which the caller sets: the
    // geometry, the table, RoPE; then the device mirror, the lists and the
    // RoPE table.
    Result init_cells(const kvrt_cache_desc& desc);
    Result init_device(const kvrt_cache_desc& desc);

    // The runs of cells an attention over `layer` reads for queries of the
    // sequences seq_ids[0..n_queries), and how many cells they hold: every
    // cell below the table's n_attend() unless a layout says otherwise.
    virtual void attention_cells(uint32_t layer, uint32_t n_queries, const int32_t* seq_ids,
                                 std::vector<ops::AttnSegment>* out, uint32_t* out_cells) const;
    // KVRT_ERROR_UNSUPPORTED, naming `op`, where token trees cannot be
    // placed.
    virtual Result require_trees(const char* op) const {
        (void)op;
        return KVRT_SUCCESS;
    }

    // Checks everything about a write before anything changes (store_rows.cpp).
    Result check_source(const char* what, const Source& s, uint32_t n, int32_t layer,
                        const kv::RowGeometry& g) const;
    Result check_write(uint32_t n, int32_t layer, const Source& k, const Source& v) const;
    // Records the writes of `array` in `layer` from layer `src_layer` of
    // `src` for the `n` cells.
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
    // them, with an undo that restores them (positions.cpp).
    Result record_shifts(vk::Transaction& tx);

    // Row copies from `src` (or within this store) for the tokens in
    // src_cells -> dst_cells, every layer this store keeps, K and V
    // (transfer.cpp).
    Result record_copy_cells(vk::Stream& s, const CellStore& src, const std::vector<uint32_t>& src_cells,
                             const std::vector<uint32_t>& dst_cells);

    vk::Context& ctx_;
    kv::CacheGeometry geo_;
    kv::CellTable table_;
    std::unique_ptr<Arena> arena_;
    // The device mirror of the table's positions and sequence sets, which the
    // attention kernel reads (kv::CellTable's device mirror).
    std::unique_ptr<vk::Buffer> meta_;
    // Per-sequence lists of cells, built on the device from the mirror
    // (buffer null: this store has none). They are current while `revision`
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

private:
    friend class WindowGroup;
};

}  // namespace kvrt::cache
