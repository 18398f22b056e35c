// The static strategy's own account of kvrt's static padded layout (SPEC 5,
// kvrt.h "Static padded layout"), independent of the runtime:
//
// - WindowModel replays, from the documented rules alone, where one
//   sequence's window lies in its regions, where each append writes, and
//   which appends slide (and how many rows each slide copies);
// - WindowChecker keeps the K/V rows the demo gave kvrt for the tokens still
//   in the windows and checks, for every layer, KV head, K and V,
//   kvrt_cache_get_static_window's description and the window's bytes (downloaded
//   from its buffer at its offset) against them, bit for bit, and the
//   sequence's kvrt_cache_get_static_mask.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "demo_model.hpp"
#include "kv_types.hpp"
#include "kvrt/kvrt.h"

namespace cli::demo {

// One sequence's window over its regions of reserved_rows rows: rows
// [start, start + window_rows), its n_valid valid rows last. Appending n rows
// writes them right after the window and advances it while they fit in the
// region; otherwise the window restarts at row 0, after one copy moves the
// rows that stay in it (the newest min(n_valid, window_rows - n)) to its
// start, and the new rows go at window_rows - n.
class WindowModel {
public:
    WindowModel(uint32_t window_rows, uint32_t reserved_rows) : w_(window_rows), rr_(reserved_rows) {}

    // Appends n (1..window_rows) rows; returns the row of the first. *slid
    // tells whether the window restarted at row 0.
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

// What the window checks saw.
struct WindowFigures {
    uint64_t windows = 0;      // (sequence, layer, KV head, K|V) windows checked
    uint64_t rows = 0;         // valid rows compared
    uint64_t bytes = 0;        // window bytes downloaded
    uint64_t masks = 0;        // masks checked (f32 and f16 count once)
    uint64_t mismatches = 0;   // failed comparisons of any kind
    std::string first_mismatch;
    uint64_t stored_values = 0;   // K/V values given to a static-scale type
    uint64_t clipped_values = 0;  // of which outside the scale's range (clamped)
};

class WindowChecker {
public:
    // `k_scales` / `v_scales`: one per layer for static-scale types, else empty.
    WindowChecker(const ModelConfig& cfg, uint32_t seqs, uint32_t window_rows, uint32_t reserved_rows, kvrt_type type,
                  std::vector<QuantScale> k_scales, std::vector<QuantScale> v_scales);

    // The rows the demo gave kvrt for token `pos` of `seq` at `layer`: K as
    // stored (rotated), V; kv_dim values each.
    void record(uint32_t seq, int32_t pos, int layer, const float* k, const float* v);

    // Checks every window of `seq`, whose newest token is at `pos_last`,
    // against `model` and the recorded rows; `cache_k` / `cache_v` hold
    // kvrt_cache_read of the window's valid cells, layer by layer
    // ([n_layers][n_valid][kv_dim]). Mismatches are counted in figures();
    // returns a failed kvrt call's result (KVRT_SUCCESS otherwise) with *what.
    kvrt_result check(kvrt_cache cache, uint32_t seq, const WindowModel& model, int32_t pos_last,
                      const std::vector<float>& cache_k, const std::vector<float>& cache_v, const char** what);

    const WindowFigures& figures() const { return fig_; }

private:
    // The bytes kvrt must hold for `x` (one value of the cache's type).
    void encode(float x, const QuantScale* s, float inv, uint8_t* out) const;
    float decode(const uint8_t* in, const QuantScale* s) const;
    void mismatch(const std::string& what);
    kvrt_result check_mask(kvrt_cache cache, uint32_t seq, uint32_t n_valid, const char** what);

    ModelConfig cfg_;
    uint32_t w_, rr_;
    kvrt_type type_;
    uint32_t eb_;  // bytes per value
    std::vector<QuantScale> k_scales_, v_scales_;
    std::vector<float> k_inv_, v_inv_;
    // Per sequence: a ring of window_rows tokens, [slot][n_layers][kv_dim].
    std::vector<std::vector<float>> k_, v_;
    // The region base (window offset less start x row_stride) of each
    // (seq, layer, head, K|V) first seen, to check it never moves.
    std::map<std::tuple<uint32_t, uint32_t, uint32_t, int>, std::pair<kvrt_buffer, uint64_t>> bases_;
    WindowFigures fig_;
};

}  // namespace cli::demo
