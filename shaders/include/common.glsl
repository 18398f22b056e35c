// Shared declarations of every kvrt kernel.
#ifndef KVRT_COMMON_GLSL
#define KVRT_COMMON_GLSL

// The workgroup size is a specialization constant (id 0), so one SPIR-V
// serves devices with different preferred sizes.
layout(local_size_x_id = 0, local_size_y = 1, local_size_z = 1) in;

// Invocations of the whole dispatch, for grid-stride loops: a kernel launched
// with fewer workgroups than elements walks the range in steps of this size.
uint kvrt_grid_stride() { return gl_NumWorkGroups.x * gl_WorkGroupSize.x; }

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

#endif
