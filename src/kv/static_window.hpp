// Static padded layout (SPEC 5, the HTP/NSP style): the pure-CPU model of its
// sizes and of the window's movement, which a device implementation follows.
//
// Terms (W = S - 1 rows per window, row = one token of one (layer, KV head)):
// - Each (layer, KV head, K|V) has its own buffer of `reservation_rows` rows
//   of `row_stride` bytes (= head_dim * elem_bytes, rows packed back to back).
//   reservation_rows = ceil(R * W): the whole rows that hold R * W.
// - The window is rows [start, start + W) of every buffer (all buffers of a
//   sequence move together, so one StaticWindow serves all of them). Its byte
//   offset inside a buffer is start * row_stride; a static graph binds
//   (buffer, start * row_stride) as its [1,1,S-1,D] past tensor.
// - Left-padded: the n_valid valid rows are the LAST n_valid rows of the
//   window, rows [start + W - n_valid, start + W), oldest first. The other rows
//   are padding, excluded by the mask; their contents are whatever the buffer
//   held (the device zero-fills the reservation once so padding is finite).
// - Appending n rows (1 <= n <= W): while start + W + n <= reservation_rows the
//   new rows go right after the window, at start + W, and start advances by n
//   (no bytes move). Otherwise the window restarts near the region's start:
//   one slide copy first moves the rows that survive the append (the last
//   min(n_valid, W - n) valid rows) so that they end at row lead + W - n, the
//   new rows are written there, and start becomes lead: n for a batch of
//   2 <= n <= (Rr - W) / 4 rows (so that removing them again, as after
//   rejected draft tokens, only moves the window back), else 0. Padding rows
//   are never copied. The copy's source and destination can overlap (always for
//   R = 1); `overlapping` says when, as vkCmdCopyBuffer forbids overlapping
//   regions (the device then goes through a scratch buffer).
// - Removing valid rows keeps the others in order, still the window's last
//   rows: dropping the oldest only shrinks n_valid; dropping the newest k
//   moves the window start back by k when start >= k (no bytes move), and
//   otherwise copies the survivors to end at row W (start becomes 0); a range
//   in the middle copies the smaller side across the gap (the newer side only
//   when start can move back). One copy at most, never re-quantized.
//
// The smart-mask style (`ring`, ExecuTorch's and Qualcomm's SMART_MASK): the
// region is the window (R = 1, start always 0) and never moves. Rows are a
// ring: the oldest valid row is `tail`, and valid row i (0 = oldest) is row
// (tail + i) mod W. Appending n rows writes them at rows (tail + n_valid +
// j) mod W, overwriting the oldest rows once the ring is full; while it
// fills (tail 0) the valid rows are rows [0, n_valid): right-padded, the
// mask opening from the left. Removing the oldest or the newest rows
// changes metadata only; a range in the middle moves the smaller side
// across the gap, in up to three copies of contiguous rows (where the ring
// wraps). There is no room after the window (make_room refuses).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/result.hpp"

namespace kvrt::kv {

struct StaticGeometry {
    uint32_t n_layers = 0;
    uint32_t n_kv_heads = 0;
    uint32_t head_dim = 0;
    uint32_t elem_bytes = 0;        // 1 or 2 (static int8/int16), 2 (f16), 4 (f32)
    uint32_t max_seq = 0;           // S, >= 2
    double reserve = 0.0;           // R, finite, >= 1
    uint32_t window_rows = 0;       // W = S - 1
    uint32_t reservation_rows = 0;  // ceil(R * W) >= W
    uint64_t row_stride = 0;        // head_dim * elem_bytes
    uint64_t window_bytes = 0;      // W * row_stride
    uint64_t buffer_bytes = 0;      // reservation_rows * row_stride, one (layer, head, K|V) buffer
    uint64_t buffer_count = 0;      // 2 * n_layers * n_kv_heads
    uint64_t total_bytes = 0;       // buffer_count * buffer_bytes (whole rows)
    double fractional_bytes = 0.0;  // SPEC 5: 2 * R * n_layers * n_heads * (S-1) * D * bits/8
    bool ring = false;              // the smart-mask style (R = 1; see the top of this file)

