#version 450
// Per-sequence lists of cells, built from the cache's device mirror of its
// cell metadata: for each listed sequence, every cell it uses, in increasing
// cell order, at [first, end) of `lists`. Attention then walks a sequence's
// own cells instead of every cell of its run, which matters when sequences
// take cells in turns (continuous batching: one token per sequence per step)
// and each run spans nearly the whole cache.
//
// Three passes, none with a barrier inside a workgroup (llvmpipe runs those
// as coroutines). The count and write passes give each invocation CHUNK
// consecutive cells and read each cell's sequence bits once, whatever the
// number of listed sequences (the work is the cells, not cells times
// sequences); the invocation alone owns its chunk's column of counts[j]:
//   MODE 0: counts[j][chunk] = the chunk's cells of listed sequence j;
//   MODE 1: one invocation per listed sequence turns its counts into
//           exclusive prefix sums over the chunks;
//   MODE 2: each chunk writes its cells of sequence j from first_j plus
//           its prefix on, in cell order.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(constant_id = 1) const uint MODE = 0;
const uint CHUNK = 64u;  // cells per invocation (ops::kCellListChunk)
const uint NONE = 0xFFFFFFFFu;

layout(std430, set = 0, binding = 0) readonly buffer CellMeta { uint cell_meta[]; };
// At dir_offset, map_len words: the listed index j of each sequence below
// map_len, or NONE; then, per listed j, 2 words at ranges_offset + 2 j:
// where its list goes, [first, end).
layout(std430, set = 0, binding = 1) readonly buffer Dir { uint dir[]; };
layout(std430, set = 0, binding = 2) buffer Counts { uint counts[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Lists { uint lists[]; };

layout(push_constant) uniform Push {
    uint meta_stride;    // words per cell in the mirror (position, then the sequence bits)
    uint n_cells;        // cells [0, n_cells) of the mirror
    uint n_chunks;       // ceil(n_cells / CHUNK)
    uint n_listed;
    uint dir_offset;
    uint map_len;        // sequences [0, map_len) have an entry in the map
    uint ranges_offset;
    uint counts_offset;  // counts[j][chunk] at counts_offset + j * n_chunks + chunk
} pc;

void main() {
    if (MODE == 1u) {
        const uint j = gl_GlobalInvocationID.x;
        if (j >= pc.n_listed) return;
        const uint row = pc.counts_offset + j * pc.n_chunks;
        uint run = 0u;
        for (uint c = 0u; c < pc.n_chunks; ++c) {
            const uint n = counts[row + c];
            counts[row + c] = run;
            run += n;
        }
        return;
    }
    const uint chunk = gl_GlobalInvocationID.x;
    if (chunk >= pc.n_chunks) return;
    if (MODE == 0u)
        for (uint j = 0u; j < pc.n_listed; ++j) counts[pc.counts_offset + j * pc.n_chunks + chunk] = 0u;
    const uint words = (pc.map_len + 31u) / 32u;  // the sequence words that can name a listed sequence
    const uint c1 = min(pc.n_cells, chunk * CHUNK + CHUNK);
    for (uint c = chunk * CHUNK; c < c1; ++c) {
        const uint at = c * pc.meta_stride;
        if (int(cell_meta[at]) < 0) continue;
        for (uint w = 0u; w < words; ++w) {
            uint bits = cell_meta[at + 1u + w];
            while (bits != 0u) {
                const uint seq = w * 32u + uint(findLSB(bits));
                bits &= bits - 1u;
                const uint j = seq < pc.map_len ? dir[pc.dir_offset + seq] : NONE;
                if (j == NONE) continue;
                const uint slot = pc.counts_offset + j * pc.n_chunks + chunk;
                if (MODE == 2u) {
                    const uint to = dir[pc.ranges_offset + 2u * j] + counts[slot];
                    if (to < dir[pc.ranges_offset + 2u * j + 1u]) lists[to] = c;  // never past j's own list
                }
                counts[slot] += 1u;
            }
        }
    }
}
