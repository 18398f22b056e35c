#version 450
// Attention over cache cells, first pass, tiled in shared memory (the kernel
// for batches of many queries: prefill, tree verification, many sequences).
//
// A workgroup takes WG (query, head) rows that share one KV head, and one
// split of the cells. It walks the split in tiles of T cells: the workgroup
// loads each tile's K and V once, dequantized to f32, into shared memory
// (with deferred RoPE, K is rotated to each cell's position there), then
// every invocation scores its row against the tile's cells with an online
// softmax and accumulates their V rows. A row's query
// (pre-scaled) and its accumulator live in the invocation; K and V are read
// from memory once per workgroup instead of once per row tile. The partial
// results (max, sum, weighted V) have the layout of attention.comp's, and
// attention_merge.comp combines them.
//
// Visibility comes from the cache's device mirror of the cell metadata, as
// in attention.comp. A workgroup whose rows are all of one sequence with a
// list of cells walks the list instead of its run (LISTS), as attention.comp
// does. Needs neither subgroup operations nor 16-bit arithmetic.
//
// Defines: K_FMT, V_FMT (formats of kv_load.glsl); Q_F16. The loops over head
// dims are unrolled, so that the query and the accumulator stay registers
// (llvmpipe turns an array indexed at run time into a chain of selects); the
// loop over the cells of a tile is not (a head times a tile unrolled is
// thousands of statements, which LLVM compiles for minutes). The tile loop,
// the cell loop and the cooperative loads count towards llvmpipe's 65535
// back-edges per invocation: the host bounds the cells of a split.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "kv_load.glsl"
#include "rope.glsl"

layout(constant_id = 1) const uint D_K = 128;
layout(constant_id = 2) const uint D_V = 128;
layout(constant_id = 3) const uint T = 16;   // cells per tile
layout(constant_id = 4) const uint UNUSED_LANES = 1;
layout(constant_id = 5) const uint DEFERRED = 0;
layout(constant_id = 6) const uint N_ROT = 0;
layout(constant_id = 7) const uint NEOX = 0;

layout(std430, set = 0, binding = 0) readonly buffer KBuf { uint k_words[]; };
layout(std430, set = 0, binding = 1) readonly buffer VBuf { uint v_words[]; };
layout(std430, set = 0, binding = 2) readonly buffer QBuf { uint q_words[]; };
layout(std430, set = 0, binding = 3) readonly buffer CellMeta { uint cell_meta[]; };
layout(std430, set = 0, binding = 4) readonly buffer MetaWords { uint meta_words[]; };
// Words per query at query_offset (ops::kQueryWords): position, sequence,
// run [lo, hi), and its list of cells in cell_lists (first word, length; 0
// when it has none).
const uint QUERY_WORDS = 6u;
layout(std430, set = 0, binding = 5) writeonly buffer Partials { float partials[]; };
layout(std430, set = 0, binding = 6) readonly buffer CellLists { uint cell_lists[]; };
// Deferred RoPE: per cell of the dispatch, N_ROT / 2 (cos, sin) pairs
// (rope_cells.comp, as in attention.comp).
layout(std430, set = 0, binding = 7) readonly buffer RopeCells { vec2 rope_cs[]; };

// What the call uses, as attention.comp's OPTS, so that the kernel leaves out
// the rest: bit 0 a token tree, bit 1 a softcap, bit 2 one 32-bit word of
// sequence bits per cell, bit 3 lists of cells.
layout(constant_id = 9) const uint OPTS = 7;
const bool HAS_TREE = (OPTS & 1u) != 0u;
const bool HAS_SOFTCAP = (OPTS & 2u) != 0u;
const bool ONE_SEQ_WORD = (OPTS & 4u) != 0u;
const bool LISTS = (OPTS & 8u) != 0u;

// The push constants of attention.comp (same layout; tiles_per_kv counts
// blocks of WG rows here).
layout(push_constant) uniform Push {
    uint n_cells;
    uint meta_first;
    uint seq_words;
    uint query_offset;
    uint n_queries;
    uint n_heads;
    uint group;
    uint tiles_per_kv;
    uint n_splits;
    uint split_base;
    uint splits_total;
    uint q_offset;
    uint q_stride;
    uint k_head_bytes;
    uint v_head_bytes;
    uint k_base;
    uint k_row;
    uint v_base;
    uint v_row;
    float scale;
    float softcap;
    int window;
    int n_keep;
    uint causal;
    uint n_kv_heads;
    uint partials_offset;
    uint rope_offset;
    float rope_mscale;
    uint params_offset;
    uint q_head_stride;
    uint cell_first;
} pc;

// The tile: K and V values of T cells, dim-major (value d of cell t at
// d * T + t), and the cells' positions (-1: empty or past the split).
shared float tile_k[D_K * T];
shared float tile_v[D_V * T];
shared int tile_pos[T];
shared uint tile_cell[T];  // the cells, within this dispatch

float k_scale = 0.0, v_scale = 0.0;
int k_zp = 0, v_zp = 0;

