// The static decode test's own account of kvrt's static padded layout
// (SPEC 5, kvrt.h "Static padded layout"), independent of kvrt:
//
// - WindowModel replays, from the documented rules alone, where one
//   sequence's window lies in its regions, where each append writes, and
//   which appends slide (and how many rows each slide copies);
// - WindowChecker keeps the K/V rows the test gave kvrt for the tokens still
//   in the windows and checks, for every layer, KV head, K and V,
//   kvrt_cache_static_get_window's description and the window's bytes
//   (downloaded from its buffer at its offset) against them, bit for bit
//   against the reference encoding (tests/reference/quant.hpp, half.hpp), and
//   the sequence's kvrt_cache_static_get_mask.
#pragma once

#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "decode_model.hpp"
#include "gpu_test.hpp"

namespace kvrt_test::decode {

// One sequence's window over its regions of reserved_rows rows: rows
// [start, start + window_rows), its n_valid valid rows last. Appending n rows
// writes them right after the window and advances it while they fit in the
// region; otherwise the window restarts at row `lead` (n for batches of 2 to
// (reserved_rows - window_rows) / 4 rows, else 0), after one copy moves the
// rows that stay in it (the newest min(n_valid, window_rows - n)) to its
// start, and the new rows go at lead + window_rows - n.
class WindowModel {
public:
    WindowModel(uint32_t window_rows, uint32_t reserved_rows) : w_(window_rows), rr_(reserved_rows) {}

    // Appends n (1..window_rows) rows; returns the row of the first. *slid
    // tells whether the window restarted.
    uint32_t append(uint32_t n, bool* slid);

    uint32_t start() const { return start_; }
    uint32_t n_valid() const { return n_valid_; }
    uint32_t first_valid_row() const { return start_ + w_ - n_valid_; }
    uint64_t slides() const { return slides_; }          // restarts that copied rows
    // Slides whose copy overlaps itself (start + n < rows kept: R < 2 once
    // the window is full), which the device does through scratch memory.
    uint64_t overlapping_slides() const { return overlapping_; }
    uint64_t rows_moved() const { return rows_moved_; }  // rows copied per region
    uint64_t rows_appended() const { return rows_appended_; }

private:
    uint32_t w_, rr_;
    uint32_t start_ = 0, n_valid_ = 0;
    uint64_t slides_ = 0, overlapping_ = 0, rows_moved_ = 0, rows_appended_ = 0;
};

class WindowChecker {
public:
    // `k_scales` / `v_scales`: one per layer for static-scale types, else empty.
    WindowChecker(const ModelConfig& cfg, uint32_t seqs, uint32_t window_rows, uint32_t reserved_rows, kvrt_type type,
                  std::vector<QuantScale> k_scales, std::vector<QuantScale> v_scales);

    // The rows the test gave kvrt for token `pos` of `seq` at `layer`: K as
    // stored (rotated), V; kv_dim values each.
    void record(uint32_t seq, int32_t pos, int layer, const float* k, const float* v);

    // Checks every window of `seq`, whose newest token is at `pos_last`,
    // against `model` and the recorded rows; `cache_k` / `cache_v` hold
    // kvrt_cache_read of the window's valid cells, layer by layer
    // ([n_layers][n_valid][kv_dim]). Fails the test at the first difference.
    void check(kvrt_cache cache, uint32_t seq, const WindowModel& model, int32_t pos_last,
               const std::vector<float>& cache_k, const std::vector<float>& cache_v);

    uint64_t windows() const { return windows_; }  // windows checked
    uint64_t rows() const { return rows_; }        // valid rows compared

private:
    // One window: (layer, head, a = 0 for K, 1 for V).
    void check_window(kvrt_cache cache, uint32_t seq, const WindowModel& model, int32_t pos_last, int layer, int head,
                      int a, const std::vector<float>& read);
    // The window's region starts where it did at the first check, and apart
    // from every other region.
    void check_region(uint32_t seq, int layer, int head, int a, const kvrt_static_window& win, uint64_t start);
    void check_mask(kvrt_cache cache, uint32_t seq, uint32_t n_valid);
    // The values of n stored codes of the window's type.
    std::vector<float> decode(const uint8_t* row, size_t n, const QuantScale& s) const;

    ModelConfig cfg_;
    uint32_t w_, rr_;
    kvrt_type type_;
    uint32_t eb_;  // bytes per value
    std::vector<QuantScale> k_scales_, v_scales_;
    // Per sequence: a ring of window_rows tokens, [slot][n_layers][kv_dim].
    std::vector<std::vector<float>> k_, v_;
    // The region base (window offset less start x row_stride) of each
    // (seq, layer, head, K|V) first seen, to check it never moves.
    std::map<std::tuple<uint32_t, int, int, int>, std::pair<kvrt_buffer, uint64_t>> bases_;
    uint64_t windows_ = 0, rows_ = 0;
};

}  // namespace kvrt_test::decode
