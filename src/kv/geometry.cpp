#include "kv/geometry.hpp"
#include "kv/rope.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "kv/static_window.hpp"

#include "core/chain.hpp"
#include "core/checked.hpp"
#include "core/raw_enum.hpp"

namespace kvrt::kv {

namespace {

constexpr TypeInfo kTypes[] = {
    {KVRT_TYPE_F32, "f32", 1, 4},
    {KVRT_TYPE_F16, "f16", 1, 2},
    {KVRT_TYPE_Q8_0, "q8_0", 32, 34},
    {KVRT_TYPE_Q4_0, "q4_0", 32, 18},
    {KVRT_TYPE_U8_STATIC, "u8_static", 1, 1},
    {KVRT_TYPE_U16_STATIC, "u16_static", 1, 2},
};

char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

}  // namespace

const TypeInfo* type_info_raw(int32_t raw) {
    for (const TypeInfo& t : kTypes)
        if (static_cast<int32_t>(t.type) == raw) return &t;
    return nullptr;
}

const TypeInfo* type_info(const kvrt_type& type) { return type_info_raw(raw_enum(type)); }

bool type_size(kvrt_type type, TypeSize* out) {
    const TypeInfo* t = type_info(type);
    if (!t) return false;
    *out = TypeSize{t->block_elems, t->block_bytes};
    return true;
}

const char* type_name(kvrt_type type) {
    if (const TypeInfo* t = type_info(type)) return t->name;
    return raw_enum(type) == KVRT_TYPE_UNDEFINED ? "undefined" : "unknown";
}

bool parse_type(const char* name, kvrt_type* out) {
    if (!name) return false;
    for (const TypeInfo& t : kTypes) {
        size_t i = 0;
        while (name[i] && t.name[i] && lower(name[i]) == t.name[i]) ++i;
        if (!name[i] && !t.name[i]) {
            *out = t.type;
            return true;
        }
    }
    return false;
}

Result check_type(const char* what, const kvrt_type& type_ref, std::initializer_list<kvrt_type> allowed) {
    const int32_t raw = raw_enum(type_ref);
    if (raw == KVRT_TYPE_UNDEFINED)
        return fail(KVRT_ERROR_INVALID_ARGUMENT,
                    "%s is KVRT_TYPE_UNDEFINED; element types have no default (start from the struct's _INIT macro, "
                    "which sets the usual type)",
                    what);
    const TypeInfo* info = type_info_raw(raw);
    if (!info) return fail(KVRT_ERROR_INVALID_ARGUMENT, "%s: %d is not a kvrt_type", what, static_cast<int>(raw));
    const kvrt_type type = info->type;
    if (allowed.size() == 0) return KVRT_SUCCESS;
    std::string list;
    for (kvrt_type t : allowed) {
        if (t == type) return KVRT_SUCCESS;
        if (!list.empty()) list += ", ";
        list += type_name(t);
    }
    return fail(KVRT_ERROR_INVALID_ARGUMENT, "%s is %s; it must be one of: %s", what, type_name(type), list.c_str());
}

namespace {

Result row_geometry(const char* what, kvrt_type type, uint32_t head_dim, uint32_t n_kv_heads, uint32_t capacity,
                    uint64_t max_binding, RowGeometry* out) {
    TypeSize ts{};
    if (!type_size(type, &ts)) return fail(KVRT_ERROR_INTERNAL, "%s type %d is not a kvrt_type", what, static_cast<int>(type));
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

namespace {

// The per-layer scales of a static-scale array from the chain: `scales` and
// `zero_points` are the array's fields of the kvrt_static_scales_desc.
Result static_scales(const char* what, kvrt_type type, const kvrt_static_scales_desc* d, const float* scales,
                     const int32_t* zero_points, uint32_t n_layers, std::vector<StaticScale>* out) {
    if (!is_static_scale(type)) {
        if (scales || zero_points)
            return fail(KVRT_ERROR_INVALID_ARGUMENT,
                        "kvrt_static_scales_desc.%s_scales or .%s_zero_points is set but the %s type is %s", what, what,
                        what, type_name(type));
        return KVRT_SUCCESS;
    }
    if (!d || !scales || !zero_points)
        return fail(KVRT_ERROR_INVALID_ARGUMENT,
                    "%s type %s needs its scales: chain a kvrt_static_scales_desc with %s_scales and %s_zero_points set",
                    what, type_name(type), what, what);
    if (d->count != 1 && d->count != n_layers)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "kvrt_static_scales_desc.count %u must be 1 or n_layers (%u)",
                    d->count, n_layers);
    const int32_t qmax = type == KVRT_TYPE_U8_STATIC ? 255 : 65535;
    out->resize(n_layers);
    for (uint32_t l = 0; l < n_layers; ++l) {
        const float scale = scales[d->count == 1 ? 0 : l];
        const int32_t zero_point = zero_points[d->count == 1 ? 0 : l];
        const float inv = 1.0f / scale;
        // Normal floats only: a device that flushes subnormals would read a
        // subnormal scale as 0 and disagree with the CPU.
        if (!(scale >= FLT_MIN) || !std::isfinite(scale) || !std::isfinite(inv))
            return fail(KVRT_ERROR_INVALID_ARGUMENT,
                        "%s scale of layer %u is %g; it must be a finite normal float > 0 (with a finite inverse)", what,
                        l, static_cast<double>(scale));
        if (zero_point < 0 || zero_point > qmax)
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "%s zero point of layer %u is %d; %s needs 0..%d", what, l,
                        zero_point, type_name(type), qmax);
        (*out)[l] = StaticScale{scale, inv, zero_point};
    }
    return KVRT_SUCCESS;
}

// The chained kvrt_rope_desc (or the defaults), checked, with n_rot resolved.
Result resolve_rope(const kvrt_rope_desc* given, uint32_t head_dim_k, kvrt_rope_desc* out) {
    kvrt_rope_desc r = KVRT_ROPE_DESC_INIT;
    if (given) std::memcpy(&r, given, sizeof r);
    r.next = nullptr;
    // The mode as the caller stored it: checked before it is read as the enum.
    const int32_t mode = raw_enum(r.mode);
    if (mode != KVRT_ROPE_MODE_NORMAL && mode != KVRT_ROPE_MODE_NEOX)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "kvrt_rope_desc.mode %d is not a kvrt_rope_mode", static_cast<int>(mode));
    if (r.n_rot == 0) r.n_rot = head_dim_k;
    if (r.n_rot > head_dim_k || r.n_rot % 2 != 0)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "kvrt_rope_desc.n_rot %u must be even and at most head_dim_k %u",
                    r.n_rot, head_dim_k);
    if (r.ext_factor != 0.0f && r.n_ctx_orig == 0)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "YaRN (kvrt_rope_desc.ext_factor != 0) needs n_ctx_orig");
    // Every float: finite and >= 0 (0 takes the default), so that no shift
    // or attention turns K into NaN later.
    const std::pair<const char*, float> floats[] = {{"freq_base", r.freq_base},     {"freq_scale", r.freq_scale},
                                                    {"ext_factor", r.ext_factor},   {"attn_factor", r.attn_factor},
                                                    {"beta_fast", r.beta_fast},     {"beta_slow", r.beta_slow}};
    for (const auto& [name, value] : floats)
        if (!(value >= 0.0f) || !std::isfinite(value))
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "kvrt_rope_desc.%s is %g; it must be finite and >= 0", name,
                        static_cast<double>(value));
    *out = r;
    return KVRT_SUCCESS;
}

