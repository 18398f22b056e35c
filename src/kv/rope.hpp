// RoPE angles on the CPU (SPEC 3), in double precision: the per-pair
// frequencies of a model's RoPE, including YaRN, and the (cos, sin) tables the
// shift kernel applies. Pure CPU.
#pragma once

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

    // The dims of pair i: (2i, 2i+1), or (i, i + n_rot/2) in NeoX mode.
    void pair_dims(int i, int* a, int* b) const;

    // (cos, sin) of delta * theta_i for every pair, interleaved, as floats
    // computed in double: the table of one shift.
    void shift_table(int delta, std::vector<float>* out) const;
};

}  // namespace kvrt::kv
