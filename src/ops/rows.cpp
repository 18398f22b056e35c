#include "ops/rows.hpp"

#include <algorithm>
#include <cstddef>
#include <string>

#include "core/checked.hpp"
#include "kv/geometry.hpp"
#include "ops/tuning.hpp"
#include "vk/buffer.hpp"
#include "vk/stream.hpp"

namespace kvrt::ops {

namespace {

// Mirrors `Push` in shaders/store.comp.
struct StorePush {
    uint32_t n_tokens;
    uint32_t row_elems;
    uint32_t units_per_row;
    uint32_t list_offset;
    float inv_scale;
    int32_t zero_point;
    uint32_t head_dim;
    uint32_t src_head_elems;
};
static_assert(sizeof(StorePush) == 32, "StorePush layout");
static_assert(offsetof(StorePush, n_tokens) == 0 && offsetof(StorePush, row_elems) == 4 &&
                  offsetof(StorePush, units_per_row) == 8 && offsetof(StorePush, list_offset) == 12 &&
                  offsetof(StorePush, inv_scale) == 16 && offsetof(StorePush, zero_point) == 20 &&
                  offsetof(StorePush, head_dim) == 24 && offsetof(StorePush, src_head_elems) == 28,
              "StorePush offsets");

// Mirrors `Push` in shaders/store_raw.comp.
struct StoreRawPush {
    uint32_t n_rows;
    uint32_t heads;
    uint32_t head_bytes;
    uint32_t src_head_stride;
    uint32_t list_offset;
};
static_assert(sizeof(StoreRawPush) == 20, "StoreRawPush layout");
static_assert(offsetof(StoreRawPush, heads) == 4 && offsetof(StoreRawPush, head_bytes) == 8 &&
                  offsetof(StoreRawPush, src_head_stride) == 12 && offsetof(StoreRawPush, list_offset) == 16,
              "StoreRawPush offsets");

// Mirrors `Push` in shaders/copy_rows.comp.
struct CopyRowsPush {
    uint32_t n_rows;
    uint32_t row_words;
    uint32_t list_offset;
};
static_assert(sizeof(CopyRowsPush) == 12, "CopyRowsPush layout");
static_assert(offsetof(CopyRowsPush, n_rows) == 0 && offsetof(CopyRowsPush, row_words) == 4 &&
                  offsetof(CopyRowsPush, list_offset) == 8, "CopyRowsPush offsets");

// The byte range of a piece touched by rows starting at the given word
// offsets, `row_bytes` each.
vk::BufferUse span(const PieceRef& ref, const std::vector<RowPair>& rows, bool src_side, bool write,
                   uint64_t unit = 4) {
    uint64_t lo = UINT64_MAX, hi = 0;
    for (const RowPair& r : rows) {
        const uint64_t at = unit * (src_side ? r.src_word : r.dst_word);
        lo = std::min(lo, at);
        hi = std::max(hi, at + ref.row_bytes);
    }
    return vk::BufferUse{ref.buffer, ref.piece, lo, hi - lo, write};
}

}  // namespace

Result record_store(vk::Stream& stream, kvrt_type src_type, kvrt_type dst_type, uint32_t row_elems,
                    const PieceRef& src, const PieceRef& dst, const std::vector<RowPair>& rows,
                    const kv::StaticScale& scale, const HeadSpacing& heads) {
    if (rows.empty()) return KVRT_SUCCESS;
    if (src_type != KVRT_TYPE_F32 && src_type != KVRT_TYPE_F16)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "input type %s is not f32 or f16", kv::type_name(src_type));
    uint32_t units = 0;
    switch (dst_type) {
        case KVRT_TYPE_F32: units = row_elems; break;
        case KVRT_TYPE_F16: units = row_elems / 2; break;
        case KVRT_TYPE_Q8_0:
        case KVRT_TYPE_Q4_0: units = (row_elems / 32 + 1) / 2; break;
        case KVRT_TYPE_U8_STATIC: units = (row_elems + 3) / 4; break;
        case KVRT_TYPE_U16_STATIC: units = row_elems / 2; break;
        default: return fail(KVRT_ERROR_INTERNAL, "no store kernel for %s", kv::type_name(dst_type));
    }
    const std::string shader =
        std::string("store_") + kv::type_name(src_type) + "_" + kv::type_name(dst_type);
    // A workgroup writes one row: size it to the row's units (quantized rows
    // have few, large units), between 8 and 64 invocations.
    const Tuning t = Tuning::of(stream.context());
    uint32_t wg = t.store_min_workgroup;
    while (wg < t.rows_workgroup && wg < units) wg *= 2;
    const vk::Pipeline* pipeline = nullptr;
    KVRT_TRY(stream.context().pipelines().get({shader, 3, uint32_t{sizeof(StorePush)}, {wg}}, &pipeline));
    vk::BufferUse list{};
    KVRT_TRY(stream.upload(rows.data(), rows.size() * sizeof(RowPair), &list));
    const vk::BufferUse uses[3] = {span(src, rows, true, false), span(dst, rows, false, true), list};
    // A static-scale type without its scale would store every value as the
    // zero point (inv 0): refuse it rather than write wrong codes.
    if (kv::is_static_scale(dst_type) && !(scale.inv > 0.0f))
        return fail(KVRT_ERROR_INTERNAL, "store of %s without its scale", kv::type_name(dst_type));
    const uint32_t head_dim = heads.head_dim ? heads.head_dim : row_elems;
    const uint32_t head_elems = heads.head_dim ? heads.src_head_elems : row_elems;
    if (row_elems % head_dim || head_dim % 2 || head_elems % 2)
        return fail(KVRT_ERROR_INTERNAL, "store of rows of %u values in heads of %u, %u apart", row_elems, head_dim,
                    head_elems);
    const StorePush push{static_cast<uint32_t>(rows.size()),
                         row_elems,
                         units,
                         static_cast<uint32_t>(list.offset / sizeof(RowPair)),
                         scale.inv,
                         scale.zero_point,
                         head_dim,
                         head_elems};
    return stream.dispatch(*pipeline, uses, 3, &push,
                           static_cast<uint32_t>(std::min<size_t>(rows.size(), t.rows_max_groups)));
}