// The static layout's regions of one array, and its pieces.
// The reserve a static layout's descriptor asks for: 0 means 2 (1 in the
// smart-mask style, whose window is its whole region).
double static_reserve(const kvrt_static_layout_desc& d, bool ring) {
    return d.reserve != 0.0 ? d.reserve : ring ? 1.0 : 2.0;
}

Result static_regions(const char* what, const kvrt_static_layout_desc& d, bool ring, uint32_t n_layers,
                      uint32_t n_kv_heads, uint32_t max_seqs, uint64_t max_binding, RowGeometry* g) {
    if (g->type == KVRT_TYPE_Q8_0 || g->type == KVRT_TYPE_Q4_0)
        return fail(KVRT_ERROR_INVALID_ARGUMENT,
                    "%s type %s is block-quantized; the static layout takes F32, F16, U8_STATIC or U16_STATIC", what,
                    type_name(g->type));
    if (g->head_bytes % 4)
        return fail(KVRT_ERROR_INVALID_ARGUMENT,
                    "the static layout needs %s rows of a multiple of 4 bytes (head dim %u of %s is %llu bytes)", what,
                    g->head_dim, type_name(g->type), static_cast<unsigned long long>(g->head_bytes));
    TypeSize ts{};
    type_size(g->type, &ts);
    StaticGeometry sg;
    KVRT_TRY(StaticGeometry::create(n_layers, n_kv_heads, g->head_dim, ts.block_bytes, d.seq_len,
                                    static_reserve(d, ring), &sg));
    StaticRegions& r = g->regions;
    r.ring = ring;
    r.seq_len = sg.max_seq;
    r.reserve = sg.reserve;
    r.window_rows = sg.window_rows;
    r.reservation_rows = sg.reservation_rows;
    r.region_bytes = sg.buffer_bytes;
    // A sequence's regions of all heads of a layer are bound together.
    uint64_t per_seq = 0;
    if (!checked_mul(r.region_bytes, n_kv_heads, &per_seq) || per_seq > max_binding)
        return fail(KVRT_ERROR_UNSUPPORTED,
                    "the static layout binds one sequence's %s windows of a layer whole: %u heads x %u rows x %llu "
                    "bytes exceeds the device's largest binding (%llu bytes); lower seq_len or reserve",
                    what, n_kv_heads, r.reservation_rows, static_cast<unsigned long long>(g->head_bytes),
                    static_cast<unsigned long long>(max_binding));
    // Whole sequences per piece (rows are multiples of 4 bytes; pieces are
    // padded to 16).
    uint64_t seqs = max_binding / per_seq;
    while (seqs > 1 && align_up(seqs * per_seq, 16) > max_binding) --seqs;
    if (align_up(seqs * per_seq, 16) > max_binding)
        return fail(KVRT_ERROR_UNSUPPORTED, "one sequence's %s windows of a layer do not fit the largest binding", what);
    if (seqs >= max_seqs) seqs = max_seqs;
    r.regions_per_piece = static_cast<uint32_t>(seqs * n_kv_heads);
    g->pieces = static_cast<uint32_t>((max_seqs + seqs - 1) / seqs);
    g->piece_bytes = align_up(seqs * per_seq, 16);
    const uint64_t last = max_seqs - (g->pieces - 1) * seqs;
    g->layer_bytes = (g->pieces - 1) * g->piece_bytes + align_up(last * per_seq, 16);
    g->cells_per_piece = 0;
    return KVRT_SUCCESS;
}

}  // namespace

