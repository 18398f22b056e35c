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

Result CellStore::init_cells(const kvrt_cache_desc& desc) {
    KVRT_TRY(kv::CacheGeometry::from_desc(&desc, ctx_.max_binding_bytes(), &geo_));
    // A cache larger than the device's memory can never be allocated: fail
    // before the host table (its size grows with the capacity) and before the
    // driver is asked (some, lavapipe among them, overcommit: each layer's
    // buffer would be handed out and touched, and fail only much later).
    const uint64_t heap = ctx_.info().device_local_bytes;
    if (heap && geo_.device_bytes > heap)
        return fail(KVRT_ERROR_OUT_OF_DEVICE_MEMORY, "the cache needs %llu bytes, the device has %llu",
                    static_cast<unsigned long long>(geo_.device_bytes), static_cast<unsigned long long>(heap));
    KVRT_TRY(table_.init(geo_.capacity, geo_.max_seqs));
    if (desc.layer_windows) windows_.assign(desc.layer_windows, desc.layer_windows + desc.n_layers);
    else windows_.assign(desc.n_layers, 0);
    deferred_ = geo_.flags & KVRT_CACHE_DEFERRED_ROPE;
    rope_math_ = kv::Rope::from_params(geo_.rope, static_cast<int>(geo_.k.head_dim));
    return KVRT_SUCCESS;
}

Result CellStore::init_device(const kvrt_cache_desc& desc) {
    // Zeroed, the mirror says what the new table says: no cell in use.
    const std::string meta_label = std::string(desc.label && *desc.label ? desc.label : "kvrt cache") + " cells";
    KVRT_TRY(vk::Buffer::create(ctx_, uint64_t{geo_.capacity} * geo_.meta_words * 4, geo_.meta_piece_bytes,
                                meta_label.c_str(), &meta_));
    KVRT_TRY(create_lists(desc.label));
    if (deferred_) {
        std::vector<float> table;
        rope_math_.position_table(&table);
        const std::string label = std::string(desc.label && *desc.label ? desc.label : "kvrt cache") + " rope table";
        KVRT_TRY(vk::Buffer::create(ctx_, geo_.rope_table_bytes, 0, label.c_str(), &rope_table_));
        KVRT_TRY(rope_table_->upload(0, table.data(), geo_.rope_table_bytes));
    }
    uint32_t lo = 0, hi = 0;
    (void)table_.take_changes(&lo, &hi);
    return KVRT_SUCCESS;
}

Result CellStore::create(vk::Context& ctx, const kvrt_cache_desc& desc, std::unique_ptr<CellStore>* out) {
    std::unique_ptr<CellStore> c(new CellStore(ctx));
    KVRT_TRY(c->init_cells(desc));
    std::unique_ptr<CellArena> arena;
    KVRT_TRY(CellArena::create(ctx, c->geo_, desc.label, &arena));
    c->arena_ = std::move(arena);
    KVRT_TRY(c->init_device(desc));
    *out = std::move(c);
    return KVRT_SUCCESS;
}

CellStore::~CellStore() {
    // Undo hooks in streams must not outlive the store.
    for (vk::Stream* s : ctx_.streams()) s->forget_owner(this);
}

Result Cache::create(vk::Context& ctx, const kvrt_cache_desc& desc, std::unique_ptr<Cache>* out) {
    std::unique_ptr<Cache> c(new Cache(ctx));
    KVRT_TRY(c->init_cells(desc));
    KVRT_TRY(Layout::create(*c, desc, &c->layout_, &c->arena_));
    KVRT_TRY(c->init_device(desc));
    if (c->geo_.window_cells) KVRT_TRY(WindowGroup::create(*c, desc, &c->group_));
    *out = std::move(c);
    return KVRT_SUCCESS;
}

Cache::~Cache() {
    // Undo hooks in streams must not outlive the cache (also forgotten as
    // the store, should the two addresses differ).
    for (vk::Stream* s : ctx_.streams()) s->forget_owner(this);
}

void Cache::attention_cells(uint32_t layer, uint32_t n_queries, const int32_t* seq_ids,
                            std::vector<ops::AttnSegment>* out, uint32_t* out_cells) const {
    layout_->attention_cells(layer, n_queries, seq_ids, out, out_cells);
}

Result Cache::require_trees(const char* op) const { return layout_->require_trees(op); }

// Every cell below the table's n_attend(): the kernel tells, from the device
// mirror, which of them each query sees.
void CellStore::attention_cells(uint32_t layer, uint32_t, const int32_t*, std::vector<ops::AttnSegment>* out,
                                uint32_t* out_cells) const {
    *out_cells = table_.n_attend();
    attention_segments(layer, 0, *out_cells, out);
}

Result Cache::apply_shifts(vk::Stream* stream) {
    if (group_) KVRT_TRY(group_->rows().apply_shifts(stream));
    return CellStore::apply_shifts(stream);
}

