#include "ops/rope.hpp"

#include <algorithm>
#include <cstddef>
#include <string>

#include "kv/geometry.hpp"
#include "vk/buffer.hpp"

namespace kvrt::ops {

namespace {

constexpr uint32_t kWorkgroup = 64;

// Mirrors `Push` in shaders/rope_shift.comp.
struct ShiftPush {
    uint32_t n_cells, n_kv_heads, head_bytes, list_offset, table_offset;
};
static_assert(sizeof(ShiftPush) == 20, "ShiftPush layout");
static_assert(offsetof(ShiftPush, head_bytes) == 8 && offsetof(ShiftPush, table_offset) == 16, "ShiftPush offsets");

}  // namespace

Result record_shift(vk::Stream& stream, const ShiftShape& shape, const vk::Buffer& k, size_t piece,
                    const std::vector<ShiftCell>& cells, const vk::BufferUse& tables, uint32_t table_offset) {
    if (cells.empty()) return KVRT_SUCCESS;
    const std::string shader = std::string("rope_shift_") + kv::type_name(shape.k_type);
    const vk::Pipeline* pipeline = nullptr;
    KVRT_TRY(stream.context().pipelines().get(
        {shader, 3, uint32_t{sizeof(ShiftPush)}, {kWorkgroup, shape.head_dim, shape.n_rot, shape.neox ? 1u : 0u}},
        &pipeline));
    vk::BufferUse list{};
    KVRT_TRY(stream.upload(cells.data(), cells.size() * sizeof(ShiftCell), &list));
    const vk::BufferUse uses[3] = {{&k, piece, 0, 0, true}, list, tables};
    const ShiftPush push{static_cast<uint32_t>(cells.size()), shape.n_kv_heads, static_cast<uint32_t>(shape.head_bytes),
                         static_cast<uint32_t>(list.offset / sizeof(ShiftCell)), table_offset};
    const uint32_t groups = static_cast<uint32_t>(std::min<size_t>((cells.size() + kWorkgroup - 1) / kWorkgroup, 4096));
    return stream.dispatch(*pipeline, uses, 3, &push, groups);
}

}  // namespace kvrt::ops
