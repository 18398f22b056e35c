#version 450
// RoPE shift of F32, F16 or static-scale (U8/U16) K in place, laid out for
// streaming: invocation x owns one rotation unit of a row and walks the cells
// of its chunk (workgroup y), so consecutive invocations touch consecutive
// words and each keeps its (cos, sin) in registers while consecutive cells
// share a delta (a context shift moves every cell by the same amount).
//
// A unit is one 32-bit word of P values (P = 1 F32, 2 F16/U16, 4 U8):
// normal RoPE rotates the pairs inside the word (F32: a pair of words), NeoX
// pairs the word's P dims with the P dims N_ROT / 2 on, in the partner word.
// Static-scale codes are dequantized, rotated and quantized again with the
// layer's (scale, zero point) and the store kernel's rule; codes of dims past
// N_ROT in a unit's word (U8 with N_ROT % 4 == 2) are kept as they are. Rows
// are whole words; the host sends other shapes to rope_shift.comp, and Q8_0
// and Q4_0 to rope_shift_blocks.comp.
//
// Defines: K_F16, K_U8, K_U16 (else F32); VEC4 (F16 only: a unit is 16 bytes,
// 8 halves, and rows are 16-byte aligned). Specialization: D_K, N_ROT, NEOX.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "kv_load.glsl"
#include "quant.glsl"
#include "rope.glsl"

layout(constant_id = 1) const uint D_K = 128;
layout(constant_id = 2) const uint N_ROT = 128;
layout(constant_id = 3) const uint NEOX = 0;

#ifdef VEC4
layout(std430, set = 0, binding = 0) buffer KBuf { uvec4 k_vecs[]; };
#else
layout(std430, set = 0, binding = 0) buffer KBuf { uint k_words[]; };
#endif
layout(std430, set = 0, binding = 1) readonly buffer List { uvec2 cells[]; };
layout(std430, set = 0, binding = 2) readonly buffer Tables { vec2 tables[]; };

layout(push_constant) uniform Push {
    uint n_cells;
    uint n_kv_heads;
    uint list_offset;
    uint table_offset;
    uint cells_per_chunk;
    // Static-scale K: the layer's scale, 1/scale (as on the host), zero point.
    float scale;
    float inv_scale;
    int zero_point;
} pc;

#if defined(VEC4)
// Units per head: N_ROT/8 vectors of 4 pairs (normal); N_ROT/16 vector pairs (NeoX).
const uint UNITS = NEOX != 0u ? N_ROT / 16u : N_ROT / 8u;
const uint HEAD_WORDS = D_K / 8u;  // in vectors
#else
#if defined(K_U8)
const uint P = 4u;
#elif defined(K_F16) || defined(K_U16)
const uint P = 2u;
#else
const uint P = 1u;
#endif
// Words per unit on each side, dims they hold, and pairs the unit rotates.
const uint W = NEOX != 0u ? 1u : (P == 1u ? 2u : 1u);
const uint DIMS = W * P;
const uint PAIRS = NEOX != 0u ? P : DIMS / 2u;
const uint UNITS = NEOX != 0u ? N_ROT / (2u * P) : (N_ROT + DIMS - 1u) / DIMS;
const uint HEAD_WORDS = D_K / P;

#if defined(K_U8) || defined(K_U16)
const uint BITS = 32u / P;
const int QMAX = P == 4u ? 255 : 65535;
#endif

// The P values of a word into v[at..at + P).
void unpack(uint w, inout float v[4], uint at) {
#if defined(K_U8) || defined(K_U16)
    for (uint i = 0u; i < P; ++i)
        v[at + i] = kvrt_dequant_static((w >> (BITS * i)) & uint(QMAX), pc.scale, pc.zero_point);
#elif defined(K_F16)
    const vec2 h = kvrt_unpack_half2x16(w);
    v[at] = h.x;
    v[at + 1u] = h.y;
#else
    v[at] = uintBitsToFloat(w);
#endif
}

// v[at..at + P) as a word; for static scales, values i with keep[i] take
// their code from `old` instead.
uint pack(float v[4], uint at, uint old, bvec4 keep) {
#if defined(K_U8) || defined(K_U16)
    uint w = 0u;
    for (uint i = 0u; i < P; ++i) {
        const uint mask = uint(QMAX) << (BITS * i);
        w |= keep[i] ? old & mask : kvrt_quantize_static(v[at + i], pc.inv_scale, pc.zero_point, QMAX) << (BITS * i);
    }
    return w;
#elif defined(K_F16)
    return kvrt_f32_to_f16(v[at]) | (kvrt_f32_to_f16(v[at + 1u]) << 16);
#else
    return floatBitsToUint(v[at]);
#endif
}
#endif

