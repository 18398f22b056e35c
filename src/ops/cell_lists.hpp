// Per-sequence lists of cells (shaders/cell_lists.comp): every cell a
// sequence uses, in increasing cell order, built on the device from the
// cache's mirror of its cell metadata, for attention to walk a sequence's
// own cells when its run of cells holds many of other sequences.
#pragma once

#include <cstdint>
#include <vector>

#include "core/result.hpp"

namespace kvrt::vk {
class Stream;
struct BufferUse;
}  // namespace kvrt::vk

namespace kvrt::ops {

// One sequence to list: its list goes to words [first, first + count) of
// the lists buffer, and `count` is the number of cells it uses (no more are
// written).
struct CellListEntry {
    uint32_t seq = 0;
    uint32_t first = 0, count = 0;
};

// Cells per invocation of the count and write passes, and chunks per block
// of the two-level prefix sums.
constexpr uint32_t kCellListChunk = 64;
constexpr uint32_t kCellListBlock = 64;

// Scratch bytes record_cell_lists needs for `n` entries over `n_cells` cells.
uint64_t cell_list_scratch_bytes(uint32_t n_entries, uint32_t n_cells);

// Records the four passes that build `entries`' lists (distinct sequences)
// into `lists` (a whole piece, written) from `meta` (the mirror's only piece:
// `meta_stride` words per cell, position then sequence bits) over cells
// [0, n_cells). The work is O(n_cells + entries * n_cells / kCellListChunk),
// and no invocation walks more than kCellListBlock chunks or
// n_cells / (kCellListChunk * kCellListBlock) block sums in series.
Result record_cell_lists(vk::Stream& stream, const vk::BufferUse& meta, uint32_t meta_stride, uint32_t n_cells,
                         const std::vector<CellListEntry>& entries, const vk::BufferUse& lists);

}  // namespace kvrt::ops
