// Recording the attention kernels (shaders/attention.comp and
// attention_merge.comp) for prepared inputs.
#pragma once

#include <cstdint>
#include <vector>

#include "core/result.hpp"
#include "kv/geometry.hpp"
#include "ops/tuning.hpp"
#include "vk/stream.hpp"

namespace kvrt::ops {

// A run of consecutive cells the kernel reads from one binding each: K rows
// in one piece at a constant stride, V rows likewise, and the cells'
// metadata in one piece of the cache's device mirror. Cell i of the run has
// its K row at k_offset + i * k_stride, and its metadata (position, then
// seq_words words of sequence bits) at word (meta_first + i) * (1 + seq_words)
// of the mirror's piece. The kernel decides what each query sees from the
// metadata alone: empty cells (position -1, no sequence bits) are skipped.
struct AttnSegment {
    const vk::Buffer* k = nullptr;
    size_t k_piece = 0;
    uint64_t k_offset = 0, k_stride = 0;
    const vk::Buffer* v = nullptr;
    size_t v_piece = 0;
    uint64_t v_offset = 0, v_stride = 0;
    const vk::Buffer* meta = nullptr;
    size_t meta_piece = 0;
    uint32_t meta_first = 0;  // the run's first cell, as an index into the mirror's piece
    uint32_t first_cell = 0;  // the run's first cell in the cache
    uint32_t count = 0;
    uint32_t splits = 1;      // partial results it produces per row
};

struct AttnShape {
    kvrt_type k_type, v_type, q_type, out_type;
    uint32_t head_dim_k, head_dim_v;
    uint32_t n_heads, n_kv_heads;
    uint32_t n_queries;
    uint64_t k_head_bytes, v_head_bytes;  // bytes between heads inside a row
    uint32_t seq_words;                   // 32-bit words of sequence bits per cell in the mirror
    // Deferred RoPE (K stored unrotated): rotated dims, pairing and
    // magnitude; the angles come from AttnIo::rope.
    bool deferred = false;
    uint32_t n_rot = 0;
    bool neox = false;
    float mscale = 1.0f;
    // The layer's quantization of static-scale K / V types; ignored for others.
    kv::StaticScale k_scale, v_scale;
    // Row tiles of at most this many rows (0: the tuning's): smaller tiles
    // (down to one query's rows) where queries of different sequences read
    // different cells and sharing a tile would only add work, or where a
    // tile of one sequence reads that sequence's list of cells.
    uint32_t max_tile_rows = 0;
};

// How a call's rows are cut into tiles. The row-tile kernel
// (attention.comp) gives each lane group `rows` rows of one KV head; the
// tiled kernel (attention_tiled.comp) gives each workgroup `rows` rows and
// loads K/V tiles of `tile_cells` cells into shared memory. Either way a
// tile times a split of the cells is one unit of work, and the split counts
// aim at `target_units` of them. Depends only on the tuning and the shape.
struct AttnPlan {
    bool tiled = false;
    uint32_t rows = 1;             // query rows per tile
    uint32_t tiles_per_kv = 1;     // ceil(n_queries * group / rows)
    uint32_t tile_cells = 0;       // tiled: cells per shared-memory tile
    uint32_t target_units = 1;
    uint32_t max_split_cells = 1;  // cells of one split, at most
    uint32_t rows_per_workgroup = 1;  // query rows a workgroup covers per split
};
AttnPlan plan_attention(const Tuning& tuning, const AttnShape& shape);

// A token tree among the queries: of the cells [first_cell, first_cell +
// map.size()), those whose map entry is a tree token j (not kNoNode) are
// visible to query i only when bit j of i's ancestor row is set (ancestors:
// `words` words per query of the whole batch, i itself included).
struct AttnTree {
    static constexpr uint32_t kNoNode = 0xFFFFFFFFu;
    uint32_t words = 0;
    uint32_t first_cell = 0;
    std::vector<uint32_t> map;
    std::vector<uint32_t> ancestors;
};

struct AttnOptions {
    float scale, softcap, max_bias;
    int32_t window, n_keep;
    bool causal;
    const float* sinks;  // n_heads, or null
    const AttnTree* tree = nullptr;  // or null
    uint32_t tree_first_query = 0;   // the batch index of this call's query 0
};

// Words per query in record_attention's `queries`.
constexpr uint32_t kQueryWords = 6;
// Floats before the weighted V in a row's partial result of one split: max,
// sum and six unused floats, so that the weighted V is 32-byte aligned (KVRT_PARTIAL_HEAD
// of shaders/include/common.glsl).
constexpr uint32_t kPartialHead = 8;

// Records both passes over the cells of `segments`. `queries` holds
// kQueryWords words per query: position, sequence, a run of cells [lo, hi)
// (cache cells, as AttnSegment::first_cell) outside which the sequence has
// no cell (lo == hi: none), and where the sequence's list of cells lies in
// io.lists (first word, length; length 0: no list). A tile reads only the
// union of its queries' runs, or, when they are of one sequence with a list,
// the listed cells; either is cut into each segment's splits. `q` and `out` are the query rows and the output rows (word
// offsets and strides inside their pieces: query i's head h at offset + i *
// stride + h * head). The host's work is independent of the cell count.
struct AttnIo {
    vk::BufferUse q;       // whole binding of the queries' piece
    uint32_t q_offset_words, q_stride_words, q_head_words;
    vk::BufferUse out;     // whole binding of the output's piece
    uint32_t out_offset_words, out_stride_words, out_head_words;
    // The lists of cells (ops/cell_lists.hpp) the queries' list words point
    // into, in increasing cell order per list; buffer null: none.
    vk::BufferUse lists{};
    // Deferred RoPE: the whole binding of the cache's position table
    // (kv::Rope::position_table, from its start).
    vk::BufferUse rope{};
};

Result record_attention(vk::Stream& stream, const AttnShape& shape, const AttnOptions& opt,
                        const std::vector<uint32_t>& queries, std::vector<AttnSegment> segments, const AttnIo& io);

}  // namespace kvrt::ops
