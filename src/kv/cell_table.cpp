#include "kv/cell_table.hpp"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <limits>
#include <new>
#include <stdexcept>
#include <type_traits>

#include "core/checked.hpp"

namespace kvrt::kv {

// The index reserve hands nodes between the two container types; this holds for
// libstdc++, libc++ and MSVC (the standard's map/multimap merge relies on it).
static_assert(std::is_same<SeqIndex::node_type, IndexNodePool::node_type>::value,
              "map and multimap node handles must be interchangeable");

namespace {

constexpr int64_t kPosMax = std::numeric_limits<int32_t>::max();
constexpr int64_t kPosMin = std::numeric_limits<int32_t>::min();

// Spare index nodes kept for later operations; beyond this, freed nodes are
// released. Operations reserve what they need anyway, so this only bounds memory.
constexpr size_t kMaxSpareNodes = 1024;

uint64_t next_revision() {
    static std::atomic<uint64_t> counter{0};
    return counter.fetch_add(1, std::memory_order_relaxed) + 1;
}

uint32_t ctz64(uint64_t v) {
#if defined(__GNUC__) || defined(__clang__)
    return static_cast<uint32_t>(__builtin_ctzll(v));
#else
    uint32_t n = 0;
    while ((v & 1u) == 0) {
        v >>= 1;
        ++n;
    }
    return n;
#endif
}

uint32_t popcount64(uint64_t v) {
#if defined(__GNUC__) || defined(__clang__)
    return static_cast<uint32_t>(__builtin_popcountll(v));
#else
    uint32_t n = 0;
    for (; v != 0; v &= v - 1) ++n;
    return n;
#endif
}

// Calls f(seq) for every sequence bit set in a cell's words, in increasing order.
template <class F>
void for_each_seq(const uint64_t* words, uint32_t n_words, F&& f) {
    for (uint32_t i = 0; i < n_words; ++i) {
        for (uint64_t bits = words[i]; bits != 0; bits &= bits - 1) f(i * 64u + ctz64(bits));
    }
}

// A normalized half-open position range [lo, hi).
struct PosRange {
    int64_t lo = 0;
    int64_t hi = 0;
    bool empty() const { return lo >= hi; }
    bool contains(int32_t pos) const { return pos >= lo && pos < hi; }
};

// Applies the llama.cpp conventions (negative bound = unbounded) and rejects a
// reversed range.
Result make_range(const char* op, int32_t p0, int32_t p1, PosRange* out) {
    if (p0 >= 0 && p1 >= 0 && p1 < p0) {
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "%s: reversed position range [%d, %d)", op, p0, p1);
    }
    out->lo = p0 < 0 ? 0 : p0;
    out->hi = p1 < 0 ? kPosMax + 1 : p1;
    return KVRT_SUCCESS;
}

}  // namespace

// ---- Placement -----------------------------------------------------------------

void Placement::reset_batch() {
    cells_.clear();
    pos_.clear();
    seq_begin_.clear();
    seq_ids_.clear();
    contiguous_ = false;
    state_ = State::empty;
}

// ---- Setup ---------------------------------------------------------------------

Result CellTable::init(uint32_t capacity, uint32_t max_seqs) {
    if (capacity == 0) return fail(KVRT_ERROR_INVALID_ARGUMENT, "cell table: capacity is 0");
    if (max_seqs == 0) return fail(KVRT_ERROR_INVALID_ARGUMENT, "cell table: max_seqs is 0");
    if (capacity > static_cast<uint32_t>(kPosMax)) {
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "cell table: capacity %u exceeds INT32_MAX", capacity);
    }
    if (max_seqs > static_cast<uint32_t>(kPosMax)) {
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "cell table: max_seqs %u exceeds INT32_MAX", max_seqs);
    }
    const uint32_t words_per_cell = (max_seqs + 63u) / 64u;
    uint64_t n_words = 0;
    uint64_t n_bytes = 0;
    if (!checked_mul(capacity, words_per_cell, &n_words) || !checked_mul(n_words, sizeof(uint64_t), &n_bytes) ||
        n_words > std::vector<uint64_t>().max_size()) {
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "cell table: %u cells x %u sequences overflows", capacity, max_seqs);
    }
    try {
        std::vector<int32_t> pos(capacity, -1);
        std::vector<int32_t> delta(capacity, 0);
        std::vector<uint64_t> words(static_cast<size_t>(n_words), 0);
        std::vector<SeqIndex> index(max_seqs);
        std::vector<uint32_t> seq_cells(max_seqs, 0);
        std::vector<uint32_t> span_lo(max_seqs, 0), span_hi(max_seqs, 0);
        std::vector<uint8_t> scratch(capacity, 0);
        std::vector<uint64_t> epoch(capacity, 0);
        // Nothing below throws.
        pos_.swap(pos);
        delta_.swap(delta);
        words_.swap(words);
        index_.swap(index);
        seq_cells_.swap(seq_cells);
        span_lo_.swap(span_lo);
        span_hi_.swap(span_hi);
        scratch_.swap(scratch);
        epoch_.swap(epoch);
    } catch (const std::bad_alloc&) {
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "cell table: out of host memory for %u cells", capacity);
    } catch (const std::length_error&) {
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "cell table: %u cells x %u sequences is too large", capacity,
                    max_seqs);
    }
    capacity_ = capacity;
    max_seqs_ = max_seqs;
    words_per_cell_ = words_per_cell;
    spare_.clear();
    used_ = 0;
    used_end_ = 0;
    head_ = 0;
    n_shifted_ = 0;
    shifted_lo_ = shifted_hi_ = 0;
    changed_lo_ = 0;
    changed_hi_ = capacity;  // whatever a mirror held before
    touch();
    return KVRT_SUCCESS;
}

