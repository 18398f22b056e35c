// Recording the in-place RoPE shift kernel (shaders/rope_shift.comp).
#pragma once

#include <cstdint>
#include <vector>

#include "core/result.hpp"
#include "kv/geometry.hpp"
#include "vk/stream.hpp"

namespace kvrt::ops {

// One shifted cell: byte offset of its K row inside its piece, and the first
// (cos, sin) entry of its delta's table.
struct ShiftCell {
    uint32_t k_byte;
    uint32_t table;
};
static_assert(sizeof(ShiftCell) == 8, "ShiftCell mirrors uvec2");

struct ShiftShape {
    kvrt_type k_type;
    uint32_t head_dim, n_rot, n_kv_heads;
    uint64_t head_bytes;
    bool neox;
};

// Records the rotation of `cells` (all in `piece` of `k`, one layer) with the
// tables at `tables` (a whole binding; `table_offset` in (cos, sin) entries).
// `scale` is the layer's quantization of a static-scale K (dequantized,
// rotated and quantized again with it), ignored for other types.
Result record_shift(vk::Stream& stream, const ShiftShape& shape, const vk::Buffer& k, size_t piece,
                    const std::vector<ShiftCell>& cells, const vk::BufferUse& tables, uint32_t table_offset,
                    const kv::StaticScale& scale = kv::StaticScale{});

}  // namespace kvrt::ops
