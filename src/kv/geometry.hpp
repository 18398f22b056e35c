// Cache geometry: element types, row sizes, how a layer's rows split into
// binding-sized pieces, and the sizes the estimator reports. Pure CPU, so the
// estimator works before (and without) a device.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "core/result.hpp"
#include "kvrt/kvrt.h"

namespace kvrt::kv {

// Storage size of an element type: `block_bytes` per `block_elems` values.
struct TypeSize {
    uint32_t block_elems;
    uint32_t block_bytes;
};

// One row of the element-type table: the one place that describes kvrt_type
// (the public kvrt_type_* queries, messages, the command line).
struct TypeInfo {
    kvrt_type type;
    const char* name;  // lowercase, as kvrt_type_name spells it
    uint32_t block_elems;
    uint32_t block_bytes;
};

// The table's row of the type whose raw value is `raw` (a kvrt_type as the
// caller passed it), or nullptr for KVRT_TYPE_UNDEFINED and unknown values.
const TypeInfo* type_info_raw(int32_t raw);
// The same for a kvrt_type held by the library or by a caller: read as its
// raw integer, so values outside the enum are no undefined behaviour.
const TypeInfo* type_info(const kvrt_type& type);

// KVRT_TYPE_F32/F16/Q8_0/Q4_0/U8_STATIC/U16_STATIC; false for anything else.
bool type_size(kvrt_type type, TypeSize* out);

// Name for messages ("f16", "q8_0", ...): "undefined" for KVRT_TYPE_UNDEFINED
// and "unknown" for values outside the table, never nullptr.
const char* type_name(kvrt_type type);

// Parses a type name, case-insensitively; false when unknown.
bool parse_type(const char* name, kvrt_type* out);

// Checks an element type where one is required: KVRT_TYPE_UNDEFINED, values
// outside the table and types not in `allowed` (when it is not empty) fail
// with KVRT_ERROR_INVALID_ARGUMENT and a message naming `what`. `type` is
// the caller's field or argument itself: it is read as a raw integer, so any
// value a C caller stored there is safe to check; after success it may be
// used as a kvrt_type.
Result check_type(const char* what, const kvrt_type& type, std::initializer_list<kvrt_type> allowed = {});

// The per-tensor quantization of a static-scale type (KVRT_TYPE_U8_STATIC,
// KVRT_TYPE_U16_STATIC): value = scale * (q - zero_point), and a value x is
// stored as clamp(roundf(x * inv) + zero_point, 0, qmax), inv = 1/scale in f32.
struct StaticScale {
    float scale = 0.0f;
    float inv = 0.0f;
    int32_t zero_point = 0;
};

// True for KVRT_TYPE_U8_STATIC and KVRT_TYPE_U16_STATIC.
inline bool is_static_scale(kvrt_type t) { return t == KVRT_TYPE_U8_STATIC || t == KVRT_TYPE_U16_STATIC; }

// The static padded layout's part of an array's geometry (SPEC 5): every
// (sequence, layer, KV head) owns a region of `reservation_rows` rows of
// `head_bytes`; a layer's regions lie in one buffer, sequence-major then head,
// `regions_per_piece` (a multiple of n_kv_heads) to a piece.
struct StaticRegions {
    bool ring = false;               // the smart-mask style (KVRT_STATIC_STYLE_SMART_MASK), R = 1
    uint32_t seq_len = 0;            // S
    double reserve = 0.0;            // R
    uint32_t window_rows = 0;        // S - 1
    uint32_t reservation_rows = 0;   // ceil(R * (S-1))
    uint64_t region_bytes = 0;       // reservation_rows * head_bytes
    uint32_t regions_per_piece = 0;
};

// Geometry of one array (K or V) of a cache.
struct RowGeometry {
    kvrt_type type = KVRT_TYPE_F16;
    uint32_t head_dim = 0;
    uint64_t head_bytes = 0;       // one head of one token
    uint64_t row_bytes = 0;        // all KV heads of one token
    uint64_t stride = 0;           // row_bytes padded to 4: cell c starts at c * stride in its piece
    uint32_t cells_per_piece = 0;  // cells in each piece but the last
    uint32_t pieces = 0;           // pieces per layer
    uint64_t piece_bytes = 0;      // bytes of each full piece (a multiple of 16)
    uint64_t layer_bytes = 0;      // bytes allocated per layer
    std::vector<StaticScale> scales;  // per layer, for static-scale types; else empty
    StaticRegions regions;            // the static layout's; else zero

