// Element formats shared by the kernels that write or read K/V: exact f32->f16
// conversion and GGML-compatible Q8_0 / Q4_0 blocks.
#ifndef KVRT_QUANT_GLSL
#define KVRT_QUANT_GLSL

// f32 -> f16 bits, round to nearest even, including subnormals, overflow to
// infinity, and quiet NaNs. Written with integer operations because
// packHalf2x16's rounding is not pinned down by the specification, and F16
// stores must be bit-exact.
uint kvrt_f32_to_f16(float f) {
    const uint x = floatBitsToUint(f);
    const uint sign = (x >> 16) & 0x8000u;
    const uint expo = (x >> 23) & 0xffu;
    uint mant = x & 0x7fffffu;
    if (expo == 0xffu) return sign | 0x7c00u | (mant != 0u ? (0x200u | (mant >> 13)) : 0u);
    const int e = int(expo) - 112;  // rebased to f16's exponent bias
    if (e >= 31) return sign | 0x7c00u;
    if (e <= 0) {
        if (e < -10) return sign;
        mant |= 0x800000u;
        const uint shift = uint(14 - e);
        uint h = mant >> shift;
        const uint rem = mant & ((1u << shift) - 1u);
        const uint halfway = 1u << (shift - 1u);
        if (rem > halfway || (rem == halfway && (h & 1u) != 0u)) h += 1u;
        return sign | h;
    }
    uint h = (uint(e) << 10) | (mant >> 13);
    const uint rem = mant & 0x1fffu;
    // A carry out of the mantissa correctly bumps the exponent (up to inf).
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u) != 0u)) h += 1u;
    return sign | h;
}

// a / b correctly rounded in practice: Vulkan allows 2.5 ulp for division, so
// refine the quotient with one fused Newton step.
float kvrt_div(float a, float b) {
    precise float r = 1.0 / b;
    precise float q = a * r;
    precise float e = fma(-q, b, a);
    return fma(e, r, q);
}

// C's roundf: halves away from zero. (round() may round halves either way, and
// floor(x + 0.5) is wrong just below 0.5.)
float kvrt_roundf(float x) {
    const float t = trunc(x);
    return abs(x - t) >= 0.5 ? t + sign(x) : t;
}

// Block byte writer: a block pair's bytes collected in words.
#define KVRT_PUT_BYTE(words, pos, val) words[(pos) >> 2] |= (uint(val) & 0xffu) << (((pos) & 3u) * 8u)

#endif
