#include "cache/cache.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <utility>

#include "core/checked.hpp"
#include "kv/compaction.hpp"
#include "kv/format.hpp"
#include "ops/rows.hpp"

namespace kvrt::cache {

namespace {

uint64_t elem_bytes(kvrt_type t) { return t == KVRT_TYPE_F16 ? 2 : 4; }

// A placed batch, so that it can be given back if its data never reaches the
// device: exactly (rollback) while it is the table's latest change, otherwise
// cell by cell, freeing each cell that still holds the token placed there.
struct PlacedBatch {
    kv::Placement placement;
    std::vector<uint64_t> epochs;  // of placement.cells(), right after apply

    void remember(const kv::CellTable& table) {
        epochs.clear();
        for (uint32_t c : placement.cells()) epochs.push_back(table.cell_epoch(c));
    }

    void give_back(kv::CellTable& table) {
        if (!placement.applied()) return;
        // The exact rollback's refusal is expected, and must not replace the
        // detail message of the failure that is being undone.
        const std::string message = last_error_message();
        if (table.rollback(placement) == KVRT_SUCCESS) return;
        (void)fail(KVRT_SUCCESS, "%s", message.c_str());
        for (size_t i = 0; i < epochs.size(); ++i) (void)table.release_cell(placement.cells()[i], epochs[i]);
        epochs.clear();
    }
};

}  // namespace

Result Cache::create(vk::Context& ctx, const kvrt_cache_desc& desc, std::unique_ptr<Cache>* out) {
    std::unique_ptr<Cache> c(new Cache(ctx));
    KVRT_TRY(kv::CacheGeometry::from_desc(desc, ctx.max_binding_bytes(), &c->geo_));
    // A cache larger than the device's memory can never be allocated: fail
    // before the host table (its size grows with the capacity) and before the
    // driver is asked (some, lavapipe among them, overcommit: each layer's
    // buffer would be handed out and touched, and fail only much later).
    const uint64_t heap = ctx.info().device_local_bytes;
    if (heap && c->geo_.device_bytes > heap)
        return fail(KVRT_ERROR_OUT_OF_DEVICE_MEMORY, "the cache needs %llu bytes, the device has %llu",
                    static_cast<unsigned long long>(c->geo_.device_bytes), static_cast<unsigned long long>(heap));
    KVRT_TRY(c->table_.init(c->geo_.capacity, c->geo_.max_seqs));
    if (desc.layer_windows) c->windows_.assign(desc.layer_windows, desc.layer_windows + desc.n_layers);
    else c->windows_.assign(desc.n_layers, 0);
    c->rope_ = desc.rope;
    if (c->rope_.n_rot == 0) c->rope_.n_rot = c->geo_.k.head_dim;
    if (c->rope_.n_rot > c->geo_.k.head_dim || c->rope_.n_rot % 2 != 0)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "rope.n_rot %u must be even and at most head_dim_k %u",
                    c->rope_.n_rot, c->geo_.k.head_dim);
    if (c->rope_.mode != KVRT_ROPE_NORMAL && c->rope_.mode != KVRT_ROPE_NEOX)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "unknown rope mode %d", static_cast<int>(c->rope_.mode));
    if (c->rope_.ext_factor != 0.0f && c->rope_.n_ctx_orig == 0)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "YaRN (rope.ext_factor != 0) needs rope.n_ctx_orig");
    if (!(c->rope_.freq_base >= 0.0f) || !(c->rope_.freq_scale >= 0.0f))
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "rope.freq_base and rope.freq_scale must be >= 0");
    if (desc.flags & ~static_cast<kvrt_flags>(KVRT_CACHE_DEFERRED_ROPE))
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "unknown cache flags 0x%x", static_cast<unsigned>(desc.flags));
    c->deferred_ = desc.flags & KVRT_CACHE_DEFERRED_ROPE;
    c->rope_math_ = kv::Rope::from_params(c->rope_, static_cast<int>(c->geo_.k.head_dim));
    if (c->is_static()) {
        std::unique_ptr<StaticArena> arena;
        KVRT_TRY(StaticArena::create(ctx, c->geo_, desc.label, &arena));
        c->static_arena_ = arena.get();
        c->arena_ = std::move(arena);
        const kv::StaticRegions& r = c->geo_.k.regions;
        kv::TypeSize ts{};
        kv::type_size(c->geo_.k.type, &ts);
        KVRT_TRY(kv::StaticGeometry::create(c->geo_.n_layers, c->geo_.n_kv_heads, c->geo_.k.head_dim, ts.block_bytes,
                                            r.seq_len, r.reserve, &c->static_geo_));
        c->seq_windows_.assign(c->geo_.max_seqs, kv::StaticWindow(c->static_geo_));
    } else {
        std::unique_ptr<CellArena> arena;
        KVRT_TRY(CellArena::create(ctx, c->geo_, desc.label, &arena));
        c->arena_ = std::move(arena);
    }
    *out = std::move(c);
    return KVRT_SUCCESS;
}

