// Element formats shared by the kernels that write or read K/V: exact f32->f16
// conversion, GGML-compatible Q8_0 / Q4_0 blocks, and the codes of the
// static-scale integer types.
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

// a / b correctly rounded in practice, on any conformant device. Vulkan
// allows division 2.5 ulp, so the quotient q of a * (1 / b) gets one Newton
// step, q + (a - q b) / b, whose remainder a - q b is exact. That takes no
// fma (the spec lets fma round twice): both factors are scaled to [0.5, 1)
// (frexp, ldexp: exact), their product split exactly into p + e with
// correctly rounded multiplications and additions only (Dekker: each factor
// cut into halves of 12 bits), and a - p is exact as p is within a few ulps
// of a.
float kvrt_div(float a, float b) {
    precise float r = KVRT_FDIV(1.0, b);
    precise float q = a * r;
    if (q == 0.0 || isinf(q) || isnan(q)) return q;
    int qe, be;
    const float qm = frexp(q, qe), bm = frexp(b, be);
    precise float am = ldexp(a, -(qe + be));
    precise float p = qm * bm;
    precise float cq = 4097.0 * qm;
    precise float qh = cq - (cq - qm);
    precise float ql = qm - qh;
    precise float cb = 4097.0 * bm;
    precise float bh = cb - (cb - bm);
    precise float bl = bm - bh;
    precise float e = ((qh * bh - p) + qh * bl + ql * bh) + ql * bl;
    precise float rem = (am - p) - e;
    precise float fix = ldexp(rem, qe + be) * r;
    return q + fix;
}

// C's roundf: halves away from zero. (round() may round halves either way, and
// floor(x + 0.5) is wrong just below 0.5.)
float kvrt_roundf(float x) {
    const float t = trunc(x);
    return abs(x - t) >= 0.5 ? t + sign(x) : t;
}

// Static-scale integer code (U8_STATIC, U16_STATIC) of x, bit-exact with the
// CPU rule q = clamp(roundf(x * inv) + zero_point, 0, qmax):
// - x * inv is one correctly rounded f32 multiply; `precise` keeps the
//   compiler from contracting it into an fma with a later add.
// - The product is clamped to +-2^17 before rounding so that the conversion to
//   int is defined for any input (huge values, infinities); every code the
//   clamp changes saturates at 0 or qmax either way (|zero_point| <= 65535).
// - kvrt_roundf rounds halves away from zero exactly, then zero_point is added
//   and the result clamped in integer arithmetic.
// NaN inputs are the caller's to catch (see kvrt_is_nan_bits): a NaN takes
// the code zero_point, which dequantizes to exactly 0. A device may flush a
// subnormal x to zero; that changes no code unless scale < 2^-125 (only then
// can a subnormal reach half a step).
uint kvrt_quantize_static(float x, float inv, int zero_point, int qmax) {
    precise float s = x * inv;
    const float c = clamp(s, -131072.0, 131072.0);
    return uint(clamp(int(kvrt_roundf(c)) + zero_point, 0, qmax));
}

// True when the f32 bits are a NaN. Tested on the bits because comparisons and
// isnan() on NaN are not reliable in every driver's float mode.
bool kvrt_is_nan_bits(uint bits) { return (bits & 0x7fffffffu) > 0x7f800000u; }

// True when the f16 bits are a NaN.
bool kvrt_is_nan_half(uint h) { return (h & 0x7fffu) > 0x7c00u; }

// Block byte writer: a block pair's bytes collected in words.
#define KVRT_PUT_BYTE(words, pos, val) words[(pos) >> 2] |= (uint(val) & 0xffu) << (((pos) & 3u) * 8u)

// GGML's Q8_0 / Q4_0 quantization of one block of 32 values, written as bytes
// from byte `base` of the word array `w` (zeroed by the caller). Defined as
// macros so one definition serves word arrays of any length.
#define KVRT_DEFINE_QUANTIZERS(NW)                                                     \
    void kvrt_quantize_q8_0(float x[32], uint base, inout uint w[NW]) {                \
        float amax = 0.0;                                                              \
        for (uint j = 0u; j < 32u; ++j) amax = max(amax, abs(x[j]));                   \
        const float d = kvrt_div(amax, 127.0);                                         \
        const float id = d != 0.0 ? kvrt_div(1.0, d) : 0.0;                            \
        const uint dh = kvrt_f32_to_f16(d);                                            \
        KVRT_PUT_BYTE(w, base, dh);                                                    \
        KVRT_PUT_BYTE(w, base + 1u, dh >> 8);                                          \
        for (uint j = 0u; j < 32u; ++j) {                                              \
            precise float s = x[j] * id;                                               \
            KVRT_PUT_BYTE(w, base + 2u + j, uint(int(kvrt_roundf(s))));                \
        }                                                                              \
    }                                                                                  \
    void kvrt_quantize_q4_0(float x[32], uint base, inout uint w[NW]) {                \
        /* The value of largest magnitude, keeping its sign (first on ties). */        \
        float amax = 0.0, m = 0.0;                                                     \
        for (uint j = 0u; j < 32u; ++j) {                                              \
            if (amax < abs(x[j])) {                                                    \
                amax = abs(x[j]);                                                      \
                m = x[j];                                                              \
            }                                                                          \
        }                                                                              \
        const float d = kvrt_div(m, -8.0);                                             \
        const float id = d != 0.0 ? kvrt_div(1.0, d) : 0.0;                            \
        const uint dh = kvrt_f32_to_f16(d);                                            \
        KVRT_PUT_BYTE(w, base, dh);                                                    \
        KVRT_PUT_BYTE(w, base + 1u, dh >> 8);                                          \
        for (uint j = 0u; j < 16u; ++j) {                                              \
            precise float s0 = x[j] * id;                                              \
            precise float s1 = x[j + 16u] * id;                                        \
            precise float t0 = s0 + 8.5;                                               \
            precise float t1 = s1 + 8.5;                                               \
            /* truncation, as the C cast does */                                       \
            const uint q0 = min(15u, uint(int(t0)));                                   \
            const uint q1 = min(15u, uint(int(t1)));                                   \
            KVRT_PUT_BYTE(w, base + 2u + j, q0 | (q1 << 4));                           \
        }                                                                              \
    }

#endif
