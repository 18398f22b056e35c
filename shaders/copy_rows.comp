#version 450
// Copies whole rows (cells) between two buffer pieces: row i goes from word
// offset list[i].x of src to word offset list[i].y of dst. Used by compaction
// (moves between cells) and by readback (gathering cells into one buffer).
// Destination rows must not overlap each other or any source row.
//
// One workgroup per row (grid-stride over rows), its invocations over the
// row's words: no per-word division, and consecutive invocations touch
// consecutive words. With VEC4 the row length and every offset are multiples
// of 4 words and the copy moves 16 bytes per access.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

#ifdef VEC4
#define WORD uvec4
#define SCALE 4u
#else
#define WORD uint
#define SCALE 1u
#endif

layout(std430, set = 0, binding = 0) readonly buffer Src { WORD src[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Dst { WORD dst[]; };
layout(std430, set = 0, binding = 2) readonly buffer List { uvec2 rows[]; };

layout(push_constant) uniform Push {
    uint n_rows;
    uint row_words;
    uint list_offset;
} pc;

void main() {
    const uint n = pc.row_words / SCALE;
    for (uint r = gl_WorkGroupID.x; r < pc.n_rows; r += gl_NumWorkGroups.x) {
        const uvec2 row = rows[pc.list_offset + r] / SCALE;
        for (uint w = gl_LocalInvocationID.x; w < n; w += gl_WorkGroupSize.x) dst[row.y + w] = src[row.x + w];
    }
}
