// The bad-input rows of the KV cache's functions (see test_bad_input.cpp).
#include "test_bad_input.hpp"

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

using namespace kvrt_test;

namespace kvrt_test::bad_input {

namespace {

// A store that would succeed: one token of sequence 2 at position 100, all
// layers, host f32 rows; `tamper` changes one thing.
struct Store {
    int32_t pos = 100, seq = 2;
    int32_t layer = -1;
    std::vector<float> k = std::vector<float>(World::kLayers * World::kKvHeads * World::kDim, 0.25f);
    std::vector<float> v = k;
    kvrt_batch batch = KVRT_BATCH_INIT;
    kvrt_tensor_ref kt = KVRT_TENSOR_REF_INIT, vt = KVRT_TENSOR_REF_INIT;
    kvrt_stream stream = nullptr;

    Store() {
        batch = make_batch(1, &pos, &seq);
        kt = host_tensor(k.data());
        vt = host_tensor(v.data());
    }
    Store(const Store&) = delete;
    Store& operator=(const Store&) = delete;
};

// Two tokens that would succeed: sequence 3 at positions 20 and 21, all
// layers, host f32 rows (a store or place), or the same rows written to cells
// 0 and 1 (a write); `tamper` breaks one thing, mostly of the second token, so
// that the first token, which is fine, must not be stored either.
struct Pair {
    int32_t pos[2] = {20, 21};
    uint32_t counts[2] = {1, 1};
    int32_t seqs[3] = {3, 3, 3};
    uint32_t cells[2] = {0, 1};
    int32_t layer = -1;
    std::vector<float> k = std::vector<float>(World::kLayers * 2 * World::kKvHeads * World::kDim, 0.25f);
    std::vector<float> v = k;
    kvrt_batch batch = KVRT_BATCH_INIT;
    kvrt_tensor_ref kt = KVRT_TENSOR_REF_INIT, vt = KVRT_TENSOR_REF_INIT;

    Pair() {
        batch = make_batch(2, pos, seqs, counts);
        kt = host_tensor(k.data());
        vt = host_tensor(v.data());
    }
    Pair(const Pair&) = delete;
    Pair& operator=(const Pair&) = delete;
};

// A token tree of sequence 0 as if stored at positions 8, 8 and 9 in cells
// 0, 1 and 2 (which hold other positions: accepting it must fail there).
struct Tree {
    int32_t pos[3] = {8, 8, 9}, seq[3] = {0, 0, 0}, parents[3] = {-1, -1, 1};
    uint32_t cells[3] = {0, 1, 2};
    kvrt_batch batch = KVRT_BATCH_INIT;
    kvrt_batch_tree tree = KVRT_BATCH_TREE_INIT;

    Tree() {
        batch = make_batch(3, pos, seq);
        tree.parents = parents;
        tree.cells = cells;
        batch.next = &tree;
    }
    Tree(const Tree&) = delete;
    Tree& operator=(const Tree&) = delete;
};

// An attention that would succeed: one query of sequence 0 at position 8
// over layer 0, host f32 q and out.
struct Attend {
    int32_t pos = 8, seq = 0;
    int32_t layer = 0;
    std::vector<float> q = std::vector<float>(World::kHeads * World::kDim, 0.5f);
    std::vector<float> o = std::vector<float>(World::kHeads * World::kDim, 0.0f);
    kvrt_batch batch = KVRT_BATCH_INIT;
    kvrt_tensor_ref qt = KVRT_TENSOR_REF_INIT;
    kvrt_output_ref ot = KVRT_OUTPUT_REF_INIT;
    kvrt_attention_params params = KVRT_ATTENTION_PARAMS_INIT;
    kvrt_stream stream = nullptr;

