// The static padded layout (SPEC 5) of Cache: appends into each sequence's
// windows with the one slide copy they need (kv::StaticWindow plans them),
// the window and mask queries a static graph binds, and the transfer of a
// sequence between caches of any two layouts.
//
// A static cache uses the same CellTable as the cell layout, with cell
// seq * reservation_rows + row for row `row` of seq's regions: attention,
// readback, writes and the sequence queries then work unchanged, and a slide
// is a metadata move of the surviving cells plus the device copy.
#include <algorithm>
#include <cstring>
#include <map>
#include <string>

#include "cache/cache.hpp"
#include "ops/rows.hpp"
#include "ops/tuning.hpp"

namespace kvrt::cache {

namespace {

// The cell moves of `slide` within the rows of `seq` (cell = seq * rr + row),
// ordered so that each destination is free when its move comes: a copy to
// lower rows goes first row first, one to higher rows last row first.
std::vector<kv::CellMove> slide_moves(uint32_t seq, uint32_t rr, const kv::StaticSlide& slide) {
    std::vector<kv::CellMove> moves(slide.rows);
    const bool up = slide.dst_row > slide.src_row;
    for (uint32_t j = 0; j < slide.rows; ++j) {
        const uint32_t i = up ? slide.rows - 1 - j : j;
        moves[j] = kv::CellMove{seq * rr + slide.src_row + i, seq * rr + slide.dst_row + i};
    }
    return moves;
}

}  // namespace

Result Cache::snapshot(int32_t seq, SeqSnapshot* out) const {
    out->seq = seq;
    out->window = seq_windows_[static_cast<size_t>(seq)];
    out->cells.clear();
    out->positions.clear();
    // The sequence's cells are its window's valid rows: no table scan.
    const uint32_t base = static_cast<uint32_t>(seq) * static_geo_.reservation_rows;
    const kv::StaticWindow& w = out->window;
    for (uint32_t r = w.first_valid_row(); r < w.start() + w.window_rows(); ++r) {
        out->cells.push_back(base + r);
        out->positions.push_back(table_.cell_pos(base + r));
    }
    return KVRT_SUCCESS;
}

void Cache::restore(const std::vector<SeqSnapshot>& snaps) {
    // Keep the detail message of the failure being undone.
    const std::string message = last_error_message();
    for (auto it = snaps.rbegin(); it != snaps.rend(); ++it) {
        (void)table_.seq_rm(it->seq, -1, -1);
        std::vector<kv::Token> tokens(it->cells.size());
        for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = kv::Token{it->positions[i], &it->seq, 1};
        kv::Placement p;
        // The cells were the sequence's a moment ago and nothing else can
        // hold them (each sequence owns its rows), so this cannot fail but
        // for host memory; then the sequence is left empty and consistent.
        if (table_.plan(tokens.data(), static_cast<uint32_t>(tokens.size()), &p, it->cells.data()) == KVRT_SUCCESS &&
            table_.apply(p) == KVRT_SUCCESS) {
            seq_windows_[static_cast<size_t>(it->seq)] = it->window;
        } else {
            (void)table_.seq_rm(it->seq, -1, -1);
            seq_windows_[static_cast<size_t>(it->seq)].reset();
        }
    }
    (void)fail(KVRT_SUCCESS, "%s", message.c_str());
}

Result Cache::record_slide(vk::Stream& s, uint32_t seq, const kv::StaticSlide& slide) {
    if (!slide.needed || slide.rows == 0) return KVRT_SUCCESS;
    const uint64_t chunk_bytes = ops::Tuning::of(ctx_).slide_chunk_bytes;
    for (Array array : {Array::K, Array::V}) {
        const kv::RowGeometry& g = arena_->rows(array);
        const uint64_t block = uint64_t{slide.rows} * g.head_bytes;
        // Chunks of whole rows; the last chunk of each head's block may be shorter.
        const uint64_t chunk = std::min(block, std::max<uint64_t>(1, chunk_bytes / g.head_bytes) * g.head_bytes);
        const uint64_t n_full = block / chunk, tail = block % chunk;
        vk::BufferUse scratch{};
        if (slide.overlapping) {
            // vkCmdCopyBuffer and the row kernel both forbid overlapping
            // source and destination: go through scratch memory.
            KVRT_TRY(s.scratch(block * geo_.n_kv_heads, &scratch));
        }
        for (uint32_t l = 0; l < geo_.n_layers; ++l) {
            const vk::Buffer* buf = static_arena_->buffer(array, l).get();
            const uint64_t src0 = static_arena_->region_row_offset(array, seq, 0, slide.src_row);
            const size_t piece = static_cast<size_t>(src0 / g.piece_bytes);
            const uint64_t head0 = static_arena_->region_row_offset(array, seq, 0, 0) - piece * g.piece_bytes;
            // (source byte, destination byte) of every chunk, per chunk size.
            auto copy = [&](const vk::Buffer* from, size_t from_piece, uint64_t from_base, uint64_t from_stride,
                            const vk::Buffer* to, size_t to_piece, uint64_t to_base, uint64_t to_stride) -> Result {
                for (const uint64_t size : {chunk, tail}) {
                    if (size == 0) continue;
                    std::vector<ops::RowPair> rows;
                    for (uint32_t h = 0; h < geo_.n_kv_heads; ++h) {
                        const uint64_t first = size == chunk ? 0 : n_full * chunk;
                        const uint64_t count = size == chunk ? n_full : 1;
                        for (uint64_t c = 0; c < count; ++c) {
                            const uint64_t at = first + c * chunk;
                            rows.push_back({static_cast<uint32_t>((from_base + h * from_stride + at) / 4),
                                            static_cast<uint32_t>((to_base + h * to_stride + at) / 4)});
                        }
                    }
                    KVRT_TRY(ops::record_copy_rows(s, {from, from_piece, size}, {to, to_piece, size}, size, rows));
                }
                return KVRT_SUCCESS;
            };
            const uint64_t src_base = head0 + uint64_t{slide.src_row} * g.head_bytes;
            const uint64_t dst_base = head0 + uint64_t{slide.dst_row} * g.head_bytes;
            const uint64_t stride = g.regions.region_bytes;
            if (!slide.overlapping) {
                KVRT_TRY(copy(buf, piece, src_base, stride, buf, piece, dst_base, stride));
            } else {
                KVRT_TRY(copy(buf, piece, src_base, stride, scratch.buffer, scratch.piece, scratch.offset, block));
                KVRT_TRY(copy(scratch.buffer, scratch.piece, scratch.offset, block, buf, piece, dst_base, stride));
            }
        }
    }
    return KVRT_SUCCESS;
}

Result Cache::static_append(vk::Stream* stream, const kv::Token* tokens, uint32_t n, int32_t layer, const Source* k,
                            const Source* v, uint32_t* out_cells) {
    const bool with_data = k && v;
    if (with_data) KVRT_TRY(check_write(n, layer, *k, *v));
    if (stream) KVRT_TRY(stream->require_recording());
    if (n == 0) return KVRT_SUCCESS;
    if (!tokens) return fail(KVRT_ERROR_INVALID_ARGUMENT, "the batch's tokens are NULL");

    // Every check before anything changes: one sequence per token, rising
    // positions past the sequence's last, at most S-1 tokens per sequence.
    const uint32_t W = static_geo_.window_rows;
    std::vector<int32_t> order;             // sequences in order of first appearance
    std::map<int32_t, std::vector<uint32_t>> of_seq;  // token indices per sequence
    for (uint32_t i = 0; i < n; ++i) {
        const kv::Token& t = tokens[i];
        if (t.n_seq != 1 || !t.seq_ids)
            return fail(KVRT_ERROR_INVALID_ARGUMENT,
                        "token %u lists %u sequences; in the static layout each token belongs to exactly one", i,
                        t.n_seq);
        const int32_t seq = t.seq_ids[0];
        if (seq < 0 || static_cast<uint32_t>(seq) >= geo_.max_seqs)
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "token %u has sequence %d outside [0, %u)", i, seq, geo_.max_seqs);
        if (t.pos < 0) return fail(KVRT_ERROR_INVALID_ARGUMENT, "token %u has negative position %d", i, t.pos);
        auto& list = of_seq[seq];
        const int32_t prev = list.empty() ? table_.seq_pos_max(seq) : tokens[list.back()].pos;
        if (t.pos <= prev)
            return fail(KVRT_ERROR_INVALID_ARGUMENT,
                        "token %u: position %d of sequence %d is not past its last (%d); the static layout appends "
                        "in rising position order",
                        i, t.pos, seq, prev);
        if (list.empty()) order.push_back(seq);
        list.push_back(i);
        if (list.size() > W)
            return fail(KVRT_ERROR_INVALID_ARGUMENT,
                        "more than %u tokens of sequence %d in one call (the window holds seq_len - 1 = %u rows)", W,
                        seq, W);
    }

