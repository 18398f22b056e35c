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

// Rows of `slots` consecutive slots that lie in one piece at a constant
// stride: slot i of the run (from its first) at offset + i * stride.
struct RowRun {
    const vk::Buffer* buffer = nullptr;
    size_t piece = 0;
    uint64_t offset = 0;
    uint64_t stride = 0;
    uint32_t slots = 0;
};

class Arena {
public:
    virtual ~Arena() = default;
    // Location of `slot`'s row of `array` in `layer`.
    virtual RowLocation locate(Array array, uint32_t layer, uint32_t slot) const = 0;
    // The longest run of rows from `slot` on, of at most `max_slots` (>= 1)
    // slots: what a kernel can address from one binding by slot index.
    virtual RowRun run(Array array, uint32_t layer, uint32_t slot, uint32_t max_slots) const = 0;
    // Row geometry of `array` (bytes, padding, pieces).
    virtual const kv::RowGeometry& rows(Array array) const = 0;
    // Bytes from one KV head of a row to the next: rows(array).head_bytes
    // when a token's heads lie together (cells), more when each head has its
    // own region (static windows).
    virtual uint64_t head_stride(Array array) const = 0;
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
    RowRun run(Array array, uint32_t layer, uint32_t slot, uint32_t max_slots) const override;
    const kv::RowGeometry& rows(Array array) const override { return array == Array::K ? geo_.k : geo_.v; }
    uint64_t head_stride(Array array) const override { return rows(array).head_bytes; }
    uint64_t device_bytes() const override { return bytes_; }

private:
    kv::CacheGeometry geo_;
    std::vector<std::shared_ptr<vk::Buffer>> k_, v_;  // one per layer
    uint64_t bytes_ = 0;
};

// The static padded layout (SPEC 5): per layer, K and V each in one buffer
// holding a region of `reservation_rows` rows of one head for every
// (sequence, KV head), sequence-major; a piece holds whole sequences, so one
// binding covers all heads of a sequence. The slot of row r of sequence s's
// regions is s * reservation_rows + r; locate() gives head 0's row, and head
// h's is head_stride() * h further.
class StaticArena final : public Arena {
public:
    static Result create(vk::Context& ctx, const kv::CacheGeometry& geo, const char* label,
                         std::unique_ptr<StaticArena>* out);

    RowLocation locate(Array array, uint32_t layer, uint32_t slot) const override;
    // A run stays inside one sequence's regions.
    RowRun run(Array array, uint32_t layer, uint32_t slot, uint32_t max_slots) const override;
    const kv::RowGeometry& rows(Array array) const override { return array == Array::K ? geo_.k : geo_.v; }
    uint64_t head_stride(Array array) const override { return rows(array).regions.region_bytes; }
    uint64_t device_bytes() const override { return bytes_; }

    // The buffer of (layer, array), shared with the buffer handles the
    // window API gives out.
    const std::shared_ptr<vk::Buffer>& buffer(Array array, uint32_t layer) const {
        return (array == Array::K ? k_ : v_)[layer];
    }
    // Byte offset, in buffer(array, layer)'s address space (piece * piece
    // size + offset in the piece), of row `row` of (seq, head)'s region.
    uint64_t region_row_offset(Array array, uint32_t seq, uint32_t head, uint32_t row) const;

private:
    kv::CacheGeometry geo_;
    std::vector<std::shared_ptr<vk::Buffer>> k_, v_;  // one per layer
    uint64_t bytes_ = 0;
};

}  // namespace kvrt::cache