    // Buffer index of (layer, head, K = false | V = true): K buffers first,
    // each layer's heads together.
    uint64_t buffer_index(uint32_t layer, uint32_t head, bool is_v) const {
        return (is_v ? static_cast<uint64_t>(n_layers) * n_kv_heads : 0) +
               static_cast<uint64_t>(layer) * n_kv_heads + head;
    }

    // Validates and computes; KVRT_ERROR_INVALID_ARGUMENT with a message for
    // S < 2, R < 1 / NaN / infinite, zero dims, elem_bytes not 1, 2 or 4, and
    // sizes that overflow (reservation rows past 2^32 - 1, bytes past 2^64 - 1).
    static Result create(uint32_t n_layers, uint32_t n_kv_heads, uint32_t head_dim, uint32_t elem_bytes,
                         uint32_t max_seq, double reserve, StaticGeometry* out);
    // The smart-mask style's geometry: create() with R = 1 and `ring` set.
    static Result create_ring(uint32_t n_layers, uint32_t n_kv_heads, uint32_t head_dim, uint32_t elem_bytes,
                              uint32_t max_seq, StaticGeometry* out);
};

// The copy a slide needs before the new rows are written (rows of every
// (layer, head, K|V) buffer; bytes = rows * row_stride at row * row_stride).
struct StaticSlide {
    bool needed = false;       // false: nothing to copy (rows == 0)
    uint32_t src_row = 0;
    uint32_t dst_row = 0;
    uint32_t rows = 0;
    bool overlapping = false;  // [src, src+rows) and [dst, dst+rows) intersect
};

// What one append asks of the device, in order: the slide copy (if needed),
// then the new rows: row j at (write_row + j) mod reservation_rows (past the
// region's end only in the smart-mask style, whose rows wrap).
struct StaticAppend {
    StaticSlide slide;
    bool slid = false;         // the window restarted (even with nothing to copy)
    uint32_t write_row = 0;
    uint32_t rows = 0;
    uint32_t start_after = 0;  // window start once the append is done
};

// One sequence's window (see the top of this file).
class StaticWindow {
public:
    StaticWindow() = default;
    // `g` must come from StaticGeometry::create. Starts empty at row 0.
    explicit StaticWindow(const StaticGeometry& g)
        : window_rows_(g.window_rows), reservation_rows_(g.reservation_rows), ring_(g.ring) {}

    // Appends `n` rows (1 <= n <= W, else KVRT_ERROR_INVALID_ARGUMENT and no
    // change) and says where they go and what moves first.
    Result append(uint32_t n, StaticAppend* out);

    // Removes the valid rows [first, first + count) (0 = the oldest) and says
    // which copy, if any, the device must make: `out` gets it (`needed`
    // false when no bytes move). KVRT_ERROR_INVALID_ARGUMENT and no change
    // when the range passes n_valid. count = 0 changes nothing. Counters: a
    // copy counts as a slide of out->rows rows.
    Result remove(uint32_t first, uint32_t count, StaticSlide* out);
    // The same for either style: `out` gets the copies in the order the
    // device makes them (none, one, or in the smart-mask style up to three,
    // each of contiguous rows).
    Result remove_runs(uint32_t first, uint32_t count, std::vector<StaticSlide>* out);

    // Makes room for `n` rows right after the window, where a graph writes
    // the rows of its next tokens in place (1 <= n <= reservation - window
    // rows, else KVRT_ERROR_INVALID_ARGUMENT and no change). Where the region
    // lacks the room, the window restarts at row 0 and `out` says which copy
    // moves its valid rows there (counted as a slide); otherwise nothing
    // changes and `out` needs no copy.
    Result make_room(uint32_t n, StaticSlide* out);

    // Back to empty at row 0; counters cleared.
    void reset();

