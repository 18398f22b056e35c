// The struct rules of kvrt.h on every entry point that takes a struct, table
// driven: a struct of a type no kvrt defines chained on `next`, a known type
// the entry point does not accept there, and a type given twice are refused
// with KVRT_ERROR_INVALID_ARGUMENT and a message that names the type, also
// behind an accepted chained struct; a mistyped `type` is refused. Each row
// first makes the same call with its structs as their KVRT_*_INIT macros set
// them (plus the call's own fields), and that call must succeed: every
// refusal below is the rule's, not another check's.
#include "app_vulkan.hpp"
#include "memory_check.hpp"

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/random.hpp"

using namespace kvrt_test;

namespace {

// A value no struct type has: the type of an extension from a newer header.
constexpr int32_t kForeignType = 31249;

// A struct of that type, as such an extension would be.
struct Foreign {
    kvrt_struct_type type = static_cast<kvrt_struct_type>(kForeignType);
    const void* next = nullptr;
    uint64_t payload = 0;
};

// How a case changes the struct a row is about.
struct Tamper {
    const void* next = nullptr;  // set as the `next` of the row's chain's last struct
    bool mistype = false;        // the row's struct gets another struct's type
};

kvrt_struct_type wrong_type(kvrt_struct_type t) {
    return t == KVRT_STRUCT_TYPE_BATCH ? KVRT_STRUCT_TYPE_TENSOR_REF : KVRT_STRUCT_TYPE_BATCH;
}

// Applies `t` to a struct whose chain ends at itself.
template <class S>
void apply(const Tamper& t, S* s) {
    s->next = t.next;
    if (t.mistype) s->type = wrong_type(s->type);
}

// Applies `t` to a struct `head` whose chain ends at `tail`.
template <class H, class T>
void apply(const Tamper& t, H* head, T* tail) {
    tail->next = t.next;
    if (t.mistype) head->type = wrong_type(head->type);
}

// A call's result and its detail message, taken at once (the next kvrt call,
// a destroy included, may replace the message).
struct Outcome {
    kvrt_result r = KVRT_SUCCESS;
    std::string message;
};

Outcome outcome(kvrt_result r) { return {r, kvrt_last_error_message()}; }

// One struct argument of one entry point.
struct Row {
    std::string what;                        // "kvrt_buffer_create: desc"
    kvrt_struct_type type;                   // the struct's own type
    kvrt_struct_type accepted;               // a type its chain accepts, or UNDEFINED for none
    std::function<Outcome(const Tamper&)> call;
};

// Fresh structs of the types some chains accept, as their INIT macros set them.
struct Accepted {
    kvrt_rope_desc rope = KVRT_ROPE_DESC_INIT;
    kvrt_pipeline_cache_desc pipeline_cache = KVRT_PIPELINE_CACHE_DESC_INIT;

