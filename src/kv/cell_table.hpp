// The cell table: CPU-side metadata of the cache's general (cell) layout.
//
// The cache is an array of `capacity` cells. Each cell holds a position (-1 when
// the cell is empty), a pending K shift `delta` (the sum of position changes since
// the last clear_pending_shifts()), and the set of sequence ids that use the cell
// (a cell can be shared by several sequences, e.g. a common prompt). The table
// follows the semantics of llama.cpp's memory API (llama_memory_seq_rm, _seq_cp,
// _seq_keep, _seq_add, _seq_div, _seq_pos_min, _seq_pos_max) on half-open
// position ranges [p0, p1) where a negative bound means "unbounded".
//
// Layout for upload: positions and deltas are int32 arrays of `capacity` entries;
// the sequence sets are `capacity * words_per_cell()` uint64 words, cell-major,
// where bit (s % 64) of word (cell * words_per_cell() + s / 64) says that
// sequence s uses the cell. All three can be copied to the device as they are.
//
// Failure model. Every mutating operation validates its arguments and reserves
// every host allocation it needs before it changes anything, so an operation
// that returns an error (bad argument, KVRT_ERROR_CACHE_FULL,
// KVRT_ERROR_OUT_OF_HOST_MEMORY) leaves the table exactly as it was. Placement
// is split into plan() (const, may fail) and apply() (no resource failure), and
// an applied placement can be rolled back while it is still the table's last
// change, so a caller can undo it when a later device step of the same call
// fails.
//
// Thread-safety: a CellTable is externally synchronized. Concurrent calls to
// const member functions are safe; anything else needs exclusive access.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "core/result.hpp"

namespace kvrt::kv {

// One token of a batch to place: its position and the sequences it belongs to.
// `seq_ids` points to `n_seq` distinct ids in [0, max_seqs); the pointed-to
// memory only needs to live for the plan() call (the plan keeps a copy).
struct Token {
    int32_t pos = 0;
    const int32_t* seq_ids = nullptr;
    uint32_t n_seq = 0;
};

// One metadata move of the compaction planner: the cell `src_cell` (in use)
// moves to `dst_cell` (empty), keeping its position, delta and sequence set.
struct CellMove {
    uint32_t src_cell = 0;
    uint32_t dst_cell = 0;
};

// One cell of a sequence in CellTable::mirror_seq: the cell, its position
// and its pending shift.
struct CellSet {
    uint32_t cell = 0;
    int32_t pos = 0;
    int32_t delta = 0;
};

// Per-sequence ordered index: position -> number of the sequence's cells at that
// position (seq_div can merge several cells onto one position).
using SeqIndex = std::map<int32_t, uint32_t>;

// Spare index nodes, allocated ahead of a mutation so that the mutation itself
// never allocates. A multimap because its node handles are interchangeable with
// SeqIndex's (checked in cell_table.cpp) and it accepts any number of equal keys.
using IndexNodePool = std::multimap<int32_t, uint32_t>;

class CellTable;

// A sequence as it was (CellTable::save_seq, remove_seq), to put back
// with restore_seq: its cells, each with its position, pending shift and
// the placement that filled it, its run of cells, and the table's head.
// Its size is the sequence's.
struct SeqRemoval {
    int32_t seq = -1;
    std::vector<CellSet> cells;
    std::vector<uint64_t> epochs;
    uint32_t span_lo = 0, span_hi = 0;
    uint32_t head = 0;
};

// The result of CellTable::plan(): the cell chosen for each token, a copy of the
// batch, and the index nodes that apply() will link in, so that apply() needs no
// allocation. After apply() it doubles as the undo record of the placement.
// A Placement can be reused for many batches (it keeps its allocations).
class Placement {
public:
    // The cell of token i (i < size()). Valid once plan() succeeded.
    const std::vector<uint32_t>& cells() const { return cells_; }

    // Number of tokens placed (0 before a successful plan()).
    uint32_t size() const { return static_cast<uint32_t>(cells_.size()); }

    // True when the cells are consecutive: cells()[i] == cells()[0] + i.
    bool contiguous() const { return contiguous_; }

    // True after a successful plan() that has not been applied yet.
    bool planned() const { return state_ == State::planned; }

