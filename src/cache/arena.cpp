#include "cache/arena.hpp"

#include <algorithm>
#include <string>

namespace kvrt::cache {

namespace {

// One buffer per layer for K and one for V, sized and split as `geo` says.
Result make_layer_buffers(vk::Context& ctx, const kv::CacheGeometry& geo, const std::string& base,
                          std::vector<std::shared_ptr<vk::Buffer>>* k, std::vector<std::shared_ptr<vk::Buffer>>* v,
                          uint64_t* bytes) {
    // KVRT_CACHE_EXPORTABLE: rows another process or processor can map.
    const bool exportable = geo.flags & KVRT_CACHE_EXPORTABLE;
    if (exportable && !ctx.export_types())
        return fail(KVRT_ERROR_UNSUPPORTED,
                    "KVRT_CACHE_EXPORTABLE: this device cannot export memory as a file descriptor (%s)",
                    ctx.imported() ? "the context was imported from the application, whose device kvrt did not create"
                                   : "it has no VK_KHR_external_memory_fd for storage buffers");
    for (uint32_t l = 0; l < geo.n_layers; ++l) {
        // A layer of the window group keeps its rows there.
        if (geo.in_window_group(l)) {
            k->push_back(nullptr);
            v->push_back(nullptr);
            continue;
        }
        for (Array arr : {Array::K, Array::V}) {
            const kv::RowGeometry& g = arr == Array::K ? geo.k : geo.v;
            std::unique_ptr<vk::Buffer> buf;
            const std::string name = base + (arr == Array::K ? " K" : " V") + std::to_string(l);
            KVRT_TRY(vk::Buffer::create(ctx, g.layer_bytes, g.piece_bytes, name.c_str(), &buf, vk::MemoryKind::Device,
                                        exportable ? ctx.export_types() : 0));
            *bytes += g.layer_bytes;
            (arr == Array::K ? k : v)->push_back(std::move(buf));
        }
    }
    return KVRT_SUCCESS;
}

}  // namespace

Result CellArena::create(vk::Context& ctx, const kv::CacheGeometry& geo, const char* label,
                         std::unique_ptr<CellArena>* out) {
    std::unique_ptr<CellArena> a(new CellArena());
    a->geo_ = geo;
    KVRT_TRY(make_layer_buffers(ctx, geo, label && *label ? label : "kvrt cache", &a->k_, &a->v_, &a->bytes_));
    *out = std::move(a);
    return KVRT_SUCCESS;
}

RowLocation CellArena::locate(Array array, uint32_t layer, uint32_t slot) const {
    const kv::RowGeometry& g = rows(array);
    uint32_t piece = 0;
    uint64_t offset = 0;
    g.locate(slot, &piece, &offset);
    const auto& bufs = array == Array::K ? k_ : v_;
    return RowLocation{bufs[layer].get(), piece, offset};
}

RowRun CellArena::run(Array array, uint32_t layer, uint32_t slot, uint32_t max_slots) const {
    const kv::RowGeometry& g = rows(array);
    const RowLocation at = locate(array, layer, slot);
    const uint32_t left = g.cells_per_piece - slot % g.cells_per_piece;
    return RowRun{at.buffer, at.piece, at.offset, g.stride, std::min(left, max_slots)};
}

Result StaticArena::create(vk::Context& ctx, const kv::CacheGeometry& geo, const char* label,
                           std::unique_ptr<StaticArena>* out) {
    std::unique_ptr<StaticArena> a(new StaticArena());
    a->geo_ = geo;
    KVRT_TRY(make_layer_buffers(ctx, geo, label && *label ? label : "kvrt static cache", &a->k_, &a->v_, &a->bytes_));
    *out = std::move(a);
    return KVRT_SUCCESS;
}

uint64_t StaticArena::region_row_offset(Array array, uint32_t seq, uint32_t head, uint32_t row) const {
    const kv::RowGeometry& g = rows(array);
    const uint64_t region = uint64_t{seq} * geo_.n_kv_heads + head;
    const uint64_t piece = region / g.regions.regions_per_piece;
    const uint64_t in_piece = region % g.regions.regions_per_piece;
    return piece * g.piece_bytes + in_piece * g.regions.region_bytes + uint64_t{row} * g.head_bytes;
}

RowLocation StaticArena::locate(Array array, uint32_t layer, uint32_t slot) const {
    const kv::RowGeometry& g = rows(array);
    const uint32_t seq = slot / g.regions.reservation_rows;
    const uint32_t row = slot % g.regions.reservation_rows;
    const uint64_t at = region_row_offset(array, seq, 0, row);
    const auto& bufs = array == Array::K ? k_ : v_;
    return RowLocation{bufs[layer].get(), static_cast<size_t>(at / g.piece_bytes), at % g.piece_bytes};
}

RowRun StaticArena::run(Array array, uint32_t layer, uint32_t slot, uint32_t max_slots) const {
    const kv::RowGeometry& g = rows(array);
    const RowLocation at = locate(array, layer, slot);
    const uint32_t left = g.regions.reservation_rows - slot % g.regions.reservation_rows;
    return RowRun{at.buffer, at.piece, at.offset, g.head_bytes, std::min(left, max_slots)};
}

}  // namespace kvrt::cache