// ---- Internal helpers ----------------------------------------------------------

void CellTable::touch() { revision_ = next_revision(); }

void CellTable::mark_changed(uint32_t lo, uint32_t hi) {
    hi = std::min(hi, capacity_);
    if (lo >= hi) return;
    if (changed_lo_ >= changed_hi_) {
        changed_lo_ = lo;
        changed_hi_ = hi;
    } else {
        changed_lo_ = std::min(changed_lo_, lo);
        changed_hi_ = std::max(changed_hi_, hi);
    }
}

bool CellTable::take_changes(uint32_t* lo, uint32_t* hi) {
    *lo = changed_lo_;
    *hi = changed_hi_;
    changed_lo_ = changed_hi_ = 0;
    return *lo < *hi;
}

uint32_t CellTable::cell_seq_count(uint32_t cell) const {
    const uint64_t* w = cell_words(cell);
    uint32_t n = 0;
    for (uint32_t i = 0; i < words_per_cell_; ++i) n += popcount64(w[i]);
    return n;
}

Result CellTable::check_seq(const char* op, int32_t seq) const {
    if (seq < 0 || static_cast<uint32_t>(seq) >= max_seqs_) {
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "%s: sequence id %d is outside [0, %u)", op, seq, max_seqs_);
    }
    return KVRT_SUCCESS;
}

Result CellTable::reserve_nodes(size_t n) {
    try {
        while (spare_.size() < n) spare_.emplace_hint(spare_.end(), 0, 0u);
    } catch (const std::bad_alloc&) {
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "cell table: out of host memory for the sequence index");
    }
    return KVRT_SUCCESS;
}

void CellTable::index_add(uint32_t seq, int32_t pos) {
    SeqIndex& idx = index_[seq];
    auto it = idx.find(pos);
    if (it != idx.end()) {
        ++it->second;
    } else if (!spare_.empty()) {
        auto node = spare_.extract(spare_.begin());
        node.key() = pos;
        node.mapped() = 1;
        idx.insert(std::move(node));
    } else {
        // Unreachable when the caller reserved enough nodes; allocate rather
        // than corrupt the index.
        assert(false && "index node reserve exhausted");
        idx.emplace(pos, 1u);
    }
    ++seq_cells_[seq];
}

void CellTable::index_remove(uint32_t seq, int32_t pos) {
    SeqIndex& idx = index_[seq];
    auto it = idx.find(pos);
    assert(it != idx.end());
    if (it == idx.end()) return;
    if (--it->second == 0) {
        auto node = idx.extract(it);
        if (spare_.size() < kMaxSpareNodes) spare_.insert(spare_.end(), std::move(node));
    }
    --seq_cells_[seq];
}

bool CellTable::release_cell(uint32_t cell, uint64_t epoch) {
    if (cell >= capacity_ || pos_[cell] < 0 || epoch_[cell] != epoch) return false;
    free_cell(cell);
    touch();
    return true;
}

void CellTable::restore_pending_shift(uint32_t cell, int32_t delta) {
    if (cell >= capacity_ || pos_[cell] < 0 || delta == 0) return;
    set_delta(cell, int32_t(int64_t(delta_[cell]) + delta));
    touch();
}

void CellTable::set_delta(uint32_t cell, int32_t delta) {
    const bool was = delta_[cell] != 0;
    const bool now = delta != 0;
    if (was != now) n_shifted_ = now ? n_shifted_ + 1 : n_shifted_ - 1;
    if (now) widen_shifted(cell);
    delta_[cell] = delta;
}

void CellTable::set_cell_pos(uint32_t cell, int32_t pos) {
    const int32_t old = pos_[cell];
    for_each_seq(cell_words(cell), words_per_cell_, [&](uint32_t s) {
        index_remove(s, old);
        index_add(s, pos);
    });
    pos_[cell] = pos;
    mark_changed(cell);
}

void CellTable::free_cell(uint32_t cell) {
    const int32_t old = pos_[cell];
    uint64_t* w = cell_words(cell);
    for_each_seq(w, words_per_cell_, [&](uint32_t s) { index_remove(s, old); });
    std::fill(w, w + words_per_cell_, 0);
    set_delta(cell, 0);
    pos_[cell] = -1;
    mark_changed(cell);
    --used_;
    if (cell + 1 == used_end_) {
        while (used_end_ > 0 && pos_[used_end_ - 1] < 0) --used_end_;
    }
    if (cell < head_) head_ = cell;
}

// ---- Placement -----------------------------------------------------------------