    std::vector<SeqSnapshot> snaps(order.size());
    for (size_t i = 0; i < order.size(); ++i) KVRT_TRY(snapshot(order[i], &snaps[i]));

    // Plan each sequence's append on a copy of its window.
    const uint32_t Rr = static_geo_.reservation_rows;
    std::vector<kv::StaticWindow> windows;
    std::vector<kv::StaticAppend> appends(order.size());
    std::vector<uint32_t> cells(n);
    for (size_t i = 0; i < order.size(); ++i) {
        const int32_t seq = order[i];
        windows.push_back(seq_windows_[static_cast<size_t>(seq)]);
        const auto& list = of_seq[seq];
        KVRT_TRY(windows.back().append(static_cast<uint32_t>(list.size()), &appends[i]));
        for (size_t j = 0; j < list.size(); ++j)
            cells[list[j]] = static_cast<uint32_t>(seq) * Rr + appends[i].write_row + static_cast<uint32_t>(j);
    }

    // Metadata: drop the rows that leave the window, move the survivors of a
    // slide, place the new tokens. Undone by restore() on failure.
    vk::Transaction tx(this, stream, own_);
    tx.on_undo([this, snaps]() { restore(snaps); });
    for (size_t i = 0; i < order.size(); ++i) {
        const int32_t seq = order[i];
        const kv::StaticWindow& before = seq_windows_[static_cast<size_t>(seq)];
        const uint32_t added = static_cast<uint32_t>(of_seq[seq].size());
        const uint32_t keep = windows[i].n_valid() - added;  // old rows still in the window
        if (keep < before.n_valid()) {
            const uint32_t first_kept_row = before.start() + W - keep;
            const int32_t from = keep == 0 ? -1 : table_.cell_pos(static_cast<uint32_t>(seq) * Rr + first_kept_row);
            KVRT_TRY(table_.seq_rm(seq, -1, from));
        }
        const kv::StaticSlide& slide = appends[i].slide;
        if (slide.needed && slide.rows > 0 && slide.src_row != slide.dst_row)
            KVRT_TRY(table_.apply_moves(slide_moves(static_cast<uint32_t>(seq), Rr, slide)));
    }
    kv::Placement placement;
    KVRT_TRY(table_.plan(tokens, n, &placement, cells.data()));
    KVRT_TRY(table_.apply(placement));
    for (size_t i = 0; i < order.size(); ++i) seq_windows_[static_cast<size_t>(order[i])] = windows[i];

