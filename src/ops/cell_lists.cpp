#include "ops/cell_lists.hpp"

#include <algorithm>
#include <cstddef>

#include "ops/tuning.hpp"
#include "vk/buffer.hpp"
#include "vk/stream.hpp"

namespace kvrt::ops {

namespace {

// Mirrors `Push` in shaders/cell_lists.comp.
struct CellListPush {
    uint32_t meta_stride, n_cells, n_chunks, n_listed, dir_offset, map_len, ranges_offset, counts_offset;
};
static_assert(sizeof(CellListPush) == 32, "CellListPush layout");
static_assert(offsetof(CellListPush, n_listed) == 12 && offsetof(CellListPush, map_len) == 20 &&
                  offsetof(CellListPush, counts_offset) == 28,
              "CellListPush offsets");

constexpr uint32_t kWorkgroup = 64;

uint32_t chunks_of(uint32_t n_cells) { return (n_cells + kCellListChunk - 1) / kCellListChunk; }
uint32_t blocks_of(uint32_t n_chunks) { return (n_chunks + kCellListBlock - 1) / kCellListBlock; }

}  // namespace

uint64_t cell_list_scratch_bytes(uint32_t n_entries, uint32_t n_cells) {
    const uint32_t n_chunks = chunks_of(n_cells);
    return uint64_t{n_entries} * (n_chunks + blocks_of(n_chunks)) * 4;
}

Result record_cell_lists(vk::Stream& stream, const vk::BufferUse& meta, uint32_t meta_stride, uint32_t n_cells,
                         const std::vector<CellListEntry>& entries, const vk::BufferUse& lists) {
    if (entries.empty() || n_cells == 0) return KVRT_SUCCESS;
    const uint32_t n = static_cast<uint32_t>(entries.size());
    const uint32_t n_chunks = chunks_of(n_cells);
    const uint32_t groups_x = (n_chunks + kWorkgroup - 1) / kWorkgroup;
    if (groups_x > 65535)
        return fail(KVRT_ERROR_INTERNAL, "cell lists: %u cells exceed one dispatch", n_cells);
    if (n > 65535) return fail(KVRT_ERROR_INTERNAL, "cell lists: %u sequences exceed one dispatch", n);
    // The directory: each sequence's listed index (below the highest listed
    // sequence), then each list's [first, end).
    uint32_t map_len = 0;
    for (const CellListEntry& e : entries) map_len = std::max(map_len, e.seq + 1);
    std::vector<uint32_t> dir(map_len, UINT32_MAX);
    dir.reserve(size_t{map_len} + 2 * size_t{n});
    for (uint32_t j = 0; j < n; ++j) {
        dir[entries[j].seq] = j;
        dir.push_back(entries[j].first);
        dir.push_back(entries[j].first + entries[j].count);
    }
    vk::BufferUse dir_use{}, counts{};
    KVRT_TRY(stream.upload(dir.data(), dir.size() * 4, &dir_use));
    KVRT_TRY(stream.scratch(cell_list_scratch_bytes(n, n_cells), &counts));
    counts.write = true;
    const uint32_t dir_offset = static_cast<uint32_t>(dir_use.offset / 4);
    const CellListPush push{meta_stride, n_cells,    n_chunks,
                            n,           dir_offset, map_len,
                            dir_offset + map_len,    static_cast<uint32_t>(counts.offset / 4)};
    const vk::BufferUse uses[4] = {meta, dir_use, counts, lists};
    stream.begin_op("cell lists");
    Result r = KVRT_SUCCESS;
    for (uint32_t mode = 0; mode < 4 && r == KVRT_SUCCESS; ++mode) {
        if (mode == 2 && blocks_of(n_chunks) == 1) continue;  // one block: its prefix is 0
        const vk::Pipeline* pipeline = nullptr;
        r = stream.context().pipelines().get({"cell_lists", 4, uint32_t{sizeof(CellListPush)}, {kWorkgroup, mode}},
                                             &pipeline);
        if (r != KVRT_SUCCESS) break;
        // Count and write: a chunk per invocation; block prefixes: a block of
        // one sequence per invocation (y: the sequence); block sums: a
        // sequence per invocation.
        const uint32_t x = mode == 1 ? (blocks_of(n_chunks) + kWorkgroup - 1) / kWorkgroup
                           : mode == 2 ? (n + kWorkgroup - 1) / kWorkgroup
                                       : groups_x;
        r = stream.dispatch(*pipeline, uses, 4, &push, x, mode == 1 ? n : 1);
    }
    stream.end_op();
    return r;
}

}  // namespace kvrt::ops