void main() {
    const uint unit = gl_GlobalInvocationID.x;
    if (unit >= pc.n_kv_heads * UNITS) return;
    const uint head = unit / UNITS;
    const uint u = unit - head * UNITS;
    // This unit's word offsets inside a row and the table entries it uses.
#if defined(VEC4)
    const uint w0 = head * HEAD_WORDS + u;
    const uint w1 = w0 + N_ROT / 16u;  // NeoX partner vector
    const uint pair0 = NEOX != 0u ? 8u * u : 4u * u;
    vec2 cs[8];
#else
    const uint w0 = head * HEAD_WORDS + u * W;
    const uint w1 = w0 + N_ROT / (2u * P);  // NeoX partner word
    const uint pair0 = NEOX != 0u ? P * u : u * (DIMS / 2u);
    // Pairs past N_ROT (normal RoPE, the last unit of a U8 head) stay as stored.
    bvec4 keep = bvec4(false);
    if (NEOX == 0u)
        for (uint j = 0u; j < PAIRS; ++j) keep[2u * j] = keep[2u * j + 1u] = u * DIMS + 2u * j >= N_ROT;
    vec2 cs[4];
#endif
    const uint first = gl_WorkGroupID.y * pc.cells_per_chunk;
    const uint last = min(pc.n_cells, first + pc.cells_per_chunk);
    uint table = 0xffffffffu;
#ifdef VEC4
    for (uint c = first; c < last; ++c) {
        const uvec2 cell = cells[pc.list_offset + c];
        if (cell.y != table) {
            table = cell.y;
            for (uint j = 0u; j < (NEOX != 0u ? 8u : 4u); ++j) cs[j] = tables[pc.table_offset + table + pair0 + j];
        }
        const uint row = cell.x >> 4;
        if (NEOX == 0u) {
            uvec4 v = k_vecs[row + w0];
            for (uint j = 0u; j < 4u; ++j) {
                const vec2 x = kvrt_unpack_half2x16(v[j]);
                float x0 = x.x, x1 = x.y;
                kvrt_rope_rotate(x0, x1, cs[j]);
                v[j] = kvrt_f32_to_f16(x0) | (kvrt_f32_to_f16(x1) << 16);
            }
            k_vecs[row + w0] = v;
        } else {
            uvec4 va = k_vecs[row + w0], vb = k_vecs[row + w1];
            for (uint j = 0u; j < 4u; ++j) {
                vec2 a = kvrt_unpack_half2x16(va[j]), b = kvrt_unpack_half2x16(vb[j]);
                kvrt_rope_rotate(a.x, b.x, cs[2u * j]);
                kvrt_rope_rotate(a.y, b.y, cs[2u * j + 1u]);
                va[j] = kvrt_f32_to_f16(a.x) | (kvrt_f32_to_f16(a.y) << 16);
                vb[j] = kvrt_f32_to_f16(b.x) | (kvrt_f32_to_f16(b.y) << 16);
            }
            k_vecs[row + w0] = va;
            k_vecs[row + w1] = vb;
        }
    }
#else
    for (uint c = first; c < last; ++c) {
        const uvec2 cell = cells[pc.list_offset + c];
        if (cell.y != table) {
            table = cell.y;
            for (uint j = 0u; j < PAIRS; ++j)
                if (pair0 + j < N_ROT / 2u) cs[j] = tables[pc.table_offset + table + pair0 + j];
        }
        const uint row = cell.x >> 2;
        float a[4], b[4];
        uint old[2];
        for (uint i = 0u; i < W; ++i) {
            old[i] = k_words[row + w0 + i];
            unpack(old[i], a, i * P);
        }
        if (NEOX == 0u) {
            for (uint j = 0u; j < PAIRS; ++j)
                if (!keep[2u * j]) kvrt_rope_rotate(a[2u * j], a[2u * j + 1u], cs[j]);
        } else {
            const uint partner = k_words[row + w1];
            unpack(partner, b, 0u);
            for (uint j = 0u; j < P; ++j) kvrt_rope_rotate(a[j], b[j], cs[j]);
            k_words[row + w1] = pack(b, 0u, partner, bvec4(false));
        }
        for (uint i = 0u; i < W; ++i) k_words[row + w0 + i] = pack(a, i * P, old[i], keep);
    }
#endif
}
