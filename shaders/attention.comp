#version 450
// Attention over cache cells, first pass (split-K, "flash decoding"):
//
//   for each tile of up to R (query, head) rows that share one KV head, and
//   each split of the attended cells, one lane group streams the split's cells
//   with an online softmax and writes a partial result (max, sum, weighted V)
//   that attention_merge.comp combines.
//
// A lane group is LG invocations that cooperate on one cell at a time, each
// owning every LG-th octet (8 values) of the head dims; scores are summed
// across the group with subgroup shuffles (SHUFFLE variant). The portable
// variant uses LG = 1: one invocation owns whole rows and needs neither
// subgroup operations nor 16-bit arithmetic. K and V are dequantized on the
// fly, never expanded into a temporary buffer.
//
// Defines: K_FMT, V_FMT (1 F32, 2 F16, 3 Q8_0, 4 Q4_0, 5 U8_STATIC,
// 6 U16_STATIC); Q_F16 (queries in f16, else f32); SHUFFLE; WIDE (the
// portable build with 32-byte row loads, see VEC4; needs shaderInt64). The static-scale
// types' (scale, zero point) of the layer and the ALiBi slopes come in
// meta_words, at params_offset: the push constants (120 bytes) leave no room
// for them within the 128 bytes every device guarantees, and specialization
// constants would need a pipeline per layer.
//
// What each row sees is decided here, from the cache's device mirror of its
// cell metadata (a position and the sequence bits per cell), not by the host:
// a dispatch covers a run of consecutive cells, and the host's work does not
// depend on how many there are. A cell no row of the tile sees costs its
// metadata words only.
//
// Every loop but the cell loop is [[unroll]]: besides being faster, this is a
// workaround for llvmpipe (lavapipe), which silently leaves loops after 65535
// back-edges per invocation in total; the host keeps splits below that.
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#ifdef SHUFFLE
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#endif
#ifdef WIDE
#ifdef SHUFFLE
#error "WIDE is a build of the portable kernel"
#endif
#extension GL_ARB_gpu_shader_int64 : require
#endif
#include "common.glsl"
#include "kv_load.glsl"

layout(constant_id = 1) const uint D_K = 128;
layout(constant_id = 2) const uint D_V = 128;
layout(constant_id = 3) const uint R = 4;   // rows per tile
layout(constant_id = 4) const uint LG = 8;  // lanes per group (1 without SHUFFLE)
// Deferred RoPE: K is stored unrotated; rotate it to each cell's position.
// Rather than rotating K, each row's query is rotated by the opposite angle
// (q . R(p) k = R(-p) q . k), with each cell's (cos, sin) as rope_cells.comp
// composed them from the cache's position table: exact at any position.
layout(constant_id = 5) const uint DEFERRED = 0;
layout(constant_id = 6) const uint N_ROT = 0;
layout(constant_id = 7) const uint NEOX = 0;
// Rows read 16 bytes at a time: bit 0 for K, bit 1 for V (F32 and F16 rows
// whose base, row stride and head offset are multiples of 16 bytes). In the
// WIDE build, bit 2 for K and bit 3 for V: F32 and F16 rows read 32 bytes at
// a time (multiples of 32), Q8_0 and Q4_0 blocks read as 16-byte units (the
// bound range is whole units). Bit 4: the queries read 16 bytes at a time
// (their offset and strides multiples of 4 words); bit 5 (WIDE): 32 bytes
// at a time (multiples of 8 words). Every load and store site
// is a loop over the SIMD lanes on llvmpipe, and their number is what its
// compile time grows with (more than linearly): one 16-byte unit instead of
// four or eight scalar words per octet of a query made the first call of a
// decode with 4 rows per tile compile in about half the time.
layout(constant_id = 8) const uint VEC4 = 0;
// What the call uses, so that the kernel leaves out the rest (llvmpipe runs
// both sides of every branch, a load under a false condition included):
// bit 0 a token tree, bit 1 a softcap, bit 2 one 32-bit word of sequence
// bits per cell (every row reads the same word), bit 3 lists of cells.
layout(constant_id = 9) const uint OPTS = 7;
const bool HAS_TREE = (OPTS & 1u) != 0u;
const bool HAS_SOFTCAP = (OPTS & 2u) != 0u;
const bool ONE_SEQ_WORD = (OPTS & 4u) != 0u;
const bool LISTS = (OPTS & 8u) != 0u;

const uint CELLS = 2u;  // cells per step of the cell loop
const uint OK = (D_K / 8u + LG - 1u) / LG;  // K octets per lane
const uint OV = (D_V / 8u + LG - 1u) / LG;  // V octets per lane

