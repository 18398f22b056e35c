// CellStore::sync_meta: the device mirror of the cell metadata, kept current by
// sending only the cells that changed, in the stream of the work that reads
// it; and the runs of cells an attention reads through it.
#include <algorithm>
#include <cstring>

#include "cache/cache.hpp"

namespace kvrt::cache {

Result CellStore::sync_meta(vk::Stream& s) {
    uint32_t lo = 0, hi = 0;
    if (!table_.take_changes(&lo, &hi)) return KVRT_SUCCESS;
    // Until the copies below have run, the cells are not on the device.
    const auto resend = [this, lo, hi]() { table_.mark_changed(lo, hi); };
    const uint32_t words = geo_.meta_words;
    const uint32_t wpc = table_.words_per_cell();
    const uint64_t* seq_words = table_.seq_words();
    Result r = KVRT_SUCCESS;
    for (uint32_t c = lo; c < hi && r == KVRT_SUCCESS;) {
        // One copy per piece of the mirror.
        const uint32_t piece = c / geo_.meta_cells_per_piece;
        const uint32_t in_piece = c % geo_.meta_cells_per_piece;
        const uint32_t n = std::min(hi - c, geo_.meta_cells_per_piece - in_piece);
        const uint64_t bytes = uint64_t{n} * words * 4;
        vk::BufferUse src{};
        void* mapped = nullptr;
        r = s.reserve(bytes, &src, &mapped);
        if (r != KVRT_SUCCESS) break;
        auto* out = static_cast<uint32_t*>(mapped);
        for (uint32_t i = 0; i < n; ++i, out += words) {
            const uint32_t cell = c + i;
            out[0] = static_cast<uint32_t>(table_.cell_pos(cell));
            const uint64_t* w = seq_words + size_t{cell} * wpc;
            for (uint32_t j = 0; j < wpc; ++j) {
                out[1 + 2 * j] = static_cast<uint32_t>(w[j]);
                out[2 + 2 * j] = static_cast<uint32_t>(w[j] >> 32);
            }
        }
        const uint64_t at = uint64_t{in_piece} * words * 4;
        src.write = false;
        src.size = bytes;
        const vk::BufferUse uses[2] = {src, {meta_.get(), piece, at, bytes, true}};
        s.track(uses, 2);
        const vk::Buffer::Piece& from = src.buffer->piece(src.piece);
        const vk::Buffer::Piece& to = meta_->piece(piece);
        const VkBufferCopy region{from.base + src.offset, to.base + at, bytes};
        ctx_.fn().vkCmdCopyBuffer(s.cmd(), from.buffer, to.buffer, 1, &region);
        c += n;
    }
    if (r != KVRT_SUCCESS) {
        resend();
        return r;
    }
    s.on_abort(this, resend);
    return KVRT_SUCCESS;
}

void CellStore::attention_segments(uint32_t layer, uint32_t first, uint32_t end,
                               std::vector<ops::AttnSegment>* out) const {
    for (uint32_t c = first; c < end;) {
        const RowRun k = arena_->run(Array::K, layer, c, end - c);
        const RowRun v = arena_->run(Array::V, layer, c, k.slots);
        const uint32_t meta_in = c % geo_.meta_cells_per_piece;
        uint32_t n = std::min(v.slots, geo_.meta_cells_per_piece - meta_in);
        // Deferred RoPE: the run's rotations (ops::record_attention) fit one binding.
        if (deferred_) n = std::min<uint32_t>(n, static_cast<uint32_t>(geo_.max_binding / (uint64_t{4} * rope_math_.n_rot)));
        ops::AttnSegment seg;
        seg.k = k.buffer;
        seg.k_piece = k.piece;
        seg.k_offset = k.offset;
        seg.k_stride = k.stride;
        seg.v = v.buffer;
        seg.v_piece = v.piece;
        seg.v_offset = v.offset;
        seg.v_stride = v.stride;
        seg.meta = meta_.get();
        seg.meta_piece = c / geo_.meta_cells_per_piece;
        seg.meta_first = meta_in;
        seg.first_cell = c;
        seg.count = n;
        out->push_back(seg);
        c += n;
    }
}

}  // namespace kvrt::cache
