// The store data paths of Cache: checks of a write's sources and the
// recording of their rows, either values (F32, F16) converted by the store
// kernel to the stored type, or rows given in the stored type, copied bit for
// bit. Sources may hold a token's heads apart (head-major tensors); host
// sources are gathered into packed upload memory first.
#include <algorithm>
#include <cstring>
#include <map>
#include <tuple>
#include <utility>

#include "cache/cache.hpp"
#include "cache/strides.hpp"
#include "core/checked.hpp"
#include "ops/rows.hpp"

namespace kvrt::cache {

namespace {

// True when `s` holds the array's stored bytes rather than values.
bool is_raw(kvrt_type src, kvrt_type stored) {
    return src == stored && src != KVRT_TYPE_F32 && src != KVRT_TYPE_F16;
}

// Bytes of one head row of `s` for an array of geometry `g`.
uint64_t source_head_bytes(kvrt_type src, const kv::RowGeometry& g) {
    if (is_raw(src, g.type)) return g.head_bytes;
    return uint64_t{g.head_dim} * (src == KVRT_TYPE_F16 ? 2 : 4);
}

// Offset and stride alignment of a source: 4 for values, 2 for stored bytes
// (1 for U8_STATIC codes).
uint64_t source_align(kvrt_type src, const kv::RowGeometry& g) {
    if (!is_raw(src, g.type)) return 4;
    return src == KVRT_TYPE_U8_STATIC ? 1 : 2;
}

}  // namespace

Result CellStore::check_source(const char* what, const Source& s, uint32_t n, int32_t layer,
                           const kv::RowGeometry& g) const {
    if (s.type != KVRT_TYPE_F32 && s.type != KVRT_TYPE_F16 && s.type != g.type)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "%s: element type %s is not F32, F16 or the stored type %s", what,
                    kv::type_name(s.type), kv::type_name(g.type));
    if (!s.buffer == !s.host) return fail(KVRT_ERROR_INVALID_ARGUMENT, "%s: set exactly one of buffer and host", what);
    StridedRows rows;
    KVRT_TRY(resolve_strided(what, s.offset, s.row_stride, s.head_stride, s.layer_stride, layer < 0 ? geo_.n_layers : 1,
                             n, geo_.n_kv_heads, source_head_bytes(s.type, g), source_align(s.type, g), &rows));
    return check_strided_extent(what, rows, s.buffer ? s.buffer->size() : 0, s.host);
}

Result CellStore::check_write(uint32_t n, int32_t layer, const Source& k, const Source& v) const {
    if (layer < -1 || layer >= static_cast<int32_t>(geo_.n_layers))
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "layer %d is out of range (-1 or 0..%u)", layer, geo_.n_layers - 1);
    KVRT_TRY(check_source("k", k, n, layer, geo_.k));
    KVRT_TRY(check_source("v", v, n, layer, geo_.v));
    return KVRT_SUCCESS;
}