layout(std430, set = 0, binding = 0) readonly buffer KBuf { uint k_words[]; };
layout(std430, set = 0, binding = 1) readonly buffer VBuf { uint v_words[]; };
// The same K and V buffers, seen as 16-byte units (VEC4).
layout(std430, set = 0, binding = 0) readonly buffer KBuf4 { uvec4 k_vec4[]; };
layout(std430, set = 0, binding = 1) readonly buffer VBuf4 { uvec4 v_vec4[]; };
#ifdef WIDE
// And as 32-byte units. On llvmpipe every load inside the cell loop is a loop
// over the SIMD lanes, whatever its width: one u64vec4 costs what one uvec4
// does and carries twice the bytes.
layout(std430, set = 0, binding = 0) readonly buffer KBuf8 { u64vec4 k_vec8[]; };
layout(std430, set = 0, binding = 1) readonly buffer VBuf8 { u64vec4 v_vec8[]; };
layout(std430, set = 0, binding = 0) readonly buffer KBuf16 { u64vec2 k_u64x2[]; };
layout(std430, set = 0, binding = 1) readonly buffer VBuf16 { u64vec2 v_u64x2[]; };
// The queries as 32-byte units (Q_WIDE), and the partials (32-byte aligned:
// KVRT_PARTIAL_HEAD is 8 floats).
layout(std430, set = 0, binding = 2) readonly buffer QBuf8 { u64vec4 q_vec8[]; };
layout(std430, set = 0, binding = 5) writeonly buffer Partials8 { u64vec4 partials8[]; };
#endif
layout(std430, set = 0, binding = 2) readonly buffer QBuf { uint q_words[]; };
// The queries as 16-byte units (Q_VEC4), and the partials as vec4.
layout(std430, set = 0, binding = 2) readonly buffer QBuf4 { uvec4 q_vec4[]; };
// The mirror: per cell its position (-1: empty), then seq_words words of
// sequence bits (bit s % 32 of word s / 32: sequence s uses the cell).
layout(std430, set = 0, binding = 3) readonly buffer CellMeta { uint cell_meta[]; };
// Per query (position, sequence, the run of cells [lo, hi) that holds the
// sequence's cells, in cache cells, and its list of cells in cell_lists:
// first word, length, 0 when it has none); RoPE frequencies; parameters;
// sinks.
layout(std430, set = 0, binding = 4) readonly buffer MetaWords { uint meta_words[]; };
const uint QUERY_WORDS = 6u;  // ops::kQueryWords
layout(std430, set = 0, binding = 5) writeonly buffer Partials { float partials[]; };
layout(std430, set = 0, binding = 5) writeonly buffer Partials4 { vec4 partials4[]; };
// Per-sequence lists of cells, each in increasing cell order
// (cell_lists.comp): a tile whose rows are all of one sequence with a list
// walks the listed cells instead of its run (LISTS).
layout(std430, set = 0, binding = 6) readonly buffer CellLists { uint cell_lists[]; };
// Deferred RoPE: per cell of the dispatch, N_ROT / 2 (cos, sin) pairs, from
// rope_offset on (rope_cells.comp), the magnitude included.
layout(std430, set = 0, binding = 7) readonly buffer RopeCells { vec2 rope_cs[]; };

layout(push_constant) uniform Push {
    uint n_cells;        // cells of this dispatch
    uint meta_first;     // its first cell's index in cell_meta
    uint seq_words;      // 32-bit words of sequence bits per cell
    uint query_offset;   // word offset of the (pos, seq, lo, hi) quads in meta_words
    uint n_queries;
    uint n_heads;
    uint group;          // query heads per KV head
    uint tiles_per_kv;   // ceil(n_queries * group / R)
    uint n_splits;       // splits of this dispatch
    uint split_base;     // first partial slot of this dispatch
    uint splits_total;   // partial slots per row
    uint q_offset;       // word offset of query 0 in q_words
    uint q_stride;       // words between queries
    uint k_head_bytes;   // bytes between heads inside a K row
    uint v_head_bytes;
    uint k_base;         // byte offset of the dispatch's first K row
    uint k_row;          // bytes from one cell's K row to the next
    uint v_base;
    uint v_row;
    float scale;
    float softcap;       // 0: off
    int window;          // 0: none
    int n_keep;          // positions below are always visible (StreamingLLM sinks)
    uint causal;
    uint n_kv_heads;
    uint partials_offset;  // float offset of row 0's first partial
    uint rope_offset;      // deferred RoPE: index in rope_cs of the dispatch's first cell's pairs
    float rope_mscale;     // deferred RoPE: magnitude (YaRN), in rope_cs already
    uint params_offset;    // word offset in meta_words of (K scale, K zero point, V scale, V zero point,
                           // ALiBi m0, m1, n_log2: slopes when max_bias > 0, else m0 = 0)
    uint q_head_stride;    // words between the heads of one query (D_K values when packed)
    uint cell_first;       // the dispatch's first cell in the cache (token trees, runs)
} pc;

