// The KV cache.
#include "kvrt/kvrt.h"

#include <cstdio>

#include "api/handles.hpp"
#include "cache/paged_layout.hpp"
#include "cache/static_layout.hpp"
#include "core/checked.hpp"
#include "core/raw_enum.hpp"
#include "kv/geometry.hpp"
#include "kv/token_tree.hpp"

using namespace kvrt;
using namespace kvrt::api;

namespace {

void destroy_cache(void* object) {
    auto* c = static_cast<CacheObj*>(object);
    // The buffer handles of the static windows go with the cache.
    for (BufferObj* b : c->window_buffers) {
        if (!b) continue;
        unpublish(b);
        delete b;
    }
    unpublish(c);
    delete c;
}

// A sized f32 output of kvrt_cache_read: NULL (not read), or room for
// n_cells * n_kv_heads * head_dim floats.
Result check_output_size(const char* what, const float* out, uint64_t out_bytes, uint32_t n_cells,
                         uint32_t n_kv_heads, uint32_t head_dim) {
    if (!out) return KVRT_SUCCESS;
    uint64_t need = 0;
    if (!checked_mul(uint64_t{n_cells} * n_kv_heads, uint64_t{head_dim} * sizeof(float), &need) || need > out_bytes)
        return fail(KVRT_ERROR_INVALID_ARGUMENT,
                    "%s_bytes %llu is below %u cells of %u KV heads of %u floats (%llu bytes)", what,
                    static_cast<unsigned long long>(out_bytes), n_cells, n_kv_heads, head_dim,
                    static_cast<unsigned long long>(need));
    return KVRT_SUCCESS;
}

// A stream argument: NULL, or a live stream of the cache's context.
Result resolve_stream(const CacheObj* c, kvrt_stream s, vk::Stream** out) { return api::resolve_stream(c->owner, s, out); }

Result resolve_tensor(const CacheObj* c, const char* what, const kvrt_tensor_ref* ref, cache::Source* out) {
    KVRT_TRY(check_struct(what, ref, KVRT_STRUCT_TYPE_TENSOR_REF));
    char name[48];
    std::snprintf(name, sizeof name, "%s->element_type", what);
    KVRT_TRY(kv::check_type(name, ref->element_type));
    cache::Source s;
    s.type = ref->element_type;
    KVRT_TRY(resolve_buffer(c->owner, what, ref->buffer, &s.buffer));
    s.host = static_cast<const uint8_t*>(ref->host);
    s.offset = ref->offset;
    s.row_stride = ref->row_stride;
    s.head_stride = ref->head_stride;
    s.layer_stride = ref->layer_stride;
    *out = s;
    return KVRT_SUCCESS;
}

Result resolve_output(const CacheObj* c, const char* what, const kvrt_output_ref* ref, cache::Output* out) {
    KVRT_TRY(check_struct(what, ref, KVRT_STRUCT_TYPE_OUTPUT_REF));
    char name[48];
    std::snprintf(name, sizeof name, "%s->element_type", what);
    KVRT_TRY(kv::check_type(name, ref->element_type, {KVRT_TYPE_F32, KVRT_TYPE_F16}));
    cache::Output o;
    o.type = ref->element_type;
    KVRT_TRY(resolve_buffer(c->owner, what, ref->buffer, &o.buffer));
    o.host = ref->host;
    o.offset = ref->offset;
    o.row_stride = ref->row_stride;
    o.head_stride = ref->head_stride;
    o.layer_stride = ref->layer_stride;
    *out = o;
    return KVRT_SUCCESS;
}

// The kvrt_batch_tree chained on a batch (checked: the tree's rules), or
// null in *out.
Result resolve_tree(const char* what, const kvrt_batch* b, const kvrt_batch_tree** out) {
    const void* found[1] = {nullptr};
    KVRT_TRY(check_struct(what, b, KVRT_STRUCT_TYPE_BATCH, {KVRT_STRUCT_TYPE_BATCH_TREE}, found));
    *out = static_cast<const kvrt_batch_tree*>(found[0]);
    if (!*out) return KVRT_SUCCESS;
    return kv::check_tree(b->n_tokens, b->positions, b->seq_id_counts, b->seq_ids, (*out)->parents);
}

// Turns a kvrt_batch into tokens (pointing into the batch's arrays); *tree
// says whether it chains a token tree.
Result resolve_batch(const char* what, const kvrt_batch* b, std::vector<kv::Token>* out, bool* tree) {
    const kvrt_batch_tree* t = nullptr;
    KVRT_TRY(resolve_tree(what, b, &t));
    *tree = t != nullptr;
    out->clear();
    if (b->n_tokens == 0) return KVRT_SUCCESS;
    if (!b->positions || !b->seq_ids)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "%s->positions or %s->seq_ids is NULL", what, what);
    out->resize(b->n_tokens);
    size_t at = 0;
    for (uint32_t i = 0; i < b->n_tokens; ++i) {
        const uint32_t k = b->seq_id_counts ? b->seq_id_counts[i] : 1;
        (*out)[i] = kv::Token{b->positions[i], b->seq_ids + at, k};
        at += k;
    }
    return KVRT_SUCCESS;
}

