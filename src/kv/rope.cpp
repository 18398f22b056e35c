#include "kv/rope.hpp"

#include <algorithm>
#include <cmath>

namespace kvrt::kv {

namespace {

constexpr double kPi = 3.14159265358979323846;

// The dimension at which a frequency makes `turns` full turns over the
// original context (YaRN's correction range).
double corr_dim(int n_rot, int n_ctx_orig, double turns, double base) {
    return n_rot * std::log(n_ctx_orig / (turns * 2.0 * kPi)) / (2.0 * std::log(base));
}

}  // namespace

Rope Rope::from_params(const kvrt_rope_desc& p, int head_dim) {
    Rope r;
    r.neox = p.mode == KVRT_ROPE_MODE_NEOX;
    r.n_rot = p.n_rot ? static_cast<int>(p.n_rot) : head_dim;
    if (p.freq_base != 0.0f) r.freq_base = p.freq_base;
    if (p.freq_scale != 0.0f) r.freq_scale = p.freq_scale;
    r.ext_factor = p.ext_factor;
    if (p.attn_factor != 0.0f) r.attn_factor = p.attn_factor;
    if (p.beta_fast != 0.0f) r.beta_fast = p.beta_fast;
    if (p.beta_slow != 0.0f) r.beta_slow = p.beta_slow;
    r.n_ctx_orig = static_cast<int>(p.n_ctx_orig);
    return r;
}

double Rope::theta(int i) const {
    const double base_i = std::pow(freq_base, -2.0 * i / n_rot);
    const double interp = freq_scale * base_i;
    if (ext_factor == 0.0) return interp;
    const double lo = std::max(0.0, std::floor(corr_dim(n_rot, n_ctx_orig, beta_fast, freq_base)));
    const double hi = std::min(static_cast<double>(n_rot - 1), std::ceil(corr_dim(n_rot, n_ctx_orig, beta_slow, freq_base)));
    const double y = (i - lo) / std::max(0.001, hi - lo);
    const double mix = (1.0 - std::min(1.0, std::max(0.0, y))) * ext_factor;
    return interp * (1.0 - mix) + base_i * mix;
}

double Rope::mscale() const {
    if (ext_factor == 0.0) return attn_factor;
    return attn_factor * (1.0 + 0.1 * std::log(1.0 / freq_scale));
}

void Rope::shift_table(int delta, std::vector<float>* out) const {
    const int pairs = n_rot / 2;
    out->resize(2 * static_cast<size_t>(pairs));
    for (int i = 0; i < pairs; ++i) {
        const double angle = static_cast<double>(delta) * theta(i);
        (*out)[2 * i] = static_cast<float>(std::cos(angle));
        (*out)[2 * i + 1] = static_cast<float>(std::sin(angle));
    }
}

double Rope::reduced_angle(uint32_t n, int i) const {
    const double t = theta(i), x = static_cast<double>(n);
    const double hi = x * t;
    const double lo = std::fma(x, t, -hi);  // n * theta = hi + lo exactly
    // 2 pi = kTwoPiHi + kTwoPiLo (the double nearest 2 pi, and the rest).
    // hi - k * kTwoPiHi is exact in one fma: both lie within 2^-50 of each
    // other's multiples (hi's ulp is at least kTwoPiHi's), and the difference
    // is below 8 with no bit under kTwoPiHi's ulp.
    constexpr double kTwoPiHi = 6.283185307179586232;
    constexpr double kTwoPiLo = 2.4492935982947064e-16;
    const double k = std::nearbyint(hi / kTwoPiHi);
    return std::fma(-k, kTwoPiHi, hi) - k * kTwoPiLo + lo;
}

void Rope::position_table(std::vector<float>* out) const {
    const int pairs = n_rot / 2;
    out->assign(size_t{2} * kPositionDigits * kPositionDigitValues * static_cast<size_t>(pairs), 0.0f);
    float* at = out->data();
    for (int k = 0; k < kPositionDigits; ++k)
        for (uint32_t e = 0; e < kPositionDigitValues; ++e)
            for (int i = 0; i < pairs; ++i) {
                const double a = reduced_angle(e << (kPositionDigitBits * k), i);
                *at++ = static_cast<float>(std::cos(a));
                *at++ = static_cast<float>(std::sin(a));
            }
}

uint64_t Rope::position_table_bytes() const {
    return uint64_t{8} * kPositionDigits * kPositionDigitValues * static_cast<uint64_t>(n_rot / 2);
}

}  // namespace kvrt::kv