Result CellTable::plan(const Token* tokens, uint32_t n, Placement* out, const uint32_t* at, bool repeats) const {
    if (out == nullptr) return fail(KVRT_ERROR_INVALID_ARGUMENT, "plan: out is NULL");
    out->reset_batch();
    if (capacity_ == 0) return fail(KVRT_ERROR_INVALID_STATE, "plan: the cell table is not initialized");
    if (n > 0 && tokens == nullptr) return fail(KVRT_ERROR_INVALID_ARGUMENT, "plan: tokens is NULL");

    size_t pairs = 0;
    for (uint32_t i = 0; i < n; ++i) {
        const Token& t = tokens[i];
        if (t.pos < 0) return fail(KVRT_ERROR_INVALID_ARGUMENT, "plan: token %u has negative position %d", i, t.pos);
        if (t.n_seq == 0) return fail(KVRT_ERROR_INVALID_ARGUMENT, "plan: token %u has no sequence id", i);
        if (t.seq_ids == nullptr) return fail(KVRT_ERROR_INVALID_ARGUMENT, "plan: token %u has NULL seq_ids", i);
        if (t.n_seq > max_seqs_) {
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "plan: token %u lists %u sequence ids but max_seqs is %u", i,
                        t.n_seq, max_seqs_);
        }
        for (uint32_t j = 0; j < t.n_seq; ++j) {
            const int32_t s = t.seq_ids[j];
            if (s < 0 || static_cast<uint32_t>(s) >= max_seqs_) {
                return fail(KVRT_ERROR_INVALID_ARGUMENT, "plan: token %u has sequence id %d outside [0, %u)", i, s,
                            max_seqs_);
            }
            if (index_[size_t(s)].count(t.pos) != 0) {
                return fail(KVRT_ERROR_INVALID_ARGUMENT, "plan: sequence %d already has position %d (token %u)", s,
                            t.pos, i);
            }
        }
        pairs += t.n_seq;
    }

    // Capacity before the duplicate check, which allocates in proportion to n.
    const uint32_t n_free = capacity_ - used_;
    if (n > n_free) {
        return fail(KVRT_ERROR_CACHE_FULL, "plan: the batch needs %u cells but only %u of %u are empty", n, n_free,
                    capacity_);
    }

    try {
        // A (sequence, position) pair may appear once in the batch (unless
        // repeats are allowed); this also catches an id repeated inside one
        // token, which is refused either way.
        std::vector<uint64_t>& keys = out->scratch_;
        for (uint32_t i = 0; repeats && i < n; ++i) {
            keys.assign(tokens[i].seq_ids, tokens[i].seq_ids + tokens[i].n_seq);
            std::sort(keys.begin(), keys.end());
            if (std::adjacent_find(keys.begin(), keys.end()) != keys.end())
                return fail(KVRT_ERROR_INVALID_ARGUMENT, "plan: token %u lists a sequence id twice", i);
        }
        keys.clear();
        keys.reserve(pairs);
        for (uint32_t i = 0; !repeats && i < n; ++i) {
            for (uint32_t j = 0; j < tokens[i].n_seq; ++j) {
                keys.push_back(uint64_t(uint32_t(tokens[i].seq_ids[j])) << 32 | uint32_t(tokens[i].pos));
            }
        }
        std::sort(keys.begin(), keys.end());
        const auto dup = std::adjacent_find(keys.begin(), keys.end());
        if (dup != keys.end()) {
            return fail(KVRT_ERROR_INVALID_ARGUMENT,
                        "plan: sequence %d gets position %d twice in the batch (a repeated token, or a "
                        "sequence id repeated inside one token)",
                        int32_t(*dup >> 32), int32_t(*dup & 0xffffffffu));
        }

        if (at) {
            // Cells chosen by the caller (the static layout's rows): each in
            // range, empty, and given once.
            out->cells_.assign(at, at + n);
            std::vector<uint32_t> sorted(at, at + n);
            std::sort(sorted.begin(), sorted.end());
            for (uint32_t i = 0; i < n; ++i) {
                if (sorted[i] >= capacity_ || pos_[sorted[i]] >= 0 || (i && sorted[i] == sorted[i - 1])) {
                    out->reset_batch();
                    return fail(KVRT_ERROR_INVALID_ARGUMENT, "plan: cell %u is out of range, in use or repeated",
                                sorted[i]);
                }
            }
            out->contiguous_ = true;
            for (uint32_t i = 1; i < n && out->contiguous_; ++i) out->contiguous_ = at[i] == at[0] + i;
        }
        // Contiguous first fit from the head. Like llama.cpp, restart from cell 0
        // when the head ran far past the number of used cells (holes below it).
        uint32_t start = head_;
        if (start >= capacity_ || uint64_t(start) > uint64_t(used_) + 2ull * n) start = 0;
        auto find_run = [&](uint32_t from, uint32_t to) -> int64_t {
            uint32_t run = 0;
            for (uint32_t c = from; c < to; ++c) {
                if (pos_[c] >= 0) {
                    run = 0;
                } else if (++run == n) {
                    return int64_t(c) + 1 - n;
                }
            }
            return -1;
        };
        int64_t first = n == 0 || at ? -1 : find_run(start, capacity_);
        if (!at && first < 0 && n > 0 && start > 0) {
            // Runs that begin below the head (they may extend past it).
            first = find_run(0, uint32_t(std::min<uint64_t>(capacity_, uint64_t(start) + n - 1)));
        }
        if (!at) out->cells_.resize(n);
        if (at) {
            // Chosen above.
        } else if (first >= 0) {
            for (uint32_t i = 0; i < n; ++i) out->cells_[i] = uint32_t(first) + i;
            out->contiguous_ = true;
        } else {
            // Scattered: the lowest empty cells, to keep n_attend() small.
            uint32_t k = 0;
            for (uint32_t c = 0; c < capacity_ && k < n; ++c) {
                if (pos_[c] < 0) out->cells_[k++] = c;
            }
            assert(k == n);
            out->contiguous_ = n <= 1;
        }

        out->pos_.resize(n);
        out->seq_begin_.resize(size_t(n) + 1);
        out->seq_ids_.resize(pairs);
        size_t k = 0;
        for (uint32_t i = 0; i < n; ++i) {
            out->pos_[i] = tokens[i].pos;
            out->seq_begin_[i] = k;
            for (uint32_t j = 0; j < tokens[i].n_seq; ++j) out->seq_ids_[k++] = tokens[i].seq_ids[j];
        }
        out->seq_begin_[n] = k;
        while (out->nodes_.size() < pairs) out->nodes_.emplace_hint(out->nodes_.end(), 0, 0u);
    } catch (const std::bad_alloc&) {
        out->reset_batch();
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "plan: out of host memory for a batch of %u tokens", n);
    }
    out->state_ = Placement::State::planned;
    out->revision_ = revision_;
    return KVRT_SUCCESS;
}

