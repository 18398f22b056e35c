#version 450
// Per-sequence lists of cells, built from the cache's device mirror of its
// cell metadata: for each listed sequence, every cell it uses, in increasing
// cell order, at [first, end) of `lists`. Attention then walks a sequence's
// own cells instead of every cell of its run, which matters when sequences
// take cells in turns (continuous batching: one token per sequence per step)
// and each run spans nearly the whole cache.
//
// Three passes, none with a barrier inside a workgroup (llvmpipe runs those
// as coroutines), each invocation owning CHUNK consecutive cells of one
// listed sequence (x: chunks, y: listed sequences):
//   MODE 0: counts[j][chunk] = the chunk's cells of sequence j;
//   MODE 1: one invocation per sequence turns its counts into exclusive
//           prefix sums over the chunks of its run;
//   MODE 2: each chunk writes its cells from first + its prefix on.
// Chunks outside a sequence's run are neither counted nor read.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(constant_id = 1) const uint MODE = 0;
const uint CHUNK = 64u;  // cells per invocation (ops/cell_lists.cpp)

layout(std430, set = 0, binding = 0) readonly buffer CellMeta { uint cell_meta[]; };
// Per listed sequence j, 5 words at dir_offset + 5 j: the sequence, its run
// of cells [lo, hi) (hi at most the cells of the mirror the passes cover),
// and where its list goes, [first, end).
layout(std430, set = 0, binding = 1) readonly buffer Dir { uint dir[]; };
layout(std430, set = 0, binding = 2) buffer Counts { uint counts[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Lists { uint lists[]; };

layout(push_constant) uniform Push {
    uint meta_stride;    // words per cell in the mirror (position, then the sequence bits)
    uint n_chunks;       // chunks of CHUNK cells over the mirror's cells
    uint n_listed;
    uint dir_offset;
    uint counts_offset;  // counts[j][chunk] at counts_offset + j * n_chunks + chunk
} pc;

bool uses(uint cell, uint seq) {
    const uint at = cell * pc.meta_stride;
    return int(cell_meta[at]) >= 0 && ((cell_meta[at + 1u + (seq >> 5)] >> (seq & 31u)) & 1u) != 0u;
}

void main() {
    const uint j = MODE == 1u ? gl_GlobalInvocationID.x : gl_WorkGroupID.y;
    if (j >= pc.n_listed) return;
    const uint d = pc.dir_offset + 5u * j;
    const uint seq = dir[d], lo = dir[d + 1u], hi = dir[d + 2u];
    const uint row = pc.counts_offset + j * pc.n_chunks;
    if (MODE == 1u) {
        uint run = 0u;
        for (uint c = lo / CHUNK; c * CHUNK < hi && c < pc.n_chunks; ++c) {
            const uint n = counts[row + c];
            counts[row + c] = run;
            run += n;
        }
        return;
    }
    const uint chunk = gl_GlobalInvocationID.x;
    if (chunk >= pc.n_chunks) return;
    const uint c0 = max(lo, chunk * CHUNK), c1 = min(hi, chunk * CHUNK + CHUNK);
    if (c0 >= c1) return;
    if (MODE == 0u) {
        uint n = 0u;
        for (uint c = c0; c < c1; ++c)
            if (uses(c, seq)) ++n;
        counts[row + chunk] = n;
        return;
    }
    const uint end = dir[d + 4u];
    uint at = dir[d + 3u] + counts[row + chunk];
    for (uint c = c0; c < c1; ++c)
        if (uses(c, seq)) {
            if (at < end) lists[at] = c;  // never past the sequence's own list
            ++at;
        }
}
