#include "cache/arena.hpp"

#include <string>

namespace kvrt::cache {

Result CellArena::create(vk::Context& ctx, const kv::CacheGeometry& geo, const char* label,
                         std::unique_ptr<CellArena>* out) {
    std::unique_ptr<CellArena> a(new CellArena());
    a->geo_ = geo;
    const std::string base = label && *label ? label : "kvrt cache";
    for (uint32_t l = 0; l < geo.n_layers; ++l) {
        for (Array arr : {Array::K, Array::V}) {
            const kv::RowGeometry& g = arr == Array::K ? geo.k : geo.v;
            std::unique_ptr<vk::Buffer> buf;
            const std::string name = base + (arr == Array::K ? " K" : " V") + std::to_string(l);
            KVRT_TRY(vk::Buffer::create(ctx, g.layer_bytes, g.piece_bytes, name.c_str(), &buf));
            a->bytes_ += g.layer_bytes;
            (arr == Array::K ? a->k_ : a->v_).push_back(std::move(buf));
        }
    }
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

}  // namespace kvrt::cache