Result CellTable::apply(Placement& p) {
    if (p.state_ != Placement::State::planned || p.revision_ != revision_) {
        return fail(KVRT_ERROR_INVALID_STATE,
                    "apply: the placement was not planned on the current state of this table");
    }
    p.prev_head_ = head_;
    p.prev_used_end_ = used_end_;
    const uint32_t n = p.size();
    for (uint32_t i = 0; i < n; ++i) {
        const uint32_t c = p.cells_[i];
        const int32_t pos = p.pos_[i];
        uint64_t* w = cell_words(c);
        for (size_t k = p.seq_begin_[i]; k < p.seq_begin_[i + 1]; ++k) {
            const uint32_t s = uint32_t(p.seq_ids_[k]);
            w[s >> 6] |= uint64_t(1) << (s & 63);
            // The pair is new to the table (checked by plan): the first token
            // with it links a node in, its siblings in the batch count on it.
            SeqIndex& idx = index_[s];
            const auto at = idx.lower_bound(pos);
            if (at != idx.end() && at->first == pos) {
                ++at->second;
            } else {
                auto node = p.nodes_.extract(p.nodes_.begin());
                node.key() = pos;
                node.mapped() = 1;
                idx.insert(at, std::move(node));
            }
            widen_span(s, c);
            ++seq_cells_[s];
        }
        pos_[c] = pos;
        epoch_[c] = ++last_epoch_;
        mark_changed(c);
        used_end_ = std::max(used_end_, c + 1);
    }
    used_ += n;
    if (n > 0) head_ = (p.cells_[n - 1] + 1) % capacity_;
    touch();
    p.revision_ = revision_;
    p.state_ = Placement::State::applied;
    return KVRT_SUCCESS;
}

Result CellTable::rollback(Placement& p) {
    if (p.state_ != Placement::State::applied || p.revision_ != revision_) {
        return fail(KVRT_ERROR_INVALID_STATE,
                    "rollback: the placement is not applied or the table changed since it was applied");
    }
    const uint32_t n = p.size();
    for (uint32_t i = 0; i < n; ++i) {
        const uint32_t c = p.cells_[i];
        const int32_t pos = p.pos_[i];
        uint64_t* w = cell_words(c);
        for (size_t k = p.seq_begin_[i]; k < p.seq_begin_[i + 1]; ++k) {
            const uint32_t s = uint32_t(p.seq_ids_[k]);
            // The pair was new to the table: its count comes from this batch
            // alone. The last token with it gives the node back to the
            // placement for its next plan().
            SeqIndex& idx = index_[s];
            auto it = idx.find(pos);
            assert(it != idx.end() && it->second >= 1);
            if (--it->second == 0) p.nodes_.insert(p.nodes_.end(), idx.extract(it));
            --seq_cells_[s];
        }
        std::fill(w, w + words_per_cell_, 0);
        pos_[c] = -1;  // delta is still 0: nothing changed the cell since apply()
        mark_changed(c);
    }
    used_ -= n;
    used_end_ = p.prev_used_end_;
    head_ = p.prev_head_;
    touch();
    p.state_ = Placement::State::rolled_back;
    return KVRT_SUCCESS;
}

// ---- Sequence operations -------------------------------------------------------

Result CellTable::seq_rm(int32_t seq, int32_t p0, int32_t p1) {
    PosRange r;
    KVRT_TRY(make_range("seq_rm", p0, p1, &r));
    if (seq >= 0) {
        KVRT_TRY(check_seq("seq_rm", seq));
        if (seq_cells_[size_t(seq)] == 0) return KVRT_SUCCESS;
    }
    if (r.empty()) return KVRT_SUCCESS;
    bool changed = false;
    const uint32_t end = used_end_;
    for (uint32_t c = 0; c < end; ++c) {
        const int32_t pos = pos_[c];
        if (pos < 0 || !r.contains(pos)) continue;
        if (seq < 0) {
            free_cell(c);
            changed = true;
        } else if (has_seq(c, uint32_t(seq))) {
            cell_words(c)[seq >> 6] &= ~(uint64_t(1) << (seq & 63));
            mark_changed(c);
            index_remove(uint32_t(seq), pos);
            if (cell_seq_count(c) == 0) free_cell(c);
            changed = true;
        }
    }
    if (changed) {
        recompute_spans();  // as costly as the walk above
        touch();
    }
    return KVRT_SUCCESS;
}

Result CellTable::seq_cp(int32_t src, int32_t dst, int32_t p0, int32_t p1) {
    PosRange r;
    KVRT_TRY(make_range("seq_cp", p0, p1, &r));
    KVRT_TRY(check_seq("seq_cp", src));
    KVRT_TRY(check_seq("seq_cp", dst));
    if (src == dst || r.empty() || seq_cells_[size_t(src)] == 0) return KVRT_SUCCESS;
    const uint32_t end = used_end_;
    size_t need = 0;
    for (uint32_t c = 0; c < end; ++c) {
        if (pos_[c] >= 0 && r.contains(pos_[c]) && has_seq(c, uint32_t(src)) && !has_seq(c, uint32_t(dst))) ++need;
    }
    if (need == 0) return KVRT_SUCCESS;
    KVRT_TRY(reserve_nodes(need));
    for (uint32_t c = 0; c < end; ++c) {
        if (pos_[c] >= 0 && r.contains(pos_[c]) && has_seq(c, uint32_t(src)) && !has_seq(c, uint32_t(dst))) {
            cell_words(c)[dst >> 6] |= uint64_t(1) << (dst & 63);
            mark_changed(c);
            widen_span(uint32_t(dst), c);
            index_add(uint32_t(dst), pos_[c]);
        }
    }
    touch();
    return KVRT_SUCCESS;
}