Cache::~Cache() {
    // Undo hooks in streams must not outlive the cache.
    for (vk::Stream* s : ctx_.streams()) s->forget_owner(this);
    own_.reset();
    arena_.reset();
}

Result Cache::begin_own() {
    if (!own_) KVRT_TRY(vk::Stream::create(ctx_, false, 0, "kvrt cache", &own_));
    if (own_pending_) {
        // A previous synchronous call timed out; its work must end first.
        KVRT_TRY(own_->wait(ctx_.options().wait_timeout_ns));
        own_pending_ = false;
    }
    return own_->begin();
}

Result Cache::finish_own() {
    KVRT_TRY(own_->submit());
    own_pending_ = true;
    KVRT_TRY(own_->wait(ctx_.options().wait_timeout_ns));
    own_pending_ = false;
    return KVRT_SUCCESS;
}

Result Cache::check_source(const char* what, const Source& s, uint32_t n, int32_t layer,
                           const kv::RowGeometry& g) const {
    if (s.type != KVRT_TYPE_F32 && s.type != KVRT_TYPE_F16)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "%s: type must be F32 or F16", what);
    if (!s.buffer == !s.host) return fail(KVRT_ERROR_INVALID_ARGUMENT, "%s: set exactly one of buffer and host", what);
    if (s.offset % 4 || s.row_stride % 4 || s.layer_stride % 4)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "%s: offset and strides must be multiples of 4", what);
    const uint64_t row_bytes = uint64_t{geo_.n_kv_heads} * g.head_dim * elem_bytes(s.type);
    const uint64_t stride = s.row_stride ? s.row_stride : row_bytes;
    if (stride < row_bytes)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "%s: row_stride %llu is below the row size %llu", what,
                    static_cast<unsigned long long>(s.row_stride), static_cast<unsigned long long>(row_bytes));
    if (n == 0) return KVRT_SUCCESS;
    // The extent of the rows, for host memory too: its addresses are computed
    // from the same offset and strides and must not wrap around.
    const uint32_t n_layers = layer < 0 ? geo_.n_layers : 1;
    uint64_t lstride = 0, span = 0, end = 0, t = 0;
    if (!checked_mul(stride, n, &lstride)) return fail(KVRT_ERROR_INVALID_ARGUMENT, "%s: size overflows", what);
    if (s.layer_stride) lstride = s.layer_stride;
    if (!checked_mul(lstride, n_layers - 1, &span) || !checked_mul(stride, n - 1, &t) || !checked_add(span, t, &span) ||
        !checked_add(span, row_bytes, &span) || !checked_add(s.offset, span, &end) ||
        (s.host && end > UINTPTR_MAX - reinterpret_cast<uintptr_t>(s.host)))
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "%s: the offset and strides of %u rows of %u layer(s) overflow", what, n,
                    n_layers);
    if (s.buffer && end > s.buffer->size())
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "%s: %u rows of %u layer(s) do not fit in the buffer of %llu bytes", what,
                    n, n_layers, static_cast<unsigned long long>(s.buffer->size()));
    return KVRT_SUCCESS;
}

Result Cache::check_write(uint32_t n, int32_t layer, const Source& k, const Source& v) const {
    if (layer < -1 || layer >= static_cast<int32_t>(geo_.n_layers))
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "layer %d is out of range (-1 or 0..%u)", layer, geo_.n_layers - 1);
    KVRT_TRY(check_source("k", k, n, layer, geo_.k));
    KVRT_TRY(check_source("v", v, n, layer, geo_.v));
    return KVRT_SUCCESS;
}