    // True after apply() until the placement is rolled back or re-planned.
    bool applied() const { return state_ == State::applied; }

private:
    friend class CellTable;
    enum class State { empty, planned, applied, rolled_back };

    void reset_batch();

    std::vector<uint32_t> cells_;
    std::vector<int32_t> pos_;          // copy of each token's position
    std::vector<size_t> seq_begin_;     // token i's ids: seq_ids_[seq_begin_[i], seq_begin_[i+1])
    std::vector<int32_t> seq_ids_;
    std::vector<uint64_t> scratch_;     // (seq, pos) keys for the duplicate check
    IndexNodePool nodes_;               // one spare node per (token, seq id) pair
    bool contiguous_ = false;
    State state_ = State::empty;
    uint64_t revision_ = 0;             // table revision planned against / after apply
    uint32_t prev_head_ = 0;            // undo record, valid while applied
    uint32_t prev_used_end_ = 0;
};

class CellTable {
public:
    // The padding n_attend() uses by default (attention kernels read whole
    // 32-cell chunks; tiled kernels ask for 256).
    static constexpr uint32_t default_attend_pad = 32;

    CellTable() = default;

    // (Re)initializes an empty table of `capacity` cells serving sequence ids in
    // [0, max_seqs). Returns KVRT_ERROR_INVALID_ARGUMENT when either is 0, when
    // max_seqs exceeds INT32_MAX, or when the table's size overflows;
    // KVRT_ERROR_OUT_OF_HOST_MEMORY when an allocation fails. On failure the
    // previous contents are kept.
    Result init(uint32_t capacity, uint32_t max_seqs);

    // ---- Placement -------------------------------------------------------------

    // Finds `n` empty cells for `tokens` without changing the table and writes
    // them to `*out` (token i gets cells()[i]; the cells ascend). It takes the
    // first run of n consecutive empty cells found from a rotating head, as
    // llama.cpp does: the head is the cell after the last placement, moves down
    // to the lowest cell freed below it, and restarts at 0 when it is more than
    // used() + 2n. When no run exists it takes the n lowest empty cells, which
    // keeps n_attend() and fragmentation low. n == 0 gives an empty placement.
    //
    // Checks, in this order: KVRT_ERROR_INVALID_ARGUMENT when out is NULL;
    // KVRT_ERROR_INVALID_STATE before init(); KVRT_ERROR_INVALID_ARGUMENT when
    // tokens is NULL with n > 0, a position is negative, a token has no
    // sequence id, a NULL id array or more ids than max_seqs, an id is outside
    // [0, max_seqs), or a (sequence, position) pair already exists in the
    // table; KVRT_ERROR_CACHE_FULL when fewer than n cells are empty (the
    // detail message gives both numbers); KVRT_ERROR_INVALID_ARGUMENT when a
    // (sequence, position) pair repeats in the batch (this includes an id
    // repeated inside one token); KVRT_ERROR_OUT_OF_HOST_MEMORY. On failure
    // *out holds no plan. With `at` (n cells), token i goes to cell at[i]
    // instead of a free cell the table picks; each must be empty and given
    // once (else KVRT_ERROR_INVALID_ARGUMENT). With `repeats`, a (sequence,
    // position) pair may repeat in the batch (the siblings of a token tree,
    // or a saved table in which seq_div merged positions); pairs already in
    // the table are still refused.
    Result plan(const Token* tokens, uint32_t n, Placement* out, const uint32_t* at = nullptr,
                bool repeats = false) const;

    // Writes the planned batch into its cells. Allocates nothing and has no
    // resource failure; it returns KVRT_ERROR_INVALID_STATE (and changes
    // nothing) only for a caller bug: the placement was not planned on this
    // table, was already applied, or the table changed since plan().
    Result apply(Placement& placement);

    // Undoes an applied placement, restoring cells, sequence index, counters and
    // head exactly as they were before apply(). Allowed only while the placement
    // is the table's most recent change; otherwise returns
    // KVRT_ERROR_INVALID_STATE and changes nothing. Allocates nothing. The
    // placement must be planned again before it can be applied again.
    Result rollback(Placement& placement);