    // Device work: the slides, then the rows. A slide copy may be recorded
    // before a failure: it must not run once the windows are restored. A
    // timeout means the work was submitted: it completes later, and the
    // windows must describe what it leaves.
    bool device_work = with_data;
    for (const kv::StaticAppend& a : appends) device_work = device_work || (a.slide.needed && a.slide.rows > 0);
    if (device_work) {
        tx.break_on_failure("a static-layout append failed while recording");
        tx.keep_on_timeout();
        KVRT_TRY(tx.begin());
        vk::Stream& s = tx.stream();
        s.begin_op("static append");
        Result r = KVRT_SUCCESS;
        for (size_t i = 0; i < order.size() && r == KVRT_SUCCESS; ++i)
            r = record_slide(s, static_cast<uint32_t>(order[i]), appends[i].slide);
        s.end_op();
        KVRT_TRY(r);
        if (with_data) KVRT_TRY(record_writes(s, n, cells.data(), layer, *k, *v));
        KVRT_TRY(tx.submit());
    }
    tx.commit();
    if (out_cells) std::copy(cells.begin(), cells.end(), out_cells);
    return KVRT_SUCCESS;
}

Result Cache::static_seq_rm(int32_t seq, int32_t p0, int32_t p1) {
    if (seq >= 0 && static_cast<uint32_t>(seq) >= geo_.max_seqs)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "sequence %d is out of range (0..%u)", seq, geo_.max_seqs - 1);
    if (p1 >= 0 && p1 < p0) return fail(KVRT_ERROR_INVALID_ARGUMENT, "range [%d, %d) is reversed", p0, p1);
    const uint32_t Rr = static_geo_.reservation_rows;
    const uint32_t first = seq < 0 ? 0 : static_cast<uint32_t>(seq);
    const uint32_t last = seq < 0 ? geo_.max_seqs : first + 1;

    // A window's valid rows hold rising positions, so [p0, p1) is a run of
    // them: valid rows [cut, cut + count). Plan each cut on a copy.
    struct Cut {
        int32_t seq = 0;
        kv::StaticWindow window;
        kv::StaticSlide slide;
    };
    std::vector<Cut> cuts;
    for (uint32_t s = first; s < last; ++s) {
        const kv::StaticWindow& w = seq_windows_[s];
        const uint32_t n = w.n_valid(), row0 = s * Rr + w.first_valid_row();
        // The number of valid rows below position `p` (`if_negative` for p < 0).
        auto below = [&](int32_t p, uint32_t if_negative) {
            if (p < 0) return if_negative;
            uint32_t lo = 0, hi = n;
            while (lo < hi) {
                const uint32_t mid = lo + (hi - lo) / 2;
                if (table_.cell_pos(row0 + mid) < p)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            return lo;
        };
        const uint32_t cut = below(p0, 0), end = below(p1, n);
        if (end <= cut) continue;
        Cut c;
        c.seq = static_cast<int32_t>(s);
        c.window = w;
        if (cut == 0 && end == n)
            c.window.reset();  // the whole sequence: its counters start again
        else
            KVRT_TRY(c.window.remove(cut, end - cut, &c.slide));
        cuts.push_back(c);
    }
    if (cuts.empty()) return KVRT_SUCCESS;

    std::vector<SeqSnapshot> snaps(cuts.size());
    for (size_t i = 0; i < cuts.size(); ++i) KVRT_TRY(snapshot(cuts[i].seq, &snaps[i]));
    vk::Transaction tx(this, nullptr, own_);
    tx.on_undo([this, snaps]() { restore(snaps); });
    bool device_work = false;
    for (const Cut& c : cuts) {
        KVRT_TRY(table_.seq_rm(c.seq, p0, p1));
        if (c.slide.needed) {
            KVRT_TRY(table_.apply_moves(slide_moves(static_cast<uint32_t>(c.seq), Rr, c.slide)));
            device_work = true;
        }
        seq_windows_[static_cast<size_t>(c.seq)] = c.window;
    }
    if (device_work) {
        // The copies complete before the call returns; a wait that times out
        // keeps the removal (the work was submitted and completes later).
        tx.keep_on_timeout();
        KVRT_TRY(tx.begin());
        vk::Stream& s = tx.stream();
        s.begin_op("static removal");
        Result r = KVRT_SUCCESS;
        for (size_t i = 0; i < cuts.size() && r == KVRT_SUCCESS; ++i)
            r = record_slide(s, static_cast<uint32_t>(cuts[i].seq), cuts[i].slide);
        s.end_op();
        KVRT_TRY(r);
        KVRT_TRY(tx.submit());
    }
    tx.commit();
    return KVRT_SUCCESS;
}

