#version 450
// Fixed-capacity memory: the causal block of a chunk's reads. For token t in
// sub-chunk j (64 tokens), A[t][i] = p_t . ww_(64j+i) for the tokens
// 64j+i <= t of the same sub-chunk, 0 otherwise. Both P and WW are rows over
// the slots ([token][m8]), so each invocation owns INTRA_T tokens x 8 columns
// and accumulates dot products of loaded row groups. Blocks entirely above
// the diagonal are written as zeros without computing.
#include "memory_common.glsl"

#ifdef MEM_WIDE
#define INTRA_T 16
#else
#define INTRA_T 8
#endif

layout(std430, set = 0, binding = 0) buffer Work { GROUP_T work[]; };

layout(push_constant) uniform Push {
    uint p_off;      // group index of P (the q half of S, head 0)
    uint w_off;      // group index of WW (the wq half of S, head 0)
    uint a_off;      // group index of A [rows][8] (head 0)
    uint head_work;  // groups between heads
    uint m8;         // groups per row of P and WW
    uint rows;       // padded tokens
    uint tokens;     // rows of the chunk
} pc;

void main() {
    const uint g = gl_GlobalInvocationID.x;
    const uint cols8 = MEM_SUBCHUNK / 8u;
    if (g >= cols8 * ((pc.tokens + INTRA_T - 1u) / INTRA_T)) return;
    const uint head = gl_WorkGroupID.z;
    const uint cg = g % cols8, row0 = (g / cols8) * INTRA_T;
    const uint first = (row0 / MEM_SUBCHUNK) * MEM_SUBCHUNK + 8u * cg;  // token of column 0
    const uint wk = head * pc.head_work;

    float acc[INTRA_T][8];
    [[unroll]] for (uint r = 0u; r < INTRA_T; ++r)
        [[unroll]] for (uint c = 0u; c < 8u; ++c) acc[r][c] = 0.0;
    if (first <= row0 + INTRA_T - 1u && first < pc.tokens) {
        // Columns past the padded tokens (last sub-chunk) repeat the last row;
        // they are masked below.
        uint col[8];
        [[unroll]] for (uint c = 0u; c < 8u; ++c) col[c] = min(first + c, pc.rows - 1u);
        for (uint k8 = 0u; k8 < pc.m8; ++k8) {
            vec4 b_lo[8], b_hi[8];
            [[unroll]] for (uint c = 0u; c < 8u; ++c) LOAD8(work, pc.w_off + wk + col[c] * pc.m8 + k8, b_lo[c], b_hi[c]);
            [[unroll]] for (uint r = 0u; r < INTRA_T; ++r) {
                vec4 a_lo, a_hi;
                LOAD8(work, pc.p_off + wk + (row0 + r) * pc.m8 + k8, a_lo, a_hi);
                [[unroll]] for (uint c = 0u; c < 8u; ++c) acc[r][c] += dot(a_lo, b_lo[c]) + dot(a_hi, b_hi[c]);
            }
        }
    }
    [[unroll]] for (uint r = 0u; r < INTRA_T; ++r) {
        const uint t = row0 + r;
        vec4 lo, hi;
        // Keep token first + c when it is <= t and < tokens.
        lo.x = (first + 0u <= t && first + 0u < pc.tokens) ? acc[r][0] : 0.0;
        lo.y = (first + 1u <= t && first + 1u < pc.tokens) ? acc[r][1] : 0.0;
        lo.z = (first + 2u <= t && first + 2u < pc.tokens) ? acc[r][2] : 0.0;
        lo.w = (first + 3u <= t && first + 3u < pc.tokens) ? acc[r][3] : 0.0;
        hi.x = (first + 4u <= t && first + 4u < pc.tokens) ? acc[r][4] : 0.0;
        hi.y = (first + 5u <= t && first + 5u < pc.tokens) ? acc[r][5] : 0.0;
        hi.z = (first + 6u <= t && first + 6u < pc.tokens) ? acc[r][6] : 0.0;
        hi.w = (first + 7u <= t && first + 7u < pc.tokens) ? acc[r][7] : 0.0;
        STORE8(work, pc.a_off + wk + t * cols8 + cg, lo, hi);
    }
}
