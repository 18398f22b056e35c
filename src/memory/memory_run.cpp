// The fixed-capacity memory: checking batches of updates and reads, and
// splitting them into chunks (up to `chunk` tokens of one sequence at one
// layer) whose kernels ops/memory_update.cpp records (see memory.hpp for the
// all-or-nothing scheme and kv/memory_layout.hpp for the working memory).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_map>

#include "core/checked.hpp"
#include "memory/memory.hpp"

namespace kvrt::memory {

namespace mk = ops::memory_kernels;

namespace {

uint64_t esize(const MemoryData& d) { return d.f16 ? 2 : 4; }

uint32_t div_up(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

// Checks one input or output: present once, aligned, inside its buffer, and
// each layer's block inside one piece.
Result check_data(const MemoryData& data, const char* name, uint64_t layer_bytes, uint32_t n_layers, bool output,
                  bool sync, uint64_t host_limit) {
    const bool host = output ? data.host_out != nullptr : data.host != nullptr;
    if (!data.buffer && !host) return fail(KVRT_ERROR_INVALID_ARGUMENT, "%s: no data (set buffer or host)", name);
    if (data.buffer && host) return fail(KVRT_ERROR_INVALID_ARGUMENT, "%s: set buffer or host, not both", name);
    uint64_t total = 0;
    if (!checked_mul(layer_bytes, n_layers, &total))
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "%s: the data size overflows", name);
    if (host) {
        if (output && !sync)
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "%s: host outputs need a NULL stream (use a buffer)", name);
        if (output && layer_bytes > host_limit)
            return fail(KVRT_ERROR_INVALID_ARGUMENT,
                        "%s: %llu bytes per layer exceed what one read to host memory can stage (%llu); split the "
                        "batch", name, static_cast<unsigned long long>(layer_bytes),
                        static_cast<unsigned long long>(host_limit));
        return KVRT_SUCCESS;
    }
    if (data.offset % 4)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "%s: offset %llu is not a multiple of 4", name,
                    static_cast<unsigned long long>(data.offset));
    if (!range_inside(data.offset, total, data.buffer->size()))
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "%s: [%llu, +%llu) is outside the buffer of %llu bytes", name,
                    static_cast<unsigned long long>(data.offset), static_cast<unsigned long long>(total),
                    static_cast<unsigned long long>(data.buffer->size()));
    for (uint32_t l = 0; l < n_layers; ++l) {
        size_t p0 = 0, p1 = 0;
        uint64_t in = 0;
        const uint64_t start = data.offset + l * layer_bytes;
        data.buffer->locate(start, &p0, &in);
        data.buffer->locate(start + layer_bytes - 1, &p1, &in);
        if (p0 != p1)
            return fail(KVRT_ERROR_INVALID_ARGUMENT,
                        "%s: the data of one layer straddles a %llu-byte piece of the buffer; use a buffer or "
                        "offset that keeps each layer inside one piece", name,
                        static_cast<unsigned long long>(data.buffer->piece_bytes()));
    }
    return KVRT_SUCCESS;
}

}  // namespace

