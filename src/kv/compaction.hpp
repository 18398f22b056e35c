// Compaction (defragmentation) planning for the cell table.
//
// Holes below the highest used cell cost every attention pass (n_attend() reads
// up to the highest used cell). The planner moves the highest used cells into
// the lowest holes. The device copies the K/V rows of each move first; only when
// that copy succeeded does the caller apply the same moves to the metadata with
// CellTable::apply_moves(), so metadata and data stay consistent if it fails.
//
// Thread-safety: the functions only read the table; see cell_table.hpp.
#pragma once

#include <cstdint>
#include <vector>

#include "core/result.hpp"
#include "kv/cell_table.hpp"

namespace kvrt::kv {

// Writes to *out (replacing its contents) up to `max_moves` moves that fill the
// lowest holes with the highest used cells, in that order. The plan is empty when
// the table's fragmentation() is below `threshold`, when there is no hole, or
// when max_moves is 0.
//
// Properties of a plan: every dst_cell < its src_cell; the source cells and the
// destination cells are two disjoint sets, each without repeats (so the device
// may perform all copies at once, in any order); every destination is a hole and
// every source a used cell of the current table. A plan that is not cut short by
// max_moves leaves cells [0, used()) all used and fragmentation() == 0.
//
// Returns KVRT_ERROR_INVALID_ARGUMENT when out is NULL or threshold is not in
// [0, 1] (NaN included); KVRT_ERROR_OUT_OF_HOST_MEMORY. *out is empty on failure.
Result plan_compaction(const CellTable& table, double threshold, uint32_t max_moves, std::vector<CellMove>* out);

// Number of moves a complete compaction of `table` needs: the used cells at or
// above index used().
uint32_t compaction_moves_needed(const CellTable& table);

}  // namespace kvrt::kv