    // Piece and byte offset of `cell` inside it.
    void locate(uint32_t cell, uint32_t* piece, uint64_t* offset) const {
        *piece = cell / cells_per_piece;
        *offset = static_cast<uint64_t>(cell % cells_per_piece) * stride;
    }
};

struct CacheGeometry {
    uint32_t n_layers = 0;
    uint32_t n_heads = 0;
    uint32_t n_kv_heads = 0;
    uint32_t capacity = 0;
    uint32_t max_seqs = 0;
    RowGeometry k;
    RowGeometry v;
    uint64_t bytes_per_token = 0;  // SPEC formula, unpadded
    uint64_t data_bytes = 0;       // bytes_per_token * capacity
    // The device mirror of the cell metadata: per cell one position word and
    // 2 * ceil(max_seqs / 64) words of sequence bits (meta_words), cells
    // split into pieces of meta_cells_per_piece, each padded to 16 bytes.
    uint32_t meta_words = 0;
    uint32_t meta_cells_per_piece = 0;
    uint64_t meta_piece_bytes = 0;
    uint64_t meta_bytes = 0;
    // Per-sequence lists of cells for attention (one word per cell, one
    // piece padded to 16 bytes): a cell or paged layout of several sequences
    // whose mirror is one piece and whose lists fit one binding; 0: none.
    uint64_t list_bytes = 0;
    // Deferred RoPE: the kernels' position table (kv::Rope::position_table,
    // 4,096 bytes per rotated dim); 0 without.
    uint64_t rope_table_bytes = 0;
    uint64_t device_bytes = 0;     // what the cache allocates: K, V, the mirror, the lists, the RoPE table
    uint64_t max_binding = 0;
    kvrt_layout layout = KVRT_LAYOUT_CELLS;
    uint32_t block_size = 0;       // paged layout: tokens per block (else 0)
    // The chained kvrt_rope_desc (or the defaults), with n_rot resolved and
    // `next` cleared.
    kvrt_rope_desc rope = KVRT_ROPE_DESC_INIT;
    kvrt_flags flags = 0;  // kvrt_cache_flag_bits, checked
    // The window group (kvrt_window_layout_desc): the windowed layers' rows
    // in a group of window_cells cells of their own; window_cells 0 without
    // one. window_local[l] is layer l's index in the group, or -1 for a layer
    // whose rows are the cache's (empty without a group); window_span is the
    // largest window. k, v, the mirror and the sizes above describe the
    // cache's own layers, device_bytes and data_bytes include the group.
    uint32_t window_cells = 0;
    uint32_t window_keep = 0;
    uint32_t window_span = 0;
    std::vector<int32_t> window_local;

    // True when layer l's rows live in the window group.
    bool in_window_group(uint32_t l) const { return !window_local.empty() && window_local[l] >= 0; }

    // Validates `desc` (the checks of kvrt_cache_create: its type and chain,
    // sizes, types, RoPE, flags) and computes the geometry for a device whose
    // largest binding is `max_binding` bytes. `desc` may be NULL (an error).
    static Result from_desc(const kvrt_cache_desc* desc, uint64_t max_binding, CacheGeometry* out);
};

// The descriptor of a cache's window group: the windowed layers as a cell
// cache of window_cells cells, with its chain (RoPE, the windowed layers'
// static scales) held here.
struct WindowGroupDesc {
    kvrt_cache_desc desc = KVRT_CACHE_DESC_INIT;
    kvrt_rope_desc rope = KVRT_ROPE_DESC_INIT;
    kvrt_static_scales_desc scales = KVRT_STATIC_SCALES_DESC_INIT;
    std::vector<uint32_t> windows;
    std::vector<float> k_scales, v_scales;
    std::vector<int32_t> k_zero_points, v_zero_points;

    WindowGroupDesc() = default;
    WindowGroupDesc(const WindowGroupDesc&) = delete;  // desc points into it
    WindowGroupDesc& operator=(const WindowGroupDesc&) = delete;
};

// Builds the group's descriptor for a cache of geometry `g` (with a window
// group) created from `d`.
void window_group_desc(const kvrt_cache_desc& d, const CacheGeometry& g, WindowGroupDesc* out);

}  // namespace kvrt::kv
