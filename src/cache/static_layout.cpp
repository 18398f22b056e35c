// The static padded layout (SPEC 5): appends into each sequence's windows
// with the one slide copy they need (kv::StaticWindow plans them), removals,
// and the window and mask queries a static graph binds.
#include "cache/static_layout.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <string>

#include "cache/cache.hpp"
#include "core/raw_enum.hpp"
#include "kv/memory_half.hpp"
#include "ops/rows.hpp"
#include "ops/tuning.hpp"

namespace kvrt::cache {

namespace {

// The cell moves of `slides`, in their order, within the rows of `seq`
// (cell = seq * rr + row), ordered so that each destination is free when its
// move comes: a copy to lower rows goes first row first, one to higher rows
// last row first.
std::vector<kv::CellMove> slide_moves(uint32_t seq, uint32_t rr, const std::vector<kv::StaticSlide>& slides) {
    std::vector<kv::CellMove> moves;
    for (const kv::StaticSlide& slide : slides) {
        const bool up = slide.dst_row > slide.src_row;
        for (uint32_t j = 0; j < slide.rows; ++j) {
            const uint32_t i = up ? slide.rows - 1 - j : j;
            moves.push_back(kv::CellMove{seq * rr + slide.src_row + i, seq * rr + slide.dst_row + i});
        }
    }
    return moves;
}

}  // namespace

Result StaticLayout::create(Cache& cache, const kvrt_cache_desc& desc, std::unique_ptr<Layout>* out,
                            std::unique_ptr<Arena>* out_arena) {
    const kv::CacheGeometry& geo = cache.geo_;
    std::unique_ptr<StaticArena> arena;
    KVRT_TRY(StaticArena::create(cache.ctx_, geo, desc.label, &arena));
    const kv::StaticRegions& r = geo.k.regions;
    kv::TypeSize ts{};
    kv::type_size(geo.k.type, &ts);
    kv::StaticGeometry geometry;
    if (r.ring)
        KVRT_TRY(kv::StaticGeometry::create_ring(geo.n_layers, geo.n_kv_heads, geo.k.head_dim, ts.block_bytes,
                                                 r.seq_len, &geometry));
    else
        KVRT_TRY(kv::StaticGeometry::create(geo.n_layers, geo.n_kv_heads, geo.k.head_dim, ts.block_bytes, r.seq_len,
                                            r.reserve, &geometry));
    std::unique_ptr<StaticLayout> layout(new StaticLayout(cache, arena.get(), geometry));
    *out = std::move(layout);
    *out_arena = std::move(arena);
    return KVRT_SUCCESS;
}

StaticLayout::StaticLayout(Cache& cache, const StaticArena* arena, const kv::StaticGeometry& geometry)
    : Layout(cache), arena_(arena), geometry_(geometry), windows_(cache.geo_.max_seqs, kv::StaticWindow(geometry)) {}

Result StaticLayout::require_cells(const char* op) const {
    return fail(KVRT_ERROR_UNSUPPORTED,
                "%s is not available in the static layout (its windows keep positions in arrival order)", op);
}

uint32_t StaticLayout::capacity() const { return c_.geo_.max_seqs * geometry_.window_rows; }

Result StaticLayout::store(vk::Stream* stream, const kv::Token* tokens, uint32_t n, int32_t layer, const Source* k,
                           const Source* v, uint32_t* out_cells, bool tree) {
    if (tree) KVRT_TRY(require_trees("a token tree"));
    return append(stream, tokens, n, layer, k, v, out_cells);
}

Result StaticLayout::seq_cp(int32_t, int32_t, int32_t, int32_t) { return require_cells("kvrt_cache_seq_cp"); }

Result StaticLayout::seq_add(int32_t, int32_t, int32_t, int32_t) { return require_cells("kvrt_cache_seq_add"); }

Result StaticLayout::seq_div(int32_t, int32_t, int32_t, int32_t) { return require_cells("kvrt_cache_seq_div"); }

Result StaticLayout::tree_accept(uint32_t, const int32_t*, const int32_t*, const uint32_t*,
                                 const std::vector<uint8_t>&) {
    return require_cells("kvrt_cache_tree_accept");
}

Result StaticLayout::seq_keep(int32_t seq) {
    KVRT_TRY(c_.table_.seq_keep(seq));
    for (uint32_t s = 0; s < windows_.size(); ++s)
        if (static_cast<int32_t>(s) != seq) windows_[s].reset();
    return KVRT_SUCCESS;
}

void StaticLayout::clear() {
    c_.table_.clear();
    for (kv::StaticWindow& w : windows_) w.reset();
}

void StaticLayout::drop_placed(int32_t seq, const uint32_t*, uint32_t) {
    (void)c_.table_.seq_rm(seq, -1, -1);
    windows_[static_cast<size_t>(seq)].reset();
}

// The valid rows of the queries' sequences' windows.
void StaticLayout::attention_cells(uint32_t layer, uint32_t n_queries, const int32_t* seq_ids,
                                   std::vector<ops::AttnSegment>* out, uint32_t* out_cells) const {
    std::vector<int32_t> seqs(seq_ids, seq_ids + n_queries);
    std::sort(seqs.begin(), seqs.end());
    seqs.erase(std::unique(seqs.begin(), seqs.end()), seqs.end());
    const uint32_t rows = geometry_.reservation_rows;
    *out_cells = 0;
    for (int32_t seq : seqs) {
        const kv::StaticWindow& w = windows_[static_cast<uint32_t>(seq)];
        if (w.n_valid() == 0) continue;
        const uint32_t base = static_cast<uint32_t>(seq) * rows;
        uint32_t begin[2], end[2];
        const uint32_t runs = w.valid_runs(begin, end);
        for (uint32_t r = 0; r < runs; ++r) c_.attention_segments(layer, base + begin[r], base + end[r], out);
        *out_cells += w.n_valid();
    }
}

Result StaticLayout::snapshot(int32_t seq, SeqSnapshot* out) const {
    out->seq = seq;
    out->window = windows_[static_cast<size_t>(seq)];
    out->cells.clear();
    out->positions.clear();
    // The sequence's cells are its window's valid rows: no table scan.
    const uint32_t base = static_cast<uint32_t>(seq) * geometry_.reservation_rows;
    const kv::StaticWindow& w = out->window;
    for (uint32_t i = 0; i < w.n_valid(); ++i) {
        out->cells.push_back(base + w.valid_row(i));
        out->positions.push_back(c_.table_.cell_pos(base + w.valid_row(i)));
    }
    return KVRT_SUCCESS;
}

void StaticLayout::restore(const std::vector<SeqSnapshot>& snaps) {
    // Keep the detail message of the failure being undone.
    const std::string message = last_error_message();
    for (auto it = snaps.rbegin(); it != snaps.rend(); ++it) {
        (void)c_.table_.seq_rm(it->seq, -1, -1);
        std::vector<kv::Token> tokens(it->cells.size());
        for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = kv::Token{it->positions[i], &it->seq, 1};
        kv::Placement p;
        // The cells were the sequence's a moment ago and nothing else can
        // hold them (each sequence owns its rows), so this cannot fail but
        // for host memory; then the sequence is left empty and consistent.
        if (c_.table_.plan(tokens.data(), static_cast<uint32_t>(tokens.size()), &p, it->cells.data()) == KVRT_SUCCESS &&
            c_.table_.apply(p) == KVRT_SUCCESS) {
            windows_[static_cast<size_t>(it->seq)] = it->window;
        } else {
            (void)c_.table_.seq_rm(it->seq, -1, -1);
            windows_[static_cast<size_t>(it->seq)].reset();
        }
    }
    (void)fail(KVRT_SUCCESS, "%s", message.c_str());
}

Result StaticLayout::record_slide(vk::Stream& s, uint32_t seq, const kv::StaticSlide& slide) {
    if (!slide.needed || slide.rows == 0) return KVRT_SUCCESS;
    const uint64_t chunk_bytes = ops::Tuning::of(c_.ctx_).slide_chunk_bytes;
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
            KVRT_TRY(s.scratch(block * c_.geo_.n_kv_heads, &scratch));
        }
        for (uint32_t l = 0; l < c_.geo_.n_layers; ++l) {
            const vk::Buffer* buf = arena_->buffer(array, l).get();
            const uint64_t src0 = arena_->region_row_offset(array, seq, 0, slide.src_row);
            const size_t piece = static_cast<size_t>(src0 / g.piece_bytes);
            const uint64_t head0 = arena_->region_row_offset(array, seq, 0, 0) - piece * g.piece_bytes;
            // (source byte, destination byte) of every chunk, per chunk size.
            auto copy = [&](const vk::Buffer* from, size_t from_piece, uint64_t from_base, uint64_t from_stride,
                            const vk::Buffer* to, size_t to_piece, uint64_t to_base, uint64_t to_stride) -> Result {
                for (const uint64_t size : {chunk, tail}) {
                    if (size == 0) continue;
                    std::vector<ops::RowPair> rows;
                    for (uint32_t h = 0; h < c_.geo_.n_kv_heads; ++h) {
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

Result StaticLayout::append(vk::Stream* stream, const kv::Token* tokens, uint32_t n, int32_t layer, const Source* k,
                            const Source* v, uint32_t* out_cells) {
    const bool with_data = k && v;
    if (with_data) KVRT_TRY(c_.check_write(n, layer, *k, *v));
    if (stream) KVRT_TRY(stream->require_recording());
    if (n == 0) return KVRT_SUCCESS;
    if (!tokens) return fail(KVRT_ERROR_INVALID_ARGUMENT, "the batch's tokens are NULL");

    // Every check before anything changes: one sequence per token, rising
    // positions past the sequence's last, at most S-1 tokens per sequence.
    const uint32_t W = geometry_.window_rows;
    std::vector<int32_t> order;             // sequences in order of first appearance
    std::map<int32_t, std::vector<uint32_t>> of_seq;  // token indices per sequence
    for (uint32_t i = 0; i < n; ++i) {
        const kv::Token& t = tokens[i];
        if (t.n_seq != 1 || !t.seq_ids)
            return fail(KVRT_ERROR_INVALID_ARGUMENT,
                        "token %u lists %u sequences; in the static layout each token belongs to exactly one", i,
                        t.n_seq);
        const int32_t seq = t.seq_ids[0];
        if (seq < 0 || static_cast<uint32_t>(seq) >= c_.geo_.max_seqs)
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "token %u has sequence %d outside [0, %u)", i, seq,
                        c_.geo_.max_seqs);
        if (t.pos < 0) return fail(KVRT_ERROR_INVALID_ARGUMENT, "token %u has negative position %d", i, t.pos);
        auto& list = of_seq[seq];
        const int32_t prev = list.empty() ? c_.table_.seq_pos_max(seq) : tokens[list.back()].pos;
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
    const uint32_t Rr = geometry_.reservation_rows;
    std::vector<kv::StaticWindow> windows;
    std::vector<kv::StaticAppend> appends(order.size());
    std::vector<uint32_t> cells(n);
    for (size_t i = 0; i < order.size(); ++i) {
        const int32_t seq = order[i];
        windows.push_back(windows_[static_cast<size_t>(seq)]);
        const auto& list = of_seq[seq];
        KVRT_TRY(windows.back().append(static_cast<uint32_t>(list.size()), &appends[i]));
        for (size_t j = 0; j < list.size(); ++j)
            cells[list[j]] = static_cast<uint32_t>(seq) * Rr + (appends[i].write_row + static_cast<uint32_t>(j)) % Rr;
    }

    // Metadata: drop the rows that leave the window, move the survivors of a
    // slide, place the new tokens. Undone by restore() on failure.
    vk::Transaction tx(&c_, stream, c_.own_);
    tx.on_undo([this, snaps]() { restore(snaps); });
    for (size_t i = 0; i < order.size(); ++i) {
        const int32_t seq = order[i];
        const kv::StaticWindow& before = windows_[static_cast<size_t>(seq)];
        const uint32_t added = static_cast<uint32_t>(of_seq[seq].size());
        const uint32_t keep = windows[i].n_valid() - added;  // old rows still in the window
        if (keep < before.n_valid()) {
            const uint32_t first_kept_row = before.valid_row(before.n_valid() - keep);
            const int32_t from = keep == 0 ? -1 : c_.table_.cell_pos(static_cast<uint32_t>(seq) * Rr + first_kept_row);
            KVRT_TRY(c_.table_.seq_rm(seq, -1, from));
        }
        const kv::StaticSlide& slide = appends[i].slide;
        if (slide.needed && slide.rows > 0 && slide.src_row != slide.dst_row)
            KVRT_TRY(c_.table_.apply_moves(slide_moves(static_cast<uint32_t>(seq), Rr, {slide})));
    }
    kv::Placement placement;
    KVRT_TRY(c_.table_.plan(tokens, n, &placement, cells.data()));
    KVRT_TRY(c_.table_.apply(placement));
    for (size_t i = 0; i < order.size(); ++i) windows_[static_cast<size_t>(order[i])] = windows[i];

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
        if (with_data) KVRT_TRY(c_.record_writes(s, n, cells.data(), layer, *k, *v));
        KVRT_TRY(tx.submit());
    }
    tx.commit();
    if (out_cells) std::copy(cells.begin(), cells.end(), out_cells);
    return KVRT_SUCCESS;
}

Result StaticLayout::seq_rm(int32_t seq, int32_t p0, int32_t p1) {
    if (seq >= 0 && static_cast<uint32_t>(seq) >= c_.geo_.max_seqs)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "sequence %d is out of range (0..%u)", seq, c_.geo_.max_seqs - 1);
    if (p1 >= 0 && p1 < p0) return fail(KVRT_ERROR_INVALID_ARGUMENT, "range [%d, %d) is reversed", p0, p1);
    const uint32_t Rr = geometry_.reservation_rows;
    const uint32_t first = seq < 0 ? 0 : static_cast<uint32_t>(seq);
    const uint32_t last = seq < 0 ? c_.geo_.max_seqs : first + 1;

    // A window's valid rows hold rising positions, so [p0, p1) is a run of
    // them: valid rows [cut, cut + count). Plan each cut on a copy.
    struct Cut {
        int32_t seq = 0;
        kv::StaticWindow window;
        std::vector<kv::StaticSlide> slides;
    };
    std::vector<Cut> cuts;
    for (uint32_t s = first; s < last; ++s) {
        const kv::StaticWindow& w = windows_[s];
        const uint32_t n = w.n_valid(), base = s * Rr;
        // The number of valid rows below position `p` (`if_negative` for p < 0).
        auto below = [&](int32_t p, uint32_t if_negative) {
            if (p < 0) return if_negative;
            uint32_t lo = 0, hi = n;
            while (lo < hi) {
                const uint32_t mid = lo + (hi - lo) / 2;
                if (c_.table_.cell_pos(base + w.valid_row(mid)) < p)
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
            KVRT_TRY(c.window.remove_runs(cut, end - cut, &c.slides));
        cuts.push_back(c);
    }
    if (cuts.empty()) return KVRT_SUCCESS;

    std::vector<SeqSnapshot> snaps(cuts.size());
    for (size_t i = 0; i < cuts.size(); ++i) KVRT_TRY(snapshot(cuts[i].seq, &snaps[i]));
    vk::Transaction tx(&c_, nullptr, c_.own_);
    tx.on_undo([this, snaps]() { restore(snaps); });
    bool device_work = false;
    for (const Cut& c : cuts) {
        KVRT_TRY(c_.table_.seq_rm(c.seq, p0, p1));
        if (!c.slides.empty()) {
            KVRT_TRY(c_.table_.apply_moves(slide_moves(static_cast<uint32_t>(c.seq), Rr, c.slides)));
            device_work = true;
        }
        windows_[static_cast<size_t>(c.seq)] = c.window;
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
            for (size_t j = 0; j < cuts[i].slides.size() && r == KVRT_SUCCESS; ++j)
                r = record_slide(s, static_cast<uint32_t>(cuts[i].seq), cuts[i].slides[j]);
        s.end_op();
        KVRT_TRY(r);
        KVRT_TRY(tx.submit());
    }
    tx.commit();
    return KVRT_SUCCESS;
}

Result StaticLayout::make_room(int32_t seq, uint32_t n) {
    if (seq < 0 || static_cast<uint32_t>(seq) >= c_.geo_.max_seqs)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "sequence %d is out of range (0..%u)", seq, c_.geo_.max_seqs - 1);
    const uint32_t W = geometry_.window_rows, Rr = geometry_.reservation_rows;
    if (geometry_.ring)
        return fail(KVRT_ERROR_INVALID_ARGUMENT,
                    "kvrt_cache_static_make_room: a smart-mask cache's window is its whole region, with no room after "
                    "it; kvrt_cache_store writes a step's accepted rows into the ring");
    if (n == 0 || n > Rr - W)
        return fail(KVRT_ERROR_INVALID_ARGUMENT,
                    "room for %u rows after the window: this cache's regions have room for 1 to %u (ceil(R * (S-1)) - "
                    "(S-1) with R = %g; a larger reserve makes more)",
                    n, Rr - W, geometry_.reserve);
    kv::StaticWindow w = windows_[static_cast<size_t>(seq)];
    kv::StaticSlide slide;
    KVRT_TRY(w.make_room(n, &slide));
    if (!slide.needed) {
        windows_[static_cast<size_t>(seq)] = w;  // at most a restart of an empty window
        return KVRT_SUCCESS;
    }
    std::vector<SeqSnapshot> snaps(1);
    KVRT_TRY(snapshot(seq, &snaps[0]));
    vk::Transaction tx(&c_, nullptr, c_.own_);
    tx.on_undo([this, snaps]() { restore(snaps); });
    KVRT_TRY(c_.table_.apply_moves(slide_moves(static_cast<uint32_t>(seq), Rr, {slide})));
    windows_[static_cast<size_t>(seq)] = w;
    // The copy completes before the call returns; a wait that times out
    // keeps it (the work was submitted and completes later).
    tx.keep_on_timeout();
    KVRT_TRY(tx.begin());
    vk::Stream& s = tx.stream();
    s.begin_op("static room");
    const Result r = record_slide(s, static_cast<uint32_t>(seq), slide);
    s.end_op();
    KVRT_TRY(r);
    KVRT_TRY(tx.submit());
    tx.commit();
    return KVRT_SUCCESS;
}

Result StaticLayout::window(int32_t seq, int32_t layer_arg, uint32_t head, Array array, WindowView* out) const {
    if (seq < 0 || static_cast<uint32_t>(seq) >= c_.geo_.max_seqs)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "sequence %d is out of range (0..%u)", seq, c_.geo_.max_seqs - 1);
    if (layer_arg < 0 || static_cast<uint32_t>(layer_arg) >= c_.geo_.n_layers)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "layer %d is out of range (0..%u)", layer_arg, c_.geo_.n_layers - 1);
    const uint32_t layer = static_cast<uint32_t>(layer_arg);
    if (head >= c_.geo_.n_kv_heads)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "KV head %u is out of range (0..%u)", head, c_.geo_.n_kv_heads - 1);
    const kv::StaticWindow& w = windows_[static_cast<size_t>(seq)];
    const kv::RowGeometry& g = arena_->rows(array);
    WindowView v;
    v.buffer = arena_->buffer(array, layer);
    v.offset = arena_->region_row_offset(array, static_cast<uint32_t>(seq), head, w.start());
    v.row_stride = g.head_bytes;
    v.rows = w.window_rows();
    v.bytes = uint64_t{v.rows} * g.head_bytes;
    v.n_valid = w.n_valid();
    if (v.n_valid) {
        const uint32_t base = static_cast<uint32_t>(seq) * geometry_.reservation_rows;
        v.pos_first = c_.table_.cell_pos(base + w.valid_row(0));
        v.pos_last = c_.table_.cell_pos(base + w.valid_row(w.n_valid() - 1));
    }
    v.type = g.type;
    if (!g.scales.empty()) v.scale = g.scales[layer];
    *out = v;
    return KVRT_SUCCESS;
}

Result StaticLayout::mask(int32_t seq, kvrt_type type, void* out, uint64_t out_bytes) const {
    if (seq < 0 || static_cast<uint32_t>(seq) >= c_.geo_.max_seqs)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "sequence %d is out of range (0..%u)", seq, c_.geo_.max_seqs - 1);
    if (!out) return fail(KVRT_ERROR_INVALID_ARGUMENT, "out is NULL");
    const kv::StaticWindow& w = windows_[static_cast<size_t>(seq)];
    const uint64_t S = geometry_.max_seq;
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
    return fail(KVRT_ERROR_INVALID_ARGUMENT, "the mask's element_type must be F32 or F16 (got %s)",
                kv::type_name(type));
}