Result CellStore::record_array(vk::Stream& s, Array array, uint32_t n, const uint32_t* cells, uint32_t layer,
                           uint32_t src_layer, const Source& src) {
    const kv::RowGeometry& g = arena_->rows(array);
    const bool raw = is_raw(src.type, g.type);
    const uint32_t n_heads = geo_.n_kv_heads;
    const uint64_t elem = src.type == KVRT_TYPE_F16 ? 2 : 4;
    StridedRows rows;  // checked by check_source
    KVRT_TRY(resolve_strided(raw ? "stored rows" : "rows", src.offset, src.row_stride, src.head_stride,
                             src.layer_stride, src_layer + 1, n, n_heads, source_head_bytes(src.type, g),
                             source_align(src.type, g), &rows));
    const uint64_t head_bytes = rows.head_bytes;         // of the source
    const uint64_t packed_row = head_bytes * n_heads;    // a token's heads back to back
    // Heads apart in the cache (static windows): one destination row per head.
    const uint64_t dst_head_stride = arena_->head_stride(array);
    const bool split_heads = dst_head_stride != g.head_bytes;
    const RowLocation any = arena_->locate(array, layer, 0);
    if (packed_row > ctx_.max_binding_bytes())
        return fail(KVRT_ERROR_UNSUPPORTED, "one token's rows (%llu bytes) exceed the device's largest binding",
                    static_cast<unsigned long long>(packed_row));

    // Host rows are packed into the stream's upload memory, as many per chunk
    // as one binding holds; device rows are read where they are.
    const uint32_t chunk =
        src.host ? static_cast<uint32_t>(std::min<uint64_t>(n, ctx_.max_binding_bytes() / packed_row)) : n;
    for (uint32_t first = 0; first < n; first += chunk) {
        const uint32_t count = std::min(chunk, n - first);
        const vk::Buffer* buffer = src.buffer;
        vk::BufferUse up{};
        if (src.host) {
            void* mapped = nullptr;
            KVRT_TRY(s.reserve(packed_row * count, &up, &mapped));
            auto* to = static_cast<uint8_t*>(mapped);
            for (uint32_t i = 0; i < count; ++i) {
                const uint8_t* from = src.host + rows.at(src_layer, first + i, 0);
                if (rows.heads_packed()) {
                    std::memcpy(to + i * packed_row, from, static_cast<size_t>(packed_row));
                    continue;
                }
                for (uint32_t h = 0; h < n_heads; ++h)
                    std::memcpy(to + i * packed_row + h * head_bytes, from + h * rows.head,
                                static_cast<size_t>(head_bytes));
            }
            buffer = up.buffer;
        }
        // One dispatch per (source buffer, source piece, cache piece, source
        // head stride). A token whose heads cross a piece boundary of the
        // caller's buffer (kernels bind one piece at a time), or whose last
        // word would (a piece that ends inside a word), is first copied into
        // upload memory, packed.
        using Key = std::tuple<const vk::Buffer*, size_t, size_t, uint64_t>;
        std::map<Key, std::vector<ops::RowPair>> groups;
        for (uint32_t i = 0; i < count; ++i) {
            const vk::Buffer* from = buffer;
            uint64_t at = src.host ? up.offset + i * packed_row : rows.at(src_layer, first + i, 0);
            uint64_t head_stride = src.host ? head_bytes : rows.head;
            size_t sp = 0;
            uint64_t so = 0;
            buffer->locate(at, &sp, &so);
            const uint64_t extent = (n_heads - 1) * head_stride + head_bytes;
            if ((raw ? align_up(so + extent, 4) : so + extent) > buffer->piece(sp).size) {
                vk::BufferUse tmp{};
                KVRT_TRY(ops::record_gather_strided(s, *buffer, at, n_heads, head_stride, head_bytes, &tmp));
                from = tmp.buffer;
                sp = tmp.piece;
                so = tmp.offset;
                head_stride = head_bytes;
            }
            const RowLocation dst = arena_->locate(array, layer, cells[first + i]);
            const uint64_t unit = raw ? 1 : 4;  // the raw kernel takes source bytes
            auto& list = groups[Key{from, sp, dst.piece, split_heads ? 0 : head_stride}];
            if (!split_heads) {
                list.push_back({static_cast<uint32_t>(so / unit), static_cast<uint32_t>(dst.offset / 4)});
                continue;
            }
            for (uint32_t h = 0; h < n_heads; ++h)
                list.push_back({static_cast<uint32_t>((so + h * head_stride) / unit),
                                static_cast<uint32_t>((dst.offset + h * dst_head_stride) / 4)});
        }
        for (const auto& [key, pairs] : groups) {
            const uint64_t head_stride = std::get<3>(key);
            const uint32_t heads = split_heads ? 1 : n_heads;
            const uint64_t src_extent = split_heads ? head_bytes : (n_heads - 1) * head_stride + head_bytes;
            const ops::PieceRef from{std::get<0>(key), std::get<1>(key), src_extent};
            const ops::PieceRef to{any.buffer, std::get<2>(key), split_heads ? g.head_bytes : g.stride};
            if (raw) {
                KVRT_TRY(ops::record_store_raw(s, heads, static_cast<uint32_t>(g.head_bytes),
                                               static_cast<uint32_t>(split_heads ? head_bytes : head_stride), from, to,
                                               pairs));
                continue;
            }
            const ops::HeadSpacing spacing{g.head_dim, static_cast<uint32_t>((split_heads ? head_bytes : head_stride) / elem)};
            KVRT_TRY(ops::record_store(s, src.type, g.type, heads * g.head_dim, from, to, pairs,
                                       g.scales.empty() ? kv::StaticScale{} : g.scales[layer], spacing));
        }
    }
    return KVRT_SUCCESS;
}

Result Cache::record_writes(vk::Stream& s, uint32_t n, const uint32_t* cells, int32_t layer, const Source& k,
                            const Source& v) {
    s.begin_op("store");
    Result r = KVRT_SUCCESS;
    const uint32_t first = layer < 0 ? 0 : static_cast<uint32_t>(layer);
    const uint32_t last = layer < 0 ? geo_.n_layers : first + 1;
    for (uint32_t l = first; l < last && r == KVRT_SUCCESS; ++l) {
        if (geo_.in_window_group(l)) {
            r = group_->record_writes(s, n, cells, l, l - first, k, v);
            continue;
        }
        r = record_array(s, Array::K, n, cells, l, l - first, k);
        if (r == KVRT_SUCCESS) r = record_array(s, Array::V, n, cells, l, l - first, v);
    }
    s.end_op();
    return r;
}

}  // namespace kvrt::cache