// kvrt_cache_seq_pos_min / _max.
Result seq_pos(kvrt_cache cache, int32_t seq, int32_t* out_pos, bool max) {
    CacheObj* c = nullptr;
    KVRT_TRY(resolve(cache, &c, "cache"));
    if (!out_pos) return fail(KVRT_ERROR_INVALID_ARGUMENT, "out_pos is NULL");
    const auto& t = c->cache->table();
    if (seq < 0 || static_cast<uint32_t>(seq) >= t.max_seqs())
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "sequence %d is out of range (0..%u)", seq, t.max_seqs() - 1);
    *out_pos = max ? t.seq_pos_max(seq) : t.seq_pos_min(seq);
    return KVRT_SUCCESS;
}

}  // namespace

extern "C" {

KVRT_API kvrt_result kvrt_cache_estimate_size(kvrt_context context, const kvrt_cache_desc* desc,
                                              kvrt_cache_estimate* out) {
    return guarded([&]() -> Result {
        KVRT_TRY(check_struct("out", out, KVRT_STRUCT_TYPE_CACHE_ESTIMATE));
        uint64_t binding = 128ull << 20;
        if (context) {
            ContextObj* c = nullptr;
            KVRT_TRY(resolve(context, &c, "context"));
            binding = c->ctx->max_binding_bytes();
        }
        kv::CacheGeometry g;
        KVRT_TRY(kv::CacheGeometry::from_desc(desc, binding, &g));
        out->bytes_per_token = g.bytes_per_token;
        out->data_bytes = g.data_bytes;
        out->device_bytes = g.device_bytes;
        out->max_binding_bytes = binding;
        return KVRT_SUCCESS;
    });
}

KVRT_API kvrt_result kvrt_cache_create(kvrt_context context, const kvrt_cache_desc* desc, kvrt_cache* out_cache) {
    return guarded([&]() -> Result {
        if (!out_cache) return fail(KVRT_ERROR_INVALID_ARGUMENT, "out_cache is NULL");
        *out_cache = nullptr;
        ContextObj* ctx = nullptr;
        KVRT_TRY(resolve_context(context, &ctx, "context"));
        if (!desc) return fail(KVRT_ERROR_INVALID_ARGUMENT, "desc is NULL");  // the rest: CacheGeometry::from_desc
        auto obj = std::make_unique<CacheObj>();
        obj->owner = ctx;
        KVRT_TRY(cache::Cache::create(*ctx->ctx, *desc, &obj->cache));
        KVRT_TRY(adopt(ctx, obj.get(), &destroy_cache));
        *out_cache = obj.release()->handle;
        return KVRT_SUCCESS;
    });
}

KVRT_API void kvrt_cache_destroy(kvrt_cache cache) {
    guarded_void([&]() {
        CacheObj* c = lookup(cache);
        if (!c) return;
        c->owner->children.remove(c);
        destroy_cache(c);
    });
}

KVRT_API kvrt_result kvrt_cache_get_info(kvrt_cache cache, kvrt_cache_info* info) {
    return guarded([&]() -> Result {
        CacheObj* c = nullptr;
        KVRT_TRY(resolve(cache, &c, "cache"));
        KVRT_TRY(check_struct("info", info, KVRT_STRUCT_TYPE_CACHE_INFO));
        c->cache->fill_info(info);
        return KVRT_SUCCESS;
    });
}

KVRT_API kvrt_result kvrt_cache_store(kvrt_cache cache, kvrt_stream stream, const kvrt_batch* batch, int32_t layer,
                                      const kvrt_tensor_ref* k, const kvrt_tensor_ref* v, uint32_t* out_cells) {
    return guarded([&]() -> Result {
        CacheObj* c = nullptr;
        KVRT_TRY(resolve_usable(cache, &c, "cache"));
        vk::Stream* s = nullptr;
        KVRT_TRY(resolve_stream(c, stream, &s));
        std::vector<kv::Token> tokens;
        bool tree = false;
        KVRT_TRY(resolve_batch("batch", batch, &tokens, &tree));
        cache::Source ks, vs;
        KVRT_TRY(resolve_tensor(c, "k", k, &ks));
        KVRT_TRY(resolve_tensor(c, "v", v, &vs));
        return c->cache->store(s, tokens.data(), static_cast<uint32_t>(tokens.size()), layer, ks, vs, out_cells,
                                   tree);
    });
}

KVRT_API kvrt_result kvrt_cache_place(kvrt_cache cache, const kvrt_batch* batch, uint32_t* out_cells) {
    return guarded([&]() -> Result {
        CacheObj* c = nullptr;
        KVRT_TRY(resolve_usable(cache, &c, "cache"));
        std::vector<kv::Token> tokens;
        bool tree = false;
        KVRT_TRY(resolve_batch("batch", batch, &tokens, &tree));
        return c->cache->place(tokens.data(), static_cast<uint32_t>(tokens.size()), out_cells, tree);
    });
}

KVRT_API kvrt_result kvrt_cache_tree_accept(kvrt_cache cache, const kvrt_batch* tree, uint32_t n_leaves,
                                            const int32_t* leaves) {
    return guarded([&]() -> Result {
        CacheObj* c = nullptr;
        KVRT_TRY(resolve_usable(cache, &c, "cache"));
        const kvrt_batch_tree* t = nullptr;
        KVRT_TRY(resolve_tree("tree", tree, &t));
        if (!t) return fail(KVRT_ERROR_INVALID_ARGUMENT, "tree: no kvrt_batch_tree is chained on the batch");
        const uint32_t n = tree->n_tokens;
        if (n > 0 && !t->cells) return fail(KVRT_ERROR_INVALID_ARGUMENT, "tree's kvrt_batch_tree: cells is NULL");
        return c->cache->tree_accept(n, tree->positions, tree->seq_ids, cache::Tree{t->parents, t->cells},
                                         n_leaves, leaves);
    });
}

KVRT_API kvrt_result kvrt_cache_write(kvrt_cache cache, kvrt_stream stream, uint32_t n_tokens, const uint32_t* cells,
                                      int32_t layer, const kvrt_tensor_ref* k, const kvrt_tensor_ref* v) {
    return guarded([&]() -> Result {
        CacheObj* c = nullptr;
        KVRT_TRY(resolve_usable(cache, &c, "cache"));
        vk::Stream* s = nullptr;
        KVRT_TRY(resolve_stream(c, stream, &s));
        cache::Source ks, vs;
        KVRT_TRY(resolve_tensor(c, "k", k, &ks));
        KVRT_TRY(resolve_tensor(c, "v", v, &vs));
        return c->cache->write(s, n_tokens, cells, layer, ks, vs);
    });
}

KVRT_API kvrt_result kvrt_cache_read(kvrt_cache cache, int32_t layer, uint32_t n_cells, const uint32_t* cells,
                                     float* k_out, uint64_t k_out_bytes, float* v_out, uint64_t v_out_bytes) {
    return guarded([&]() -> Result {
        CacheObj* c = nullptr;
        KVRT_TRY(resolve_usable(cache, &c, "cache"));
        const kv::CacheGeometry& geo = c->cache->geometry();
        KVRT_TRY(check_output_size("k_out", k_out, k_out_bytes, n_cells, geo.n_kv_heads, geo.k.head_dim));
        KVRT_TRY(check_output_size("v_out", v_out, v_out_bytes, n_cells, geo.n_kv_heads, geo.v.head_dim));
        return c->cache->read(layer, n_cells, cells, k_out, v_out);
    });
}

KVRT_API kvrt_result kvrt_cache_seq_rm(kvrt_cache cache, int32_t seq, int32_t p0, int32_t p1) {
    return guarded([&]() -> Result {
        CacheObj* c = nullptr;
        KVRT_TRY(resolve(cache, &c, "cache"));
        return c->cache->seq_rm(seq, p0, p1);
    });
}

KVRT_API kvrt_result kvrt_cache_seq_cp(kvrt_cache cache, int32_t src, int32_t dst, int32_t p0, int32_t p1) {
    return guarded([&]() -> Result {
        CacheObj* c = nullptr;
        KVRT_TRY(resolve(cache, &c, "cache"));
        return c->cache->seq_cp(src, dst, p0, p1);
    });
}

KVRT_API kvrt_result kvrt_cache_seq_keep(kvrt_cache cache, int32_t seq) {
    return guarded([&]() -> Result {
        CacheObj* c = nullptr;
        KVRT_TRY(resolve(cache, &c, "cache"));
        return c->cache->seq_keep(seq);
    });
}

KVRT_API kvrt_result kvrt_cache_seq_add(kvrt_cache cache, int32_t seq, int32_t p0, int32_t p1, int32_t delta) {
    return guarded([&]() -> Result {
        CacheObj* c = nullptr;
        KVRT_TRY(resolve_usable(cache, &c, "cache"));
        return c->cache->seq_add(seq, p0, p1, delta);
    });
}

KVRT_API kvrt_result kvrt_cache_seq_div(kvrt_cache cache, int32_t seq, int32_t p0, int32_t p1, int32_t d) {
    return guarded([&]() -> Result {
        CacheObj* c = nullptr;
        KVRT_TRY(resolve(cache, &c, "cache"));
        return c->cache->seq_div(seq, p0, p1, d);
    });
}

KVRT_API kvrt_result kvrt_cache_seq_pos_min(kvrt_cache cache, int32_t seq, int32_t* out_pos) {
    return guarded([&]() -> Result { return seq_pos(cache, seq, out_pos, false); });
}

KVRT_API kvrt_result kvrt_cache_seq_pos_max(kvrt_cache cache, int32_t seq, int32_t* out_pos) {
    return guarded([&]() -> Result { return seq_pos(cache, seq, out_pos, true); });
}

KVRT_API kvrt_result kvrt_cache_seq_window_pos_min(kvrt_cache cache, int32_t seq, int32_t* out_pos) {
    return guarded([&]() -> Result {
        CacheObj* c = nullptr;
        KVRT_TRY(resolve(cache, &c, "cache"));
        return c->cache->seq_window_pos_min(seq, out_pos);
    });
}

KVRT_API kvrt_result kvrt_cache_clear(kvrt_cache cache) {
    return guarded([&]() -> Result {
        CacheObj* c = nullptr;
        KVRT_TRY(resolve(cache, &c, "cache"));
        c->cache->clear();
        return KVRT_SUCCESS;
    });
}

KVRT_API kvrt_result kvrt_cache_compact(kvrt_cache cache, kvrt_stream stream, float threshold, uint32_t max_moves,
                                        uint32_t* out_moved) {
    return guarded([&]() -> Result {
        CacheObj* c = nullptr;
        KVRT_TRY(resolve_usable(cache, &c, "cache"));
        vk::Stream* s = nullptr;
        KVRT_TRY(resolve_stream(c, stream, &s));
        if (!(threshold >= 0.0f && threshold <= 1.0f))
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "threshold must be in [0, 1]");
        return c->cache->compact(s, threshold, max_moves, out_moved);
    });
}

}  // extern "C"