    // The struct of type `t`, its `next` set to `next`.
    const void* get(kvrt_struct_type t, const void* next) {
        rope = kvrt_rope_desc KVRT_ROPE_DESC_INIT;
        pipeline_cache = kvrt_pipeline_cache_desc KVRT_PIPELINE_CACHE_DESC_INIT;
        rope.next = pipeline_cache.next = next;
        if (t == KVRT_STRUCT_TYPE_ROPE_DESC) return &rope;
        REQUIRE(t == KVRT_STRUCT_TYPE_PIPELINE_CACHE_DESC);
        return &pipeline_cache;
    }
};

bool names(const std::string& message, const std::string& needle) { return message.find(needle) != std::string::npos; }

// Runs every case of `row`.
void check_row(const Row& row) {
    INFO(row.what);
    {
        const Outcome o = row.call(Tamper{});
        INFO("as the INIT macros make it: " << kvrt_result_string(o.r) << " \"" << o.message << "\"");
        REQUIRE(o.r == KVRT_SUCCESS);
    }
    auto refused = [&](const char* what, const Tamper& t, const std::string& needle) {
        INFO(what);
        const Outcome o = row.call(t);
        INFO(kvrt_result_string(o.r) << " \"" << o.message << "\"");
        CHECK(o.r == KVRT_ERROR_INVALID_ARGUMENT);
        CHECK(!o.message.empty());
        if (!needle.empty()) CHECK(names(o.message, needle));
    };
    Foreign foreign, foreign2;
    refused("an unknown struct type on next", Tamper{&foreign, false}, std::to_string(kForeignType));
    foreign.next = &foreign2;
    refused("an unknown struct type, twice", Tamper{&foreign, false}, std::to_string(kForeignType));
    foreign.next = nullptr;
    // An output struct no chain accepts; kvrt_buffer_desc where the row is
    // about kvrt_context_stats itself.
    kvrt_context_stats stats = KVRT_CONTEXT_STATS_INIT;
    kvrt_buffer_desc buffer_desc = KVRT_BUFFER_DESC_INIT;
    if (row.type == KVRT_STRUCT_TYPE_CONTEXT_STATS)
        refused("a known struct not accepted here", Tamper{&buffer_desc, false}, "kvrt_buffer_desc");
    else
        refused("a known struct not accepted here", Tamper{&stats, false}, "kvrt_context_stats");
    refused("a mistyped struct", Tamper{nullptr, true}, "");
    if (row.accepted != KVRT_STRUCT_TYPE_UNDEFINED) {
        Accepted a, b;
        const char* name = row.accepted == KVRT_STRUCT_TYPE_ROPE_DESC ? "kvrt_rope_desc" : "kvrt_pipeline_cache_desc";
        refused("an accepted struct given twice", Tamper{a.get(row.accepted, b.get(row.accepted, nullptr)), false},
                name);
        refused("an unknown struct behind an accepted one", Tamper{a.get(row.accepted, &foreign), false},
                std::to_string(kForeignType));
        // And the accepted struct alone is accepted.
        const Outcome o = row.call(Tamper{a.get(row.accepted, nullptr), false});
        INFO("one accepted struct: \"" << o.message << "\"");
        CHECK(o.r == KVRT_SUCCESS);
    }
}

constexpr uint32_t kLayers = 2, kHeads = 4, kKvHeads = 2, kDim = 32;
constexpr uint32_t kRow = kKvHeads * kDim, kQueryRow = kHeads * kDim;
constexpr uint64_t kWaitNs = 120ull * 1000 * 1000 * 1000;

kvrt_cache_desc cell_desc() {
    kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
    d.n_layers = kLayers;
    d.n_heads = kHeads;
    d.n_kv_heads = kKvHeads;
    d.head_dim_k = kDim;
    d.capacity = 1024;
    d.max_seqs = 4;
    return d;
}

}  // namespace

