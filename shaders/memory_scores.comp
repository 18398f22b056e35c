#version 450
// Fixed-capacity memory: scores S = X MK^T of a chunk for the heads of a group,
// where X holds the chunk's wq rows (first half) and q rows (second half) and
// MK is stored transposed ([key_dim][n_slots], padded). One invocation
// computes MEM_ROWS rows x MEM_COLS groups of 8 slots: each loaded group of MK
// feeds MEM_ROWS rows and each loaded group of X feeds 8 * MEM_COLS slots.
#include "memory_common.glsl"

layout(std430, set = 0, binding = 0) readonly buffer Keys { GROUP_T keys[]; };
layout(std430, set = 0, binding = 1) buffer Work { GROUP_T work[]; };

layout(push_constant) uniform Push {
    uint x_off;      // group index of X (head 0) in Work
    uint s_off;      // group index of S (head 0) in Work
    uint k_off;      // group index of MK^T (head 0) in Keys
    uint head_work;  // groups between heads in Work
    uint head_keys;  // groups between heads in Keys
    uint e8;         // groups per X row (padded key_dim / 8)
    uint m8;         // groups per S row (padded n_slots / 8)
    uint rows;       // padded rows of each half (a multiple of 32)
    uint wq_tiles;   // row tiles of the wq half (0: no update)
    uint q_tiles;    // row tiles of the q half (0: no read)
} pc;

void main() {
    const uint g = gl_GlobalInvocationID.x;
    const uint blocks = (pc.m8 + MEM_COLS - 1u) / MEM_COLS;
    if (g >= blocks * (pc.wq_tiles + pc.q_tiles)) return;
    const uint head = gl_WorkGroupID.z;
    const uint cg0 = (g % blocks) * MEM_COLS, tile = g / blocks;
    const uint row0 = tile < pc.wq_tiles ? tile * MEM_ROWS : pc.rows + (tile - pc.wq_tiles) * MEM_ROWS;
    const uint xo = pc.x_off + head * pc.head_work + row0 * pc.e8;
    const uint ko = pc.k_off + head * pc.head_keys;
    // Column groups past the padded slots (last block) repeat the last group;
    // they are not stored.
    uint cg[MEM_COLS];
    [[unroll]] for (uint c = 0u; c < MEM_COLS; ++c) cg[c] = min(cg0 + c, pc.m8 - 1u);

    vec4 acc_lo[MEM_ROWS][MEM_COLS], acc_hi[MEM_ROWS][MEM_COLS];
    [[unroll]] for (uint r = 0u; r < MEM_ROWS; ++r) {
        [[unroll]] for (uint c = 0u; c < MEM_COLS; ++c) {
            acc_lo[r][c] = vec4(0.0);
            acc_hi[r][c] = vec4(0.0);
        }
    }
    for (uint k8 = 0u; k8 < pc.e8; ++k8) {
        vec4 b_lo[MEM_COLS][8], b_hi[MEM_COLS][8];
        [[unroll]] for (uint c = 0u; c < MEM_COLS; ++c)
            [[unroll]] for (uint j = 0u; j < 8u; ++j) LOAD8(keys, ko + (8u * k8 + j) * pc.m8 + cg[c], b_lo[c][j], b_hi[c][j]);
        [[unroll]] for (uint r = 0u; r < MEM_ROWS; ++r) {
            vec4 a_lo, a_hi;
            LOAD8(work, xo + r * pc.e8 + k8, a_lo, a_hi);
            [[unroll]] for (uint c = 0u; c < MEM_COLS; ++c) FMA8(acc_lo[r][c], acc_hi[r][c], a_lo, a_hi, b_lo[c], b_hi[c]);
        }
    }
    const uint so = pc.s_off + head * pc.head_work + row0 * pc.m8;
    [[unroll]] for (uint r = 0u; r < MEM_ROWS; ++r)
        [[unroll]] for (uint c = 0u; c < MEM_COLS; ++c)
            if (cg0 + c < pc.m8) STORE8(work, so + r * pc.m8 + cg0 + c, acc_lo[r][c], acc_hi[r][c]);
}