extern "C" {

KVRT_API kvrt_result kvrt_cache_attention(kvrt_cache cache, kvrt_stream stream, int32_t layer,
                                          const kvrt_batch* queries, const kvrt_tensor_ref* q,
                                          const kvrt_output_ref* out, const kvrt_attention_params* params) {
    return guarded([&]() -> Result {
        CacheObj* c = nullptr;
        KVRT_TRY(resolve_usable(cache, &c, "cache"));
        vk::Stream* s = nullptr;
        KVRT_TRY(resolve_stream(c, stream, &s));
        const kvrt_batch_tree* tree = nullptr;
        KVRT_TRY(resolve_tree("queries", queries, &tree));
        const uint32_t n = queries->n_tokens;
        if (n > 0 && (!queries->positions || !queries->seq_ids))
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "queries->positions or queries->seq_ids is NULL");
        if (queries->seq_id_counts) {
            for (uint32_t i = 0; i < n; ++i)
                if (queries->seq_id_counts[i] != 1)
                    return fail(KVRT_ERROR_INVALID_ARGUMENT,
                                "query %u lists %u sequences; each query of an attention belongs to exactly one", i,
                                queries->seq_id_counts[i]);
        }
        cache::Source qs;
        KVRT_TRY(resolve_tensor(c, "q", q, &qs));
        KVRT_TRY(kv::check_type("q->element_type", qs.type, {KVRT_TYPE_F32, KVRT_TYPE_F16}));
        cache::Output o;
        KVRT_TRY(resolve_output(c, "out", out, &o));
        KVRT_TRY(check_optional_struct("params", params, KVRT_STRUCT_TYPE_ATTENTION_PARAMS));
        kvrt_attention_params p = KVRT_ATTENTION_PARAMS_INIT;
        if (params) p = *params;
        p.next = nullptr;
        cache::Tree t;
        if (tree) {
            if (n > 0 && !tree->cells) return fail(KVRT_ERROR_INVALID_ARGUMENT, "queries' kvrt_batch_tree: cells is NULL");
            t = cache::Tree{tree->parents, tree->cells};
        }
        return c->cache->attention(s, layer, n, queries->positions, queries->seq_ids, qs, o, p, tree ? &t : nullptr);
    });
}

}  // extern "C"

