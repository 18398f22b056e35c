#include "kv/compaction.hpp"

#include <algorithm>
#include <new>

namespace kvrt::kv {

Result plan_compaction(const CellTable& table, double threshold, uint32_t max_moves, std::vector<CellMove>* out) {
    if (out == nullptr) return fail(KVRT_ERROR_INVALID_ARGUMENT, "plan_compaction: out is NULL");
    out->clear();
    if (!(threshold >= 0.0 && threshold <= 1.0)) {
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "plan_compaction: threshold %g is outside [0, 1]", threshold);
    }
    const uint32_t used = table.used();
    const uint32_t end = table.used_end();
    if (max_moves == 0 || used == end || table.fragmentation() < threshold) return KVRT_SUCCESS;
    try {
        out->reserve(std::min(max_moves, compaction_moves_needed(table)));
        // Two cursors: `lo` walks up over holes, `hi` walks down over used cells.
        // Below `lo` every cell is used (after the moves so far), above `hi`
        // every cell is empty, so the scan is O(used_end()).
        uint32_t lo = 0;
        uint32_t hi = end - 1;  // end > used >= 0, so end >= 1
        while (out->size() < max_moves) {
            while (lo < hi && !table.cell_is_empty(lo)) ++lo;
            while (hi > lo && table.cell_is_empty(hi)) --hi;
            if (lo >= hi) break;
            out->push_back(CellMove{hi, lo});
            ++lo;
            --hi;
        }
    } catch (const std::bad_alloc&) {
        out->clear();
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "plan_compaction: out of host memory");
    }
    return KVRT_SUCCESS;
}

uint32_t compaction_moves_needed(const CellTable& table) {
    uint32_t n = 0;
    for (uint32_t c = table.used(); c < table.used_end(); ++c) n += table.cell_is_empty(c) ? 0u : 1u;
    return n;
}

}  // namespace kvrt::kv