Result Cache::attention(vk::Stream* stream, int32_t layer, uint32_t n_queries, const int32_t* positions,
                        const int32_t* seq_ids, const Source& q, const Output& out,
                        const kvrt_attention_params& params, const Tree* tree) {
    if (layer >= 0 && layer < static_cast<int32_t>(geo_.n_layers) && geo_.in_window_group(static_cast<uint32_t>(layer)))
        return group_->attention(stream, layer, n_queries, positions, seq_ids, q, out, params, tree);
    return CellStore::attention(stream, layer, n_queries, positions, seq_ids, q, out, params, tree);
}

Result Cache::read(int32_t layer, uint32_t n, const uint32_t* cells, float* k_out, float* v_out) {
    if (layer >= 0 && layer < static_cast<int32_t>(geo_.n_layers) && n && cells &&
        geo_.in_window_group(static_cast<uint32_t>(layer))) {
        std::vector<uint32_t> group;
        KVRT_TRY(group_->map_cells("kvrt_cache_read", n, cells, &group));
        return group_->rows().read(geo_.window_local[static_cast<uint32_t>(layer)], n, group.data(), k_out, v_out);
    }
    return CellStore::read(layer, n, cells, k_out, v_out);
}

// check_source, check_write, record_array and record_writes (the store data
// paths): cache/store_rows.cpp.

Result Cache::store(vk::Stream* stream, const kv::Token* tokens, uint32_t n, int32_t layer, const Source& k,
                    const Source& v, uint32_t* out_cells, bool tree) {
    return layout_->store(stream, tokens, n, layer, &k, &v, out_cells, tree);
}

Result Cache::place(const kv::Token* tokens, uint32_t n, uint32_t* out_cells, bool tree) {
    return layout_->store(nullptr, tokens, n, -1, nullptr, nullptr, out_cells, tree);
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
    vk::Transaction tx(this, stream, own_);
    KVRT_TRY(tx.begin());
    KVRT_TRY(record_writes(tx.stream(), n, cells, layer, k, v));
    return tx.finish();
}

Result CellStore::read(int32_t layer, uint32_t n, const uint32_t* cells, float* k_out, float* v_out) {
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
            vk::Transaction tx(this, nullptr, own_);
            KVRT_TRY(tx.begin());
            const RowLocation any = arena_->locate(array, static_cast<uint32_t>(layer), 0);
            for (const auto& [piece, rows] : groups)
                KVRT_TRY(ops::record_copy_rows(tx.stream(), {any.buffer, piece, copy_bytes}, {tmp.get(), 0, copy_bytes},
                                               copy_bytes, rows));
            KVRT_TRY(tx.finish());
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
    return layout_->compact(stream, threshold, max_moves, out_moved);
}

Result Cache::require_cells(const char* op) const { return layout_->require_cells(op); }

Result Cache::seq_rm(int32_t seq, int32_t p0, int32_t p1) { return layout_->seq_rm(seq, p0, p1); }

Result Cache::seq_cp(int32_t src, int32_t dst, int32_t p0, int32_t p1) { return layout_->seq_cp(src, dst, p0, p1); }

Result Cache::seq_add(int32_t seq, int32_t p0, int32_t p1, int32_t delta) {
    return layout_->seq_add(seq, p0, p1, delta);
}

Result Cache::seq_div(int32_t seq, int32_t p0, int32_t p1, int32_t d) { return layout_->seq_div(seq, p0, p1, d); }

Result Cache::seq_keep(int32_t seq) { return layout_->seq_keep(seq); }

void Cache::clear() { layout_->clear(); }

void Cache::fill_info(kvrt_cache_info* out) const {
    out->capacity = layout_->capacity();
    out->used = table_.used();
    out->n_attend = table_.n_attend();
    out->pending_shifts = table_.shifted_cell_count();
    out->fragmentation = static_cast<float>(layout_->fragmentation());
    out->device_bytes = 0;
    for (const CellStore* c : {static_cast<const CellStore*>(this), window_group()})
        if (c)
            out->device_bytes += c->arena().device_bytes() + c->geometry().meta_bytes + c->geometry().list_bytes;
    out->bytes_per_token = geo_.bytes_per_token;
    out->k_row_bytes = geo_.k.row_bytes;
    out->v_row_bytes = geo_.v.row_bytes;
}

Result Cache::require_no_window_group(const char* op) const {
    if (group_)
        return fail(KVRT_ERROR_UNSUPPORTED,
                    "%s is not available for a cache whose windowed layers keep a group of their own "
                    "(kvrt_window_layout_desc)",
                    op);
    return KVRT_SUCCESS;
}

Result Cache::seq_window_pos_min(int32_t seq, int32_t* out_pos) const {
    if (!out_pos) return fail(KVRT_ERROR_INVALID_ARGUMENT, "out_pos is NULL");
    if (seq < 0 || static_cast<uint32_t>(seq) >= geo_.max_seqs)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "sequence %d is out of range (0..%u)", seq, geo_.max_seqs - 1);
    if (group_) return group_->seq_pos_min(seq, out_pos);
    *out_pos = table_.seq_pos_min(seq);
    return KVRT_SUCCESS;
}

int32_t Cache::group_cell(uint32_t cell) const { return group_ ? group_->group_cell(cell) : -1; }

Result Cache::window_verify() const { return group_ ? group_->verify() : KVRT_SUCCESS; }

}  // namespace kvrt::cache
