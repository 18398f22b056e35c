// CellStore::attention: selects the cells a batch of queries can see, lays out
// the kernels' inputs, and records the two attention passes.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "cache/cache.hpp"
#include "cache/strides.hpp"
#include "core/checked.hpp"
#include "ops/attention.hpp"
#include "ops/tuning.hpp"

namespace kvrt::cache {

namespace {

uint64_t elem_size(kvrt_type t) { return t == KVRT_TYPE_F16 ? 2 : 4; }

// How many partial results each row gets (ops/tuning.hpp, ops::AttnPlan).
uint32_t choose_splits(const ops::Tuning& t, const ops::AttnPlan& plan, uint32_t n_cells, uint32_t n_units) {
    uint32_t splits = (plan.target_units + n_units - 1) / n_units;
    splits = std::min(splits, std::max<uint32_t>(1, n_cells / t.attn_min_split_cells));
    splits = std::max(splits, (n_cells + plan.max_split_cells - 1) / plan.max_split_cells);
    return std::max<uint32_t>(1, std::min<uint32_t>(splits, t.attn_max_splits));
}

// What a tile over queries [first, end) of `queries` (ops::kQueryWords per
// query: position, sequence, run [lo, hi), list first, list length) reads:
// the list of their one sequence when it has one, else the union of their
// runs.
struct Reads {
    static constexpr uint32_t kMixed = UINT32_MAX;
    uint32_t lo = UINT32_MAX, hi = 0;
    uint32_t seq = kMixed, listed = 0;
    bool empty = true;
    void add(const uint32_t* query) {
        const uint32_t seq_q = query[1], lo_q = query[2], hi_q = query[3];
        if (empty) {
            seq = seq_q;
            listed = query[5];
            empty = false;
        } else if (seq != seq_q) {
            seq = kMixed;
        }
        if (lo_q >= hi_q) return;
        lo = std::min(lo, lo_q);
        hi = std::max(hi, hi_q);
    }
    void merge(const Reads& o) {
        if (o.empty) return;
        if (empty) {
            *this = o;
            return;
        }
        if (seq != o.seq) seq = kMixed;
        lo = std::min(lo, o.lo);
        hi = std::max(hi, o.hi);
    }
    uint32_t cells() const {
        if (seq != kMixed && listed > 0) return listed;
        return lo < hi ? hi - lo : 0;
    }
};
Reads reads_of(const std::vector<uint32_t>& queries, uint64_t first, uint64_t end) {
    Reads r;
    for (uint64_t q = first; q < end; ++q) r.add(&queries[ops::kQueryWords * q]);
    return r;
}

// At least as many cells as any tile reads: a tile's rows (`rows_per_tile`,
// `group` per query) span at most `per_tile` consecutive queries wherever a
// pass starts, which two consecutive aligned blocks of `per_tile` queries
// cover. O(n_queries).
uint32_t widest_tile_reads(const std::vector<uint32_t>& queries, uint32_t n_queries, uint32_t rows_per_tile,
                           uint32_t group) {
    const uint32_t per_tile = (rows_per_tile + group - 1) / group + 1;
    uint32_t widest = 0;
    Reads prev;
    for (uint32_t first = 0; first < n_queries; first += per_tile) {
        const Reads block = reads_of(queries, first, std::min(n_queries, first + per_tile));
        Reads both = prev;
        both.merge(block);
        widest = std::max(widest, both.cells());
        prev = block;
    }
    return widest;
}

// Cells the row tiles read in all: the sum over tiles of `rows_per_tile`
// rows (`group` per query, from query 0) of what each reads.
uint64_t tile_reads(const std::vector<uint32_t>& queries, uint32_t n_queries, uint32_t rows_per_tile,
                    uint32_t group) {
    uint64_t total = 0;
    const uint64_t rows = uint64_t{n_queries} * group;
    for (uint64_t first = 0; first < rows; first += rows_per_tile) {
        const uint64_t end = std::min(rows, first + rows_per_tile);
        total += reads_of(queries, first / group, (end + group - 1) / group).cells();
    }
    return total;
}

}  // namespace

Result CellStore::attention(vk::Stream* stream, int32_t layer, uint32_t n_queries, const int32_t* positions,
                        const int32_t* seq_ids, const Source& q, const Output& out,
                        const kvrt_attention_params& params, const Tree* tree) {
    if (layer < 0 || layer >= static_cast<int32_t>(geo_.n_layers))
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "layer %d is out of range (0..%u)", layer, geo_.n_layers - 1);
    if (n_queries == 0) return KVRT_SUCCESS;
    if (n_queries > 65536) return fail(KVRT_ERROR_INVALID_ARGUMENT, "more than 65536 queries in one call");
    if (!positions || !seq_ids) return fail(KVRT_ERROR_INVALID_ARGUMENT, "positions or seq_ids is NULL");
    for (uint32_t i = 0; i < n_queries; ++i) {
        if (positions[i] < 0) return fail(KVRT_ERROR_INVALID_ARGUMENT, "query %u has position %d", i, positions[i]);
        if (seq_ids[i] < 0 || static_cast<uint32_t>(seq_ids[i]) >= geo_.max_seqs)
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "query %u has sequence %d (max_seqs %u)", i, seq_ids[i],
                        geo_.max_seqs);
    }
    if (geo_.k.head_dim % 8 || geo_.v.head_dim % 8)
        return fail(KVRT_ERROR_UNSUPPORTED, "attention needs head dims that are multiples of 8");
    if (params.flags & ~static_cast<kvrt_flags>(KVRT_ATTENTION_NON_CAUSAL))
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "unknown attention flags 0x%x", static_cast<unsigned>(params.flags));
    if (!(params.softcap >= 0.0f) || !(params.max_bias >= 0.0f) || !std::isfinite(params.softcap) ||
        !std::isfinite(params.max_bias) || !std::isfinite(params.scale))
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "softcap and max_bias must be finite and >= 0, and scale finite");
    if (params.sinks)
        for (uint32_t h = 0; h < geo_.n_heads; ++h)
            if (!std::isfinite(params.sinks[h]))
                return fail(KVRT_ERROR_INVALID_ARGUMENT, "sinks[%u] is %g; sink logits must be finite", h,
                            static_cast<double>(params.sinks[h]));
    ops::AttnTree tree_in;
    if (tree) {
        KVRT_TRY(require_trees("a token tree"));
        KVRT_TRY(tree_inputs(n_queries, positions, seq_ids, *tree, &tree_in));
    }
    const ops::AttnTree* tree_use = tree ? &tree_in : nullptr;

    // out: n_heads rows of head_dim_v values per query, that must not overlap.
    if (out.type != KVRT_TYPE_F32 && out.type != KVRT_TYPE_F16)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "out: element type %s is not F32 or F16", kv::type_name(out.type));
    if (!out.buffer == !out.host) return fail(KVRT_ERROR_INVALID_ARGUMENT, "out: set exactly one of buffer and host");
    if (out.host && stream)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "out: host memory needs a synchronous call (stream NULL)");
    StridedRows o;
    KVRT_TRY(resolve_strided("out", out.offset, out.row_stride, out.head_stride, 0, 1, n_queries, geo_.n_heads,
                             uint64_t{geo_.v.head_dim} * elem_size(out.type), 4, &o));
    KVRT_TRY(check_strided_extent("out", o, out.buffer ? out.buffer->size() : 0, out.host));
    if (!strided_rows_disjoint(o))
        return fail(KVRT_ERROR_INVALID_ARGUMENT,
                    "out: rows overlap (row_stride %llu, head_stride %llu, rows of %llu bytes)",
                    static_cast<unsigned long long>(o.row), static_cast<unsigned long long>(o.head),
                    static_cast<unsigned long long>(o.head_bytes));

    // q: n_heads rows of head_dim_k values per query.
    if (q.type != KVRT_TYPE_F32 && q.type != KVRT_TYPE_F16)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "q: element type %s is not F32 or F16", kv::type_name(q.type));
    if (!q.buffer == !q.host) return fail(KVRT_ERROR_INVALID_ARGUMENT, "q: set exactly one of buffer and host");
    StridedRows qr;
    KVRT_TRY(resolve_strided("q", q.offset, q.row_stride, q.head_stride, 0, 1, n_queries, geo_.n_heads,
                             uint64_t{geo_.k.head_dim} * elem_size(q.type), 4, &qr));
    KVRT_TRY(check_strided_extent("q", qr, q.buffer ? q.buffer->size() : 0, q.host));
    if (q.buffer) {
        size_t piece = 0;
        uint64_t in = 0;
        q.buffer->locate(q.offset, &piece, &in);
        if (in + (qr.end - qr.offset) > q.buffer->piece(piece).size)
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "q: the rows cross a piece boundary of the buffer");
    }
    // A device output lies in one piece of its buffer, bound whole.
    vk::BufferUse out_use{};
    uint64_t off = 0;
    if (out.buffer) {
        size_t piece = 0;
        uint64_t in = 0;
        out.buffer->locate(out.offset, &piece, &in);
        if (in + (o.end - o.offset) > out.buffer->piece(piece).size)
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "out: the rows cross a piece boundary of the buffer");
        out_use = vk::BufferUse{out.buffer, piece, 0, 0, true};
        off = in;
    }

    if (stream) {
        // Pending shifts go first, into the same stream, as a call of their
        // own: they stay recorded even if the attention fails to record.
        KVRT_TRY(apply_shifts(stream));
        return record_attention(*stream, static_cast<uint32_t>(layer), n_queries, positions, seq_ids, q, out_use, off,
                                o.row, o.head, out.type, params, tree_use);
    }

    // Synchronous: host output goes through scratch memory of the stream,
    // packed, and is scattered into the caller's rows once it succeeded.
    vk::Transaction tx(this, nullptr, own_);
    KVRT_TRY(tx.begin());
    uint64_t row = o.row, head = o.head;
    if (out.host) {
        head = o.head_bytes;
        row = head * geo_.n_heads;
        KVRT_TRY(tx.stream().scratch(row * n_queries, &out_use));
        off = out_use.offset;
        out_use.offset = 0;
        out_use.size = 0;
        out_use.write = true;
    }
    KVRT_TRY(record_shifts(tx));
    KVRT_TRY(record_attention(tx.stream(), static_cast<uint32_t>(layer), n_queries, positions, seq_ids, q, out_use,
                              off, row, head, out.type, params, tree_use));
    KVRT_TRY(tx.finish());
    if (out.host) {
        std::vector<uint8_t> packed(static_cast<size_t>(row * n_queries));
        KVRT_TRY(const_cast<vk::Buffer*>(out_use.buffer)->download(off, packed.data(), packed.size()));
        auto* to = static_cast<uint8_t*>(out.host);
        for (uint32_t t = 0; t < n_queries; ++t)
            for (uint32_t h = 0; h < geo_.n_heads; ++h)
                std::memcpy(to + o.at(0, t, h), packed.data() + t * row + h * head, static_cast<size_t>(head));
    }
    return KVRT_SUCCESS;
}

