#include "ops/rows.hpp"

#include <algorithm>
#include <cstddef>
#include <string>

#include "kv/geometry.hpp"
#include "vk/buffer.hpp"
#include "vk/stream.hpp"

namespace kvrt::ops {

namespace {

constexpr uint32_t kWorkgroup = 64;
constexpr uint32_t kMaxGroups = 8192;

// Mirrors `Push` in shaders/store.comp.
struct StorePush {
    uint32_t n_tokens;
    uint32_t row_elems;
    uint32_t units_per_row;
    uint32_t list_offset;
    float inv_scale;
    int32_t zero_point;
};
static_assert(sizeof(StorePush) == 24, "StorePush layout");
static_assert(offsetof(StorePush, n_tokens) == 0 && offsetof(StorePush, row_elems) == 4 &&
                  offsetof(StorePush, units_per_row) == 8 && offsetof(StorePush, list_offset) == 12 &&
                  offsetof(StorePush, inv_scale) == 16 && offsetof(StorePush, zero_point) == 20,
              "StorePush offsets");

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
vk::BufferUse span(const PieceRef& ref, const std::vector<RowPair>& rows, bool src_side, bool write) {
    uint64_t lo = UINT64_MAX, hi = 0;
    for (const RowPair& r : rows) {
        const uint64_t at = 4ull * (src_side ? r.src_word : r.dst_word);
        lo = std::min(lo, at);
        hi = std::max(hi, at + ref.row_bytes);
    }
    return vk::BufferUse{ref.buffer, ref.piece, lo, hi - lo, write};
}

}  // namespace

Result record_store(vk::Stream& stream, kvrt_type src_type, kvrt_type dst_type, uint32_t row_elems,
                    const PieceRef& src, const PieceRef& dst, const std::vector<RowPair>& rows,
                    const kv::StaticScale& scale) {
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
    uint32_t wg = 8;
    while (wg < kWorkgroup && wg < units) wg *= 2;
    const vk::Pipeline* pipeline = nullptr;
    KVRT_TRY(stream.context().pipelines().get({shader, 3, uint32_t{sizeof(StorePush)}, {wg}}, &pipeline));
    vk::BufferUse list{};
    KVRT_TRY(stream.upload(rows.data(), rows.size() * sizeof(RowPair), &list));
    const vk::BufferUse uses[3] = {span(src, rows, true, false), span(dst, rows, false, true), list};
    // A static-scale type without its scale would store every value as the
    // zero point (inv 0): refuse it rather than write wrong codes.
    if (kv::is_static_scale(dst_type) && !(scale.inv > 0.0f))
        return fail(KVRT_ERROR_INTERNAL, "store of %s without its scale", kv::type_name(dst_type));
    const StorePush push{static_cast<uint32_t>(rows.size()), row_elems, units,
                         static_cast<uint32_t>(list.offset / sizeof(RowPair)), scale.inv, scale.zero_point};
    return stream.dispatch(*pipeline, uses, 3, &push, static_cast<uint32_t>(std::min<size_t>(rows.size(), kMaxGroups)));
}

Result record_copy_rows(vk::Stream& stream, const PieceRef& src, const PieceRef& dst, uint64_t row_bytes,
                        const std::vector<RowPair>& rows) {
    if (rows.empty()) return KVRT_SUCCESS;
    // 16-byte accesses when the row and every offset allow them (the common
    // case: rows of whole 16-byte multiples, pieces 16-byte aligned).
    const uint32_t row_words = static_cast<uint32_t>(row_bytes / 4);
    bool vec4 = row_words % 4 == 0;
    for (size_t i = 0; i < rows.size() && vec4; ++i) vec4 = rows[i].src_word % 4 == 0 && rows[i].dst_word % 4 == 0;
    const vk::Pipeline* pipeline = nullptr;
    KVRT_TRY(stream.context().pipelines().get(
        {vec4 ? "copy_rows_vec4" : "copy_rows", 3, uint32_t{sizeof(CopyRowsPush)}, {kWorkgroup}}, &pipeline));
    vk::BufferUse list{};
    KVRT_TRY(stream.upload(rows.data(), rows.size() * sizeof(RowPair), &list));
    const vk::BufferUse uses[3] = {span(src, rows, true, false), span(dst, rows, false, true), list};
    const CopyRowsPush push{static_cast<uint32_t>(rows.size()), row_words,
                            static_cast<uint32_t>(list.offset / sizeof(RowPair))};
    return stream.dispatch(*pipeline, uses, 3, &push, static_cast<uint32_t>(std::min<size_t>(rows.size(), kMaxGroups)));
}

Result record_gather_span(vk::Stream& stream, const vk::Buffer& buffer, uint64_t offset, uint64_t size,
                          vk::BufferUse* out) {
    void* mapped = nullptr;
    KVRT_TRY(stream.reserve(size, out, &mapped));
    out->write = true;
    const vk::Buffer::Piece& dst = out->buffer->piece(out->piece);
    uint64_t done = 0;
    while (done < size) {
        size_t piece = 0;
        uint64_t in = 0;
        buffer.locate(offset + done, &piece, &in);
        const uint64_t n = std::min(size - done, buffer.piece(piece).size - in);
        const vk::BufferUse uses[2] = {{&buffer, piece, in, n, false}, {out->buffer, out->piece, out->offset + done, n, true}};
        stream.track(uses, 2);
        const VkBufferCopy region{buffer.piece(piece).base + in, dst.base + out->offset + done, n};
        stream.context().fn().vkCmdCopyBuffer(stream.cmd(), buffer.piece(piece).buffer, dst.buffer, 1, &region);
        done += n;
    }
    out->write = false;
    return KVRT_SUCCESS;
}

}  // namespace kvrt::ops