    // ---- Sequence operations (llama.cpp semantics) -----------------------------
    //
    // Ranges are half-open [p0, p1) over cell positions; p0 < 0 means 0 and
    // p1 < 0 means +infinity. A range with 0 <= p1 < p0 is rejected with
    // KVRT_ERROR_INVALID_ARGUMENT; p0 == p1 is an empty range (no-op). A sequence
    // id outside [0, max_seqs) is KVRT_ERROR_INVALID_ARGUMENT (except seq < 0 in
    // seq_rm). On any error the table is unchanged.

    // Removes sequence `seq` from its cells with positions in [p0, p1); a cell
    // that no sequence uses any more becomes empty (pos -1, delta 0). seq < 0
    // empties every cell in the range, whatever its sequences.
    Result seq_rm(int32_t seq, int32_t p0, int32_t p1);

    // Makes `dst` share the cells of `src` with positions in [p0, p1) (metadata
    // only; no data moves). src == dst is a no-op.
    // KVRT_ERROR_OUT_OF_HOST_MEMORY possible.
    Result seq_cp(int32_t src, int32_t dst, int32_t p0, int32_t p1);

    // Removes every sequence other than `seq` from every cell; cells that `seq`
    // does not use become empty.
    Result seq_keep(int32_t seq);

    // Removes sequence seqs[i] from cell cells[i] for each i < n, and empties
    // the cells no sequence uses any more (a token tree's rejected branches).
    // Each cell must be in use, hold position positions[i] and sequence
    // seqs[i], and appear once; otherwise KVRT_ERROR_INVALID_ARGUMENT and
    // nothing changes. KVRT_ERROR_OUT_OF_HOST_MEMORY possible (before any
    // change).
    Result remove_cells(const uint32_t* cells, const int32_t* positions, const int32_t* seqs, uint32_t n);

    // Adds `delta` to the position of every cell of `seq` with a position in
    // [p0, p1) and accumulates it in the cell's pending shift. As in llama.cpp,
    // the position belongs to the cell, so a cell shared with other sequences
    // moves for all of them; and a cell whose new position is negative is
    // emptied (for all its sequences). delta == 0 is a no-op. Returns
    // KVRT_ERROR_INVALID_ARGUMENT if a new position would exceed INT32_MAX or a
    // pending shift would overflow int32. KVRT_ERROR_OUT_OF_HOST_MEMORY possible.
    Result seq_add(int32_t seq, int32_t p0, int32_t p1, int32_t delta);

    // Integer-divides the position of every cell of `seq` with a position in
    // [p0, p1) by d (SelfExtend grouping) and adds new_pos - old_pos to the
    // cell's pending shift. Shared cells move for all their sequences, as in
    // seq_add. d <= 0 is KVRT_ERROR_INVALID_ARGUMENT; d == 1 is a no-op.
    // KVRT_ERROR_OUT_OF_HOST_MEMORY possible.
    Result seq_div(int32_t seq, int32_t p0, int32_t p1, int32_t d);

    // Smallest / largest position of `seq`, or -1 when the sequence has no cell
    // or `seq` is out of range. O(1).
    int32_t seq_pos_min(int32_t seq) const;
    int32_t seq_pos_max(int32_t seq) const;

    // Number of cells that `seq` uses (0 when out of range).
    uint32_t seq_cell_count(int32_t seq) const;
    // A run of cells [*lo, *hi) that holds every cell `seq` uses: a
    // superset, which grows as the sequence takes cells and is exact again
    // after the sequence empties (then both are 0), after a seq_rm or
    // seq_keep that changed the table (they walk every cell anyway), and
    // after a compaction moved cells. Both 0 when seq is out of range. O(1).
    // Attention reads only the cells inside its queries' runs.
    void seq_cell_span(int32_t seq, uint32_t* lo, uint32_t* hi) const;
    // Smallest position >= p of `seq`, or -1 (none, or seq out of range).
    // O(log n).
    int32_t seq_pos_from(int32_t seq, int32_t p) const;
    // Number of `seq`'s cells with positions in [p0, p1) (p0 < 0: 0; p1 < 0:
    // no end); 0 when seq is out of range. O(log n + positions in range).
    uint32_t seq_count(int32_t seq, int32_t p0, int32_t p1) const;