Result Cache::static_window(int32_t seq, int32_t layer_arg, uint32_t head, Array array, WindowView* out) const {
    if (!is_static()) return fail(KVRT_ERROR_INVALID_ARGUMENT, "the cache does not have the static layout");
    if (seq < 0 || static_cast<uint32_t>(seq) >= geo_.max_seqs)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "sequence %d is out of range (0..%u)", seq, geo_.max_seqs - 1);
    if (layer_arg < 0 || static_cast<uint32_t>(layer_arg) >= geo_.n_layers)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "layer %d is out of range (0..%u)", layer_arg, geo_.n_layers - 1);
    const uint32_t layer = static_cast<uint32_t>(layer_arg);
    if (head >= geo_.n_kv_heads)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "KV head %u is out of range (0..%u)", head, geo_.n_kv_heads - 1);
    const kv::StaticWindow& w = seq_windows_[static_cast<size_t>(seq)];
    const kv::RowGeometry& g = arena_->rows(array);
    WindowView v;
    v.buffer = static_arena_->buffer(array, layer);
    v.offset = static_arena_->region_row_offset(array, static_cast<uint32_t>(seq), head, w.start());
    v.row_stride = g.head_bytes;
    v.rows = w.window_rows();
    v.bytes = uint64_t{v.rows} * g.head_bytes;
    v.n_valid = w.n_valid();
    if (v.n_valid) {
        const uint32_t base = static_cast<uint32_t>(seq) * static_geo_.reservation_rows;
        v.pos_first = table_.cell_pos(base + w.first_valid_row());
        v.pos_last = table_.cell_pos(base + w.start() + w.window_rows() - 1);
    }
    v.type = g.type;
    if (!g.scales.empty()) v.scale = g.scales[layer];
    *out = v;
    return KVRT_SUCCESS;
}