// The layer's static-scale quantization, read once per invocation.
float k_scale = 0.0, v_scale = 0.0;
int k_zp = 0, v_zp = 0;

KVRT_DEFINE_OCTET_LOADER(load_k_words, k_words, K_FMT, k_scale, k_zp)
KVRT_DEFINE_OCTET_LOADER(load_v_words, v_words, V_FMT, v_scale, v_zp)

// Octet o of the row at byte `head`, from whole 16-byte units (F32: two,
// F16: one). `head` is a multiple of 16.
#define KVRT_DEFINE_VEC4_LOADER(NAME, BUF4, FMT)                        \
    void NAME(uint head, uint o, out float v[8]) {                      \
        if (FMT == 1) {                                                 \
            const uvec4 a = BUF4[(head >> 4) + 2u * o];                 \
            const uvec4 b = BUF4[(head >> 4) + 2u * o + 1u];            \
            for (uint i = 0u; i < 4u; ++i) {                            \
                v[i] = uintBitsToFloat(a[i]);                           \
                v[i + 4u] = uintBitsToFloat(b[i]);                      \
            }                                                           \
        } else {                                                        \
            const uvec4 a = BUF4[(head >> 4) + o];                      \
            for (uint i = 0u; i < 4u; ++i) {                            \
                const vec2 h = kvrt_unpack_half2x16(a[i]);              \
                v[2u * i] = h.x;                                        \
                v[2u * i + 1u] = h.y;                                   \
            }                                                           \
        }                                                               \
    }
KVRT_DEFINE_VEC4_LOADER(load_k_vec4, k_vec4, K_FMT)
KVRT_DEFINE_VEC4_LOADER(load_v_vec4, v_vec4, V_FMT)

#define Q_VEC4 ((VEC4 & 16u) != 0u)
#ifdef WIDE
#define Q_WIDE ((VEC4 & 32u) != 0u)
#else
#define Q_WIDE false
#endif

// Octet o of a query whose first value is at `hb` (words for f32 queries,
// halves for f16), a multiple of 4 words (Q_VEC4): one or two 16-byte units.
void load_q_octet4(uint hb, uint o, out float x[8]) {
#ifdef Q_F16
    const uvec4 a = q_vec4[(hb >> 3) + o];
    [[unroll]] for (uint i = 0u; i < 4u; ++i) {
        x[2u * i] = kvrt_f16_to_f32(a[i] & 0xFFFFu);
        x[2u * i + 1u] = kvrt_f16_to_f32(a[i] >> 16);
    }
#else
    const uvec4 a = q_vec4[(hb >> 2) + 2u * o];
    const uvec4 b = q_vec4[(hb >> 2) + 2u * o + 1u];
    [[unroll]] for (uint i = 0u; i < 4u; ++i) {
        x[i] = uintBitsToFloat(a[i]);
        x[i + 4u] = uintBitsToFloat(b[i]);
    }
#endif
}

// 32-byte unit u of the queries after unit `first` (Q_WIDE).
#ifdef WIDE
void load_q_unit8(uint first, uint u, out uvec4 w[2]) {
    const u64vec4 g = q_vec8[first + u];
    w[0] = uvec4(unpackUint2x32(g.x), unpackUint2x32(g.y));
    w[1] = uvec4(unpackUint2x32(g.z), unpackUint2x32(g.w));
}
#else
void load_q_unit8(uint first, uint u, out uvec4 w[2]) {}
#endif

// Q8_0 and Q4_0 in the portable build (a lane group of one: the octets of a
// head in order): whole blocks, read once per 4 octets.
const bool K_BLOCKS = LG == 1u && (K_FMT == 3 || K_FMT == 4);
const bool V_BLOCKS = LG == 1u && (V_FMT == 3 || V_FMT == 4);
KVRT_DEFINE_BLOCK_LOADER(load_k_block, k_words, K_FMT)
KVRT_DEFINE_BLOCK_LOADER(load_v_block, v_words, V_FMT)