Result Memory::check_batch(MemoryOp op, const MemoryBatch& b, bool sync) const {
    const MemoryGeometry& geo = layout_.geo;
    if (b.n_tokens == 0) return fail(KVRT_ERROR_INVALID_ARGUMENT, "the batch has no tokens");
    if (b.layer < -1 || b.layer >= static_cast<int64_t>(geo.n_layers))
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "layer %d is outside 0..%u (or -1 for all layers)", b.layer,
                    geo.n_layers - 1);
    if (b.seq_ids) {
        for (uint32_t t = 0; t < b.n_tokens; ++t) {
            if (b.seq_ids[t] < 0 || static_cast<uint32_t>(b.seq_ids[t]) >= geo.max_seqs)
                return fail(KVRT_ERROR_INVALID_ARGUMENT, "seq_ids[%u] = %d is not a sequence of this memory (0..%u)",
                            t, b.seq_ids[t], geo.max_seqs - 1);
        }
    }
    const uint32_t n_layers = b.layer < 0 ? geo.n_layers : 1;
    const uint64_t rows = b.n_tokens;
    // Bytes of one layer of a tensor: n_tokens * n_heads * dim elements.
    auto bytes = [&](const MemoryData& d, const char* what, uint32_t dim, uint64_t* out) -> Result {
        uint64_t v = 0;
        if (!checked_mul(rows, geo.n_heads, &v) || !checked_mul(v, dim, &v) || !checked_mul(v, esize(d), &v))
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "%s: the size of %u tokens overflows 64 bits", what, b.n_tokens);
        *out = v;
        return KVRT_SUCCESS;
    };
    uint64_t size = 0;
    if (op != MemoryOp::Read) {
        KVRT_TRY(bytes(b.wq, "wq", geo.e, &size));
        KVRT_TRY(check_data(b.wq, "wq", size, n_layers, false, sync, 0));
        KVRT_TRY(bytes(b.wv, "wv", geo.d, &size));
        KVRT_TRY(check_data(b.wv, "wv", size, n_layers, false, sync, 0));
    }
    if (op != MemoryOp::Update) {
        KVRT_TRY(bytes(b.q, "q", geo.e, &size));
        KVRT_TRY(check_data(b.q, "q", size, n_layers, false, sync, 0));
        if (b.out.f16 && (static_cast<uint64_t>(geo.n_heads) * geo.d) % 2)
            return fail(KVRT_ERROR_INVALID_ARGUMENT,
                        "out: F16 outputs need n_heads * value_dim even (rows of whole 32-bit words)");
        KVRT_TRY(bytes(b.out, "out", geo.d, &size));
        KVRT_TRY(check_data(b.out, "out", size, n_layers, true, sync, layout_.piece_cap));
        if (!std::isfinite(b.scale)) return fail(KVRT_ERROR_INVALID_ARGUMENT, "scale is not finite");
    }
    return KVRT_SUCCESS;
}

Result Memory::ensure_host_out(uint64_t layer_bytes, uint32_t n_layers) {
    uint64_t stride = 0, need = 0;
    if (!checked_align_up(layer_bytes, kv::kMemoryAlign, &stride) || !checked_mul(stride, n_layers, &need))
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "out: the size of the outputs overflows 64 bits");
    if (host_out_ && host_out_->size() >= need && host_out_->piece_bytes() % stride == 0) {
        host_out_stride_ = stride;
        return KVRT_SUCCESS;
    }
    // Whole layers per piece, so each layer's rows are one binding.
    const uint64_t piece = (layout_.piece_cap / stride) * stride;
    std::unique_ptr<vk::Buffer> buf;
    KVRT_TRY(vk::Buffer::create(ctx_, need, piece, (label_ + " host reads").c_str(), &buf));
    host_out_ = std::move(buf);
    host_out_stride_ = stride;
    return KVRT_SUCCESS;
}

Result Memory::run(vk::Stream* stream, MemoryOp op, const MemoryBatch& b) {
    KVRT_TRY(check_batch(op, b, stream == nullptr));
    const MemoryGeometry& geo = layout_.geo;
    const uint32_t n_layers = b.layer < 0 ? geo.n_layers : 1;
    const bool reads = op != MemoryOp::Update;
    const uint64_t out_layer_bytes = static_cast<uint64_t>(b.n_tokens) * geo.n_heads * geo.d * esize(b.out);

    // The tokens of each sequence, in batch order.
    std::vector<SeqRun> runs;
    std::unordered_map<uint32_t, size_t> index;
    for (uint32_t t = 0; t < b.n_tokens; ++t) {
        const uint32_t seq = b.seq_ids ? static_cast<uint32_t>(b.seq_ids[t]) : 0;
        auto [it, added] = index.emplace(seq, runs.size());
        if (added) runs.push_back(SeqRun{seq, {}});
        runs[it->second].rows.push_back(t);
    }

    if (reads && b.out.host_out) KVRT_TRY(ensure_host_out(out_layer_bytes, n_layers));
    vk::Transaction tx(this, stream, sync_);
    KVRT_TRY(tx.begin());
    // Reads change no metadata.
    if (op != MemoryOp::Read) undo_to_now(tx);
    KVRT_TRY(record(tx.stream(), op, b, runs));
    KVRT_TRY(tx.submit());
    // Host outputs are part of the call: a failed download undoes it too,
    // and leaves the caller's output as it was (the layers come down into a
    // copy first: a staged download can fail after some of them).
    if (!stream && reads && b.out.host_out) {
        std::vector<uint8_t> host(static_cast<size_t>(n_layers) * out_layer_bytes);
        for (uint32_t l = 0; l < n_layers; ++l)
            KVRT_TRY(host_out_->download(l * host_out_stride_, host.data() + l * out_layer_bytes, out_layer_bytes));
        std::memcpy(b.out.host_out, host.data(), host.size());
    }
    tx.commit();
    return KVRT_SUCCESS;
}

