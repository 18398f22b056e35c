// Shared declarations of every kvrt kernel.
#ifndef KVRT_COMMON_GLSL
#define KVRT_COMMON_GLSL

// The workgroup size is a specialization constant (id 0), so one SPIR-V
// serves devices with different preferred sizes.
layout(local_size_x_id = 0, local_size_y = 1, local_size_z = 1) in;

// Invocations of the whole dispatch, for grid-stride loops: a kernel launched
// with fewer workgroups than elements walks the range in steps of this size.
uint kvrt_grid_stride() { return gl_NumWorkGroups.x * gl_WorkGroupSize.x; }

// Attention's partial result per row and split (attention.comp,
// attention_tiled.comp, attention_merge.comp): [max, sum, six unused floats,
// weighted V (D_V floats)], the weighted V 32-byte aligned so that it is
// written in 16- or 32-byte units (every store site is a loop over the SIMD
// lanes on llvmpipe). ops::kPartialHead on the host.
const uint KVRT_PARTIAL_HEAD = 8u;

// f16 -> f32 conversions of every kernel. KVRT_SOFT_F16 (specialization
// constant 31, set by the context for every pipeline) picks an exact
// integer conversion instead of unpackHalf2x16: lavapipe's LLVM 15 on ARM
// hosts (Debian 12) cannot compile the half-to-float conversions that
// unpackHalf2x16 becomes there ("LLVM ERROR: Cannot select: v4f32 =
// truncate ..." or "... AArch64ISD::VLSHR", which aborts the process). The
// constant folds the other branch away before the driver's compiler sees
// it, so every other device keeps its native conversion. Both give the same
// bits (NaNs come out quiet with their payload, as from the hardware).
layout(constant_id = 31) const uint KVRT_SOFT_F16 = 0u;

float kvrt_f16_to_f32_soft(uint h) {
    const uint sign = (h & 0x8000u) << 16;
    const uint expo = (h >> 10) & 0x1fu;
    const uint mant = h & 0x3ffu;
    if (expo == 0x1fu) return uintBitsToFloat(sign | 0x7f800000u | (mant != 0u ? 0x400000u | (mant << 13) : 0u));
    if (expo == 0u) return uintBitsToFloat(sign | floatBitsToUint(float(mant) * 5.9604644775390625e-8));  // 2^-24
    return uintBitsToFloat(sign | ((expo + 112u) << 23) | (mant << 13));
}

// The f16 in the low 16 bits of h, as f32.
float kvrt_f16_to_f32(uint h) {
    if (KVRT_SOFT_F16 != 0u) return kvrt_f16_to_f32_soft(h);
    return unpackHalf2x16(h & 0xffffu).x;
}

// unpackHalf2x16, or its exact integer form (see above).
vec2 kvrt_unpack_half2x16(uint w) {
    if (KVRT_SOFT_F16 != 0u) return vec2(kvrt_f16_to_f32_soft(w), kvrt_f16_to_f32_soft(w >> 16));
    return unpackHalf2x16(w);
}

// Division where its precision matters (normalizing a softmax, a quantizer's
// reciprocal, soft-capping): a / b, or under KVRT_SPEC_MIN the quotient the
// Vulkan spec allows at worst.
#ifdef KVRT_SPEC_MIN
#define KVRT_FDIV(a, b) kvrt_min_div(a, b)
#else
#define KVRT_FDIV(a, b) ((a) / (b))
#endif

#ifdef KVRT_SPEC_MIN
// The spec-minimum build (CMake option KVRT_SPEC_MIN_PRECISION): every
// transcendental the kernels use returns a result as far from the exact one
// as "Precision and Operation of SPIR-V Instructions" allows for 32-bit
// floats (less the driver's own error, taken as 1 ULP), and NaN outside the
// range where the spec defines it; fma is a separate multiply and add, which
// the spec lets it be. Each result moves up or down by a sign hashed from its
// input, so errors do not cancel on average and repeat exactly from run to
// run. lavapipe computes these functions far better than most GPUs must; a
// kernel that passes its accuracy tests built this way relies on nothing
// more than the spec.

