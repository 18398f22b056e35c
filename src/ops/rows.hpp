// Row kernels of the cache: store (convert and quantize tokens' K/V into cells,
// or copy rows given in the stored type) and row copies (compaction moves,
// readback gathers).
#pragma once

#include <cstdint>
#include <vector>

#include "core/result.hpp"
#include "kv/geometry.hpp"

namespace kvrt::vk {
class Buffer;
class Stream;
struct BufferUse;
}  // namespace kvrt::vk

namespace kvrt::ops {

// One row to move: word offsets of its start in the source and destination
// pieces (the layout of the list kernels read, uvec2). record_store_raw reads
// src_word as a byte offset.
struct RowPair {
    uint32_t src_word;
    uint32_t dst_word;
};
static_assert(sizeof(RowPair) == 8, "RowPair mirrors uvec2");

// A side of a row operation: one piece of a buffer, and the bytes of each row
// there (for barrier tracking).
struct PieceRef {
    const vk::Buffer* buffer = nullptr;
    size_t piece = 0;
    uint64_t row_bytes = 0;
};

// How a store's source row holds its heads: `head_dim` values each, the
// heads `src_head_elems` values apart (head_dim when packed).
struct HeadSpacing {
    uint32_t head_dim = 0;
    uint32_t src_head_elems = 0;
};

// Records the store of `rows` (all in src.piece and dst.piece): each row of
// `row_elems` values of `src_type` (F32 or F16), in heads spaced as `heads`
// says (head_dim 0: one packed head), is written to the cache's element type
// `dst_type` at its destination, packed. `scale` is the layer's quantization
// for static-scale types (U8_STATIC, U16_STATIC; NaN inputs get the zero
// point), ignored for the others. src.row_bytes is the extent of a source
// row. Fails for unsupported types, and for a static-scale type without a
// scale.
Result record_store(vk::Stream& stream, kvrt_type src_type, kvrt_type dst_type, uint32_t row_elems,
                    const PieceRef& src, const PieceRef& dst, const std::vector<RowPair>& rows,
                    const kv::StaticScale& scale = kv::StaticScale{}, const HeadSpacing& heads = HeadSpacing{});

// Records the bit-for-bit copy of `rows` (src_word: the source byte offset of
// the row's first head, any alignment; dst_word: the destination row's word):
// `heads` head rows of `head_bytes` each, `src_head_stride` bytes apart in the
// source, back to back in the destination, whose last word is completed with
// zeros. src.row_bytes is the extent of a source row; dst.row_bytes that of a
// destination row. The source words holding each row must lie in src.piece.
Result record_store_raw(vk::Stream& stream, uint32_t heads, uint32_t head_bytes, uint32_t src_head_stride,
                        const PieceRef& src, const PieceRef& dst, const std::vector<RowPair>& rows);

// Records copies of whole rows of `row_bytes` (a multiple of 4) from src to dst.
Result record_copy_rows(vk::Stream& stream, const PieceRef& src, const PieceRef& dst, uint64_t row_bytes,
                        const std::vector<RowPair>& rows);

// Records transfer copies of `count` spans of `size` bytes, `stride` bytes
// apart from `offset` in `buffer` (a span may cross pieces), packed back to
// back into the stream's upload memory, so one binding holds them (the heads
// of one token of a head-major tensor); `out` describes the copy.
Result record_gather_strided(vk::Stream& stream, const vk::Buffer& buffer, uint64_t offset, uint32_t count,
                             uint64_t stride, uint64_t size, vk::BufferUse* out);

}  // namespace kvrt::ops
