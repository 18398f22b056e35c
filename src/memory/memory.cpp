// The fixed-capacity memory: creation, initial values, sequence operations
// and state read-back. The recording of updates and reads is in
// memory_run.cpp.
#include "memory/memory.hpp"

#include <algorithm>
#include <cstring>

#include "core/checked.hpp"
#include "kv/memory_half.hpp"
#include "ops/transfer.hpp"

namespace kvrt::memory {

namespace memory_half = kv::memory_half;

namespace {

// Host values of one layer's initial data: n_heads * m rows of `dim` f32.
Result read_init_layer(const MemoryInit& init, const MemoryGeometry& geo, uint32_t layer, uint32_t dim,
                       std::vector<float>* out) {
    const uint64_t count = static_cast<uint64_t>(geo.n_heads) * geo.m * dim;
    const uint64_t first = static_cast<uint64_t>(layer) * count;
    out->resize(static_cast<size_t>(count));
    float* dst = out->data();
    switch (init.source) {
        case MemorySource::Zero:
            std::fill(out->begin(), out->end(), 0.0f);
            return KVRT_SUCCESS;
        case MemorySource::Seed:
            for (uint64_t i = 0; i < count; ++i) dst[i] = memory_half::seeded(init.seed, first + i);
            return KVRT_SUCCESS;
        case MemorySource::Host:
        case MemorySource::Buffer:
            break;
    }
    const uint64_t esize = init.f16 ? 2 : 4;
    std::vector<uint16_t> halves;
    void* raw = dst;
    if (init.f16) {
        halves.resize(static_cast<size_t>(count));
        raw = halves.data();
    }
    if (init.source == MemorySource::Host) {
        std::memcpy(raw, static_cast<const uint8_t*>(init.host) + first * esize, static_cast<size_t>(count * esize));
    } else {
        KVRT_TRY(init.buffer->download(init.offset + first * esize, raw, count * esize));
    }
    if (init.f16)
        for (uint64_t i = 0; i < count; ++i) dst[i] = memory_half::to_f32(halves[static_cast<size_t>(i)]);
    return KVRT_SUCCESS;
}

}  // namespace

uint64_t Memory::piece_cap(const vk::Context& ctx) {
    return std::min(kv::kMemoryPieceCap, align_down(ctx.max_binding_bytes(), kv::kMemoryAlign));
}

Result Memory::create(vk::Context& ctx, const Params& params, std::unique_ptr<Memory>* out) {
    MemoryLayout layout;
    KVRT_TRY(layout.compute(params.geo, piece_cap(ctx)));
    const std::string label = params.label.empty() ? std::string("kvrt memory") : params.label;
    std::unique_ptr<Memory> mem(new Memory(ctx, layout, label));
    const MemoryLayout& l = mem->layout_;
    KVRT_TRY(ops::memory_kernels::get_pipelines(ctx, params.geo.state_f16, &mem->pipes_));
    const std::string& name = mem->label_;
    KVRT_TRY(vk::Buffer::create(ctx, l.keys_bytes, l.keys_piece, (name + " keys").c_str(), &mem->keys_));
    KVRT_TRY(vk::Buffer::create(ctx, l.state_bytes, l.state_piece, (name + " state").c_str(), &mem->state_));
    if (l.init_bytes)
        KVRT_TRY(vk::Buffer::create(ctx, l.init_bytes, l.state_piece, (name + " initial").c_str(), &mem->init_));
    KVRT_TRY(vk::Buffer::create(ctx, l.work_bytes, l.work_bytes, (name + " work").c_str(), &mem->work_));
    KVRT_TRY(vk::Buffer::create(ctx, l.stage_bytes, l.stage_bytes, (name + " reads").c_str(), &mem->stage_));
    KVRT_TRY(mem->upload_init(params));
    mem->meta_.assign(static_cast<size_t>(l.geo.max_seqs) * l.geo.n_layers, SeqLayer{});
    *out = std::move(mem);
    return KVRT_SUCCESS;
}

Result Memory::upload_init(const Params& params) {
    const MemoryLayout& l = layout_;
    const MemoryGeometry& geo = l.geo;
    std::vector<float> src;
    // Keys: transposed [ep][mp] per head (the buffer is zero, so padding is).
    if (params.keys.source != MemorySource::Zero) {
        std::vector<float> img(static_cast<size_t>(l.n_groups * l.keys_block / 4));
        for (uint32_t layer = 0; layer < geo.n_layers; ++layer) {
            KVRT_TRY(read_init_layer(params.keys, geo, layer, geo.e, &src));
            std::fill(img.begin(), img.end(), 0.0f);
            for (uint32_t h = 0; h < geo.n_heads; ++h) {
                float* dst = img.data() + ((h / l.group) * l.keys_block + (h % l.group) * l.keys_head) / 4;
                const float* rows = src.data() + static_cast<size_t>(h) * geo.m * geo.e;
                for (uint32_t m = 0; m < geo.m; ++m)
                    for (uint32_t e = 0; e < geo.e; ++e)
                        dst[static_cast<size_t>(e) * l.mp + m] = rows[static_cast<size_t>(m) * geo.e + e];
            }
            KVRT_TRY(keys_->upload(l.keys_offset(layer, 0), img.data(), l.n_groups * l.keys_block));
        }
    }
    if (!init_) return KVRT_SUCCESS;
    // Initial values: [m][dp] per head in the state's precision.
    const size_t words = static_cast<size_t>(l.n_groups * l.state_block / 4);
    std::vector<uint32_t> img(words);
    for (uint32_t layer = 0; layer < geo.n_layers; ++layer) {
        KVRT_TRY(read_init_layer(params.values, geo, layer, geo.d, &src));
        std::fill(img.begin(), img.end(), 0u);
        for (uint32_t h = 0; h < geo.n_heads; ++h) {
            const uint64_t base = (h / l.group) * l.state_block + (h % l.group) * l.state_head;
            const float* rows = src.data() + static_cast<size_t>(h) * geo.m * geo.d;
            for (uint32_t m = 0; m < geo.m; ++m) {
                for (uint32_t d = 0; d < geo.d; ++d) {
                    const float v = rows[static_cast<size_t>(m) * geo.d + d];
                    const uint64_t idx = static_cast<uint64_t>(m) * l.dp + d;
                    if (geo.state_f16) {
                        uint16_t* p = reinterpret_cast<uint16_t*>(img.data()) + base / 2 + idx;
                        *p = memory_half::from_f32(v);
                    } else {
                        std::memcpy(img.data() + base / 4 + idx, &v, 4);
                    }
                }
            }
        }
        KVRT_TRY(init_->upload(l.init_offset(layer, 0), img.data(), l.n_groups * l.state_block));
    }
    return KVRT_SUCCESS;
}

Memory::~Memory() {
    for (vk::Stream* s : ctx_.streams()) s->forget_owner(this);
}

vk::BufferUse Memory::whole(const vk::Buffer& b, size_t piece, bool write) const {
    return vk::BufferUse{&b, piece, 0, b.piece(piece).size, write};
}

ops::memory_kernels::StateBinding Memory::bind_state(const StateRef& ref, uint32_t seq, uint32_t layer, uint32_t g,
                                                     bool write) const {
    const MemoryLayout& l = layout_;
    const uint64_t unit = l.geo.state_f16 ? 16 : 32;  // bytes of 8 state elements
    const vk::Buffer* buf = nullptr;
    uint64_t byte = 0;
    switch (ref.where) {
        case Where::Slot:
            buf = state_.get();
            byte = l.state_offset(seq, ref.slot, layer, g);
            break;
        case Where::Init:
            buf = init_.get();
            byte = l.init_offset(layer, g);
            break;
        case Where::Temp:
            return {whole(*work_, 0, write), static_cast<uint32_t>(l.w_temp / unit),
                    static_cast<uint32_t>(l.work_head / unit)};
        case Where::Zero:
        case Where::None:
            return {whole(*work_, 0, write), 0, 0};
    }
    size_t piece = 0;
    uint64_t in = 0;
    buf->locate(byte, &piece, &in);
    return {whole(*buf, piece, write), static_cast<uint32_t>(in / unit), static_cast<uint32_t>(l.state_head / unit)};
}

Result Memory::seq_rm(vk::Stream* stream, int32_t seq) {
    if (stream) KVRT_TRY(stream->require_recording());
    vk::Transaction tx(this, stream, sync_);  // no device work: never begins
    undo_to_now(tx);
    const uint32_t first = seq < 0 ? 0 : static_cast<uint32_t>(seq);
    const uint32_t last = seq < 0 ? layout_.geo.max_seqs : first + 1;
    for (uint32_t s = first; s < last; ++s)
        for (uint32_t layer = 0; layer < layout_.geo.n_layers; ++layer) meta(s, layer).fresh = true;
    tx.commit();
    return KVRT_SUCCESS;
}

Result Memory::seq_cp(vk::Stream* stream, uint32_t src, uint32_t dst) {
    if (src == dst) return stream ? stream->require_recording() : KVRT_SUCCESS;
    vk::Transaction tx(this, stream, sync_);
    KVRT_TRY(tx.begin());
    vk::Stream* s = &tx.stream();
    undo_to_now(tx);
    const MemoryLayout& l = layout_;
    for (uint32_t layer = 0; layer < l.geo.n_layers; ++layer) {
        const SeqLayer from = meta(src, layer);
        SeqLayer& to = meta(dst, layer);
        if (from.fresh) {
            to.fresh = true;
            continue;
        }
        // Into dst's other slot, so a failure leaves dst's current one intact.
        const uint8_t target = static_cast<uint8_t>(1 - to.slot);
        s->begin_op("memory_fork");
        Result r = KVRT_SUCCESS;
        for (uint32_t g = 0; g < l.n_groups && r == KVRT_SUCCESS; ++g)
            r = ops::record_copy(*s, *state_, l.state_offset(src, from.slot, layer, g), *state_,
                            l.state_offset(dst, target, layer, g), l.state_block);
        s->end_op();
        KVRT_TRY(r);
        to = SeqLayer{target, false};
    }
    return tx.finish();
}

Result Memory::get_state(uint32_t seq, uint32_t layer, float* out) {
    const MemoryLayout& l = layout_;
    const MemoryGeometry& geo = l.geo;
    const SeqLayer st = meta(seq, layer);
    const uint64_t head_values = static_cast<uint64_t>(geo.m) * geo.d;
    if (st.fresh && !init_) {
        std::fill(out, out + geo.n_heads * head_values, 0.0f);
        return KVRT_SUCCESS;
    }
    const uint64_t esize = geo.state_f16 ? 2 : 4;
    const uint64_t bytes = static_cast<uint64_t>(geo.m) * l.dp * esize;
    std::vector<uint8_t> raw(static_cast<size_t>(bytes));
    for (uint32_t h = 0; h < geo.n_heads; ++h) {
        const uint32_t g = h / l.group;
        vk::Buffer& buf = st.fresh ? *init_ : *state_;
        const uint64_t block = st.fresh ? l.init_offset(layer, g) : l.state_offset(seq, st.slot, layer, g);
        KVRT_TRY(buf.download(block + (h % l.group) * l.state_head, raw.data(), bytes));
        float* dst = out + h * head_values;
        for (uint32_t m = 0; m < geo.m; ++m) {
            for (uint32_t d = 0; d < geo.d; ++d) {
                const size_t i = static_cast<size_t>(m) * l.dp + d;
                float v = 0.0f;
                if (geo.state_f16) {
                    uint16_t hbits = 0;
                    std::memcpy(&hbits, raw.data() + 2 * i, 2);
                    v = memory_half::to_f32(hbits);
                } else {
                    std::memcpy(&v, raw.data() + 4 * i, 4);
                }
                dst[static_cast<size_t>(m) * geo.d + d] = v;
            }
        }
    }
    return KVRT_SUCCESS;
}

}  // namespace kvrt::memory
