// The fixed-capacity memory: checking and recording batches of updates and
// reads (see memory.hpp for the all-or-nothing scheme and memory_layout.hpp
// for the working memory).
//
// Per chunk (up to `chunk` tokens of one sequence at one layer), for each group
// of heads: memory_pack gathers wq, wv and q into padded rows; memory_scores
// computes MK wq and MK q; memory_softmax turns them into the update weights
// (transposed) and the read weights; memory_update adds WW^T WV to the state,
// keeping the state at the start of each 64-token sub-chunk; memory_intra
// computes the causal block P WW^T of each sub-chunk; memory_read combines
// both. Then memory_out writes the chunk's reads for all heads.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_map>

#include "core/checked.hpp"
#include "ops/memory.hpp"

namespace kvrt::ops {

namespace mk = memory_kernels;

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
    auto bytes = [&](const MemoryData& d, uint32_t dim) { return rows * geo.n_heads * dim * esize(d); };
    if (op != MemoryOp::Read) {
        KVRT_TRY(check_data(b.wq, "wq", bytes(b.wq, geo.e), n_layers, false, sync, 0));
        KVRT_TRY(check_data(b.wv, "wv", bytes(b.wv, geo.d), n_layers, false, sync, 0));
    }
    if (op != MemoryOp::Update) {
        KVRT_TRY(check_data(b.q, "q", bytes(b.q, geo.e), n_layers, false, sync, 0));
        if (b.out.f16 && (static_cast<uint64_t>(geo.n_heads) * geo.d) % 2)
            return fail(KVRT_ERROR_INVALID_ARGUMENT,
                        "out: F16 outputs need n_heads * value_dim even (rows of whole 32-bit words)");
        KVRT_TRY(check_data(b.out, "out", bytes(b.out, geo.d), n_layers, true, sync, layout_.piece_cap));
        if (!std::isfinite(b.scale)) return fail(KVRT_ERROR_INVALID_ARGUMENT, "scale is not finite");
    }
    return KVRT_SUCCESS;
}

Result Memory::ensure_host_out(uint64_t layer_bytes, uint32_t n_layers) {
    const uint64_t stride = align_up(layer_bytes, kMemoryAlign);
    const uint64_t need = stride * n_layers;
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
    vk::Stream* s = stream;
    if (stream) KVRT_TRY(stream->require_recording());
    else KVRT_TRY(begin_sync(&s));

    Undo undo(*this, stream == nullptr);
    KVRT_TRY(record(*s, op, b, runs));
    if (stream) {
        if (op != MemoryOp::Read) {
            const std::vector<SeqLayer>& saved = undo.saved();
            stream->on_abort(this, [this, saved]() { meta_ = saved; });
        }
        undo.commit();
        return KVRT_SUCCESS;
    }
    KVRT_TRY(finish_sync());
    if (reads && b.out.host_out) {
        auto* dst = static_cast<uint8_t*>(b.out.host_out);
        for (uint32_t l = 0; l < n_layers; ++l)
            KVRT_TRY(host_out_->download(l * host_out_stride_, dst + l * out_layer_bytes, out_layer_bytes));
    }
    undo.commit();
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
                c.rows = static_cast<uint32_t>(align_up(c.tokens, kMemoryRowPad));
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
    for (uint32_t g = 0; g < layout_.n_groups; ++g) KVRT_TRY(record_group(s, op, b, c, g));
    if (op != MemoryOp::Update) KVRT_TRY(record_out(s, b, c));
    return KVRT_SUCCESS;
}