KVRT_DEFINE_OCTET_LOADER(load_k, k_words, K_FMT, k_scale, k_zp)
KVRT_DEFINE_OCTET_LOADER(load_v, v_words, V_FMT, v_scale, v_zp)

#include "attn_tree.glsl"
#include "attn_lists.glsl"

float alibi_slope(uint h) {
    const float m0 = uintBitsToFloat(meta_words[pc.params_offset + 4u]);
    if (m0 == 0.0) return 0.0;
    const float m1 = uintBitsToFloat(meta_words[pc.params_offset + 5u]);
    const uint n_log2 = meta_words[pc.params_offset + 6u];
    return h < n_log2 ? pow(m0, float(h + 1u)) : pow(m1, float(2u * (h - n_log2) + 1u));
}

void main() {
    const uint wg = gl_WorkGroupSize.x;
    const uint lid = gl_LocalInvocationIndex;
    const uint tile = gl_WorkGroupID.x / pc.n_splits;
    const uint split = gl_WorkGroupID.x - tile * pc.n_splits;
    const uint kvh = tile / pc.tiles_per_kv;
    const uint idx = (tile - kvh * pc.tiles_per_kv) * wg + lid;  // row within this KV head
    if (K_FMT >= 5) {
        k_scale = uintBitsToFloat(meta_words[pc.params_offset]);
        k_zp = int(meta_words[pc.params_offset + 1u]);
    }
    if (V_FMT >= 5) {
        v_scale = uintBitsToFloat(meta_words[pc.params_offset + 2u]);
        v_zp = int(meta_words[pc.params_offset + 3u]);
    }

    // This invocation's row: (query idx / group, head kvh * group + idx % group).
    const bool live = idx < pc.n_queries * pc.group;
    const uint query = live ? idx / pc.group : 0u;
    const uint head = kvh * pc.group + (idx % pc.group);
    const int qpos = int(meta_words[pc.query_offset + QUERY_WORDS * query]);
    const uint qseq = meta_words[pc.query_offset + QUERY_WORDS * query + 1u];
    // The workgroup's cells: the union of its rows' runs, or the list of
    // their sequence when they are all of one sequence that has one (every
    // invocation reads the same queries, so all of this is uniform).
    uint span_lo = 0xFFFFFFFFu, span_hi = 0u;
    uint list_first = 0u, list_len = 0u;
    {
        const uint row0 = idx - lid, rows = pc.n_queries * pc.group;
        if (row0 < rows) {
            const uint q0 = row0 / pc.group, q_end = (min(row0 + wg, rows) + pc.group - 1u) / pc.group;
            bool one_seq = true;
            for (uint qq = q0; qq < q_end; ++qq) {
                const uint qw = pc.query_offset + QUERY_WORDS * qq;
                const uint lo = meta_words[qw + 2u], hi = meta_words[qw + 3u];
                if (lo < hi) {
                    span_lo = min(span_lo, lo);
                    span_hi = max(span_hi, hi);
                }
                one_seq = one_seq && meta_words[qw + 1u] == meta_words[pc.query_offset + QUERY_WORDS * q0 + 1u];
            }
            if (LISTS && one_seq) {
                list_first = meta_words[pc.query_offset + QUERY_WORDS * q0 + 4u];
                list_len = meta_words[pc.query_offset + QUERY_WORDS * q0 + 5u];
            }
        }
    }
    const bool by_list = LISTS && list_len > 0u;
    const float slope = alibi_slope(head);

    float q[D_K];
    {
        const uint base = pc.q_offset + query * pc.q_stride;
#ifdef Q_F16
        const uint hb = (base + head * pc.q_head_stride) * 2u;  // in halves
        [[unroll]] for (uint d = 0u; d < D_K; ++d) {
            q[d] = kvrt_f16_to_f32(q_words[(hb + d) >> 1] >> (((hb + d) & 1u) * 16u));
        }
#else
        const uint hb = base + head * pc.q_head_stride;
        [[unroll]] for (uint d = 0u; d < D_K; ++d) q[d] = uintBitsToFloat(q_words[hb + d]);
#endif
        [[unroll]] for (uint d = 0u; d < D_K; ++d) q[d] *= pc.scale;
    }

    float m = -1.0 / 0.0, l = 0.0;
    float acc[D_V];
    [[unroll]] for (uint d = 0u; d < D_V; ++d) acc[d] = 0.0;

    // The splits cut the workgroup's cells: the part of this dispatch inside
    // the union of the runs, or the part of the list inside this dispatch
    // (then t0, t1 and the tiles count list entries).
    uint t0, t1;
    if (by_list) {
        t0 = list_lower_bound(list_first, list_len, pc.cell_first);
        t1 = list_lower_bound(list_first, list_len, pc.cell_first + pc.n_cells);
    } else {
        t0 = clamp(span_lo, pc.cell_first, pc.cell_first + pc.n_cells) - pc.cell_first;
        t1 = max(t0, clamp(span_hi, pc.cell_first, pc.cell_first + pc.n_cells) - pc.cell_first);
    }
    const uint per_split = (t1 - t0 + pc.n_splits - 1u) / pc.n_splits;
    const uint c0 = t0 + split * per_split;
    const uint c1 = min(t1, c0 + per_split);
    const uint meta_stride = 1u + pc.seq_words;
    const uint k_octets = D_K / 8u, v_octets = D_V / 8u;
    const TreeView tree = tree_view();
    for (uint first = c0; first < c1; first += T) {
        // Load the tile: every invocation some octets of K and V rows. Past
        // the split a tile entry repeats the split's last cell, masked.
        if (lid < T) {
            const uint e = min(first + lid, c1 - 1u);
            const uint c = by_list ? cell_lists[list_first + e] - pc.cell_first : e;
            tile_cell[lid] = c;
            tile_pos[lid] = first + lid < c1 ? int(cell_meta[(pc.meta_first + c) * meta_stride]) : -1;
        }
        for (uint i = lid; i < T * (k_octets + v_octets); i += wg) {
            float v8[8];
            if (i < T * k_octets) {
                const uint t = i / k_octets, o = i - t * k_octets;
                const uint e = min(first + t, c1 - 1u);
                const uint c = by_list ? cell_lists[list_first + e] - pc.cell_first : e;
                load_k(pc.k_base + c * pc.k_row + kvh * pc.k_head_bytes, o, v8);
                [[unroll]] for (uint j = 0u; j < 8u; ++j) tile_k[(o * 8u + j) * T + t] = v8[j];
            } else {
                const uint i2 = i - T * k_octets;
                const uint t = i2 / v_octets, o = i2 - t * v_octets;
                const uint e = min(first + t, c1 - 1u);
                const uint c = by_list ? cell_lists[list_first + e] - pc.cell_first : e;
                load_v(pc.v_base + c * pc.v_row + kvh * pc.v_head_bytes, o, v8);
                [[unroll]] for (uint j = 0u; j < 8u; ++j) tile_v[(o * 8u + j) * T + t] = v8[j];
            }
        }
        barrier();
        if (DEFERRED != 0u) {
            // Rotate K to each cell's position: pair (a, b) by angle pos * theta,
            // both scaled by the magnitude (rotated dims only, as in GGML).
            const uint half_rot = N_ROT / 2u;
            for (uint i = lid; i < T * half_rot; i += wg) {
                const uint t = i / half_rot, pair = i - t * half_rot;
                const uint a = NEOX != 0u ? pair : 2u * pair;
                const uint b = NEOX != 0u ? pair + half_rot : 2u * pair + 1u;
                float ka = tile_k[a * T + t], kb = tile_k[b * T + t];
                kvrt_rope_rotate(ka, kb, rope_cs[pc.rope_offset + tile_cell[t] * half_rot + pair]);
                tile_k[a * T + t] = ka;
                tile_k[b * T + t] = kb;
            }
            barrier();
        }

        // Each cell of the tile this row sees, in turn: its score, then the
        // online softmax (rescaling only when the maximum grows) and its V.
        for (uint t = 0u; t < T; ++t) {
            const int cpos = tile_pos[t];
            bool v = live && cpos >= 0;
            if (v) {
                const uint sw = cell_meta[(pc.meta_first + tile_cell[t]) * meta_stride + 1u + (ONE_SEQ_WORD ? 0u : qseq >> 5)];
                v = ((sw >> (qseq & 31u)) & 1u) != 0u;
            }
            if (pc.causal != 0u) v = v && cpos <= qpos;
            if (pc.window > 0 && cpos >= pc.n_keep) v = v && qpos - cpos < pc.window;
            if (HAS_TREE && v) {
                const uint node = tree_node(tree, pc.cell_first + tile_cell[t]);
                if (node != NO_NODE) v = tree_sees(tree, query, node);
            }
            if (!v) continue;
            float x = 0.0;
            [[unroll]] for (uint d = 0u; d < D_K; ++d) x += q[d] * tile_k[d * T + t];
            if (HAS_SOFTCAP) x = pc.softcap * tanh(KVRT_FDIV(x, pc.softcap));
            x -= slope * abs(float(qpos - cpos));  // ALiBi, as GGML fills its mask
            if (x > m) {
                const float corr = exp(m - x);
                l *= corr;
                [[unroll]] for (uint d = 0u; d < D_V; ++d) acc[d] *= corr;
                m = x;
            }
            const float p = exp(x - m);
            l += p;
            [[unroll]] for (uint d = 0u; d < D_V; ++d) acc[d] += p * tile_v[d * T + t];
        }
        barrier();  // the tile is read before the next one overwrites it
    }

    if (!live) return;
    const uint row = query * pc.n_heads + head;
    const uint base = pc.partials_offset + (row * pc.splits_total + pc.split_base + split) * (D_V + KVRT_PARTIAL_HEAD);
    partials[base] = m;
    partials[base + 1u] = l;
    [[unroll]] for (uint d = 0u; d < D_V; ++d) partials[base + KVRT_PARTIAL_HEAD + d] = acc[d];
}
