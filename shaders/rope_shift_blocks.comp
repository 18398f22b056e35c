#version 450
// RoPE shift of Q8_0 or Q4_0 K in place, one invocation per block: consecutive
// invocations own consecutive blocks of a row, so a wave reads and writes one
// stretch of memory, and every cell's heads and blocks run in parallel.
// Each block is dequantized, rotated and quantized again with the store
// kernel's exact rules, as rope_shift.comp does for a whole row.
//
// A block owns the pairs it rotates when the pairs never leave it (normal
// RoPE: pairs (2i, 2i + 1); NeoX with N_ROT <= 32) or pair it with one other
// block (NeoX with N_ROT a multiple of 64: block b < N_ROT / 64 with block
// b + N_ROT / 64, whose invocation has nothing to do). The host sends other
// NeoX shapes to rope_shift.comp. Blocks past N_ROT are quantized again
// unrotated, as the row kernel does.
//
// Blocks are 34 (Q8_0) or 18 (Q4_0) bytes, so a block that starts or ends
// inside a 32-bit word shares it with its neighbour (the next block, head or
// row): such words are changed with atomicAnd / atomicOr of this block's
// bytes only; whole words are plain stores. Reading a shared word races only
// on the neighbour's bytes (memory locations are bytes in the Vulkan memory
// model), which this invocation reads and discards.
//
// Defines: K_FMT (3 Q8_0, 4 Q4_0). Specialization: D_K, N_ROT, NEOX.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
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
    uint list_offset;   // first entry of `cells`
    uint table_offset;  // added to every cell's table entry
} pc;

const uint BYTES = K_FMT == 3 ? 34u : 18u;  // bytes per block
const uint NB = D_K / 32u;                  // blocks per head
// A block's bytes from byte 0 or 2 of its first word: up to 9 (5) words.
const uint NW = K_FMT == 3 ? 9u : 5u;
// NeoX pairs across blocks: block b < PAIRED with block b + PAIRED.
const uint PAIRED = NEOX != 0u && N_ROT >= 64u ? N_ROT / 64u : 0u;

KVRT_DEFINE_BLOCK_LOADER(load_block, k_words, K_FMT)
KVRT_DEFINE_QUANTIZERS(NW)

void load_values(uint byte, out float x[32]) {
    float d;
    uint q[8];
    load_block(byte, 0u, d, q);
    [[unroll]] for (uint t = 0u; t < 4u; ++t) {
        float v[8];
        kvrt_block_octet(uint(K_FMT), d, q, t, v);
        [[unroll]] for (uint j = 0u; j < 8u; ++j) x[t * 8u + j] = v[j];
    }
}

// Quantizes x into the block at `byte`, touching no byte outside it.
void store_values(uint byte, float x[32]) {
    const uint base = byte & 3u;  // 0 or 2
    // Quantized from byte 0 (constant indices), then moved to `base`.
    uint q[NW];
    [[unroll]] for (uint i = 0u; i < NW; ++i) q[i] = 0u;
    if (K_FMT == 3) kvrt_quantize_q8_0(x, 0u, q);
    else kvrt_quantize_q4_0(x, 0u, q);
    uint w[NW];
    [[unroll]] for (uint i = 0u; i < NW; ++i)
        w[i] = base == 0u ? q[i] : (q[i] << 16) | (i > 0u ? q[i - 1u] >> 16 : 0u);
    const uint first = byte >> 2, end = base + BYTES;  // end: past the block, from the first word
    [[unroll]] for (uint i = 0u; i < NW; ++i) {
        const uint lo = max(base, 4u * i), hi = min(end, 4u * i + 4u);  // this block's bytes of word i
        if (lo >= hi) continue;
        const uint mask = hi - lo == 4u ? 0xFFFFFFFFu : ((1u << (8u * (hi - lo))) - 1u) << (8u * (lo - 4u * i));
        if (mask == 0xFFFFFFFFu) {
            k_words[first + i] = w[i];
        } else {
            atomicAnd(k_words[first + i], ~mask);
            atomicOr(k_words[first + i], w[i] & mask);
        }
    }
}

void main() {
    const uint total = pc.n_cells * pc.n_kv_heads * NB;
    for (uint id = gl_GlobalInvocationID.x; id < total; id += kvrt_grid_stride()) {
        const uint blk = id % NB, rest = id / NB;
        const uint h = rest % pc.n_kv_heads, c = rest / pc.n_kv_heads;
        if (PAIRED > 0u && blk >= PAIRED && blk < 2u * PAIRED) continue;  // its partner's
        const uvec2 cell = cells[pc.list_offset + c];
        const uint table = pc.table_offset + cell.y;
        const uint byte = cell.x + h * pc.head_bytes + blk * BYTES;
        float x[32];
        load_values(byte, x);
        if (PAIRED > 0u && blk < PAIRED) {
            // Value i pairs with value i of the partner, N_ROT / 2 dims on.
            const uint byte2 = byte + PAIRED * BYTES;
            float y[32];
            load_values(byte2, y);
            [[unroll]] for (uint i = 0u; i < 32u; ++i) kvrt_rope_rotate(x[i], y[i], tables[table + blk * 32u + i]);
            store_values(byte2, y);
        } else if (NEOX != 0u) {
            // N_ROT <= 32: every pair (i, i + N_ROT / 2) is in block 0.
            if (blk == 0u)
                [[unroll]] for (uint i = 0u; i < 16u; ++i)
                    if (i < N_ROT / 2u) kvrt_rope_rotate(x[i], x[i + N_ROT / 2u], tables[table + i]);
        } else {
            [[unroll]] for (uint i = 0u; i < 16u; ++i) {
                const uint d = blk * 32u + 2u * i;
                if (d < N_ROT) kvrt_rope_rotate(x[2u * i], x[2u * i + 1u], tables[table + d / 2u]);
            }
        }
        store_values(byte, x);
    }
}
