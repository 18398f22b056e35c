// Double-precision RoPE reference; see rope.hpp.
#include "reference/rope.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace kvrt::ref {

namespace {

constexpr double kPi = 3.14159265358979323846;

void check_params(const RopeParams& p, int head_dim) {
    if (p.n_rot <= 0 || p.n_rot % 2 != 0 || p.n_rot > head_dim) {
        throw std::invalid_argument("kvrt::ref::rope: n_rot must be even and in (0, head_dim]");
    }
    if (!p.freq_factors.empty() && p.freq_factors.size() != static_cast<size_t>(p.n_rot / 2)) {
        throw std::invalid_argument("kvrt::ref::rope: freq_factors must have n_rot/2 entries");
    }
}

// cd(b) of rope.hpp: the dimension whose wavelength fits b turns into the
// original context.
double corr_dim(int n_rot, int n_ctx_orig, double n_turns, double base) {
    return n_rot * std::log(n_ctx_orig / (n_turns * 2.0 * kPi)) / (2.0 * std::log(base));
}

// Rotates every pair by its angle angle_of(i), times `mag`.
template <typename AngleFn>
void rotate_pairs(const RopeParams& p, const double* in, double* out, int head_dim, double mag,
                  AngleFn angle_of) {
    check_params(p, head_dim);
    for (int d = p.n_rot; d < head_dim; ++d) {
        out[d] = in[d];
    }
    for (int i = 0; i < p.n_rot / 2; ++i) {
        int a = 0;
        int b = 0;
        rope_pair_dims(p, i, &a, &b);
        const double angle = angle_of(i);
        const double c = std::cos(angle) * mag;
        const double s = std::sin(angle) * mag;
        const double x0 = in[a];
        const double x1 = in[b];
        out[a] = x0 * c - x1 * s;
        out[b] = x0 * s + x1 * c;
    }
}

}  // namespace

void rope_corr_dims(const RopeParams& p, double out[2]) {
    const double lo = std::floor(corr_dim(p.n_rot, p.n_ctx_orig, p.beta_fast, p.freq_base));
    const double hi = std::ceil(corr_dim(p.n_rot, p.n_ctx_orig, p.beta_slow, p.freq_base));
    out[0] = std::max(0.0, lo);
    out[1] = std::min(static_cast<double>(p.n_rot - 1), hi);
}

double rope_theta(const RopeParams& p, int i) {
    if (i < 0 || 2 * i >= p.n_rot) {
        throw std::invalid_argument("kvrt::ref::rope_theta: pair index out of range");
    }
    double base_i = std::pow(p.freq_base, -2.0 * i / p.n_rot);
    if (!p.freq_factors.empty()) {
        base_i /= static_cast<double>(p.freq_factors.at(static_cast<size_t>(i)));
    }
    const double interp = p.freq_scale * base_i;
    if (p.ext_factor == 0.0) {
        return interp;
    }
    double dims[2];
    rope_corr_dims(p, dims);
    const double y = (i - dims[0]) / std::max(0.001, dims[1] - dims[0]);
    const double ramp = 1.0 - std::min(1.0, std::max(0.0, y));
    const double mix = ramp * p.ext_factor;
    return interp * (1.0 - mix) + base_i * mix;
}

double rope_angle(const RopeParams& p, int i, double pos) { return pos * rope_theta(p, i); }

double rope_mscale(const RopeParams& p) {
    if (p.ext_factor == 0.0) {
        return p.attn_factor;
    }
    return p.attn_factor * (1.0 + 0.1 * std::log(1.0 / p.freq_scale));
}

void rope_pair_dims(const RopeParams& p, int i, int* first, int* second) {
    if (p.neox) {
        *first = i;
        *second = i + p.n_rot / 2;
    } else {
        *first = 2 * i;
        *second = 2 * i + 1;
    }
}

void rope_rotate(const RopeParams& p, const double* in, double* out, int head_dim, double pos) {
    rotate_pairs(p, in, out, head_dim, rope_mscale(p),
                 [&](int i) { return rope_angle(p, i, pos); });
}

void rope_shift(const RopeParams& p, const double* in, double* out, int head_dim, double delta) {
    rotate_pairs(p, in, out, head_dim, 1.0, [&](int i) { return rope_angle(p, i, delta); });
}

void rope_shift_f32(const RopeParams& p, float* x, int head_dim, double delta) {
    check_params(p, head_dim);
    for (int i = 0; i < p.n_rot / 2; ++i) {
        int a = 0;
        int b = 0;
        rope_pair_dims(p, i, &a, &b);
        const double angle = rope_angle(p, i, delta);
        const float c = static_cast<float>(std::cos(angle));
        const float s = static_cast<float>(std::sin(angle));
        const float x0 = x[a];
        const float x1 = x[b];
        x[a] = x0 * c - x1 * s;
        x[b] = x0 * s + x1 * c;
    }
}

std::vector<double> rope_rotate(const RopeParams& p, const std::vector<float>& in, double pos) {
    std::vector<double> out(in.begin(), in.end());
    rope_rotate(p, out.data(), out.data(), static_cast<int>(out.size()), pos);
    return out;
}

std::vector<double> rope_shift(const RopeParams& p, const std::vector<float>& in, double delta) {
    std::vector<double> out(in.begin(), in.end());
    rope_shift(p, out.data(), out.data(), static_cast<int>(out.size()), delta);
    return out;
}

}  // namespace kvrt::ref
