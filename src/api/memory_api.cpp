// Fixed-capacity memory (kvrt_memory_*): argument and handle checks, then
// kvrt::memory::Memory.
#include "kvrt/kvrt.h"

#include <cstdint>
#include <cstdio>
#include <memory>

#include "api/handles.hpp"
#include "core/checked.hpp"
#include "core/raw_enum.hpp"
#include "kv/geometry.hpp"
#include "memory/memory.hpp"

using namespace kvrt;
using namespace kvrt::api;

namespace {

void destroy_memory(void* object) {
    auto* m = static_cast<MemoryObj*>(object);
    unpublish(m);
    delete m;
}

// F32 or F16 (UNDEFINED and every other type refused); `f16` says which.
Result read_type(const kvrt_type& type, const char* name, bool* f16) {
    KVRT_TRY(kv::check_type(name, type, {KVRT_TYPE_F32, KVRT_TYPE_F16}));
    *f16 = type == KVRT_TYPE_F16;
    return KVRT_SUCCESS;
}

// The structural checks of an initial-data description (no handles); NULL
// means all zero.
Result read_init(const kvrt_memory_init* in, const char* name, memory::MemoryInit* out) {
    *out = memory::MemoryInit{};
    if (!in) return KVRT_SUCCESS;
    KVRT_TRY(check_struct(name, in, KVRT_STRUCT_TYPE_MEMORY_INIT));
    char what[48];
    std::snprintf(what, sizeof what, "%s->element_type", name);
    KVRT_TRY(read_type(in->element_type, what, &out->f16));
    // The source as the caller stored it: any int, checked before use.
    switch (raw_enum(in->source)) {
        case KVRT_MEMORY_SOURCE_ZERO: out->source = memory::MemorySource::Zero; break;
        case KVRT_MEMORY_SOURCE_HOST:
            if (!in->host) return fail(KVRT_ERROR_INVALID_ARGUMENT, "%s: source HOST with host NULL", name);
            out->source = memory::MemorySource::Host;
            out->host = in->host;
            break;
        case KVRT_MEMORY_SOURCE_BUFFER:
            if (!in->buffer) return fail(KVRT_ERROR_INVALID_ARGUMENT, "%s: source BUFFER with buffer NULL", name);
            if (in->offset % 4) return fail(KVRT_ERROR_INVALID_ARGUMENT, "%s: offset is not a multiple of 4", name);
            out->source = memory::MemorySource::Buffer;
            out->offset = in->offset;
            break;
        case KVRT_MEMORY_SOURCE_SEED:
            out->source = memory::MemorySource::Seed;
            out->seed = in->seed;
            break;
        default:
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "%s: unknown source %d", name, static_cast<int>(raw_enum(in->source)));
    }
    return KVRT_SUCCESS;
}

// Everything kvrt_memory_estimate_size and kvrt_memory_create check without a
// buffer handle.
Result read_desc(const kvrt_memory_desc* desc, memory::Memory::Params* out) {
    KVRT_TRY(check_struct("desc", desc, KVRT_STRUCT_TYPE_MEMORY_DESC));
    kv::MemoryGeometry& geo = out->geo;
    const struct {
        uint32_t value;
        const char* name;
    } sizes[] = {{desc->n_layers, "n_layers"}, {desc->n_heads, "n_heads"}, {desc->n_slots, "n_slots"},
                 {desc->key_dim, "key_dim"}};
    for (const auto& s : sizes)
        if (s.value == 0) return fail(KVRT_ERROR_INVALID_ARGUMENT, "desc->%s is 0", s.name);
    geo.n_layers = desc->n_layers;
    geo.n_heads = desc->n_heads;
    geo.m = desc->n_slots;
    geo.e = desc->key_dim;
    geo.d = desc->value_dim ? desc->value_dim : desc->key_dim;
    geo.max_seqs = desc->max_seqs ? desc->max_seqs : 1;
    if (desc->chunk_tokens > kv::kMemoryMaxChunk)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "desc->chunk_tokens %u is above %u", desc->chunk_tokens,
                    kv::kMemoryMaxChunk);
    geo.chunk = desc->chunk_tokens ? desc->chunk_tokens : kv::kMemoryMaxChunk;
    KVRT_TRY(read_type(desc->state_type, "desc->state_type", &geo.state_f16));
    KVRT_TRY(read_init(desc->keys, "desc->keys", &out->keys));
    KVRT_TRY(read_init(desc->values, "desc->values", &out->values));
    geo.has_init = out->values.source != memory::MemorySource::Zero;
    if (desc->label) out->label = desc->label;
    return KVRT_SUCCESS;
}