Result Cache::record_array(vk::Stream& s, Array array, uint32_t n, const uint32_t* cells, uint32_t layer,
                           uint32_t src_layer, const Source& src) {
    const kv::RowGeometry& g = arena_->rows(array);
    const uint32_t row_elems = geo_.n_kv_heads * g.head_dim;
    const uint64_t row_bytes = row_elems * elem_bytes(src.type);
    // Heads apart in the cache (static windows): one store row per head.
    const uint64_t head_stride = arena_->head_stride(array);
    const bool split_heads = head_stride != g.head_bytes;
    const uint32_t heads = split_heads ? geo_.n_kv_heads : 1;
    const uint64_t src_head_bytes = uint64_t{g.head_dim} * elem_bytes(src.type);
    const uint64_t stride = src.row_stride ? src.row_stride : row_bytes;

    const uint64_t lstride = src.layer_stride ? src.layer_stride : stride * n;
    const RowLocation any = arena_->locate(array, layer, 0);

    // Host rows are packed into the stream's upload memory, as many per chunk
    // as one binding holds; device rows are read where they are.
    const uint32_t chunk = src.host ? static_cast<uint32_t>(std::min<uint64_t>(n, ctx_.max_binding_bytes() / row_bytes)) : n;
    for (uint32_t first = 0; first < n; first += chunk) {
        const uint32_t count = std::min(chunk, n - first);
        const vk::Buffer* buffer = src.buffer;
        uint64_t base = src.offset + src_layer * lstride + first * stride, step = stride;
        if (src.host) {
            vk::BufferUse up{};
            void* mapped = nullptr;
            KVRT_TRY(s.reserve(row_bytes * count, &up, &mapped));
            const uint8_t* from = src.host + base;
            for (uint32_t i = 0; i < count; ++i)
                std::memcpy(static_cast<uint8_t*>(mapped) + i * row_bytes, from + i * stride,
                            static_cast<size_t>(row_bytes));
            buffer = up.buffer;
            base = up.offset;
            step = row_bytes;
        }
        // One dispatch per (source piece, cache piece) pair. A source row that
        // straddles two pieces of the caller's buffer is first copied whole
        // into upload memory (kernels bind one piece at a time).
        std::map<std::pair<const vk::Buffer*, std::pair<size_t, size_t>>, std::vector<ops::RowPair>> groups;
        for (uint32_t i = 0; i < count; ++i) {
            const vk::Buffer* from = buffer;
            size_t sp = 0;
            uint64_t so = 0;
            buffer->locate(base + i * step, &sp, &so);
            if (so + row_bytes > buffer->piece(sp).size) {
                vk::BufferUse tmp{};
                KVRT_TRY(ops::record_gather_span(s, *buffer, base + i * step, row_bytes, &tmp));
                from = tmp.buffer;
                sp = tmp.piece;
                so = tmp.offset;
            }
            const RowLocation dst = arena_->locate(array, layer, cells[first + i]);
            auto& list = groups[{from, {sp, dst.piece}}];
            for (uint32_t h = 0; h < heads; ++h)
                list.push_back({static_cast<uint32_t>((so + h * src_head_bytes) / 4),
                                static_cast<uint32_t>((dst.offset + h * head_stride) / 4)});
        }
        for (const auto& [key, rows] : groups) {
            const ops::PieceRef from{key.first, key.second.first, split_heads ? src_head_bytes : row_bytes};
            const ops::PieceRef to{any.buffer, key.second.second, split_heads ? g.head_bytes : g.row_bytes};
            const uint32_t store_elems = split_heads ? g.head_dim : row_elems;
            KVRT_TRY(ops::record_store(s, src.type, g.type, store_elems, from, to, rows,
                                       g.scales.empty() ? kv::StaticScale{} : g.scales[layer]));
        }
    }
    return KVRT_SUCCESS;
}

Result Cache::record_writes(vk::Stream& s, uint32_t n, const uint32_t* cells, int32_t layer, const Source& k,
                            const Source& v) {
    s.begin_op("store");
    Result r = KVRT_SUCCESS;
    const uint32_t first = layer < 0 ? 0 : static_cast<uint32_t>(layer);
    const uint32_t last = layer < 0 ? geo_.n_layers : first + 1;
    for (uint32_t l = first; l < last && r == KVRT_SUCCESS; ++l) {
        r = record_array(s, Array::K, n, cells, l, l - first, k);
        if (r == KVRT_SUCCESS) r = record_array(s, Array::V, n, cells, l, l - first, v);
    }
    s.end_op();
    return r;
}

