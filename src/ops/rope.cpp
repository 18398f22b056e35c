#include "ops/rope.hpp"

#include <algorithm>
#include <cstddef>
#include <string>

#include "kv/geometry.hpp"
#include "ops/tuning.hpp"
#include "vk/buffer.hpp"

namespace kvrt::ops {

namespace {

// Mirrors `Push` in shaders/rope_shift.comp.
struct ShiftPush {
    uint32_t n_cells, n_kv_heads, head_bytes, list_offset, table_offset;
    float scale, inv_scale;
    int32_t zero_point;
};
static_assert(sizeof(ShiftPush) == 32, "ShiftPush layout");
static_assert(offsetof(ShiftPush, head_bytes) == 8 && offsetof(ShiftPush, table_offset) == 16 &&
                  offsetof(ShiftPush, scale) == 20 && offsetof(ShiftPush, inv_scale) == 24 &&
                  offsetof(ShiftPush, zero_point) == 28,
              "ShiftPush offsets");

// Mirrors `Push` in shaders/rope_shift_blocks.comp.
struct BlocksPush {
    uint32_t n_cells, n_kv_heads, head_bytes, list_offset, table_offset;
};
static_assert(sizeof(BlocksPush) == 20, "BlocksPush layout");

// Mirrors `Push` in shaders/rope_shift_fast.comp.
struct FastPush {
    uint32_t n_cells, n_kv_heads, list_offset, table_offset, cells_per_chunk;
    float scale, inv_scale;
    int32_t zero_point;
};
static_assert(sizeof(FastPush) == 32, "FastPush layout");
static_assert(offsetof(FastPush, list_offset) == 8 && offsetof(FastPush, cells_per_chunk) == 16 &&
                  offsetof(FastPush, scale) == 20 && offsetof(FastPush, zero_point) == 28,
              "FastPush offsets");

// Values of `type` in one 32-bit word for the streaming kernel, or 0 when it
// does not take the type.
uint32_t values_per_word(kvrt_type type) {
    switch (type) {
        case KVRT_TYPE_F32: return 1;
        case KVRT_TYPE_F16:
        case KVRT_TYPE_U16_STATIC: return 2;
        case KVRT_TYPE_U8_STATIC: return 4;
        default: return 0;
    }
}

// Whether rope_shift_fast.comp can rotate these rows: whole words for every
// row and head, and NeoX pairs of whole words (a normal pair never leaves a
// word, except F32's pair of words).
bool streams(const ShiftShape& shape, const std::vector<ShiftCell>& cells) {
    const uint32_t p = values_per_word(shape.k_type);
    if (p == 0 || shape.head_dim % p != 0) return false;
    if (shape.neox && shape.n_rot % (2 * p) != 0) return false;
    if (p == 1) return true;  // F32 rows are words
    for (const ShiftCell& c : cells)
        if (c.k_byte % 4 != 0) return false;
    return true;
}

}  // namespace

Result record_shift(vk::Stream& stream, const ShiftShape& shape, const vk::Buffer& k, size_t piece,
                    const std::vector<ShiftCell>& cells, const vk::BufferUse& tables, uint32_t table_offset,
                    const kv::StaticScale& scale) {
    if (cells.empty()) return KVRT_SUCCESS;
    // Without its scale a static-scale K would be rewritten as zeros.
    if (kv::is_static_scale(shape.k_type) && !(scale.scale > 0.0f && scale.inv > 0.0f))
        return fail(KVRT_ERROR_INTERNAL, "RoPE shift of %s K without its scale", kv::type_name(shape.k_type));
    const Tuning t = Tuning::of(stream.context());
    const uint32_t wg = t.shift_workgroup;
    // F32, F16 and static-scale rows of whole words: the streaming kernel. On
    // lavapipe (AMD EPYC, 2 cores), 4,096 cells of 8 heads of 128 dims: U8
    // 5.4 ms and U16 8.4 ms against 13.7 and 12.0 ms one row per invocation
    // (copies of 4 and 8 MiB 2.5 and 4.1 ms, F16 5.7 ms, in the same runs).
    if (streams(shape, cells)) {
        const bool f16 = shape.k_type == KVRT_TYPE_F16;
        // 16-byte units when rows, heads and the rotated range allow them.
        bool vec4 = f16 && shape.head_dim % 8 == 0 && shape.n_rot % (shape.neox ? 16 : 8) == 0;
        for (size_t i = 0; i < cells.size() && vec4; ++i) vec4 = cells[i].k_byte % 16 == 0;
        const uint32_t p = values_per_word(shape.k_type);
        const std::string shader = vec4 ? "rope_shift_fast_f16_vec4"
                                        : std::string("rope_shift_fast_") + kv::type_name(shape.k_type);
        const vk::Pipeline* pipeline = nullptr;
        KVRT_TRY(stream.context().pipelines().get(
            {shader, 3, uint32_t{sizeof(FastPush)}, {wg, shape.head_dim, shape.n_rot, shape.neox ? 1u : 0u}},
            &pipeline));
        vk::BufferUse list{};
        KVRT_TRY(stream.upload(cells.data(), cells.size() * sizeof(ShiftCell), &list));
        const vk::BufferUse uses[3] = {{&k, piece, 0, 0, true}, list, tables};
        // Units per head: as rope_shift_fast.comp counts them.
        const uint32_t per_head = vec4             ? (shape.neox ? shape.n_rot / 16 : shape.n_rot / 8)
                                  : shape.neox     ? shape.n_rot / (2 * p)
                                  : p == 1         ? shape.n_rot / 2
                                                   : (shape.n_rot + p - 1) / p;
        const uint32_t units = shape.n_kv_heads * per_head;
        const uint32_t per_chunk = t.shift_cells_per_group;
        const FastPush push{static_cast<uint32_t>(cells.size()),
                            shape.n_kv_heads,
                            static_cast<uint32_t>(list.offset / sizeof(ShiftCell)),
                            table_offset,
                            per_chunk,
                            scale.scale,
                            scale.inv,
                            scale.zero_point};
        const uint32_t chunks = static_cast<uint32_t>((cells.size() + per_chunk - 1) / per_chunk);
        if (chunks > 65535) return fail(KVRT_ERROR_INTERNAL, "too many cells for one shift dispatch");
        return stream.dispatch(*pipeline, uses, 3, &push, (units + wg - 1) / wg, chunks);
    }
    // Q8_0 and Q4_0 whose NeoX pairs stay inside a block or pair whole
    // blocks: one invocation per block (coalesced on GPUs). On lavapipe (AMD
    // EPYC, 2 cores), 4,096 cells of 8 heads of 128 dims: Q8_0 8.5 ms and
    // Q4_0 7.1 ms against 18.8 and 14.1 ms one row per invocation (F16
    // 6.9 ms, a 16 MiB copy 7.7 ms, in the same runs).
    const bool blocks = (shape.k_type == KVRT_TYPE_Q8_0 || shape.k_type == KVRT_TYPE_Q4_0) &&
                        (!shape.neox || shape.n_rot <= 32 || shape.n_rot % 64 == 0);
    if (blocks) {
        const vk::Pipeline* pipeline = nullptr;
        KVRT_TRY(stream.context().pipelines().get(
            {std::string("rope_shift_blocks_") + kv::type_name(shape.k_type), 3, uint32_t{sizeof(BlocksPush)},
             {wg, shape.head_dim, shape.n_rot, shape.neox ? 1u : 0u}},
            &pipeline));
        vk::BufferUse list{};
        KVRT_TRY(stream.upload(cells.data(), cells.size() * sizeof(ShiftCell), &list));
        const vk::BufferUse uses[3] = {{&k, piece, 0, 0, true}, list, tables};
        const BlocksPush push{static_cast<uint32_t>(cells.size()), shape.n_kv_heads,
                              static_cast<uint32_t>(shape.head_bytes),
                              static_cast<uint32_t>(list.offset / sizeof(ShiftCell)), table_offset};
        const uint64_t invocations = uint64_t{cells.size()} * shape.n_kv_heads * (shape.head_dim / 32);
        if (invocations > UINT32_MAX) return fail(KVRT_ERROR_INTERNAL, "too many blocks for one shift dispatch");
        const uint32_t groups = static_cast<uint32_t>(std::min<uint64_t>((invocations + wg - 1) / wg, t.shift_max_groups));
        return stream.dispatch(*pipeline, uses, 3, &push, groups);
    }
    const std::string shader = std::string("rope_shift_") + kv::type_name(shape.k_type);
    const vk::Pipeline* pipeline = nullptr;
    KVRT_TRY(stream.context().pipelines().get(
        {shader, 3, uint32_t{sizeof(ShiftPush)}, {wg, shape.head_dim, shape.n_rot, shape.neox ? 1u : 0u}},
        &pipeline));
    vk::BufferUse list{};
    KVRT_TRY(stream.upload(cells.data(), cells.size() * sizeof(ShiftCell), &list));
    const vk::BufferUse uses[3] = {{&k, piece, 0, 0, true}, list, tables};
    const ShiftPush push{static_cast<uint32_t>(cells.size()),
                         shape.n_kv_heads,
                         static_cast<uint32_t>(shape.head_bytes),
                         static_cast<uint32_t>(list.offset / sizeof(ShiftCell)),
                         table_offset,
                         scale.scale,
                         scale.inv,
                         scale.zero_point};
    const uint32_t groups = static_cast<uint32_t>(std::min<size_t>((cells.size() + wg - 1) / wg, t.shift_max_groups));
    return stream.dispatch(*pipeline, uses, 3, &push, groups);
}

}  // namespace kvrt::ops
