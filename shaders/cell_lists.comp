#version 450
// Per-sequence lists of cells, built from the cache's device mirror of its
// cell metadata: for each listed sequence, every cell it uses, in increasing
// cell order, at [first, end) of `lists`. Attention then walks a sequence's
// own cells instead of every cell of its run, which matters when sequences
// take cells in turns (continuous batching: one token per sequence per step)
// and each run spans nearly the whole cache.
//
// Four passes, none with a barrier inside a workgroup (llvmpipe runs those
// as coroutines). The count and write passes give each invocation CHUNK
// consecutive cells and read each cell's sequence bits once, whatever the
// number of listed sequences (the work is the cells, not cells times
// sequences); the invocation alone owns its chunk's column of counts[j].
// The prefix sums over chunks take two levels, so that no invocation walks
// more than BLOCK chunks or n_chunks / BLOCK block sums (a GPU runs a long
// serial walk at memory latency per step):
//   MODE 0: counts[j][chunk] = the chunk's cells of listed sequence j;
//   MODE 1: one invocation per listed sequence j and block of BLOCK chunks
//           turns the block's counts into exclusive prefix sums within it
//           and writes the block's total to sums[j][block];
//   MODE 2: one invocation per listed sequence turns its block totals into
//           exclusive prefix sums over the blocks (left out for one block);
//   MODE 3: each chunk writes its cells of sequence j from first_j plus its
//           two prefixes on, in cell order.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(constant_id = 1) const uint MODE = 0;
const uint CHUNK = 64u;  // cells per invocation (ops::kCellListChunk)
const uint BLOCK = 64u;  // chunks per block sum (ops::kCellListBlock)
const uint NONE = 0xFFFFFFFFu;

layout(std430, set = 0, binding = 0) readonly buffer CellMeta { uint cell_meta[]; };
// At dir_offset, map_len words: the listed index j of each sequence below
// map_len, or NONE; then, per listed j, 2 words at ranges_offset + 2 j:
// where its list goes, [first, end).
layout(std430, set = 0, binding = 1) readonly buffer Dir { uint dir[]; };
// counts[j][chunk] at counts_offset + j * n_chunks + chunk, then the block
// sums: sums[j][block] at counts_offset + n_listed * n_chunks + j * n_blocks
// + block, n_blocks = ceil(n_chunks / BLOCK).
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
    uint counts_offset;  // where counts[0][0] is in `counts`
} pc;

uint sums_at(uint j) {
    const uint n_blocks = (pc.n_chunks + BLOCK - 1u) / BLOCK;
    return pc.counts_offset + pc.n_listed * pc.n_chunks + j * n_blocks;
}

void main() {
    if (MODE == 1u) {
        const uint j = gl_GlobalInvocationID.y, block = gl_GlobalInvocationID.x;
        const uint c0 = block * BLOCK;
        if (j >= pc.n_listed || c0 >= pc.n_chunks) return;
        const uint row = pc.counts_offset + j * pc.n_chunks;
        const uint c1 = min(pc.n_chunks, c0 + BLOCK);
        uint run = 0u;
        for (uint c = c0; c < c1; ++c) {
            const uint n = counts[row + c];
            counts[row + c] = run;
            run += n;
        }
        counts[sums_at(j) + block] = run;
        return;
    }
    if (MODE == 2u) {
        const uint j = gl_GlobalInvocationID.x;
        if (j >= pc.n_listed) return;
        const uint at = sums_at(j), n_blocks = (pc.n_chunks + BLOCK - 1u) / BLOCK;
        uint run = 0u;
        for (uint b = 0u; b < n_blocks; ++b) {
            const uint n = counts[at + b];
            counts[at + b] = run;
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
                if (MODE == 3u) {
                    // The first block's prefix is 0 (the host leaves out MODE 2
                    // when there is one block).
                    const uint blocks_before = chunk < BLOCK ? 0u : counts[sums_at(j) + chunk / BLOCK];
                    const uint to = dir[pc.ranges_offset + 2u * j] + blocks_before + counts[slot];
                    if (to < dir[pc.ranges_offset + 2u * j + 1u]) lists[to] = c;  // never past j's own list
                }
                counts[slot] += 1u;
            }
        }
    }
}
