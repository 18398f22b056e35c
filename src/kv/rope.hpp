// RoPE angles on the CPU (SPEC 3), in double precision: the per-pair
// frequencies of a model's RoPE, including YaRN, and the (cos, sin) tables the
// shift kernel applies. Pure CPU.
#pragma once

#include <cstdint>
#include <vector>

#include "kvrt/kvrt.h"

namespace kvrt::kv {

// A model's RoPE with every default resolved (kvrt_rope_desc's zero fields).
struct Rope {
    bool neox = false;
    int n_rot = 0;
    double freq_base = 10000.0;
    double freq_scale = 1.0;
    double ext_factor = 0.0;
    double attn_factor = 1.0;
    double beta_fast = 32.0;
    double beta_slow = 1.0;
    int n_ctx_orig = 0;

    static Rope from_params(const kvrt_rope_desc& p, int head_dim);

    // theta_i: the angle per position of pair i (0 <= i < n_rot / 2), so that
    // a token at position p rotates pair i by p * theta_i. With YaRN the
    // interpolated and extrapolated frequencies are mixed per pair; the mix
    // does not depend on the position, so rotations still compose.
    double theta(int i) const;

    // The magnitude of a rotation from position 0: attn_factor, times
    // 1 + 0.1 ln(1 / freq_scale) with YaRN.
    double mscale() const;

    // (cos, sin) of delta * theta_i for every pair, interleaved, as floats
    // computed in double: the table of one shift.
    void shift_table(int delta, std::vector<float>* out) const;

    // The angle n * theta_i reduced to [-pi, pi] to within a few units of
    // double rounding for any n < 2^32: the product is split exactly (fma)
    // and 2 pi is subtracted in two parts, so no bit of the angle is lost to
    // the size of n (a plain double product loses 2^-21 rad at n = 2^32).
    double reduced_angle(uint32_t n, int i) const;

    // The kernels' position table (shaders/include/rope.glsl): a position p
    // (32 bits) is kPositionDigits digits of kPositionDigitBits bits, p =
    // sum_k e_k * 2^(8k), and the rotation of pair i at p is the product of
    // the rotations of e_k * 2^(8k) * theta_i, one entry per digit: angle
    // addition, multiplications and additions only, exact to a few f32
    // roundings at any position whatever the device's sin and cos. Entry
    // (digit k, value e, pair i) is at (k * 256 + e) * n_rot / 2 + i: cos
    // then sin, each in f32 from reduced_angle. Every 32-bit value has its
    // entries, so no position reads outside the table.
    static constexpr int kPositionDigitBits = 8;
    static constexpr int kPositionDigits = 4;
    static constexpr int kPositionDigitValues = 1 << kPositionDigitBits;
    void position_table(std::vector<float>* out) const;
    // Its size in bytes.
    uint64_t position_table_bytes() const;
};

}  // namespace kvrt::kv
