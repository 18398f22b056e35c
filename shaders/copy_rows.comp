#version 450
// Copies whole rows (cells) between two buffer pieces: row i goes from word
// offset list[i].x of src to word offset list[i].y of dst. Used by compaction
// (moves between cells) and by readback (gathering cells into one buffer).
// Destination rows must not overlap each other or any source row.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(std430, set = 0, binding = 0) readonly buffer Src { uint src[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Dst { uint dst[]; };
layout(std430, set = 0, binding = 2) readonly buffer List { uvec2 rows[]; };

layout(push_constant) uniform Push {
    uint n_rows;
    uint row_words;
    uint list_offset;
} pc;

void main() {
    const uint total = pc.n_rows * pc.row_words;
    const uint stride = kvrt_grid_stride();
    for (uint id = gl_GlobalInvocationID.x; id < total; id += stride) {
        const uint r = id / pc.row_words;
        const uint w = id - r * pc.row_words;
        const uvec2 row = rows[pc.list_offset + r];
        dst[row.y + w] = src[row.x + w];
    }
}