// One ULP of r (2^-149 at and below the smallest normal).
float kvrt_min_ulp(float r) {
    const uint e = (floatBitsToUint(r) >> 23) & 0xFFu;  // biased exponent: an ULP is 2^(e - 150)
    if (e >= 24u) return uintBitsToFloat((e - 23u) << 23);
    return uintBitsToFloat(1u << (e == 0u ? 0u : e - 1u));
}
// +1 or -1, from the bits of x.
float kvrt_min_sign(float x) {
    uint h = floatBitsToUint(x);
    h ^= h >> 16;
    h *= 0x7feb352du;
    h ^= h >> 15;
    h *= 0x846ca68bu;
    h ^= h >> 16;
    return (h & 1u) != 0u ? 1.0 : -1.0;
}
// r moved by n of its ULPs, in the direction x picks; infinities and NaN stay.
float kvrt_min_ulps(float r, float n, float x) {
    if (isinf(r) || isnan(r)) return r;
    return r + kvrt_min_sign(x) * n * kvrt_min_ulp(r);
}
// exp, exp2: 3 + 2 |x| ULP of finite x (exp(-inf) stays 0, as the online
// softmax's first step needs and every device gives). The bound grows with
// |x|: exp of the lowest float may be about 1e-6 instead of 0.
float kvrt_min_exp_err(float r, float x) {
    if (isinf(x) || isinf(r) || isnan(r)) return r;
    const float u = kvrt_min_ulp(r);
    return r + kvrt_min_sign(x) * (2.0 * u + (2.0 * u) * abs(x));
}
float kvrt_min_exp(float x) { return kvrt_min_exp_err(exp(x), x); }
float kvrt_min_exp2(float x) { return kvrt_min_exp_err(exp2(x), x); }
vec2 kvrt_min_exp(vec2 x) { return vec2(kvrt_min_exp(x.x), kvrt_min_exp(x.y)); }
vec4 kvrt_min_exp(vec4 x) { return vec4(kvrt_min_exp(x.xy), kvrt_min_exp(x.zw)); }
// log, log2: 3 ULP outside [0.5, 2], an absolute 2^-21 inside; undefined
// below 0.
float kvrt_min_log_err(float r, float x) {
    if (x < 0.0) return uintBitsToFloat(0x7FC00000u);
    if (x >= 0.5 && x <= 2.0) return r + kvrt_min_sign(x) * (1.0 / 2097152.0 - 1.0 / 16777216.0);
    return kvrt_min_ulps(r, 2.0, x);
}
float kvrt_min_log(float x) { return kvrt_min_log_err(log(x), x); }
float kvrt_min_log2(float x) { return kvrt_min_log_err(log2(x), x); }
// Division: 2.5 ULP for |b| in [2^-126, 2^126] (the driver's own quotient
// taken as correctly rounded).
float kvrt_min_div(float a, float b) {
    const float q = a / b;
    return abs(b) >= 1.17549435e-38 && abs(b) <= 8.50705917e37 ? kvrt_min_ulps(q, 2.0, a + b) : q;
}
// pow: as exp2(y * log2(x)) computed with the two above; undefined for x < 0,
// and for x = 0 with y <= 0.
float kvrt_min_pow(float x, float y) {
    if (x < 0.0 || (x == 0.0 && y <= 0.0)) return uintBitsToFloat(0x7FC00000u);
    return kvrt_min_exp2(y * kvrt_min_log2(x));
}
// tanh: as (exp(x) - exp(-x)) / (exp(x) + exp(-x)) computed with the above
// (NaN once exp overflows, as a driver that computes it so may give).
float kvrt_min_tanh(float x) {
    const float a = kvrt_min_exp(x), b = kvrt_min_exp(-x);
    return kvrt_min_div(a - b, a + b);
}
// sin, cos: an absolute 2^-11 on [-pi, pi], nothing outside.
float kvrt_min_trig(float r, float x) {
    if (!(abs(x) <= 3.14159265)) return uintBitsToFloat(0x7FC00000u);
    return r + kvrt_min_sign(x) * (1.0 / 2048.0 - 1.0 / 1048576.0);
}
float kvrt_min_sin(float x) { return kvrt_min_trig(sin(x), x); }
float kvrt_min_cos(float x) { return kvrt_min_trig(cos(x), x); }
// inversesqrt: 2 ULP; sqrt as 1 / inversesqrt.
float kvrt_min_inversesqrt(float x) { return kvrt_min_ulps(inversesqrt(x), 1.0, x); }
float kvrt_min_sqrt(float x) { return x == 0.0 ? 0.0 : kvrt_min_div(1.0, kvrt_min_inversesqrt(x)); }

#define exp(x) kvrt_min_exp(x)
#define exp2(x) kvrt_min_exp2(x)
#define log(x) kvrt_min_log(x)
#define log2(x) kvrt_min_log2(x)
#define pow(x, y) kvrt_min_pow(x, y)
#define tanh(x) kvrt_min_tanh(x)
#define sin(x) kvrt_min_sin(x)
#define cos(x) kvrt_min_cos(x)
#define inversesqrt(x) kvrt_min_inversesqrt(x)
#define sqrt(x) kvrt_min_sqrt(x)
#define fma(a, b, c) ((a) * (b) + (c))
#endif

#endif
