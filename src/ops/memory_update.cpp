// The kernels of one chunk of the fixed-capacity memory, for one group of
// heads: memory_pack gathers wq, wv and q into padded rows; memory_scores
// computes MK wq and MK q; memory_softmax turns them into the update weights
// (transposed) and the read weights; memory_update adds WW^T WV to the state,
// keeping the state at the start of each 64-token sub-chunk; memory_intra
// computes the causal block P WW^T of each sub-chunk; memory_read combines
// both. Then memory_out writes the chunk's reads for all heads. (The working
// memory's regions: kv/memory_layout.hpp.)
#include <algorithm>
#include <cmath>

#include "ops/memory_kernels.hpp"

namespace kvrt::ops::memory_kernels {

namespace {

uint32_t div_up(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

}  // namespace

Result record_group(vk::Stream& s, const Pipelines& pipes, const kv::MemoryLayout& l, const GroupArgs& a) {
    const kv::MemoryGeometry& geo = l.geo;
    const bool updates = a.updates, reads = a.reads;
    const uint32_t heads = l.groups_heads(a.group), head0 = a.group * l.group;
    const uint32_t R = pipes.rows;
    const auto g32 = [](uint64_t bytes) { return static_cast<uint32_t>(bytes / 32); };
    const uint32_t head_work = g32(l.work_head);
    const vk::BufferUse& work_rw = a.work;
    const uint32_t rows = a.rows, tiles = div_up(a.tokens, R);

    // Gather the inputs (wq rows, then q rows, of X; WV).
    const auto pack = [&](const Input& in, uint32_t dim, uint32_t dim_p, uint64_t dst_bytes) -> Result {
        const PackPush p{in.base, geo.n_heads * dim, head0, dim, dim_p / 8, a.tokens, rows,
                         in.f16 ? 1u : 0u, in.gathered ? 1u : 0u, a.idx_base, g32(dst_bytes), head_work};
        const vk::BufferUse uses[3] = {in.use, work_rw, a.idx};
        return dispatch(s, pipes, *pipes.pack, uses, 3, &p, static_cast<uint64_t>(rows) * (dim_p / 8), heads);
    };
    if (updates) {
        KVRT_TRY(pack(*a.wq, geo.e, l.ep, l.w_x));
        KVRT_TRY(pack(*a.wv, geo.d, l.dp, l.w_wv));
    }
    if (reads) KVRT_TRY(pack(*a.q, geo.e, l.ep, l.w_x + static_cast<uint64_t>(rows) * l.ep * 4));

    // Scores of both halves.
    {
        const ScoresPush p{g32(l.w_x), g32(l.w_s), g32(a.keys_in), head_work, g32(l.keys_head), l.ep / 8, l.mp / 8,
                           rows, updates ? tiles : 0u, reads ? tiles : 0u};
        const vk::BufferUse uses[2] = {a.keys, work_rw};
        const uint64_t items = static_cast<uint64_t>(div_up(l.mp / 8, pipes.cols)) * (p.wq_tiles + p.q_tiles);
        KVRT_TRY(dispatch(s, pipes, *pipes.scores, uses, 2, &p, items, heads));
    }
    // Softmax in place: WW (wq half) and P (q half).
    {
        const float scale = a.scale != 0.0f ? a.scale : 1.0f / std::sqrt(static_cast<float>(geo.e));
        const uint32_t w_rows = updates ? a.tokens : 0u, q_rows = reads ? a.tokens : 0u;
        const SoftmaxPush p{g32(l.w_s), head_work, geo.m, l.mp / 8, rows, w_rows, q_rows, scale};
        KVRT_TRY(dispatch_rows(s, pipes, *pipes.softmax, &work_rw, 1, &p, w_rows + q_rows, heads));
    }
    const uint32_t w_off = g32(l.w_s), p_off = g32(l.w_s + static_cast<uint64_t>(rows) * l.mp * 4);
    // The state: updated into the destination, and/or kept per sub-chunk for the reads.
    {
        UpdatePush p{};
        p.src_off = a.src.off;
        p.src_head = a.src.head_stride;
        p.dst_off = a.dst.off;
        p.dst_head = a.dst.head_stride;
        p.head_work = head_work;
        p.w_off = w_off;
        p.wv_off = g32(l.w_wv);
        p.snap_off = g32(l.w_snap);
        p.m = geo.m;
        p.m8 = l.mp / 8;
        p.d8 = l.dp / 8;
        p.upd = updates ? a.tokens : 0u;
        p.n_snap = reads ? (updates ? div_up(a.tokens, kv::kMemorySubchunk) : 1u) : 0u;
        p.flags = (a.src_zero ? kUpdateZeroSource : 0u) | (updates ? kUpdateWriteState : 0u);
        const vk::BufferUse uses[3] = {a.src.use, a.dst.use, work_rw};
        const uint64_t items = static_cast<uint64_t>(div_up(p.d8, pipes.update_dg)) * div_up(geo.m, pipes.update_m);
        KVRT_TRY(dispatch(s, pipes, *pipes.update, uses, 3, &p, items, heads));
    }
    if (!reads) return KVRT_SUCCESS;
    if (updates) {
        const IntraPush p{p_off, w_off, g32(l.w_a), head_work, l.mp / 8, rows, a.tokens};
        const uint64_t items = static_cast<uint64_t>(kv::kMemorySubchunk / 8) * div_up(a.tokens, pipes.intra_rows);
        KVRT_TRY(dispatch(s, pipes, *pipes.intra, &work_rw, 1, &p, items, heads));
    }
    const ReadPush p{p_off, g32(l.w_snap), g32(l.w_a), g32(l.w_wv), head_work, l.mp / 8, l.dp / 8, geo.m, rows,
                     a.tokens, updates ? 1u : 0u, geo.n_heads * geo.d, head0, geo.d};
    vk::BufferUse work_ro = work_rw;
    work_ro.write = false;
    const vk::BufferUse uses[2] = {work_ro, a.stage};
    const uint64_t items = static_cast<uint64_t>(div_up(l.dp / 8, pipes.cols)) * tiles;
    return dispatch(s, pipes, *pipes.read, uses, 2, &p, items, heads);
}

Result record_out(vk::Stream& s, const Pipelines& pipes, const vk::BufferUse& stage, const vk::BufferUse& dst,
                  uint32_t dst_base, uint32_t tokens, uint32_t row_words, bool f16, const vk::BufferUse& idx,
                  uint32_t idx_base) {
    const OutPush p{tokens * row_words, row_words, f16 ? 1u : 0u, dst_base, idx_base};
    vk::BufferUse stage_ro = stage;
    stage_ro.write = false;
    const vk::BufferUse uses[3] = {stage_ro, dst, idx};
    const uint64_t items = std::min<uint64_t>(p.words, 64ull * 4096);
    return dispatch(s, pipes, *pipes.out, uses, 3, &p, items, 1);
}

}  // namespace kvrt::ops::memory_kernels