// The buffer of an initial-data description: live, of `ctx`, range inside.
Result resolve_init_buffer(const ContextObj* ctx, const kvrt_memory_init* in, const char* name, uint64_t values,
                           memory::MemoryInit* out) {
    if (out->source != memory::MemorySource::Buffer) return KVRT_SUCCESS;
    BufferObj* b = nullptr;
    KVRT_TRY(resolve(in->buffer, &b, name));
    if (b->owner != ctx) return fail(KVRT_ERROR_INVALID_ARGUMENT, "%s: the buffer belongs to another context", name);
    uint64_t bytes = 0;
    if (!checked_mul(values, out->f16 ? 2 : 4, &bytes) || !range_inside(in->offset, bytes, b->buffer->size()))
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "%s: the initial data is outside the buffer", name);
    out->buffer = b->buffer.get();
    return KVRT_SUCCESS;
}

// The strides of a memory's tensor: 0 or exactly the packed ones (heads of
// `dim` values back to back, tokens back to back, layers back to back).
Result check_packed(const char* name, uint64_t head_stride, uint64_t row_stride, uint64_t layer_stride,
                    const kv::MemoryGeometry& geo, uint32_t n_tokens, uint32_t dim, bool f16) {
    const uint64_t head = uint64_t{dim} * (f16 ? 2 : 4);
    const uint64_t row = head * geo.n_heads;
    const uint64_t layer = row * n_tokens;
    if ((head_stride && head_stride != head) || (row_stride && row_stride != row) ||
        (layer_stride && layer_stride != layer))
        return fail(KVRT_ERROR_INVALID_ARGUMENT,
                    "%s: a memory takes packed data only; strides must be 0 or head %llu, row %llu and layer %llu "
                    "bytes (got %llu, %llu, %llu)",
                    name, static_cast<unsigned long long>(head), static_cast<unsigned long long>(row),
                    static_cast<unsigned long long>(layer), static_cast<unsigned long long>(head_stride),
                    static_cast<unsigned long long>(row_stride), static_cast<unsigned long long>(layer_stride));
    return KVRT_SUCCESS;
}

// One input of a batch: NULL (missing; the memory reports it when needed) or
// a checked kvrt_tensor_ref.
Result resolve_input(const MemoryObj* m, const kvrt_tensor_ref* ref, const char* name, uint32_t n_tokens, uint32_t dim,
                     memory::MemoryData* out) {
    *out = memory::MemoryData{};
    if (!ref) return KVRT_SUCCESS;
    KVRT_TRY(check_struct(name, ref, KVRT_STRUCT_TYPE_TENSOR_REF));
    char what[48];
    std::snprintf(what, sizeof what, "%s->element_type", name);
    KVRT_TRY(read_type(ref->element_type, what, &out->f16));
    KVRT_TRY(check_packed(name, ref->head_stride, ref->row_stride, ref->layer_stride, m->memory->geometry(), n_tokens,
                          dim, out->f16));
    KVRT_TRY(resolve_buffer(m->owner, name, ref->buffer, &out->buffer));
    if (ref->host) {
        // The offset applies to host memory too.
        if (ref->offset > UINTPTR_MAX - reinterpret_cast<uintptr_t>(ref->host))
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "%s: host + offset overflows", name);
        out->host = static_cast<const uint8_t*>(ref->host) + ref->offset;
    }
    if (out->buffer) out->offset = ref->offset;
    return KVRT_SUCCESS;
}

Result resolve_output(const MemoryObj* m, const kvrt_output_ref* ref, uint32_t n_tokens, memory::MemoryData* out) {
    *out = memory::MemoryData{};
    if (!ref) return KVRT_SUCCESS;
    KVRT_TRY(check_struct("out", ref, KVRT_STRUCT_TYPE_OUTPUT_REF));
    KVRT_TRY(read_type(ref->element_type, "out->element_type", &out->f16));
    KVRT_TRY(check_packed("out", ref->head_stride, ref->row_stride, ref->layer_stride, m->memory->geometry(), n_tokens,
                          m->memory->geometry().d, out->f16));
    KVRT_TRY(resolve_buffer(m->owner, "out", ref->buffer, &out->buffer));
    if (ref->host) {
        if (ref->offset > UINTPTR_MAX - reinterpret_cast<uintptr_t>(ref->host))
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "out: host + offset overflows");
        out->host_out = static_cast<uint8_t*>(ref->host) + ref->offset;
    }
    if (out->buffer) out->offset = ref->offset;
    return KVRT_SUCCESS;
}

