#version 450
// Fixed-capacity memory: the state update of one chunk for the heads of a
// group, MV_new = MV + WW^T WV, summed over the chunk's tokens in order as
// outer products: each invocation owns UPD_M slots x 8 * UPD_DG value
// elements, and per token loads UPD_M weights of ww_t and 8 * UPD_DG values of
// wv_t (both rows of their [token][...] layouts) for UPD_M * 8 * UPD_DG
// multiply-adds, UPD_T tokens at a time. When the chunk is also read, the
// state at the start of every 64-token sub-chunk is kept (f32) for
// memory_read. The source state is never written: the result goes to another
// slot (all-or-nothing, see src/ops/memory.hpp).
//
// STATE_F16: the state (source and destination) is stored as f16.
#include "memory_common.glsl"

#ifdef STATE_F16
#define STATE_T HGROUP_T
#define LOAD_STATE LOAD8H
#define STORE_STATE STORE8H
#else
#define STATE_T GROUP_T
#define LOAD_STATE LOAD8
#define STORE_STATE STORE8
#endif

#ifdef MEM_WIDE
#define UPD_M 16  // slots per invocation
#define UPD_DG 2  // groups of 8 value elements per invocation
#else
#define UPD_M 8
#define UPD_DG 1
#endif
#define UPD_T 4   // tokens per step (chunks are padded to 32 rows)

layout(std430, set = 0, binding = 0) readonly buffer Src { STATE_T src[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Dst { STATE_T dst[]; };
layout(std430, set = 0, binding = 2) buffer Work { GROUP_T work[]; };

layout(push_constant) uniform Push {
    uint src_off;    // group index of head 0's source state in Src
    uint src_head;   // groups between heads in Src
    uint dst_off;    // group index of head 0's new state in Dst
    uint dst_head;   // groups between heads in Dst
    uint head_work;  // groups between heads in Work
    uint w_off;      // group index of WW [rows][m8] (head 0) in Work
    uint wv_off;     // group index of WV [rows][d8] (head 0) in Work
    uint snap_off;   // group index of the sub-chunk states [n_snap][m][d8] (head 0)
    uint m;          // slots
    uint m8;         // groups per WW row
    uint d8;         // groups per state row
    uint upd;        // tokens to add (0: none)
    uint n_snap;     // sub-chunk states to keep (0: none)
    uint flags;      // 1: the source is all zero; 2: write the new state
} pc;

vec4 acc[UPD_M][2 * UPD_DG];

void store_rows(uint m0, uint dg0, uint base) {
    [[unroll]] for (uint i = 0u; i < UPD_M; ++i) {
        [[unroll]] for (uint j = 0u; j < UPD_DG; ++j)
            if (m0 + i < pc.m && dg0 + j < pc.d8)
                STORE8(work, base + (m0 + i) * pc.d8 + dg0 + j, acc[i][2u * j], acc[i][2u * j + 1u]);
    }
}

void main() {
    const uint g = gl_GlobalInvocationID.x;
    const uint dblocks = (pc.d8 + UPD_DG - 1u) / UPD_DG;
    if (g >= dblocks * ((pc.m + UPD_M - 1u) / UPD_M)) return;
    const uint head = gl_WorkGroupID.z;
    const uint dg0 = (g % dblocks) * UPD_DG, m0 = (g / dblocks) * UPD_M;
    const uint wk = head * pc.head_work;

    [[unroll]] for (uint i = 0u; i < UPD_M; ++i) {
        [[unroll]] for (uint j = 0u; j < UPD_DG; ++j) {
            acc[i][2u * j] = vec4(0.0);
            acc[i][2u * j + 1u] = vec4(0.0);
            if ((pc.flags & 1u) == 0u && m0 + i < pc.m && dg0 + j < pc.d8)
                LOAD_STATE(src, pc.src_off + head * pc.src_head + (m0 + i) * pc.d8 + dg0 + j, acc[i][2u * j],
                           acc[i][2u * j + 1u]);
        }
    }
    // Groups past the padded rows (last block) repeat the last group; their
    // results are never stored.
    uint wg_idx[UPD_M / 8], dg_idx[UPD_DG];
    [[unroll]] for (uint i = 0u; i < UPD_M / 8u; ++i) wg_idx[i] = min(m0 / 8u + i, pc.m8 - 1u);
    [[unroll]] for (uint j = 0u; j < UPD_DG; ++j) dg_idx[j] = min(dg0 + j, pc.d8 - 1u);
    // Tokens go in steps of UPD_T, summed in registers before they reach the
    // accumulators. Rows past `upd` up to the next step hold zeros (WV
    // padding) and add nothing.
    for (uint t = 0u;; t += UPD_T) {
        const uint s = t / MEM_SUBCHUNK;
        if (t % MEM_SUBCHUNK == 0u && s < pc.n_snap) store_rows(m0, dg0, pc.snap_off + wk + s * pc.m * pc.d8);
        if (t >= pc.upd) break;
        float w[UPD_T][UPD_M];
        vec4 v[UPD_T][2 * UPD_DG];
        [[unroll]] for (uint k = 0u; k < UPD_T; ++k) {
            [[unroll]] for (uint i = 0u; i < UPD_M / 8u; ++i) {
                vec4 lo, hi;
                LOAD8(work, pc.w_off + wk + (t + k) * pc.m8 + wg_idx[i], lo, hi);
                w[k][8u * i] = lo.x; w[k][8u * i + 1u] = lo.y; w[k][8u * i + 2u] = lo.z; w[k][8u * i + 3u] = lo.w;
                w[k][8u * i + 4u] = hi.x; w[k][8u * i + 5u] = hi.y; w[k][8u * i + 6u] = hi.z; w[k][8u * i + 7u] = hi.w;
            }
            [[unroll]] for (uint j = 0u; j < UPD_DG; ++j)
                LOAD8(work, pc.wv_off + wk + (t + k) * pc.d8 + dg_idx[j], v[k][2u * j], v[k][2u * j + 1u]);
        }
        [[unroll]] for (uint i = 0u; i < UPD_M; ++i) {
            [[unroll]] for (uint j = 0u; j < 2u * UPD_DG; ++j) {
                vec4 sum = w[0][i] * v[0][j];
                [[unroll]] for (uint k = 1u; k < UPD_T; ++k) sum += w[k][i] * v[k][j];
                acc[i][j] += sum;
            }
        }
    }
    if ((pc.flags & 2u) != 0u) {
        const uint o = pc.dst_off + head * pc.dst_head;
        [[unroll]] for (uint i = 0u; i < UPD_M; ++i) {
            [[unroll]] for (uint j = 0u; j < UPD_DG; ++j)
                if (m0 + i < pc.m && dg0 + j < pc.d8)
                    STORE_STATE(dst, o + (m0 + i) * pc.d8 + dg0 + j, acc[i][2u * j], acc[i][2u * j + 1u]);
        }
    }
}
