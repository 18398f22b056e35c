#version 450
// Fixed-capacity memory: the reads of a chunk for the heads of a group. Token t
// of sub-chunk j reads
//     out_t = p_t MV_j + sum_i A[t][i] wv_(64j+i)
// where MV_j is the state at the start of the sub-chunk (kept by
// memory_update) and A the causal block (memory_intra), i.e. p_t MV_t with the
// chunk's updates up to and including t. Without updates (a plain read) every
// token reads MV_0. One invocation owns MEM_ROWS tokens x MEM_COLS groups of 8 values;
// results go to the f32 output staging [tokens][n_heads][value_dim].
#include "memory_common.glsl"

layout(std430, set = 0, binding = 0) readonly buffer Work { GROUP_T work[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Out { float outs[]; };

layout(push_constant) uniform Push {
    uint p_off;      // group index of P (head 0)
    uint snap_off;   // group index of the sub-chunk states (head 0)
    uint a_off;      // group index of A (head 0)
    uint wv_off;     // group index of WV (head 0)
    uint head_work;  // groups between heads
    uint m8;         // groups per P row
    uint d8;         // groups per state row
    uint m;          // slots (rows of each sub-chunk state)
    uint rows;       // padded tokens
    uint tokens;     // rows of the chunk
    uint intra;      // 1: the chunk was updated (sub-chunk states and A); 0: plain read
    uint out_row;    // floats per token row in Out (n_heads * value_dim)
    uint head0;      // first head of the group
    uint d;          // value elements per head
} pc;

void main() {
    const uint g = gl_GlobalInvocationID.x;
    const uint blocks = (pc.d8 + MEM_COLS - 1u) / MEM_COLS;
    if (g >= blocks * ((pc.tokens + MEM_ROWS - 1u) / MEM_ROWS)) return;
    const uint head = gl_WorkGroupID.z;
    const uint cg0 = (g % blocks) * MEM_COLS, row0 = (g / blocks) * MEM_ROWS;
    const uint j = pc.intra != 0u ? row0 / MEM_SUBCHUNK : 0u;
    const uint wk = head * pc.head_work;
    // Column groups past the padded values (last block) repeat the last group;
    // they are not stored.
    uint cg[MEM_COLS];
    [[unroll]] for (uint c = 0u; c < MEM_COLS; ++c) cg[c] = min(cg0 + c, pc.d8 - 1u);

    vec4 acc_lo[MEM_ROWS][MEM_COLS], acc_hi[MEM_ROWS][MEM_COLS];
    [[unroll]] for (uint r = 0u; r < MEM_ROWS; ++r) {
        [[unroll]] for (uint c = 0u; c < MEM_COLS; ++c) {
            acc_lo[r][c] = vec4(0.0);
            acc_hi[r][c] = vec4(0.0);
        }
    }
    const uint so = pc.snap_off + wk + j * pc.m * pc.d8;
    for (uint k8 = 0u; k8 < pc.m8; ++k8) {
        vec4 b_lo[MEM_COLS][8], b_hi[MEM_COLS][8];
        // Slots past n_slots (padding) have weight 0; read the last row instead.
        [[unroll]] for (uint i = 0u; i < 8u; ++i) {
            const uint row = min(8u * k8 + i, pc.m - 1u);
            [[unroll]] for (uint c = 0u; c < MEM_COLS; ++c) LOAD8(work, so + row * pc.d8 + cg[c], b_lo[c][i], b_hi[c][i]);
        }
        [[unroll]] for (uint r = 0u; r < MEM_ROWS; ++r) {
            vec4 a_lo, a_hi;
            LOAD8(work, pc.p_off + wk + (row0 + r) * pc.m8 + k8, a_lo, a_hi);
            [[unroll]] for (uint c = 0u; c < MEM_COLS; ++c) FMA8(acc_lo[r][c], acc_hi[r][c], a_lo, a_hi, b_lo[c], b_hi[c]);
        }
    }
    if (pc.intra != 0u) {
        const uint first = j * MEM_SUBCHUNK;
        const uint n8 = min(MEM_SUBCHUNK, pc.rows - first) / 8u;
        for (uint i8 = 0u; i8 < n8; ++i8) {
            vec4 b_lo[MEM_COLS][8], b_hi[MEM_COLS][8];
            const uint vo = pc.wv_off + wk + (first + 8u * i8) * pc.d8;
            [[unroll]] for (uint i = 0u; i < 8u; ++i)
                [[unroll]] for (uint c = 0u; c < MEM_COLS; ++c) LOAD8(work, vo + i * pc.d8 + cg[c], b_lo[c][i], b_hi[c][i]);
            [[unroll]] for (uint r = 0u; r < MEM_ROWS; ++r) {
                vec4 a_lo, a_hi;
                LOAD8(work, pc.a_off + wk + (row0 + r) * (MEM_SUBCHUNK / 8u) + i8, a_lo, a_hi);
                [[unroll]] for (uint c = 0u; c < MEM_COLS; ++c) FMA8(acc_lo[r][c], acc_hi[r][c], a_lo, a_hi, b_lo[c], b_hi[c]);
            }
        }
    }
    [[unroll]] for (uint r = 0u; r < MEM_ROWS; ++r) {
        if (row0 + r >= pc.tokens) continue;
        [[unroll]] for (uint c = 0u; c < MEM_COLS; ++c) {
            const uint d0 = 8u * (cg0 + c);
            if (d0 >= pc.d) continue;
            const uint o = (row0 + r) * pc.out_row + (pc.head0 + head) * pc.d + d0;
            const uint n = min(8u, pc.d - d0);
            const float v[8] = float[8](acc_lo[r][c].x, acc_lo[r][c].y, acc_lo[r][c].z, acc_lo[r][c].w,
                                        acc_hi[r][c].x, acc_hi[r][c].y, acc_hi[r][c].z, acc_hi[r][c].w);
            [[unroll]] for (uint e = 0u; e < 8u; ++e)
                if (e < n) outs[o + e] = v[e];
        }
    }
}