Result CacheGeometry::from_desc(const kvrt_cache_desc* desc, uint64_t max_binding, CacheGeometry* out) {
    const void* found[6] = {};
    KVRT_TRY(check_struct("desc", desc, KVRT_STRUCT_TYPE_CACHE_DESC,
                          {KVRT_STRUCT_TYPE_ROPE_DESC, KVRT_STRUCT_TYPE_STATIC_LAYOUT_DESC,
                           KVRT_STRUCT_TYPE_STATIC_SCALES_DESC, KVRT_STRUCT_TYPE_PAGED_LAYOUT_DESC,
                           KVRT_STRUCT_TYPE_WINDOW_LAYOUT_DESC, KVRT_STRUCT_TYPE_STATIC_STYLE_DESC},
                          found));
    const auto* paged_desc = static_cast<const kvrt_paged_layout_desc*>(found[3]);
    const auto* window_desc = static_cast<const kvrt_window_layout_desc*>(found[4]);
    const auto* style_desc = static_cast<const kvrt_static_style_desc*>(found[5]);
    const kvrt_cache_desc& d = *desc;
    struct {
        const kvrt_rope_desc* rope;
        const kvrt_static_layout_desc* layout;
        const kvrt_static_scales_desc* scales;
    } chain{static_cast<const kvrt_rope_desc*>(found[0]), static_cast<const kvrt_static_layout_desc*>(found[1]),
            static_cast<const kvrt_static_scales_desc*>(found[2])};
    // Enum fields as the caller stored them: checked before they are read as enums.
    const int32_t layout = raw_enum(d.layout);
    if (layout != KVRT_LAYOUT_DEFAULT && layout != KVRT_LAYOUT_CELLS && layout != KVRT_LAYOUT_STATIC &&
        layout != KVRT_LAYOUT_PAGED)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "desc->layout %d is not a kvrt_layout", static_cast<int>(layout));
    const bool is_static = layout == KVRT_LAYOUT_STATIC;
    const bool is_paged = layout == KVRT_LAYOUT_PAGED;
    if (!is_paged && paged_desc)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "a kvrt_paged_layout_desc is chained but the layout is not paged");
    const uint32_t block_size = paged_desc && paged_desc->block_size ? paged_desc->block_size : 16;
    if (is_paged && block_size != 16 && block_size != 32 && block_size != 64)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "kvrt_paged_layout_desc.block_size %u is not 16, 32 or 64",
                    block_size);
    if (is_paged && d.capacity % block_size != 0)
        return fail(KVRT_ERROR_INVALID_ARGUMENT,
                    "the paged layout's capacity %u is not a multiple of its block size %u", d.capacity, block_size);
    if (is_static && !chain.layout)
        return fail(KVRT_ERROR_INVALID_ARGUMENT,
                    "KVRT_LAYOUT_STATIC needs a kvrt_static_layout_desc (seq_len, reserve) in kvrt_cache_desc.next");
    if (!is_static && chain.layout)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "a kvrt_static_layout_desc is chained but the layout is not static");
    if (!is_static && style_desc)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "a kvrt_static_style_desc is chained but the layout is not static");
    const int32_t style = style_desc ? raw_enum(style_desc->style) : KVRT_STATIC_STYLE_SHIFT_POINTER;
    if (style != KVRT_STATIC_STYLE_SHIFT_POINTER && style != KVRT_STATIC_STYLE_SMART_MASK)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "kvrt_static_style_desc.style %d is not a kvrt_static_style",
                    static_cast<int>(style));
    const bool ring = style == KVRT_STATIC_STYLE_SMART_MASK;
    if (is_static && d.capacity != 0)
        return fail(KVRT_ERROR_INVALID_ARGUMENT,
                    "capacity must be 0 with KVRT_LAYOUT_STATIC (it is max_seqs * (seq_len - 1)); got %u", d.capacity);
    if (d.n_layers == 0 || d.n_heads == 0 || d.n_kv_heads == 0 || d.head_dim_k == 0 || (!is_static && d.capacity == 0))
        return fail(KVRT_ERROR_INVALID_ARGUMENT,
                    "n_layers, n_heads, n_kv_heads, head_dim_k and capacity must be > 0 (got %u, %u, %u, %u, %u)",
                    d.n_layers, d.n_heads, d.n_kv_heads, d.head_dim_k, d.capacity);
    if (d.n_heads % d.n_kv_heads != 0)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "n_heads %u is not a multiple of n_kv_heads %u", d.n_heads,
                    d.n_kv_heads);
    if (d.head_dim_k > 1024 || d.head_dim_v > 1024 || d.n_kv_heads > 4096 || d.n_heads > 16384)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "head dims above 1024 or head counts above 4096/16384 are not supported");
    if (d.capacity > (1u << 30))
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "capacity %u exceeds 2^30 cells", d.capacity);
    if (d.max_seqs > 65536) return fail(KVRT_ERROR_INVALID_ARGUMENT, "max_seqs %u exceeds 65536", d.max_seqs);
    if (max_binding < 4096) return fail(KVRT_ERROR_INVALID_ARGUMENT, "binding limit below 4096 bytes");

    CacheGeometry g;
    g.layout = is_static ? KVRT_LAYOUT_STATIC : is_paged ? KVRT_LAYOUT_PAGED : KVRT_LAYOUT_CELLS;
    g.block_size = is_paged ? block_size : 0;
    g.n_layers = d.n_layers;
    g.n_heads = d.n_heads;
    g.n_kv_heads = d.n_kv_heads;
    g.max_seqs = d.max_seqs ? d.max_seqs : (is_static ? 1 : 64);
    g.max_binding = max_binding;
    KVRT_TRY(check_type("desc->type_k", d.type_k));
    KVRT_TRY(check_type("desc->type_v", d.type_v));
    const kvrt_type tk = d.type_k, tv = d.type_v;
    if (d.flags & ~static_cast<kvrt_flags>(KVRT_CACHE_DEFERRED_ROPE | KVRT_CACHE_EXPORTABLE))
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "unknown cache flags 0x%x", static_cast<unsigned>(d.flags));
    g.flags = d.flags;
    KVRT_TRY(resolve_rope(chain.rope, d.head_dim_k, &g.rope));
    const uint32_t dv = d.head_dim_v ? d.head_dim_v : d.head_dim_k;
    if (is_static) {
        // The cells of the static layout are the rows of every region.
        if (chain.layout->seq_len < 2)
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "kvrt_static_layout_desc.seq_len %u must be at least 2",
                        chain.layout->seq_len);
        const double reserve = static_reserve(*chain.layout, ring);
        if (!std::isfinite(reserve) || reserve < 1.0)
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "kvrt_static_layout_desc.reserve %g must be finite and >= 1",
                        reserve);
        if (ring && reserve != 1.0)
            return fail(KVRT_ERROR_INVALID_ARGUMENT,
                        "kvrt_static_layout_desc.reserve %g: the smart-mask style keeps S-1 rows per region (its "
                        "window never moves); reserve must be 0 or 1",
                        reserve);
        const double rows = std::ceil(reserve * (chain.layout->seq_len - 1.0)) * g.max_seqs;
        if (rows > static_cast<double>(1u << 30))
            return fail(KVRT_ERROR_INVALID_ARGUMENT,
                        "max_seqs x ceil(reserve x (seq_len - 1)) = %.0f rows exceeds 2^30", rows);
        g.capacity = static_cast<uint32_t>(rows);
    } else {
        g.capacity = d.capacity;
    }
    KVRT_TRY(row_geometry("K", tk, d.head_dim_k, d.n_kv_heads, g.capacity, max_binding, &g.k));
    KVRT_TRY(row_geometry("V", tv, dv, d.n_kv_heads, g.capacity, max_binding, &g.v));
    KVRT_TRY(static_scales("k", tk, chain.scales, chain.scales ? chain.scales->k_scales : nullptr,
                           chain.scales ? chain.scales->k_zero_points : nullptr, d.n_layers, &g.k.scales));
    KVRT_TRY(static_scales("v", tv, chain.scales, chain.scales ? chain.scales->v_scales : nullptr,
                           chain.scales ? chain.scales->v_zero_points : nullptr, d.n_layers, &g.v.scales));
    if (is_static) {
        KVRT_TRY(static_regions("K", *chain.layout, ring, d.n_layers, d.n_kv_heads, g.max_seqs, max_binding, &g.k));
        KVRT_TRY(static_regions("V", *chain.layout, ring, d.n_layers, d.n_kv_heads, g.max_seqs, max_binding, &g.v));
    }

    // The metadata mirror: at most 2^30 cells of at most 1 + 2 * 1024 words.
    g.meta_words = 1 + 2 * ((g.max_seqs + 63) / 64);
    const uint64_t meta_cell_bytes = uint64_t{g.meta_words} * 4;
    const uint64_t meta_per_piece = std::min<uint64_t>(max_binding / meta_cell_bytes, g.capacity);
    if (meta_per_piece == 0)
        return fail(KVRT_ERROR_INVALID_ARGUMENT,
                    "the metadata of one cell for %u sequences (%llu bytes) exceeds the largest binding", g.max_seqs,
                    static_cast<unsigned long long>(meta_cell_bytes));
    g.meta_cells_per_piece = static_cast<uint32_t>(meta_per_piece);
    g.meta_piece_bytes = align_up(meta_per_piece * meta_cell_bytes, 16);
    const uint64_t meta_pieces = (g.capacity + meta_per_piece - 1) / meta_per_piece;
    g.meta_bytes = (meta_pieces - 1) * g.meta_piece_bytes +
                   align_up((g.capacity - (meta_pieces - 1) * meta_per_piece) * meta_cell_bytes, 16);

    if (!is_static && g.max_seqs > 1 && meta_pieces == 1 && align_up(uint64_t{g.capacity} * 4, 16) <= max_binding)
        g.list_bytes = align_up(uint64_t{g.capacity} * 4, 16);

    if (g.flags & KVRT_CACHE_DEFERRED_ROPE) {
        const Rope rope = Rope::from_params(g.rope, static_cast<int>(g.k.head_dim));
        g.rope_table_bytes = rope.position_table_bytes();
    }

    // The window group: its layers' rows are not the cache's.
    uint32_t own_layers = d.n_layers;
    CacheGeometry group;
    if (window_desc) {
        if (g.layout == KVRT_LAYOUT_STATIC)  // a struct not accepted there: the chain rule's code
            return fail(KVRT_ERROR_INVALID_ARGUMENT,
                        "a kvrt_window_layout_desc needs the cell or paged layout (a static window already keeps "
                        "a fixed number of rows)");
        uint32_t n_group = 0;
        g.window_local.assign(d.n_layers, -1);
        for (uint32_t l = 0; d.layer_windows && l < d.n_layers; ++l) {
            if (d.layer_windows[l] == 0) continue;
            g.window_local[l] = static_cast<int32_t>(n_group++);
            g.window_span = std::max(g.window_span, d.layer_windows[l]);
        }
        if (n_group == 0)
            return fail(KVRT_ERROR_INVALID_ARGUMENT,
                        "a kvrt_window_layout_desc is chained but no layer has a window (layer_windows)");
        g.window_keep = window_desc->n_keep;
        const uint64_t fit = uint64_t{g.max_seqs} * (uint64_t{g.window_span} + g.window_keep) + 512;
        g.window_cells = window_desc->cells ? window_desc->cells
                                            : static_cast<uint32_t>(std::min<uint64_t>(fit, g.capacity));
        if (g.window_cells > g.capacity)
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "kvrt_window_layout_desc.cells %u exceeds the capacity %u",
                        g.window_cells, g.capacity);
        own_layers = d.n_layers - n_group;
        WindowGroupDesc wd;
        window_group_desc(d, g, &wd);
        KVRT_TRY(from_desc(&wd.desc, max_binding, &group));
    }

    // The sizes fit in 64 bits by the limits above (2^30 cells * 2^12 heads *
    // 2^10 dims * 4 bytes * 2^32 layers would not, so check the layer product).
    uint64_t per_layer_token = g.k.row_bytes + g.v.row_bytes, t = 0;
    if (!checked_mul(per_layer_token, d.n_layers, &g.bytes_per_token) ||
        !checked_add(g.k.layer_bytes, g.v.layer_bytes, &t) || !checked_mul(t, own_layers, &g.device_bytes) ||
        !checked_add(g.device_bytes, g.meta_bytes + g.list_bytes + g.rope_table_bytes, &g.device_bytes) ||
        !checked_add(g.device_bytes, group.device_bytes, &g.device_bytes))
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "the cache's size overflows 64 bits");
    if (window_desc) {
        // One row per cell in the cache's layers, one per group cell in the group's.
        uint64_t own = 0;
        if (!checked_mul(per_layer_token, own_layers, &own) || !checked_mul(own, g.capacity, &g.data_bytes) ||
            !checked_add(g.data_bytes, group.data_bytes, &g.data_bytes))
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "the cache's size overflows 64 bits");
        *out = g;
        return KVRT_SUCCESS;
    }
    if (is_static) {
        // Every row of every region: 2 * max_seqs * layers * heads * rows * row bytes.
        const uint64_t rows = uint64_t{g.max_seqs} * g.k.regions.reservation_rows * d.n_kv_heads * d.n_layers;
        if (!checked_mul(rows, g.k.head_bytes + g.v.head_bytes, &g.data_bytes))
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "the cache's size overflows 64 bits");
    } else if (!checked_mul(g.bytes_per_token, g.capacity, &g.data_bytes)) {
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "the cache's size overflows 64 bits");
    }
    *out = g;
    return KVRT_SUCCESS;
}