Result Memory::record(vk::Stream& s, MemoryOp op, const MemoryBatch& b, const std::vector<SeqRun>& runs) {
    const MemoryGeometry& geo = layout_.geo;
    const bool updates = op != MemoryOp::Read;
    const uint32_t n_layers = b.layer < 0 ? geo.n_layers : 1;
    const uint32_t first_layer = b.layer < 0 ? 0 : static_cast<uint32_t>(b.layer);
    s.begin_op(op == MemoryOp::Update ? "memory_update" : op == MemoryOp::Read ? "memory_read" : "memory_update_read");
    Result r = KVRT_SUCCESS;
    for (uint32_t lr = 0; lr < n_layers && r == KVRT_SUCCESS; ++lr) {
        const uint32_t layer = first_layer + lr;
        for (const SeqRun& run : runs) {
            SeqLayer& st = meta(run.seq, layer);
            StateRef src;
            if (st.fresh) src.where = init_ ? Where::Init : Where::Zero;
            else src = StateRef{Where::Slot, st.slot};
            const uint32_t final_slot = 1u - st.slot;
            const uint32_t n = static_cast<uint32_t>(run.rows.size());
            const uint32_t n_chunks = div_up(n, geo.chunk);
            for (uint32_t k = 0; k < n_chunks && r == KVRT_SUCCESS; ++k) {
                Chunk c;
                c.layer = layer;
                c.layer_rel = lr;
                c.seq = run.seq;
                c.tokens = std::min(geo.chunk, n - k * geo.chunk);
                c.rows = static_cast<uint32_t>(align_up(c.tokens, kv::kMemoryRowPad));
                c.batch_rows = run.rows.data() + static_cast<size_t>(k) * geo.chunk;
                c.src = src;
                if (updates) {
                    // Alternate so that the last chunk lands in the other slot.
                    c.dst = (n_chunks - 1 - k) % 2 == 0 ? StateRef{Where::Slot, final_slot} : StateRef{Where::Temp, 0};
                    src = c.dst;
                }
                r = record_chunk(s, op, b, c);
            }
            if (r != KVRT_SUCCESS) break;
            if (updates) st = SeqLayer{static_cast<uint8_t>(final_slot), false};
        }
    }
    s.end_op();
    return r;
}

