#include "bench.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>

namespace cli::bench {

namespace {

std::map<std::string, Case>& cases() {
    static std::map<std::string, Case> c;
    return c;
}

constexpr uint64_t kWaitNs = 600ull * 1000 * 1000 * 1000;

}  // namespace

bool register_case(const Case& c) {
    cases()[c.name] = c;
    return true;
}

const kvrt_static_scales_desc* bench_scales(kvrt_type type_k, kvrt_type type_v, kvrt_static_scales_desc* storage) {
    static const float u8_scale = 1.0f / 32.0f, u16_scale = 1.0f / 4096.0f;
    static const int32_t u8_zero_point = 128, u16_zero_point = 32768;
    auto scale = [](kvrt_type t) -> const float* {
        return t == KVRT_TYPE_U8_STATIC ? &u8_scale : t == KVRT_TYPE_U16_STATIC ? &u16_scale : nullptr;
    };
    auto zero_point = [](kvrt_type t) -> const int32_t* {
        return t == KVRT_TYPE_U8_STATIC ? &u8_zero_point : t == KVRT_TYPE_U16_STATIC ? &u16_zero_point : nullptr;
    };
    *storage = KVRT_STATIC_SCALES_DESC_INIT;
    storage->count = 1;  // every layer
    storage->k_scales = scale(type_k);
    storage->k_zero_points = zero_point(type_k);
    storage->v_scales = scale(type_v);
    storage->v_zero_points = zero_point(type_v);
    return storage->k_scales || storage->v_scales ? storage : nullptr;
}

double median_of(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double Measurement::median() const { return median_of(ms); }

double Measurement::min() const { return ms.empty() ? 0 : *std::min_element(ms.begin(), ms.end()); }

TimedStream::TimedStream(kvrt_context ctx) {
    kvrt_stream_desc d = KVRT_STREAM_DESC_INIT;
    d.flags = KVRT_STREAM_TIMESTAMPS;
    d.label = "bench";
    r_ = kvrt_stream_create(ctx, &d, &s_);
}

TimedStream::~TimedStream() { kvrt_stream_destroy(s_); }

double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

kvrt_result measure_attention_interleaved(const Env& env, kvrt_stream stream, const std::vector<kvrt_cache>& caches,
                                          uint32_t n_layers, const kvrt_batch& queries, const kvrt_tensor_ref& q,
                                          const kvrt_output_ref& out, std::vector<Measurement>* per_cache) {
    per_cache->assign(caches.size(), Measurement{});
    Env once = env;
    once.runs = 1;
    once.warmup = 0;
    kvrt_result r = KVRT_SUCCESS;
    for (int run = -env.warmup; run < env.runs && r == KVRT_SUCCESS; ++run)
        for (size_t i = 0; i < caches.size() && r == KVRT_SUCCESS; ++i) {
            Measurement m;
            r = measure(once, stream, [&] {
                kvrt_result e = KVRT_SUCCESS;
                for (uint32_t l = 0; l < n_layers && e == KVRT_SUCCESS; ++l)
                    e = kvrt_cache_attention(caches[i], stream, static_cast<int32_t>(l), &queries, &q, &out, nullptr);
                return e;
            }, "attention", &m);
            if (r == KVRT_SUCCESS && run >= 0) (*per_cache)[i].ms.push_back(m.ms[0]);
        }
    return r;
}

int validation_status(const Env& env, const char* what) {
    kvrt_context_stats cs = KVRT_CONTEXT_STATS_INIT;
    if (kvrt_context_get_stats(env.ctx, &cs) != KVRT_SUCCESS || !cs.validation_errors) return 0;
    std::fprintf(stderr, "error: %s: the Vulkan validation layer reported %llu errors\n", what,
                 static_cast<unsigned long long>(cs.validation_errors));
    return 1;
}

kvrt_result measure(const Env& env, kvrt_stream stream, const std::function<kvrt_result()>& record,
                    const char* label, Measurement* out) {
    out->ms.clear();
    for (int i = 0; i < env.warmup + env.runs; ++i) {
        kvrt_result r = kvrt_stream_begin(stream);
        if (r == KVRT_SUCCESS) r = record();
        if (r != KVRT_SUCCESS) {
            // Drop a half-recorded submission so the stream stays usable.
            if (kvrt_stream_submit(stream) == KVRT_SUCCESS) kvrt_stream_wait(stream, kWaitNs);
            return r;
        }
        if ((r = kvrt_stream_submit(stream)) != KVRT_SUCCESS) return r;
        if ((r = kvrt_stream_wait(stream, kWaitNs)) != KVRT_SUCCESS) return r;
        if (i < env.warmup) continue;
        uint32_t n = 0;
        if ((r = kvrt_stream_get_timings(stream, nullptr, &n)) != KVRT_SUCCESS) return r;
        std::vector<kvrt_timing> t(n, kvrt_timing KVRT_TIMING_INIT);
        if ((r = kvrt_stream_get_timings(stream, t.data(), &n)) != KVRT_SUCCESS) return r;
        uint64_t ns = 0;
        for (uint32_t k = 0; k < n; ++k)
            if (!label || std::strcmp(t[k].label, label) == 0) ns += t[k].ns;
        out->ms.push_back(static_cast<double>(ns) / 1e6);
    }
    return KVRT_SUCCESS;
}

void print_rows(const Env& env, const std::vector<Row>& rows, bool header) {
    if (env.json) {
        for (const Row& r : rows) {
            std::printf("{\"case\": \"%s\", \"device\": \"%s\"", json_escape(r.name).c_str(),
                        json_escape(env.info.name).c_str());
            for (const auto& [k, v] : r.params) std::printf(", \"%s\": \"%s\"", k.c_str(), json_escape(v).c_str());
            std::printf(", \"runs\": %zu, \"median_ms\": %.4f, \"min_ms\": %.4f", r.m.ms.size(), r.m.median(), r.m.min());
            if (r.bytes > 0) std::printf(", \"bytes\": %.0f, \"gbps\": %.3f", r.bytes, r.bytes / (r.m.median() * 1e6));
            for (const auto& [k, v] : r.extra) std::printf(", \"%s\": %.6g", k.c_str(), v);
            std::printf("}\n");
        }
        return;
    }
    if (header) {
        std::printf("device: %s\n", env.info.name);
        std::printf("%-14s %-52s %10s %10s %9s  %s\n", "case", "parameters", "median ms", "min ms", "GB/s", "other");
    }
    for (const Row& r : rows) {
        std::string params;
        for (const auto& [k, v] : r.params) params += (params.empty() ? "" : " ") + k + "=" + v;
        std::string extra;
        for (const auto& [k, v] : r.extra) {
            char buf[64];
            std::snprintf(buf, sizeof(buf), "%s%s=%.4g", extra.empty() ? "" : " ", k.c_str(), v);
            extra += buf;
        }
        char gbps[32] = "-";
        if (r.bytes > 0) std::snprintf(gbps, sizeof(gbps), "%.2f", r.bytes / (r.m.median() * 1e6));
        std::printf("%-14s %-52s %10.3f %10.3f %9s  %s\n", r.name.c_str(), params.c_str(), r.m.median(), r.m.min(),
                    gbps, extra.c_str());
    }
    std::fflush(stdout);
}

namespace {

void usage(FILE* out) {
    std::fprintf(out,
                 "usage: kvrt bench <case> [options] [--runs N] [--warmup N] [--json] [--device D] [--portable]\n"
                 "       kvrt bench standard   runs the standard set and prints a table\n\n"
                 "cases:\n");
    for (const auto& [name, c] : cases()) std::fprintf(out, "  %-14s %s\n", name.c_str(), c.usage);
}

std::vector<char*> argv_of(std::vector<std::string>& args) {
    std::vector<char*> v;
    for (auto& a : args) v.push_back(a.data());
    return v;
}

}  // namespace

int cmd_bench(int argc, char** argv) {
    if (argc < 1 || !std::strcmp(argv[0], "--help") || !std::strcmp(argv[0], "help")) {
        usage(argc < 1 ? stderr : stdout);
        return argc < 1 ? 2 : 0;
    }
    const std::string name = argv[0];
    Args args;
    std::string error;
    if (!args.parse(argc - 1, argv + 1, {"json", "help", "quiet", "portable", "deferred"}, &error)) {
        std::fprintf(stderr, "error: %s\n", error.c_str());
        return 2;
    }
    const bool standard = name == "standard";
    auto it = cases().find(name);
    if (!standard && it == cases().end()) {
        std::fprintf(stderr, "error: unknown bench case '%s'\n\n", name.c_str());
        usage(stderr);
        return 2;
    }
    if (args.has("help")) {
        if (standard) usage(stdout);
        else std::printf("usage: kvrt bench %s %s\n", name.c_str(), it->second.usage);
        return 0;
    }

    Env env;
    uint64_t runs = 0, warmup = 0;
    if (!args.u64("runs", 7, &runs, &error) || !args.u64("warmup", 2, &warmup, &error)) {
        std::fprintf(stderr, "error: %s\n", error.c_str());
        return 2;
    }
    if (runs < 1 || runs > 1000 || warmup > 100) {
        std::fprintf(stderr, "error: --runs must be 1..1000 and --warmup 0..100\n");
        return 2;
    }
    env.runs = static_cast<int>(runs);
    env.warmup = static_cast<int>(warmup);
    env.json = args.has("json");
    env.quiet = args.has("quiet") || env.json;

    kvrt_context_desc desc = KVRT_CONTEXT_DESC_INIT;
    const std::string device = args.str("device");
    if (!device.empty()) desc.device = device.c_str();
    desc.log_callback = &log_to_stderr;
    if (args.has("portable")) desc.flags |= KVRT_CONTEXT_PORTABLE_KERNELS;
    kvrt_result r = kvrt_context_create(&desc, &env.ctx);
    if (r != KVRT_SUCCESS) return report("creating the context", r);
    env.info = kvrt_device_info KVRT_DEVICE_INFO_INIT;
    kvrt_context_get_device_info(env.ctx, &env.info);

    int rc = 0;
    if (!standard) {
        std::vector<Row> rows;
        rc = it->second.run(env, args, &rows);
        print_rows(env, rows, true);
    } else {
        bool header = true;
        for (const auto& [cname, c] : cases()) {
            for (const auto& set : c.standard) {
                std::vector<std::string> a = set;
                auto av = argv_of(a);
                Args sub;
                if (!sub.parse(static_cast<int>(av.size()), av.data(), {"json"}, &error)) {
                    std::fprintf(stderr, "error: standard set of %s: %s\n", cname.c_str(), error.c_str());
                    rc = 1;
                    continue;
                }
                if (!env.quiet) std::fprintf(stderr, "bench %s ...\n", cname.c_str());
                std::vector<Row> rows;
                const int crc = c.run(env, sub, &rows);
                if (crc != 0) rc = crc;
                print_rows(env, rows, header);
                header = false;
            }
        }
    }
    kvrt_context_destroy(env.ctx);
    return rc;
}

}  // namespace cli::bench