void window_group_desc(const kvrt_cache_desc& d, const CacheGeometry& g, WindowGroupDesc* out) {
    WindowGroupDesc& w = *out;
    w.desc = d;
    w.desc.next = &w.rope;
    w.desc.layout = KVRT_LAYOUT_CELLS;
    w.desc.capacity = g.window_cells;
    w.desc.max_seqs = g.max_seqs;
    w.windows.clear();
    w.k_scales.clear();
    w.v_scales.clear();
    w.k_zero_points.clear();
    w.v_zero_points.clear();
    for (uint32_t l = 0; l < g.n_layers; ++l) {
        if (!g.in_window_group(l)) continue;
        w.windows.push_back(d.layer_windows[l]);
        if (!g.k.scales.empty()) {
            w.k_scales.push_back(g.k.scales[l].scale);
            w.k_zero_points.push_back(g.k.scales[l].zero_point);
        }
        if (!g.v.scales.empty()) {
            w.v_scales.push_back(g.v.scales[l].scale);
            w.v_zero_points.push_back(g.v.scales[l].zero_point);
        }
    }
    w.desc.n_layers = static_cast<uint32_t>(w.windows.size());
    w.desc.layer_windows = w.windows.data();
    w.rope = g.rope;
    w.rope.next = nullptr;
    if (!w.k_scales.empty() || !w.v_scales.empty()) {
        w.rope.next = &w.scales;
        w.scales = KVRT_STATIC_SCALES_DESC_INIT;
        w.scales.count = w.desc.n_layers;
        w.scales.k_scales = w.k_scales.empty() ? nullptr : w.k_scales.data();
        w.scales.k_zero_points = w.k_zero_points.empty() ? nullptr : w.k_zero_points.data();
        w.scales.v_scales = w.v_scales.empty() ? nullptr : w.v_scales.data();
        w.scales.v_zero_points = w.v_zero_points.empty() ? nullptr : w.v_zero_points.data();
    }
}

}  // namespace kvrt::kv
