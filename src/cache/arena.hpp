// Where a cache's K and V rows live on the device. This is the layout seam:
// the cache's operations (store, read, compaction, attention) address rows
// only through an Arena, so another arrangement of the same rows (the static
// windows of NPU engines, paged blocks) is another Arena, not a branch in every
// operation.
#pragma once

#include <memory>
#include <vector>

#include "core/result.hpp"
#include "kv/geometry.hpp"
#include "vk/buffer.hpp"

namespace kvrt::cache {

enum class Array { K = 0, V = 1 };

// The location of one row: a piece of a device buffer and the byte offset of
// the row inside it (4-byte aligned).
struct RowLocation {
    const vk::Buffer* buffer = nullptr;
    size_t piece = 0;
    uint64_t offset = 0;
};

class Arena {
public:
    virtual ~Arena() = default;
    // Location of `slot`'s row of `array` in `layer`.
    virtual RowLocation locate(Array array, uint32_t layer, uint32_t slot) const = 0;
    // Row geometry of `array` (bytes, padding, pieces).
    virtual const kv::RowGeometry& rows(Array array) const = 0;
    // Device bytes held.
    virtual uint64_t device_bytes() const = 0;
};

// The cell layout: per layer, K and V each in one buffer whose pieces hold
// `cells_per_piece` consecutive cells; cell c's row is at (c % cells_per_piece)
// * stride in piece c / cells_per_piece. Rows are cell-major: all KV heads of
// one token together, as they arrive from the engine's projections.
class CellArena final : public Arena {
public:
    static Result create(vk::Context& ctx, const kv::CacheGeometry& geo, const char* label,
                         std::unique_ptr<CellArena>* out);

    RowLocation locate(Array array, uint32_t layer, uint32_t slot) const override;
    const kv::RowGeometry& rows(Array array) const override { return array == Array::K ? geo_.k : geo_.v; }
    uint64_t device_bytes() const override { return bytes_; }

private:
    kv::CacheGeometry geo_;
    std::vector<std::unique_ptr<vk::Buffer>> k_, v_;  // one per layer
    uint64_t bytes_ = 0;
};

}  // namespace kvrt::cache