Result CellTable::seq_keep(int32_t seq) {
    KVRT_TRY(check_seq("seq_keep", seq));
    bool changed = false;
    const uint32_t end = used_end_;
    const uint32_t word = uint32_t(seq) >> 6;
    const uint64_t bit = uint64_t(1) << (seq & 63);
    for (uint32_t c = 0; c < end; ++c) {
        const int32_t pos = pos_[c];
        if (pos < 0) continue;
        if (!has_seq(c, uint32_t(seq))) {
            free_cell(c);
            changed = true;
        } else if (cell_seq_count(c) > 1) {
            uint64_t* w = cell_words(c);
            for_each_seq(w, words_per_cell_, [&](uint32_t s) {
                if (s != uint32_t(seq)) index_remove(s, pos);
            });
            std::fill(w, w + words_per_cell_, 0);
            w[word] = bit;
            mark_changed(c);
            changed = true;
        }
    }
    if (changed) {
        recompute_spans();
        touch();
    }
    return KVRT_SUCCESS;
}

Result CellTable::remove_cells(const uint32_t* cells, const int32_t* positions, const int32_t* seqs, uint32_t n) {
    if (n == 0) return KVRT_SUCCESS;
    if (!cells || !positions || !seqs) return fail(KVRT_ERROR_INVALID_ARGUMENT, "remove_cells: NULL array");
    for (uint32_t i = 0; i < n; ++i) {
        const uint32_t c = cells[i];
        if (c >= capacity_ || pos_[c] < 0)
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "cell %u (token %u) is out of range or empty", c, i);
        KVRT_TRY(check_seq("remove_cells", seqs[i]));
        if (pos_[c] != positions[i] || !has_seq(c, uint32_t(seqs[i])))
            return fail(KVRT_ERROR_INVALID_ARGUMENT,
                        "cell %u (token %u) no longer holds position %d of sequence %d (it holds position %d)", c, i,
                        positions[i], seqs[i], pos_[c]);
    }
    try {
        std::vector<uint32_t> sorted(cells, cells + n);
        std::sort(sorted.begin(), sorted.end());
        const auto dup = std::adjacent_find(sorted.begin(), sorted.end());
        if (dup != sorted.end()) return fail(KVRT_ERROR_INVALID_ARGUMENT, "cell %u is given twice", *dup);
    } catch (const std::bad_alloc&) {
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "remove_cells: out of host memory for %u cells", n);
    }
    for (uint32_t i = 0; i < n; ++i) {
        const uint32_t c = cells[i];
        const uint32_t s = uint32_t(seqs[i]);
        cell_words(c)[s >> 6] &= ~(uint64_t(1) << (s & 63));
        mark_changed(c);
        index_remove(s, pos_[c]);
        if (cell_seq_count(c) == 0) free_cell(c);
    }
    touch();
    return KVRT_SUCCESS;
}

Result CellTable::seq_add(int32_t seq, int32_t p0, int32_t p1, int32_t delta) {
    PosRange r;
    KVRT_TRY(make_range("seq_add", p0, p1, &r));
    KVRT_TRY(check_seq("seq_add", seq));
    if (delta == 0 || r.empty() || seq_cells_[size_t(seq)] == 0) return KVRT_SUCCESS;
    const uint32_t end = used_end_;
    // Pass 1: check every new position and delta, count the index nodes needed.
    size_t need = 0;
    bool any = false;
    for (uint32_t c = 0; c < end; ++c) {
        const int32_t pos = pos_[c];
        if (pos < 0 || !r.contains(pos) || !has_seq(c, uint32_t(seq))) continue;
        const int64_t np = int64_t(pos) + delta;
        const int64_t nd = int64_t(delta_[c]) + delta;
        if (np > kPosMax) {
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "seq_add: position %d + %d of cell %u exceeds INT32_MAX", pos,
                        delta, c);
        }
        if (np >= 0 && (nd > kPosMax || nd < kPosMin)) {
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "seq_add: pending shift of cell %u overflows", c);
        }
        if (np >= 0) need += cell_seq_count(c);
        any = true;
    }
    if (!any) return KVRT_SUCCESS;
    KVRT_TRY(reserve_nodes(need));
    // Pass 2: move. The position belongs to the cell, so a cell shared with
    // other sequences moves for all of them (llama.cpp does the same); a cell
    // pushed below position 0 is emptied for all of them.
    for (uint32_t c = 0; c < end; ++c) {
        const int32_t pos = pos_[c];
        if (pos < 0 || !r.contains(pos) || !has_seq(c, uint32_t(seq))) continue;
        const int64_t np = int64_t(pos) + delta;
        if (np < 0) {
            free_cell(c);
        } else {
            set_cell_pos(c, int32_t(np));
            set_delta(c, int32_t(int64_t(delta_[c]) + delta));
        }
    }
    touch();
    return KVRT_SUCCESS;
}

Result CellTable::seq_div(int32_t seq, int32_t p0, int32_t p1, int32_t d) {
    PosRange r;
    KVRT_TRY(make_range("seq_div", p0, p1, &r));
    KVRT_TRY(check_seq("seq_div", seq));
    if (d <= 0) return fail(KVRT_ERROR_INVALID_ARGUMENT, "seq_div: divisor %d is not positive", d);
    if (d == 1 || r.empty() || seq_cells_[size_t(seq)] == 0) return KVRT_SUCCESS;
    const uint32_t end = used_end_;
    size_t need = 0;
    bool any = false;
    for (uint32_t c = 0; c < end; ++c) {
        const int32_t pos = pos_[c];
        if (pos < 0 || !r.contains(pos) || !has_seq(c, uint32_t(seq)) || pos / d == pos) continue;
        const int64_t nd = int64_t(delta_[c]) + (pos / d - pos);
        if (nd < kPosMin) return fail(KVRT_ERROR_INVALID_ARGUMENT, "seq_div: pending shift of cell %u overflows", c);
        need += cell_seq_count(c);
        any = true;
    }
    if (!any) return KVRT_SUCCESS;
    KVRT_TRY(reserve_nodes(need));
    for (uint32_t c = 0; c < end; ++c) {
        const int32_t pos = pos_[c];
        if (pos < 0 || !r.contains(pos) || !has_seq(c, uint32_t(seq)) || pos / d == pos) continue;
        const int32_t np = pos / d;
        set_cell_pos(c, np);  // shared cells move for all their sequences, as in seq_add
        set_delta(c, int32_t(int64_t(delta_[c]) + (np - pos)));
    }
    touch();
    return KVRT_SUCCESS;
}

