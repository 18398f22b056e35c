// `kvrt bench store` and `kvrt bench compact`: the cache's row kernels.
#include <string>
#include <vector>

#include "bench.hpp"

namespace cli::bench {

namespace {

struct CacheShape {
    uint32_t cells = 4096, kv_heads = 8, head_dim = 128, layers = 1, tokens = 1;
    kvrt_type type = KVRT_TYPE_F16;
    std::string type_name = "f16";
};

bool parse_shape(const Args& args, CacheShape* s) {
    std::string error;
    uint64_t cells, heads, dim, layers, tokens;
    if (!args.u64("cells", 4096, &cells, &error) || !args.u64("kv-heads", 8, &heads, &error) ||
        !args.u64("head-dim", 128, &dim, &error) || !args.u64("layers", 1, &layers, &error) ||
        !args.u64("tokens", 1, &tokens, &error)) {
        std::fprintf(stderr, "error: %s\n", error.c_str());
        return false;
    }
    if (cells == 0 || cells > (1u << 24) || heads == 0 || heads > 256 || dim == 0 || dim > 1024 || layers == 0 ||
        layers > 256 || tokens == 0 || tokens > cells) {
        std::fprintf(stderr, "error: sizes out of range (need 0 < tokens <= cells)\n");
        return false;
    }
    s->cells = static_cast<uint32_t>(cells);
    s->kv_heads = static_cast<uint32_t>(heads);
    s->head_dim = static_cast<uint32_t>(dim);
    s->layers = static_cast<uint32_t>(layers);
    s->tokens = static_cast<uint32_t>(tokens);
    return type_option(args, "type", "f16", &s->type, &s->type_name);
}

kvrt_result make_cache(const Env& env, const CacheShape& s, kvrt_cache* out) {
    kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
    d.n_layers = s.layers;
    d.n_heads = s.kv_heads;
    d.n_kv_heads = s.kv_heads;
    d.head_dim_k = s.head_dim;
    d.capacity = s.cells;
    d.type_k = s.type;
    d.type_v = s.type;
    kvrt_static_scales_desc scales = KVRT_STATIC_SCALES_DESC_INIT;
    d.next = bench_scales(s.type, s.type, &scales);
    d.label = "bench cache";
    return kvrt_cache_create(env.ctx, &d, out);
}

// Places tokens 0..n-1 of sequence 0 (positions = index).
kvrt_result place_range(kvrt_cache cache, uint32_t first, uint32_t n, std::vector<uint32_t>* cells) {
    std::vector<int32_t> pos(n), seq(n, 0);
    for (uint32_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(first + i);
    kvrt_batch b = make_batch(n, pos.data(), seq.data());
    cells->resize(n);
    return kvrt_cache_place(cache, &b, cells->data());
}

int run_store(Env& env, const Args& args, std::vector<Row>* rows) {
    CacheShape s;
    if (!parse_shape(args, &s)) return 2;
    kvrt_cache cache = nullptr;
    kvrt_buffer k = nullptr, v = nullptr;
    std::vector<uint32_t> cells;
    const uint64_t row_bytes = uint64_t{s.kv_heads} * s.head_dim * 4;  // f32 input, as engines produce
    kvrt_buffer_desc bd = KVRT_BUFFER_DESC_INIT;
    bd.size = row_bytes * s.tokens;
    kvrt_result r = make_cache(env, s, &cache);
    if (r == KVRT_SUCCESS) r = kvrt_buffer_create(env.ctx, &bd, &k);
    if (r == KVRT_SUCCESS) r = kvrt_buffer_create(env.ctx, &bd, &v);
    // The tokens go to the middle of the cache, as in a running decode.
    if (r == KVRT_SUCCESS) r = place_range(cache, 0, s.cells / 2, &cells);
    if (r == KVRT_SUCCESS) r = place_range(cache, s.cells / 2, s.tokens, &cells);
    TimedStream stream(env.ctx);
    if (r == KVRT_SUCCESS) r = stream.result();
    Row row;
    row.name = "store";
    row.params = {{"type", s.type_name}, {"cells", std::to_string(s.cells)}, {"kv_heads", std::to_string(s.kv_heads)},
                  {"head_dim", std::to_string(s.head_dim)}, {"tokens", std::to_string(s.tokens)}};
    if (r == KVRT_SUCCESS) {
        const kvrt_tensor_ref kr = buffer_tensor(k, 0), vr = buffer_tensor(v, 0);
        r = measure(env, stream, [&] { return kvrt_cache_write(cache, stream, s.tokens, cells.data(), 0, &kr, &vr); },
                    "store", &row.m);
    }
    kvrt_cache_info info = KVRT_CACHE_INFO_INIT;
    if (r == KVRT_SUCCESS) r = kvrt_cache_get_info(cache, &info);
    kvrt_buffer_destroy(k);
    kvrt_buffer_destroy(v);
    kvrt_cache_destroy(cache);
    if (r != KVRT_SUCCESS) return report("bench store", r);
    // Bytes moved: the f32 input read plus the cache rows written, K and V.
    const double written = static_cast<double>(info.bytes_per_token) / s.layers * s.tokens;
    row.bytes = 2.0 * static_cast<double>(row_bytes) * s.tokens + written;
    row.extra = {{"us", row.m.median() * 1000.0}};
    rows->push_back(row);
    return 0;
}

int run_compact(Env& env, const Args& args, std::vector<Row>* rows) {
    CacheShape s;
    if (!parse_shape(args, &s)) return 2;
    kvrt_cache cache = nullptr;
    kvrt_result r = make_cache(env, s, &cache);
    TimedStream stream(env.ctx);
    if (r == KVRT_SUCCESS) r = stream.result();
    Row row;
    row.name = "compact";
    row.params = {{"type", s.type_name}, {"cells", std::to_string(s.cells)}, {"kv_heads", std::to_string(s.kv_heads)},
                  {"head_dim", std::to_string(s.head_dim)}, {"layers", std::to_string(s.layers)}};
    uint32_t moved = 0;
    if (r == KVRT_SUCCESS) {
        // Each run: a full cache with every other position dropped (half
        // empty, holes everywhere), then one compaction.
        r = measure(env, stream,
                    [&]() -> kvrt_result {
                        std::vector<uint32_t> cells;
                        kvrt_result e = kvrt_cache_clear(cache);
                        if (e == KVRT_SUCCESS) e = place_range(cache, 0, s.cells, &cells);
                        for (uint32_t p = 0; p < s.cells && e == KVRT_SUCCESS; p += 2)
                            e = kvrt_cache_seq_rm(cache, 0, static_cast<int32_t>(p), static_cast<int32_t>(p + 1));
                        if (e == KVRT_SUCCESS) e = kvrt_cache_compact(cache, stream, 0.0f, 0, &moved);
                        return e;
                    },
                    "compact", &row.m);
    }
    kvrt_cache_info info = KVRT_CACHE_INFO_INIT;
    if (r == KVRT_SUCCESS) r = kvrt_cache_get_info(cache, &info);
    kvrt_cache_destroy(cache);
    if (r != KVRT_SUCCESS) return report("bench compact", r);
    row.bytes = 2.0 * static_cast<double>(info.bytes_per_token) * moved;  // read and write every moved row
    row.extra = {{"moved", static_cast<double>(moved)}, {"us", row.m.median() * 1000.0}};
    rows->push_back(row);
    return 0;
}

const char* kStoreUsage =
    "[--cells N] [--kv-heads N] [--head-dim N] [--type f16|q8_0|q4_0|f32|u8_static|u16_static] [--tokens N]: "
    "GPU time to write N tokens' f32 K and V into one layer";
const char* kCompactUsage =
    "[--cells N] [--kv-heads N] [--head-dim N] [--type T] [--layers N]: compact a half-empty cache "
    "(every other cell free)";

const bool registered_store = register_case(
    {"store", kStoreUsage, run_store,
     {{"--type", "f16", "--tokens", "1"}, {"--type", "f16", "--tokens", "512"}, {"--type", "q8_0", "--tokens", "1"},
      {"--type", "q8_0", "--tokens", "512"}, {"--type", "q4_0", "--tokens", "1"}, {"--type", "q4_0", "--tokens", "512"}}});
const bool registered_compact = register_case({"compact", kCompactUsage, run_compact, {{"--type", "f16"}}});

}  // namespace

}  // namespace cli::bench
