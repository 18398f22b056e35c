// CellStore::read_raw: the stored bytes of cells, bit for bit, without padding
// (kvrt_cache_read_raw). What it gives can be stored again with a
// kvrt_tensor_ref of the stored type (store_rows.cpp).
#include <algorithm>
#include <cstring>
#include <map>

#include "cache/cache.hpp"
#include "core/checked.hpp"
#include "ops/rows.hpp"

namespace kvrt::cache {

Result Cache::read_raw(int32_t layer, Array array, uint32_t n, const uint32_t* cells, void* out,
                       uint64_t out_bytes) {
    if (layer >= 0 && layer < static_cast<int32_t>(geo_.n_layers) && n && cells && out &&
        geo_.in_window_group(static_cast<uint32_t>(layer))) {
        std::vector<uint32_t> group;
        KVRT_TRY(group_->map_cells("kvrt_cache_read_raw", n, cells, &group));
        return group_->rows().read_raw(geo_.window_local[static_cast<uint32_t>(layer)], array, n, group.data(), out,
                                       out_bytes);
    }
    return CellStore::read_raw(layer, array, n, cells, out, out_bytes);
}

Result CellStore::read_raw(int32_t layer, Array array, uint32_t n, const uint32_t* cells, void* out, uint64_t out_bytes) {
    if (layer < 0 || layer >= static_cast<int32_t>(geo_.n_layers))
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "layer %d is out of range (0..%u)", layer, geo_.n_layers - 1);
    if (n == 0) return KVRT_SUCCESS;
    if (!cells) return fail(KVRT_ERROR_INVALID_ARGUMENT, "cells is NULL");
    if (!out) return fail(KVRT_ERROR_INVALID_ARGUMENT, "out is NULL");
    const kv::RowGeometry& g = arena_->rows(array);
    const uint64_t row_bytes = g.row_bytes;  // one cell's head rows, unpadded
    uint64_t need = 0;
    if (!checked_mul(row_bytes, n, &need) || need > out_bytes)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "out_bytes %llu is below %u cells of %llu bytes",
                    static_cast<unsigned long long>(out_bytes), n, static_cast<unsigned long long>(row_bytes));
    for (uint32_t i = 0; i < n; ++i)
        if (cells[i] >= geo_.capacity)
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "cell %u is out of range (capacity %u)", cells[i], geo_.capacity);

    // The rows are gathered by a kernel into one buffer, padded as in the
    // cache (whole rows of `stride` bytes, or head by head when the heads lie
    // apart, which keeps them word aligned), downloaded, and unpadded on the
    // host; in batches that fit one binding.
    const uint64_t head_stride = arena_->head_stride(array);
    const bool split_heads = head_stride != g.head_bytes;
    const uint64_t copy_bytes = split_heads ? g.head_bytes : g.stride;  // multiples of 4
    const uint64_t padded_row = split_heads ? g.row_bytes : g.stride;
    const uint32_t per_batch = static_cast<uint32_t>(
        std::max<uint64_t>(1, std::min<uint64_t>(n, ctx_.max_binding_bytes() / padded_row)));
    std::unique_ptr<vk::Buffer> tmp;
    KVRT_TRY(vk::Buffer::create(ctx_, per_batch * padded_row, 0, "kvrt cache read raw", &tmp));
    std::vector<uint8_t> host(static_cast<size_t>(per_batch * padded_row));
    auto* to = static_cast<uint8_t*>(out);
    const RowLocation any = arena_->locate(array, static_cast<uint32_t>(layer), 0);
    for (uint32_t first = 0; first < n; first += per_batch) {
        const uint32_t count = std::min(per_batch, n - first);
        std::map<size_t, std::vector<ops::RowPair>> groups;
        for (uint32_t i = 0; i < count; ++i) {
            const RowLocation at = arena_->locate(array, static_cast<uint32_t>(layer), cells[first + i]);
            for (uint32_t h = 0; h < (split_heads ? geo_.n_kv_heads : 1u); ++h)
                groups[at.piece].push_back({static_cast<uint32_t>((at.offset + h * head_stride) / 4),
                                            static_cast<uint32_t>((i * padded_row + h * g.head_bytes) / 4)});
        }
        vk::Transaction tx(this, nullptr, own_);
        KVRT_TRY(tx.begin());
        for (const auto& [piece, rows] : groups)
            KVRT_TRY(ops::record_copy_rows(tx.stream(), {any.buffer, piece, copy_bytes}, {tmp.get(), 0, copy_bytes},
                                           copy_bytes, rows));
        KVRT_TRY(tx.finish());
        KVRT_TRY(tmp->download(0, host.data(), count * padded_row));
        for (uint32_t i = 0; i < count; ++i)
            std::memcpy(to + (uint64_t{first} + i) * row_bytes, host.data() + i * padded_row,
                        static_cast<size_t>(row_bytes));
    }
    return KVRT_SUCCESS;
}

}  // namespace kvrt::cache