Result Memory::prepare_input(vk::Stream& s, const MemoryData& data, uint32_t dim, const MemoryBatch& b,
                             const Chunk& c, InputRef* out) {
    const uint64_t es = esize(data);
    const uint64_t row_bytes = static_cast<uint64_t>(layout_.geo.n_heads) * dim * es;
    const uint64_t layer_base = static_cast<uint64_t>(c.layer_rel) * b.n_tokens * row_bytes;
    out->f16 = data.f16;
    if (data.host) {
        // Host rows are gathered into the stream's upload memory.
        vk::BufferUse use;
        void* mapped = nullptr;
        KVRT_TRY(s.reserve(c.tokens * row_bytes, &use, &mapped));
        const auto* src = static_cast<const uint8_t*>(data.host) + layer_base;
        for (uint32_t t = 0; t < c.tokens; ++t)
            std::memcpy(static_cast<uint8_t*>(mapped) + t * row_bytes, src + c.batch_rows[t] * row_bytes,
                        static_cast<size_t>(row_bytes));
        out->use = whole(*use.buffer, use.piece, false);
        out->base = static_cast<uint32_t>(use.offset / es);
        out->gathered = true;
        return KVRT_SUCCESS;
    }
    size_t piece = 0;
    uint64_t in = 0;
    data.buffer->locate(data.offset + layer_base, &piece, &in);
    out->use = whole(*data.buffer, piece, false);
    out->base = static_cast<uint32_t>(in / es);
    out->gathered = false;
    return KVRT_SUCCESS;
}

Result Memory::record_chunk(vk::Stream& s, MemoryOp op, const MemoryBatch& b, const Chunk& chunk) {
    const MemoryGeometry& geo = layout_.geo;
    Chunk c = chunk;
    KVRT_TRY(s.upload(c.batch_rows, 4ull * c.tokens, &c.idx));
    c.idx_base = static_cast<uint32_t>(c.idx.offset / 4);
    c.idx = whole(*c.idx.buffer, c.idx.piece, false);
    if (op != MemoryOp::Read) {
        KVRT_TRY(prepare_input(s, b.wq, geo.e, b, c, &c.wq));
        KVRT_TRY(prepare_input(s, b.wv, geo.d, b, c, &c.wv));
    }
    if (op != MemoryOp::Update) KVRT_TRY(prepare_input(s, b.q, geo.e, b, c, &c.q));
    mk::GroupArgs a;
    a.updates = op != MemoryOp::Read;
    a.reads = op != MemoryOp::Update;
    a.tokens = c.tokens;
    a.rows = c.rows;
    a.wq = &c.wq;
    a.wv = &c.wv;
    a.q = &c.q;
    a.idx = c.idx;
    a.idx_base = c.idx_base;
    a.src_zero = c.src.where == Where::Zero;
    a.work = whole(*work_, 0, true);
    a.stage = whole(*stage_, 0, true);
    a.scale = b.scale;
    for (uint32_t g = 0; g < layout_.n_groups; ++g) {
        a.group = g;
        size_t kp = 0;
        keys_->locate(layout_.keys_offset(c.layer, g), &kp, &a.keys_in);
        a.keys = whole(*keys_, kp, false);
        a.src = bind_state(c.src, c.seq, c.layer, g, false);
        a.dst = bind_state(c.dst, c.seq, c.layer, g, true);
        KVRT_TRY(mk::record_group(s, pipes_, layout_, a));
    }
    if (op != MemoryOp::Update) KVRT_TRY(record_out(s, b, c));
    return KVRT_SUCCESS;
}

Result Memory::record_out(vk::Stream& s, const MemoryBatch& b, const Chunk& c) {
    const MemoryGeometry& geo = layout_.geo;
    const uint64_t row_values = static_cast<uint64_t>(geo.n_heads) * geo.d;
    const uint32_t row_words = static_cast<uint32_t>(b.out.f16 ? row_values / 2 : row_values);
    const vk::Buffer* dst = nullptr;
    uint64_t byte = 0;
    if (b.out.host_out) {
        dst = host_out_.get();
        byte = c.layer_rel * host_out_stride_;
    } else {
        dst = b.out.buffer;
        byte = b.out.offset + static_cast<uint64_t>(c.layer_rel) * b.n_tokens * row_values * esize(b.out);
    }
    size_t piece = 0;
    uint64_t in = 0;
    dst->locate(byte, &piece, &in);
    return mk::record_out(s, pipes_, whole(*stage_, 0, false), whole(*dst, piece, true), static_cast<uint32_t>(in / 4),
                          c.tokens, row_words, b.out.f16, c.idx, c.idx_base);
}

}  // namespace kvrt::memory
