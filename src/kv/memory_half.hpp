// Host-side helpers of the fixed-capacity memory: IEEE binary16 conversions
// (round to nearest, ties to even, like packHalf2x16 on conforming drivers)
// and the SplitMix64 values of KVRT_MEMORY_SOURCE_SEED.
#pragma once

#include <cstdint>
#include <cstring>

namespace kvrt::kv::memory_half {

inline uint16_t from_f32(float f) {
    uint32_t x = 0;
    std::memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t mant = x & 0x7FFFFFu;
    const int32_t exp = static_cast<int32_t>((x >> 23) & 0xFFu);
    if (exp == 0xFF) return static_cast<uint16_t>(sign | 0x7C00u | (mant ? 0x200u | (mant >> 13) : 0u));
    const int32_t e = exp - 127 + 15;
    if (e >= 31) return static_cast<uint16_t>(sign | 0x7C00u);
    if (e <= 0) {  // subnormal or zero
        if (e < -10) return static_cast<uint16_t>(sign);
        mant |= 0x800000u;
        const uint32_t shift = static_cast<uint32_t>(14 - e);
        uint32_t h = mant >> shift;
        const uint32_t rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (h & 1u))) ++h;
        return static_cast<uint16_t>(sign | h);
    }
    uint32_t h = (static_cast<uint32_t>(e) << 10) | (mant >> 13);
    const uint32_t rem = mant & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry into the exponent is correct
    return static_cast<uint16_t>(sign | h);
}

inline float to_f32(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    uint32_t bits = 0;
    if (e == 0) {
        if (m == 0) {
            bits = sign;
        } else {  // subnormal: normalize
            uint32_t mm = m;
            int32_t ee = -1;
            do {
                ++ee;
                mm <<= 1;
            } while ((mm & 0x400u) == 0);
            bits = sign | (static_cast<uint32_t>(127 - 15 - ee) << 23) | ((mm & 0x3FFu) << 13);
        }
    } else if (e == 31) {
        bits = sign | 0x7F800000u | (m << 13);
    } else {
        bits = sign | ((e + 112u) << 23) | (m << 13);
    }
    float f = 0.0f;
    std::memcpy(&f, &bits, 4);
    return f;
}

// Element i of a KVRT_MEMORY_SOURCE_SEED initialization: uniform in [-1, 1).
inline float seeded(uint64_t seed, uint64_t i) {
    uint64_t z = seed + i + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return static_cast<float>(z >> 40) * (1.0f / 8388608.0f) - 1.0f;
}

}  // namespace kvrt::kv::memory_half