int32_t CellTable::seq_pos_min(int32_t seq) const {
    if (seq < 0 || uint32_t(seq) >= max_seqs_ || index_[size_t(seq)].empty()) return -1;
    return index_[size_t(seq)].begin()->first;
}

int32_t CellTable::seq_pos_max(int32_t seq) const {
    if (seq < 0 || uint32_t(seq) >= max_seqs_ || index_[size_t(seq)].empty()) return -1;
    return index_[size_t(seq)].rbegin()->first;
}

Result CellTable::mirror_seq(int32_t seq, const uint32_t* drop, size_t n_drop, const CellSet* set, size_t n_set) {
    KVRT_TRY(check_seq("mirror_seq", seq));
    const uint32_t sq = uint32_t(seq);
    if ((n_drop && !drop) || (n_set && !set)) return fail(KVRT_ERROR_INTERNAL, "mirror_seq: NULL list");
    // Pass 1: check against the state after the drops (scratch_ marks the
    // dropped cells; it is all zero between calls).
    Result r = KVRT_SUCCESS;
    size_t marked = 0;
    for (; marked < n_drop; ++marked) {
        const uint32_t c = drop[marked];
        if (c >= capacity_ || pos_[c] < 0 || !has_seq(c, sq) || scratch_[c]) {
            r = fail(KVRT_ERROR_INTERNAL, "mirror_seq: cell %u cannot drop sequence %d", c, seq);
            break;
        }
        scratch_[c] = 1;
    }
    for (size_t i = 0; r == KVRT_SUCCESS && i < n_set; ++i) {
        const CellSet& e = set[i];
        const uint32_t c = e.cell;
        if (c >= capacity_ || e.pos < 0 || scratch_[c] == 2) {
            r = fail(KVRT_ERROR_INTERNAL, "mirror_seq: cell %u (position %d) cannot be set", c, e.pos);
            break;
        }
        const bool dropped = scratch_[c] == 1;
        const uint32_t users = pos_[c] < 0 ? 0u : cell_seq_count(c);
        const bool has = pos_[c] >= 0 && has_seq(c, sq) && !dropped;
        const bool empty_after = pos_[c] < 0 || (dropped && users == 1);
        if ((has && users != 1) || (!has && !empty_after && pos_[c] != e.pos)) {
            r = fail(KVRT_ERROR_INTERNAL, "mirror_seq: cell %u (position %d) cannot take position %d of sequence %d",
                     c, pos_[c], e.pos, seq);
            break;
        }
        scratch_[c] = 2;
    }
    for (size_t i = 0; i < marked; ++i) scratch_[drop[i]] = 0;
    for (size_t i = 0; i < n_set && set[i].cell < capacity_; ++i) scratch_[set[i].cell] = 0;
    KVRT_TRY(r);
    // Pass 2: apply.
    for (size_t i = 0; i < n_drop; ++i) {
        const uint32_t c = drop[i];
        cell_words(c)[sq >> 6] &= ~(uint64_t(1) << (sq & 63));
        mark_changed(c);
        index_remove(sq, pos_[c]);
        if (cell_seq_count(c) == 0) free_cell(c);
    }
    for (size_t i = 0; i < n_set; ++i) {
        const CellSet& e = set[i];
        const uint32_t c = e.cell;
        if (pos_[c] >= 0 && has_seq(c, sq)) {
            if (pos_[c] != e.pos) set_cell_pos(c, e.pos);
            set_delta(c, e.delta);
            continue;
        }
        if (pos_[c] < 0) {
            pos_[c] = e.pos;
            set_delta(c, e.delta);
            epoch_[c] = ++last_epoch_;
            ++used_;
            used_end_ = std::max(used_end_, c + 1);
        }
        cell_words(c)[sq >> 6] |= uint64_t(1) << (sq & 63);
        widen_span(sq, c);
        index_add(sq, e.pos);
        mark_changed(c);
    }
    touch();
    return KVRT_SUCCESS;
}

int32_t CellTable::seq_pos_from(int32_t seq, int32_t p) const {
    if (seq < 0 || uint32_t(seq) >= max_seqs_) return -1;
    const SeqIndex& idx = index_[size_t(seq)];
    const auto it = idx.lower_bound(p);
    return it == idx.end() ? -1 : it->first;
}

uint32_t CellTable::seq_count(int32_t seq, int32_t p0, int32_t p1) const {
    if (seq < 0 || uint32_t(seq) >= max_seqs_) return 0;
    const SeqIndex& idx = index_[size_t(seq)];
    uint32_t n = 0;
    for (auto it = idx.lower_bound(p0 < 0 ? 0 : p0); it != idx.end() && (p1 < 0 || it->first < p1); ++it)
        n += it->second;
    return n;
}

void CellTable::seq_cell_span(int32_t seq, uint32_t* lo, uint32_t* hi) const {
    *lo = *hi = 0;
    if (seq < 0 || uint32_t(seq) >= max_seqs_ || seq_cells_[size_t(seq)] == 0) return;
    *lo = span_lo_[size_t(seq)];
    *hi = span_hi_[size_t(seq)];
}