Result Cache::static_mask(int32_t seq, kvrt_type type, void* out, uint64_t out_bytes) const {
    if (!is_static()) return fail(KVRT_ERROR_INVALID_ARGUMENT, "the cache does not have the static layout");
    if (seq < 0 || static_cast<uint32_t>(seq) >= geo_.max_seqs)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "sequence %d is out of range (0..%u)", seq, geo_.max_seqs - 1);
    if (!out) return fail(KVRT_ERROR_INVALID_ARGUMENT, "out is NULL");
    const kv::StaticWindow& w = seq_windows_[static_cast<size_t>(seq)];
    const uint64_t S = static_geo_.max_seq;
    if (type == KVRT_TYPE_F32) {
        if (out_bytes < S * 4)
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "the mask needs %llu bytes (S = %llu floats), got %llu",
                        static_cast<unsigned long long>(S * 4), static_cast<unsigned long long>(S),
                        static_cast<unsigned long long>(out_bytes));
        return w.mask_f32(static_cast<float*>(out), static_cast<size_t>(S));
    }
    if (type == KVRT_TYPE_F16) {
        if (out_bytes < S * 2)
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "the mask needs %llu bytes (S = %llu halves), got %llu",
                        static_cast<unsigned long long>(S * 2), static_cast<unsigned long long>(S),
                        static_cast<unsigned long long>(out_bytes));
        return w.mask_f16(static_cast<uint16_t*>(out), static_cast<size_t>(S));
    }
    KVRT_TRY(kv::check_type("element_type", type));
    return fail(KVRT_ERROR_INVALID_ARGUMENT, "the mask's element_type must be F32 or F16 (got %s)", kv::type_name(type));
}

Result Cache::static_stats(int32_t seq, kvrt_static_stats* out) const {
    if (!is_static()) return fail(KVRT_ERROR_INVALID_ARGUMENT, "the cache does not have the static layout");
    if (seq >= 0 && static_cast<uint32_t>(seq) >= geo_.max_seqs)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "sequence %d is out of range (0..%u)", seq, geo_.max_seqs - 1);
    out->rows_appended = out->slides = out->rows_moved = out->bytes_moved = 0;
    const uint64_t per_row = uint64_t{geo_.n_layers} * geo_.n_kv_heads * (geo_.k.head_bytes + geo_.v.head_bytes);
    for (uint32_t s = 0; s < geo_.max_seqs; ++s) {
        if (seq >= 0 && s != static_cast<uint32_t>(seq)) continue;
        const kv::StaticWindow& w = seq_windows_[s];
        out->rows_appended += w.rows_appended();
        out->slides += w.slides();
        out->rows_moved += w.rows_moved();
        out->bytes_moved += w.rows_moved() * per_row;
    }
    return KVRT_SUCCESS;
}

