// Error metrics used by every GPU-versus-reference test (SPEC.md section 8).
// Header-only; a and b may be float or double arrays in any combination.
#pragma once

#include <cmath>
#include <cstddef>
#include <limits>
#include <stdexcept>
#include <vector>

namespace kvrt::ref {

// Normalized mean squared error of a against the reference b:
//   sum((a - b)^2) / sum(b^2), accumulated in double.
// When b is all zero the ratio is undefined; it is defined as 0 if a is also
// all zero (exact match) and +infinity otherwise (any error against a zero
// reference fails every threshold). A NaN anywhere gives NaN, which fails
// every `<=` comparison. n == 0 gives 0.
template <typename A, typename B>
double nmse(const A* a, const B* b, size_t n) {
    double err = 0.0;
    double ref = 0.0;
    for (size_t i = 0; i < n; ++i) {
        const double ai = static_cast<double>(a[i]);
        const double bi = static_cast<double>(b[i]);
        err += (ai - bi) * (ai - bi);
        ref += bi * bi;
    }
    if (std::isnan(err) || std::isnan(ref)) {
        return std::numeric_limits<double>::quiet_NaN();
    }
    if (ref == 0.0) {
        return err == 0.0 ? 0.0 : std::numeric_limits<double>::infinity();
    }
    return err / ref;
}

// nmse over two vectors of equal length; throws std::invalid_argument otherwise.
template <typename A, typename B>
double nmse(const std::vector<A>& a, const std::vector<B>& b) {
    if (a.size() != b.size()) {
        throw std::invalid_argument("kvrt::ref::nmse: length mismatch");
    }
    return nmse(a.data(), b.data(), a.size());
}

// Largest |a[i] - b[i]| (0 for n == 0; NaN if any difference is NaN).
template <typename A, typename B>
double max_abs_diff(const A* a, const B* b, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; ++i) {
        const double diff = std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
        if (std::isnan(diff)) {
            return std::numeric_limits<double>::quiet_NaN();
        }
        if (diff > m) {
            m = diff;
        }
    }
    return m;
}

// max_abs_diff over two vectors of equal length; throws on a length mismatch.
template <typename A, typename B>
double max_abs_diff(const std::vector<A>& a, const std::vector<B>& b) {
    if (a.size() != b.size()) {
        throw std::invalid_argument("kvrt::ref::max_abs_diff: length mismatch");
    }
    return max_abs_diff(a.data(), b.data(), a.size());
}

}  // namespace kvrt::ref