TEST_CASE("every entry point refuses unknown, unaccepted and repeated chained structs, naming them", "[abi]") {
    GpuContext ctx;
    std::vector<Row> rows;

    // Devices and contexts.
    rows.push_back({"kvrt_enumerate_devices: infos[0]", KVRT_STRUCT_TYPE_DEVICE_INFO, KVRT_STRUCT_TYPE_UNDEFINED,
                    [](const Tamper& t) {
                        uint32_t n = 0;
                        REQUIRE(kvrt_enumerate_devices(nullptr, &n) == KVRT_SUCCESS);
                        std::vector<kvrt_device_info> infos(n, kvrt_device_info KVRT_DEVICE_INFO_INIT);
                        apply(t, &infos[0]);
                        return outcome(kvrt_enumerate_devices(infos.data(), &n));
                    }});
    rows.push_back({"kvrt_context_create: desc", KVRT_STRUCT_TYPE_CONTEXT_DESC, KVRT_STRUCT_TYPE_PIPELINE_CACHE_DESC,
                    [](const Tamper& t) {
                        kvrt_context_desc d = KVRT_CONTEXT_DESC_INIT;
                        apply(t, &d);
                        kvrt_context c = nullptr;
                        const Outcome r = outcome(kvrt_context_create(&d, &c));
                        kvrt_context_destroy(c);
                        return r;
                    }});
    rows.push_back({"kvrt_context_get_device_info: info", KVRT_STRUCT_TYPE_DEVICE_INFO, KVRT_STRUCT_TYPE_UNDEFINED,
                    [&](const Tamper& t) {
                        kvrt_device_info info = KVRT_DEVICE_INFO_INIT;
                        apply(t, &info);
                        return outcome(kvrt_context_get_device_info(ctx, &info));
                    }});
    rows.push_back({"kvrt_context_get_stats: stats", KVRT_STRUCT_TYPE_CONTEXT_STATS, KVRT_STRUCT_TYPE_UNDEFINED,
                    [&](const Tamper& t) {
                        kvrt_context_stats stats = KVRT_CONTEXT_STATS_INIT;
                        apply(t, &stats);
                        return outcome(kvrt_context_get_stats(ctx, &stats));
                    }});

    // Buffers and streams.
    rows.push_back({"kvrt_buffer_create: desc", KVRT_STRUCT_TYPE_BUFFER_DESC, KVRT_STRUCT_TYPE_UNDEFINED,
                    [&](const Tamper& t) {
                        kvrt_buffer_desc d = KVRT_BUFFER_DESC_INIT;
                        d.size = 256;
                        apply(t, &d);
                        kvrt_buffer b = nullptr;
                        const Outcome r = outcome(kvrt_buffer_create(ctx, &d, &b));
                        kvrt_buffer_destroy(b);
                        return r;
                    }});
    rows.push_back({"kvrt_stream_create: desc", KVRT_STRUCT_TYPE_STREAM_DESC, KVRT_STRUCT_TYPE_UNDEFINED,
                    [&](const Tamper& t) {
                        kvrt_stream_desc d = KVRT_STREAM_DESC_INIT;
                        apply(t, &d);
                        kvrt_stream s = nullptr;
                        const Outcome r = outcome(kvrt_stream_create(ctx, &d, &s));
                        kvrt_stream_destroy(s);
                        return r;
                    }});
    Buffer buffer(ctx, 1 << 16);
    std::optional<Stream> timed;
    if (timestamps_or_refused(ctx)) {
        timed.emplace(ctx, KVRT_STREAM_TIMESTAMPS);
        run_stream(*timed, [&] {
            KVRT_REQUIRE_OK(kvrt_cmd_fill(*timed, buffer, 0, 4096, 1));
            KVRT_REQUIRE_OK(kvrt_cmd_fill(*timed, buffer, 4096, 4096, 2));
        });
    }
    for (const size_t entry : {size_t{0}, size_t{1}}) {
        if (!timed) break;
        rows.push_back({"kvrt_stream_get_timings: timings[" + std::to_string(entry) + "]", KVRT_STRUCT_TYPE_TIMING,
                        KVRT_STRUCT_TYPE_UNDEFINED, [&, entry](const Tamper& t) {
                            std::vector<kvrt_timing> timings(2, kvrt_timing KVRT_TIMING_INIT);
                            apply(t, &timings[entry]);
                            uint32_t n = 2;
                            return outcome(kvrt_stream_get_timings(*timed, timings.data(), &n));
                        }});
    }

    // Caches: descriptors and their estimates.
    rows.push_back({"kvrt_cache_create: desc", KVRT_STRUCT_TYPE_CACHE_DESC, KVRT_STRUCT_TYPE_ROPE_DESC,
                    [&](const Tamper& t) {
                        kvrt_cache_desc d = cell_desc();
                        apply(t, &d);
                        Cache c;
                        const Outcome r = outcome(kvrt_cache_create(ctx, &d, c.out()));
                        return r;
                    }});
    rows.push_back({"kvrt_cache_create: static layout desc", KVRT_STRUCT_TYPE_CACHE_DESC, KVRT_STRUCT_TYPE_ROPE_DESC,
                    [&](const Tamper& t) {
                        kvrt_static_layout_desc sl = KVRT_STATIC_LAYOUT_DESC_INIT;
                        sl.seq_len = 16;
                        kvrt_cache_desc d = cell_desc();
                        d.capacity = 0;
                        d.layout = KVRT_LAYOUT_STATIC;
                        d.next = &sl;
                        apply(t, &d, &sl);  // behind the static layout desc
                        Cache c;
                        const Outcome r = outcome(kvrt_cache_create(ctx, &d, c.out()));
                        return r;
                    }});
    rows.push_back({"kvrt_cache_create: paged layout desc", KVRT_STRUCT_TYPE_CACHE_DESC, KVRT_STRUCT_TYPE_ROPE_DESC,
                    [&](const Tamper& t) {
                        kvrt_paged_layout_desc pl = KVRT_PAGED_LAYOUT_DESC_INIT;
                        pl.block_size = 32;
                        kvrt_cache_desc d = cell_desc();
                        d.capacity = 256;
                        d.layout = KVRT_LAYOUT_PAGED;
                        d.next = &pl;
                        apply(t, &d, &pl);  // behind the paged layout desc
                        Cache c;
                        const Outcome r = outcome(kvrt_cache_create(ctx, &d, c.out()));
                        return r;
                    }});
    rows.push_back({"kvrt_cache_create: window layout desc", KVRT_STRUCT_TYPE_CACHE_DESC, KVRT_STRUCT_TYPE_ROPE_DESC,
                    [&](const Tamper& t) {
                        std::vector<uint32_t> windows(kLayers, 0);
                        windows[0] = 64;
                        kvrt_window_layout_desc wl = KVRT_WINDOW_LAYOUT_DESC_INIT;
                        kvrt_cache_desc d = cell_desc();
                        d.layer_windows = windows.data();
                        d.next = &wl;
                        apply(t, &d, &wl);  // behind the window layout desc
                        Cache c;
                        const Outcome r = outcome(kvrt_cache_create(ctx, &d, c.out()));
                        return r;
                    }});
    rows.push_back({"kvrt_cache_estimate_size: desc (scales chained)", KVRT_STRUCT_TYPE_CACHE_DESC,
                    KVRT_STRUCT_TYPE_ROPE_DESC, [&](const Tamper& t) {
                        const float scale = 0.5f;
                        const int32_t zero_point = 128;
                        kvrt_static_scales_desc sc = KVRT_STATIC_SCALES_DESC_INIT;
                        sc.count = 1;
                        sc.k_scales = sc.v_scales = &scale;
                        sc.k_zero_points = sc.v_zero_points = &zero_point;
                        kvrt_cache_desc d = cell_desc();
                        d.type_k = d.type_v = KVRT_TYPE_U8_STATIC;
                        d.next = &sc;
                        apply(t, &d, &sc);  // behind the scales desc
                        kvrt_cache_estimate e = KVRT_CACHE_ESTIMATE_INIT;
                        return outcome(kvrt_cache_estimate_size(ctx, &d, &e));
                    }});
    rows.push_back({"kvrt_cache_estimate_size: out", KVRT_STRUCT_TYPE_CACHE_ESTIMATE, KVRT_STRUCT_TYPE_UNDEFINED,
                    [&](const Tamper& t) {
                        const kvrt_cache_desc d = cell_desc();
                        kvrt_cache_estimate e = KVRT_CACHE_ESTIMATE_INIT;
                        apply(t, &e);
                        return outcome(kvrt_cache_estimate_size(nullptr, &d, &e));
                    }});

    // A cell cache with tokens 0..15 of sequence 0 and two placed cells.
    Cache cache;
    {
        const kvrt_cache_desc d = cell_desc();
        KVRT_REQUIRE_OK(kvrt_cache_create(ctx, &d, cache.out()));
    }
    std::vector<float> rows_f32(size_t{kLayers} * 16 * kQueryRow, 0.25f), out(16 * kQueryRow);
    int32_t next_pos = 0;
    std::vector<int32_t> seq0(16, 0);
    std::vector<int32_t> first16(16);
    for (int32_t i = 0; i < 16; ++i) first16[static_cast<size_t>(i)] = i;
    {
        const kvrt_batch b = make_batch(16, first16.data(), seq0.data());
        const kvrt_tensor_ref k = host_tensor(rows_f32.data());
        KVRT_REQUIRE_OK(kvrt_cache_store(cache, nullptr, &b, -1, &k, &k, nullptr));
        next_pos = 16;
    }
    rows.push_back({"kvrt_cache_get_info: info", KVRT_STRUCT_TYPE_CACHE_INFO, KVRT_STRUCT_TYPE_UNDEFINED,
                    [&](const Tamper& t) {
                        kvrt_cache_info info = KVRT_CACHE_INFO_INIT;
                        apply(t, &info);
                        return outcome(kvrt_cache_get_info(cache, &info));
                    }});
    // Store, place and write: a new position each time (only successful calls use it).
    enum class Arg { Batch, K, V };
    for (const Arg arg : {Arg::Batch, Arg::K, Arg::V}) {
        const char* name = arg == Arg::Batch ? "batch" : arg == Arg::K ? "k" : "v";
        rows.push_back({std::string("kvrt_cache_store: ") + name,
                        arg == Arg::Batch ? KVRT_STRUCT_TYPE_BATCH : KVRT_STRUCT_TYPE_TENSOR_REF,
                        KVRT_STRUCT_TYPE_UNDEFINED, [&, arg](const Tamper& t) {
                            const int32_t pos = next_pos, seq = 0;
                            kvrt_batch b = make_batch(1, &pos, &seq);
                            kvrt_tensor_ref k = host_tensor(rows_f32.data()), v = k;
                            if (arg == Arg::Batch) apply(t, &b);
                            if (arg == Arg::K) apply(t, &k);
                            if (arg == Arg::V) apply(t, &v);
                            const Outcome r = outcome(kvrt_cache_store(cache, nullptr, &b, -1, &k, &v, nullptr));
                            if (r.r == KVRT_SUCCESS) ++next_pos;
                            return r;
                        }});
    }
    rows.push_back({"kvrt_cache_place: batch", KVRT_STRUCT_TYPE_BATCH, KVRT_STRUCT_TYPE_UNDEFINED,
                    [&](const Tamper& t) {
                        const int32_t pos = next_pos, seq = 1;
                        kvrt_batch b = make_batch(1, &pos, &seq);
                        apply(t, &b);
                        const Outcome r = outcome(kvrt_cache_place(cache, &b, nullptr));
                        if (r.r == KVRT_SUCCESS) ++next_pos;
                        return r;
                    }});
    uint32_t placed[2] = {};
    {
        const int32_t pos[2] = {1000, 1001}, seq[2] = {2, 2};
        const kvrt_batch b = make_batch(2, pos, seq);
        KVRT_REQUIRE_OK(kvrt_cache_place(cache, &b, placed));
    }
    for (const Arg arg : {Arg::K, Arg::V}) {
        rows.push_back({std::string("kvrt_cache_write: ") + (arg == Arg::K ? "k" : "v"), KVRT_STRUCT_TYPE_TENSOR_REF,
                        KVRT_STRUCT_TYPE_UNDEFINED, [&, arg](const Tamper& t) {
                            kvrt_tensor_ref k = host_tensor(rows_f32.data()), v = k;
                            apply(t, arg == Arg::K ? &k : &v);
                            return outcome(kvrt_cache_write(cache, nullptr, 2, placed, -1, &k, &v));
                        }});
    }
    // Attention: queries, q, out and params.
    enum class AttnArg { Queries, Q, Out, Params };
    for (const AttnArg arg : {AttnArg::Queries, AttnArg::Q, AttnArg::Out, AttnArg::Params}) {
        static const char* const names[] = {"queries", "q", "out", "params"};
        static const kvrt_struct_type types[] = {KVRT_STRUCT_TYPE_BATCH, KVRT_STRUCT_TYPE_TENSOR_REF,
                                                 KVRT_STRUCT_TYPE_OUTPUT_REF, KVRT_STRUCT_TYPE_ATTENTION_PARAMS};
        const size_t i = static_cast<size_t>(arg);
        rows.push_back({std::string("kvrt_cache_attention: ") + names[i], types[i], KVRT_STRUCT_TYPE_UNDEFINED,
                        [&, arg](const Tamper& t) {
                            const int32_t pos = 15, seq = 0;
                            kvrt_batch queries = make_batch(1, &pos, &seq);
                            kvrt_tensor_ref q = host_tensor(rows_f32.data());
                            kvrt_output_ref o = host_output(out.data());
                            kvrt_attention_params params = KVRT_ATTENTION_PARAMS_INIT;
                            if (arg == AttnArg::Queries) apply(t, &queries);
                            if (arg == AttnArg::Q) apply(t, &q);
                            if (arg == AttnArg::Out) apply(t, &o);
                            if (arg == AttnArg::Params) apply(t, &params);
                            return outcome(kvrt_cache_attention(cache, nullptr, 1, &queries, &q, &o, &params));
                        }});
    }

    // The static layout's output structs.
    Cache static_cache;
    {
        kvrt_static_layout_desc sl = KVRT_STATIC_LAYOUT_DESC_INIT;
        sl.seq_len = 16;
        kvrt_cache_desc d = cell_desc();
        d.capacity = 0;
        d.layout = KVRT_LAYOUT_STATIC;
        d.next = &sl;
        KVRT_REQUIRE_OK(kvrt_cache_create(ctx, &d, static_cache.out()));
        const kvrt_batch b = make_batch(4, first16.data(), seq0.data());
        const kvrt_tensor_ref k = host_tensor(rows_f32.data());
        KVRT_REQUIRE_OK(kvrt_cache_store(static_cache, nullptr, &b, -1, &k, &k, nullptr));
    }
    rows.push_back({"kvrt_cache_static_get_window: out", KVRT_STRUCT_TYPE_STATIC_WINDOW, KVRT_STRUCT_TYPE_UNDEFINED,
                    [&](const Tamper& t) {
                        kvrt_static_window w = KVRT_STATIC_WINDOW_INIT;
                        apply(t, &w);
                        return outcome(kvrt_cache_static_get_window(static_cache, 0, 1, 1, KVRT_KV_ARRAY_V, &w));
                    }});
    rows.push_back({"kvrt_cache_static_get_stats: out", KVRT_STRUCT_TYPE_STATIC_STATS, KVRT_STRUCT_TYPE_UNDEFINED,
                    [&](const Tamper& t) {
                        kvrt_static_stats st = KVRT_STATIC_STATS_INIT;
                        apply(t, &st);
                        return outcome(kvrt_cache_static_get_stats(static_cache, -1, &st));
                    }});

    // The paged layout's output struct.
    Cache paged_cache;
    {
        kvrt_cache_desc d = cell_desc();
        d.capacity = 64;
        d.layout = KVRT_LAYOUT_PAGED;
        KVRT_REQUIRE_OK(kvrt_cache_create(ctx, &d, paged_cache.out()));
    }
    rows.push_back({"kvrt_cache_paged_get_stats: out", KVRT_STRUCT_TYPE_PAGED_STATS, KVRT_STRUCT_TYPE_UNDEFINED,
                    [&](const Tamper& t) {
                        kvrt_paged_stats st = KVRT_PAGED_STATS_INIT;
                        apply(t, &st);
                        return outcome(kvrt_cache_paged_get_stats(paged_cache, &st));
                    }});

    // The fixed-capacity memory.
    const Geometry g = shape(2, 2, 16, 8, 8, 2, 0, true);
    enum class DescArg { Desc, Keys, Values };
    for (const DescArg arg : {DescArg::Desc, DescArg::Keys, DescArg::Values}) {
        static const char* const names[] = {"desc", "desc->keys", "desc->values"};
        const size_t i = static_cast<size_t>(arg);
        const kvrt_struct_type type = arg == DescArg::Desc ? KVRT_STRUCT_TYPE_MEMORY_DESC : KVRT_STRUCT_TYPE_MEMORY_INIT;
        auto tamper = [arg](const Tamper& t, MemoryDesc* d) {
            if (arg == DescArg::Desc) apply(t, &d->desc);
            if (arg == DescArg::Keys) apply(t, &d->keys);
            if (arg == DescArg::Values) apply(t, &d->values);
        };
        rows.push_back({std::string("kvrt_memory_create: ") + names[i], type, KVRT_STRUCT_TYPE_UNDEFINED,
                        [&, tamper](const Tamper& t) {
                            MemoryDesc d(g);
                            tamper(t, &d);
                            kvrt_memory m = nullptr;
                            const Outcome r = outcome(kvrt_memory_create(ctx, &d.desc, &m));
                            kvrt_memory_destroy(m);
                            return r;
                        }});
        rows.push_back({std::string("kvrt_memory_estimate_size: ") + names[i], type, KVRT_STRUCT_TYPE_UNDEFINED,
                        [&, tamper](const Tamper& t) {
                            MemoryDesc d(g);
                            tamper(t, &d);
                            kvrt_memory_estimate e = KVRT_MEMORY_ESTIMATE_INIT;
                            return outcome(kvrt_memory_estimate_size(nullptr, &d.desc, &e));
                        }});
    }
    rows.push_back({"kvrt_memory_estimate_size: out", KVRT_STRUCT_TYPE_MEMORY_ESTIMATE, KVRT_STRUCT_TYPE_UNDEFINED,
                    [&](const Tamper& t) {
                        const MemoryDesc d(g);
                        kvrt_memory_estimate e = KVRT_MEMORY_ESTIMATE_INIT;
                        apply(t, &e);
                        return outcome(kvrt_memory_estimate_size(ctx, &d.desc, &e));
                    }});
    Memory memory(ctx, g);
    Rng rng(3);
    const Batch tokens = random_batch(g, 3, -1, rng, 2);
    std::vector<float> reads(size_t{g.layers} * tokens.n * g.heads * g.d);
    enum class MemArg { Batch, Wq, Wv, Q, Out };
    const struct {
        Op op;
        const char* name;
        std::vector<MemArg> args;  // the structs the call reads
    } memory_calls[] = {
        {Op::Update, "kvrt_memory_update", {MemArg::Batch, MemArg::Wq, MemArg::Wv}},
        {Op::Read, "kvrt_memory_read", {MemArg::Batch, MemArg::Q, MemArg::Out}},
        {Op::UpdateRead, "kvrt_memory_update_read", {MemArg::Batch, MemArg::Wq, MemArg::Wv, MemArg::Q, MemArg::Out}},
    };
    for (const auto& mc : memory_calls) {
        for (const MemArg arg : mc.args) {
            static const char* const names[] = {"batch", "wq", "wv", "q", "out"};
            const kvrt_struct_type type = arg == MemArg::Batch ? KVRT_STRUCT_TYPE_MEMORY_BATCH
                                          : arg == MemArg::Out ? KVRT_STRUCT_TYPE_OUTPUT_REF
                                                               : KVRT_STRUCT_TYPE_TENSOR_REF;
            const Op op = mc.op;
            rows.push_back({std::string(mc.name) + ": " + names[static_cast<size_t>(arg)], type,
                            KVRT_STRUCT_TYPE_UNDEFINED, [&, op, arg](const Tamper& t) {
                                MemoryBatch b(tokens, &reads);
                                if (arg == MemArg::Batch) apply(t, &b.mb);
                                if (arg == MemArg::Wq) apply(t, &b.wq);
                                if (arg == MemArg::Wv) apply(t, &b.wv);
                                if (arg == MemArg::Q) apply(t, &b.q);
                                if (arg == MemArg::Out) apply(t, &b.out);
                                return outcome(call(op, memory, nullptr, b.get()));
                            }});
        }
    }

    // Ordering with the application's work: the submission's semaphores.
    Stream stream(ctx);
    rows.push_back({"kvrt_stream_submit_vulkan: desc", KVRT_STRUCT_TYPE_VULKAN_SUBMIT_DESC, KVRT_STRUCT_TYPE_UNDEFINED,
                    [&](const Tamper& t) {
                        kvrt_vulkan_submit_desc d = KVRT_VULKAN_SUBMIT_DESC_INIT;
                        apply(t, &d);
                        REQUIRE(kvrt_stream_begin(stream) == KVRT_SUCCESS);
                        REQUIRE(kvrt_cmd_fill(stream, buffer, 0, 256, 3) == KVRT_SUCCESS);
                        const Outcome o = outcome(kvrt_stream_submit_vulkan(stream, &d));
                        // A refused desc submitted nothing: submit the recording (or
                        // find it dropped) so the stream is idle again.
                        if (o.r == KVRT_SUCCESS || kvrt_stream_submit(stream) == KVRT_SUCCESS)
                            REQUIRE(kvrt_stream_wait(stream, kWaitNs) == KVRT_SUCCESS);
                        return o;
                    }});

    for (const Row& row : rows) check_row(row);
}