extern "C" {

KVRT_API kvrt_result kvrt_cache_apply_shifts(kvrt_cache cache, kvrt_stream stream) {
    return guarded([&]() -> Result {
        CacheObj* c = nullptr;
        KVRT_TRY(resolve_usable(cache, &c, "cache"));
        vk::Stream* s = nullptr;
        KVRT_TRY(resolve_stream(c, stream, &s));
        return c->cache->apply_shifts(s);
    });
}

KVRT_API kvrt_result kvrt_cache_context_shift(kvrt_cache cache, int32_t seq, int32_t n_keep, int32_t n_discard,
                                              int32_t* out_n_past) {
    return guarded([&]() -> Result {
        CacheObj* c = nullptr;
        KVRT_TRY(resolve(cache, &c, "cache"));
        KVRT_TRY(c->cache->require_cells("kvrt_cache_context_shift"));
        return c->cache->context_shift(seq, n_keep, n_discard, out_n_past);
    });
}

KVRT_API kvrt_result kvrt_cache_discard_for_reevaluation(kvrt_cache cache, int32_t seq, int32_t n_keep,
                                                         int32_t n_discard, int32_t* out_src_pos, int32_t* out_dst_pos,
                                                         int32_t* out_count) {
    return guarded([&]() -> Result {
        CacheObj* c = nullptr;
        KVRT_TRY(resolve(cache, &c, "cache"));
        if (!out_src_pos || !out_dst_pos || !out_count)
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "out_src_pos, out_dst_pos or out_count is NULL");
        return c->cache->discard_for_reevaluation(seq, n_keep, n_discard, out_src_pos, out_dst_pos, out_count);
    });
}

}  // extern "C"