Result Cache::record_copy_cells(vk::Stream& s, const Cache& src, const std::vector<uint32_t>& src_cells,
                                const std::vector<uint32_t>& dst_cells) {
    for (uint32_t l = 0; l < geo_.n_layers; ++l) {
        if (geo_.in_window_group(l)) continue;  // the group copies its own rows
        for (Array array : {Array::K, Array::V}) {
            const kv::RowGeometry& g = arena_->rows(array);
            const uint64_t from_stride = src.arena_->head_stride(array), to_stride = arena_->head_stride(array);
            // Whole rows when both sides keep a token's heads together.
            const bool whole = from_stride == g.head_bytes && to_stride == g.head_bytes;
            const uint64_t bytes = whole ? g.row_bytes : g.head_bytes;
            if (bytes % 4)
                return fail(KVRT_ERROR_UNSUPPORTED, "rows of %llu bytes cannot be copied between these layouts",
                            static_cast<unsigned long long>(bytes));
            std::map<std::pair<size_t, size_t>, std::vector<ops::RowPair>> groups;
            for (size_t i = 0; i < src_cells.size(); ++i) {
                const RowLocation from = src.arena_->locate(array, l, src_cells[i]);
                const RowLocation to = arena_->locate(array, l, dst_cells[i]);
                auto& list = groups[{from.piece, to.piece}];
                for (uint32_t h = 0; h < (whole ? 1u : geo_.n_kv_heads); ++h)
                    list.push_back({static_cast<uint32_t>((from.offset + h * from_stride) / 4),
                                    static_cast<uint32_t>((to.offset + h * to_stride) / 4)});
            }
            const vk::Buffer* from_buf = src.arena_->locate(array, l, 0).buffer;
            const vk::Buffer* to_buf = arena_->locate(array, l, 0).buffer;
            for (const auto& [pieces, rows] : groups)
                KVRT_TRY(ops::record_copy_rows(s, {from_buf, pieces.first, bytes}, {to_buf, pieces.second, bytes}, bytes,
                                               rows));
        }
    }
    return KVRT_SUCCESS;
}

