// `kvrt bench attn-host`: the CPU cost of recording attention, the part of a
// decode step that the host pays whatever the GPU: per token, one placement
// (kvrt_cache_place) and one kvrt_cache_attention call per layer recorded
// into a stream. Only the calls are timed (steady clock), never the
// submission or the GPU work; each token is its own submission, waited for
// before the next. The cache holds `cells` tokens of one sequence; K/V are
// left as allocated (zeros): the host's work does not depend on them.
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "bench.hpp"

namespace cli::bench {

namespace {

using Clock = std::chrono::steady_clock;

double us_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::micro>(b - a).count();
}

int run_attn_host(Env& env, const Args& args, std::vector<Row>* rows) {
    std::string error;
    uint64_t cells, layers, heads, kv_heads, dim, tokens;
    if (!args.u64("cells", 4096, &cells, &error) || !args.u64("layers", 32, &layers, &error) ||
        !args.u64("heads", 1, &heads, &error) || !args.u64("kv-heads", 1, &kv_heads, &error) ||
        !args.u64("head-dim", 64, &dim, &error) || !args.u64("tokens", 0, &tokens, &error)) {
        std::fprintf(stderr, "error: %s\n", error.c_str());
        return 2;
    }
    if (tokens == 0) tokens = static_cast<uint64_t>(env.warmup + env.runs);
    if (cells < 2 || cells > (1u << 22) || layers == 0 || layers > 256 || kv_heads == 0 || heads % kv_heads ||
        heads > 256 || dim == 0 || dim > 1024 || tokens >= cells) {
        std::fprintf(stderr, "error: sizes out of range (2 <= cells <= 4194304, 1 <= layers <= 256, tokens < cells)\n");
        return 2;
    }
    std::string tname;
    kvrt_type type = KVRT_TYPE_F16;
    if (!type_option(args, "type", "f16", &type, &tname)) return 2;

    kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
    d.n_layers = static_cast<uint32_t>(layers);
    d.n_heads = static_cast<uint32_t>(heads);
    d.n_kv_heads = static_cast<uint32_t>(kv_heads);
    d.head_dim_k = static_cast<uint32_t>(dim);
    d.capacity = static_cast<uint32_t>(cells);
    d.type_k = d.type_v = type;
    kvrt_static_scales_desc scales = KVRT_STATIC_SCALES_DESC_INIT;
    d.next = bench_scales(type, type, &scales);
    kvrt_cache cache = nullptr;
    kvrt_result r = kvrt_cache_create(env.ctx, &d, &cache);

    // The prompt: cells - tokens positions of sequence 0, metadata only.
    const uint32_t prompt = static_cast<uint32_t>(cells - tokens);
    for (uint32_t p = 0; p < prompt && r == KVRT_SUCCESS; p += 4096) {
        const uint32_t n = std::min<uint32_t>(4096, prompt - p);
        std::vector<int32_t> pos(n), seq(n, 0);
        for (uint32_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(p + i);
        const kvrt_batch b = make_batch(n, pos.data(), seq.data());
        r = kvrt_cache_place(cache, &b, nullptr);
    }
    kvrt_buffer qbuf = nullptr, obuf = nullptr;
    kvrt_buffer_desc bd = KVRT_BUFFER_DESC_INIT;
    bd.size = heads * dim * 4;
    if (r == KVRT_SUCCESS) r = kvrt_buffer_create(env.ctx, &bd, &qbuf);
    if (r == KVRT_SUCCESS) r = kvrt_buffer_create(env.ctx, &bd, &obuf);
    TimedStream s(env.ctx);
    if (r == KVRT_SUCCESS) r = s.result();

    // Each token: place it, then record every layer's attention for it.
    std::vector<double> per_call, per_token, per_place, per_first;
    const kvrt_tensor_ref qr = buffer_tensor(qbuf, 0);
    const kvrt_output_ref orf = buffer_output(obuf, 0);
    for (uint64_t t = 0; t < tokens && r == KVRT_SUCCESS; ++t) {
        int32_t pos = static_cast<int32_t>(prompt + t), seq = 0;
        const kvrt_batch b = make_batch(1, &pos, &seq);
        r = kvrt_stream_begin(s);
        if (r != KVRT_SUCCESS) break;
        const Clock::time_point t0 = Clock::now();
        r = kvrt_cache_place(cache, &b, nullptr);
        const double place_us = us_between(t0, Clock::now());
        std::vector<double> calls;
        calls.reserve(layers);
        for (uint32_t l = 0; l < layers && r == KVRT_SUCCESS; ++l) {
            const Clock::time_point c0 = Clock::now();
            r = kvrt_cache_attention(cache, s, static_cast<int32_t>(l), &b, &qr, &orf, nullptr);
            calls.push_back(us_between(c0, Clock::now()));
        }
        const Clock::time_point t1 = Clock::now();
        if (r == KVRT_SUCCESS) r = kvrt_stream_submit(s);
        if (r == KVRT_SUCCESS) r = kvrt_stream_wait(s, UINT64_MAX);
        if (r != KVRT_SUCCESS || t < static_cast<uint64_t>(env.warmup)) continue;
        per_token.push_back(us_between(t0, t1));
        per_place.push_back(place_us);
        per_first.push_back(calls.front());
        per_call.insert(per_call.end(), calls.begin(), calls.end());
        if (!env.quiet)
            std::fprintf(stderr, "bench attn-host: %llu cells, token %llu of %llu\n",
                         static_cast<unsigned long long>(cells), static_cast<unsigned long long>(t + 1),
                         static_cast<unsigned long long>(tokens));
    }
    kvrt_buffer_destroy(qbuf);
    kvrt_buffer_destroy(obuf);
    kvrt_cache_destroy(cache);
    if (r != KVRT_SUCCESS) return report("bench attn-host", r);
    if (per_call.empty()) {
        std::fprintf(stderr, "error: no timed token (--tokens must exceed the warm-up runs)\n");
        return 2;
    }

    Row out;
    out.name = "attn-host";
    out.params = {{"type", tname},   {"cells", std::to_string(cells)}, {"layers", std::to_string(layers)},
                  {"heads", std::to_string(heads)}, {"kv_heads", std::to_string(kv_heads)},
                  {"head_dim", std::to_string(dim)}};
    // Host milliseconds of each call (the "ms" columns); the medians in us.
    for (double us : per_call) out.m.ms.push_back(us / 1000.0);
    out.extra = {{"us_per_call", median_of(per_call)},
                 {"us_first_call", median_of(per_first)},
                 {"us_place", median_of(per_place)},
                 {"us_per_token", median_of(per_token)}};
    rows->push_back(out);
    return 0;
}

const bool registered = register_case(
    {"attn-host",
     "[--cells N] [--layers N] [--heads N] [--kv-heads N] [--head-dim N] [--type T] [--tokens N]: "
     "CPU time (not GPU) of recording decode attention: per kvrt_cache_attention call, and per token "
     "(one placement and one call per layer), over N cells of one sequence",
     run_attn_host,
     {{"--cells", "512"}, {"--cells", "4096"}, {"--cells", "32768"}, {"--cells", "131072"}}});

}  // namespace

}  // namespace cli::bench