Result Cache::store(vk::Stream* stream, const kv::Token* tokens, uint32_t n, int32_t layer, const Source& k,
                    const Source& v, uint32_t* out_cells) {
    if (is_static()) return static_append(stream, tokens, n, layer, &k, &v, out_cells);
    KVRT_TRY(check_write(n, layer, k, v));
    if (stream) KVRT_TRY(stream->require_recording());
    auto batch = std::make_shared<PlacedBatch>();
    KVRT_TRY(table_.plan(tokens, n, &batch->placement));
    if (n == 0) return KVRT_SUCCESS;

    vk::Stream* s = stream;
    if (!s) {
        KVRT_TRY(begin_own());
        s = own_.get();
    }
    if (const Result r = table_.apply(batch->placement); r != KVRT_SUCCESS) {
        if (!stream) own_->abort();
        return r;
    }
    batch->remember(table_);
    if (stream) stream->on_abort(this, [this, batch]() { batch->give_back(table_); });

    Result r = record_writes(*s, n, batch->placement.cells().data(), layer, k, v);
    if (r == KVRT_SUCCESS && !stream) r = finish_own();
    if (r != KVRT_SUCCESS) {
        if (!stream) own_->abort();
        batch->give_back(table_);  // idempotent: a second call finds nothing applied
        return r;
    }
    if (out_cells) std::copy(batch->placement.cells().begin(), batch->placement.cells().end(), out_cells);
    return KVRT_SUCCESS;
}

Result Cache::place(const kv::Token* tokens, uint32_t n, uint32_t* out_cells) {
    if (is_static()) return static_append(nullptr, tokens, n, -1, nullptr, nullptr, out_cells);
    kv::Placement p;
    KVRT_TRY(table_.plan(tokens, n, &p));
    if (n == 0) return KVRT_SUCCESS;
    KVRT_TRY(table_.apply(p));
    if (out_cells) std::copy(p.cells().begin(), p.cells().end(), out_cells);
    return KVRT_SUCCESS;
}

Result Cache::write(vk::Stream* stream, uint32_t n, const uint32_t* cells, int32_t layer, const Source& k,
                    const Source& v) {
    KVRT_TRY(check_write(n, layer, k, v));
    if (n == 0) return KVRT_SUCCESS;
    if (!cells) return fail(KVRT_ERROR_INVALID_ARGUMENT, "cells is NULL");
    std::vector<uint32_t> sorted(cells, cells + n);
    std::sort(sorted.begin(), sorted.end());
    for (uint32_t i = 0; i < n; ++i) {
        if (sorted[i] >= geo_.capacity)
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "cell %u is out of range (capacity %u)", sorted[i], geo_.capacity);
        if (table_.cell_is_empty(sorted[i]))
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "cell %u is empty; place tokens first", sorted[i]);
        if (i && sorted[i] == sorted[i - 1]) return fail(KVRT_ERROR_INVALID_ARGUMENT, "cell %u repeats", sorted[i]);
    }
    if (stream) {
        KVRT_TRY(stream->require_recording());
        return record_writes(*stream, n, cells, layer, k, v);
    }
    KVRT_TRY(begin_own());
    Result r = record_writes(*own_, n, cells, layer, k, v);
    if (r == KVRT_SUCCESS) r = finish_own();
    if (r != KVRT_SUCCESS) own_->abort();
    return r;
}

