// `kvrt bench first-call`: the wall-clock time of the first attention call in
// a fresh context (which pays for creating and compiling its kernels), without
// and with the pipeline cache an earlier context saved
// (kvrt_context_get_pipeline_cache, kvrt_pipeline_cache_desc). Unlike the
// other cases this measures host time around one synchronous call, not GPU
// timestamps: the compile happens on the host.
#include <algorithm>
#include <chrono>
#include <random>
#include <string>
#include <vector>

#include "bench.hpp"

namespace cli::bench {

namespace {

struct Shape {
    uint32_t cells, heads, kv_heads, dim, queries;
    kvrt_type type;
};

// What one fresh context measured: the first and the second call of the
// attention, and the pipeline-cache bytes it could save afterwards.
struct Trial {
    double first_ms = 0, second_ms = 0;
    std::vector<uint8_t> saved;
    uint64_t validation_errors = 0;  // with KVRT_VALIDATION=1
};

double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Creates a context (started from `cache_bytes` when not NULL), fills a cache
// with random K/V (the store kernels compile here, untimed), then times two
// synchronous attention calls of `shape.queries` queries.
kvrt_result trial(const std::string& device, bool portable, const Shape& shape,
                  const std::vector<uint8_t>* cache_bytes, Trial* out) {
    kvrt_context_desc desc = KVRT_CONTEXT_DESC_INIT;
    if (!device.empty()) desc.device = device.c_str();
    desc.log_callback = &log_to_stderr;
    if (portable) desc.flags |= KVRT_CONTEXT_PORTABLE_KERNELS;
    kvrt_pipeline_cache_desc pc = KVRT_PIPELINE_CACHE_DESC_INIT;
    if (cache_bytes) {
        pc.data = cache_bytes->data();
        pc.size = cache_bytes->size();
        desc.next = &pc;
    }
    kvrt_context ctx = nullptr;
    kvrt_result r = kvrt_context_create(&desc, &ctx);
    if (r != KVRT_SUCCESS) return r;

    kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
    d.n_layers = 1;
    d.n_heads = shape.heads;
    d.n_kv_heads = shape.kv_heads;
    d.head_dim_k = shape.dim;
    d.capacity = shape.cells;
    d.type_k = d.type_v = shape.type;
    kvrt_static_scales_desc scales;
    d.next = bench_scales(shape.type, shape.type, &scales);
    kvrt_cache cache = nullptr;
    r = kvrt_cache_create(ctx, &d, &cache);

    std::mt19937 rng(1);
    std::normal_distribution<float> normal;
    const uint32_t chunk = 256;
    std::vector<float> kv(static_cast<size_t>(chunk) * shape.kv_heads * shape.dim);
    for (uint32_t p = 0; p < shape.cells && r == KVRT_SUCCESS; p += chunk) {
        const uint32_t n = std::min(chunk, shape.cells - p);
        for (auto& x : kv) x = normal(rng);
        std::vector<int32_t> pos(n), seq(n, 0);
        for (uint32_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(p + i);
        const kvrt_batch b = make_batch(n, pos.data(), seq.data());
        const kvrt_tensor_ref t = host_tensor(kv.data());
        r = kvrt_cache_store(cache, nullptr, &b, 0, &t, &t, nullptr);
    }
    std::vector<float> q(static_cast<size_t>(shape.queries) * shape.heads * shape.dim);
    for (auto& x : q) x = normal(rng);
    std::vector<float> o(q.size());
    std::vector<int32_t> qpos(shape.queries), qseq(shape.queries, 0);
    for (uint32_t i = 0; i < shape.queries; ++i) qpos[i] = static_cast<int32_t>(shape.cells - shape.queries + i);
    const kvrt_batch qb = make_batch(shape.queries, qpos.data(), qseq.data());
    const kvrt_tensor_ref qr = host_tensor(q.data());
    const kvrt_output_ref orf = host_output(o.data());
    for (double* ms : {&out->first_ms, &out->second_ms}) {
        if (r != KVRT_SUCCESS) break;
        const auto t0 = std::chrono::steady_clock::now();
        r = kvrt_cache_attention(cache, nullptr, 0, &qb, &qr, &orf, nullptr);
        *ms = ms_since(t0);
    }
    uint64_t size = 0;
    if (r == KVRT_SUCCESS) r = kvrt_context_get_pipeline_cache(ctx, nullptr, &size);
    if (r == KVRT_SUCCESS) {
        out->saved.resize(size);
        r = kvrt_context_get_pipeline_cache(ctx, out->saved.data(), &size);
        out->saved.resize(size);
    }
    kvrt_context_stats stats = KVRT_CONTEXT_STATS_INIT;
    if (kvrt_context_get_stats(ctx, &stats) == KVRT_SUCCESS) out->validation_errors = stats.validation_errors;
    kvrt_cache_destroy(cache);
    kvrt_context_destroy(ctx);
    return r;
}

int run_first_call(Env& env, const Args& args, std::vector<Row>* rows) {
    std::string error;
    uint64_t cells, heads, kv_heads, dim, prefill;
    if (!args.u64("cells", 1024, &cells, &error) || !args.u64("heads", 32, &heads, &error) ||
        !args.u64("kv-heads", 8, &kv_heads, &error) || !args.u64("head-dim", 128, &dim, &error) ||
        !args.u64("prefill", 64, &prefill, &error)) {
        std::fprintf(stderr, "error: %s\n", error.c_str());
        return 2;
    }
    if (cells == 0 || cells > (1u << 20) || kv_heads == 0 || heads % kv_heads || heads > 256 || dim == 0 ||
        dim > 1024 || prefill < 2 || prefill > cells) {
        std::fprintf(stderr, "error: sizes out of range (heads a multiple of kv-heads, 2 <= prefill <= cells)\n");
        return 2;
    }
    std::string tname;
    kvrt_type type = KVRT_TYPE_F16;
    if (!type_option(args, "type", "f16", &type, &tname)) return 2;
    const std::string device = args.str("device");
    const bool portable = args.has("portable");

    // Repetitions interleave the two starts, so drift on a shared machine hits
    // both alike; every context is fresh. The warm-up option does not apply:
    // the first call is the measurement.
    struct Mode {
        const char* name;
        uint32_t queries;
    };
    for (const Mode mode : {Mode{"decode", 1}, Mode{"prefill", static_cast<uint32_t>(prefill)}}) {
        const Shape shape{static_cast<uint32_t>(cells), static_cast<uint32_t>(heads), static_cast<uint32_t>(kv_heads),
                          static_cast<uint32_t>(dim), mode.queries, type};
        Row cold, warm;
        std::vector<double> cold_second, warm_second;
        double saved_bytes = 0;
        for (int i = 0; i < env.runs; ++i) {
            if (!env.quiet) std::fprintf(stderr, "first-call %s: repetition %d of %d\n", mode.name, i + 1, env.runs);
            Trial a, b;
            kvrt_result r = trial(device, portable, shape, nullptr, &a);
            if (r == KVRT_SUCCESS) r = trial(device, portable, shape, &a.saved, &b);
            if (r != KVRT_SUCCESS) return report("bench first-call", r);
            if (a.validation_errors || b.validation_errors) {
                std::fprintf(stderr, "error: bench first-call: %llu validation errors\n",
                             static_cast<unsigned long long>(a.validation_errors + b.validation_errors));
                return 1;
            }
            cold.m.ms.push_back(a.first_ms);
            warm.m.ms.push_back(b.first_ms);
            cold_second.push_back(a.second_ms);
            warm_second.push_back(b.second_ms);
            saved_bytes = static_cast<double>(a.saved.size());
        }
        const auto median = [](std::vector<double> v) {
            Measurement m;
            m.ms = std::move(v);
            return m.median();
        };
        for (Row* row : {&cold, &warm}) {
            const bool with_cache = row == &warm;
            row->name = "first-call";
            row->params = {{"mode", mode.name}, {"pipeline_cache", with_cache ? "saved" : "none"},
                           {"type", tname}, {"cells", std::to_string(cells)},
                           {"heads", std::to_string(heads)}, {"kv_heads", std::to_string(kv_heads)},
                           {"head_dim", std::to_string(dim)}, {"queries", std::to_string(mode.queries)}};
            row->extra = {{"second_call_ms", median(with_cache ? warm_second : cold_second)}};
            if (with_cache) row->extra.push_back({"cache_bytes", saved_bytes});
            rows->push_back(*row);
        }
    }
    return 0;
}

const bool registered = register_case(
    {"first-call",
     "[--cells N] [--heads N] [--kv-heads N] [--head-dim N] [--type T] [--prefill N]: wall-clock ms of the first "
     "synchronous attention call (decode, then prefill of N queries) in fresh contexts, without and with the "
     "pipeline cache saved by the previous one; --runs repetitions (median), second_call_ms for reference",
     run_first_call,
     {}});

}  // namespace

}  // namespace cli::bench