Result StaticLayout::graph_mask(int32_t seq, const kvrt_static_mask_desc* desc, void* out,
                                uint64_t out_bytes) const {
    const kvrt_static_mask_desc d = desc ? *desc : kvrt_static_mask_desc KVRT_STATIC_MASK_DESC_INIT;
    // Read as the caller's bits: any int32 may be there, not only a value of
    // the enum.
    const int32_t format = raw_enum(d.format);
    if (format != KVRT_MASK_F32 && format != KVRT_MASK_F16 && format != KVRT_MASK_U16)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "desc->format %d is not a kvrt_mask_format", static_cast<int>(format));
    if (d.flags & ~KVRT_MASK_FINITE)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "unknown desc->flags 0x%x", static_cast<unsigned>(d.flags));
    const bool finite = d.flags & KVRT_MASK_FINITE;
    if (finite && format == KVRT_MASK_U16)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "KVRT_MASK_FINITE applies to KVRT_MASK_F32 and KVRT_MASK_F16, not "
                                                 "KVRT_MASK_U16 (0 is its masked entry)");
    if (finite && !(std::isfinite(d.masked_value) && d.masked_value < 0.0f))
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "desc->masked_value %g must be finite and below 0",
                    static_cast<double>(d.masked_value));
    const uint32_t n_new = d.n_new ? d.n_new : 1;
    const uint64_t W = geometry_.window_rows;
    if (n_new > W)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "desc->n_new %u is above S-1 = %llu", n_new,
                    static_cast<unsigned long long>(W));
    if (seq < 0 || static_cast<uint32_t>(seq) >= c_.geo_.max_seqs)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "sequence %d is out of range (0..%u)", seq, c_.geo_.max_seqs - 1);
    if (!out) return fail(KVRT_ERROR_INVALID_ARGUMENT, "out is NULL");
    const kv::StaticWindow& w = windows_[static_cast<size_t>(seq)];
    const uint64_t entries = w.mask_entries(n_new);  // S, or S-1 + N in the smart-mask style
    const uint64_t entry = format == KVRT_MASK_F32 ? 4 : 2;
    const uint64_t need = uint64_t{n_new} * entries * entry;
    if (out_bytes < need)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "the mask needs %llu bytes (%u x %llu entries of %llu bytes), got %llu",
                    static_cast<unsigned long long>(need), n_new, static_cast<unsigned long long>(entries),
                    static_cast<unsigned long long>(entry), static_cast<unsigned long long>(out_bytes));
    const size_t count = static_cast<size_t>(uint64_t{n_new} * entries);
    const float neg_inf = -std::numeric_limits<float>::infinity();
    switch (format) {
        case KVRT_MASK_F32:
            return w.graph_mask(n_new, 0.0f, finite ? d.masked_value : neg_inf, static_cast<float*>(out), count);
        case KVRT_MASK_F16:
            return w.graph_mask(n_new, uint16_t{0x0000}, finite ? kv::memory_half::from_f32(d.masked_value) : uint16_t{0xFC00},
                                static_cast<uint16_t*>(out), count);
        default:
            return w.graph_mask(n_new, uint16_t{65535}, uint16_t{0}, static_cast<uint16_t*>(out), count);
    }
}

Result StaticLayout::stats(int32_t seq, kvrt_static_stats* out) const {
    if (seq >= 0 && static_cast<uint32_t>(seq) >= c_.geo_.max_seqs)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "sequence %d is out of range (0..%u)", seq, c_.geo_.max_seqs - 1);
    out->rows_appended = out->slides = out->rows_moved = out->bytes_moved = 0;
    const kv::CacheGeometry& geo = c_.geo_;
    const uint64_t per_row = uint64_t{geo.n_layers} * geo.n_kv_heads * (geo.k.head_bytes + geo.v.head_bytes);
    for (uint32_t s = 0; s < c_.geo_.max_seqs; ++s) {
        if (seq >= 0 && s != static_cast<uint32_t>(seq)) continue;
        const kv::StaticWindow& w = windows_[s];
        out->rows_appended += w.rows_appended();
        out->slides += w.slides();
        out->rows_moved += w.rows_moved();
        out->bytes_moved += w.rows_moved() * per_row;
    }
    return KVRT_SUCCESS;
}

}  // namespace kvrt::cache