Result Cache::read(int32_t layer, uint32_t n, const uint32_t* cells, float* k_out, float* v_out) {
    if (layer < 0 || layer >= static_cast<int32_t>(geo_.n_layers))
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "layer %d is out of range (0..%u)", layer, geo_.n_layers - 1);
    if (n == 0) return KVRT_SUCCESS;
    if (!cells) return fail(KVRT_ERROR_INVALID_ARGUMENT, "cells is NULL");
    for (uint32_t i = 0; i < n; ++i)
        if (cells[i] >= geo_.capacity)
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "cell %u is out of range (capacity %u)", cells[i], geo_.capacity);

    // Gather the rows into one packed buffer with a kernel, download it once,
    // and decode on the host; in batches that fit one binding.
    const uint64_t row_k = geo_.k.stride, row_v = geo_.v.stride;
    const uint32_t per_batch = static_cast<uint32_t>(
        std::max<uint64_t>(1, std::min<uint64_t>(n, ctx_.max_binding_bytes() / std::max(row_k, row_v))));
    std::unique_ptr<vk::Buffer> tmp;
    KVRT_TRY(vk::Buffer::create(ctx_, per_batch * std::max(row_k, row_v), 0, "kvrt cache read", &tmp));
    std::vector<uint8_t> host(static_cast<size_t>(per_batch * std::max(row_k, row_v)));
    for (uint32_t first = 0; first < n; first += per_batch) {
        const uint32_t count = std::min(per_batch, n - first);
        for (Array array : {Array::K, Array::V}) {
            float* out = array == Array::K ? k_out : v_out;
            if (!out) continue;
            const kv::RowGeometry& g = arena_->rows(array);
            // Rows are gathered whole, or head by head when the heads lie apart.
            const uint64_t head_stride = arena_->head_stride(array);
            const bool split_heads = head_stride != g.head_bytes;
            const uint64_t copy_bytes = split_heads ? g.head_bytes : g.stride;
            std::map<size_t, std::vector<ops::RowPair>> groups;
            for (uint32_t i = 0; i < count; ++i) {
                const RowLocation at = arena_->locate(array, static_cast<uint32_t>(layer), cells[first + i]);
                for (uint32_t h = 0; h < (split_heads ? geo_.n_kv_heads : 1u); ++h)
                    groups[at.piece].push_back({static_cast<uint32_t>((at.offset + h * head_stride) / 4),
                                                static_cast<uint32_t>((i * g.stride + h * g.head_bytes) / 4)});
            }
            KVRT_TRY(begin_own());
            Result r = KVRT_SUCCESS;
            const RowLocation any = arena_->locate(array, static_cast<uint32_t>(layer), 0);
            for (const auto& [piece, rows] : groups) {
                if (r != KVRT_SUCCESS) break;
                r = ops::record_copy_rows(*own_, {any.buffer, piece, copy_bytes}, {tmp.get(), 0, copy_bytes}, copy_bytes,
                                          rows);
            }
            if (r == KVRT_SUCCESS) r = finish_own();
            if (r != KVRT_SUCCESS) {
                own_->abort();
                return r;
            }
            KVRT_TRY(tmp->download(0, host.data(), count * g.stride));
            const size_t elems = size_t{geo_.n_kv_heads} * g.head_dim;
            for (uint32_t i = 0; i < count; ++i)
                kv::decode_row(g.type, host.data() + i * g.stride, elems, out + (size_t{first} + i) * elems,
                               g.scales.empty() ? nullptr : &g.scales[layer]);
        }
    }
    return KVRT_SUCCESS;
}

Result Cache::compact(vk::Stream* stream, double threshold, uint32_t max_moves, uint32_t* out_moved) {
    if (out_moved) *out_moved = 0;
    if (stream) KVRT_TRY(stream->require_recording());
    // Static windows have no holes to close: a row's place is its window's.
    if (is_static()) return KVRT_SUCCESS;
    auto moves = std::make_shared<std::vector<kv::CellMove>>();
    KVRT_TRY(kv::plan_compaction(table_, threshold, max_moves ? max_moves : UINT32_MAX, moves.get()));
    if (moves->empty()) return KVRT_SUCCESS;

    vk::Stream* s = stream;
    if (!s) {
        KVRT_TRY(begin_own());
        s = own_.get();
    }
    s->begin_op("compact");
    Result r = KVRT_SUCCESS;
    for (uint32_t l = 0; l < geo_.n_layers && r == KVRT_SUCCESS; ++l) {
        for (Array array : {Array::K, Array::V}) {
            const kv::RowGeometry& g = arena_->rows(array);
            std::map<std::pair<size_t, size_t>, std::vector<ops::RowPair>> groups;
            for (const kv::CellMove& m : *moves) {
                const RowLocation from = arena_->locate(array, l, m.src_cell);
                const RowLocation to = arena_->locate(array, l, m.dst_cell);
                groups[{from.piece, to.piece}].push_back(
                    {static_cast<uint32_t>(from.offset / 4), static_cast<uint32_t>(to.offset / 4)});
            }
            const RowLocation any = arena_->locate(array, l, 0);
            for (const auto& [pieces, rows] : groups) {
                r = ops::record_copy_rows(*s, {any.buffer, pieces.first, g.stride}, {any.buffer, pieces.second, g.stride},
                                          g.stride, rows);
                if (r != KVRT_SUCCESS) break;
            }
            if (r != KVRT_SUCCESS) break;
        }
    }
    s->end_op();
    if (r == KVRT_SUCCESS && !stream) r = finish_own();
    if (r != KVRT_SUCCESS) {
        // Rows were copied only into free cells (or not at all): nothing to undo.
        if (!stream) own_->abort();
        return r;
    }
    // The metadata follows the data: at once for a synchronous call (the copy
    // completed); for a stream, now, so that later operations recorded in it
    // see the new cells, with an undo that moves cells back if the recording
    // never reaches the device.
    KVRT_TRY(table_.apply_moves(*moves));
    if (stream) {
        stream->on_abort(this, [this, moves]() {
            for (auto it = moves->rbegin(); it != moves->rend(); ++it) {
                if (table_.cell_is_empty(it->dst_cell) || !table_.cell_is_empty(it->src_cell)) continue;
                const kv::CellMove back{it->dst_cell, it->src_cell};
                (void)table_.apply_moves(&back, 1);
            }
        });
    }
    if (out_moved) *out_moved = static_cast<uint32_t>(moves->size());
    return KVRT_SUCCESS;
}

