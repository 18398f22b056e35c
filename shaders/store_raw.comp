#version 450
// Copies stored bytes into cache rows bit for bit: rows given in the cache's
// own element type (pre-quantized Q8_0 / Q4_0 blocks, static-scale codes), or
// any other byte-exact row copy whose source is not word aligned.
//
// Row i has `heads` head rows of `head_bytes` each. In the source they start
// at byte list[i].x and lie `src_head_stride` bytes apart, at any byte
// alignment; in the destination they lie back to back from word list[i].y,
// and the rest of the row's last word (cell rows are padded to 4 bytes) is
// written as zeros, as the store kernel writes it.
//
// One workgroup per row (grid-stride over rows), its invocations over the
// destination words: each writes one whole word, assembled from the bytes of
// the source words, so no two invocations write the same word.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(std430, set = 0, binding = 0) readonly buffer Src { uint src[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Dst { uint dst[]; };
// Per row: byte offset of its first head in src, word offset of its row in dst.
layout(std430, set = 0, binding = 2) readonly buffer List { uvec2 rows[]; };

layout(push_constant) uniform Push {
    uint n_rows;
    uint heads;            // head rows per row
    uint head_bytes;
    uint src_head_stride;  // bytes from one source head's start to the next
    uint list_offset;      // first entry of `rows` for this dispatch
} pc;

uint src_byte(uint at) { return (src[at >> 2] >> ((at & 3u) * 8u)) & 0xffu; }

void main() {
    const uint row_bytes = pc.heads * pc.head_bytes;
    const uint n_words = (row_bytes + 3u) / 4u;
    for (uint r = gl_WorkGroupID.x; r < pc.n_rows; r += gl_NumWorkGroups.x) {
        const uvec2 row = rows[pc.list_offset + r];
        for (uint w = gl_LocalInvocationID.x; w < n_words; w += gl_WorkGroupSize.x) {
            const uint b0 = 4u * w;
            const uint h0 = b0 / pc.head_bytes;
            const uint i0 = b0 - h0 * pc.head_bytes;
            const uint at0 = row.x + h0 * pc.src_head_stride + i0;
            uint word = 0u;
            if ((at0 & 3u) == 0u && i0 + 4u <= pc.head_bytes) {
                word = src[at0 >> 2];  // an aligned word of one head
            } else {
                for (uint j = 0u; j < 4u; ++j) {
                    const uint b = b0 + j;
                    if (b >= row_bytes) break;  // the row's padding
                    const uint h = b / pc.head_bytes;
                    word |= src_byte(row.x + h * pc.src_head_stride + (b - h * pc.head_bytes)) << (8u * j);
                }
            }
            dst[row.y + w] = word;
        }
    }
}