// 32-byte units (WIDE): an F32 octet, or two F16 octets. The kernel walks a
// head's octets in order (a lane group of one) and loads a unit at its first
// octet; wide_octet takes each octet from the unit.
#ifdef WIDE
// Macros rather than specialization-constant booleans: glslang's optimizer
// lost such a constant once it combined more terms (an undefined ID).
#define K_WIDE ((VEC4 & 4u) != 0u)
#define V_WIDE ((VEC4 & 8u) != 0u)
#define KVRT_DEFINE_WIDE_LOADER(NAME, BUF8, FMT)                         \
    void NAME(uint head, uint o, out uvec4 w[2]) {                      \
        const u64vec4 g = BUF8[(head >> 5) + (FMT == 1 ? o : o >> 1)];  \
        w[0] = uvec4(unpackUint2x32(g.x), unpackUint2x32(g.y));         \
        w[1] = uvec4(unpackUint2x32(g.z), unpackUint2x32(g.w));         \
    }
KVRT_DEFINE_WIDE_LOADER(load_k_wide, k_vec8, K_FMT)
KVRT_DEFINE_WIDE_LOADER(load_v_wide, v_vec8, V_FMT)
// Block b of a Q8_0 (FMT 3) or Q4_0 (FMT 4) head, as KVRT_DEFINE_BLOCK_LOADER
// gives it, from the 16-byte units that hold it: 3 (Q8_0) or 2 (Q4_0) loads
// instead of 9 or 5. The block starts at any even byte of a unit; the
// realignment is 64-bit shifts and selects, without a branch.
#define KVRT_DEFINE_WIDE_BLOCK_LOADER(NAME, BUF16, FMT)                                  \
    void NAME(uint head_byte, uint b, out float d, out uint q[8]) {                     \
        const uint block = head_byte + b * (FMT == 3 ? 34u : 18u);                      \
        const uint units = FMT == 3 ? 3u : 2u;                                          \
        const uint words = FMT == 3 ? 5u : 3u; /* 64-bit words of the block */          \
        uint64_t w[7];                                                                  \
        [[unroll]] for (uint i = 0u; i < 7u; ++i) w[i] = 0ul;                           \
        [[unroll]] for (uint i = 0u; i < units; ++i) {                                  \
            const u64vec2 g = BUF16[(block >> 4) + i];                                  \
            w[2u * i] = g.x;                                                            \
            w[2u * i + 1u] = g.y;                                                       \
        }                                                                               \
        const bool upper = (block & 8u) != 0u; /* starts in the unit's second word */   \
        const uint s = (block & 7u) * 8u;                                               \
        uint64_t r[5]; /* r[j]: the block's bytes 8j .. 8j + 7 */                       \
        [[unroll]] for (uint j = 0u; j < 5u; ++j) {                                     \
            if (j >= words) break;                                                      \
            const uint64_t lo = upper ? w[j + 1u] : w[j];                               \
            const uint64_t hi = upper ? w[j + 2u] : w[j + 1u];                          \
            r[j] = (lo >> s) | ((hi << 1u) << (63u - s)); /* no shift by 64 at s = 0 */ \
        }                                                                               \
        d = kvrt_f16_to_f32(uint(r[0]) & 0xFFFFu);                                      \
        /* quant word i: the block's bytes 2 + 4i .. 5 + 4i */                          \
        [[unroll]] for (uint i = 0u; i < 8u; ++i) {                                     \
            const uint j = (2u + 4u * i) >> 3;                                          \
            if (i >= 2u * (words - 1u)) q[i] = 0u;                                      \
            else if ((i & 1u) == 0u) q[i] = uint(r[j] >> 16u);                          \
            else q[i] = uint(r[j] >> 48u) | (uint(r[j + 1u]) << 16u);                   \
        }                                                                               \
    }
KVRT_DEFINE_WIDE_BLOCK_LOADER(load_k_block_wide, k_u64x2, K_FMT)
KVRT_DEFINE_WIDE_BLOCK_LOADER(load_v_block_wide, v_u64x2, V_FMT)
#else
#define K_WIDE false
#define V_WIDE false
void load_k_wide(uint head, uint o, out uvec4 w[2]) {}
void load_v_wide(uint head, uint o, out uvec4 w[2]) {}
void load_k_block_wide(uint head_byte, uint b, out float d, out uint q[8]) {}
void load_v_block_wide(uint head_byte, uint b, out float d, out uint q[8]) {}
#endif
// Is octet o the first of its unit?
bool wide_first(int fmt, uint o) { return fmt == 1 || (o & 1u) == 0u; }
void wide_octet(int fmt, uvec4 w[2], uint o, out float v[8]) {
    if (fmt == 1) {
        [[unroll]] for (uint i = 0u; i < 4u; ++i) {
            v[i] = uintBitsToFloat(w[0][i]);
            v[i + 4u] = uintBitsToFloat(w[1][i]);
        }
    } else {
        [[unroll]] for (uint i = 0u; i < 4u; ++i) {
            const vec2 h = kvrt_unpack_half2x16(w[o & 1u][i]);
            v[2u * i] = h.x;
            v[2u * i + 1u] = h.y;
        }
    }
}

