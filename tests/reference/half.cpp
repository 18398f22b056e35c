// fp16 <-> f32 conversions; see half.hpp.
#include "reference/half.hpp"

#include <cstring>

namespace kvrt::ref {

uint32_t f32_bits(float x) {
    uint32_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    return bits;
}

float f32_from_bits(uint32_t bits) {
    float x;
    std::memcpy(&x, &bits, sizeof x);
    return x;
}

namespace {

// Shifts `value` right by `shift` (1..31) bits, rounding to nearest with ties
// to even on the bits shifted out.
uint32_t shift_right_rne(uint32_t value, unsigned shift) {
    const uint32_t kept = value >> shift;
    const uint32_t rest = value & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rest > half || (rest == half && (kept & 1u) != 0u)) {
        return kept + 1u;
    }
    return kept;
}

}  // namespace

uint16_t f32_to_f16(float x) {
    const uint32_t bits = f32_bits(x);
    const uint32_t sign = (bits >> 16) & 0x8000u;
    const uint32_t mag = bits & 0x7FFFFFFFu;
    const uint32_t exp32 = mag >> 23;          // biased f32 exponent
    const uint32_t man32 = mag & 0x7FFFFFu;

    if (exp32 == 0xFFu) {
        if (man32 == 0u) {
            return static_cast<uint16_t>(sign | 0x7C00u);  // infinity
        }
        // NaN: keep the payload's top bits, force the quiet bit.
        return static_cast<uint16_t>(sign | 0x7C00u | 0x0200u | (man32 >> 13));
    }
    // f16 exponent bias is 15, f32's is 127: e16 = e32 - 112.
    if (exp32 >= 143u) {
        // |x| >= 2^16: beyond the largest finite f16 (65504) by more than half
        // an ulp, so it rounds to infinity.
        return static_cast<uint16_t>(sign | 0x7C00u);
    }
    if (exp32 >= 113u) {
        // Normal f16 range (2^-14 <= |x| < 2^16). Drop 13 mantissa bits with
        // rounding; a carry out of the mantissa correctly bumps the exponent,
        // and 65520 <= |x| < 65536 carries into the infinity encoding.
        const uint32_t unrounded = ((exp32 - 112u) << 23) | man32;
        return static_cast<uint16_t>(sign | shift_right_rne(unrounded, 13));
    }
    if (exp32 < 102u) {
        // |x| < 2^-25: at most half of the smallest subnormal (2^-24); even the
        // exact half (2^-25, exp32 == 102 with zero mantissa) is handled below
        // and rounds to the even value 0.
        return static_cast<uint16_t>(sign);
    }
    // Subnormal f16: value = m * 2^-24 with m = (1.man32) * 2^(e32 - 127 + 24).
    // With the implicit bit, (1.man32) * 2^23 is an integer, so
    // m = full >> (126 - exp32), shift in 14..24. Rounding up to 0x400 gives
    // the smallest normal, which is the right encoding.
    const uint32_t full = man32 | 0x800000u;
    return static_cast<uint16_t>(sign | shift_right_rne(full, 126u - exp32));
}

float f16_to_f32(uint16_t h) {
    const uint32_t sign = (static_cast<uint32_t>(h) & 0x8000u) << 16;
    const uint32_t exp16 = (h >> 10) & 0x1Fu;
    uint32_t man = h & 0x3FFu;

    if (exp16 == 0x1Fu) {
        return f32_from_bits(sign | 0x7F800000u | (man << 13));  // inf / NaN
    }
    if (exp16 != 0u) {
        return f32_from_bits(sign | ((exp16 + 112u) << 23) | (man << 13));
    }
    if (man == 0u) {
        return f32_from_bits(sign);  // +-0
    }
    // Subnormal: normalize so the leading one becomes the implicit bit.
    uint32_t exp32 = 113u;  // exponent of 2^-14, the subnormal scale
    while ((man & 0x400u) == 0u) {
        man <<= 1;
        --exp32;
    }
    man &= 0x3FFu;
    return f32_from_bits(sign | (exp32 << 23) | (man << 13));
}

float round_to_f16(float x) { return f16_to_f32(f32_to_f16(x)); }

std::vector<uint8_t> encode_values(const std::vector<float>& x, bool as_f16) {
    std::vector<uint8_t> out(x.size() * (as_f16 ? 2 : 4));
    for (size_t i = 0; i < x.size(); ++i) {
        if (as_f16) {
            const uint16_t h = f32_to_f16(x[i]);
            std::memcpy(&out[2 * i], &h, 2);
        } else {
            std::memcpy(&out[4 * i], &x[i], 4);
        }
    }
    return out;
}

}  // namespace kvrt::ref
