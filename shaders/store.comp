#version 450
// Writes tokens' K or V rows into cache cells, converting from f32 or f16 input
// to the cache's element type (F32, F16, GGML-compatible Q8_0 / Q4_0, or the
// static-scale U8 / U16 codes, quantized on the fly). One dispatch covers one
// layer's rows that lie in one piece of the source and one piece of the cache.
//
// Defines: SRC_F16 (input is f16, else f32); DST_F32 | DST_F16 | DST_Q8_0 |
// DST_Q4_0 | DST_U8_STATIC | DST_U16_STATIC.
//
// Work unit: one output word (F32, F16, U16: 2 values, U8: 4 values) or a pair
// of blocks (Q8_0: 68 bytes = 17 words; Q4_0: 36 bytes = 9 words), so every
// unit owns whole words and no two invocations write the same word. An odd
// last block, or a U8 row whose byte size is not a multiple of 4, fills the
// rest of its last word with the row's padding, written as zeros (rows are
// padded to 4 bytes).
//
// The source row's heads may lie apart (head-major tensors): value e of the
// row is value e % head_dim of head e / head_dim, src_head_elems values after
// the previous head's start. Head dims are even (and multiples of 32 for the
// block types), so a source word, a destination unit and a block never
// straddle two heads.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "quant.glsl"

layout(std430, set = 0, binding = 0) readonly buffer Src { uint src[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Dst { uint dst[]; };
// Per token: word offset of its row in src, word offset of its cell's row in dst.
layout(std430, set = 0, binding = 2) readonly buffer List { uvec2 rows[]; };

layout(push_constant) uniform Push {
    uint n_tokens;
    uint row_elems;      // values per row (n_kv_heads * head_dim)
    uint units_per_row;
    uint list_offset;    // first entry of `rows` for this dispatch
    // Static-scale types: 1/scale as computed on the host (f32), and the zero
    // point; unused by the other types.
    float inv_scale;
    int zero_point;
    uint head_dim;        // values per head
    uint src_head_elems;  // source values from one head's start to the next
} pc;

// Index in the source row (in values from its first word) of value e.
uint src_index(uint e) {
    if (pc.src_head_elems == pc.head_dim) return e;  // packed heads
    const uint h = e / pc.head_dim;
    return h * pc.src_head_elems + (e - h * pc.head_dim);
}

float load(uint row_word, uint e) {
    const uint i = src_index(e);
#ifdef SRC_F16
    // kvrt_f16_to_f32 rather than unpackHalf2x16: see common.glsl.
    return kvrt_f16_to_f32(src[row_word + (i >> 1)] >> ((i & 1u) * 16u));
#else
    return uintBitsToFloat(src[row_word + i]);
#endif
}

#if defined(DST_U8_STATIC) || defined(DST_U16_STATIC)
#if defined(DST_U8_STATIC)
const int QMAX = 255;
#else
const int QMAX = 65535;
#endif

// The code of input value e (NaN takes the zero point: value 0).
uint quantize_static(uint row_word, uint e) {
    const uint i = src_index(e);
#ifdef SRC_F16
    const uint h = (src[row_word + (i >> 1)] >> ((i & 1u) * 16u)) & 0xffffu;
    if (kvrt_is_nan_half(h)) return uint(pc.zero_point);
#else
    if (kvrt_is_nan_bits(src[row_word + i])) return uint(pc.zero_point);
#endif
    return kvrt_quantize_static(load(row_word, e), pc.inv_scale, pc.zero_point, QMAX);
}
#endif

#if defined(DST_Q8_0) || defined(DST_Q4_0)
#if defined(DST_Q8_0)
const uint BLOCK_BYTES = 34u;
const uint PAIR_WORDS = 17u;
#else
const uint BLOCK_BYTES = 18u;
const uint PAIR_WORDS = 9u;
#endif

KVRT_DEFINE_QUANTIZERS(PAIR_WORDS)

void quantize_block(uint row_word, uint block, uint base, inout uint w[PAIR_WORDS]) {
    float x[32];
    for (uint j = 0u; j < 32u; ++j) x[j] = load(row_word, block * 32u + j);
#if defined(DST_Q8_0)
    kvrt_quantize_q8_0(x, base, w);
#else
    kvrt_quantize_q4_0(x, base, w);
#endif
}
#endif

// One workgroup per token row (grid-stride over rows), its invocations over
// the row's units.
void main() {
    for (uint t = gl_WorkGroupID.x; t < pc.n_tokens; t += gl_NumWorkGroups.x)
    for (uint u = gl_LocalInvocationID.x; u < pc.units_per_row; u += gl_WorkGroupSize.x) {
        const uvec2 row = rows[pc.list_offset + t];
#if defined(DST_F32)
        dst[row.y + u] = floatBitsToUint(load(row.x, u));
#elif defined(DST_F16)
#ifdef SRC_F16
        dst[row.y + u] = src[row.x + (src_index(2u * u) >> 1)];  // bit copy: f16 to f16 is exact
#else
        dst[row.y + u] = kvrt_f32_to_f16(load(row.x, 2u * u)) | (kvrt_f32_to_f16(load(row.x, 2u * u + 1u)) << 16);
#endif
#elif defined(DST_U16_STATIC)
        dst[row.y + u] = quantize_static(row.x, 2u * u) | (quantize_static(row.x, 2u * u + 1u) << 16);
#elif defined(DST_U8_STATIC)
        // Values past the row's end (row_elems is even: 0 or 2 of them) are
        // its padding.
        uint w = 0u;
        for (uint j = 0u; j < 4u; ++j) {
            const uint e = 4u * u + j;
            if (e < pc.row_elems) w |= quantize_static(row.x, e) << (8u * j);
        }
        dst[row.y + u] = w;
#else
        uint w[PAIR_WORDS];
        for (uint i = 0u; i < PAIR_WORDS; ++i) w[i] = 0u;
        const uint n_blocks = pc.row_elems / 32u;
        const uint b0 = 2u * u;
        quantize_block(row.x, b0, 0u, w);
        const bool second = b0 + 1u < n_blocks;
        if (second) quantize_block(row.x, b0 + 1u, BLOCK_BYTES, w);
        // An odd last block writes its own bytes and the row's padding only.
        const uint n_words = second ? PAIR_WORDS : (BLOCK_BYTES + 3u) / 4u;
        const uint first = row.y + u * PAIR_WORDS;
        for (uint i = 0u; i < n_words; ++i) dst[first + i] = w[i];
#endif
    }
}