Result CellStore::record_attention(vk::Stream& s, uint32_t layer, uint32_t n_queries, const int32_t* positions,
                               const int32_t* seq_ids, const Source& q, const vk::BufferUse& out_use,
                               uint64_t out_offset, uint64_t out_stride, uint64_t out_head_stride,
                               kvrt_type out_type, const kvrt_attention_params& params, const ops::AttnTree* tree) {
    // The cells the kernel reads: the layout says which (the kernel tells,
    // from the device mirror, which of them each query sees).
    KVRT_TRY(sync_meta(s));
    const bool causal = !(params.flags & KVRT_ATTENTION_NON_CAUSAL);
    std::vector<ops::AttnSegment> segments;
    uint32_t n_cells = 0;
    attention_cells(layer, n_queries, seq_ids, &segments, &n_cells);

    ops::AttnShape shape{};
    shape.k_type = geo_.k.type;
    shape.v_type = geo_.v.type;
    shape.k_scale = geo_.k.scales.empty() ? kv::StaticScale{} : geo_.k.scales[layer];
    shape.v_scale = geo_.v.scales.empty() ? kv::StaticScale{} : geo_.v.scales[layer];
    shape.q_type = q.type;
    shape.out_type = out_type;
    shape.head_dim_k = geo_.k.head_dim;
    shape.head_dim_v = geo_.v.head_dim;
    shape.n_heads = geo_.n_heads;
    shape.n_kv_heads = geo_.n_kv_heads;
    shape.k_head_bytes = arena_->head_stride(Array::K);
    shape.v_head_bytes = arena_->head_stride(Array::V);
    shape.seq_words = geo_.meta_words - 1;
    const ops::Tuning tuning = ops::Tuning::of(ctx_);
    if (deferred_) {
        shape.deferred = true;
        shape.n_rot = static_cast<uint32_t>(rope_math_.n_rot);
        shape.neox = rope_math_.neox;
        shape.mscale = static_cast<float>(rope_math_.mscale());
    }

    const uint32_t group = geo_.n_heads / geo_.n_kv_heads;
    shape.n_queries = n_queries;
    ops::AttnPlan plan = ops::plan_attention(tuning, shape);

    // Per query: position, sequence, the run of cells that holds the
    // sequence's cells (kept by the table as cells are taken: O(1) each),
    // and the sequence's current list of cells, if any.
    constexpr size_t QW = ops::kQueryWords;
    KVRT_TRY(update_lists(s, n_queries, seq_ids));
    std::vector<uint32_t> query_words(QW * n_queries);
    bool any_list = false;
    for (uint32_t i = 0; i < n_queries; ++i) {
        uint32_t* w = &query_words[QW * i];
        w[0] = static_cast<uint32_t>(positions[i]);
        w[1] = static_cast<uint32_t>(seq_ids[i]);
        table_.seq_cell_span(seq_ids[i], &w[2], &w[3]);
        list_of(seq_ids[i], &w[4], &w[5]);
        any_list = any_list || w[5] > 0;
    }
    // Smaller row tiles, down to one query's rows, when they read no more
    // cells in all: a tile computes every row over the union of its queries'
    // runs (at equal reads, smaller tiles compute fewer rows that see
    // nothing), and only a tile of one sequence reads that sequence's list.
    if (!plan.tiled && plan.rows > group && n_queries > 1) {
        uint64_t best = tile_reads(query_words, n_queries, plan.rows, group);
        for (uint32_t rows = plan.rows / 2; rows >= group; rows /= 2) {
            ops::AttnShape smaller = shape;
            smaller.max_tile_rows = rows;
            const ops::AttnPlan p = ops::plan_attention(tuning, smaller);
            const uint64_t reads = tile_reads(query_words, n_queries, p.rows, group);
            if (p.rows < plan.rows && reads <= best) {
                best = reads;
                shape.max_tile_rows = rows;
                plan = p;
            }
        }
    }
    // Splits are cut from what a tile reads, not from the whole cache: over
    // many sequences, each tile's share of the cells.
    const uint32_t span = std::min(n_cells, widest_tile_reads(query_words, n_queries, plan.rows, group));
    const uint32_t n_units = geo_.n_kv_heads * plan.tiles_per_kv;
    const uint32_t total_splits = choose_splits(tuning, plan, span, n_units);
    uint32_t splits_total = 0;
    for (ops::AttnSegment& seg : segments) {
        const uint32_t part = std::min(seg.count, span);
        seg.splits = span == 0 ? 1
                               : std::max<uint32_t>(1, static_cast<uint32_t>(
                                                           (uint64_t{total_splits} * part + span - 1) / span));
        splits_total += seg.splits;
    }
    // The partial results of a pass must fit one binding: passes over as
    // many queries as fit (long prefill chunks, small-binding devices).
    uint64_t partial_bytes_per_query =
        uint64_t{geo_.n_heads} * std::max<uint32_t>(1, splits_total) * (geo_.v.head_dim + ops::kPartialHead) * 4;
    if (partial_bytes_per_query > ctx_.max_binding_bytes()) {
        // Fewer splits: one per segment.
        for (ops::AttnSegment& seg : segments) seg.splits = 1;
        partial_bytes_per_query = uint64_t{geo_.n_heads} * std::max<size_t>(1, segments.size()) * (geo_.v.head_dim + ops::kPartialHead) * 4;
    }
    uint64_t per_pass = ctx_.max_binding_bytes() / partial_bytes_per_query;
    if (per_pass == 0)
        return fail(KVRT_ERROR_UNSUPPORTED,
                    "the partial results of one query (%llu bytes) exceed the device's largest binding",
                    static_cast<unsigned long long>(partial_bytes_per_query));
    // A dispatch of one segment stays within the smallest grid limit.
    uint32_t most_splits = 1;
    for (const ops::AttnSegment& seg : segments) most_splits = std::max(most_splits, seg.splits);
    const uint64_t workgroups_per_kv = std::max<uint64_t>(1, 65535 / (uint64_t{geo_.n_kv_heads} * most_splits));
    per_pass = std::min<uint64_t>(per_pass, std::max<uint64_t>(1, workgroups_per_kv * plan.rows_per_workgroup / group));

    ops::AttnOptions opt{};
    opt.scale = params.scale != 0.0f ? params.scale : 1.0f / std::sqrt(static_cast<float>(geo_.k.head_dim));
    opt.softcap = params.softcap;
    opt.max_bias = params.max_bias;
    opt.window = static_cast<int32_t>(windows_[layer]);
    opt.n_keep = static_cast<int32_t>(params.n_keep);
    opt.causal = causal;
    opt.sinks = params.sinks;
    opt.tree = tree;

    // Queries: a piece of the caller's buffer (checked by attention()), or
    // host rows gathered into upload memory, packed. Strides that only ever
    // multiply 0 (one query, one head) may not fit 32 bits: pass 0.
    ops::AttnIo io{};
    StridedRows qr;
    KVRT_TRY(resolve_strided("q", q.offset, q.row_stride, q.head_stride, 0, 1, n_queries, geo_.n_heads,
                             uint64_t{geo_.k.head_dim} * elem_size(q.type), 4, &qr));
    const auto in_words = [](uint64_t bytes, uint32_t count) { return count > 1 ? static_cast<uint32_t>(bytes / 4) : 0u; };
    if (q.host) {
        const uint64_t q_row = qr.head_bytes * geo_.n_heads;
        vk::BufferUse up{};
        void* mapped = nullptr;
        KVRT_TRY(s.reserve(q_row * n_queries, &up, &mapped));
        auto* to = static_cast<uint8_t*>(mapped);
        for (uint32_t i = 0; i < n_queries; ++i) {
            if (qr.heads_packed()) {
                std::memcpy(to + i * q_row, q.host + qr.at(0, i, 0), static_cast<size_t>(q_row));
                continue;
            }
            for (uint32_t h = 0; h < geo_.n_heads; ++h)
                std::memcpy(to + i * q_row + h * qr.head_bytes, q.host + qr.at(0, i, h),
                            static_cast<size_t>(qr.head_bytes));
        }
        io.q = vk::BufferUse{up.buffer, up.piece, 0, 0, false};
        io.q_offset_words = static_cast<uint32_t>(up.offset / 4);
        io.q_stride_words = static_cast<uint32_t>(q_row / 4);
        io.q_head_words = static_cast<uint32_t>(qr.head_bytes / 4);
    } else {
        size_t piece = 0;
        uint64_t in = 0;
        q.buffer->locate(q.offset, &piece, &in);
        io.q = vk::BufferUse{q.buffer, piece, 0, 0, false};
        io.q_offset_words = static_cast<uint32_t>(in / 4);
        io.q_stride_words = in_words(qr.row, n_queries);
        io.q_head_words = in_words(qr.head, geo_.n_heads);
    }
    io.out = out_use;
    // The lists, when the plan's kernel reads them and a query has one.
    if (any_list) io.lists = vk::BufferUse{lists_.buffer.get(), 0, 0, 0, false};
    if (deferred_) io.rope = vk::BufferUse{rope_table_.get(), 0, 0, 0, false};
    io.out_stride_words = in_words(out_stride, n_queries);
    io.out_head_words = in_words(out_head_stride, geo_.n_heads);
    const uint32_t q_words_per_query = io.q_stride_words;
    const uint32_t q_first = io.q_offset_words;
    for (uint32_t first = 0; first < n_queries; first += static_cast<uint32_t>(per_pass)) {
        const uint32_t count = static_cast<uint32_t>(std::min<uint64_t>(per_pass, n_queries - first));
        const auto at = query_words.begin() + static_cast<ptrdiff_t>(QW * first);
        const std::vector<uint32_t> queries(at, at + static_cast<ptrdiff_t>(QW * count));
        shape.n_queries = count;
        opt.tree_first_query = first;
        io.q_offset_words = q_first + first * q_words_per_query;
        io.out_offset_words = static_cast<uint32_t>(out_offset / 4 + uint64_t{first} * io.out_stride_words);
        KVRT_TRY(ops::record_attention(s, shape, opt, queries, segments, io));
    }
    return KVRT_SUCCESS;
}

}  // namespace kvrt::cache
