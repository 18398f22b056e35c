// kvrt_cache_seq_transfer: a sequence's tokens and rows copied into another
// cache (or another sequence of the same one), between any two layouts of the
// same geometry and types.
#include <algorithm>
#include <map>
#include <string>

#include "cache/cache.hpp"
#include "cache/layout.hpp"
#include "kv/format.hpp"
#include "ops/rows.hpp"

namespace kvrt::cache {

Result CellStore::record_copy_cells(vk::Stream& s, const CellStore& src, const std::vector<uint32_t>& src_cells,
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
    KVRT_TRY(src.layout_->seq_cells(src_seq, &src_cells));
    std::stable_sort(src_cells.begin(), src_cells.end(), [&](uint32_t x, uint32_t y) {
        return src.table_.cell_pos(x) < src.table_.cell_pos(y);
    });
    if (src_cells.size() > layout_->max_seq_tokens())
        src_cells.erase(src_cells.begin(), src_cells.end() - layout_->max_seq_tokens());
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
    KVRT_TRY(layout_->store(nullptr, tokens.data(), n, -1, nullptr, nullptr, dst_cells.data(), false));
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
        layout_->drop_placed(dst_seq, dst_cells.data(), n);
        (void)fail(KVRT_SUCCESS, "%s", message.c_str());
        return r;
    }
    if (out_count) *out_count = n;
    return KVRT_SUCCESS;
}

}  // namespace kvrt::cache
