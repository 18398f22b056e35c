// Double-precision CPU reference for rotary position embeddings (RoPE) and the
// RoPE shift of stored K (SPEC.md section 3), including YaRN scaling as ggml
// computes it (ggml-cpu rope_yarn, ggml_rope_yarn_corr_dims).
//
// Pair i (0 <= i < n_rot/2) holds dimensions (2i, 2i+1) in normal mode and
// (i, i + n_rot/2) in NeoX mode; dimensions >= n_rot are never touched. At
// position p the pair is rotated by the angle p * theta_i:
//
//   base_i   = freq_base^(-2i/n_rot) / freq_factor_i     (factor 1 if none)
//   theta_i  = freq_scale * base_i                      (ext_factor == 0)
//   theta_i  = freq_scale * base_i * (1 - mix_i) + base_i * mix_i
//                                                     (YaRN, ext_factor != 0)
//   mix_i    = ext_factor * (1 - clamp((i - lo) / max(0.001, hi - lo), 0, 1))
//   [lo, hi] = corr_dims: lo = max(0, floor(cd(beta_fast))),
//              hi = min(n_rot - 1, ceil(cd(beta_slow))),
//              cd(b) = n_rot * ln(n_ctx_orig / (2 pi b)) / (2 ln freq_base)
//
// and the rotated pair is scaled by the magnitude
//
//   mscale = attn_factor                                   (ext_factor == 0)
//   mscale = attn_factor * (1 + 0.1 ln(1 / freq_scale))    (ext_factor != 0)
//
// (x0, x1) -> mscale * (x0 cos a - x1 sin a, x0 sin a + x1 cos a).
//
// ggml interpolates the angles p*theta_interp and p*theta_extrap with the same
// mix, which is the same as mixing the per-position rates as above: the angle
// stays linear in p. That is what makes a shift a plain rotation: K rotated at
// p and then rotated by delta * theta_i equals K rotated at p + delta.
//
// A shift (rope_shift) has magnitude 1. The magnitude mscale belongs to the
// projection of K at its first rotation; a stored K already carries it, and a
// shift must only move the angle, or every shift would multiply K by mscale
// again. (llama.cpp's own K-shift graph passes attn_factor again, which is
// only neutral when mscale == 1; DeepSeek2 works around it by passing
// 1/mscale. This reference does what the mathematics asks.)
#pragma once

#include <vector>

namespace kvrt::ref {

// RoPE configuration of one layer. Defaults: plain RoPE, base 10000.
struct RopeParams {
    int n_rot = 0;                   // rotated dims; even, 0 < n_rot <= head_dim
    bool neox = false;               // NeoX pairing (i, i + n_rot/2)
    double freq_base = 10000.0;
    double freq_scale = 1.0;         // linear scaling (1 / context factor)
    double ext_factor = 0.0;         // YaRN extrapolation mix; 0 = off
    double attn_factor = 1.0;        // magnitude factor
    double beta_fast = 32.0;         // YaRN correction range
    double beta_slow = 1.0;
    int n_ctx_orig = 0;              // training context (YaRN only)
    std::vector<float> freq_factors; // optional per-pair divisors (n_rot/2), e.g. Llama 3 rope_freqs
};

// YaRN correction dims [lo, hi] (only meaningful when ext_factor != 0).
void rope_corr_dims(const RopeParams& p, double out[2]);

// Angle per unit of position for pair i (theta_i above).
double rope_theta(const RopeParams& p, int i);

// The rotation angle of pair i at position pos: pos * rope_theta(p, i).
double rope_angle(const RopeParams& p, int i, double pos);

// The magnitude factor applied by rope_rotate.
double rope_mscale(const RopeParams& p);

// The two dimensions of pair i: (2i, 2i+1), or (i, i + n_rot/2) for NeoX.
void rope_pair_dims(const RopeParams& p, int i, int* first, int* second);

// Rotates one head vector of head_dim values to position pos, with the
// magnitude factor; dims >= n_rot are copied. `in` and `out` may be the same.
// Throws std::invalid_argument if n_rot is odd, <= 0 or > head_dim, or
// freq_factors has the wrong length.
void rope_rotate(const RopeParams& p, const double* in, double* out, int head_dim, double pos);

// Moves an already rotated head vector by delta positions: a pure rotation of
// pair i by delta * theta_i (magnitude 1); dims >= n_rot are copied.
// `in` and `out` may be the same.
void rope_shift(const RopeParams& p, const double* in, double* out, int head_dim, double delta);

// The shift as kvrt's kernels compute it, for references that must match
// them to the last bit or nearly: each pair rotated in single precision,
// (x0 c - x1 s, x0 s + x1 c), with c and s the f32 roundings of the cosine
// and sine (in double) of delta * theta_i. The results differ from a kernel's
// only where one of them fuses a multiply and an add (one rounding less). In
// place; dims >= n_rot are untouched. Throws like rope_rotate.
void rope_shift_f32(const RopeParams& p, float* x, int head_dim, double delta);

// Conveniences over float input (K as stored), returning doubles.
std::vector<double> rope_rotate(const RopeParams& p, const std::vector<float>& in, double pos);
std::vector<double> rope_shift(const RopeParams& p, const std::vector<float>& in, double delta);

}  // namespace kvrt::ref
