#version 450
// Deferred RoPE, before attention: the (cos, sin) of every rotated pair at the
// position of each cell of a run, composed once from the cache's position
// table (rope.glsl) and scaled by the magnitude, so that the attention
// kernels read one entry per pair and cell instead of composing it again for
// every KV head and row tile. Entry (cell c, pair i) of the run goes to
// out[out_offset + c * PAIRS + i]; an empty cell (position -1) gets the
// rotation the table gives 0xFFFFFFFF, which no query sees.
//
// Specialization: PAIRS (N_ROT / 2).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "rope.glsl"

layout(constant_id = 1) const uint PAIRS = 64;

// The cache's device mirror of its cells: per cell a position, then
// sequence words (attention.comp's CellMeta).
layout(std430, set = 0, binding = 0) readonly buffer CellMeta { uint cell_meta[]; };
layout(std430, set = 0, binding = 1) readonly buffer RopeTable { vec2 rope_table[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Out { vec2 out_cs[]; };
KVRT_DEFINE_ROPE_TURN(rope_turn, rope_table)

layout(push_constant) uniform Push {
    uint n_cells;      // cells of the run
    uint meta_first;   // the run's first cell in the mirror's piece
    uint meta_stride;  // words per cell in the mirror
    uint out_offset;   // vec2 index of the run's first entry
    float mscale;      // YaRN's magnitude (rotated dims only, as in GGML)
} pc;

void main() {
    for (uint i = gl_GlobalInvocationID.x; i < pc.n_cells * PAIRS; i += kvrt_grid_stride()) {
        const uint c = i / PAIRS, pair = i - c * PAIRS;
        const uint pos = cell_meta[(pc.meta_first + c) * pc.meta_stride];
        out_cs[pc.out_offset + i] = rope_turn(pos, pair, PAIRS) * pc.mscale;
    }
}
