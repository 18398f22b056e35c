#version 450
// Applies pending RoPE shifts to K in place: each listed cell's K row (all KV
// heads) is rotated pair by pair by its delta's angles, taken from a (cos, sin)
// table computed once per distinct delta on the host. Quantized rows are
// dequantized, rotated and quantized again with the store kernel's exact
// rules, in place, one invocation per cell (no temporary copy of the layer).
// Static-scale rows (U8/U16) keep the layer's (scale, zero point): one
// dispatch serves one layer.
//
// The host uses it for rows that are not whole words (U8 heads of
// head_dim % 4 == 2), for F16/U16 NeoX pairs that are not whole word pairs
// (U8: not whole words), and for Q8_0/Q4_0 NeoX pairs that cross blocks
// irregularly; other F32/F16/U8/U16 go to rope_shift_fast.comp, other
// Q8_0/Q4_0 to rope_shift_blocks.comp.
//
// Defines: K_FMT (1 F32, 2 F16, 3 Q8_0, 4 Q4_0, 5 U8_STATIC, 6 U16_STATIC).
// Specialization: D_K, N_ROT, NEOX.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "kv_load.glsl"
#include "quant.glsl"
#include "rope.glsl"

layout(constant_id = 1) const uint D_K = 128;
layout(constant_id = 2) const uint N_ROT = 128;
layout(constant_id = 3) const uint NEOX = 0;

layout(std430, set = 0, binding = 0) buffer KBuf { uint k_words[]; };
// Per shifted cell: (byte offset of its K row in this piece, first table entry).
layout(std430, set = 0, binding = 1) readonly buffer List { uvec2 cells[]; };
layout(std430, set = 0, binding = 2) readonly buffer Tables { vec2 tables[]; };

layout(push_constant) uniform Push {
    uint n_cells;
    uint n_kv_heads;
    uint head_bytes;
    uint list_offset;    // first entry of `cells`
    uint table_offset;   // added to every cell's table entry
    // Static-scale K: the layer's scale, 1/scale (as on the host), zero point.
    float scale;
    float inv_scale;
    int zero_point;
} pc;

#if K_FMT >= 5
KVRT_DEFINE_STATIC_LOADER(load_k_value, k_words, K_FMT, pc.scale, pc.zero_point)
#else
KVRT_DEFINE_OCTET_LOADER(load_k, k_words, K_FMT, 0.0, 0)
#endif
#if K_FMT == 3
KVRT_DEFINE_QUANTIZERS(9)
#elif K_FMT == 4
KVRT_DEFINE_QUANTIZERS(5)
#endif

void put_byte(uint byte, uint v) {
    const uint w = byte >> 2, shift = (byte & 3u) * 8u;
    k_words[w] = (k_words[w] & ~(0xffu << shift)) | ((v & 0xffu) << shift);
}

void main() {
    for (uint c = gl_GlobalInvocationID.x; c < pc.n_cells; c += kvrt_grid_stride()) {
        const uvec2 cell = cells[pc.list_offset + c];
        const uint table = pc.table_offset + cell.y;
        for (uint h = 0u; h < pc.n_kv_heads; ++h) {
            const uint head_byte = cell.x + h * pc.head_bytes;
            float x[D_K];
#if K_FMT >= 5
            // Value by value: static-scale heads need not be octets.
            for (uint d = 0u; d < D_K; ++d) x[d] = load_k_value(head_byte, d);
#else
            for (uint o = 0u; o < D_K / 8u; ++o) {
                float v[8];
                load_k(head_byte, o, v);
                for (uint j = 0u; j < 8u; ++j) x[o * 8u + j] = v[j];
            }
#endif
            for (uint i = 0u; i < N_ROT / 2u; ++i) {
                const uint a = NEOX != 0u ? i : 2u * i;
                const uint b = NEOX != 0u ? i + N_ROT / 2u : 2u * i + 1u;
                kvrt_rope_rotate(x[a], x[b], tables[table + i]);
            }
#if K_FMT == 5
            // Pairs of codes as 16-bit halves: a U8 head starts at an even byte
            // (head_dim is even), and this invocation owns the whole row.
            for (uint d = 0u; d < D_K; d += 2u) {
                const uint two = kvrt_quantize_static(x[d], pc.inv_scale, pc.zero_point, 255) |
                                 (kvrt_quantize_static(x[d + 1u], pc.inv_scale, pc.zero_point, 255) << 8);
                const uint byte = head_byte + d, w = byte >> 2, shift = (byte & 2u) * 8u;
                k_words[w] = (k_words[w] & ~(0xffffu << shift)) | (two << shift);
            }
#elif K_FMT == 6
            for (uint d = 0u; d < D_K; d += 2u) {
                const uint lo = kvrt_quantize_static(x[d], pc.inv_scale, pc.zero_point, 65535);
                const uint hi = kvrt_quantize_static(x[d + 1u], pc.inv_scale, pc.zero_point, 65535);
                k_words[(head_byte >> 2) + d / 2u] = lo | (hi << 16);
            }
#elif K_FMT == 1
            for (uint d = 0u; d < D_K; ++d) k_words[(head_byte >> 2) + d] = floatBitsToUint(x[d]);
#elif K_FMT == 2
            for (uint d = 0u; d < D_K; d += 2u)
                k_words[(head_byte >> 2) + d / 2u] = kvrt_f32_to_f16(x[d]) | (kvrt_f32_to_f16(x[d + 1u]) << 16);
#else
            for (uint blk = 0u; blk < D_K / 32u; ++blk) {
                float q[32];
                for (uint j = 0u; j < 32u; ++j) q[j] = x[blk * 32u + j];
#if K_FMT == 3
                uint w[9];  // 34 bytes
                for (uint i = 0u; i < 9u; ++i) w[i] = 0u;
                kvrt_quantize_q8_0(q, 0u, w);
                const uint bytes = 34u, base = head_byte + blk * 34u;
#else
                uint w[5];  // 18 bytes
                for (uint i = 0u; i < 5u; ++i) w[i] = 0u;
                kvrt_quantize_q4_0(q, 0u, w);
                const uint bytes = 18u, base = head_byte + blk * 18u;
#endif
                for (uint k = 0u; k < bytes; ++k) put_byte(base + k, w[k >> 2] >> ((k & 3u) * 8u));
            }
#endif
        }
    }
}