extern "C" {

KVRT_API kvrt_result kvrt_cache_static_get_window(kvrt_cache cache, int32_t seq, int32_t layer, uint32_t kv_head,
                                                  kvrt_kv_array array, kvrt_static_window* out) {
    return guarded([&]() -> Result {
        CacheObj* c = nullptr;
        KVRT_TRY(resolve(cache, &c, "cache"));
        KVRT_TRY(check_struct("out", out, KVRT_STRUCT_TYPE_STATIC_WINDOW));
        // Any int may arrive as `array`: compared as an integer.
        const int32_t a = raw_enum(array);
        if (a != KVRT_KV_ARRAY_K && a != KVRT_KV_ARRAY_V)
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "array must be KVRT_KV_ARRAY_K or KVRT_KV_ARRAY_V (got %d)",
                        static_cast<int>(a));
        const cache::Array arr = a == KVRT_KV_ARRAY_K ? cache::Array::K : cache::Array::V;
        const cache::StaticLayout* layout = nullptr;
        KVRT_TRY(c->cache->static_layout("kvrt_cache_static_get_window", &layout));
        cache::StaticLayout::WindowView w;
        KVRT_TRY(layout->window(seq, layer, kv_head, arr, &w));
        // One handle per (layer, K|V) buffer, made on first use and kept
        // until the cache is destroyed.
        const size_t slot = static_cast<size_t>(layer) * 2 + (arr == cache::Array::V ? 1 : 0);
        if (c->window_buffers.size() <= slot)
            c->window_buffers.resize(size_t{c->cache->geometry().n_layers} * 2);
        BufferObj*& b = c->window_buffers[slot];
        if (!b) {
            auto obj = std::make_unique<BufferObj>();
            obj->owner = c->owner;
            obj->owned_by_cache = c;
            obj->buffer = w.buffer;
            KVRT_TRY(publish(obj.get()));
            b = obj.release();
        }
        out->buffer = b->handle;
        out->offset = w.offset;
        out->row_stride = w.row_stride;
        out->bytes = w.bytes;
        out->rows = w.rows;
        out->n_valid = w.n_valid;
        out->pos_first = w.pos_first;
        out->pos_last = w.pos_last;
        out->element_type = w.type;
        out->scale = w.scale.scale;
        out->zero_point = w.scale.zero_point;
        return KVRT_SUCCESS;
    });
}