void load_k(uint head, uint o, out float v[8]) {
    if ((VEC4 & 1u) != 0u && K_FMT <= 2) load_k_vec4(head, o, v);
    else load_k_words(head, o, v);
}

void load_v(uint head, uint o, out float v[8]) {
    if ((VEC4 & 2u) != 0u && V_FMT <= 2) load_v_vec4(head, o, v);
    else load_v_words(head, o, v);
}

float group_sum(float x) {
#ifdef SHUFFLE
    // Bounds known to the compiler: a loop left in the code costs a loop
    // per row and cell on llvmpipe, even with no iteration.
    [[unroll]] for (uint m = 1u; m < 128u; m <<= 1)
        if (m < LG) x += subgroupShuffleXor(x, m);
#endif
    return x;
}

float load_q(uint word_base, uint e) {
#ifdef Q_F16
    return kvrt_f16_to_f32(q_words[word_base + (e >> 1)] >> ((e & 1u) * 16u));
#else
    return uintBitsToFloat(q_words[word_base + e]);
#endif
}

#include "attn_tree.glsl"

float alibi_slope(uint h) {
    const float m0 = uintBitsToFloat(meta_words[pc.params_offset + 4u]);
    if (m0 == 0.0) return 0.0;
    const float m1 = uintBitsToFloat(meta_words[pc.params_offset + 5u]);
    const uint n_log2 = meta_words[pc.params_offset + 6u];
    return h < n_log2 ? pow(m0, float(h + 1u)) : pow(m1, float(2u * (h - n_log2) + 1u));
}

#include "attn_lists.glsl"