Result Cache::transfer_from(Cache& src, int32_t src_seq, int32_t dst_seq, uint32_t* out_count) {
    if (out_count) *out_count = 0;
    if (&src.ctx_ != &ctx_) return fail(KVRT_ERROR_INVALID_ARGUMENT, "the caches belong to different contexts");
    KVRT_TRY(src.require_no_window_group("kvrt_cache_seq_transfer"));
    KVRT_TRY(require_no_window_group("kvrt_cache_seq_transfer"));
    const kv::CacheGeometry& a = src.geo_;
    if (a.n_layers != geo_.n_layers || a.n_kv_heads != geo_.n_kv_heads || a.k.head_dim != geo_.k.head_dim ||
        a.v.head_dim != geo_.v.head_dim)
        return fail(KVRT_ERROR_INVALID_ARGUMENT,
                    "the caches' geometries differ (layers %u/%u, KV heads %u/%u, head dims %u,%u/%u,%u)", a.n_layers,
                    geo_.n_layers, a.n_kv_heads, geo_.n_kv_heads, a.k.head_dim, a.v.head_dim, geo_.k.head_dim,
                    geo_.v.head_dim);
    if (a.k.type != geo_.k.type || a.v.type != geo_.v.type)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "the caches' types differ (K %s/%s, V %s/%s); rows are copied as they are",
                    kv::type_name(a.k.type), kv::type_name(geo_.k.type), kv::type_name(a.v.type),
                    kv::type_name(geo_.v.type));
    for (Array arr : {Array::K, Array::V}) {
        const auto& x = src.arena_->rows(arr).scales;
        const auto& y = arena_->rows(arr).scales;
        for (size_t l = 0; l < x.size() && l < y.size(); ++l)
            if (x[l].scale != y[l].scale || x[l].zero_point != y[l].zero_point)
                return fail(KVRT_ERROR_INVALID_ARGUMENT, "the caches' %s scales of layer %zu differ",
                            arr == Array::K ? "K" : "V", l);
    }
    if (src.deferred_ != deferred_)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "one cache stores K rotated and the other defers RoPE");
    if (src_seq < 0 || static_cast<uint32_t>(src_seq) >= a.max_seqs)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "source sequence %d is out of range (0..%u)", src_seq, a.max_seqs - 1);
    if (dst_seq < 0 || static_cast<uint32_t>(dst_seq) >= geo_.max_seqs)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "destination sequence %d is out of range (0..%u)", dst_seq,
                    geo_.max_seqs - 1);
    if (&src == this && src_seq == dst_seq)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "source and destination are sequence %d of the same cache", src_seq);
    if (table_.seq_cell_count(dst_seq) != 0)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "destination sequence %d holds %u tokens; it must be empty", dst_seq,
                    table_.seq_cell_count(dst_seq));

    // K rows must be rotated to their current positions before they move.
    if (src.table_.has_pending_shift() && !src.deferred_) KVRT_TRY(src.apply_shifts(nullptr));

    // The tokens in rising position order (a paged source's among equal
    // positions in its block table's order).
    std::vector<uint32_t> src_cells;
    if (src.is_paged()) {
        const uint32_t len = src.pool_.seq_length(src_seq);
        try {
            src_cells.resize(len);
        } catch (const std::bad_alloc&) {
            return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "out of host memory for %u cells", len);
        }
        for (uint32_t t = 0; t < len; ++t) src_cells[t] = src.pool_.slot(src_seq, t);
    } else {
        KVRT_TRY(src.table_.cells_of_seq(src_seq, &src_cells));
    }
    std::stable_sort(src_cells.begin(), src_cells.end(), [&](uint32_t x, uint32_t y) {
        return src.table_.cell_pos(x) < src.table_.cell_pos(y);
    });
    if (is_static() && src_cells.size() > static_geo_.window_rows)
        src_cells.erase(src_cells.begin(), src_cells.end() - static_geo_.window_rows);
    if (src_cells.empty()) return KVRT_SUCCESS;
    const uint32_t n = static_cast<uint32_t>(src_cells.size());
    std::vector<int32_t> positions(n);
    std::vector<kv::Token> tokens(n);
    for (uint32_t i = 0; i < n; ++i) {
        positions[i] = src.table_.cell_pos(src_cells[i]);
        tokens[i] = kv::Token{positions[i], &dst_seq, 1};
    }

    // Place (the destination sequence is empty: no slide and no
    // copy-on-write copies anything), then copy the rows in one submission;
    // undo the placement on failure.
    std::vector<uint32_t> dst_cells(n);
    if (is_paged()) {
        KVRT_TRY(paged_store(nullptr, tokens.data(), n, -1, nullptr, nullptr, dst_cells.data()));
    } else if (is_static()) {
        KVRT_TRY(static_append(nullptr, tokens.data(), n, -1, nullptr, nullptr, dst_cells.data()));
    } else {
        KVRT_TRY(place(tokens.data(), n, dst_cells.data()));
    }
    vk::Transaction tx(this, nullptr, own_);
    Result r = tx.begin();
    if (r == KVRT_SUCCESS) {
        tx.stream().begin_op("transfer");
        r = record_copy_cells(tx.stream(), src, src_cells, dst_cells);
        tx.stream().end_op();
    }
    if (r == KVRT_SUCCESS) r = tx.finish();
    if (r != KVRT_SUCCESS) {
        const std::string message = last_error_message();
        if (is_paged()) {
            // Allocates nothing: the pool forgets the blocks (never written),
            // the table drops the cells placed.
            (void)pool_.forget_tail(dst_seq, 0);
            (void)table_.mirror_seq(dst_seq, dst_cells.data(), n, nullptr, 0);
        } else {
            (void)table_.seq_rm(dst_seq, -1, -1);
            if (is_static()) seq_windows_[static_cast<size_t>(dst_seq)].reset();
        }
        (void)fail(KVRT_SUCCESS, "%s", message.c_str());
        return r;
    }
    if (out_count) *out_count = n;
    return KVRT_SUCCESS;
}

}  // namespace kvrt::cache