uint32_t CellTable::seq_cell_count(int32_t seq) const {
    if (seq < 0 || uint32_t(seq) >= max_seqs_) return 0;
    return seq_cells_[size_t(seq)];
}

Result CellTable::cells_of_seq(int32_t seq, std::vector<uint32_t>* out) const {
    if (out == nullptr) return fail(KVRT_ERROR_INVALID_ARGUMENT, "cells_of_seq: out is NULL");
    KVRT_TRY(check_seq("cells_of_seq", seq));
    try {
        out->clear();
        out->reserve(seq_cells_[size_t(seq)]);
        for (uint32_t c = 0; c < used_end_ && out->size() < seq_cells_[size_t(seq)]; ++c) {
            if (has_seq(c, uint32_t(seq))) out->push_back(c);
        }
    } catch (const std::bad_alloc&) {
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "cells_of_seq: out of host memory");
    }
    return KVRT_SUCCESS;
}

Result CellTable::save_seq(int32_t seq, SeqRemoval* out) {
    KVRT_TRY(check_seq("save_seq", seq));
    const uint32_t n = seq_cells_[size_t(seq)];
    try {
        out->seq = seq;
        out->cells.clear();
        out->epochs.clear();
        out->cells.reserve(n);
        out->epochs.reserve(n);
    } catch (const std::bad_alloc&) {
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "save_seq: out of host memory for %u cells", n);
    }
    KVRT_TRY(reserve_nodes(n));
    for (uint32_t c = 0; c < used_end_ && out->cells.size() < n; ++c) {
        if (pos_[c] < 0 || !has_seq(c, uint32_t(seq))) continue;
        out->cells.push_back({c, pos_[c], delta_[c]});
        out->epochs.push_back(epoch_[c]);
    }
    out->span_lo = span_lo_[size_t(seq)];
    out->span_hi = span_hi_[size_t(seq)];
    out->head = head_;
    return KVRT_SUCCESS;
}

Result CellTable::remove_seq(int32_t seq, SeqRemoval* out) {
    KVRT_TRY(save_seq(seq, out));
    return seq_rm(seq, -1, -1);
}

void CellTable::restore_seqs(const SeqRemoval* saved, size_t n) {
    if (n == 0) return;
    // Out of the cells they hold now; the other sequences' runs stay.
    for (size_t k = 0; k < n; ++k) {
        const uint32_t sq = uint32_t(saved[k].seq);
        for (uint32_t c = 0; c < used_end_ && seq_cells_[sq] > 0; ++c) {
            if (pos_[c] < 0 || !has_seq(c, sq)) continue;
            cell_words(c)[sq >> 6] &= ~(uint64_t(1) << (sq & 63));
            mark_changed(c);
            index_remove(sq, pos_[c]);
            if (cell_seq_count(c) == 0) free_cell(c);
        }
    }
    for (size_t k = 0; k < n; ++k) put_back(saved[k]);
    head_ = saved[0].head;
    touch();
}

void CellTable::put_back(const SeqRemoval& saved) {
    const uint32_t sq = uint32_t(saved.seq);
    for (size_t i = 0; i < saved.cells.size(); ++i) {
        const CellSet& e = saved.cells[i];
        const uint32_t c = e.cell;
        if (pos_[c] < 0) {
            pos_[c] = e.pos;
            set_delta(c, e.delta);
            epoch_[c] = saved.epochs[i];
            ++used_;
            used_end_ = std::max(used_end_, c + 1);
        }
        cell_words(c)[sq >> 6] |= uint64_t(1) << (sq & 63);
        index_add(sq, e.pos);
        mark_changed(c);
    }
    span_lo_[sq] = saved.span_lo;
    span_hi_[sq] = saved.span_hi;
}

void CellTable::clear() {
    mark_changed(0, used_end_);
    std::fill(pos_.begin(), pos_.end(), -1);
    std::fill(delta_.begin(), delta_.end(), 0);
    std::fill(words_.begin(), words_.end(), 0);
    for (SeqIndex& idx : index_) idx.clear();
    std::fill(seq_cells_.begin(), seq_cells_.end(), 0);
    used_ = 0;
    used_end_ = 0;
    head_ = 0;
    n_shifted_ = 0;
    shifted_lo_ = shifted_hi_ = 0;
    touch();
}

void CellTable::clear_pending_shifts() {
    if (n_shifted_ == 0) return;
    std::fill(delta_.begin() + shifted_lo_, delta_.begin() + shifted_hi_, 0);
    n_shifted_ = 0;
    shifted_lo_ = shifted_hi_ = 0;
    touch();
}

// ---- Compaction ----------------------------------------------------------------

Result CellTable::apply_moves(const CellMove* moves, size_t n) {
    if (n == 0) return KVRT_SUCCESS;
    if (moves == nullptr) return fail(KVRT_ERROR_INVALID_ARGUMENT, "apply_moves: moves is NULL");
    // Check the whole list against a simulated occupancy before changing anything.
    for (uint32_t c = 0; c < capacity_; ++c) scratch_[c] = pos_[c] >= 0;
    for (size_t i = 0; i < n; ++i) {
        const CellMove m = moves[i];
        if (m.src_cell >= capacity_ || m.dst_cell >= capacity_ || !scratch_[m.src_cell] || scratch_[m.dst_cell]) {
            return fail(KVRT_ERROR_INVALID_ARGUMENT,
                        "apply_moves: move %zu (cell %u -> %u) needs a used source and an empty destination "
                        "inside [0, %u)",
                        i, m.src_cell, m.dst_cell, capacity_);
        }
        scratch_[m.src_cell] = 0;
        scratch_[m.dst_cell] = 1;
    }
    for (size_t i = 0; i < n; ++i) {
        const uint32_t src = moves[i].src_cell;
        const uint32_t dst = moves[i].dst_cell;
        pos_[dst] = pos_[src];
        delta_[dst] = delta_[src];
        if (delta_[dst] != 0) widen_shifted(dst);
        epoch_[dst] = epoch_[src];
        uint64_t* ws = cell_words(src);
        std::copy(ws, ws + words_per_cell_, cell_words(dst));
        std::fill(ws, ws + words_per_cell_, 0);
        pos_[src] = -1;
        delta_[src] = 0;
        mark_changed(src);
        mark_changed(dst);
        used_end_ = std::max(used_end_, dst + 1);
    }
    while (used_end_ > 0 && pos_[used_end_ - 1] < 0) --used_end_;
    head_ = used_end_ == capacity_ ? 0 : used_end_;
    recompute_spans();
    touch();
    return KVRT_SUCCESS;
}

