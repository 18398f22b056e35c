// K/V types and host encodings; see kv_types.hpp.
#include "kv_types.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>

namespace cli {

namespace {

// value >> shift (1..31), rounded to nearest with ties to even on the bits
// shifted out.
uint32_t shift_right_rne(uint32_t value, unsigned shift) {
    const uint32_t kept = value >> shift;
    const uint32_t rest = value & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    return rest > half || (rest == half && (kept & 1u)) ? kept + 1u : kept;
}

}  // namespace

bool parse_type(const std::string& text, const char* option, kvrt_type* out) {
    kvrt_type t = KVRT_TYPE_UNDEFINED;
    if (kvrt_type_from_name(text.c_str(), &t) != KVRT_SUCCESS) {
        std::fprintf(stderr, "error: --%s: unknown type '%s' (%s)\n", option, text.c_str(), type_names().c_str());
        return false;
    }
    *out = t;
    return true;
}

const char* type_name(kvrt_type t) {
    const char* name = kvrt_type_name(t);
    return name ? name : "?";
}

std::string type_names() {
    // The library names a contiguous range of values from 1; ask until it
    // stops naming them.
    std::string out;
    for (int32_t v = 1; const char* name = kvrt_type_name(static_cast<kvrt_type>(v)); ++v) {
        if (!out.empty()) out += ", ";
        out += name;
    }
    return out;
}

StaticScales::StaticScales(const std::vector<QuantScale>& k, const std::vector<QuantScale>& v) {
    for (const QuantScale& q : k) {
        k_scales_.push_back(q.scale);
        k_zero_points_.push_back(q.zero_point);
    }
    for (const QuantScale& q : v) {
        v_scales_.push_back(q.scale);
        v_zero_points_.push_back(q.zero_point);
    }
    desc_.count = static_cast<uint32_t>(k.size() > v.size() ? k.size() : v.size());
    if (!k.empty()) {
        desc_.k_scales = k_scales_.data();
        desc_.k_zero_points = k_zero_points_.data();
    }
    if (!v.empty()) {
        desc_.v_scales = v_scales_.data();
        desc_.v_zero_points = v_zero_points_.data();
    }
}

uint16_t f32_to_f16(float x) {
    uint32_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    const uint32_t sign = (bits >> 16) & 0x8000u;
    const uint32_t exp32 = (bits >> 23) & 0xFFu;
    const uint32_t man32 = bits & 0x7FFFFFu;
    if (exp32 == 0xFFu)  // infinity, or NaN with its top payload bits and the quiet bit
        return static_cast<uint16_t>(sign | 0x7C00u | (man32 ? 0x0200u | (man32 >> 13) : 0u));
    if (exp32 >= 143u) return static_cast<uint16_t>(sign | 0x7C00u);  // |x| >= 2^16: infinity
    if (exp32 >= 113u)  // normal range; a carry out of the mantissa bumps the exponent
        return static_cast<uint16_t>(sign | shift_right_rne(((exp32 - 112u) << 23) | man32, 13));
    if (exp32 < 102u) return static_cast<uint16_t>(sign);  // below half the smallest subnormal
    return static_cast<uint16_t>(sign | shift_right_rne(man32 | 0x800000u, 126u - exp32));  // subnormal
}

float f16_to_f32(uint16_t h) {
    const uint32_t sign = (static_cast<uint32_t>(h) & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu;
    uint32_t man = h & 0x3FFu;
    uint32_t bits;
    if (exp == 0x1Fu) {
        bits = sign | 0x7F800000u | (man << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else {  // subnormal: normalize
        exp = 113;
        while (!(man & 0x400u)) {
            man <<= 1;
            --exp;
        }
        bits = sign | (exp << 23) | ((man & 0x3FFu) << 13);
    }
    float x;
    std::memcpy(&x, &bits, sizeof x);
    return x;
}

uint32_t static_quantize(float x, float inv, int32_t zero_point, uint32_t qmax) {
    const float scaled = x * inv;  // one f32 rounding, as the kernel's multiply
    if (std::isnan(scaled)) return static_cast<uint32_t>(zero_point);
    const double q = static_cast<double>(std::roundf(scaled)) + zero_point;
    return q <= 0 ? 0u : q >= qmax ? qmax : static_cast<uint32_t>(q);
}

float static_dequantize(uint32_t q, const QuantScale& s) {
    return s.scale * static_cast<float>(static_cast<int64_t>(q) - s.zero_point);
}

}  // namespace cli
