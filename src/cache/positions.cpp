// Cache operations on positions: RoPE shifts of K, context shifts, and the
// discard-and-re-evaluate alternative.
#include <algorithm>
#include <map>
#include <memory>

#include "cache/cache.hpp"
#include "ops/rope.hpp"

namespace kvrt::cache {

Result CellStore::record_shifts(vk::Transaction& tx) {
    if (!table_.has_pending_shift()) return KVRT_SUCCESS;
    vk::Stream& s = tx.stream();
    if (deferred_) {
        // K is stored unrotated and attention rotates by the current position:
        // the deltas mean nothing to the data.
        table_.clear_pending_shifts();
        return KVRT_SUCCESS;
    }
    // One (cos, sin) table per distinct delta, computed once on the host in
    // double precision; cells point at their delta's table.
    std::map<int32_t, uint32_t> table_of;
    std::vector<float> tables, one;
    std::map<size_t, std::vector<ops::ShiftCell>> by_piece;
    auto saved = std::make_shared<std::vector<std::pair<uint32_t, int32_t>>>();  // the cleared (cell, delta) pairs
    const int32_t* deltas = table_.deltas();
    uint32_t lo = 0, hi = 0;
    table_.shifted_range(&lo, &hi);
    for (uint32_t c = lo; c < hi; ++c) {
        if (deltas[c] == 0 || table_.cell_is_empty(c)) continue;
        auto [it, fresh] = table_of.emplace(deltas[c], static_cast<uint32_t>(tables.size() / 2));
        if (fresh) {
            rope_math_.shift_table(deltas[c], &one);
            tables.insert(tables.end(), one.begin(), one.end());
        }
        const RowLocation at = arena_->locate(Array::K, 0, c);
        by_piece[at.piece].push_back({static_cast<uint32_t>(at.offset), it->second});
        saved->emplace_back(c, deltas[c]);
    }
    vk::BufferUse table_use{};
    KVRT_TRY(s.upload(tables.data(), tables.size() * sizeof(float), &table_use));
    const ops::ShiftShape shape{geo_.k.type, geo_.k.head_dim, static_cast<uint32_t>(rope_math_.n_rot), geo_.n_kv_heads,
                                geo_.k.head_bytes, rope_math_.neox};
    s.begin_op("shift");
    Result r = KVRT_SUCCESS;
    // Every layer in one submission; layers share the cells' row offsets.
    for (uint32_t l = 0; l < geo_.n_layers && r == KVRT_SUCCESS; ++l) {
        if (geo_.in_window_group(l)) continue;  // the group shifts its own rows
        const RowLocation any = arena_->locate(Array::K, l, 0);
        for (const auto& [piece, cells] : by_piece) {
            r = ops::record_shift(s, shape, *any.buffer, piece, cells, table_use,
                                  static_cast<uint32_t>(table_use.offset / 8),
                                  geo_.k.scales.empty() ? kv::StaticScale{} : geo_.k.scales[l]);
            if (r != KVRT_SUCCESS) break;
        }
    }
    s.end_op();
    KVRT_TRY(r);
    table_.clear_pending_shifts();
    if (!saved->empty())
        tx.on_undo([this, saved]() {
            for (const auto& [cell, delta] : *saved) table_.restore_pending_shift(cell, delta);
        });
    return KVRT_SUCCESS;
}

Result CellStore::apply_shifts(vk::Stream* stream) {
    if (!stream && !table_.has_pending_shift()) return KVRT_SUCCESS;
    vk::Transaction tx(this, stream, own_);
    KVRT_TRY(tx.begin());
    KVRT_TRY(record_shifts(tx));
    return tx.finish();
}

namespace {

// n_past and the default discard of a sequence's context shift.
Result shift_plan(const kv::CellTable& t, int32_t seq, int32_t n_keep, int32_t n_discard, int32_t* n_past,
                  int32_t* discard) {
    if (seq < 0 || static_cast<uint32_t>(seq) >= t.max_seqs())
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "sequence %d is out of range (0..%u)", seq, t.max_seqs() - 1);
    if (n_keep < 0 || n_discard < 0) return fail(KVRT_ERROR_INVALID_ARGUMENT, "n_keep and n_discard must be >= 0");
    *n_past = t.seq_pos_max(seq) + 1;
    if (*n_past <= n_keep)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "sequence %d has no position after n_keep %d (n_past %d)", seq, n_keep,
                    *n_past);
    *discard = n_discard ? n_discard : (*n_past - n_keep) / 2;
    if (*discard == 0 || *discard > *n_past - n_keep)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "cannot discard %d of the %d positions after n_keep", *discard,
                    *n_past - n_keep);
    return KVRT_SUCCESS;
}

}  // namespace

Result Cache::context_shift(int32_t seq, int32_t n_keep, int32_t n_discard, int32_t* out_n_past) {
    int32_t n_past = 0, discard = 0;
    KVRT_TRY(shift_plan(table_, seq, n_keep, n_discard, &n_past, &discard));
    // seq_rm cannot fail after the checks above; seq_add can only run out of
    // host memory, and then the removal is the lesser surprise: report it.
    KVRT_TRY(seq_rm(seq, n_keep, n_keep + discard));
    KVRT_TRY(seq_add(seq, n_keep + discard, n_past, -discard));
    if (out_n_past) *out_n_past = table_.seq_pos_max(seq) + 1;
    return KVRT_SUCCESS;
}

Result Cache::discard_for_reevaluation(int32_t seq, int32_t n_keep, int32_t n_discard, int32_t* src_pos,
                                       int32_t* dst_pos, int32_t* count) {
    int32_t n_past = 0, discard = 0;
    KVRT_TRY(shift_plan(table_, seq, n_keep, n_discard, &n_past, &discard));
    KVRT_TRY(seq_rm(seq, n_keep, -1));
    if (src_pos) *src_pos = n_keep + discard;
    if (dst_pos) *dst_pos = n_keep;
    if (count) *count = n_past - n_keep - discard;
    return KVRT_SUCCESS;
}

}  // namespace kvrt::cache
