// `kvrt demo --strategy static`: the demo's decoder over a cache in kvrt's
// static padded layout (SPEC 5, kvrt.h "Static padded layout"), the layout of
// static-graph engines on NPUs and DSPs.
//
// Each sequence has, per layer and KV head, a K and a V window of S-1 rows
// (S - 1 = --capacity, the context of the other strategies) inside a region
// of ceil(R x (S-1)) reserved rows (--reserve R, default 2). The demo runs the
// model as an engine that computes K/V one layer at a time would: per step one
// kvrt_cache_place (the append: the window advances by a row, or slides when
// the region runs out), then per layer kvrt_cache_write of the new rows and
// kvrt_cache_attention over the window, recorded into one submission. There
// are no context shifts: the oldest token leaves the window by itself.
//
// Several sequences (--seqs K) each have their own windows (the cache's
// max_seqs is K); the prompt is placed in every one of them.
//
// Checked along the way, besides attention against the CPU reference as for
// the other strategies (demo_check.hpp):
// - the cells kvrt_cache_place returns (seq x reserved rows + row) against
//   the demo's own window model (demo_window.hpp);
// - at every checkpoint, for every sequence, layer, KV head, K and V:
//   kvrt_cache_get_static_window's buffer, offset, row stride, valid rows and
//   positions, and the window's bytes downloaded from its buffer at its
//   offset, bit for bit against the rows the demo stored (f32 as is, f16
//   rounded to nearest even, static-scale types quantized as kvrt.h defines)
//   and against kvrt_cache_read; kvrt_cache_get_static_mask in f32 and f16;
// - kvrt_cache_get_static_stats (slides, rows and bytes moved) against the
//   window model, and that the device memory never grew.
//
// Static-scale types (--kv-type u8_static / u16_static) need their scales
// when the cache is created, as a static graph's are fixed when it is
// compiled. The demo calibrates them the usual way: it runs the prompt through
// the model once in f32 on the CPU and takes, per layer, the largest
// magnitude of K (of each rotated pair's norm, which bounds a key at any
// position) and of V, times a margin m for the tokens still to come:
//   scale = m x max |x| / 127, zero point 128 (u8_static, m = 1.25),
//   scale = m x max |x| / 32767, zero point 32768 (u16_static, m = 2).
// Values beyond the range are clamped; the summary reports their share.
// The margins, from check (b)'s NMSE measured on lavapipe (capacities 64 and
// 256, 1 and 4 sequences, 4 x capacity steps) for m = 1, 1.25, 1.5, 2:
//   u8_static   1.7e-4 (0.007% of the values clamped; max abs error 0.079),
//               2.4e-4, 3.0e-4, 5.4e-4 (none clamped; max abs 0.040 at 1.25)
//   u16_static  7.8e-5 (0.009% clamped), 4.9e-6 (5 of 4.4 million values
//               clamped), 4.5e-9, 8.8e-9 (none clamped)
// At 8 bits, rounding costs about as much as the rare clamped value, and
// 1.25 bounds the worst error best; at 16 bits, rounding costs nothing and a
// single clamped value dominates, so the range gets room to spare.
#pragma once

#include "demo_run.hpp"

namespace cli::demo {

// The margins of the calibrated scales over the prompt's largest magnitudes.
constexpr double kCalibrationMarginU8 = 1.25;
constexpr double kCalibrationMarginU16 = 2.0;

// Runs the static demo (Options::strategy == Strategy::Static). Returns 0, or
// 1 after printing why it stopped; `out` holds the figures gathered so far.
int run_static(const Options& opt, Results* out);

}  // namespace cli::demo
