#include "kv/geometry.hpp"

#include <cstring>

#include "core/checked.hpp"

namespace kvrt::kv {

bool type_size(kvrt_type type, TypeSize* out) {
    switch (type) {
        case KVRT_TYPE_F32: *out = {1, 4}; return true;
        case KVRT_TYPE_F16: *out = {1, 2}; return true;
        case KVRT_TYPE_Q8_0: *out = {32, 34}; return true;
        case KVRT_TYPE_Q4_0: *out = {32, 18}; return true;
        default: return false;
    }
}

const char* type_name(kvrt_type type) {
    switch (type) {
        case KVRT_TYPE_F32: return "f32";
        case KVRT_TYPE_F16: return "f16";
        case KVRT_TYPE_Q8_0: return "q8_0";
        case KVRT_TYPE_Q4_0: return "q4_0";
        default: return "unknown";
    }
}

bool parse_type(const char* name, kvrt_type* out) {
    static const kvrt_type all[] = {KVRT_TYPE_F32, KVRT_TYPE_F16, KVRT_TYPE_Q8_0, KVRT_TYPE_Q4_0};
    for (kvrt_type t : all) {
        if (std::strcmp(name, type_name(t)) == 0) {
            *out = t;
            return true;
        }
    }
    return false;
}

namespace {

Result row_geometry(const char* what, kvrt_type type, uint32_t head_dim, uint32_t n_kv_heads, uint32_t capacity,
                    uint64_t max_binding, RowGeometry* out) {
    TypeSize ts{};
    if (!type_size(type, &ts))
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "%s type %d is not F32, F16, Q8_0 or Q4_0", what,
                    static_cast<int>(type));
    if (head_dim % ts.block_elems != 0)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "%s type %s needs a head dim that is a multiple of %u (got %u)", what,
                    type_name(type), ts.block_elems, head_dim);
    if (head_dim % 2 != 0)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "%s head dim %u is odd", what, head_dim);
    RowGeometry g;
    g.type = type;
    g.head_dim = head_dim;
    g.head_bytes = static_cast<uint64_t>(head_dim / ts.block_elems) * ts.block_bytes;
    g.row_bytes = g.head_bytes * n_kv_heads;
    g.stride = align_up(g.row_bytes, 4);
    if (g.stride > max_binding)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "one %s row (%llu bytes) exceeds the largest binding", what,
                    static_cast<unsigned long long>(g.stride));
    const uint64_t per_piece = max_binding / g.stride;
    g.cells_per_piece = static_cast<uint32_t>(per_piece < capacity ? per_piece : capacity);
    g.pieces = (capacity + g.cells_per_piece - 1) / g.cells_per_piece;
    g.piece_bytes = align_up(static_cast<uint64_t>(g.cells_per_piece) * g.stride, 16);
    const uint32_t last_cells = capacity - (g.pieces - 1) * g.cells_per_piece;
    g.layer_bytes = (g.pieces - 1) * g.piece_bytes + align_up(static_cast<uint64_t>(last_cells) * g.stride, 16);
    *out = g;
    return KVRT_SUCCESS;
}

}  // namespace

Result CacheGeometry::from_desc(const kvrt_cache_desc& d, uint64_t max_binding, CacheGeometry* out) {
    if (d.type != KVRT_STRUCT_TYPE_CACHE_DESC)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "kvrt_cache_desc.type must be KVRT_STRUCT_TYPE_CACHE_DESC "
                                                 "(use KVRT_CACHE_DESC_INIT)");
    if (d.n_layers == 0 || d.n_heads == 0 || d.n_kv_heads == 0 || d.head_dim_k == 0 || d.capacity == 0)
        return fail(KVRT_ERROR_INVALID_ARGUMENT,
                    "n_layers, n_heads, n_kv_heads, head_dim_k and capacity must be > 0 (got %u, %u, %u, %u, %u)",
                    d.n_layers, d.n_heads, d.n_kv_heads, d.head_dim_k, d.capacity);
    if (d.n_heads % d.n_kv_heads != 0)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "n_heads %u is not a multiple of n_kv_heads %u", d.n_heads,
                    d.n_kv_heads);
    if (d.layout != KVRT_LAYOUT_DEFAULT && d.layout != KVRT_LAYOUT_CELLS)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "unknown layout %d", static_cast<int>(d.layout));
    if (d.head_dim_k > 1024 || d.head_dim_v > 1024 || d.n_kv_heads > 4096 || d.n_heads > 16384)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "head dims above 1024 or head counts above 4096/16384 are not supported");
    if (d.capacity > (1u << 30))
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "capacity %u exceeds 2^30 cells", d.capacity);
    if (d.max_seqs > 65536) return fail(KVRT_ERROR_INVALID_ARGUMENT, "max_seqs %u exceeds 65536", d.max_seqs);
    if (max_binding < 4096) return fail(KVRT_ERROR_INVALID_ARGUMENT, "binding limit below 4096 bytes");

    CacheGeometry g;
    g.n_layers = d.n_layers;
    g.n_heads = d.n_heads;
    g.n_kv_heads = d.n_kv_heads;
    g.capacity = d.capacity;
    g.max_seqs = d.max_seqs ? d.max_seqs : 64;
    g.max_binding = max_binding;
    const kvrt_type tk = d.type_k == KVRT_TYPE_DEFAULT ? KVRT_TYPE_F16 : d.type_k;
    const kvrt_type tv = d.type_v == KVRT_TYPE_DEFAULT ? KVRT_TYPE_F16 : d.type_v;
    const uint32_t dv = d.head_dim_v ? d.head_dim_v : d.head_dim_k;
    KVRT_TRY(row_geometry("K", tk, d.head_dim_k, d.n_kv_heads, d.capacity, max_binding, &g.k));
    KVRT_TRY(row_geometry("V", tv, dv, d.n_kv_heads, d.capacity, max_binding, &g.v));

    // The sizes fit in 64 bits by the limits above (2^30 cells * 2^12 heads *
    // 2^10 dims * 4 bytes * 2^32 layers would not, so check the layer product).
    uint64_t per_layer_token = g.k.row_bytes + g.v.row_bytes, t = 0;
    if (!checked_mul(per_layer_token, d.n_layers, &g.bytes_per_token) ||
        !checked_mul(g.bytes_per_token, d.capacity, &g.data_bytes) ||
        !checked_add(g.k.layer_bytes, g.v.layer_bytes, &t) || !checked_mul(t, d.n_layers, &g.device_bytes))
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "the cache's size overflows 64 bits");
    *out = g;
    return KVRT_SUCCESS;
}

}  // namespace kvrt::kv
