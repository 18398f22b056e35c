// K/V types and host encodings; see kv_types.hpp.
#include "kv_types.hpp"

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

}  // namespace cli