TEST_CASE("the interop entry points refuse unknown, unaccepted and repeated chained structs", "[abi][import]") {
    AppVulkan app;
    std::vector<Row> rows;
    rows.push_back({"kvrt_context_import_vulkan: vulkan", KVRT_STRUCT_TYPE_VULKAN_IMPORT_DESC, KVRT_STRUCT_TYPE_UNDEFINED,
                    [&](const Tamper& t) {
                        kvrt_vulkan_import_desc vk = app.import_desc();
                        apply(t, &vk);
                        kvrt_context c = nullptr;
                        const Outcome r = outcome(kvrt_context_import_vulkan(nullptr, &vk, &c));
                        kvrt_context_destroy(c);
                        return r;
                    }});
    rows.push_back({"kvrt_context_import_vulkan: desc", KVRT_STRUCT_TYPE_CONTEXT_DESC, KVRT_STRUCT_TYPE_UNDEFINED,
                    [&](const Tamper& t) {
                        const kvrt_vulkan_import_desc vk = app.import_desc();
                        kvrt_context_desc d = KVRT_CONTEXT_DESC_INIT;
                        apply(t, &d);
                        kvrt_context c = nullptr;
                        const Outcome r = outcome(kvrt_context_import_vulkan(&d, &vk, &c));
                        kvrt_context_destroy(c);
                        return r;
                    }});
    kvrt_context ctx = nullptr;
    {
        const kvrt_vulkan_import_desc vk = app.import_desc();
        KVRT_REQUIRE_OK(kvrt_context_import_vulkan(nullptr, &vk, &ctx));
    }
    {
        Buffer buffer(ctx, 4096);
        Stream stream(ctx);
        // Recording into the app's command buffer, ended with a fence.
        rows.push_back({"kvrt_stream_end_vulkan: completion", KVRT_STRUCT_TYPE_VULKAN_COMPLETION,
                        KVRT_STRUCT_TYPE_UNDEFINED, [&](const Tamper& t) {
                            AppCommands cmds(app);
                            REQUIRE(kvrt_stream_begin_vulkan(stream, cmds.buffer()) == KVRT_SUCCESS);
                            REQUIRE(kvrt_cmd_fill(stream, buffer, 0, 256, 4) == KVRT_SUCCESS);
                            kvrt_vulkan_completion c = KVRT_VULKAN_COMPLETION_INIT;
                            c.fence = cmds.fence();
                            apply(t, &c);
                            const Outcome o = outcome(kvrt_stream_end_vulkan(stream, &c));
                            if (o.r == KVRT_SUCCESS) {
                                REQUIRE(cmds.end_and_submit() == VK_SUCCESS);
                                REQUIRE(kvrt_stream_wait(stream, kWaitNs) == KVRT_SUCCESS);
                                return o;
                            }
                            // Refused: drop the recording (if the refusal did not).
                            const kvrt_result dropped = kvrt_stream_end_vulkan(stream, nullptr);
                            CHECK((dropped == KVRT_SUCCESS || dropped == KVRT_ERROR_INVALID_STATE));
                            return o;
                        }});
        for (const Row& row : rows) check_row(row);
    }
    kvrt_context_destroy(ctx);
    INFO(app.first_error);
    CHECK(app.validation_errors.load() == 0);
}
