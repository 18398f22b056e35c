#version 450
// Fixed-capacity memory: writes a chunk's read results from the f32 staging
// [tokens][n_heads * value_dim] into the caller's output, converting to f16
// when asked, one invocation per 32-bit output word (rows of f16 output are a
// whole number of words), row t going to batch row idx[idx_base + t].
#include "memory_common.glsl"

layout(std430, set = 0, binding = 0) readonly buffer Stage { float stage[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Dst { uint dst[]; };
layout(std430, set = 0, binding = 2) readonly buffer Idx { uint idx[]; };

layout(push_constant) uniform Push {
    uint words;      // output words of the chunk
    uint row_words;  // words per token row
    uint f16;        // 1: two f16 values per word
    uint dst_base;   // word index of batch row 0 in Dst
    uint idx_base;
} pc;

void main() {
    const uint stride = kvrt_grid_stride();
    for (uint w = gl_GlobalInvocationID.x; w < pc.words; w += stride) {
        const uint t = w / pc.row_words, wr = w % pc.row_words;
        const uint o = pc.dst_base + idx[pc.idx_base + t] * pc.row_words + wr;
        if (pc.f16 != 0u) {
            const uint e = t * pc.row_words * 2u + 2u * wr;
            dst[o] = packHalf2x16(vec2(stage[e], stage[e + 1u]));
        } else {
            dst[o] = floatBitsToUint(stage[t * pc.row_words + wr]);
        }
    }
}