// The batch and the tensors the operation uses (the others are ignored, not
// even read).
Result resolve_batch(const MemoryObj* m, const kvrt_memory_batch* in, memory::MemoryOp op, memory::MemoryBatch* out) {
    KVRT_TRY(check_struct("batch", in, KVRT_STRUCT_TYPE_MEMORY_BATCH));
    out->n_tokens = in->n_tokens;
    out->seq_ids = in->seq_ids;
    out->layer = in->layer;
    out->scale = in->scale;
    const kv::MemoryGeometry& geo = m->memory->geometry();
    if (op != memory::MemoryOp::Read) {
        KVRT_TRY(resolve_input(m, in->wq, "wq", in->n_tokens, geo.e, &out->wq));
        KVRT_TRY(resolve_input(m, in->wv, "wv", in->n_tokens, geo.d, &out->wv));
    }
    if (op != memory::MemoryOp::Update) {
        KVRT_TRY(resolve_input(m, in->q, "q", in->n_tokens, geo.e, &out->q));
        KVRT_TRY(resolve_output(m, in->out, in->n_tokens, &out->out));
    }
    return KVRT_SUCCESS;
}

kvrt_result run(kvrt_memory memory, kvrt_stream stream, const kvrt_memory_batch* batch, memory::MemoryOp op) {
    return guarded([&]() -> Result {
        MemoryObj* m = nullptr;
        KVRT_TRY(resolve_usable(memory, &m, "memory"));
        vk::Stream* s = nullptr;
        KVRT_TRY(resolve_stream(m->owner, stream, &s));
        memory::MemoryBatch b;
        KVRT_TRY(resolve_batch(m, batch, op, &b));
        return m->memory->run(s, op, b);
    });
}

Result check_seq(const MemoryObj* m, int32_t seq, bool allow_all, const char* name) {
    const uint32_t n = m->memory->geometry().max_seqs;
    if ((seq < 0 && !allow_all) || (seq >= 0 && static_cast<uint32_t>(seq) >= n))
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "%s %d is not a sequence of this memory (0..%u)", name, seq, n - 1);
    return KVRT_SUCCESS;
}

}  // namespace

extern "C" {

KVRT_API kvrt_result kvrt_memory_estimate_size(kvrt_context context, const kvrt_memory_desc* desc,
                                               kvrt_memory_estimate* out) {
    return guarded([&]() -> Result {
        KVRT_TRY(check_struct("out", out, KVRT_STRUCT_TYPE_MEMORY_ESTIMATE));
        uint64_t cap = kv::kMemoryPieceCap;
        if (context) {
            ContextObj* c = nullptr;
            KVRT_TRY(resolve(context, &c, "context"));
            cap = memory::Memory::piece_cap(*c->ctx);
        }
        memory::Memory::Params params;
        KVRT_TRY(read_desc(desc, &params));
        memory::MemoryLayout layout;
        KVRT_TRY(layout.compute(params.geo, cap));
        // One slot of one sequence: every layer's groups (MemoryLayout::state_offset).
        uint64_t per_seq = 0;
        if (!checked_mul(uint64_t{layout.geo.n_layers} * layout.n_groups, layout.state_block, &per_seq))
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "the memory's sizes overflow 64 bits");
        out->device_bytes = layout.total_bytes;
        out->state_bytes_per_seq = per_seq;
        out->max_binding_bytes = layout.piece_cap;
        return KVRT_SUCCESS;
    });
}

