// The RoPE position table of the kernels (kv::Rope::position_table), with no
// device: its angles reduced exactly, and its entries composing to the
// rotation of any 32-bit position, against the double-precision reference
// (tests/reference/rope) and, where the host has it, 64-bit long double.
#include <catch2/catch.hpp>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kv/rope.hpp"
#include "reference/rope.hpp"

using kvrt::kv::Rope;

namespace {

constexpr double kPi = 3.14159265358979323846;

Rope make_rope(bool neox, bool yarn) {
    kvrt_rope_desc d = KVRT_ROPE_DESC_INIT;
    d.mode = neox ? KVRT_ROPE_MODE_NEOX : KVRT_ROPE_MODE_NORMAL;
    d.freq_base = 500000.0f;
    if (yarn) {
        d.freq_scale = 0.25f;
        d.ext_factor = 1.0f;
        d.n_ctx_orig = 8192;
    }
    return Rope::from_params(d, 128);
}

kvrt::ref::RopeParams ref_params(const Rope& r) {
    kvrt::ref::RopeParams p;
    p.n_rot = r.n_rot;
    p.neox = r.neox;
    p.freq_base = r.freq_base;
    p.freq_scale = r.freq_scale;
    p.ext_factor = r.ext_factor;
    p.attn_factor = r.attn_factor;
    p.beta_fast = r.beta_fast;
    p.beta_slow = r.beta_slow;
    p.n_ctx_orig = r.n_ctx_orig;
    return p;
}

// a - b as an angle, in (-pi, pi].
double angle_diff(double a, double b) { return std::remainder(a - b, 2.0 * kPi); }

}  // namespace

TEST_CASE("rope table: the frequencies are the reference's", "[rope]") {
    for (bool neox : {false, true})
        for (bool yarn : {false, true}) {
            const Rope r = make_rope(neox, yarn);
            const kvrt::ref::RopeParams p = ref_params(r);
            for (int i = 0; i < r.n_rot / 2; ++i) CHECK(r.theta(i) == Approx(kvrt::ref::rope_theta(p, i)).epsilon(1e-14));
        }
}

TEST_CASE("rope table: reduced angles lie in [-pi, pi] and equal n * theta", "[rope]") {
    const Rope r = make_rope(false, false);
    for (int i : {0, 1, 7, 31, 63}) {
        for (uint32_t n : {0u, 1u, 2u, 255u, 4096u, 65535u, 1000003u, 16777215u, 16777216u, 1000000000u, 4294967295u}) {
            const double a = r.reduced_angle(n, i);
            INFO("pair " << i << " n " << n << " angle " << a);
            CHECK(std::fabs(a) <= kPi + 1e-15);
            // Within a double product's error of the plain product (which
            // loses about n * theta * 2^-53 itself).
            const double plain = static_cast<double>(n) * r.theta(i);
            CHECK(std::fabs(angle_diff(a, plain)) <= 4.0 * plain * DBL_EPSILON + 1e-15);
#if LDBL_MANT_DIG >= 64
            // Against 64-bit arithmetic: n * theta exact to 2^-64 relative,
            // 2 pi to 2^-64; the reduction must keep that (a plain double
            // product is off by up to 2^-21 rad at n = 2^32).
            const long double big = static_cast<long double>(n) * static_cast<long double>(r.theta(i));
            const long double two_pi = 6.283185307179586476925286766559005768L;
            const long double k = std::nearbyintl(big / two_pi);
            const double exact = static_cast<double>(big - k * two_pi);
            CHECK(std::fabs(angle_diff(a, exact)) <= 1e-9 * (1.0 + plain * 1e-9) + 1e-15);
#endif
        }
    }
}

TEST_CASE("rope table: composing the digits of a position gives its rotation", "[rope]") {
    for (bool neox : {false, true})
        for (bool yarn : {false, true}) {
            const Rope r = make_rope(neox, yarn);
            const kvrt::ref::RopeParams p = ref_params(r);
            std::vector<float> table;
            r.position_table(&table);
            const int pairs = r.n_rot / 2;
            REQUIRE(table.size() * 4 == r.position_table_bytes());
            REQUIRE(table.size() == size_t{2} * Rope::kPositionDigits * Rope::kPositionDigitValues * pairs);
            double worst = 0.0;
            for (uint32_t pos : {0u, 1u, 255u, 256u, 131000u, 1000003u, 16777215u, 16777216u, 1000000000u}) {
                for (int i = 0; i < pairs; ++i) {
                    // In f32 as the kernels do it: one product per digit.
                    float c = 1.0f, s = 0.0f;
                    for (int k = 0; k < Rope::kPositionDigits; ++k) {
                        const uint32_t e = (pos >> (Rope::kPositionDigitBits * k)) & (Rope::kPositionDigitValues - 1);
                        const size_t at = 2 * ((size_t(k) * Rope::kPositionDigitValues + e) * pairs + i);
                        const float tc = table[at], ts = table[at + 1];
                        const float nc = c * tc - s * ts, ns = c * ts + s * tc;
                        c = nc;
                        s = ns;
                    }
                    const double a = kvrt::ref::rope_angle(p, i, pos);
                    // The reference's own double product errs by up to
                    // pos * theta * 2^-53 rad.
                    const double slack = 4.0 * std::fabs(a) * DBL_EPSILON;
                    const double err = std::max(std::fabs(c - std::cos(a)), std::fabs(s - std::sin(a))) - slack;
                    worst = std::max(worst, err);
                }
            }
            INFO("neox " << neox << " yarn " << yarn << " worst |error| " << worst);
            // Four f32 table entries, three complex products: a few f32 ulps of 1.
            CHECK(worst <= 6e-7);
        }
}
