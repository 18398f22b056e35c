#version 450
// Fixed-capacity memory: gathers one per-token input (wq, wv or q) of a chunk
// into the padded f32 layout of the working memory. One invocation writes one
// group of 8 elements of one row of one head; padding (elements past `dim`,
// rows past `tokens`) is written as zeros, so later products never see stale
// data. F16 sources are read as 32-bit words and unpacked with kvrt_f16_to_f32
// (no 16-bit storage or arithmetic needed, and faster on lavapipe).
#include "memory_common.glsl"

layout(std430, set = 0, binding = 0) readonly buffer Src { uint src[]; };   // f32 bits or f16 pairs
layout(std430, set = 0, binding = 1) writeonly buffer Dst { vec4 dst[]; };  // working memory
layout(std430, set = 0, binding = 2) readonly buffer Idx { uint idx[]; };   // batch rows of the chunk

layout(push_constant) uniform Push {
    uint src_base;     // element index of batch row 0, head 0 in Src (halves for f16)
    uint row_elems;    // elements between batch rows (n_heads * dim)
    uint head0;        // first head of the group
    uint dim;          // elements per head
    uint dim8;         // groups per padded row
    uint tokens;       // rows of the chunk
    uint rows;         // padded rows (a multiple of the tile height)
    uint f16;          // 1: Src holds f16
    uint gathered;     // 1: row t of the chunk is Src row t; 0: Src row idx[idx_base + t]
    uint idx_base;
    uint dst_off;      // group index of head 0, row 0 in Dst
    uint head_stride;  // groups between heads in Dst
} pc;

void main() {
    const uint g = gl_GlobalInvocationID.x;
    if (g >= pc.rows * pc.dim8) return;
    const uint head = gl_WorkGroupID.z;
    const uint t = g / pc.dim8, c8 = g % pc.dim8;
    float v[8] = float[8](0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
    if (t < pc.tokens) {
        const uint row = pc.gathered != 0u ? t : idx[pc.idx_base + t];
        const uint base = pc.src_base + row * pc.row_elems + (pc.head0 + head) * pc.dim + c8 * 8u;
        const uint n = min(8u, pc.dim - c8 * 8u);
        [[unroll]] for (uint i = 0u; i < 8u; ++i) {
            if (i < n) {
                const uint k = base + i;
                if (pc.f16 != 0u) v[i] = kvrt_f16_to_f32(src[k >> 1u] >> ((k & 1u) * 16u));
                else v[i] = uintBitsToFloat(src[k]);
            }
        }
    }
    const uint o = pc.dst_off + head * pc.head_stride + t * pc.dim8 + c8;
    dst[2u * o] = vec4(v[0], v[1], v[2], v[3]);
    dst[2u * o + 1u] = vec4(v[4], v[5], v[6], v[7]);
}
