#include "ops/attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <string>

#include "kv/geometry.hpp"
#include "ops/tuning.hpp"
#include "vk/buffer.hpp"

namespace kvrt::ops {

namespace {

// Mirrors `Push` in shaders/attention.comp.
struct AttnPush {
    uint32_t n_cells, meta_first, seq_words, query_offset, n_queries, n_heads, group, tiles_per_kv;
    uint32_t n_splits, split_base, splits_total, q_offset, q_stride, k_head_bytes, v_head_bytes;
    uint32_t k_base, k_row, v_base, v_row;
    float scale, softcap;
    int32_t window, n_keep;
    uint32_t causal, n_kv_heads, partials_offset, rope_offset;
    float rope_mscale;
    uint32_t params_offset;
    uint32_t q_head_stride;
    uint32_t cell_first;
};
// 128 bytes is the most push-constant space every device guarantees.
static_assert(sizeof(AttnPush) == 124 && sizeof(AttnPush) <= 128, "AttnPush layout");
static_assert(offsetof(AttnPush, n_splits) == 32 && offsetof(AttnPush, k_base) == 60 &&
                  offsetof(AttnPush, scale) == 76 && offsetof(AttnPush, window) == 84 &&
                  offsetof(AttnPush, causal) == 92 && offsetof(AttnPush, n_kv_heads) == 96 &&
                  offsetof(AttnPush, partials_offset) == 100 && offsetof(AttnPush, rope_offset) == 104 &&
                  offsetof(AttnPush, rope_mscale) == 108 && offsetof(AttnPush, params_offset) == 112 &&
                  offsetof(AttnPush, q_head_stride) == 116 && offsetof(AttnPush, cell_first) == 120,
              "AttnPush offsets");

// Mirrors `Push` in shaders/rope_cells.comp.
struct RopeCellsPush {
    uint32_t n_cells, meta_first, meta_stride, out_offset;
    float mscale;
};
static_assert(sizeof(RopeCellsPush) == 20, "RopeCellsPush layout");

// Mirrors `Push` in shaders/attention_merge.comp.
struct MergePush {
    uint32_t n_rows, n_heads, splits, out_offset, out_stride, has_sinks, sinks_offset, partials_offset;
    uint32_t out_head_stride;
};
static_assert(sizeof(MergePush) == 36, "MergePush layout");
static_assert(offsetof(MergePush, splits) == 8 && offsetof(MergePush, out_offset) == 12 &&
                  offsetof(MergePush, out_stride) == 16 && offsetof(MergePush, has_sinks) == 20 &&
                  offsetof(MergePush, sinks_offset) == 24 && offsetof(MergePush, partials_offset) == 28 &&
                  offsetof(MergePush, out_head_stride) == 32,
              "MergePush offsets");

uint32_t pow2_at_least(uint32_t x) {
    uint32_t p = 1;
    while (p < x) p <<= 1;
    return p;
}

}  // namespace

AttnPlan plan_attention(const Tuning& tuning, const AttnShape& shape) {
    AttnPlan p;
    const uint32_t rows_per_kv = std::max<uint32_t>(1, shape.n_queries * (shape.n_heads / shape.n_kv_heads));
    const uint32_t tile_cells = tuning.attn_tile_cells(shape.head_dim_k, shape.head_dim_v);
    p.tiled = tile_cells > 0 && (tuning.attn_tiled_forced || rows_per_kv >= tuning.attn_tiled_min_rows);
    if (p.tiled) {
        p.rows = tuning.attn_tiled_workgroup;
        p.tile_cells = tile_cells;
        p.target_units = tuning.attn_tiled_target_groups;
        // llvmpipe's 65535 back-edges per invocation: per tile, the tile loop
        // and the loops of its cooperative loads (and of the RoPE rotation).
        const uint32_t load_iters =
            (tile_cells * (shape.head_dim_k + shape.head_dim_v) / 8 + p.rows - 1) / p.rows;
        const uint32_t rot_iters = shape.deferred ? (tile_cells * shape.n_rot / 2 + p.rows - 1) / p.rows : 0;
        const uint32_t per_tile = 1 + load_iters + rot_iters + tile_cells;
        p.max_split_cells = std::min<uint32_t>(tuning.attn_max_split_cells, 60000 / per_tile * tile_cells);
        p.rows_per_workgroup = p.rows;
    } else {
        p.rows = std::min<uint32_t>(tuning.attn_tile_rows, pow2_at_least(rows_per_kv));
        if (shape.max_tile_rows > 0) p.rows = std::min(p.rows, pow2_at_least(shape.max_tile_rows));
        p.target_units = tuning.attn_target_groups;
        p.max_split_cells = tuning.attn_max_split_cells;
        const Tuning::Lanes lanes = tuning.attn_lanes(std::max(shape.head_dim_k, shape.head_dim_v) / 8);
        p.rows_per_workgroup = p.rows * (lanes.workgroup / lanes.lanes);
    }
    p.tiles_per_kv = (rows_per_kv + p.rows - 1) / p.rows;
    return p;
}

Result record_attention(vk::Stream& stream, const AttnShape& shape, const AttnOptions& opt,
                        const std::vector<uint32_t>& queries, std::vector<AttnSegment> segments, const AttnIo& io) {
    // Without its scale a static-scale array would read as all zeros.
    const auto unscaled = [](kvrt_type t, const kv::StaticScale& q) { return kv::is_static_scale(t) && !(q.scale > 0.0f); };
    if (unscaled(shape.k_type, shape.k_scale) || unscaled(shape.v_type, shape.v_scale))
        return fail(KVRT_ERROR_INTERNAL, "attention over a static-scale K or V without its scale");
    const uint32_t group = shape.n_heads / shape.n_kv_heads;
    const Tuning tuning = Tuning::of(stream.context());
    const AttnPlan plan = plan_attention(tuning, shape);
    const uint32_t tiles_per_kv = plan.tiles_per_kv;
    // Lane groups: enough lanes to cover the head's octets, within a subgroup.
    // The tiled kernel: one row per invocation, a workgroup per tile.
    Tuning::Lanes lanes = tuning.attn_lanes(std::max(shape.head_dim_k, shape.head_dim_v) / 8);
    if (plan.tiled) lanes = Tuning::Lanes{1, 0, false, plan.rows};
    const uint32_t lg = lanes.lanes;
    const uint32_t wg = lanes.workgroup;
    uint32_t splits_total = 0;
    for (const AttnSegment& s : segments) splits_total += s.splits;
    if (splits_total == 0) splits_total = 1;  // no cells: one empty partial per row

    if (shape.deferred && io.rope.buffer == nullptr)
        return fail(KVRT_ERROR_INTERNAL, "deferred RoPE attention without the cache's position table");
    // Per call words: query pairs, parameters, sinks.
    vk::BufferUse words_use{};
    std::vector<uint32_t> words(queries);
    const uint32_t query_offset = 0;
    // Parameters: the static-scale quantization of K and V ((scale, zero
    // point) each), then the ALiBi slopes' bases and head split.
    const uint32_t params_offset = static_cast<uint32_t>(words.size());
    const auto push_float = [&words](float f) {
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        words.push_back(bits);
    };
    for (const kv::StaticScale* q : {&shape.k_scale, &shape.v_scale}) {
        push_float(q->scale);
        words.push_back(static_cast<uint32_t>(q->zero_point));
    }
    float alibi_m0 = 0.0f, alibi_m1 = 0.0f;
    uint32_t alibi_n_log2 = 0;
    if (opt.max_bias > 0.0f) {
        alibi_n_log2 = 1;
        while (alibi_n_log2 * 2 <= shape.n_heads) alibi_n_log2 *= 2;
        alibi_m0 = std::pow(2.0f, -opt.max_bias / static_cast<float>(alibi_n_log2));
        alibi_m1 = std::pow(2.0f, -opt.max_bias / 2.0f / static_cast<float>(alibi_n_log2));
    }
    push_float(alibi_m0);
    push_float(alibi_m1);
    words.push_back(alibi_n_log2);
    // The token tree: words per ancestor row (0: no tree), its first cell,
    // its cell count, then the offsets from params_offset of the cell map and
    // of this call's first ancestor row.
    const size_t tree_at = words.size();
    words.insert(words.end(), 5, 0u);
    const uint32_t sinks_offset = static_cast<uint32_t>(words.size());
    if (opt.sinks)
        for (uint32_t h = 0; h < shape.n_heads; ++h) {
            uint32_t bits;
            std::memcpy(&bits, &opt.sinks[h], 4);
            words.push_back(bits);
        }
    if (opt.tree && opt.tree->words > 0) {
        const AttnTree& t = *opt.tree;
        words[tree_at] = t.words;
        words[tree_at + 1] = t.first_cell;
        words[tree_at + 2] = static_cast<uint32_t>(t.map.size());
        words[tree_at + 3] = static_cast<uint32_t>(words.size()) - params_offset;
        words.insert(words.end(), t.map.begin(), t.map.end());
        words[tree_at + 4] = static_cast<uint32_t>(words.size()) - params_offset;
        const auto row_words = static_cast<ptrdiff_t>(t.words);
        const auto rows = t.ancestors.begin() + static_cast<ptrdiff_t>(opt.tree_first_query) * row_words;
        words.insert(words.end(), rows, rows + static_cast<ptrdiff_t>(shape.n_queries) * row_words);
    }
    KVRT_TRY(stream.upload(words.data(), words.size() * 4, &words_use));

    const uint64_t row_floats = uint64_t{shape.head_dim_v} + kPartialHead;
    const uint64_t n_rows = uint64_t{shape.n_queries} * shape.n_heads;
    vk::BufferUse partials{};
    KVRT_TRY(stream.scratch(n_rows * splits_total * row_floats * 4, &partials));
    partials.write = true;

    // F32 and F16 rows read `unit` bytes at a time where every row and head
    // starts at a multiple of `unit` bytes.
    const auto aligned = [&](kvrt_type t, uint64_t head_bytes, bool k, uint64_t unit) {
        if ((t != KVRT_TYPE_F32 && t != KVRT_TYPE_F16) || head_bytes % unit != 0) return false;
        for (const AttnSegment& s : segments)
            if ((k ? s.k_offset : s.v_offset) % unit != 0 || (k ? s.k_stride : s.v_stride) % unit != 0) return false;
        return true;
    };
    // What the call uses (OPTS of attention.comp and attention_tiled.comp): a tree, a softcap, one word
    // of sequence bits, per-sequence cell lists.
    const bool lists = io.lists.buffer != nullptr;
    const uint32_t opts = (opt.tree && opt.tree->words > 0 ? 1u : 0u) | (opt.softcap > 0.0f ? 2u : 0u) |
                          (shape.seq_words == 1 ? 4u : 0u) | (lists ? 8u : 0u);
    uint32_t vec4 = (aligned(shape.k_type, shape.k_head_bytes, true, 16) ? 1u : 0u) |
                    (aligned(shape.v_type, shape.v_head_bytes, false, 16) ? 2u : 0u);
    // The wide build of the portable kernel: F32 and F16 rows 32 bytes at a
    // time, Q8_0 and Q4_0 blocks from the 16-byte units that hold them (every
    // bound piece a whole number of units, so no unit reaches past it).
    const auto wide_ok = [&](kvrt_type t, uint64_t head_bytes, bool k) {
        if (t == KVRT_TYPE_Q8_0 || t == KVRT_TYPE_Q4_0) {
            for (const AttnSegment& s : segments)
                if ((k ? s.k->piece(s.k_piece) : s.v->piece(s.v_piece)).size % 16 != 0) return false;
            return true;
        }
        return aligned(t, head_bytes, k, 32);
    };
    if (!plan.tiled && tuning.attn_wide)
        vec4 |= (wide_ok(shape.k_type, shape.k_head_bytes, true) ? 4u : 0u) |
                (wide_ok(shape.v_type, shape.v_head_bytes, false) ? 8u : 0u);
    // The row-tile kernel reads each octet of a query as 16-byte units where
    // every query and head starts at a multiple of 4 words (one site instead
    // of four or eight: it compiles faster on llvmpipe, and loads fewer times).
    const auto q_aligned = [&](uint32_t unit_words) {
        return io.q_offset_words % unit_words == 0 && io.q_stride_words % unit_words == 0 &&
               io.q_head_words % unit_words == 0;
    };
    if (!plan.tiled && q_aligned(4)) vec4 |= 16u;
    // The wide build: 32 bytes at a time where queries start at multiples of
    // 8 words and end on a whole unit (f16 queries hold two octets per unit:
    // an odd number of octets would read 16 bytes past the query).
    if ((vec4 & 12u) != 0u && !plan.tiled && q_aligned(8) &&
        (shape.q_type != KVRT_TYPE_F16 || shape.head_dim_k % 16 == 0))
        vec4 |= 32u;
    const char* kind = plan.tiled             ? "_tiled"
                       : (vec4 & 12u) != 0u   ? "_wide"
                       : tuning.attn_portable ? "_portable"
                                              : "_shuffle";
    const std::string variant = std::string("attn_") + kv::type_name(shape.k_type) + "_" + kv::type_name(shape.v_type) +
                                "_q" + kv::type_name(shape.q_type) + kind;
    const vk::Pipeline* attn = nullptr;
    const vk::Pipeline* merge = nullptr;
    KVRT_TRY(stream.context().pipelines().get(
        {variant, 8, uint32_t{sizeof(AttnPush)},
         {wg, shape.head_dim_k, shape.head_dim_v, plan.tiled ? plan.tile_cells : plan.rows, lg, shape.deferred ? 1u : 0u,
          shape.deferred ? shape.n_rot : 0u,
          shape.deferred && shape.neox ? 1u : 0u, vec4,
          opts},
         lanes.required_subgroup, lanes.full_subgroups,
         // attention_tiled.comp: a tile of f32 K and V rows, their positions and cells.
         plan.tiled ? (shape.head_dim_k + shape.head_dim_v + 2) * plan.tile_cells * 4 : 0u},
        &attn));
    KVRT_TRY(stream.context().pipelines().get(
        {shape.out_type == KVRT_TYPE_F16 ? "attn_merge_f16" : "attn_merge_f32", 3, uint32_t{sizeof(MergePush)},
         {tuning.attn_merge_workgroup, shape.head_dim_v}},
        &merge));

    // Uploads and scratch sit at offsets inside their (whole-bound) pieces.
    const uint32_t words_base = static_cast<uint32_t>(words_use.offset / 4);
    const uint32_t partials_base = static_cast<uint32_t>(partials.offset / 4);
    AttnPush p{};
    p.seq_words = shape.seq_words;
    p.query_offset = words_base + query_offset;
    p.partials_offset = partials_base;
    p.rope_mscale = shape.mscale;
    p.params_offset = words_base + params_offset;
    p.n_queries = shape.n_queries;
    p.n_heads = shape.n_heads;
    p.group = group;
    p.tiles_per_kv = tiles_per_kv;
    p.splits_total = splits_total;
    p.q_offset = io.q_offset_words;
    p.q_stride = io.q_stride_words;
    p.q_head_stride = io.q_head_words;
    p.k_head_bytes = static_cast<uint32_t>(shape.k_head_bytes);
    p.v_head_bytes = static_cast<uint32_t>(shape.v_head_bytes);
    p.scale = opt.scale;
    p.softcap = opt.softcap;
    p.window = opt.window;
    p.n_keep = opt.n_keep;
    p.causal = opt.causal ? 1u : 0u;
    p.n_kv_heads = shape.n_kv_heads;

    const vk::Pipeline* rope_cells = nullptr;
    if (shape.deferred)
        KVRT_TRY(stream.context().pipelines().get(
            {"rope_cells", 3, uint32_t{sizeof(RopeCellsPush)}, {tuning.attn_merge_workgroup, shape.n_rot / 2}},
            &rope_cells));

    const uint32_t groups_per_wg = plan.tiled ? 1 : wg / lg;
    stream.begin_op("attention");
    Result r = KVRT_SUCCESS;
    if (segments.empty()) {
        // Nothing visible: one empty split per row, so the merge writes zeros.
        AttnSegment none;
        none.k = none.v = io.q.buffer;  // any valid bindings; no cell is read
        none.k_piece = none.v_piece = io.q.piece;
        none.meta = words_use.buffer;
        none.meta_piece = words_use.piece;
        segments.push_back(none);
    }
    uint32_t split_base = 0;
    for (const AttnSegment& s : segments) {
        if (r != KVRT_SUCCESS) break;
        p.n_cells = s.count;
        p.meta_first = s.meta_first;
        p.cell_first = s.first_cell;
        p.k_base = static_cast<uint32_t>(s.k_offset);
        p.k_row = static_cast<uint32_t>(s.k_stride);
        p.v_base = static_cast<uint32_t>(s.v_offset);
        p.v_row = static_cast<uint32_t>(s.v_stride);
        p.n_splits = std::max<uint32_t>(1, s.splits);
        p.split_base = split_base;
        split_base += p.n_splits;
        // Deferred RoPE: the segment's cells' rotations, composed once.
        vk::BufferUse rope{};
        if (shape.deferred && s.count > 0) {
            const uint64_t entries = uint64_t{s.count} * (shape.n_rot / 2);
            r = stream.scratch(entries * 8, &rope);
            if (r != KVRT_SUCCESS) break;
            rope.write = true;
            const RopeCellsPush rp{s.count, s.meta_first, shape.seq_words + 1, static_cast<uint32_t>(rope.offset / 8),
                                   shape.mscale};
            const vk::BufferUse rope_uses[3] = {{s.meta, s.meta_piece, 0, 0, false}, io.rope, rope};
            const uint32_t wgs = tuning.attn_merge_workgroup;
            r = stream.dispatch(*rope_cells, rope_uses, 3, &rp,
                                static_cast<uint32_t>(std::min<uint64_t>(65535, (entries + wgs - 1) / wgs)));
            if (r != KVRT_SUCCESS) break;
            rope.write = false;
            p.rope_offset = rp.out_offset;
        }
        const uint64_t lane_groups = uint64_t{tiles_per_kv} * shape.n_kv_heads * p.n_splits;
        // Without lists (or deferred RoPE), binding 6 (7) is any valid
        // binding the kernel never reads.
        const vk::BufferUse uses[8] = {{s.k, s.k_piece, 0, 0, false},
                                       {s.v, s.v_piece, 0, 0, false},
                                       io.q,
                                       {s.meta, s.meta_piece, 0, 0, false},
                                       words_use,
                                       partials,
                                       lists ? io.lists : words_use,
                                       rope.buffer ? rope : words_use};
        r = stream.dispatch(*attn, uses, 8, &p,
                            static_cast<uint32_t>((lane_groups + groups_per_wg - 1) / groups_per_wg));
    }
    if (r == KVRT_SUCCESS) {
        MergePush m{static_cast<uint32_t>(n_rows), shape.n_heads,       splits_total,
                    io.out_offset_words,           io.out_stride_words, opt.sinks ? 1u : 0u,
                    words_base + sinks_offset,     partials_base,       io.out_head_words};
        vk::BufferUse part_read = partials;
        part_read.write = false;
        const vk::BufferUse uses[3] = {part_read, io.out, words_use};
        r = stream.dispatch(*merge, uses, 3, &m, static_cast<uint32_t>(std::min<uint64_t>(n_rows, 65535)));
    }
    stream.end_op();
    return r;
}

}  // namespace kvrt::ops
