// Shared declarations of the fixed-capacity memory kernels (memory_*.comp).
//
// Data layout (see src/ops/memory_layout.hpp): every matrix the matrix-product
// kernels touch is row-major with rows padded to a multiple of 8 elements and
// 32-byte aligned, so a lane moves 8 consecutive elements ("a group") at once.
//
// Variants (one source, chosen at build time):
//   MEM_WIDE      groups move as u64vec4: half as many load instructions as
//                 vec4. On CPU implementations (lavapipe), where each load is a
//                 loop over the SIMD lanes, this halves the cost of the
//                 memory-bound inner loops. Needs shaderInt64.
//   (default)     portable: groups move as two vec4; needs no optional feature.
//   MEM_ROWS, MEM_COLS  the register tile of one invocation in the score and
//                 read products: MEM_ROWS rows x MEM_COLS groups of 8 columns
//                 (16 x 2 for WIDE, which targets CPUs: spills are cheap there
//                 and a larger tile divides the loads per multiply-add; 8 x 1
//                 for the portable one).
#ifndef KVRT_MEMORY_COMMON_GLSL
#define KVRT_MEMORY_COMMON_GLSL

#extension GL_EXT_control_flow_attributes : require

#include "common.glsl"

#ifdef MEM_WIDE
#extension GL_ARB_gpu_shader_int64 : require
#define GROUP_T u64vec4
// Element group i of an array of GROUP_T.
#define LOAD8(arr, i, lo, hi)                                                        \
    {                                                                                \
        const u64vec4 g_ = arr[i];                                                   \
        lo = uintBitsToFloat(uvec4(unpackUint2x32(g_.x), unpackUint2x32(g_.y)));     \
        hi = uintBitsToFloat(uvec4(unpackUint2x32(g_.z), unpackUint2x32(g_.w)));     \
    }
#define STORE8(arr, i, lo, hi)                                                       \
    {                                                                                \
        const uvec4 l_ = floatBitsToUint(lo), h_ = floatBitsToUint(hi);              \
        arr[i] = u64vec4(packUint2x32(l_.xy), packUint2x32(l_.zw), packUint2x32(h_.xy), \
                         packUint2x32(h_.zw));                                       \
    }
// 8 halves (16 bytes) as u64vec2.
#define HGROUP_T u64vec2
#define LOAD8H(arr, i, lo, hi)                                                       \
    {                                                                                \
        const u64vec2 g_ = arr[i];                                                   \
        const uvec2 a_ = unpackUint2x32(g_.x), b_ = unpackUint2x32(g_.y);            \
        lo = vec4(kvrt_unpack_half2x16(a_.x), kvrt_unpack_half2x16(a_.y));                       \
        hi = vec4(kvrt_unpack_half2x16(b_.x), kvrt_unpack_half2x16(b_.y));                       \
    }
#define STORE8H(arr, i, lo, hi)                                                      \
    arr[i] = u64vec2(packUint2x32(uvec2(packHalf2x16(lo.xy), packHalf2x16(lo.zw))),  \
                     packUint2x32(uvec2(packHalf2x16(hi.xy), packHalf2x16(hi.zw))))
#define MEM_ROWS 16
#define MEM_COLS 2
#else
#define GROUP_T vec4
#define LOAD8(arr, i, lo, hi)        \
    {                                \
        lo = arr[2u * (i)];          \
        hi = arr[2u * (i) + 1u];     \
    }
#define STORE8(arr, i, lo, hi)       \
    {                                \
        arr[2u * (i)] = lo;          \
        arr[2u * (i) + 1u] = hi;     \
    }
#define HGROUP_T uvec4
#define LOAD8H(arr, i, lo, hi)                                                       \
    {                                                                                \
        const uvec4 g_ = arr[i];                                                     \
        lo = vec4(kvrt_unpack_half2x16(g_.x), kvrt_unpack_half2x16(g_.y));                       \
        hi = vec4(kvrt_unpack_half2x16(g_.z), kvrt_unpack_half2x16(g_.w));                       \
    }
#define STORE8H(arr, i, lo, hi) \
    arr[i] = uvec4(packHalf2x16(lo.xy), packHalf2x16(lo.zw), packHalf2x16(hi.xy), packHalf2x16(hi.zw))
#define MEM_ROWS 8
#define MEM_COLS 1
#endif

// Sub-chunk length: a chunk's reads use the state at the start of their
// 64-token sub-chunk plus a causal 64 x 64 block (src/ops/memory_layout.hpp).
#define MEM_SUBCHUNK 64u

// acc += a[0] * b[0] + ... + a[7] * b[7] for one row (a: the row's 8 values as
// lo/hi, b: 8 groups of the other operand).
#define FMA8(acc_lo, acc_hi, a_lo, a_hi, b_lo, b_hi)                                             \
    {                                                                                            \
        acc_lo += a_lo.x * b_lo[0] + a_lo.y * b_lo[1] + a_lo.z * b_lo[2] + a_lo.w * b_lo[3] +     \
                  a_hi.x * b_lo[4] + a_hi.y * b_lo[5] + a_hi.z * b_lo[6] + a_hi.w * b_lo[7];      \
        acc_hi += a_lo.x * b_hi[0] + a_lo.y * b_hi[1] + a_lo.z * b_hi[2] + a_lo.w * b_hi[3] +     \
                  a_hi.x * b_hi[4] + a_hi.y * b_hi[5] + a_hi.z * b_hi[6] + a_hi.w * b_hi[7];      \
    }

#endif
