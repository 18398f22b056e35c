// `kvrt bench paged-host`: the host cost of the paged layout's sequence
// operations on a large block pool, where metadata, not the GPU, sets the
// price. A paged cache of --blocks blocks is filled to about --fill of its
// blocks by sequences of distinct tokens (metadata only: admitted, rows left
// as allocated). Then, on sequence 0 (--tokens tokens, its last block partly
// filled), each timed run does, one call at a time, synchronously:
// - shift: kvrt_cache_seq_add of its last block's tokens by +1, then back
//   by -1 (two calls; the figure is per call; each includes the rotation the
//   layout applies at once);
// - fork: kvrt_cache_paged_fork of sequence 0 into an empty sequence;
// - cow append: one token appended to the fork (kvrt_cache_paged_append),
//   which first copies the shared, partly filled last block;
// - admit: kvrt_cache_paged_admit of sequence 0's tokens into another empty
//   sequence (maps its full registered blocks, places the rest);
// then removes what the run added. Wall time per call (steady clock), median
// over the runs; the geometry is the smallest the cache takes, so that the
// GPU's share stays small and equal for every pool size.
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "bench.hpp"

namespace cli::bench {

namespace {

using Clock = std::chrono::steady_clock;

double us_since(Clock::time_point t0) { return std::chrono::duration<double, std::micro>(Clock::now() - t0).count(); }

int run_paged_host(Env& env, const Args& args, std::vector<Row>* rows) {
    std::string error;
    uint64_t blocks, block, tokens, fill_pct;
    if (!args.u64("blocks", 65536, &blocks, &error) || !args.u64("block", 16, &block, &error) ||
        !args.u64("tokens", 1000, &tokens, &error) || !args.u64("fill", 50, &fill_pct, &error)) {
        std::fprintf(stderr, "error: %s\n", error.c_str());
        return 2;
    }
    if (blocks < 16 || blocks > (1u << 20) || (block != 16 && block != 32 && block != 64) ||
        blocks * block > (1u << 26) || tokens < 2 || tokens % block == 0 || tokens * 4 > blocks * block ||
        fill_pct > 90) {
        std::fprintf(stderr,
                     "error: sizes out of range: 16 <= blocks <= 2^20, block 16, 32 or 64, blocks * block <= 2^26, "
                     "tokens not a multiple of the block size and at most a quarter of the cells, fill <= 90 "
                     "(percent)\n");
        return 2;
    }
    const uint32_t cells = static_cast<uint32_t>(blocks * block);
    const uint32_t max_seqs = 64;
    kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
    d.n_layers = 1;
    d.n_heads = d.n_kv_heads = 1;
    d.head_dim_k = 32;
    d.capacity = cells;
    d.max_seqs = max_seqs;
    d.type_k = d.type_v = KVRT_TYPE_F16;
    d.layout = KVRT_LAYOUT_PAGED;
    kvrt_paged_layout_desc pl = KVRT_PAGED_LAYOUT_DESC_INIT;
    pl.block_size = static_cast<uint32_t>(block);
    d.next = &pl;
    d.label = "bench paged-host";
    kvrt_cache cache = nullptr;
    kvrt_result r = kvrt_cache_create(env.ctx, &d, &cache);
    if (r != KVRT_SUCCESS) return report("bench paged-host: create", r);

    // Sequence 0, then fillers of distinct tokens up to the fill level; the
    // last three sequences stay free for the runs.
    std::vector<int32_t> ids, pos;
    std::vector<uint32_t> out_cells;
    const auto admit = [&](int32_t seq, uint32_t n, int32_t first_id) {
        ids.resize(n);
        pos.resize(n);
        out_cells.resize(n);
        for (uint32_t t = 0; t < n; ++t) {
            ids[t] = first_id + static_cast<int32_t>(t);
            pos[t] = static_cast<int32_t>(t);
        }
        uint32_t n_cached = 0;
        return kvrt_cache_paged_admit(cache, seq, n, ids.data(), pos.data(), 0, &n_cached, out_cells.data());
    };
    r = admit(0, static_cast<uint32_t>(tokens), 0);
    const uint64_t fill_cells = cells * fill_pct / 100;
    const uint32_t fillers = max_seqs - 4;
    const uint32_t per_filler =
        static_cast<uint32_t>(fill_cells > tokens ? (fill_cells - tokens) / fillers / block * block : 0);
    for (uint32_t s = 1; s <= fillers && per_filler && r == KVRT_SUCCESS; ++s)
        r = admit(static_cast<int32_t>(s), per_filler, static_cast<int32_t>(s) << 24);
    if (r != KVRT_SUCCESS) {
        kvrt_cache_destroy(cache);
        return report("bench paged-host: fill", r);
    }

    const int32_t fork_seq = static_cast<int32_t>(max_seqs - 2), admit_seq = static_cast<int32_t>(max_seqs - 1);
    const int32_t tail = static_cast<int32_t>(tokens - tokens % block);  // the last block's first position
    std::vector<double> shift_us, fork_us, cow_us, admit_us;
    for (int run = 0; run < env.warmup + env.runs && r == KVRT_SUCCESS; ++run) {
        const bool timed = run >= env.warmup;
        Clock::time_point t0 = Clock::now();
        r = kvrt_cache_seq_add(cache, 0, tail, -1, 1);
        const double up = us_since(t0);
        t0 = Clock::now();
        if (r == KVRT_SUCCESS) r = kvrt_cache_seq_add(cache, 0, tail + 1, -1, -1);
        const double down = us_since(t0);
        t0 = Clock::now();
        if (r == KVRT_SUCCESS) r = kvrt_cache_paged_fork(cache, 0, fork_seq);
        const double fork = us_since(t0);
        const int32_t next_id = 1 << 30, next_pos = static_cast<int32_t>(tokens);
        uint32_t cell = 0;
        t0 = Clock::now();
        if (r == KVRT_SUCCESS) r = kvrt_cache_paged_append(cache, nullptr, fork_seq, 1, &next_id, &next_pos, &cell);
        const double cow = us_since(t0);
        t0 = Clock::now();
        if (r == KVRT_SUCCESS) r = admit(admit_seq, static_cast<uint32_t>(tokens), 0);
        const double adm = us_since(t0);
        if (r == KVRT_SUCCESS) r = kvrt_cache_seq_rm(cache, fork_seq, -1, -1);
        if (r == KVRT_SUCCESS) r = kvrt_cache_seq_rm(cache, admit_seq, -1, -1);
        if (r != KVRT_SUCCESS || !timed) continue;
        shift_us.insert(shift_us.end(), {up, down});
        fork_us.push_back(fork);
        cow_us.push_back(cow);
        admit_us.push_back(adm);
        if (!env.quiet)
            std::fprintf(stderr, "bench paged-host: %llu blocks, run %d of %d\n", static_cast<unsigned long long>(blocks),
                         run - env.warmup + 1, env.runs);
    }
    kvrt_paged_stats st = KVRT_PAGED_STATS_INIT;
    if (r == KVRT_SUCCESS) r = kvrt_cache_paged_get_stats(cache, &st);
    kvrt_cache_destroy(cache);
    if (r != KVRT_SUCCESS) return report("bench paged-host", r);

    Row out;
    out.name = "paged-host";
    out.params = {{"blocks", std::to_string(blocks)}, {"block", std::to_string(block)},
                  {"tokens", std::to_string(tokens)}, {"fill", std::to_string(fill_pct)}};
    // Host milliseconds of each shift call (the "ms" columns); the medians in us.
    for (double us : shift_us) out.m.ms.push_back(us / 1000.0);
    out.extra = {{"shift_us", median_of(shift_us)},
                 {"fork_us", median_of(fork_us)},
                 {"cow_append_us", median_of(cow_us)},
                 {"admit_us", median_of(admit_us)},
                 {"used_blocks", static_cast<double>(st.used_blocks)}};
    rows->push_back(out);
    return validation_status(env, "bench paged-host");
}

const bool registered = register_case(
    {"paged-host",
     "[--blocks N] [--block 16|32|64] [--tokens T] [--fill PCT]: host (wall) time of the paged layout's\n"
     "                 sequence operations on a pool of N blocks filled to PCT percent: shift_us\n"
     "                 (kvrt_cache_seq_add of a sequence's last block, with its rotation), fork_us,\n"
     "                 cow_append_us (one token appended to the fork: a copy-on-write of its last\n"
     "                 block), admit_us (a T-token prompt whose full blocks are cached). Medians over\n"
     "                 the runs. Defaults: N 65536, block 16, T 1000, PCT 50",
     run_paged_host,
     {{"--blocks", "4096"}, {"--blocks", "65536"}}});

}  // namespace

}  // namespace cli::bench