    Attend() {
        batch = make_batch(1, &pos, &seq);
        qt = host_tensor(q.data());
        ot = host_output(o.data());
    }
    Attend(const Attend&) = delete;
    Attend& operator=(const Attend&) = delete;
};

// A host address whose rows would wrap around the address space.
const void* top_of_memory() { return reinterpret_cast<const void*>(~uintptr_t{0} - 15); }

}  // namespace

void add_cache_rows(World& w, std::vector<Row>* rows) {
    const Target N = Target::None, C = Target::Cache, S = Target::StaticCache, B = Target::Buffer, D = Target::Device;
    const auto inv = KVRT_ERROR_INVALID_ARGUMENT;
    const auto hnd = KVRT_ERROR_INVALID_HANDLE;
    const auto state = KVRT_ERROR_INVALID_STATE;
    const auto unsup = KVRT_ERROR_UNSUPPORTED;
    auto& r = *rows;

    // Descriptors: kvrt_cache_estimate_size and kvrt_cache_create.
    static kvrt_static_layout_desc static_layout = KVRT_STATIC_LAYOUT_DESC_INIT;
    static kvrt_rope_desc rope = KVRT_ROPE_DESC_INIT;
    static const Foreign foreign;
    const std::pair<std::string, std::function<void(kvrt_cache_desc*)>> bad_descs[] = {
        {"desc->type -7", [](kvrt_cache_desc* d) { d->type = bad_enum<kvrt_struct_type>(-7); }},
        {"desc->type UNDEFINED", [](kvrt_cache_desc* d) { d->type = KVRT_STRUCT_TYPE_UNDEFINED; }},
        {"a foreign struct chained", [](kvrt_cache_desc* d) { d->next = &foreign; }},
        {"type_k 12345", [](kvrt_cache_desc* d) { d->type_k = bad_enum<kvrt_type>(12345); }},
        {"type_k -7", [](kvrt_cache_desc* d) { d->type_k = bad_enum<kvrt_type>(-7); }},
        {"type_k UNDEFINED", [](kvrt_cache_desc* d) { d->type_k = KVRT_TYPE_UNDEFINED; }},
        {"type_v INT32_MIN", [](kvrt_cache_desc* d) { d->type_v = bad_enum<kvrt_type>(kMin32); }},
        {"type_v UNDEFINED", [](kvrt_cache_desc* d) { d->type_v = KVRT_TYPE_UNDEFINED; }},
        {"layout -7", [](kvrt_cache_desc* d) { d->layout = bad_enum<kvrt_layout>(-7); }},
        {"layout 12345", [](kvrt_cache_desc* d) { d->layout = bad_enum<kvrt_layout>(12345); }},
        {"rope mode -7", [](kvrt_cache_desc* d) {
             rope = kvrt_rope_desc KVRT_ROPE_DESC_INIT;
             rope.mode = bad_enum<kvrt_rope_mode>(-7);
             d->next = &rope;
         }},
        {"rope n_rot 64 (more than head_dim_k)", [](kvrt_cache_desc* d) {
             rope = kvrt_rope_desc KVRT_ROPE_DESC_INIT;
             rope.n_rot = 2 * World::kDim;
             d->next = &rope;
         }},
        {"rope n_rot 15 (odd)", [](kvrt_cache_desc* d) {
             rope = kvrt_rope_desc KVRT_ROPE_DESC_INIT;
             rope.n_rot = 15;
             d->next = &rope;
         }},
        {"rope freq_base NaN", [](kvrt_cache_desc* d) {
             rope = kvrt_rope_desc KVRT_ROPE_DESC_INIT;
             rope.freq_base = NAN;
             d->next = &rope;
         }},
        // YaRN's floats: a NaN or Inf here once passed creation and turned
        // every shifted K value into NaN.
        {"rope ext_factor NaN", [](kvrt_cache_desc* d) {
             rope = kvrt_rope_desc KVRT_ROPE_DESC_INIT;
             rope.ext_factor = NAN;
             rope.n_ctx_orig = 4096;
             d->next = &rope;
         }},
        {"rope ext_factor -1", [](kvrt_cache_desc* d) {
             rope = kvrt_rope_desc KVRT_ROPE_DESC_INIT;
             rope.ext_factor = -1.0f;
             rope.n_ctx_orig = 4096;
             d->next = &rope;
         }},
        {"rope attn_factor Inf", [](kvrt_cache_desc* d) {
             rope = kvrt_rope_desc KVRT_ROPE_DESC_INIT;
             rope.attn_factor = INFINITY;
             d->next = &rope;
         }},
        {"rope beta_fast NaN", [](kvrt_cache_desc* d) {
             rope = kvrt_rope_desc KVRT_ROPE_DESC_INIT;
             rope.beta_fast = NAN;
             d->next = &rope;
         }},
        {"rope beta_slow -Inf", [](kvrt_cache_desc* d) {
             rope = kvrt_rope_desc KVRT_ROPE_DESC_INIT;
             rope.beta_slow = -INFINITY;
             d->next = &rope;
         }},
        {"flags 0x80000000", [](kvrt_cache_desc* d) { d->flags = 0x80000000u; }},
        {"n_layers 0", [](kvrt_cache_desc* d) { d->n_layers = 0; }},
        {"n_kv_heads 0", [](kvrt_cache_desc* d) { d->n_kv_heads = 0; }},
        {"n_heads 0", [](kvrt_cache_desc* d) { d->n_heads = 0; }},
        {"head_dim_k 0", [](kvrt_cache_desc* d) { d->head_dim_k = 0; }},
        {"capacity 0", [](kvrt_cache_desc* d) { d->capacity = 0; }},
        {"n_heads not a multiple of n_kv_heads", [](kvrt_cache_desc* d) { d->n_heads = 3; d->n_kv_heads = 2; }},
        {"head_dim_k UINT32_MAX", [](kvrt_cache_desc* d) { d->head_dim_k = kMaxU32; }},
        {"head_dim_v UINT32_MAX", [](kvrt_cache_desc* d) { d->head_dim_v = kMaxU32; }},
        {"n_heads UINT32_MAX", [](kvrt_cache_desc* d) { d->n_heads = kMaxU32; }},
        {"capacity UINT32_MAX", [](kvrt_cache_desc* d) { d->capacity = kMaxU32; }},
        {"max_seqs UINT32_MAX", [](kvrt_cache_desc* d) { d->max_seqs = kMaxU32; }},
        {"n_layers UINT32_MAX, capacity 2^30: sizes overflow", [](kvrt_cache_desc* d) {
             d->n_layers = kMaxU32;
             d->capacity = 1u << 30;
             d->n_heads = d->n_kv_heads = 4096;
             d->head_dim_k = 1024;
             d->type_k = d->type_v = KVRT_TYPE_F32;
         }},
        {"head dims 33 with Q8_0", [](kvrt_cache_desc* d) { d->head_dim_k = 33; d->type_k = KVRT_TYPE_Q8_0; }},
        {"head_dim_k 48 with Q8_0 (a multiple of 16, not of 32)", [](kvrt_cache_desc* d) {
             d->head_dim_k = 48;
             d->type_k = KVRT_TYPE_Q8_0;
         }},
        {"head_dim_v 16 with type_v Q4_0", [](kvrt_cache_desc* d) { d->head_dim_v = 16; d->type_v = KVRT_TYPE_Q4_0; }},
        {"head_dim_v 40 with type_v Q8_0", [](kvrt_cache_desc* d) { d->head_dim_v = 40; d->type_v = KVRT_TYPE_Q8_0; }},
        {"static layout without its desc", [](kvrt_cache_desc* d) { d->layout = KVRT_LAYOUT_STATIC; d->capacity = 0; }},
        {"static layout, seq_len 1", [](kvrt_cache_desc* d) {
             static_layout = kvrt_static_layout_desc KVRT_STATIC_LAYOUT_DESC_INIT;
             static_layout.seq_len = 1;
             d->layout = KVRT_LAYOUT_STATIC;
             d->capacity = 0;
             d->next = &static_layout;
         }},
        {"static layout, reserve NaN", [](kvrt_cache_desc* d) {
             static_layout = kvrt_static_layout_desc KVRT_STATIC_LAYOUT_DESC_INIT;
             static_layout.seq_len = 8;
             static_layout.reserve = NAN;
             d->layout = KVRT_LAYOUT_STATIC;
             d->capacity = 0;
             d->next = &static_layout;
         }},
        {"static layout, seq_len UINT32_MAX", [](kvrt_cache_desc* d) {
             static_layout = kvrt_static_layout_desc KVRT_STATIC_LAYOUT_DESC_INIT;
             static_layout.seq_len = kMaxU32;
             d->layout = KVRT_LAYOUT_STATIC;
             d->capacity = 0;
             d->next = &static_layout;
         }},
    };
    for (const auto& [what, tamper] : bad_descs) {
        const auto t = tamper;
        r.push_back(err("kvrt_cache_estimate_size", what, inv, N, [&w, t] {
            kvrt_cache_desc d = World::cache_desc();
            t(&d);
            kvrt_cache_estimate e = KVRT_CACHE_ESTIMATE_INIT;
            return out(kvrt_cache_estimate_size(w.a, &d, &e));
        }));
        r.push_back(err("kvrt_cache_create", what, inv, D, [&w, t] {
            kvrt_cache_desc d = World::cache_desc();
            t(&d);
            kvrt_cache c = reinterpret_cast<kvrt_cache>(&d);
            Outcome o = out(kvrt_cache_create(w.a, &d, &c));
            if (c) {
                if (c != reinterpret_cast<kvrt_cache>(&d)) kvrt_cache_destroy(c);
                if (o.r != KVRT_SUCCESS) o.r = KVRT_ERROR_INTERNAL;  // a handle despite the error
            }
            return o;
        }));
    }
    r.push_back(err("kvrt_cache_estimate_size", "desc NULL", inv, N, [] {
        kvrt_cache_estimate e = KVRT_CACHE_ESTIMATE_INIT;
        return out(kvrt_cache_estimate_size(nullptr, nullptr, &e));
    }));
    r.push_back(err("kvrt_cache_estimate_size", "out NULL", inv, N, [] {
        const kvrt_cache_desc d = World::cache_desc();
        return out(kvrt_cache_estimate_size(nullptr, &d, nullptr));
    }));
    r.push_back(err("kvrt_cache_estimate_size", "out->type -7", inv, N, [] {
        const kvrt_cache_desc d = World::cache_desc();
        kvrt_cache_estimate e = KVRT_CACHE_ESTIMATE_INIT;
        e.type = bad_enum<kvrt_struct_type>(-7);
        return out(kvrt_cache_estimate_size(nullptr, &d, &e));
    }));
    r.push_back(err("kvrt_cache_estimate_size", "out->type CACHE_INFO (another struct)", inv, N, [] {
        const kvrt_cache_desc d = World::cache_desc();
        kvrt_cache_estimate e = KVRT_CACHE_ESTIMATE_INIT;
        e.type = KVRT_STRUCT_TYPE_CACHE_INFO;
        return out(kvrt_cache_estimate_size(nullptr, &d, &e));
    }));
    r.push_back(err("kvrt_cache_create", "out_cache NULL", inv, D, [&w] {
        const kvrt_cache_desc d = World::cache_desc();
        return out(kvrt_cache_create(w.a, &d, nullptr));
    }));
    // The out-handle is set to NULL on failure.
    const auto create_in = [](kvrt_context ctx, const kvrt_cache_desc* d) {
        kvrt_cache c = reinterpret_cast<kvrt_cache>(&ctx);
        Outcome o = out(kvrt_cache_create(ctx, d, &c));
        if (c) {
            if (c != reinterpret_cast<kvrt_cache>(&ctx)) kvrt_cache_destroy(c);
            if (o.r != KVRT_SUCCESS) o.r = KVRT_ERROR_INTERNAL;  // a handle despite the error, or left as it was
        }
        return o;
    };
    r.push_back(err("kvrt_cache_create", "desc NULL", inv, D, [&w, create_in] { return create_in(w.a, nullptr); }));
    r.push_back(err("kvrt_cache_create", "context NULL", hnd, D, [create_in] {
        const kvrt_cache_desc d = World::cache_desc();
        return create_in(nullptr, &d);
    }));
    r.push_back(err("kvrt_cache_create", "2^30 cells of 64 layers: more than the device has", KVRT_ERROR_OUT_OF_DEVICE_MEMORY,
                    D, [&w] {
                        kvrt_cache_desc d = World::cache_desc();
                        d.n_layers = 64;
                        d.n_heads = d.n_kv_heads = 8;
                        d.head_dim_k = 128;
                        d.capacity = 1u << 30;
                        kvrt_cache c = nullptr;
                        Outcome o = out(kvrt_cache_create(w.a, &d, &c));
                        if (c) {
                            kvrt_cache_destroy(c);
                            if (o.r != KVRT_SUCCESS) o.r = KVRT_ERROR_INTERNAL;  // a handle despite the error
                        }
                        return o;
                    }));
    const auto ctx_as_stream = reinterpret_cast<kvrt_context>(w.stream);
    for (const auto& [what, ctx] : {std::pair<std::string, kvrt_context>{"a destroyed context", w.dead_context},
                                    {"a stream cast to a context", ctx_as_stream}}) {
        const kvrt_context c = ctx;
        r.push_back(err("kvrt_cache_estimate_size", what, hnd, N, [c] {
            const kvrt_cache_desc d = World::cache_desc();
            kvrt_cache_estimate e = KVRT_CACHE_ESTIMATE_INIT;
            return out(kvrt_cache_estimate_size(c, &d, &e));
        }));
        r.push_back(err("kvrt_cache_create", what, hnd, D, [c, create_in] {
            const kvrt_cache_desc d = World::cache_desc();
            return create_in(c, &d);
        }));
    }

    // Bad cache handles, on every function that takes a cache.
    const std::pair<std::string, kvrt_cache> bad_caches[] = {
        {"cache NULL", nullptr},
        {"a destroyed cache", w.dead_cache},
        {"a cache of a destroyed context", w.orphan_cache},
        {"a buffer cast to a cache", reinterpret_cast<kvrt_cache>(w.buffer)},
        {"a memory cast to a cache", reinterpret_cast<kvrt_cache>(w.memory)},
        {"a stream cast to a cache", reinterpret_cast<kvrt_cache>(w.stream)},
        {"a context cast to a cache", reinterpret_cast<kvrt_cache>(w.a.get())}};
    // Destroying a handle of another kind as a cache leaves it working.
    r.push_back(noop("kvrt_cache_destroy", "a buffer cast to a cache: the buffer stays", B, [&w] {
        kvrt_cache_destroy(reinterpret_cast<kvrt_cache>(w.buffer));
        uint64_t size = 0;
        return Outcome{holds(kvrt_buffer_get_size(w.buffer, &size) == KVRT_SUCCESS && size == World::kBufferBytes), ""};
    }));
    r.push_back(noop("kvrt_cache_destroy", "a stream cast to a cache: the stream stays", N, [&w] {
        kvrt_cache_destroy(reinterpret_cast<kvrt_cache>(w.stream));
        const bool works = kvrt_stream_begin(w.stream) == KVRT_SUCCESS && kvrt_stream_submit(w.stream) == KVRT_SUCCESS &&
                           kvrt_stream_wait(w.stream, 120ull * 1000 * 1000 * 1000) == KVRT_SUCCESS;
        return Outcome{holds(works), ""};
    }));
    for (const auto& [what, bad] : bad_caches) {
        const kvrt_cache c = bad;
        // No bad handle may change the world's cache either (target C).
        r.push_back(noop("kvrt_cache_destroy", what, C, [c] {
            kvrt_cache_destroy(c);
            return Outcome{};
        }));
        r.push_back(err("kvrt_cache_get_info", what, hnd, C, [c] {
            kvrt_cache_info i = KVRT_CACHE_INFO_INIT;
            return out(kvrt_cache_get_info(c, &i));
        }));
        r.push_back(err("kvrt_cache_store", what, hnd, C, [c] {
            Store s;
            return out(kvrt_cache_store(c, nullptr, &s.batch, -1, &s.kt, &s.vt, nullptr));
        }));
        r.push_back(err("kvrt_cache_place", what, hnd, C, [c] {
            Store s;
            return out(kvrt_cache_place(c, &s.batch, nullptr));
        }));
        r.push_back(err("kvrt_cache_write", what, hnd, C, [c] {
            Store s;
            const uint32_t cell = 0;
            return out(kvrt_cache_write(c, nullptr, 1, &cell, -1, &s.kt, &s.vt));
        }));
        r.push_back(err("kvrt_cache_read", what, hnd, C, [c] {
            const uint32_t cell = 0;
            std::vector<float> k(World::kKvHeads * World::kDim);
            return out(kvrt_cache_read(c, 0, 1, &cell, k.data(), bytes_of(k), nullptr, 0));
        }));
        r.push_back(err("kvrt_cache_read_raw", what, hnd, C, [c] {
            const uint32_t cell = 0;
            std::vector<uint8_t> bytes(4096);
            return out(kvrt_cache_read_raw(c, 0, KVRT_KV_ARRAY_K, 1, &cell, bytes.data(), bytes.size()));
        }));
        r.push_back(err("kvrt_cache_seq_rm", what, hnd, C, [c] { return out(kvrt_cache_seq_rm(c, 0, -1, -1)); }));
        r.push_back(err("kvrt_cache_seq_cp", what, hnd, C, [c] { return out(kvrt_cache_seq_cp(c, 0, 1, -1, -1)); }));
        r.push_back(err("kvrt_cache_seq_keep", what, hnd, C, [c] { return out(kvrt_cache_seq_keep(c, 0)); }));
        r.push_back(err("kvrt_cache_tree_accept", what, hnd, C, [c] {
            Tree t;
            return out(kvrt_cache_tree_accept(c, &t.batch, 0, nullptr));
        }));
        r.push_back(err("kvrt_cache_seq_add", what, hnd, C, [c] { return out(kvrt_cache_seq_add(c, 0, -1, -1, 1)); }));
        r.push_back(err("kvrt_cache_seq_div", what, hnd, C, [c] { return out(kvrt_cache_seq_div(c, 0, -1, -1, 2)); }));
        r.push_back(err("kvrt_cache_seq_pos_min", what, hnd, C, [c] {
            int32_t p = 0;
            return out(kvrt_cache_seq_pos_min(c, 0, &p));
        }));
        r.push_back(err("kvrt_cache_seq_pos_max", what, hnd, C, [c] {
            int32_t p = 0;
            return out(kvrt_cache_seq_pos_max(c, 0, &p));
        }));
        r.push_back(err("kvrt_cache_seq_window_pos_min", what, hnd, C, [c] {
            int32_t p = 0;
            return out(kvrt_cache_seq_window_pos_min(c, 0, &p));
        }));
        r.push_back(err("kvrt_cache_clear", what, hnd, C, [c] { return out(kvrt_cache_clear(c)); }));
        r.push_back(err("kvrt_cache_compact", what, hnd, C, [c] { return out(kvrt_cache_compact(c, nullptr, 0.0f, 0, nullptr)); }));
        r.push_back(err("kvrt_cache_apply_shifts", what, hnd, C, [c] { return out(kvrt_cache_apply_shifts(c, nullptr)); }));
        r.push_back(err("kvrt_cache_context_shift", what, hnd, C, [c] { return out(kvrt_cache_context_shift(c, 0, 0, 0, nullptr)); }));
        r.push_back(err("kvrt_cache_discard_for_reevaluation", what, hnd, C, [c] {
            int32_t a = 0, b = 0, n = 0;
            return out(kvrt_cache_discard_for_reevaluation(c, 0, 0, 0, &a, &b, &n));
        }));
        r.push_back(err("kvrt_cache_attention", what, hnd, C, [c] {
            Attend a;
            return out(kvrt_cache_attention(c, nullptr, 0, &a.batch, &a.qt, &a.ot, nullptr));
        }));
        r.push_back(err("kvrt_cache_static_get_window", what, hnd, C, [c] {
            kvrt_static_window win = KVRT_STATIC_WINDOW_INIT;
            return out(kvrt_cache_static_get_window(c, 0, 0, 0, KVRT_KV_ARRAY_K, &win));
        }));
        r.push_back(err("kvrt_cache_static_get_mask", what, hnd, C, [c] {
            float mask[World::kStaticSeqLen];
            return out(kvrt_cache_static_get_mask(c, 0, KVRT_TYPE_F32, mask, sizeof mask));
        }));
        r.push_back(err("kvrt_cache_static_make_room", what, hnd, C,
                        [c] { return out(kvrt_cache_static_make_room(c, 0, 1)); }));
        r.push_back(err("kvrt_cache_static_get_graph_mask", what, hnd, C, [c] {
            float mask[World::kStaticSeqLen];
            return out(kvrt_cache_static_get_graph_mask(c, 0, nullptr, mask, sizeof mask));
        }));
        r.push_back(err("kvrt_cache_static_get_stats", what, hnd, C, [c] {
            kvrt_static_stats st = KVRT_STATIC_STATS_INIT;
            return out(kvrt_cache_static_get_stats(c, 0, &st));
        }));
        r.push_back(err("kvrt_cache_paged_admit", what, hnd, C, [c] {
            const int32_t id = 1, pos = 0;
            uint32_t n = 0;
            return out(kvrt_cache_paged_admit(c, 0, 1, &id, &pos, 0, &n, nullptr));
        }));
        r.push_back(err("kvrt_cache_paged_append", what, hnd, C, [c] {
            const int32_t id = 1, pos = 0;
            return out(kvrt_cache_paged_append(c, nullptr, 0, 1, &id, &pos, nullptr));
        }));
        r.push_back(err("kvrt_cache_paged_fork", what, hnd, C, [c] { return out(kvrt_cache_paged_fork(c, 0, 1)); }));
        r.push_back(err("kvrt_cache_paged_set_sharing", what, hnd, C,
                        [c] { return out(kvrt_cache_paged_set_sharing(c, 0, 0)); }));
        r.push_back(err("kvrt_cache_paged_clear_registry", what, hnd, C,
                        [c] { return out(kvrt_cache_paged_clear_registry(c)); }));
        r.push_back(err("kvrt_cache_paged_get_cells", what, hnd, C, [c] {
            uint32_t n = 0;
            return out(kvrt_cache_paged_get_cells(c, 0, 0, 0, nullptr, &n));
        }));
        r.push_back(err("kvrt_cache_paged_get_stats", what, hnd, C, [c] {
            kvrt_paged_stats st = KVRT_PAGED_STATS_INIT;
            return out(kvrt_cache_paged_get_stats(c, &st));
        }));
        r.push_back(err("kvrt_cache_seq_transfer", "src: " + what, hnd, C,
                        [c, &w] { return out(kvrt_cache_seq_transfer(c, 0, w.cache, 3, nullptr)); }));
        r.push_back(err("kvrt_cache_seq_transfer", "dst: " + what, hnd, C,
                        [c, &w] { return out(kvrt_cache_seq_transfer(w.cache, 0, c, 3, nullptr)); }));
    }

    // kvrt_cache_store, kvrt_cache_place and kvrt_cache_write.
    const std::pair<std::string, std::function<void(Store&)>> bad_stores[] = {
        {"batch->type -7", [](Store& s) { s.batch.type = bad_enum<kvrt_struct_type>(-7); }},
        {"a foreign struct chained on batch", [](Store& s) { s.batch.next = &foreign; }},
        {"batch->positions NULL", [](Store& s) { s.batch.positions = nullptr; }},
        {"batch->seq_ids NULL", [](Store& s) { s.batch.seq_ids = nullptr; }},
        {"position INT32_MIN", [](Store& s) { s.pos = kMin32; }},
        {"position -1", [](Store& s) { s.pos = -1; }},
        {"sequence INT32_MAX", [](Store& s) { s.seq = kMax32; }},
        {"sequence INT32_MIN", [](Store& s) { s.seq = kMin32; }},
        {"sequence -1", [](Store& s) { s.seq = -1; }},
        {"sequence 4 (max_seqs)", [](Store& s) { s.seq = 4; }},
        {"(sequence 0, position 0) already stored", [](Store& s) { s.seq = 0; s.pos = 0; }},
    };
    for (const auto& [what, tamper] : bad_stores) {
        const auto t = tamper;
        r.push_back(err("kvrt_cache_store", what, inv, C, [&w, t] {
            Store s;
            t(s);
            return out(kvrt_cache_store(w.cache, nullptr, &s.batch, s.layer, &s.kt, &s.vt, nullptr));
        }));
        r.push_back(err("kvrt_cache_place", what, inv, C, [&w, t] {
            Store s;
            t(s);
            return out(kvrt_cache_place(w.cache, &s.batch, nullptr));
        }));
    }
    r.push_back(err("kvrt_cache_store", "batch NULL", inv, C, [&w] {
        Store s;
        return out(kvrt_cache_store(w.cache, nullptr, nullptr, -1, &s.kt, &s.vt, nullptr));
    }));
    r.push_back(err("kvrt_cache_place", "batch NULL", inv, C, [&w] { return out(kvrt_cache_place(w.cache, nullptr, nullptr)); }));
    for (const char* fn : {"kvrt_cache_store", "kvrt_cache_place"})
        r.push_back(err(fn, "60 tokens, 52 free cells", KVRT_ERROR_CACHE_FULL, C, [&w, fn] {
            std::vector<int32_t> pos(60), seq(60, 3);
            for (int32_t i = 0; i < 60; ++i) pos[size_t(i)] = i;
            std::vector<float> k(size_t{World::kLayers} * 60 * World::kKvHeads * World::kDim, 1.0f);
            const kvrt_batch b = make_batch(60, pos.data(), seq.data());
            const kvrt_tensor_ref t = host_tensor(k.data());
            if (std::string(fn) == "kvrt_cache_place") return out(kvrt_cache_place(w.cache, &b, nullptr));
            return out(kvrt_cache_store(w.cache, nullptr, &b, -1, &t, &t, nullptr));
        }));
    // Tensors and layers, for a store and for a write of cell 0.
    const auto stream_as_buffer = reinterpret_cast<kvrt_buffer>(w.stream);
    const std::pair<std::string, std::function<void(Store&)>> bad_tensors[] = {
        {"layer INT32_MIN", [](Store& s) { s.layer = kMin32; }},
        {"layer INT32_MAX", [](Store& s) { s.layer = kMax32; }},
        {"layer 2 (n_layers)", [](Store& s) { s.layer = 2; }},
        {"layer -2", [](Store& s) { s.layer = -2; }},
        {"k->type -7", [](Store& s) { s.kt.type = bad_enum<kvrt_struct_type>(-7); }},
        {"a foreign struct chained on v", [](Store& s) { s.vt.next = &foreign; }},
        {"k->element_type 12345", [](Store& s) { s.kt.element_type = bad_enum<kvrt_type>(12345); }},
        {"k->element_type -7", [](Store& s) { s.kt.element_type = bad_enum<kvrt_type>(-7); }},
        {"v->element_type UNDEFINED", [](Store& s) { s.vt.element_type = KVRT_TYPE_UNDEFINED; }},
        {"k->element_type Q8_0 (the cache stores F16)", [](Store& s) { s.kt.element_type = KVRT_TYPE_Q8_0; }},
        {"k with neither host nor buffer", [](Store& s) { s.kt.host = nullptr; }},
        {"k host rows that wrap the address space", [](Store& s) { s.kt.host = top_of_memory(); }},
        {"k host offset UINT64_MAX - 3", [](Store& s) { s.kt.offset = kMax64 - 3; }},
        {"k row_stride UINT64_MAX - 3", [](Store& s) { s.kt.row_stride = kMax64 - 3; }},
        {"k layer_stride UINT64_MAX - 3", [](Store& s) { s.kt.layer_stride = kMax64 - 3; }},
        {"v head_stride UINT64_MAX - 3", [](Store& s) { s.vt.head_stride = kMax64 - 3; }},
        {"k offset 2 (misaligned)", [](Store& s) { s.kt.offset = 2; }},
    };
    const std::pair<std::string, std::function<void(World&, Store&)>> bad_buffers[] = {
        {"k buffer offset UINT64_MAX - 3", [](World& wd, Store& s) { s.kt = buffer_tensor(wd.buffer, kMax64 - 3); }},
        {"k buffer offset at the end", [](World& wd, Store& s) { s.kt = buffer_tensor(wd.buffer, World::kBufferBytes); }},
        {"k buffer row_stride UINT64_MAX - 3", [](World& wd, Store& s) { s.kt = buffer_tensor(wd.buffer, 0, KVRT_TYPE_F32, kMax64 - 3); }},
        {"k buffer layer_stride wraps", [](World& wd, Store& s) { s.kt = buffer_tensor(wd.buffer, 256, KVRT_TYPE_F32, 0, kMax64 - 255); }},
        {"k with both host and buffer", [](World& wd, Store& s) { s.kt.buffer = wd.buffer; }},
        {"k buffer of another context", [](World& wd, Store& s) { s.kt = buffer_tensor(wd.buffer_b, 0); }},
        {"v buffer of another context", [](World& wd, Store& s) { s.vt = buffer_tensor(wd.buffer_b, 0); }},
        {"stream of another context", [](World& wd, Store& s) { s.stream = wd.stream_b; }},
    };
    const std::pair<std::string, std::function<void(World&, Store&)>> bad_handles[] = {
        {"k buffer destroyed", [](World& wd, Store& s) { s.kt = buffer_tensor(wd.dead_buffer, 0); }},
        {"k buffer: a stream cast to a buffer", [stream_as_buffer](World&, Store& s) { s.kt = buffer_tensor(stream_as_buffer, 0); }},
        {"k buffer: a cache cast to a buffer", [](World& wd, Store& s) { s.kt = buffer_tensor(reinterpret_cast<kvrt_buffer>(wd.cache.get()), 0); }},
        {"v buffer destroyed", [](World& wd, Store& s) { s.vt = buffer_tensor(wd.dead_buffer, 0); }},
        {"v buffer: a stream cast to a buffer", [stream_as_buffer](World&, Store& s) { s.vt = buffer_tensor(stream_as_buffer, 0); }},
        {"v buffer: a cache cast to a buffer", [](World& wd, Store& s) { s.vt = buffer_tensor(reinterpret_cast<kvrt_buffer>(wd.cache.get()), 0); }},
        {"stream destroyed", [](World& wd, Store& s) { s.stream = wd.dead_stream; }},
        {"stream: a buffer cast to a stream", [](World& wd, Store& s) { s.stream = reinterpret_cast<kvrt_stream>(wd.buffer); }},
        {"stream: a cache cast to a stream", [](World& wd, Store& s) { s.stream = reinterpret_cast<kvrt_stream>(wd.cache.get()); }},
    };
    const auto store_row = [&w](const std::function<void(World&, Store&)>& t) {
        return [&w, t] {
            Store s;
            t(w, s);
            return out(kvrt_cache_store(w.cache, s.stream, &s.batch, s.layer, &s.kt, &s.vt, nullptr));
        };
    };
    const auto write_row = [&w](const std::function<void(World&, Store&)>& t) {
        return [&w, t] {
            Store s;
            t(w, s);
            const uint32_t cell = 0;
            return out(kvrt_cache_write(w.cache, s.stream, 1, &cell, s.layer, &s.kt, &s.vt));
        };
    };
    for (const auto& [what, tamper] : bad_tensors) {
        const auto t = tamper;
        const auto wt = [t](World&, Store& s) { t(s); };
        r.push_back(err("kvrt_cache_store", what, inv, C, store_row(wt)));
        r.push_back(err("kvrt_cache_write", what, inv, C, write_row(wt)));
    }
    for (const auto& [what, t] : bad_buffers) {
        r.push_back(err("kvrt_cache_store", what, inv, C, store_row(t)));
        r.push_back(err("kvrt_cache_write", what, inv, C, write_row(t)));
    }
    for (const auto& [what, t] : bad_handles) {
        r.push_back(err("kvrt_cache_store", what, hnd, C, store_row(t)));
        r.push_back(err("kvrt_cache_write", what, hnd, C, write_row(t)));
    }
    // A stream of another context that is recording: only its context is wrong.
    r.push_back(err("kvrt_cache_store", "a recording stream of another context", inv, C, [&w] {
        Store s;
        return while_recording(w.stream_b, [&] {
            return out(kvrt_cache_store(w.cache, w.stream_b, &s.batch, s.layer, &s.kt, &s.vt, nullptr));
        });
    }));
    r.push_back(err("kvrt_cache_write", "a recording stream of another context", inv, C, [&w] {
        Store s;
        const uint32_t cell = 0;
        return while_recording(w.stream_b,
                               [&] { return out(kvrt_cache_write(w.cache, w.stream_b, 1, &cell, s.layer, &s.kt, &s.vt)); });
    }));
    r.push_back(err("kvrt_cache_compact", "a recording stream of another context", inv, C, [&w] {
        return while_recording(w.stream_b, [&] { return out(kvrt_cache_compact(w.cache, w.stream_b, 0.0f, 0, nullptr)); });
    }));
    r.push_back(err("kvrt_cache_compact", "a cache cast to a stream", hnd, C, [&w] {
        return out(kvrt_cache_compact(w.cache, reinterpret_cast<kvrt_stream>(w.cache.get()), 0.0f, 0, nullptr));
    }));
    r.push_back(err("kvrt_cache_store", "k NULL", inv, C, [&w] {
        Store s;
        return out(kvrt_cache_store(w.cache, nullptr, &s.batch, -1, nullptr, &s.vt, nullptr));
    }));
    r.push_back(err("kvrt_cache_store", "v NULL", inv, C, [&w] {
        Store s;
        return out(kvrt_cache_store(w.cache, nullptr, &s.batch, -1, &s.kt, nullptr, nullptr));
    }));
    r.push_back(err("kvrt_cache_write", "k NULL", inv, C, [&w] {
        Store s;
        const uint32_t cell = 0;
        return out(kvrt_cache_write(w.cache, nullptr, 1, &cell, -1, nullptr, &s.vt));
    }));
    r.push_back(err("kvrt_cache_write", "v NULL", inv, C, [&w] {
        Store s;
        const uint32_t cell = 0;
        return out(kvrt_cache_write(w.cache, nullptr, 1, &cell, -1, &s.kt, nullptr));
    }));

    // Two tokens (a write: two cells) whose first is fine: nothing of it may
    // be stored or written either.
    const std::pair<std::string, std::function<void(Pair&)>> bad_pairs[] = {
        {"token 2: position -1", [](Pair& p) { p.pos[1] = -1; }},
        {"token 2: position INT32_MIN", [](Pair& p) { p.pos[1] = kMin32; }},
        {"token 2: sequence 4 (max_seqs)", [](Pair& p) { p.seqs[1] = 4; }},
        {"token 2: sequence -1", [](Pair& p) { p.seqs[1] = -1; }},
        {"token 2: sequence INT32_MAX", [](Pair& p) { p.seqs[1] = kMax32; }},
        {"token 2 of no sequence (seq_id_counts 0)", [](Pair& p) { p.counts[1] = 0; }},
        {"the same (sequence, position) twice in the batch", [](Pair& p) { p.pos[1] = p.pos[0]; }},
        {"a sequence id repeated inside token 2", [](Pair& p) {
             p.counts[1] = 2;
             p.seqs[1] = p.seqs[2] = 2;
         }},
        {"token 2: (sequence 0, position 2) already stored", [](Pair& p) {
             p.seqs[1] = 0;
             p.pos[1] = 2;
         }},
    };
    for (const auto& [what, tamper] : bad_pairs) {
        const auto t = tamper;
        r.push_back(err("kvrt_cache_store", what, inv, C, [&w, t] {
            Pair p;
            t(p);
            return out(kvrt_cache_store(w.cache, nullptr, &p.batch, p.layer, &p.kt, &p.vt, nullptr));
        }));
        r.push_back(err("kvrt_cache_place", what, inv, C, [&w, t] {
            Pair p;
            t(p);
            return out(kvrt_cache_place(w.cache, &p.batch, nullptr));
        }));
    }
    // Tensors of two tokens, for a store and for a write of cells 0 and 1.
    const uint64_t row_f32 = uint64_t{World::kKvHeads} * World::kDim * 4;
    std::vector<std::pair<std::string, std::function<void(World&, Pair&)>>> bad_pair_tensors = {
        {"k->element_type UNDEFINED", [](World&, Pair& p) { p.kt.element_type = KVRT_TYPE_UNDEFINED; }},
        {"k->element_type U16_STATIC", [](World&, Pair& p) { p.kt.element_type = KVRT_TYPE_U16_STATIC; }},
        {"v->element_type Q8_0 (the cache stores F16)", [](World&, Pair& p) { p.vt.element_type = KVRT_TYPE_Q8_0; }},
        {"v->element_type Q4_0", [](World&, Pair& p) { p.vt.element_type = KVRT_TYPE_Q4_0; }},
        {"v->element_type U8_STATIC", [](World&, Pair& p) { p.vt.element_type = KVRT_TYPE_U8_STATIC; }},
        {"v->element_type 77", [](World&, Pair& p) { p.vt.element_type = bad_enum<kvrt_type>(77); }},
        {"k row_stride a row + 2 (misaligned)", [row_f32](World&, Pair& p) { p.kt.row_stride = row_f32 + 2; }},
        {"k head_stride 130 (misaligned)", [](World&, Pair& p) { p.kt.head_stride = 130; }},
        {"k layer_stride 6 (misaligned)", [](World&, Pair& p) { p.kt.layer_stride = 6; }},
        {"k host row_stride 2^63", [](World&, Pair& p) { p.kt.row_stride = uint64_t{1} << 63; }},
        {"v host layer_stride UINT64_MAX - 3", [](World&, Pair& p) { p.vt.layer_stride = kMax64 - 3; }},
        {"k buffer holding one layer of two", [row_f32](World& wd, Pair& p) {
             p.kt = buffer_tensor(wd.buffer, World::kBufferBytes - 2 * row_f32);
         }},
        {"k buffer offset 2^63", [](World& wd, Pair& p) { p.kt = buffer_tensor(wd.buffer, uint64_t{1} << 63); }},
    };
    for (uint64_t stride : {uint64_t{1} << 62, uint64_t{1} << 63, kMax64 - 3}) {
        const std::string st = stride == kMax64 - 3 ? "UINT64_MAX - 3" : stride == uint64_t{1} << 62 ? "2^62" : "2^63";
        if (stride != kMax64 - 3)  // UINT64_MAX - 3: a row of one token above
            bad_pair_tensors.push_back({"k buffer row_stride " + st, [stride](World& wd, Pair& p) {
                                            p.kt = buffer_tensor(wd.buffer, 0);
                                            p.kt.row_stride = stride;
                                        }});
        bad_pair_tensors.push_back({"k buffer head_stride " + st, [stride](World& wd, Pair& p) {
                                        p.kt = buffer_tensor(wd.buffer, 0);
                                        p.kt.head_stride = stride;
                                    }});
        bad_pair_tensors.push_back({"k buffer layer_stride " + st, [stride](World& wd, Pair& p) {
                                        p.kt = buffer_tensor(wd.buffer, 0);
                                        p.kt.layer_stride = stride;
                                    }});
    }
    for (const auto& [what, tamper] : bad_pair_tensors) {
        const auto t = tamper;
        r.push_back(err("kvrt_cache_store", "two tokens: " + what, inv, C, [&w, t] {
            Pair p;
            t(w, p);
            return out(kvrt_cache_store(w.cache, nullptr, &p.batch, p.layer, &p.kt, &p.vt, nullptr));
        }));
        r.push_back(err("kvrt_cache_write", "two cells: " + what, inv, C, [&w, t] {
            Pair p;
            t(w, p);
            return out(kvrt_cache_write(w.cache, nullptr, 2, p.cells, p.layer, &p.kt, &p.vt));
        }));
    }
    r.push_back(err("kvrt_cache_write", "2^22 cells, row_stride 2^43: the rows overflow 64 bits", inv, C, [&w] {
        // Whatever is checked first, the call must fail and change nothing.
        Pair p;
        p.kt = buffer_tensor(w.buffer, 0);
        p.kt.row_stride = uint64_t{1} << 43;
        const std::vector<uint32_t> many(size_t{1} << 22, 0);
        return out(kvrt_cache_write(w.cache, nullptr, static_cast<uint32_t>(many.size()), many.data(), 0, &p.kt, &p.vt));
    }));
    r.push_back(err("kvrt_cache_store", "a stream that is not recording", state, C,
                    store_row([](World& wd, Store& s) { s.stream = wd.stream; })));
    r.push_back(err("kvrt_cache_write", "a stream that is not recording", state, C,
                    write_row([](World& wd, Store& s) { s.stream = wd.stream; })));
    struct Cells {
        const char* what;
        std::vector<uint32_t> cells;
    };
    for (const Cells& cs : {Cells{"cell 64 (capacity)", {64}}, Cells{"cell UINT32_MAX", {kMaxU32}},
                            Cells{"an empty cell", {63}}, Cells{"cell 0 twice", {0, 0}}})
        r.push_back(err("kvrt_cache_write", cs.what, inv, C, [&w, cs] {
            std::vector<float> k(size_t{World::kLayers} * cs.cells.size() * World::kKvHeads * World::kDim, 1.0f);
            const kvrt_tensor_ref t = host_tensor(k.data());
            return out(kvrt_cache_write(w.cache, nullptr, static_cast<uint32_t>(cs.cells.size()), cs.cells.data(), -1, &t, &t));
        }));
    // The first cell is in use and must not be written either; all layers
    // and one layer.
    for (int32_t layer : {-1, 1})
        for (const Cells& cs : {Cells{"cells 0 and 64 (capacity)", {0, 64}}, Cells{"cells 0 and UINT32_MAX", {0, kMaxU32}},
                                Cells{"cells 0 and 63 (empty)", {0, 63}}, Cells{"cell 0 twice", {0, 0}}}) {
            if (layer == -1 && cs.cells[1] == 0) continue;  // the row above
            r.push_back(err("kvrt_cache_write", std::string(cs.what) + ", layer " + std::to_string(layer), inv, C, [&w, cs, layer] {
                const size_t layers = layer < 0 ? World::kLayers : 1;
                std::vector<float> k(layers * cs.cells.size() * World::kKvHeads * World::kDim, 1.0f);
                const kvrt_tensor_ref t = host_tensor(k.data());
                return out(kvrt_cache_write(w.cache, nullptr, 2, cs.cells.data(), layer, &t, &t));
            }));
        }
    r.push_back(err("kvrt_cache_write", "cells NULL", inv, C, [&w] {
        Store s;
        return out(kvrt_cache_write(w.cache, nullptr, 1, nullptr, -1, &s.kt, &s.vt));
    }));

    // kvrt_cache_read and kvrt_cache_read_raw.
    // A read that fails writes nothing: `k` and `v` keep their sentinel.
    const auto untouched = [](Outcome o, const std::vector<float>& k, const std::vector<float>& v) {
        for (float x : k)
            if (x != 12345.0f) o.r = KVRT_ERROR_INTERNAL;
        for (float x : v)
            if (x != 12345.0f) o.r = KVRT_ERROR_INTERNAL;
        return o;
    };
    for (int32_t layer : {kMin32, -1, 2, kMax32}) {
        r.push_back(err("kvrt_cache_read", "layer " + std::to_string(layer), inv, N, [&w, layer, untouched] {
            const uint32_t cell = 0;
            std::vector<float> k(World::kKvHeads * World::kDim, 12345.0f);
            return untouched(out(kvrt_cache_read(w.cache, layer, 1, &cell, k.data(), bytes_of(k), nullptr, 0)), k, {});
        }));
        r.push_back(err("kvrt_cache_read_raw", "layer " + std::to_string(layer), inv, N, [&w, layer] {
            const uint32_t cell = 0;
            std::vector<uint8_t> bytes(4096);
            return out(kvrt_cache_read_raw(w.cache, layer, KVRT_KV_ARRAY_K, 1, &cell, bytes.data(), bytes.size()));
        }));
    }
    for (uint32_t cell : {World::kCapacity, kMaxU32}) {
        r.push_back(err("kvrt_cache_read", "cell " + std::to_string(cell), inv, N, [&w, cell, untouched] {
            std::vector<float> k(World::kKvHeads * World::kDim, 12345.0f);
            return untouched(out(kvrt_cache_read(w.cache, 0, 1, &cell, k.data(), bytes_of(k), nullptr, 0)), k, {});
        }));
        r.push_back(err("kvrt_cache_read_raw", "cell " + std::to_string(cell), inv, N, [&w, cell] {
            std::vector<uint8_t> bytes(4096);
            return out(kvrt_cache_read_raw(w.cache, 0, KVRT_KV_ARRAY_V, 1, &cell, bytes.data(), bytes.size()));
        }));
    }
    r.push_back(err("kvrt_cache_read", "cells NULL", inv, N, [&w, untouched] {
        std::vector<float> k(World::kKvHeads * World::kDim, 12345.0f);
        return untouched(out(kvrt_cache_read(w.cache, 0, 1, nullptr, k.data(), bytes_of(k), nullptr, 0)), k, {});
    }));
    // Two cells, K and V: the cell in range is not read out either.
    struct ReadCase {
        std::string what;
        int32_t layer;
        uint32_t cells[2];
        bool null_cells;
    };
    for (const ReadCase& rc : {ReadCase{"k and v, cells 0 and 64 (capacity)", 0, {0, World::kCapacity}, false},
                               ReadCase{"k and v, cells UINT32_MAX and 0", 0, {kMaxU32, 0}, false},
                               ReadCase{"k and v, layer -1", -1, {0, 1}, false},
                               ReadCase{"k and v, layer 2 (n_layers)", 2, {0, 1}, false},
                               ReadCase{"k and v, layer INT32_MIN", kMin32, {0, 1}, false},
                               ReadCase{"k and v, cells NULL", 0, {0, 1}, true}})
        r.push_back(err("kvrt_cache_read", rc.what, inv, C, [&w, rc, untouched] {
            std::vector<float> k(2 * World::kKvHeads * World::kDim, 12345.0f), v(k);
            return untouched(out(kvrt_cache_read(w.cache, rc.layer, 2, rc.null_cells ? nullptr : rc.cells, k.data(),
                                                 bytes_of(k), v.data(), bytes_of(v))),
                             k, v);
        }));
    // Sized outputs: one cell's row is kKvHeads * kDim floats (128 bytes);
    // a buffer short of it is refused before anything is read or written.
    const uint64_t row = uint64_t{World::kKvHeads} * World::kDim * sizeof(float);
    for (uint64_t room : {uint64_t{0}, uint64_t{4}, row - 4, 2 * row - 1}) {
        const std::string of = " (2 cells are " + std::to_string(2 * row) + ")";
        for (bool v_short : {false, true})
            r.push_back(err("kvrt_cache_read", (v_short ? "v_out_bytes " : "k_out_bytes ") + std::to_string(room) + of,
                            inv, N, [&w, room, row, v_short] {
                                const uint32_t cells[2] = {0, 1};
                                std::vector<float> k(2 * row / 4, 12345.0f), v(k);
                                Outcome o = out(kvrt_cache_read(w.cache, 0, 2, cells, k.data(), v_short ? bytes_of(k) : room,
                                                                v.data(), v_short ? room : bytes_of(v)));
                                for (size_t i = 0; i < k.size(); ++i)
                                    if (k[i] != 12345.0f || v[i] != 12345.0f) o.r = KVRT_ERROR_INTERNAL;  // written
                                return o;
                            }));
    }
    for (int32_t a : {-7, 0, 3, 12345, kMin32})
        r.push_back(err("kvrt_cache_read_raw", "array " + std::to_string(a), inv, N, [&w, a] {
            const uint32_t cell = 0;
            std::vector<uint8_t> bytes(4096);
            return out(kvrt_cache_read_raw(w.cache, 0, bad_enum<kvrt_kv_array>(a), 1, &cell, bytes.data(), bytes.size()));
        }));
    for (uint64_t room : {uint64_t{0}, uint64_t{1}, uint64_t{63}})
        r.push_back(err("kvrt_cache_read_raw", "out_bytes " + std::to_string(room) + " (a row is 64)", inv, N, [&w, room] {
            const uint32_t cell = 0;
            std::vector<uint8_t> bytes(64);
            return out(kvrt_cache_read_raw(w.cache, 0, KVRT_KV_ARRAY_K, 1, &cell, bytes.data(), room));
        }));
    r.push_back(err("kvrt_cache_read_raw", "out NULL", inv, N, [&w] {
        const uint32_t cell = 0;
        return out(kvrt_cache_read_raw(w.cache, 0, KVRT_KV_ARRAY_K, 1, &cell, nullptr, 64));
    }));
    r.push_back(err("kvrt_cache_read_raw", "cells NULL", inv, N, [&w] {
        std::vector<uint8_t> bytes(64);
        return out(kvrt_cache_read_raw(w.cache, 0, KVRT_KV_ARRAY_K, 1, nullptr, bytes.data(), bytes.size()));
    }));

    // Sequence operations.
    for (int32_t seq : {kMax32, 4}) {
        const std::string s = "sequence " + std::to_string(seq);
        r.push_back(err("kvrt_cache_seq_rm", s, inv, C, [&w, seq] { return out(kvrt_cache_seq_rm(w.cache, seq, -1, -1)); }));
        r.push_back(err("kvrt_cache_seq_cp", "dst " + s, inv, C, [&w, seq] { return out(kvrt_cache_seq_cp(w.cache, 0, seq, -1, -1)); }));
        r.push_back(err("kvrt_cache_seq_add", s, inv, C, [&w, seq] { return out(kvrt_cache_seq_add(w.cache, seq, -1, -1, 1)); }));
        r.push_back(err("kvrt_cache_seq_div", s, inv, C, [&w, seq] { return out(kvrt_cache_seq_div(w.cache, seq, -1, -1, 2)); }));
        r.push_back(err("kvrt_cache_context_shift", s, inv, C, [&w, seq] { return out(kvrt_cache_context_shift(w.cache, seq, 0, 0, nullptr)); }));
        r.push_back(err("kvrt_cache_seq_rm", "static: " + s, inv, S, [&w, seq] { return out(kvrt_cache_seq_rm(w.static_cache, seq, -1, -1)); }));
    }
    for (int32_t seq : {kMin32, -1, kMax32, 4}) {
        const std::string s = "sequence " + std::to_string(seq);
        r.push_back(err("kvrt_cache_seq_cp", "src " + s, inv, C, [&w, seq] { return out(kvrt_cache_seq_cp(w.cache, seq, 2, -1, -1)); }));
        r.push_back(err("kvrt_cache_seq_keep", s, inv, C, [&w, seq] { return out(kvrt_cache_seq_keep(w.cache, seq)); }));
        r.push_back(err("kvrt_cache_seq_pos_min", s, inv, C, [&w, seq] {
            int32_t p = 0;
            return out(kvrt_cache_seq_pos_min(w.cache, seq, &p));
        }));
        r.push_back(err("kvrt_cache_seq_pos_max", s, inv, C, [&w, seq] {
            int32_t p = 0;
            return out(kvrt_cache_seq_pos_max(w.cache, seq, &p));
        }));
        r.push_back(err("kvrt_cache_seq_window_pos_min", s, inv, N, [&w, seq] {
            int32_t p = 0;
            return out(kvrt_cache_seq_window_pos_min(w.cache, seq, &p));
        }));
        r.push_back(err("kvrt_cache_discard_for_reevaluation", s, inv, C, [&w, seq] {
            int32_t a = 0, b = 0, n = 0;
            return out(kvrt_cache_discard_for_reevaluation(w.cache, seq, 0, 0, &a, &b, &n));
        }));
    }
    // Negative ids: only kvrt_cache_seq_rm takes them (all sequences).
    for (int32_t seq : {kMin32, -1}) {
        const std::string s = "sequence " + std::to_string(seq);
        r.push_back(err("kvrt_cache_seq_cp", "dst " + s, inv, C, [&w, seq] { return out(kvrt_cache_seq_cp(w.cache, 0, seq, -1, -1)); }));
        r.push_back(err("kvrt_cache_seq_add", s, inv, C, [&w, seq] { return out(kvrt_cache_seq_add(w.cache, seq, -1, -1, 1)); }));
        r.push_back(err("kvrt_cache_seq_div", s, inv, C, [&w, seq] { return out(kvrt_cache_seq_div(w.cache, seq, -1, -1, 2)); }));
    }
    r.push_back(err("kvrt_cache_seq_rm", "reversed range [5, 2)", inv, C, [&w] { return out(kvrt_cache_seq_rm(w.cache, 0, 5, 2)); }));
    r.push_back(err("kvrt_cache_seq_rm", "every sequence (-1), reversed range [5, 2)", inv, C,
                    [&w] { return out(kvrt_cache_seq_rm(w.cache, -1, 5, 2)); }));
    r.push_back(err("kvrt_cache_seq_add", "delta INT32_MAX - 5 on position 7 alone: it overflows", inv, C,
                    [&w] { return out(kvrt_cache_seq_add(w.cache, 0, 7, 8, kMax32 - 5)); }));
    // Documented no-ops: empty ranges, a copy onto itself, ranges with
    // nothing of the sequence, a delta of 0 and a divisor of 1.
    struct Noop {
        const char* fn;
        const char* what;
        std::function<kvrt_result(kvrt_cache)> call;
    };
    for (const Noop& n : {Noop{"kvrt_cache_seq_rm", "empty range [3, 3)", [](kvrt_cache c) { return kvrt_cache_seq_rm(c, 0, 3, 3); }},
                          Noop{"kvrt_cache_seq_rm", "nothing of sequence 1 in [4, 10)", [](kvrt_cache c) { return kvrt_cache_seq_rm(c, 1, 4, 10); }},
                          Noop{"kvrt_cache_seq_cp", "sequence 0 onto itself", [](kvrt_cache c) { return kvrt_cache_seq_cp(c, 0, 0, -1, -1); }},
                          Noop{"kvrt_cache_seq_cp", "nothing of sequence 1 in [4, 10)", [](kvrt_cache c) { return kvrt_cache_seq_cp(c, 1, 0, 4, 10); }},
                          Noop{"kvrt_cache_seq_add", "delta 0", [](kvrt_cache c) { return kvrt_cache_seq_add(c, 0, 0, -1, 0); }},
                          Noop{"kvrt_cache_seq_div", "divisor 1", [](kvrt_cache c) { return kvrt_cache_seq_div(c, 0, 0, -1, 1); }}}) {
        const auto call = n.call;
        r.push_back(noop(n.fn, n.what, C, [&w, call] { return Outcome{holds(call(w.cache) == KVRT_SUCCESS), ""}; }));
    }
    r.push_back(err("kvrt_cache_seq_cp", "reversed range [5, 2)", inv, C, [&w] { return out(kvrt_cache_seq_cp(w.cache, 0, 2, 5, 2)); }));
    r.push_back(err("kvrt_cache_seq_add", "reversed range [INT32_MAX, 0)", inv, C,
                    [&w] { return out(kvrt_cache_seq_add(w.cache, 0, kMax32, 0, 1)); }));
    r.push_back(err("kvrt_cache_seq_add", "delta INT32_MAX: positions overflow", inv, C,
                    [&w] { return out(kvrt_cache_seq_add(w.cache, 0, -1, -1, kMax32)); }));
    r.push_back(err("kvrt_cache_seq_div", "reversed range [5, 2)", inv, C, [&w] { return out(kvrt_cache_seq_div(w.cache, 0, 5, 2, 2)); }));
    for (int32_t d : {0, -1, kMin32})
        r.push_back(err("kvrt_cache_seq_div", "divisor " + std::to_string(d), inv, C,
                        [&w, d] { return out(kvrt_cache_seq_div(w.cache, 0, -1, -1, d)); }));
    r.push_back(err("kvrt_cache_seq_pos_min", "out_pos NULL", inv, C, [&w] { return out(kvrt_cache_seq_pos_min(w.cache, 0, nullptr)); }));
    r.push_back(err("kvrt_cache_seq_pos_max", "out_pos NULL", inv, C, [&w] { return out(kvrt_cache_seq_pos_max(w.cache, 0, nullptr)); }));
    r.push_back(err("kvrt_cache_seq_window_pos_min", "out_pos NULL", inv, N,
                    [&w] { return out(kvrt_cache_seq_window_pos_min(w.cache, 0, nullptr)); }));
    r.push_back(err("kvrt_cache_seq_rm", "static: reversed range [5, 2)", inv, S, [&w] { return out(kvrt_cache_seq_rm(w.static_cache, 0, 5, 2)); }));
    r.push_back(err("kvrt_cache_seq_rm", "static: sequence INT32_MAX", inv, S, [&w] { return out(kvrt_cache_seq_rm(w.static_cache, kMax32, 1, -1)); }));
    r.push_back(err("kvrt_cache_seq_cp", "static layout", unsup, S, [&w] { return out(kvrt_cache_seq_cp(w.static_cache, 0, 1, -1, -1)); }));
    r.push_back(err("kvrt_cache_seq_add", "static layout", unsup, S, [&w] { return out(kvrt_cache_seq_add(w.static_cache, 0, -1, -1, 1)); }));
    r.push_back(err("kvrt_cache_seq_div", "static layout", unsup, S, [&w] { return out(kvrt_cache_seq_div(w.static_cache, 0, -1, -1, 2)); }));
    r.push_back(err("kvrt_cache_seq_keep", "static: sequence INT32_MAX", inv, S, [&w] { return out(kvrt_cache_seq_keep(w.static_cache, kMax32)); }));

    // Token trees.
    r.push_back(err("kvrt_cache_tree_accept", "tree NULL", inv, C, [&w] { return out(kvrt_cache_tree_accept(w.cache, nullptr, 0, nullptr)); }));
    r.push_back(err("kvrt_cache_tree_accept", "no kvrt_batch_tree chained", inv, C, [&w] {
        Tree t;
        t.batch.next = nullptr;
        return out(kvrt_cache_tree_accept(w.cache, &t.batch, 0, nullptr));
    }));
    r.push_back(err("kvrt_cache_tree_accept", "a foreign struct chained", inv, C, [&w] {
        Tree t;
        Foreign f;
        t.tree.next = &f;
        return out(kvrt_cache_tree_accept(w.cache, &t.batch, 0, nullptr));
    }));
    r.push_back(err("kvrt_cache_tree_accept", "cells NULL", inv, C, [&w] {
        Tree t;
        t.tree.cells = nullptr;
        return out(kvrt_cache_tree_accept(w.cache, &t.batch, 0, nullptr));
    }));
    r.push_back(err("kvrt_cache_tree_accept", "parents NULL", inv, C, [&w] {
        Tree t;
        t.tree.parents = nullptr;
        return out(kvrt_cache_tree_accept(w.cache, &t.batch, 0, nullptr));
    }));
    r.push_back(err("kvrt_cache_tree_accept", "a parent after its child", inv, C, [&w] {
        Tree t;
        t.parents[1] = 2;
        return out(kvrt_cache_tree_accept(w.cache, &t.batch, 0, nullptr));
    }));
    r.push_back(err("kvrt_cache_tree_accept", "cells that hold other tokens", inv, C, [&w] {
        Tree t;
        return out(kvrt_cache_tree_accept(w.cache, &t.batch, 0, nullptr));
    }));
    r.push_back(err("kvrt_cache_tree_accept", "cell out of range", inv, C, [&w] {
        Tree t;
        t.cells[2] = kMaxU32;
        return out(kvrt_cache_tree_accept(w.cache, &t.batch, 0, nullptr));
    }));
    for (int32_t leaf : {-1, 3, kMax32})
        r.push_back(err("kvrt_cache_tree_accept", "leaf " + std::to_string(leaf), inv, C, [&w, leaf] {
            // A chain over what cells 0..2 really hold (sequence 0,
            // positions 0..2), so that only the leaf is wrong.
            Tree t;
            for (int32_t i = 0; i < 3; ++i) {
                t.pos[i] = i;
                t.parents[i] = i - 1;
            }
            return out(kvrt_cache_tree_accept(w.cache, &t.batch, 1, &leaf));
        }));
    r.push_back(err("kvrt_cache_tree_accept", "leaves NULL with n_leaves 1", inv, C, [&w] {
        Tree t;
        return out(kvrt_cache_tree_accept(w.cache, &t.batch, 1, nullptr));
    }));
    r.push_back(err("kvrt_cache_tree_accept", "static layout", unsup, S, [&w] {
        Tree t;
        return out(kvrt_cache_tree_accept(w.static_cache, &t.batch, 0, nullptr));
    }));
    r.push_back(err("kvrt_cache_store", "a tree whose parent comes later", inv, C, [&w] {
        Store s;
        const int32_t parent = 0;  // token 0 cannot be its own parent
        kvrt_batch_tree t = KVRT_BATCH_TREE_INIT;
        t.parents = &parent;
        s.batch.next = &t;
        return out(kvrt_cache_store(w.cache, nullptr, &s.batch, -1, &s.kt, &s.vt, nullptr));
    }));
    r.push_back(err("kvrt_cache_store", "a tree on the static layout", unsup, S, [&w] {
        std::vector<float> kv(World::kDim, 0.25f);
        const int32_t pos = 3, seq = 0, parent = -1;
        kvrt_batch b = make_batch(1, &pos, &seq);
        kvrt_batch_tree t = KVRT_BATCH_TREE_INIT;
        t.parents = &parent;
        b.next = &t;
        const kvrt_tensor_ref k = host_tensor(kv.data()), v = host_tensor(kv.data());
        return out(kvrt_cache_store(w.static_cache, nullptr, &b, -1, &k, &v, nullptr));
    }));
    r.push_back(err("kvrt_cache_attention", "a tree without cells", inv, C, [&w] {
        Attend a;
        const int32_t parent = -1;
        kvrt_batch_tree t = KVRT_BATCH_TREE_INIT;
        t.parents = &parent;
        a.batch.next = &t;
        return out(kvrt_cache_attention(w.cache, nullptr, a.layer, &a.batch, &a.qt, &a.ot, nullptr));
    }));
    r.push_back(err("kvrt_cache_attention", "a tree whose cell holds another position", inv, C, [&w] {
        Attend a;
        const int32_t parent = -1;
        const uint32_t cell = 0;  // position 0, not 8
        kvrt_batch_tree t = KVRT_BATCH_TREE_INIT;
        t.parents = &parent;
        t.cells = &cell;
        a.batch.next = &t;
        return out(kvrt_cache_attention(w.cache, nullptr, a.layer, &a.batch, &a.qt, &a.ot, nullptr));
    }));
    r.push_back(err("kvrt_cache_context_shift", "static layout", unsup, S,
                    [&w] { return out(kvrt_cache_context_shift(w.static_cache, 0, 0, 0, nullptr)); }));
    r.push_back(err("kvrt_cache_discard_for_reevaluation", "static: no position after n_keep 3", inv, S, [&w] {
        int32_t a = 0, b = 0, n = 0;
        return out(kvrt_cache_discard_for_reevaluation(w.static_cache, 0, 3, 0, &a, &b, &n));
    }));
    struct Shift {
        const char* what;
        int32_t n_keep, n_discard;
    };
    for (const Shift& sh : {Shift{"n_keep -1", -1, 0}, Shift{"n_keep INT32_MIN", kMin32, 0}, Shift{"n_discard -1", 0, -1},
                            Shift{"n_discard INT32_MIN", 0, kMin32}, Shift{"n_keep INT32_MAX: nothing after it", kMax32, 0},
                            Shift{"n_keep 4, n_discard INT32_MAX (4 positions after n_keep)", 4, kMax32},
                            Shift{"n_keep 4, n_discard 5 (4 positions after n_keep)", 4, 5}}) {
        r.push_back(err("kvrt_cache_context_shift", sh.what, inv, C, [&w, sh] {
            int32_t n_past = -5;
            return out(kvrt_cache_context_shift(w.cache, 0, sh.n_keep, sh.n_discard, &n_past));
        }));
        r.push_back(err("kvrt_cache_discard_for_reevaluation", sh.what, inv, C, [&w, sh] {
            int32_t a = 0, b = 0, n = 0;
            return out(kvrt_cache_discard_for_reevaluation(w.cache, 0, sh.n_keep, sh.n_discard, &a, &b, &n));
        }));
    }
    r.push_back(err("kvrt_cache_discard_for_reevaluation", "out_count NULL", inv, C, [&w] {
        int32_t a = 0, b = 0;
        return out(kvrt_cache_discard_for_reevaluation(w.cache, 0, 0, 0, &a, &b, nullptr));
    }));

    // Compaction and shifts.
    for (float th : {NAN, -0.5f, 1.5f, INFINITY, -INFINITY})
        r.push_back(err("kvrt_cache_compact", "threshold " + std::to_string(th), inv, C, [&w, th] {
            uint32_t moved = 0;
            return out(kvrt_cache_compact(w.cache, nullptr, th, 0, &moved));
        }));
    const std::pair<std::string, std::function<kvrt_stream(World&)>> bad_cache_streams[] = {
        {"stream of another context", [](World& wd) { return wd.stream_b; }},
        {"stream destroyed", [](World& wd) { return wd.dead_stream; }},
        {"a buffer cast to a stream", [](World& wd) { return reinterpret_cast<kvrt_stream>(wd.buffer); }},
        {"a stream that is not recording", [](World& wd) { return wd.stream; }},
    };
    const kvrt_result stream_want[] = {inv, hnd, hnd, state};
    for (size_t i = 0; i < 4; ++i) {
        const auto& [what, pick] = bad_cache_streams[i];
        const auto p = pick;
        const kvrt_result want = stream_want[i];
        r.push_back(err("kvrt_cache_compact", what, want, C, [&w, p] { return out(kvrt_cache_compact(w.cache, p(w), 0.0f, 0, nullptr)); }));
        r.push_back(err("kvrt_cache_apply_shifts", what, want, C, [&w, p] { return out(kvrt_cache_apply_shifts(w.cache, p(w))); }));
        r.push_back(err("kvrt_cache_attention", what, want, C, [&w, p] {
            Attend a;
            std::vector<float> o(a.o.size());
            const kvrt_output_ref ot = buffer_output(w.buffer, 0);
            return out(kvrt_cache_attention(w.cache, p(w), 0, &a.batch, &a.qt, &ot, nullptr));
        }));
    }

    // Attention.
    const auto buffer_as_stream = reinterpret_cast<kvrt_buffer>(w.stream);
    const std::pair<std::string, std::function<void(World&, Attend&)>> bad_attention[] = {
        {"queries->type -7", [](World&, Attend& a) { a.batch.type = bad_enum<kvrt_struct_type>(-7); }},
        {"a foreign struct chained on queries", [](World&, Attend& a) { a.batch.next = &foreign; }},
        {"queries->seq_ids NULL", [](World&, Attend& a) { a.batch.seq_ids = nullptr; }},
        {"a query of 2 sequences", [](World&, Attend& a) {
             static const uint32_t two = 2;
             static const int32_t seqs[2] = {0, 1};
             a.batch.seq_id_counts = &two;
             a.batch.seq_ids = seqs;
         }},
        {"layer INT32_MIN", [](World&, Attend& a) { a.layer = kMin32; }},
        {"layer -1", [](World&, Attend& a) { a.layer = -1; }},
        {"layer INT32_MAX", [](World&, Attend& a) { a.layer = kMax32; }},
        {"position INT32_MIN", [](World&, Attend& a) { a.pos = kMin32; }},
        {"sequence INT32_MAX", [](World&, Attend& a) { a.seq = kMax32; }},
        {"sequence -1", [](World&, Attend& a) { a.seq = -1; }},
        {"q->element_type Q8_0", [](World&, Attend& a) { a.qt.element_type = KVRT_TYPE_Q8_0; }},
        {"q->element_type -7", [](World&, Attend& a) { a.qt.element_type = bad_enum<kvrt_type>(-7); }},
        {"out->element_type 12345", [](World&, Attend& a) { a.ot.element_type = bad_enum<kvrt_type>(12345); }},
        {"out->element_type -7", [](World&, Attend& a) { a.ot.element_type = bad_enum<kvrt_type>(-7); }},
        {"out->element_type Q4_0", [](World&, Attend& a) { a.ot.element_type = KVRT_TYPE_Q4_0; }},
        {"out->type -7", [](World&, Attend& a) { a.ot.type = bad_enum<kvrt_struct_type>(-7); }},
        {"a foreign struct chained on q", [](World&, Attend& a) { a.qt.next = &foreign; }},
        {"q host rows that wrap the address space", [](World&, Attend& a) { a.qt.host = top_of_memory(); }},
        {"q host offset UINT64_MAX - 3", [](World&, Attend& a) { a.qt.offset = kMax64 - 3; }},
        {"q head_stride UINT64_MAX - 3", [](World&, Attend& a) { a.qt.head_stride = kMax64 - 3; }},
        {"out host rows that wrap the address space", [](World&, Attend& a) { a.ot.host = const_cast<void*>(top_of_memory()); }},
        {"out host head_stride UINT64_MAX - 3", [](World&, Attend& a) { a.ot.head_stride = kMax64 - 3; }},
        {"out host rows overlap (head_stride 4)", [](World&, Attend& a) { a.ot.head_stride = 4; }},
        {"out with neither host nor buffer", [](World&, Attend& a) { a.ot.host = nullptr; }},
        {"q buffer offset UINT64_MAX - 3", [](World& wd, Attend& a) { a.qt = buffer_tensor(wd.buffer, kMax64 - 3); }},
        {"q buffer of another context", [](World& wd, Attend& a) { a.qt = buffer_tensor(wd.buffer_b, 0); }},
        {"out buffer offset UINT64_MAX - 3", [](World& wd, Attend& a) { a.ot = buffer_output(wd.buffer, kMax64 - 3); }},
        {"out buffer offset at the end", [](World& wd, Attend& a) { a.ot = buffer_output(wd.buffer, World::kBufferBytes); }},
        {"out buffer head_stride UINT64_MAX - 3", [](World& wd, Attend& a) {
             a.ot = buffer_output(wd.buffer, 0);
             a.ot.head_stride = kMax64 - 3;
         }},
        {"out buffer rows overlap (head_stride 4)", [](World& wd, Attend& a) {
             a.ot = buffer_output(wd.buffer, 0);
             a.ot.head_stride = 4;
         }},
        {"out buffer of another context", [](World& wd, Attend& a) { a.ot = buffer_output(wd.buffer_b, 0); }},
        {"out host with a stream", [](World& wd, Attend& a) { a.stream = wd.stream; }},
        {"params->type -7", [](World&, Attend& a) { a.params.type = bad_enum<kvrt_struct_type>(-7); }},
        {"a foreign struct chained on params", [](World&, Attend& a) { a.params.next = &foreign; }},
        {"params->flags 0x80", [](World&, Attend& a) { a.params.flags = 0x80; }},
        {"params->scale NaN", [](World&, Attend& a) { a.params.scale = NAN; }},
        {"params->softcap -1", [](World&, Attend& a) { a.params.softcap = -1.0f; }},
        {"params->softcap Inf", [](World&, Attend& a) { a.params.softcap = INFINITY; }},
        {"params->max_bias Inf", [](World&, Attend& a) { a.params.max_bias = INFINITY; }},
        {"params->sinks[1] NaN", [](World&, Attend& a) {
             static const float sinks[8] = {0.5f, NAN, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
             a.params.sinks = sinks;
         }},
    };
    for (const auto& [what, tamper] : bad_attention) {
        const auto t = tamper;
        r.push_back(err("kvrt_cache_attention", what, inv, B, [&w, t] {
            Attend a;
            t(w, a);
            if (!a.stream) return out(kvrt_cache_attention(w.cache, nullptr, a.layer, &a.batch, &a.qt, &a.ot, &a.params));
            return while_recording(a.stream, [&] {
                return out(kvrt_cache_attention(w.cache, a.stream, a.layer, &a.batch, &a.qt, &a.ot, &a.params));
            });
        }));
    }
    for (const auto& [what, buf] : {std::pair<std::string, kvrt_buffer>{"out buffer destroyed", w.dead_buffer},
                                    {"out buffer: a stream cast to a buffer", buffer_as_stream}}) {
        const kvrt_buffer b = buf;
        r.push_back(err("kvrt_cache_attention", what, hnd, N, [&w, b] {
            Attend a;
            const kvrt_output_ref ot = buffer_output(b, 0);
            return out(kvrt_cache_attention(w.cache, nullptr, 0, &a.batch, &a.qt, &ot, nullptr));
        }));
    }
    r.push_back(err("kvrt_cache_attention", "queries NULL", inv, C, [&w] {
        Attend a;
        return out(kvrt_cache_attention(w.cache, nullptr, 0, nullptr, &a.qt, &a.ot, nullptr));
    }));
    r.push_back(err("kvrt_cache_attention", "q NULL", inv, C, [&w] {
        Attend a;
        return out(kvrt_cache_attention(w.cache, nullptr, 0, &a.batch, nullptr, &a.ot, nullptr));
    }));
    r.push_back(err("kvrt_cache_attention", "out NULL", inv, C, [&w] {
        Attend a;
        return out(kvrt_cache_attention(w.cache, nullptr, 0, &a.batch, &a.qt, nullptr, nullptr));
    }));

    // The static layout's queries.
    const auto window = [&w](int32_t seq, int32_t layer, uint32_t head, int32_t array, kvrt_cache c) {
        return [&w, seq, layer, head, array, c] {
            kvrt_static_window win = KVRT_STATIC_WINDOW_INIT;
            return out(kvrt_cache_static_get_window(c ? c : w.static_cache, seq, layer, head, bad_enum<kvrt_kv_array>(array), &win));
        };
    };
    for (int32_t a : {-7, 0, 3, 12345, kMin32})
        r.push_back(err("kvrt_cache_static_get_window", "array " + std::to_string(a), inv, S, window(0, 0, 0, a, nullptr)));
    for (int32_t l : {kMin32, -1, 1, kMax32})
        r.push_back(err("kvrt_cache_static_get_window", "layer " + std::to_string(l), inv, S, window(0, l, 0, KVRT_KV_ARRAY_K, nullptr)));
    for (int32_t s : {kMin32, -1, 2, kMax32})
        r.push_back(err("kvrt_cache_static_get_window", "sequence " + std::to_string(s), inv, S, window(s, 0, 0, KVRT_KV_ARRAY_K, nullptr)));
    r.push_back(err("kvrt_cache_static_get_window", "kv_head UINT32_MAX", inv, S, window(0, 0, kMaxU32, KVRT_KV_ARRAY_K, nullptr)));
    r.push_back(err("kvrt_cache_static_get_window", "a cache of the cell layout", inv, C, window(0, 0, 0, KVRT_KV_ARRAY_K, w.cache)));
    r.push_back(err("kvrt_cache_static_get_window", "out NULL", inv, S,
                    [&w] { return out(kvrt_cache_static_get_window(w.static_cache, 0, 0, 0, KVRT_KV_ARRAY_K, nullptr)); }));
    r.push_back(err("kvrt_cache_static_get_window", "out->type -7", inv, S, [&w] {
        kvrt_static_window win = KVRT_STATIC_WINDOW_INIT;
        win.type = bad_enum<kvrt_struct_type>(-7);
        return out(kvrt_cache_static_get_window(w.static_cache, 0, 0, 0, KVRT_KV_ARRAY_K, &win));
    }));
    const auto mask = [&w](int32_t seq, int32_t type, uint64_t room, kvrt_cache c) {
        return [&w, seq, type, room, c] {
            float m[World::kStaticSeqLen];
            return out(kvrt_cache_static_get_mask(c ? c : w.static_cache, seq, bad_enum<kvrt_type>(type), m, room));
        };
    };
    for (int32_t t : {-7, 0, 12345, kMin32, static_cast<int32_t>(KVRT_TYPE_Q8_0)})
        r.push_back(err("kvrt_cache_static_get_mask", "element_type " + std::to_string(t), inv, S, mask(0, t, 32, nullptr)));
    for (int32_t s : {kMin32, -1, 2, kMax32})
        r.push_back(err("kvrt_cache_static_get_mask", "sequence " + std::to_string(s), inv, S, mask(s, KVRT_TYPE_F32, 32, nullptr)));
    for (uint64_t room : {uint64_t{0}, uint64_t{4}, uint64_t{31}})
        r.push_back(err("kvrt_cache_static_get_mask", "out_bytes " + std::to_string(room) + " (8 floats)", inv, S,
                        mask(0, KVRT_TYPE_F32, room, nullptr)));
    r.push_back(err("kvrt_cache_static_get_mask", "a cache of the cell layout", inv, C, mask(0, KVRT_TYPE_F32, 32, w.cache)));
    r.push_back(err("kvrt_cache_static_get_mask", "out NULL", inv, S,
                    [&w] { return out(kvrt_cache_static_get_mask(w.static_cache, 0, KVRT_TYPE_F32, nullptr, 32)); }));
    // Graph masks: a desc changed by `edit`, S = 8 entries per new row.
    const auto graph = [&w](std::function<void(kvrt_static_mask_desc*)> edit, int32_t seq, uint64_t room, kvrt_cache c) {
        return [&w, edit, seq, room, c] {
            kvrt_static_mask_desc d = KVRT_STATIC_MASK_DESC_INIT;
            edit(&d);
            float m[World::kStaticSeqLen * World::kStaticSeqLen];
            return out(kvrt_cache_static_get_graph_mask(c ? c : w.static_cache, seq, &d, m, room));
        };
    };
    const uint64_t one_row = World::kStaticSeqLen * 4;
    const auto keep = [](kvrt_static_mask_desc*) {};
    r.push_back(err("kvrt_cache_static_get_graph_mask", "desc->type of another struct", inv, S,
                    graph([](kvrt_static_mask_desc* d) { d->type = KVRT_STRUCT_TYPE_STATIC_WINDOW; }, 0, one_row, nullptr)));
    r.push_back(err("kvrt_cache_static_get_graph_mask", "desc->next a struct of another kind", inv, S,
                    graph([](kvrt_static_mask_desc* d) {
                        static const kvrt_static_stats other = KVRT_STATIC_STATS_INIT;
                        d->next = &other;
                    }, 0, one_row, nullptr)));
    for (int32_t f : {-1, 3, 12345, kMax32})
        r.push_back(err("kvrt_cache_static_get_graph_mask", "desc->format " + std::to_string(f), inv, S,
                        graph([f](kvrt_static_mask_desc* d) { d->format = bad_enum<kvrt_mask_format>(f); }, 0, one_row,
                              nullptr)));
    for (uint32_t flags : {0x2u, 0x80000000u, 0x3u})
        r.push_back(err("kvrt_cache_static_get_graph_mask", "desc->flags " + std::to_string(flags), inv, S,
                        graph([flags](kvrt_static_mask_desc* d) {
                            d->flags = flags;
                            d->masked_value = -1.0f;
                        }, 0, one_row, nullptr)));
    r.push_back(err("kvrt_cache_static_get_graph_mask", "KVRT_MASK_FINITE with KVRT_MASK_U16", inv, S,
                    graph([](kvrt_static_mask_desc* d) {
                        d->format = KVRT_MASK_U16;
                        d->flags = KVRT_MASK_FINITE;
                        d->masked_value = -1.0f;
                    }, 0, one_row, nullptr)));
    for (float v : {0.0f, 1.0f, std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::infinity()})
        r.push_back(err("kvrt_cache_static_get_graph_mask", "KVRT_MASK_FINITE with masked_value " + std::to_string(v),
                        inv, S, graph([v](kvrt_static_mask_desc* d) {
                            d->flags = KVRT_MASK_FINITE;
                            d->masked_value = v;
                        }, 0, one_row, nullptr)));
    for (uint32_t n : {World::kStaticSeqLen, World::kStaticSeqLen + 1, 0xFFFFFFFFu})
        r.push_back(err("kvrt_cache_static_get_graph_mask", "desc->n_new " + std::to_string(n) + " (S = 8)", inv, S,
                        graph([n](kvrt_static_mask_desc* d) { d->n_new = n; }, 0,
                              World::kStaticSeqLen * World::kStaticSeqLen * 4, nullptr)));
    for (int32_t s : {kMin32, -1, 2, kMax32})
        r.push_back(err("kvrt_cache_static_get_graph_mask", "sequence " + std::to_string(s), inv, S,
                        graph(keep, s, one_row, nullptr)));
    for (uint64_t room : {uint64_t{0}, uint64_t{31}})
        r.push_back(err("kvrt_cache_static_get_graph_mask", "out_bytes " + std::to_string(room) + " (8 floats)", inv, S,
                        graph(keep, 0, room, nullptr)));
    r.push_back(err("kvrt_cache_static_get_graph_mask", "out_bytes 63 for 2 rows of 8 floats", inv, S,
                    graph([](kvrt_static_mask_desc* d) { d->n_new = 2; }, 0, 63, nullptr)));
    r.push_back(err("kvrt_cache_static_get_graph_mask", "out_bytes 15 for 8 uint16 entries", inv, S,
                    graph([](kvrt_static_mask_desc* d) { d->format = KVRT_MASK_U16; }, 0, 15, nullptr)));
    r.push_back(err("kvrt_cache_static_get_graph_mask", "a cache of the cell layout", inv, C,
                    graph(keep, 0, one_row, w.cache)));
    for (int32_t s : {kMin32, -1, 2, kMax32})
        r.push_back(err("kvrt_cache_static_make_room", "sequence " + std::to_string(s), inv, S,
                        [&w, s] { return out(kvrt_cache_static_make_room(w.static_cache, s, 1)); }));
    for (uint32_t n : {0u, 0xFFFFFFFFu})
        r.push_back(err("kvrt_cache_static_make_room", "n_rows " + std::to_string(n), inv, S,
                        [&w, n] { return out(kvrt_cache_static_make_room(w.static_cache, 0, n)); }));
    r.push_back(err("kvrt_cache_static_make_room", "a cache of the cell layout", inv, C,
                    [&w] { return out(kvrt_cache_static_make_room(w.cache, 0, 1)); }));
    r.push_back(err("kvrt_cache_static_get_graph_mask", "out NULL", inv, S, [&w] {
        return out(kvrt_cache_static_get_graph_mask(w.static_cache, 0, nullptr, nullptr, 32));
    }));
    const auto stats = [&w](int32_t seq, kvrt_cache c, bool mistype) {
        return [&w, seq, c, mistype] {
            kvrt_static_stats st = KVRT_STATIC_STATS_INIT;
            if (mistype) st.type = bad_enum<kvrt_struct_type>(-7);
            return out(kvrt_cache_static_get_stats(c ? c : w.static_cache, seq, &st));
        };
    };
    for (int32_t s : {2, kMax32})
        r.push_back(err("kvrt_cache_static_get_stats", "sequence " + std::to_string(s), inv, S, stats(s, nullptr, false)));
    r.push_back(err("kvrt_cache_static_get_stats", "a cache of the cell layout", inv, C, stats(0, w.cache, false)));
    r.push_back(err("kvrt_cache_static_get_stats", "out->type -7", inv, S, stats(0, nullptr, true)));
    r.push_back(err("kvrt_cache_static_get_stats", "out NULL", inv, S,
                    [&w] { return out(kvrt_cache_static_get_stats(w.static_cache, 0, nullptr)); }));

    // The paged calls on a cache of the cell layout (the paged layout's own
    // bad input: tests/gpu/test_paged_layout.cpp).
    const kvrt_result uns = KVRT_ERROR_UNSUPPORTED;
    const std::string cell_layout = "a cache of the cell layout";
    r.push_back(err("kvrt_cache_paged_admit", cell_layout, uns, C, [&w] {
        const int32_t ids[2] = {1, 2}, pos[2] = {20, 21};
        uint32_t n = 0;
        return out(kvrt_cache_paged_admit(w.cache, 2, 2, ids, pos, 0, &n, nullptr));
    }));
    r.push_back(err("kvrt_cache_paged_append", cell_layout, uns, C, [&w] {
        const int32_t pos = 30;
        return out(kvrt_cache_paged_append(w.cache, nullptr, 0, 1, nullptr, &pos, nullptr));
    }));
    r.push_back(err("kvrt_cache_paged_fork", cell_layout, uns, C, [&w] { return out(kvrt_cache_paged_fork(w.cache, 0, 3)); }));
    r.push_back(err("kvrt_cache_paged_set_sharing", cell_layout, uns, C,
                    [&w] { return out(kvrt_cache_paged_set_sharing(w.cache, 0, 0)); }));
    r.push_back(err("kvrt_cache_paged_clear_registry", cell_layout, uns, C,
                    [&w] { return out(kvrt_cache_paged_clear_registry(w.cache)); }));
    r.push_back(err("kvrt_cache_paged_get_cells", cell_layout, uns, C, [&w] {
        uint32_t cells[8], n = 0;
        return out(kvrt_cache_paged_get_cells(w.cache, 0, 0, 8, cells, &n));
    }));
    r.push_back(err("kvrt_cache_paged_get_stats", cell_layout, uns, C, [&w] {
        kvrt_paged_stats st = KVRT_PAGED_STATS_INIT;
        return out(kvrt_cache_paged_get_stats(w.cache, &st));
    }));
    r.push_back(err("kvrt_cache_paged_get_stats", "out NULL", inv, C,
                    [&w] { return out(kvrt_cache_paged_get_stats(w.cache, nullptr)); }));

    // kvrt_cache_get_info and kvrt_cache_seq_transfer.
    r.push_back(err("kvrt_cache_get_info", "info NULL", inv, C, [&w] { return out(kvrt_cache_get_info(w.cache, nullptr)); }));
    r.push_back(err("kvrt_cache_get_info", "info->type -7", inv, N, [&w] {
        kvrt_cache_info i = KVRT_CACHE_INFO_INIT;
        i.type = bad_enum<kvrt_struct_type>(-7);
        return out(kvrt_cache_get_info(w.cache, &i));
    }));
    r.push_back(err("kvrt_cache_get_info", "info->type CACHE_ESTIMATE (another struct)", inv, C, [&w] {
        kvrt_cache_info i = KVRT_CACHE_INFO_INIT;
        i.type = KVRT_STRUCT_TYPE_CACHE_ESTIMATE;
        return out(kvrt_cache_get_info(w.cache, &i));
    }));
    r.push_back(err("kvrt_cache_get_info", "a foreign struct chained", inv, N, [&w] {
        kvrt_cache_info i = KVRT_CACHE_INFO_INIT;
        i.next = &foreign;
        return out(kvrt_cache_get_info(w.cache, &i));
    }));
    struct Transfer {
        const char* what;
        int32_t src_seq, dst_seq;
        bool to_other, to_static;
    };
    for (const Transfer& t : {Transfer{"the same sequence of the same cache", 0, 0, false, false},
                              Transfer{"src sequence INT32_MIN", kMin32, 3, false, false},
                              Transfer{"src sequence 4", 4, 3, false, false},
                              Transfer{"dst sequence INT32_MAX", 0, kMax32, false, false},
                              Transfer{"dst sequence -1", 0, -1, false, false},
                              Transfer{"dst sequence in use", 0, 1, false, false},
                              Transfer{"dst cache of another context", 0, 0, true, false},
                              Transfer{"dst cache of another geometry", 0, 1, false, true}})
        r.push_back(err("kvrt_cache_seq_transfer", t.what, inv, t.to_static ? S : C, [&w, t] {
            uint32_t n = 99;
            const kvrt_cache dst = t.to_other ? w.cache_b : t.to_static ? w.static_cache : w.cache;
            Outcome o = out(kvrt_cache_seq_transfer(w.cache, t.src_seq, dst, t.dst_seq, &n));
            if (n != 0) o.r = KVRT_ERROR_INTERNAL;
            return o;
        }));
}

}  // namespace kvrt_test::bad_input