Result Memory::record_group(vk::Stream& s, MemoryOp op, const MemoryBatch& b, const Chunk& c, uint32_t g) {
    const MemoryLayout& l = layout_;
    const MemoryGeometry& geo = l.geo;
    const bool updates = op != MemoryOp::Read, reads = op != MemoryOp::Update;
    const uint32_t heads = l.groups_heads(g), head0 = g * l.group;
    const uint32_t R = pipes_.rows;
    const auto g32 = [](uint64_t bytes) { return static_cast<uint32_t>(bytes / 32); };
    const uint32_t head_work = g32(l.work_head);
    const vk::BufferUse work_rw = whole(*work_, 0, true);
    const uint32_t rows = c.rows, tiles = div_up(c.tokens, R);

    // Gather the inputs (wq rows, then q rows, of X; WV).
    const auto pack = [&](const InputRef& in, uint32_t dim, uint32_t dim_p, uint64_t dst_bytes) -> Result {
        const mk::PackPush p{in.base, geo.n_heads * dim, head0, dim, dim_p / 8, c.tokens, rows,
                             in.f16 ? 1u : 0u, in.gathered ? 1u : 0u, c.idx_base, g32(dst_bytes), head_work};
        const vk::BufferUse uses[3] = {in.use, work_rw, c.idx};
        return mk::dispatch(s, *pipes_.pack, uses, 3, &p, static_cast<uint64_t>(rows) * (dim_p / 8), heads);
    };
    if (updates) {
        KVRT_TRY(pack(c.wq, geo.e, l.ep, l.w_x));
        KVRT_TRY(pack(c.wv, geo.d, l.dp, l.w_wv));
    }
    if (reads) KVRT_TRY(pack(c.q, geo.e, l.ep, l.w_x + static_cast<uint64_t>(rows) * l.ep * 4));

    // Scores of both halves.
    size_t kp = 0;
    uint64_t kin = 0;
    keys_->locate(l.keys_offset(c.layer, g), &kp, &kin);
    {
        const mk::ScoresPush p{g32(l.w_x), g32(l.w_s), g32(kin), head_work, g32(l.keys_head), l.ep / 8, l.mp / 8,
                               rows, updates ? tiles : 0u, reads ? tiles : 0u};
        const vk::BufferUse uses[2] = {whole(*keys_, kp, false), work_rw};
        const uint64_t items = static_cast<uint64_t>(div_up(l.mp / 8, pipes_.cols)) * (p.wq_tiles + p.q_tiles);
        KVRT_TRY(mk::dispatch(s, *pipes_.scores, uses, 2, &p, items, heads));
    }
    // Softmax in place: WW (wq half) and P (q half).
    {
        const float scale = b.scale != 0.0f ? b.scale : 1.0f / std::sqrt(static_cast<float>(geo.e));
        const uint32_t w_rows = updates ? c.tokens : 0u, q_rows = reads ? c.tokens : 0u;
        const mk::SoftmaxPush p{g32(l.w_s), head_work, geo.m, l.mp / 8, rows, w_rows, q_rows, scale};
        KVRT_TRY(mk::dispatch_rows(s, *pipes_.softmax, &work_rw, 1, &p, w_rows + q_rows, heads));
    }
    const uint32_t w_off = g32(l.w_s), p_off = g32(l.w_s + static_cast<uint64_t>(rows) * l.mp * 4);
    // The state: updated into the destination, and/or kept per sub-chunk for the reads.
    {
        mk::UpdatePush p{};
        vk::BufferUse src, dst;
        bind_state(c.src, c.seq, c.layer, g, false, &src, &p.src_off, &p.src_head);
        bind_state(c.dst, c.seq, c.layer, g, true, &dst, &p.dst_off, &p.dst_head);
        p.head_work = head_work;
        p.w_off = w_off;
        p.wv_off = g32(l.w_wv);
        p.snap_off = g32(l.w_snap);
        p.m = geo.m;
        p.m8 = l.mp / 8;
        p.d8 = l.dp / 8;
        p.upd = updates ? c.tokens : 0u;
        p.n_snap = reads ? (updates ? div_up(c.tokens, kMemorySubchunk) : 1u) : 0u;
        p.flags = (c.src.where == Where::Zero ? mk::kUpdateZeroSource : 0u) |
                  (updates ? mk::kUpdateWriteState : 0u);
        const vk::BufferUse uses[3] = {src, dst, work_rw};
        const uint64_t items = static_cast<uint64_t>(div_up(p.d8, pipes_.update_dg)) * div_up(geo.m, pipes_.update_m);
        KVRT_TRY(mk::dispatch(s, *pipes_.update, uses, 3, &p, items, heads));
    }
    if (!reads) return KVRT_SUCCESS;
    if (updates) {
        const mk::IntraPush p{p_off, w_off, g32(l.w_a), head_work, l.mp / 8, rows, c.tokens};
        KVRT_TRY(mk::dispatch(s, *pipes_.intra, &work_rw, 1, &p,
                              static_cast<uint64_t>(kMemorySubchunk / 8) * div_up(c.tokens, pipes_.intra_rows), heads));
    }
    const mk::ReadPush p{p_off, g32(l.w_snap), g32(l.w_a), g32(l.w_wv), head_work, l.mp / 8, l.dp / 8, geo.m, rows,
                         c.tokens, updates ? 1u : 0u, geo.n_heads * geo.d, head0, geo.d};
    const vk::BufferUse uses[2] = {whole(*work_, 0, false), whole(*stage_, 0, true)};
    return mk::dispatch(s, *pipes_.read, uses, 2, &p, static_cast<uint64_t>(div_up(l.dp / 8, pipes_.cols)) * tiles,
                        heads);
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
    const mk::OutPush p{c.tokens * row_words, row_words, b.out.f16 ? 1u : 0u, static_cast<uint32_t>(in / 4),
                        c.idx_base};
    const vk::BufferUse uses[3] = {whole(*stage_, 0, false), whole(*dst, piece, true), c.idx};
    const uint64_t items = std::min<uint64_t>(p.words, 64ull * 4096);
    return mk::dispatch(s, *pipes_.out, uses, 3, &p, items, 1);
}

}  // namespace kvrt::ops