void main() {
#ifdef SHUFFLE
    // Lane groups are formed from the subgroup built-ins alone: how local
    // invocation indices map onto subgroups is the driver's choice. LG is a
    // power of two that divides the subgroup size (the host requires that
    // size, or keeps LG within the smallest size the device may use), and
    // subgroups are full (required where the device offers it; the workgroup
    // is whole subgroups), so a workgroup's groups are 0 .. size / LG - 1.
    const uint lane = gl_SubgroupInvocationID % LG;
    const uint group_in_wg = gl_SubgroupID * (gl_SubgroupSize / LG) + gl_SubgroupInvocationID / LG;
#else
    const uint lane = 0u;
    const uint group_in_wg = gl_LocalInvocationIndex;
#endif
    const uint groups_per_wg = gl_WorkGroupSize.x / LG;
    const uint gid = gl_WorkGroupID.x * groups_per_wg + group_in_wg;
    const uint n_tiles = pc.n_kv_heads * pc.tiles_per_kv;
    if (gid >= n_tiles * pc.n_splits) return;  // whole groups leave together
    const uint tile = gid / pc.n_splits;
    const uint split = gid - tile * pc.n_splits;
    const uint kvh = tile / pc.tiles_per_kv;
    const uint first_row = (tile - kvh * pc.tiles_per_kv) * R;  // within this KV head
    if (K_FMT >= 5) {
        k_scale = uintBitsToFloat(meta_words[pc.params_offset]);
        k_zp = int(meta_words[pc.params_offset + 1u]);
    }
    if (V_FMT >= 5) {
        v_scale = uintBitsToFloat(meta_words[pc.params_offset + 2u]);
        v_zp = int(meta_words[pc.params_offset + 3u]);
    }

    // The tile's rows: row r is (query r / group, head kvh * group + r % group).
    uint r_query[R], r_head[R];
    int r_pos[R];
    uint r_seq[R];
    bool r_live[R];
    float slope[R];
    uint span_lo = 0xFFFFFFFFu, span_hi = 0u;  // the union of the rows' runs of cells
    [[unroll]] for (uint r = 0u; r < R; ++r) {
        const uint idx = first_row + r;
        r_live[r] = idx < pc.n_queries * pc.group;
        r_query[r] = r_live[r] ? idx / pc.group : 0u;
        r_head[r] = kvh * pc.group + (idx % pc.group);
        const uint qw = pc.query_offset + QUERY_WORDS * r_query[r];
        r_pos[r] = int(meta_words[qw]);
        r_seq[r] = meta_words[qw + 1u];
        const uint lo = meta_words[qw + 2u], hi = meta_words[qw + 3u];
        if (r_live[r] && lo < hi) {
            span_lo = min(span_lo, lo);
            span_hi = max(span_hi, hi);
        }
        slope[r] = alibi_slope(r_head[r]);
    }

    // This lane's octets of each row's query, pre-scaled.
    float q[R][OK * 8u];
    [[unroll]] for (uint r = 0u; r < R; ++r) {
        const uint base = pc.q_offset + r_query[r] * pc.q_stride;
#ifdef Q_F16
        const uint hb = (base + r_head[r] * pc.q_head_stride) * 2u;  // in halves
#else
        const uint hb = base + r_head[r] * pc.q_head_stride;
#endif
        uvec4 qu[2];  // the current 32-byte unit of the query (Q_WIDE)
        [[unroll]] for (uint i = 0u; i < OK; ++i) {
            const uint o = lane + i * LG;
            float x[8];
            if (Q_WIDE && o < D_K / 8u) {
                // A lane group of one: the octets in order, a unit at the
                // first octet it holds (f32: one, f16: two).
#ifdef Q_F16
                if ((o & 1u) == 0u) load_q_unit8(hb >> 4, o >> 1, qu);
                [[unroll]] for (uint k = 0u; k < 4u; ++k) {
                    x[2u * k] = kvrt_f16_to_f32(qu[o & 1u][k] & 0xFFFFu);
                    x[2u * k + 1u] = kvrt_f16_to_f32(qu[o & 1u][k] >> 16);
                }
#else
                load_q_unit8(hb >> 3, o, qu);
                [[unroll]] for (uint k = 0u; k < 4u; ++k) {
                    x[k] = uintBitsToFloat(qu[0][k]);
                    x[k + 4u] = uintBitsToFloat(qu[1][k]);
                }
#endif
            } else if (Q_VEC4 && o < D_K / 8u) {
                load_q_octet4(hb, o, x);
            } else {
                [[unroll]] for (uint j = 0u; j < 8u; ++j) {
                    x[j] = 0.0;
                    if (o < D_K / 8u) {
#ifdef Q_F16
                        const uint e = hb + o * 8u + j;
                        x[j] = kvrt_f16_to_f32(q_words[e >> 1] >> ((e & 1u) * 16u));
#else
                        x[j] = uintBitsToFloat(q_words[hb + o * 8u + j]);
#endif
                    }
                }
            }
            [[unroll]] for (uint j = 0u; j < 8u; ++j) q[r][i * 8u + j] = x[j] * pc.scale;
        }
    }

    // Deferred RoPE: each owned dim's partner value and rotation sign.
    float qp[R][OK * 8u];
    if (DEFERRED != 0u) {
        [[unroll]] for (uint r = 0u; r < R; ++r) {
            const uint base = pc.q_offset + r_query[r] * pc.q_stride;
            [[unroll]] for (uint i = 0u; i < OK; ++i) {
                const uint o = lane + i * LG;
                [[unroll]] for (uint j = 0u; j < 8u; ++j) {
                    const uint d = o * 8u + j;
                    float x = 0.0;
                    if (o < D_K / 8u && d < N_ROT) {
                        const uint half_rot = N_ROT / 2u;
                        const bool first = NEOX != 0u ? d < half_rot : (d & 1u) == 0u;
                        float y;  // the partner's value, scaled
                        if (NEOX == 0u) {
                            // Dims 2i and 2i + 1 pair up inside the octet,
                            // already read.
                            y = q[r][i * 8u + (j ^ 1u)];
                        } else {
                            const uint partner = first ? d + half_rot : d - half_rot;
#ifdef Q_F16
                            const uint e = (base + r_head[r] * pc.q_head_stride) * 2u + partner;
                            y = kvrt_f16_to_f32(q_words[e >> 1] >> ((e & 1u) * 16u)) * pc.scale;
#else
                            y = uintBitsToFloat(q_words[base + r_head[r] * pc.q_head_stride + partner]) * pc.scale;
#endif
                        }
                        // k_a weighs q_a c + q_b s; k_b weighs q_b c - q_a s
                        // (negation is exact: as the value times -scale).
                        x = first ? y : -y;
                    }
                    qp[r][i * 8u + j] = x;
                }
            }
        }
    }

    float m[R], l[R], acc[R][OV * 8u];
    [[unroll]] for (uint r = 0u; r < R; ++r) {
        m[r] = -1.0 / 0.0;
        l[r] = 0.0;
        [[unroll]] for (uint i = 0u; i < OV * 8u; ++i) acc[r][i] = 0.0;
    }

    // The splits cut the tile's cells: the part of this dispatch inside the
    // union of its rows' runs (cells outside hold none of their sequences),
    // or, for rows of one sequence with a list, the part of the list inside
    // this dispatch (then t0, t1 and the cell loop count list entries).
    uint list_first = 0u, list_len = 0u;
    if (LISTS) {
        bool one_seq = true;
        [[unroll]] for (uint r = 1u; r < R; ++r) one_seq = one_seq && (!r_live[r] || r_seq[r] == r_seq[0]);
        const uint qw = pc.query_offset + QUERY_WORDS * r_query[0];  // row 0 is always live
        if (one_seq) {
            list_first = meta_words[qw + 4u];
            list_len = meta_words[qw + 5u];
        }
    }
    const bool by_list = LISTS && list_len > 0u;
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
    const TreeView tree = tree_view();
    // CELLS consecutive cells per step: one rescaling of a row's output per
    // step, and each octet of the queries and of the output read once per
    // step. Past c1 a step repeats its first cell, which no row sees.
    for (uint c = c0; c < c1; c += CELLS) {
        // Which rows see each cell: in one of its sequences, not after the
        // row's query (causal), inside the window (or a sink), and, for a
        // cell of the batch's token tree, an ancestor of the row's query.
        int cpos[CELLS];
        bool vis[CELLS][R];
        uint kb[CELLS], vb[CELLS], cell[CELLS];
        bool any = false;
        [[unroll]] for (uint b = 0u; b < CELLS; ++b) {
            const bool inside = c + b < c1;
            // The cell within this dispatch.
            uint cc = inside ? c + b : c;
            if (by_list) cc = cell_lists[list_first + cc] - pc.cell_first;
            const uint mb = (pc.meta_first + cc) * meta_stride;
            cpos[b] = int(cell_meta[mb]);
            const uint node = HAS_TREE ? tree_node(tree, pc.cell_first + cc) : NO_NODE;
            const uint sw0 = ONE_SEQ_WORD ? cell_meta[mb + 1u] : 0u;
            [[unroll]] for (uint r = 0u; r < R; ++r) {
                const uint sw = ONE_SEQ_WORD ? sw0 : cell_meta[mb + 1u + (r_seq[r] >> 5)];
                bool v = inside && r_live[r] && cpos[b] >= 0 && ((sw >> (r_seq[r] & 31u)) & 1u) != 0u;
                if (pc.causal != 0u) v = v && cpos[b] <= r_pos[r];
                if (pc.window > 0 && cpos[b] >= pc.n_keep) v = v && r_pos[r] - cpos[b] < pc.window;
                if (HAS_TREE && node != NO_NODE) v = v && tree_sees(tree, r_query[r], node);
                vis[b][r] = v;
                any = any || v;
            }
            cell[b] = cc;
            kb[b] = pc.k_base + cc * pc.k_row + kvh * pc.k_head_bytes;
            vb[b] = pc.v_base + cc * pc.v_row + kvh * pc.v_head_bytes;
        }
        if (!any) continue;  // uniform in the lane group: no lane reads the rows
        float kd[CELLS], vd[CELLS];  // the current blocks (K_BLOCKS, V_BLOCKS)
        uint kq[CELLS][8], vq[CELLS][8];
        uvec4 kw[CELLS][2], vw[CELLS][2];  // the current 32-byte units (K_WIDE, V_WIDE)

        float s[CELLS][R];
        [[unroll]] for (uint b = 0u; b < CELLS; ++b)
            [[unroll]] for (uint r = 0u; r < R; ++r) s[b][r] = 0.0;
        [[unroll]] for (uint i = 0u; i < OK; ++i) {
            const uint o = lane + i * LG;
            if (o >= D_K / 8u) break;
            [[unroll]] for (uint b = 0u; b < CELLS; ++b) {
                float kv[8];
                if (K_WIDE && K_FMT <= 2) {
                    if (wide_first(K_FMT, o)) load_k_wide(kb[b], o, kw[b]);
                    wide_octet(K_FMT, kw[b], o, kv);
                } else if (K_BLOCKS) {
                    if ((o & 3u) == 0u) {
                        if (K_WIDE) load_k_block_wide(kb[b], o >> 2, kd[b], kq[b]);
                        else load_k_block(kb[b], o >> 2, kd[b], kq[b]);
                    }
                    kvrt_block_octet(uint(K_FMT), kd[b], kq[b], o & 3u, kv);
                } else {
                    load_k(kb[b], o, kv);
                }
                if (DEFERRED != 0u) {
                    // The (cos, sin) of each dim's pair at the cell's position;
                    // in normal pairing dims 2i and 2i + 1 share pair i.
                    vec2 cs[8];
                    [[unroll]] for (uint j = 0u; j < 8u; ++j) {
                        const uint d = o * 8u + j;
                        if (NEOX == 0u && (j & 1u) != 0u) {
                            cs[j] = cs[j - 1u];
                        } else if (d < N_ROT) {
                            const uint pair = NEOX != 0u ? d % (N_ROT / 2u) : d >> 1;
                            cs[j] = rope_cs[pc.rope_offset + cell[b] * (N_ROT / 2u) + pair];
                        } else {
                            cs[j] = vec2(1.0, 0.0);
                        }
                    }
                    [[unroll]] for (uint j = 0u; j < 8u; ++j)
                        [[unroll]] for (uint r = 0u; r < R; ++r)
                            s[b][r] += (q[r][i * 8u + j] * cs[j].x + qp[r][i * 8u + j] * cs[j].y) * kv[j];
                } else {
                    [[unroll]] for (uint r = 0u; r < R; ++r)
                        [[unroll]] for (uint j = 0u; j < 8u; ++j) s[b][r] += q[r][i * 8u + j] * kv[j];
                }
            }
        }

        float p[CELLS][R], corr[R];
        [[unroll]] for (uint r = 0u; r < R; ++r) {
            float x[CELLS];
            float m_new = m[r];
            [[unroll]] for (uint b = 0u; b < CELLS; ++b) {
                x[b] = group_sum(s[b][r]);
                if (HAS_SOFTCAP) x[b] = pc.softcap * tanh(KVRT_FDIV(x[b], pc.softcap));
                x[b] -= slope[r] * abs(float(r_pos[r] - cpos[b]));  // ALiBi, as GGML fills its mask
                if (vis[b][r]) m_new = max(m_new, x[b]);
            }
            // A row that has seen no cell yet keeps m = -inf and nothing to rescale.
            corr[r] = m_new > -1.0 / 0.0 ? exp(m[r] - m_new) : 1.0;
            l[r] *= corr[r];
            [[unroll]] for (uint b = 0u; b < CELLS; ++b) {
                p[b][r] = vis[b][r] ? exp(x[b] - m_new) : 0.0;
                l[r] += p[b][r];
            }
            m[r] = m_new;
        }
        [[unroll]] for (uint i = 0u; i < OV; ++i) {
            const uint o = lane + i * LG;
            if (o >= D_V / 8u) break;
            float vv[CELLS][8];
            [[unroll]] for (uint b = 0u; b < CELLS; ++b) {
                if (V_WIDE && V_FMT <= 2) {
                    if (wide_first(V_FMT, o)) load_v_wide(vb[b], o, vw[b]);
                    wide_octet(V_FMT, vw[b], o, vv[b]);
                } else if (V_BLOCKS) {
                    if ((o & 3u) == 0u) {
                        if (V_WIDE) load_v_block_wide(vb[b], o >> 2, vd[b], vq[b]);
                        else load_v_block(vb[b], o >> 2, vd[b], vq[b]);
                    }
                    kvrt_block_octet(uint(V_FMT), vd[b], vq[b], o & 3u, vv[b]);
                } else {
                    load_v(vb[b], o, vv[b]);
                }
            }
            [[unroll]] for (uint r = 0u; r < R; ++r)
                [[unroll]] for (uint j = 0u; j < 8u; ++j) {
                    float a = acc[r][i * 8u + j] * corr[r];
                    [[unroll]] for (uint b = 0u; b < CELLS; ++b) a += p[b][r] * vv[b][j];
                    acc[r][i * 8u + j] = a;
                }
        }
    }

    // Partial of each live row: [max, sum, acc[D_V]] at its slot.
    [[unroll]] for (uint r = 0u; r < R; ++r) {
        if (!r_live[r]) continue;
        const uint row = r_query[r] * pc.n_heads + r_head[r];
        const uint base = pc.partials_offset + (row * pc.splits_total + pc.split_base + split) * (D_V + KVRT_PARTIAL_HEAD);
        if (lane == 0u) {
            partials[base] = m[r];
            partials[base + 1u] = l[r];
        }
        [[unroll]] for (uint i = 0u; i < OV; ++i) {
            const uint o = lane + i * LG;
            if (o >= D_V / 8u) break;
            const uint a = i * 8u;
#ifdef WIDE
            // One 32-byte unit per octet (base and D_V are multiples of 8).
            uint64_t w[4];
            [[unroll]] for (uint k = 0u; k < 4u; ++k)
                w[k] = packUint2x32(uvec2(floatBitsToUint(acc[r][a + 2u * k]), floatBitsToUint(acc[r][a + 2u * k + 1u])));
            partials8[(base + KVRT_PARTIAL_HEAD) / 8u + o] = u64vec4(w[0], w[1], w[2], w[3]);
#else
            const uint u = (base + KVRT_PARTIAL_HEAD + o * 8u) >> 2;  // base and D_V are multiples of 8
            partials4[u] = vec4(acc[r][a], acc[r][a + 1u], acc[r][a + 2u], acc[r][a + 3u]);
            partials4[u + 1u] = vec4(acc[r][a + 4u], acc[r][a + 5u], acc[r][a + 6u], acc[r][a + 7u]);
#endif
        }
    }
}