KVRT_API kvrt_result kvrt_cache_static_get_mask(kvrt_cache cache, int32_t seq, kvrt_type element_type, void* out,
                                                uint64_t out_bytes) {
    return guarded([&]() -> Result {
        CacheObj* c = nullptr;
        KVRT_TRY(resolve(cache, &c, "cache"));
        // Checked as the caller passed it before it is used as a kvrt_type.
        KVRT_TRY(kv::check_type("element_type", element_type));
        const cache::StaticLayout* layout = nullptr;
        KVRT_TRY(c->cache->static_layout("kvrt_cache_static_get_mask", &layout));
        return layout->mask(seq, element_type, out, out_bytes);
    });
}

KVRT_API kvrt_result kvrt_cache_static_get_graph_mask(kvrt_cache cache, int32_t seq,
                                                      const kvrt_static_mask_desc* desc, void* out,
                                                      uint64_t out_bytes) {
    return guarded([&]() -> Result {
        CacheObj* c = nullptr;
        KVRT_TRY(resolve(cache, &c, "cache"));
        KVRT_TRY(check_optional_struct("desc", desc, KVRT_STRUCT_TYPE_STATIC_MASK_DESC));
        const cache::StaticLayout* layout = nullptr;
        KVRT_TRY(c->cache->static_layout("kvrt_cache_static_get_graph_mask", &layout));
        return layout->graph_mask(seq, desc, out, out_bytes);
    });
}

KVRT_API kvrt_result kvrt_cache_static_make_room(kvrt_cache cache, int32_t seq, uint32_t n_rows) {
    return guarded([&]() -> Result {
        CacheObj* c = nullptr;
        KVRT_TRY(resolve(cache, &c, "cache"));
        cache::StaticLayout* layout = nullptr;
        KVRT_TRY(c->cache->static_layout("kvrt_cache_static_make_room", &layout));
        return layout->make_room(seq, n_rows);
    });
}

KVRT_API kvrt_result kvrt_cache_static_get_stats(kvrt_cache cache, int32_t seq, kvrt_static_stats* out) {
    return guarded([&]() -> Result {
        CacheObj* c = nullptr;
        KVRT_TRY(resolve(cache, &c, "cache"));
        KVRT_TRY(check_struct("out", out, KVRT_STRUCT_TYPE_STATIC_STATS));
        const cache::StaticLayout* layout = nullptr;
        KVRT_TRY(c->cache->static_layout("kvrt_cache_static_get_stats", &layout));
        return layout->stats(seq, out);
    });
}

KVRT_API kvrt_result kvrt_cache_seq_transfer(kvrt_cache src, int32_t src_seq, kvrt_cache dst, int32_t dst_seq,
                                             uint32_t* out_count) {
    return guarded([&]() -> Result {
        if (out_count) *out_count = 0;
        CacheObj* from = nullptr;
        CacheObj* to = nullptr;
        KVRT_TRY(resolve_usable(src, &from, "src"));
        KVRT_TRY(resolve_usable(dst, &to, "dst"));
        if (from->owner != to->owner) return fail(KVRT_ERROR_INVALID_ARGUMENT, "the caches belong to different contexts");
        return to->cache->transfer_from(*from->cache, src_seq, dst_seq, out_count);
    });
}

}  // extern "C"

