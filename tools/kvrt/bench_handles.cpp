// `kvrt bench handles`: what a handle costs the host. Two parts, both on the
// CPU only (no GPU work is timed):
//
//  - per call: the wall time of a call that does almost nothing but look its
//    handle up (kvrt_cache_seq_pos_max, kvrt_buffer_get_size), in 1 to
//    --threads threads at once, each thread with its own cache and buffer;
//    `runs` timed rounds of --calls calls per thread after a warm-up round;
//  - churn: --churn streams and --churn caches created and destroyed one
//    after the other, with the process's resident memory before and after
//    (what destroyed handles leave behind).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "bench.hpp"

namespace cli::bench {

namespace {

using Clock = std::chrono::steady_clock;

// The process's resident memory in KiB (Linux /proc), 0 if unknown.
double resident_kib() {
    std::FILE* f = std::fopen("/proc/self/statm", "r");
    if (!f) return 0;
    unsigned long long size = 0, resident = 0;
    const int n = std::fscanf(f, "%llu %llu", &size, &resident);
    std::fclose(f);
    if (n != 2) return 0;
    return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / 1024.0;
}

kvrt_cache_desc small_cache() {
    kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
    d.n_layers = 1;
    d.n_heads = 1;
    d.n_kv_heads = 1;
    d.head_dim_k = 32;
    d.capacity = 32;
    d.type_k = d.type_v = KVRT_TYPE_F16;
    return d;
}

// `threads` threads each make `calls` calls of `call(i)` (i: the thread),
// started together; wall milliseconds of the slowest.
template <class F>
double timed_calls(unsigned threads, uint64_t calls, F call, std::atomic<int>* failures) {
    std::atomic<unsigned> ready{0};
    std::atomic<bool> go{false};
    std::vector<double> ms(threads);
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t) {
        pool.emplace_back([&, t] {
            ++ready;
            while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
            const Clock::time_point t0 = Clock::now();
            int bad = 0;
            for (uint64_t i = 0; i < calls; ++i) bad += call(t) != KVRT_SUCCESS;
            ms[t] = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
            *failures += bad;
        });
    }
    while (ready.load() < threads) std::this_thread::yield();
    go.store(true, std::memory_order_release);
    for (auto& th : pool) th.join();
    double worst = 0;
    for (double m : ms) worst = std::max(worst, m);
    return worst;
}

int run_handles(Env& env, const Args& args, std::vector<Row>* rows) {
    std::string error;
    uint64_t calls, threads, churn;
    if (!args.u64("calls", 1000000, &calls, &error) || !args.u64("threads", 2, &threads, &error) ||
        !args.u64("churn", 100000, &churn, &error)) {
        std::fprintf(stderr, "error: %s\n", error.c_str());
        return 2;
    }
    if (calls == 0 || threads == 0 || threads > 64) {
        std::fprintf(stderr, "error: --calls must be > 0 and --threads 1..64\n");
        return 2;
    }

    // One cache and one buffer per thread.
    const kvrt_cache_desc cd = small_cache();
    kvrt_buffer_desc bd = KVRT_BUFFER_DESC_INIT;
    bd.size = 256;
    std::vector<kvrt_cache> caches(threads, nullptr);
    std::vector<kvrt_buffer> buffers(threads, nullptr);
    kvrt_result r = KVRT_SUCCESS;
    for (uint64_t t = 0; t < threads && r == KVRT_SUCCESS; ++t) {
        r = kvrt_cache_create(env.ctx, &cd, &caches[t]);
        if (r == KVRT_SUCCESS) r = kvrt_buffer_create(env.ctx, &bd, &buffers[t]);
    }
    std::atomic<int> failures{0};
    struct Call {
        const char* name;
        std::function<kvrt_result(unsigned)> call;
    };
    const std::vector<Call> kinds = {
        {"cache_seq_pos_max",
         [&](unsigned t) {
             int32_t pos = 0;
             return kvrt_cache_seq_pos_max(caches[t], 0, &pos);
         }},
        {"buffer_get_size",
         [&](unsigned t) {
             uint64_t size = 0;
             return kvrt_buffer_get_size(buffers[t], &size);
         }},
    };
    for (const Call& c : kinds) {
        for (unsigned n = 1; n <= threads && r == KVRT_SUCCESS; n *= 2) {
            Row row;
            row.name = "handles";
            row.params = {{"call", c.name}, {"threads", std::to_string(n)}, {"calls", std::to_string(calls)}};
            for (int run = 0; run < env.warmup + env.runs; ++run) {
                const double ms = timed_calls(n, calls, c.call, &failures);
                if (run >= env.warmup) row.m.ms.push_back(ms);
            }
            row.extra = {{"ns_per_call", row.m.median() * 1e6 / static_cast<double>(calls)}};
            rows->push_back(row);
            if (!env.quiet) std::fprintf(stderr, "bench handles: %s, %u thread(s) done\n", c.name, n);
        }
    }
    for (kvrt_cache c : caches) kvrt_cache_destroy(c);
    for (kvrt_buffer b : buffers) kvrt_buffer_destroy(b);
    if (r != KVRT_SUCCESS) return report("bench handles", r);
    if (failures.load() != 0) {
        std::fprintf(stderr, "error: %d calls failed\n", failures.load());
        return 1;
    }

    // Churn: each object created and destroyed before the next.
    struct Churn {
        const char* name;
        std::function<kvrt_result()> once;
    };
    const std::vector<Churn> churns = {
        {"stream",
         [&] {
             kvrt_stream s = nullptr;
             const kvrt_result res = kvrt_stream_create(env.ctx, nullptr, &s);
             kvrt_stream_destroy(s);
             return res;
         }},
        {"cache",
         [&] {
             kvrt_cache c = nullptr;
             const kvrt_result res = kvrt_cache_create(env.ctx, &cd, &c);
             kvrt_cache_destroy(c);
             return res;
         }},
    };
    for (const Churn& c : churns) {
        if (churn == 0) break;
        // A warm-up share first: allocator pools and the driver settle.
        const uint64_t warm = std::min<uint64_t>(churn / 10 + 1, 10000);
        for (uint64_t i = 0; i < warm && r == KVRT_SUCCESS; ++i) r = c.once();
        const double before = resident_kib();
        const Clock::time_point t0 = Clock::now();
        for (uint64_t i = 0; i < churn && r == KVRT_SUCCESS; ++i) {
            r = c.once();
            if (!env.quiet && (i + 1) % 100000 == 0)
                std::fprintf(stderr, "bench handles: %s churn %llu of %llu\n", c.name,
                             static_cast<unsigned long long>(i + 1), static_cast<unsigned long long>(churn));
        }
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        const double after = resident_kib();
        if (r != KVRT_SUCCESS) return report("bench handles", r);
        Row row;
        row.name = "handles-churn";
        row.params = {{"object", c.name}, {"count", std::to_string(churn)}};
        row.m.ms.push_back(ms);
        row.extra = {{"us_per_create_destroy", ms * 1000.0 / static_cast<double>(churn)},
                     {"rss_kib_before", before},
                     {"rss_kib_after", after},
                     {"bytes_kept_per_object", (after - before) * 1024.0 / static_cast<double>(churn)}};
        rows->push_back(row);
    }
    return validation_status(env, "bench handles");
}

const bool registered = register_case(
    {"handles",
     "[--calls N] [--threads N] [--churn N]: host cost of handles: ns per call of kvrt_cache_seq_pos_max and "
     "kvrt_buffer_get_size in 1, 2, 4... up to N threads at once (each its own objects), then N streams and N "
     "caches created and destroyed, with resident memory before and after",
     run_handles,
     {{"--calls", "1000000", "--threads", "2", "--churn", "10000"}}});

}  // namespace

}  // namespace cli::bench