void CellTable::recompute_spans() {
    for (uint32_t s = 0; s < max_seqs_; ++s) span_lo_[s] = span_hi_[s] = 0;
    for (uint32_t c = 0; c < used_end_; ++c) {
        if (pos_[c] < 0) continue;
        for_each_seq(cell_words(c), words_per_cell_, [&](uint32_t s) {
            if (span_hi_[s] == 0) span_lo_[s] = c;
            span_hi_[s] = c + 1;
        });
    }
}

// ---- Queries -------------------------------------------------------------------

uint32_t CellTable::n_attend(uint32_t pad) const {
    if (used_end_ == 0) return 0;
    const uint64_t p = pad == 0 ? 1 : pad;
    const uint64_t n = (uint64_t(used_end_) + p - 1) / p * p;
    return uint32_t(std::min<uint64_t>(n, capacity_));
}

double CellTable::fragmentation() const {
    if (used_end_ == 0) return 0.0;
    return double(used_end_ - used_) / double(used_end_);
}

bool CellTable::cell_has_seq(uint32_t cell, int32_t seq) const {
    if (cell >= capacity_ || seq < 0 || uint32_t(seq) >= max_seqs_) return false;
    return has_seq(cell, uint32_t(seq));
}

Result CellTable::verify() const {
    try {
        std::vector<SeqIndex> index(max_seqs_);
        std::vector<uint32_t> counts(max_seqs_, 0);
        uint32_t used = 0;
        uint32_t used_end = 0;
        uint32_t shifted = 0;
        const uint64_t tail_mask =
            (max_seqs_ % 64) == 0 ? ~uint64_t(0) : (uint64_t(1) << (max_seqs_ % 64)) - 1;
        for (uint32_t c = 0; c < capacity_; ++c) {
            const uint64_t* w = cell_words(c);
            const uint32_t n_seq = cell_seq_count(c);
            if (pos_[c] < 0) {
                if (pos_[c] != -1 || n_seq != 0 || delta_[c] != 0) {
                    return fail(KVRT_ERROR_INTERNAL, "cell table: empty cell %u has pos %d, %u sequences, delta %d",
                                c, pos_[c], n_seq, delta_[c]);
                }
                continue;
            }
            if (n_seq == 0) return fail(KVRT_ERROR_INTERNAL, "cell table: cell %u has a position but no sequence", c);
            if ((w[words_per_cell_ - 1] & ~tail_mask) != 0) {
                return fail(KVRT_ERROR_INTERNAL, "cell table: cell %u has a sequence id >= %u", c, max_seqs_);
            }
            ++used;
            used_end = c + 1;
            if (delta_[c] != 0) {
                ++shifted;
                if (c < shifted_lo_ || c >= shifted_hi_)
                    return fail(KVRT_ERROR_INTERNAL, "cell table: cell %u has a pending shift outside [%u, %u)", c,
                                shifted_lo_, shifted_hi_);
            }
            uint32_t outside = max_seqs_;
            for_each_seq(w, words_per_cell_, [&](uint32_t s) {
                ++index[s][pos_[c]];
                ++counts[s];
                if (c < span_lo_[s] || c >= span_hi_[s]) outside = s;
            });
            if (outside != max_seqs_) {
                return fail(KVRT_ERROR_INTERNAL, "cell table: cell %u of sequence %u lies outside its span [%u, %u)", c,
                            outside, span_lo_[outside], span_hi_[outside]);
            }
        }
        if (used != used_ || used_end != used_end_ || shifted != n_shifted_) {
            return fail(KVRT_ERROR_INTERNAL,
                        "cell table: counters (used %u, end %u, shifted %u) disagree with the cells (%u, %u, %u)",
                        used_, used_end_, n_shifted_, used, used_end, shifted);
        }
        if (capacity_ != 0 && head_ >= capacity_) {
            return fail(KVRT_ERROR_INTERNAL, "cell table: head %u outside [0, %u)", head_, capacity_);
        }
        for (uint32_t s = 0; s < max_seqs_; ++s) {
            if (index[s] != index_[s] || counts[s] != seq_cells_[s]) {
                return fail(KVRT_ERROR_INTERNAL, "cell table: the index of sequence %u disagrees with the cells", s);
            }
        }
    } catch (const std::bad_alloc&) {
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "cell table: out of host memory while verifying");
    }
    return KVRT_SUCCESS;
}

uint32_t first_free_cells(const CellTable& t, uint32_t n, uint32_t* out) {
    uint32_t k = 0;
    for (uint32_t c = 0; c < t.capacity() && k < n; ++c)
        if (t.cell_is_empty(c)) out[k++] = c;
    return k;
}

uint32_t pick_load_cells(const CellTable& before, const CellTable& after, uint32_t n, uint32_t* out) {
    const uint32_t k = first_free_cells(before, n, out);
    return k == n ? k : first_free_cells(after, n, out);
}

}  // namespace kvrt::kv
