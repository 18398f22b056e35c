#version 450
// RoPE shift of F32 or F16 K in place, laid out for streaming: invocation x
// owns one rotation unit of a row (a pair, or for F16 NeoX two pairs in two
// words) and walks the cells of its chunk (workgroup y), so consecutive
// invocations touch consecutive words and each keeps its (cos, sin) in
// registers while consecutive cells share a delta (a context shift moves every
// cell by the same amount). Quantized K uses rope_shift.comp.
//
// Defines: K_F16 (else F32); VEC4 (F16 only: a unit is 16 bytes, 8 halves, and
// rows are 16-byte aligned). Specialization: D_K, N_ROT, NEOX.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "quant.glsl"

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
} pc;

#if defined(VEC4)
// Units per head: N_ROT/8 vectors of 4 pairs (normal); N_ROT/16 vector pairs (NeoX).
const uint UNITS = NEOX != 0u ? N_ROT / 16u : N_ROT / 8u;
const uint HEAD_WORDS = D_K / 8u;  // in vectors
#elif defined(K_F16)
// Units per head: N_ROT/2 pairs, one word each (normal); N_ROT/4 word pairs (NeoX).
const uint UNITS = NEOX != 0u ? N_ROT / 4u : N_ROT / 2u;
const uint HEAD_WORDS = D_K / 2u;
#else
const uint UNITS = N_ROT / 2u;
const uint HEAD_WORDS = D_K;
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
#elif defined(K_F16)
    const uint w0 = head * HEAD_WORDS + u;
    const uint w1 = w0 + N_ROT / 4u;  // NeoX partner word
    const uint pair0 = NEOX != 0u ? 2u * u : u;
#else
    const uint w0 = head * HEAD_WORDS + (NEOX != 0u ? u : 2u * u);
    const uint w1 = w0 + (NEOX != 0u ? N_ROT / 2u : 1u);
    const uint pair0 = u;
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
                v[j] = kvrt_f32_to_f16(x.x * cs[j].x - x.y * cs[j].y) | (kvrt_f32_to_f16(x.x * cs[j].y + x.y * cs[j].x) << 16);
            }
            k_vecs[row + w0] = v;
        } else {
            uvec4 va = k_vecs[row + w0], vb = k_vecs[row + w1];
            for (uint j = 0u; j < 4u; ++j) {
                const vec2 a = kvrt_unpack_half2x16(va[j]), b = kvrt_unpack_half2x16(vb[j]);
                const vec2 c0 = cs[2u * j], c1 = cs[2u * j + 1u];
                va[j] = kvrt_f32_to_f16(a.x * c0.x - b.x * c0.y) | (kvrt_f32_to_f16(a.y * c1.x - b.y * c1.y) << 16);
                vb[j] = kvrt_f32_to_f16(a.x * c0.y + b.x * c0.x) | (kvrt_f32_to_f16(a.y * c1.y + b.y * c1.x) << 16);
            }
            k_vecs[row + w0] = va;
            k_vecs[row + w1] = vb;
        }
    }
#else
    vec2 cs0 = vec2(1.0, 0.0), cs1 = vec2(1.0, 0.0);
    for (uint c = first; c < last; ++c) {
        const uvec2 cell = cells[pc.list_offset + c];
        if (cell.y != table) {
            table = cell.y;
            cs0 = tables[pc.table_offset + table + pair0];
            cs1 = tables[pc.table_offset + table + pair0 + 1u];
        }
        const uint row = cell.x >> 2;
#ifdef K_F16
        if (NEOX == 0u) {
            const vec2 x = kvrt_unpack_half2x16(k_words[row + w0]);
            k_words[row + w0] = kvrt_f32_to_f16(x.x * cs0.x - x.y * cs0.y) |
                                (kvrt_f32_to_f16(x.x * cs0.y + x.y * cs0.x) << 16);
        } else {
            const vec2 a = kvrt_unpack_half2x16(k_words[row + w0]);  // dims 2u, 2u+1
            const vec2 b = kvrt_unpack_half2x16(k_words[row + w1]);  // their partners
            const vec2 ra = vec2(a.x * cs0.x - b.x * cs0.y, a.y * cs1.x - b.y * cs1.y);
            const vec2 rb = vec2(a.x * cs0.y + b.x * cs0.x, a.y * cs1.y + b.y * cs1.x);
            k_words[row + w0] = kvrt_f32_to_f16(ra.x) | (kvrt_f32_to_f16(ra.y) << 16);
            k_words[row + w1] = kvrt_f32_to_f16(rb.x) | (kvrt_f32_to_f16(rb.y) << 16);
        }
#else
        const float x0 = uintBitsToFloat(k_words[row + w0]);
        const float x1 = uintBitsToFloat(k_words[row + w1]);
        k_words[row + w0] = floatBitsToUint(x0 * cs0.x - x1 * cs0.y);
        k_words[row + w1] = floatBitsToUint(x0 * cs0.y + x1 * cs0.x);
#endif
    }
#endif
}