    uint32_t window_rows() const { return window_rows_; }
    uint32_t reservation_rows() const { return reservation_rows_; }
    uint32_t n_valid() const { return n_valid_; }
    bool ring() const { return ring_; }
    uint32_t start() const { return start_; }                      // first row of the window
    // The row of valid row i (0 = the oldest, i < n_valid).
    uint32_t valid_row(uint32_t i) const {
        return ring_ ? (tail_ + i) % window_rows_ : start_ + window_rows_ - n_valid_ + i;
    }
    uint32_t first_valid_row() const { return valid_row(0); }
    // Whether window row r (0 <= r < W) holds a valid row.
    bool row_valid(uint32_t r) const {
        return ring_ ? (r + window_rows_ - tail_) % window_rows_ < n_valid_ : r >= window_rows_ - n_valid_;
    }
    // The valid rows as at most two runs [begin, end) of region rows, oldest
    // first (two only where a ring wraps); returns how many.
    uint32_t valid_runs(uint32_t begin[2], uint32_t end[2]) const;
    uint64_t window_byte_offset(const StaticGeometry& g) const { return start_ * g.row_stride; }

    uint64_t rows_appended() const { return rows_appended_; }
    uint64_t rows_moved() const { return rows_moved_; }  // rows those copied (per buffer)
    uint64_t slides() const { return slides_; }          // slides and removals with a copy
    uint64_t restarts() const { return restarts_; }      // every restart near the region's start

    // The [1,1,S] mask of the next step: entries 0..S-2 are the window's rows
    // (0 where valid, -inf where padding: the first W - n_valid entries are
    // padding), entry S-1 is the current token, always valid (0). Writes S
    // entries; KVRT_ERROR_INVALID_ARGUMENT when `count` < S or `out` is null.
    Result mask_f32(float* out, size_t count) const;
    // Same as IEEE half bits: 0x0000 valid, 0xFC00 (-inf) padding.
    Result mask_f16(uint16_t* out, size_t count) const;
    // The mask of a graph of n_new new rows per step (1 <= n_new <= S-1),
    // whose past is the window's last S - n_new rows: n_new rows of S
    // entries; row j: the past rows (`attend` where valid, `masked` where
    // padding), then the new tokens 0..n_new-1 (`attend` up to token j,
    // `masked` after). n_new = 1 is the mask above. In the smart-mask style
    // the past is the whole window: rows of W + n_new entries
    // (mask_entries). Writes n_new * mask_entries(n_new) of `count` entries;
    // KVRT_ERROR_INVALID_ARGUMENT when they do not fit or n_new is out of
    // range.
    Result graph_mask(uint32_t n_new, float attend, float masked, float* out, size_t count) const;
    Result graph_mask(uint32_t n_new, uint16_t attend, uint16_t masked, uint16_t* out, size_t count) const;
    // Entries of one row of that mask: S, or W + n_new in the smart-mask style.
    uint32_t mask_entries(uint32_t n_new) const { return ring_ ? window_rows_ + n_new : window_rows_ + 1; }

private:
    template <typename T>
    Result write_mask(uint32_t n_new, T valid, T padding, T* out, size_t count) const;

    uint32_t window_rows_ = 0;
    uint32_t reservation_rows_ = 0;
    bool ring_ = false;
    uint32_t n_valid_ = 0;
    uint32_t start_ = 0;
    uint32_t tail_ = 0;  // the smart-mask style: the row of the oldest valid row
    uint64_t rows_appended_ = 0;
    uint64_t rows_moved_ = 0;
    uint64_t slides_ = 0;
    uint64_t restarts_ = 0;
};

// Rows copied (per buffer) by StaticWindow after T single-row appends from
// empty, computed in closed form (independent of the simulation), for
// W = S-1 >= 1, Rr = ceil(R*W):
//   free appends per cycle F = Rr - W, period P = F + 1: the appends numbered
//   m*P (m = 1..N, N = floor(T/P)) restart the window and copy
//   min(m*P - 1, W - 1) rows (the valid rows before it, less the one that
//   falls out). With M = min(N, floor((W-1)/P)) restarts still filling:
//   rows = P*M*(M+1)/2 - M + (N - M)*(W - 1).
// Steady state: W-1 rows per Rr-W+1 tokens (R = 2: W-1 rows per W+1 tokens;
// R = 1: W-1 rows every token). Returns 0 for S < 2 or R not finite >= 1.
uint64_t expected_rows_moved(uint32_t max_seq, double reserve, uint64_t tokens);

}  // namespace kvrt::kv