    // Records in *out what restore_seq needs to put `seq` back as it is now
    // (reserving what that needs, so the restore cannot fail).
    // KVRT_ERROR_INVALID_ARGUMENT for a bad seq, KVRT_ERROR_OUT_OF_HOST_MEMORY
    // (the table unchanged either way).
    Result save_seq(int32_t seq, SeqRemoval* out);
    // save_seq, then removes every cell of `seq` as seq_rm(seq, -1, -1) does.
    Result remove_seq(int32_t seq, SeqRemoval* out);
    // Puts a saved sequence back exactly as it was (cells, positions, pending
    // shifts, placements, its run of cells, the head): first takes it out of
    // the cells it holds now (a cell nobody else holds becomes empty), then
    // puts it in its saved cells. Each saved cell must be empty by then or
    // held by other sequences at the saved position: the other sequences'
    // changes since the save are undone first. Allocates nothing when only
    // the save reserved index nodes since. restore_seqs puts back n
    // sequences saved at the same time: all are taken out first.
    void restore_seq(const SeqRemoval& saved) { restore_seqs(&saved, 1); }
    void restore_seqs(const SeqRemoval* saved, size_t n);

    // Writes the cells of `seq`, in increasing cell order, to *out (replacing
    // its contents). KVRT_ERROR_INVALID_ARGUMENT for a bad seq or NULL out,
    // KVRT_ERROR_OUT_OF_HOST_MEMORY.
    Result cells_of_seq(int32_t seq, std::vector<uint32_t>* out) const;

    // Empties every cell and resets the head. Never fails.
    void clear();

    // ---- Edits of a block-table layout -----------------------------------------

    // Makes sure the next mirror_seq() adding or moving up to `n` cells of a
    // sequence allocates nothing. KVRT_ERROR_OUT_OF_HOST_MEMORY.
    Result reserve(size_t n) { return reserve_nodes(n); }

    // The paged layout's edit of what sequence `seq` sees, computed from its
    // block table: first removes `seq` from each cell of drop[0..n_drop)
    // (a cell no sequence uses any more becomes empty); then for each entry
    // of set[0..n_set): a cell that `seq` still uses (and no other sequence
    // does) moves to the entry's position and pending shift; otherwise `seq`
    // joins the cell, which must be empty (it takes the position and shift)
    // or hold the entry's position. Checks everything first and returns
    // KVRT_ERROR_INTERNAL (changing nothing) when the edit does not fit the
    // table, KVRT_ERROR_INVALID_ARGUMENT for a bad seq. Allocates nothing when
    // reserve(n_set) succeeded before.
    Result mirror_seq(int32_t seq, const uint32_t* drop, size_t n_drop, const CellSet* set, size_t n_set);

    // ---- Pending shifts --------------------------------------------------------

    // True when some cell has a non-zero pending shift (its K must be rotated by
    // delta before the next attention). O(1).
    bool has_pending_shift() const { return n_shifted_ != 0; }

    // Number of cells with a non-zero pending shift.
    uint32_t shifted_cell_count() const { return n_shifted_; }

    // Pending shift of every cell (capacity() entries; 0 for empty cells).
    const int32_t* deltas() const { return delta_.data(); }

    // A range of cells [*lo, *hi) that holds every cell with a pending shift
    // (empty when none has one): a scan for them need not look further.
    void shifted_range(uint32_t* lo, uint32_t* hi) const {
        *lo = n_shifted_ ? shifted_lo_ : 0;
        *hi = n_shifted_ ? shifted_hi_ : 0;
    }

    // Sets every pending shift to 0; call after the device applied them.
    void clear_pending_shifts();

    // Every placement stamps its cells with a new epoch (moved along by
    // apply_moves). release_cell empties `cell` for all its sequences when it
    // still carries `epoch`, i.e. holds the token that placement put there,
    // whatever sequence operations happened since; otherwise it does nothing
    // and returns false. Used to give back cells whose data never reached the
    // device.
    uint64_t cell_epoch(uint32_t cell) const { return epoch_[cell]; }
    bool release_cell(uint32_t cell, uint64_t epoch);

    // Adds `delta` back to the pending shift of `cell` when the cell is in
    // use (undo of a clear_pending_shifts() whose device work never ran).
    // Out-of-range or empty cells are ignored.
    void restore_pending_shift(uint32_t cell, int32_t delta);

