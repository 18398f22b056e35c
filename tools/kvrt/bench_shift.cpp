// `kvrt bench shift`: applying a RoPE shift to every cell of a cache.
#include <random>
#include <string>
#include <vector>

#include "bench.hpp"

namespace cli::bench {

namespace {

int run_shift(Env& env, const Args& args, std::vector<Row>* rows) {
    std::string error;
    uint64_t cells, kv_heads, dim, layers;
    if (!args.u64("cells", 4096, &cells, &error) || !args.u64("kv-heads", 8, &kv_heads, &error) ||
        !args.u64("head-dim", 128, &dim, &error) || !args.u64("layers", 1, &layers, &error)) {
        std::fprintf(stderr, "error: %s\n", error.c_str());
        return 2;
    }
    if (cells == 0 || cells > (1u << 22) || kv_heads == 0 || kv_heads > 256 || dim == 0 || dim > 1024 || layers == 0 ||
        layers > 256) {
        std::fprintf(stderr, "error: sizes out of range\n");
        return 2;
    }
    std::string tname;
    kvrt_type type = KVRT_TYPE_F16;
    if (!type_option(args, "type", "f16", &type, &tname)) return 2;
    kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
    d.n_layers = static_cast<uint32_t>(layers);
    d.n_heads = d.n_kv_heads = static_cast<uint32_t>(kv_heads);
    d.head_dim_k = static_cast<uint32_t>(dim);
    d.capacity = static_cast<uint32_t>(cells);
    d.type_k = type;
    kvrt_static_scales_desc scales = KVRT_STATIC_SCALES_DESC_INIT;
    d.next = bench_scales(type, d.type_v, &scales);
    kvrt_cache cache = nullptr;
    kvrt_result r = kvrt_cache_create(env.ctx, &d, &cache);
    // Every cell in use (placement only: the data's values do not change the work).
    for (uint32_t p = 0; p < cells && r == KVRT_SUCCESS; p += 1024) {
        const uint32_t n = std::min<uint32_t>(1024, static_cast<uint32_t>(cells) - p);
        std::vector<int32_t> pos(n), seq(n, 0);
        for (uint32_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(p + i);
        kvrt_batch b = make_batch(n, pos.data(), seq.data());
        r = kvrt_cache_place(cache, &b, nullptr);
    }
    TimedStream s(env.ctx);
    if (r == KVRT_SUCCESS) r = s.result();
    Row row;
    row.name = "shift";
    row.params = {{"type", tname}, {"cells", std::to_string(cells)}, {"kv_heads", std::to_string(kv_heads)},
                  {"head_dim", std::to_string(dim)}, {"layers", std::to_string(layers)}};
    int flip = 1;
    if (r == KVRT_SUCCESS)
        r = measure(env, s,
                    [&]() -> kvrt_result {
                        // Move every position by +/-1 (alternating keeps them >= 0),
                        // then rotate all of K: one table, every cell.
                        kvrt_result e = kvrt_cache_seq_add(cache, 0, 0, -1, flip);
                        flip = -flip;
                        return e == KVRT_SUCCESS ? kvrt_cache_apply_shifts(cache, s) : e;
                    },
                    "shift", &row.m);
    kvrt_cache_info info = KVRT_CACHE_INFO_INIT;
    if (r == KVRT_SUCCESS) r = kvrt_cache_get_info(cache, &info);
    kvrt_cache_destroy(cache);
    if (r != KVRT_SUCCESS) return report("bench shift", r);
    // K is read and written once: half the per-token bytes (K and V) times two.
    row.bytes = static_cast<double>(info.bytes_per_token) * static_cast<double>(cells);
    rows->push_back(row);
    return 0;
}

const bool registered = register_case(
    {"shift",
     "[--cells N] [--kv-heads N] [--head-dim N] [--type f16|q8_0|q4_0|f32|u8_static|u16_static] [--layers N]: "
     "GPU time to rotate the K of every cell by a shift (all layers, one submission)",
     run_shift,
     {{"--type", "f16"}, {"--type", "q8_0"}}});

}  // namespace

}  // namespace cli::bench