KVRT_API kvrt_result kvrt_memory_create(kvrt_context context, const kvrt_memory_desc* desc, kvrt_memory* out_memory) {
    return guarded([&]() -> Result {
        if (!out_memory) return fail(KVRT_ERROR_INVALID_ARGUMENT, "out_memory is NULL");
        *out_memory = nullptr;
        ContextObj* c = nullptr;
        KVRT_TRY(resolve_context(context, &c, "context"));
        memory::Memory::Params params;
        KVRT_TRY(read_desc(desc, &params));
        const kv::MemoryGeometry& geo = params.geo;
        uint64_t per_dim = 0;  // values of the initial data per element of a row
        if (!checked_mul(static_cast<uint64_t>(geo.n_layers) * geo.n_heads, geo.m, &per_dim))
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "the memory's sizes overflow 64 bits");
        uint64_t key_values = 0, value_values = 0;
        if (!checked_mul(per_dim, geo.e, &key_values) || !checked_mul(per_dim, geo.d, &value_values))
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "the memory's sizes overflow 64 bits");
        KVRT_TRY(resolve_init_buffer(c, desc->keys, "desc->keys", key_values, &params.keys));
        KVRT_TRY(resolve_init_buffer(c, desc->values, "desc->values", value_values, &params.values));
        auto obj = std::make_unique<MemoryObj>();
        obj->owner = c;
        KVRT_TRY(memory::Memory::create(*c->ctx, params, &obj->memory));
        KVRT_TRY(adopt(c, obj.get(), &destroy_memory));
        *out_memory = obj.release()->handle;
        return KVRT_SUCCESS;
    });
}

KVRT_API void kvrt_memory_destroy(kvrt_memory memory) {
    guarded_void([&]() {
        MemoryObj* m = lookup(memory);
        if (!m) return;
        m->owner->children.remove(m);
        destroy_memory(m);
    });
}

KVRT_API kvrt_result kvrt_memory_update(kvrt_memory memory, kvrt_stream stream, const kvrt_memory_batch* batch) {
    return run(memory, stream, batch, memory::MemoryOp::Update);
}

KVRT_API kvrt_result kvrt_memory_read(kvrt_memory memory, kvrt_stream stream, const kvrt_memory_batch* batch) {
    return run(memory, stream, batch, memory::MemoryOp::Read);
}

KVRT_API kvrt_result kvrt_memory_update_read(kvrt_memory memory, kvrt_stream stream,
                                             const kvrt_memory_batch* batch) {
    return run(memory, stream, batch, memory::MemoryOp::UpdateRead);
}

KVRT_API kvrt_result kvrt_memory_seq_rm(kvrt_memory memory, kvrt_stream stream, int32_t seq) {
    return guarded([&]() -> Result {
        MemoryObj* m = nullptr;
        KVRT_TRY(resolve_usable(memory, &m, "memory"));
        vk::Stream* s = nullptr;
        KVRT_TRY(resolve_stream(m->owner, stream, &s));
        KVRT_TRY(check_seq(m, seq, true, "seq"));
        return m->memory->seq_rm(s, seq);
    });
}

KVRT_API kvrt_result kvrt_memory_seq_cp(kvrt_memory memory, kvrt_stream stream, int32_t src, int32_t dst) {
    return guarded([&]() -> Result {
        MemoryObj* m = nullptr;
        KVRT_TRY(resolve_usable(memory, &m, "memory"));
        vk::Stream* s = nullptr;
        KVRT_TRY(resolve_stream(m->owner, stream, &s));
        KVRT_TRY(check_seq(m, src, false, "src"));
        KVRT_TRY(check_seq(m, dst, false, "dst"));
        return m->memory->seq_cp(s, static_cast<uint32_t>(src), static_cast<uint32_t>(dst));
    });
}

KVRT_API kvrt_result kvrt_memory_get_state(kvrt_memory memory, int32_t seq, int32_t layer, float* out,
                                           uint64_t out_bytes) {
    return guarded([&]() -> Result {
        MemoryObj* m = nullptr;
        KVRT_TRY(resolve_usable(memory, &m, "memory"));
        KVRT_TRY(check_seq(m, seq, false, "seq"));
        const kv::MemoryGeometry& geo = m->memory->geometry();
        if (layer < 0 || static_cast<uint32_t>(layer) >= geo.n_layers)
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "layer %d is outside 0..%u", layer, geo.n_layers - 1);
        if (!out) return fail(KVRT_ERROR_INVALID_ARGUMENT, "out is NULL");
        const uint64_t need = uint64_t{geo.n_heads} * geo.m * geo.d * sizeof(float);
        if (out_bytes < need)
            return fail(KVRT_ERROR_INVALID_ARGUMENT,
                        "out_bytes %llu is below %u heads of %u slots of %u floats (%llu bytes)",
                        static_cast<unsigned long long>(out_bytes), geo.n_heads, geo.m, geo.d,
                        static_cast<unsigned long long>(need));
        return m->memory->get_state(static_cast<uint32_t>(seq), static_cast<uint32_t>(layer), out);
    });
}

}  // extern "C"
