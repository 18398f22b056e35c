// `kvrt bench swap`: host swap of one sequence (kvrt_cache_seq_swap_out to
// host memory, then kvrt_cache_seq_swap_in), timed on the host's steady
// clock around each call, since the work is device reads and writes plus
// host copies and the state's checksum. Reported per MiB of state, both
// ways, next to the state's size; compare with `kvrt bench copy --mib N`
// (the device's copy bandwidth) for the same bytes. The cache holds `tokens`
// tokens of sequence 0 and `others` tokens of `other-seqs` other sequences
// (sequences 1..), placed with zero rows (the timing does not depend on the
// values): a swap's host cost beyond its bytes is what it does with the rest
// of the cache.
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "bench.hpp"

namespace cli::bench {

namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

int run_swap(Env& env, const Args& args, std::vector<Row>* rows) {
    std::string error;
    uint64_t tokens, layers, kv_heads, dim, others, other_seqs;
    if (!args.u64("tokens", 2048, &tokens, &error) || !args.u64("layers", 16, &layers, &error) ||
        !args.u64("kv-heads", 8, &kv_heads, &error) || !args.u64("head-dim", 64, &dim, &error) ||
        !args.u64("others", 0, &others, &error) || !args.u64("other-seqs", 1, &other_seqs, &error)) {
        std::fprintf(stderr, "error: %s\n", error.c_str());
        return 2;
    }
    if (tokens == 0 || tokens > (1u << 20) || layers == 0 || layers > 256 || kv_heads == 0 || kv_heads > 256 ||
        dim == 0 || dim > 1024) {
        std::fprintf(stderr, "error: sizes out of range (1 <= tokens <= 1048576, 1 <= layers <= 256)\n");
        return 2;
    }
    if (others > (1u << 22) || other_seqs == 0 || other_seqs > 4096) {
        std::fprintf(stderr, "error: --others is at most 4194304 and --other-seqs 1..4096\n");
        return 2;
    }
    std::string tname;
    kvrt_type type = KVRT_TYPE_F16;
    if (!type_option(args, "type", "f16", &type, &tname)) return 2;
    const std::string layout = args.str("layout", "cells");
    if (layout != "cells" && layout != "paged") {
        std::fprintf(stderr, "error: --layout is cells or paged\n");
        return 2;
    }

    kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
    d.n_layers = static_cast<uint32_t>(layers);
    d.n_heads = d.n_kv_heads = static_cast<uint32_t>(kv_heads);
    d.head_dim_k = static_cast<uint32_t>(dim);
    d.capacity = static_cast<uint32_t>(tokens + others);
    d.max_seqs = static_cast<uint32_t>(1 + (others ? other_seqs : 0));
    d.type_k = d.type_v = type;
    kvrt_static_scales_desc scales = KVRT_STATIC_SCALES_DESC_INIT;
    kvrt_paged_layout_desc paged = KVRT_PAGED_LAYOUT_DESC_INIT;
    paged.next = bench_scales(type, type, &scales);
    d.next = paged.next;
    if (layout == "paged") {
        d.layout = KVRT_LAYOUT_PAGED;
        d.next = &paged;
    }
    kvrt_cache cache = nullptr;
    kvrt_result r = kvrt_cache_create(env.ctx, &d, &cache);
    // Sequence 0's tokens, then each other sequence's share.
    const uint64_t per_other = others ? (others + other_seqs - 1) / other_seqs : 0;
    for (uint64_t s = 0; s <= (others ? other_seqs : 0) && r == KVRT_SUCCESS; ++s) {
        const uint64_t count = s == 0 ? tokens : std::min(per_other, others - std::min(others, (s - 1) * per_other));
        for (uint64_t p = 0; p < count && r == KVRT_SUCCESS; p += 4096) {
            const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(4096, count - p));
            std::vector<int32_t> pos(n), seq(n, static_cast<int32_t>(s));
            for (uint32_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(p + i);
            const kvrt_batch b = make_batch(n, pos.data(), seq.data());
            r = kvrt_cache_place(cache, &b, nullptr);
        }
    }
    uint64_t size = 0;
    if (r == KVRT_SUCCESS) r = kvrt_cache_seq_swap_out(cache, 0, nullptr, &size);
    std::vector<uint8_t> blob;
    if (r == KVRT_SUCCESS) blob.resize(size);
    std::vector<double> out_ms, in_ms;
    for (int i = 0; i < env.warmup + env.runs && r == KVRT_SUCCESS; ++i) {
        uint64_t n = size;
        const Clock::time_point t0 = Clock::now();
        r = kvrt_cache_seq_swap_out(cache, 0, blob.data(), &n);
        const Clock::time_point t1 = Clock::now();
        if (r == KVRT_SUCCESS) r = kvrt_cache_seq_swap_in(cache, 0, blob.data(), n);
        const Clock::time_point t2 = Clock::now();
        if (r != KVRT_SUCCESS || i < env.warmup) continue;
        out_ms.push_back(ms_between(t0, t1));
        in_ms.push_back(ms_between(t1, t2));
        if (!env.quiet) std::fprintf(stderr, "bench swap: run %d of %d\n", i + 1 - env.warmup, env.runs);
    }
    kvrt_cache_destroy(cache);
    if (r != KVRT_SUCCESS) return report("bench swap", r);

    const double mib = static_cast<double>(size) / (1024.0 * 1024.0);
    Row row;
    row.name = "swap";
    row.params = {{"type", tname},
                  {"layout", layout},
                  {"tokens", std::to_string(tokens)},
                  {"others", std::to_string(others)},
                  {"layers", std::to_string(layers)},
                  {"kv_heads", std::to_string(kv_heads)},
                  {"head_dim", std::to_string(dim)}};
    // The "ms" columns: host milliseconds of a round trip (out, then in).
    for (size_t i = 0; i < out_ms.size(); ++i) row.m.ms.push_back(out_ms[i] + in_ms[i]);
    row.bytes = 2.0 * static_cast<double>(size);
    row.extra = {{"state_mib", mib},
                 {"ms_out", median_of(out_ms)},
                 {"ms_in", median_of(in_ms)},
                 {"ms_per_mib_out", median_of(out_ms) / mib},
                 {"ms_per_mib_in", median_of(in_ms) / mib}};
    rows->push_back(row);
    return 0;
}

const bool registered = register_case(
    {"swap",
     "[--tokens N] [--layers N] [--kv-heads N] [--head-dim N] [--type T] [--others M] [--other-seqs S] [--layout cells|paged]: host "
     "swap of one sequence of N tokens (kvrt_cache_seq_swap_out to host memory, then kvrt_cache_seq_swap_in), "
     "host time per MiB both ways, in a cache that also holds M tokens of S other sequences",
     run_swap,
     {{"--tokens", "2048"}}});

}  // namespace

}  // namespace cli::bench