Result Cache::require_cells(const char* op) const {
    if (is_static())
        return fail(KVRT_ERROR_UNSUPPORTED,
                    "%s is not available in the static layout (its windows keep positions in arrival order)", op);
    return KVRT_SUCCESS;
}

Result Cache::seq_rm(int32_t seq, int32_t p0, int32_t p1) {
    if (!is_static()) return table_.seq_rm(seq, p0, p1);
    if (seq >= 0 && static_cast<uint32_t>(seq) >= geo_.max_seqs)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "sequence %d is out of range (0..%u)", seq, geo_.max_seqs - 1);
    if (p1 >= 0 && p1 < p0) return fail(KVRT_ERROR_INVALID_ARGUMENT, "range [%d, %d) is reversed", p0, p1);
    // Whole sequences only: a window cannot have a hole.
    const uint32_t first = seq < 0 ? 0 : static_cast<uint32_t>(seq);
    const uint32_t last = seq < 0 ? geo_.max_seqs : first + 1;
    bool any = false;
    for (uint32_t s = first; s < last; ++s) {
        const int32_t lo = table_.seq_pos_min(static_cast<int32_t>(s)), hi = table_.seq_pos_max(static_cast<int32_t>(s));
        if (lo < 0) continue;
        const bool before = p1 >= 0 && p1 <= lo, after = p0 > hi;
        if (before || after || (p0 == p1 && p0 >= 0)) continue;  // touches nothing of s
        if (p0 > lo || (p1 >= 0 && p1 <= hi))
            return fail(KVRT_ERROR_UNSUPPORTED,
                        "the static layout removes whole sequences only: [%d, %d) cuts sequence %u's positions "
                        "%d..%d",
                        p0, p1, s, lo, hi);
        any = true;
    }
    if (!any) return KVRT_SUCCESS;
    KVRT_TRY(table_.seq_rm(seq, p0, p1));
    for (uint32_t s = first; s < last; ++s)
        if (table_.seq_pos_min(static_cast<int32_t>(s)) < 0) seq_windows_[s].reset();
    return KVRT_SUCCESS;
}

Result Cache::seq_keep(int32_t seq) {
    KVRT_TRY(table_.seq_keep(seq));
    for (uint32_t s = 0; s < seq_windows_.size(); ++s)
        if (static_cast<int32_t>(s) != seq) seq_windows_[s].reset();
    return KVRT_SUCCESS;
}

void Cache::clear() {
    table_.clear();
    for (kv::StaticWindow& w : seq_windows_) w.reset();
}

void Cache::fill_info(kvrt_cache_info* out) const {
    out->capacity = is_static() ? geo_.max_seqs * geo_.k.regions.window_rows : geo_.capacity;
    out->used = table_.used();
    out->n_attend = table_.n_attend();
    out->pending_shifts = table_.shifted_cell_count();
    // Static windows have padding, not holes: nothing to compact.
    out->fragmentation = is_static() ? 0.0f : static_cast<float>(table_.fragmentation());
    out->device_bytes = arena_->device_bytes();
    out->bytes_per_token = geo_.bytes_per_token;
}

}  // namespace kvrt::cache