Result record_store_raw(vk::Stream& stream, uint32_t heads, uint32_t head_bytes, uint32_t src_head_stride,
                        const PieceRef& src, const PieceRef& dst, const std::vector<RowPair>& rows) {
    if (rows.empty()) return KVRT_SUCCESS;
    if (heads == 0 || head_bytes == 0) return fail(KVRT_ERROR_INTERNAL, "raw store of empty rows");
    const uint32_t words = (heads * head_bytes + 3) / 4;
    const Tuning t = Tuning::of(stream.context());
    uint32_t wg = t.store_min_workgroup;
    while (wg < t.rows_workgroup && wg < words) wg *= 2;
    const vk::Pipeline* pipeline = nullptr;
    KVRT_TRY(stream.context().pipelines().get({"store_raw", 3, uint32_t{sizeof(StoreRawPush)}, {wg}}, &pipeline));
    vk::BufferUse list{};
    KVRT_TRY(stream.upload(rows.data(), rows.size() * sizeof(RowPair), &list));
    // The source side is in bytes: widen it to the words the kernel reads.
    vk::BufferUse from = span(src, rows, true, false, 1);
    const uint64_t lo = align_down(from.offset, 4);
    from.size = align_up(from.offset + from.size, 4) - lo;
    from.offset = lo;
    const vk::BufferUse uses[3] = {from, span(dst, rows, false, true), list};
    const StoreRawPush push{static_cast<uint32_t>(rows.size()), heads, head_bytes, src_head_stride,
                            static_cast<uint32_t>(list.offset / sizeof(RowPair))};
    return stream.dispatch(*pipeline, uses, 3, &push,
                           static_cast<uint32_t>(std::min<size_t>(rows.size(), t.rows_max_groups)));
}

Result record_copy_rows(vk::Stream& stream, const PieceRef& src, const PieceRef& dst, uint64_t row_bytes,
                        const std::vector<RowPair>& rows) {
    if (rows.empty()) return KVRT_SUCCESS;
    // 16-byte accesses when the row and every offset allow them (the common
    // case: rows of whole 16-byte multiples, pieces 16-byte aligned).
    const uint32_t row_words = static_cast<uint32_t>(row_bytes / 4);
    bool vec4 = row_words % 4 == 0;
    for (size_t i = 0; i < rows.size() && vec4; ++i) vec4 = rows[i].src_word % 4 == 0 && rows[i].dst_word % 4 == 0;
    const Tuning t = Tuning::of(stream.context());
    const vk::Pipeline* pipeline = nullptr;
    KVRT_TRY(stream.context().pipelines().get(
        {vec4 ? "copy_rows_vec4" : "copy_rows", 3, uint32_t{sizeof(CopyRowsPush)}, {t.rows_workgroup}}, &pipeline));
    vk::BufferUse list{};
    KVRT_TRY(stream.upload(rows.data(), rows.size() * sizeof(RowPair), &list));
    const vk::BufferUse uses[3] = {span(src, rows, true, false), span(dst, rows, false, true), list};
    const CopyRowsPush push{static_cast<uint32_t>(rows.size()), row_words,
                            static_cast<uint32_t>(list.offset / sizeof(RowPair))};
    return stream.dispatch(*pipeline, uses, 3, &push,
                           static_cast<uint32_t>(std::min<size_t>(rows.size(), t.rows_max_groups)));
}

Result record_gather_strided(vk::Stream& stream, const vk::Buffer& buffer, uint64_t offset, uint32_t count,
                             uint64_t stride, uint64_t size, vk::BufferUse* out) {
    void* mapped = nullptr;
    KVRT_TRY(stream.reserve(size * count, out, &mapped));
    out->write = true;
    const vk::Buffer::Piece& dst = out->buffer->piece(out->piece);
    for (uint32_t i = 0; i < count; ++i) {
        const uint64_t from = offset + i * stride, to = out->offset + i * size;
        uint64_t done = 0;
        while (done < size) {
            size_t piece = 0;
            uint64_t in = 0;
            buffer.locate(from + done, &piece, &in);
            const uint64_t n = std::min(size - done, buffer.piece(piece).size - in);
            const vk::BufferUse uses[2] = {{&buffer, piece, in, n, false}, {out->buffer, out->piece, to + done, n, true}};
            stream.track(uses, 2);
            const VkBufferCopy region{buffer.piece(piece).base + in, dst.base + to + done, n};
            stream.context().fn().vkCmdCopyBuffer(stream.cmd(), buffer.piece(piece).buffer, dst.buffer, 1, &region);
            done += n;
        }
    }
    out->size = size * count;
    out->write = false;
    return KVRT_SUCCESS;
}

}  // namespace kvrt::ops