    // ---- Device mirror ---------------------------------------------------------
    //
    // A device copy of the positions and sequence sets (the cache's metadata
    // mirror) is kept current by sending only the cells that changed. Every
    // change of a cell's position or sequence set widens one range of changed
    // cells; pending shifts (deltas) are not part of it. A mirror that starts
    // zeroed (no sequence bits: no cell visible to anyone) matches a new
    // table; init() marks every cell as changed for a mirror that held
    // something before.

    // Writes the changed range [*lo, *hi) and resets it; false when empty.
    bool take_changes(uint32_t* lo, uint32_t* hi);

    // Widens the changed range by [lo, hi) (clamped to the capacity): for a
    // mirror update that never reached the device.
    void mark_changed(uint32_t lo, uint32_t hi);

    // ---- Compaction ------------------------------------------------------------

    // Moves cell metadata (position, delta, sequences) for each move in order:
    // src_cell must be in use and dst_cell empty at the time of that move. The
    // per-sequence index is unaffected (positions do not change). Call it only
    // after the device copied the rows. The head moves to used_end() (0 when
    // that is the capacity). Allocates nothing; returns
    // KVRT_ERROR_INVALID_ARGUMENT (and changes nothing) when a move is out of
    // range or does not fit the table (a caller bug), KVRT_SUCCESS otherwise.
    Result apply_moves(const CellMove* moves, size_t n);
    Result apply_moves(const std::vector<CellMove>& moves) {
        return apply_moves(moves.data(), moves.size());
    }

    // ---- Queries ---------------------------------------------------------------

    // Number of cells (0 before init()).
    uint32_t capacity() const { return capacity_; }

    // Sequence ids are in [0, max_seqs()).
    uint32_t max_seqs() const { return max_seqs_; }

    // uint64 words per cell in seq_words(): ceil(max_seqs() / 64).
    uint32_t words_per_cell() const { return words_per_cell_; }

    // Number of cells in use.
    uint32_t used() const { return used_; }

    // Index of the highest used cell + 1 (0 when empty).
    uint32_t used_end() const { return used_end_; }

    // Where the next contiguous search starts.
    uint32_t head() const { return head_; }

    // Changes whenever the table changes (drawn from a process-wide counter, so
    // two tables never share a value unless one is a copy of the other).
    uint64_t revision() const { return revision_; }

    // Cells an attention pass must read: used_end() rounded up to a multiple of
    // `pad` (pad 0 counts as 1), at most capacity(), and 0 when the table is
    // empty.
    uint32_t n_attend(uint32_t pad = default_attend_pad) const;

    // Fraction of the cells below used_end() that are empty:
    // (used_end() - used()) / used_end(), in [0, 1); 0 when empty. It is the
    // share of an attention pass spent on holes, and what compaction removes.
    double fragmentation() const;

    // Raw arrays for upload (see the layout note at the top of this file).
    const int32_t* positions() const { return pos_.data(); }
    const uint64_t* seq_words() const { return words_.data(); }

    // Position of `cell` (-1 when empty). cell < capacity().
    int32_t cell_pos(uint32_t cell) const { return pos_[cell]; }

    // Pending shift of `cell`. cell < capacity().
    int32_t cell_delta(uint32_t cell) const { return delta_[cell]; }

    // True when `cell` is empty. cell < capacity().
    bool cell_is_empty(uint32_t cell) const { return pos_[cell] < 0; }

    // True when sequence `seq` uses `cell`; false for an out-of-range cell or seq.
    bool cell_has_seq(uint32_t cell, int32_t seq) const;

    // Recomputes every counter and index from the cells and compares; returns
    // KVRT_ERROR_INTERNAL with a description of the first mismatch, or
    // KVRT_ERROR_OUT_OF_HOST_MEMORY. O(capacity * words_per_cell + index size);
    // meant for tests and for checking restored state.
    Result verify() const;

private:
    const uint64_t* cell_words(uint32_t cell) const { return &words_[size_t(cell) * words_per_cell_]; }
    uint64_t* cell_words(uint32_t cell) { return &words_[size_t(cell) * words_per_cell_]; }
    bool has_seq(uint32_t cell, uint32_t seq) const {
        return (cell_words(cell)[seq >> 6] >> (seq & 63)) & 1u;
    }
    uint32_t cell_seq_count(uint32_t cell) const;