KVRT_API kvrt_result kvrt_cache_paged_admit(kvrt_cache cache, int32_t seq, uint32_t n_tokens,
                                            const int32_t* token_ids, const int32_t* positions, uint64_t salt,
                                            uint32_t* out_n_cached, uint32_t* out_cells) {
    return guarded([&]() -> Result {
        CacheObj* c = nullptr;
        KVRT_TRY(resolve(cache, &c, "cache"));
        cache::PagedLayout* layout = nullptr;
        KVRT_TRY(c->cache->paged_layout("kvrt_cache_paged_admit", &layout));
        return layout->admit(seq, n_tokens, token_ids, positions, salt, out_n_cached, out_cells);
    });
}

KVRT_API kvrt_result kvrt_cache_paged_append(kvrt_cache cache, kvrt_stream stream, int32_t seq, uint32_t n_tokens,
                                             const int32_t* token_ids, const int32_t* positions,
                                             uint32_t* out_cells) {
    return guarded([&]() -> Result {
        CacheObj* c = nullptr;
        KVRT_TRY(resolve_usable(cache, &c, "cache"));
        vk::Stream* s = nullptr;
        KVRT_TRY(resolve_stream(c, stream, &s));
        cache::PagedLayout* layout = nullptr;
        KVRT_TRY(c->cache->paged_layout("kvrt_cache_paged_append", &layout));
        return layout->append(s, seq, n_tokens, token_ids, positions, out_cells);
    });
}

KVRT_API kvrt_result kvrt_cache_paged_fork(kvrt_cache cache, int32_t src, int32_t dst) {
    return guarded([&]() -> Result {
        CacheObj* c = nullptr;
        KVRT_TRY(resolve(cache, &c, "cache"));
        cache::PagedLayout* layout = nullptr;
        KVRT_TRY(c->cache->paged_layout("kvrt_cache_paged_fork", &layout));
        return layout->fork(src, dst);
    });
}

KVRT_API kvrt_result kvrt_cache_paged_set_sharing(kvrt_cache cache, int32_t seq, uint32_t enabled) {
    return guarded([&]() -> Result {
        CacheObj* c = nullptr;
        KVRT_TRY(resolve(cache, &c, "cache"));
        cache::PagedLayout* layout = nullptr;
        KVRT_TRY(c->cache->paged_layout("kvrt_cache_paged_set_sharing", &layout));
        return layout->set_sharing(seq, enabled != 0);
    });
}

KVRT_API kvrt_result kvrt_cache_paged_clear_registry(kvrt_cache cache) {
    return guarded([&]() -> Result {
        CacheObj* c = nullptr;
        KVRT_TRY(resolve(cache, &c, "cache"));
        cache::PagedLayout* layout = nullptr;
        KVRT_TRY(c->cache->paged_layout("kvrt_cache_paged_clear_registry", &layout));
        return layout->clear_registry();
    });
}

KVRT_API kvrt_result kvrt_cache_paged_get_stats(kvrt_cache cache, kvrt_paged_stats* out) {
    return guarded([&]() -> Result {
        CacheObj* c = nullptr;
        KVRT_TRY(resolve(cache, &c, "cache"));
        KVRT_TRY(check_struct("out", out, KVRT_STRUCT_TYPE_PAGED_STATS));
        cache::PagedLayout* layout = nullptr;
        KVRT_TRY(c->cache->paged_layout("kvrt_cache_paged_get_stats", &layout));
        return layout->stats(out);
    });
}

KVRT_API kvrt_result kvrt_cache_paged_get_cells(kvrt_cache cache, int32_t seq, uint32_t first, uint32_t max_cells,
                                                uint32_t* out_cells, uint32_t* out_n_tokens) {
    return guarded([&]() -> Result {
        CacheObj* c = nullptr;
        KVRT_TRY(resolve(cache, &c, "cache"));
        cache::PagedLayout* layout = nullptr;
        KVRT_TRY(c->cache->paged_layout("kvrt_cache_paged_get_cells", &layout));
        return layout->get_cells(seq, first, max_cells, out_cells, out_n_tokens);
    });
}