    Result check_seq(const char* op, int32_t seq) const;
    Result reserve_nodes(size_t n);
    void index_add(uint32_t seq, int32_t pos);
    void index_remove(uint32_t seq, int32_t pos);
    void set_delta(uint32_t cell, int32_t delta);
    // Before `seq` takes `cell` (and before its count grows).
    void widen_span(uint32_t seq, uint32_t cell) {
        if (seq_cells_[seq] == 0) {
            span_lo_[seq] = cell;
            span_hi_[seq] = cell + 1;
        } else {
            span_lo_[seq] = std::min(span_lo_[seq], cell);
            span_hi_[seq] = std::max(span_hi_[seq], cell + 1);
        }
    }
    void recompute_spans();
    // restore_seqs: puts one saved sequence in its saved cells.
    void put_back(const SeqRemoval& saved);
    void set_cell_pos(uint32_t cell, int32_t pos);
    void free_cell(uint32_t cell);
    void touch();
    void mark_changed(uint32_t cell) {
        if (changed_lo_ >= changed_hi_) {
            changed_lo_ = cell;
            changed_hi_ = cell + 1;
        } else if (cell < changed_lo_) {
            changed_lo_ = cell;
        } else if (cell >= changed_hi_) {
            changed_hi_ = cell + 1;
        }
    }

    uint32_t capacity_ = 0;
    uint32_t max_seqs_ = 0;
    uint32_t words_per_cell_ = 0;
    std::vector<int32_t> pos_;
    std::vector<int32_t> delta_;
    std::vector<uint64_t> epoch_;        // per cell: the placement that filled it
    uint64_t last_epoch_ = 0;
    std::vector<uint64_t> words_;
    std::vector<SeqIndex> index_;        // per sequence
    std::vector<uint32_t> seq_cells_;    // per sequence: number of cells
    std::vector<uint32_t> span_lo_;      // per sequence: its cells lie in [span_lo_, span_hi_)
    std::vector<uint32_t> span_hi_;      //   (meaningful while seq_cells_ > 0)
    std::vector<uint8_t> scratch_;       // capacity bytes, for apply_moves checks
    IndexNodePool spare_;                // reserved index nodes
    uint32_t used_ = 0;
    uint32_t used_end_ = 0;
    uint32_t head_ = 0;
    uint32_t n_shifted_ = 0;
    // Every cell with a pending shift lies in [shifted_lo_, shifted_hi_);
    // the range only widens until the shifts are cleared.
    uint32_t shifted_lo_ = 0, shifted_hi_ = 0;
    void widen_shifted(uint32_t cell) {
        if (shifted_lo_ >= shifted_hi_) {
            shifted_lo_ = cell;
            shifted_hi_ = cell + 1;
        } else {
            shifted_lo_ = std::min(shifted_lo_, cell);
            shifted_hi_ = std::max(shifted_hi_, cell + 1);
        }
    }
    uint64_t revision_ = 0;
    uint32_t changed_lo_ = 0;            // cells changed since take_changes()
    uint32_t changed_hi_ = 0;
};

// Cells for `n` loaded records, in `out`: the first n cells free in `before`
// (the table as it is), so that rows written there cannot harm it whatever
// happens on the device; when those are too few, the first n free in
// `after` (the table the load plans, which frees what it replaces). Returns
// how many it found (< n: too few either way).
uint32_t pick_load_cells(const CellTable& before, const CellTable& after, uint32_t n, uint32_t* out);
// The undo record of a state load into a table: a whole load changes every
// cell, so its record is a copy of the table; a sequence's load keeps the
// replaced sequence (remove_seq) and the placement it applied, whose sizes
// are the sequence's and the state's. run() puts the table back.
struct LoadUndo {
    std::shared_ptr<CellTable> whole;
    SeqRemoval removed;
    Placement placement;

    void run(CellTable& t) {
        if (whole) {
            std::swap(t, *whole);
            return;
        }
        if (placement.applied()) (void)t.rollback(placement);
        if (removed.seq >= 0) t.restore_seq(removed);
    }
};

// The first n empty cells of `t`, lowest first, to out[]; returns how many
// there are (< n: too few).
uint32_t first_free_cells(const CellTable& t, uint32_t n, uint32_t* out);

}  // namespace kvrt::kv
