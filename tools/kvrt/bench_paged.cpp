// `kvrt bench paged`: what the paged layout (kvrt_paged.h) saves and costs
// when many sequences share a long prompt.
//
// --seqs sequences each start with the same --prefix tokens and add --own
// tokens of their own. Three caches hold exactly the same tokens:
// - paged: a KVRT_LAYOUT_PAGED cache sized to fit them. The first sequence
//   is admitted and its rows written; every other one is admitted, maps the
//   prefix's registered blocks, and only its own tokens' rows are written;
// - cells (own copies): the cell layout, every sequence storing its whole
//   prompt, as an engine without prefix sharing does;
// - cells (seq_cp): the cell layout with the prefix stored once and shared by
//   kvrt_cache_seq_cp, llama.cpp's metadata sharing within one cache.
// Figures: device bytes of each cache (kvrt_cache_get_info), the wall time to
// bring a sequence in (paged: kvrt_cache_paged_admit plus writing its own
// tokens' rows; cells: kvrt_cache_store of its whole prompt; synchronous,
// median over the sequences after the first), the wall time of
// kvrt_cache_paged_fork, the GPU time of the first append after a fork of a
// sequence whose last block is partly filled (its copy-on-write), and the GPU
// time of one decode attention call (one query per sequence, every layer)
// over each cache, runs interleaved.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench.hpp"

namespace cli::bench {

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
    uint64_t seqs = 16, prefix = 2048, own = 128, block = 16, layers = 4, heads = 32, kv_heads = 8, dim = 128;
    kvrt_type type = KVRT_TYPE_F16;
    std::string type_name = "f16";
};

bool parse(const Args& args, Options* o) {
    std::string error;
    bool ok = args.u64("seqs", 16, &o->seqs, &error) && args.u64("prefix", 2048, &o->prefix, &error) &&
              args.u64("own", 128, &o->own, &error) && args.u64("block", 16, &o->block, &error) &&
              args.u64("layers", 4, &o->layers, &error) && args.u64("heads", 32, &o->heads, &error) &&
              args.u64("kv-heads", 8, &o->kv_heads, &error) && args.u64("head-dim", 128, &o->dim, &error);
    if (ok && (o->seqs < 2 || o->seqs > 1024 || o->prefix == 0 || o->prefix > (1u << 20) || o->own == 0 ||
               o->own > (1u << 20) || (o->block != 16 && o->block != 32 && o->block != 64) || o->layers == 0 ||
               o->layers > 256 || o->kv_heads == 0 || o->heads % o->kv_heads || o->heads > 256 || o->dim == 0 ||
               o->dim > 1024)) {
        error = "sizes out of range: 2..1024 sequences, prefix and own 1..2^20, block 16, 32 or 64, layers 1..256, "
                "heads a multiple of kv-heads up to 256, head-dim 1..1024";
        ok = false;
    }
    if (!ok) std::fprintf(stderr, "error: %s\n", error.c_str());
    return ok && type_option(args, "type", "f16", &o->type, &o->type_name);
}

struct Caches {
    kvrt_cache paged = nullptr, own = nullptr, shared = nullptr;
    ~Caches() {
        kvrt_cache_destroy(paged);
        kvrt_cache_destroy(own);
        kvrt_cache_destroy(shared);
    }
};

kvrt_cache_desc cache_desc(const Options& o, uint32_t capacity, uint32_t max_seqs) {
    kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
    d.n_layers = static_cast<uint32_t>(o.layers);
    d.n_heads = static_cast<uint32_t>(o.heads);
    d.n_kv_heads = static_cast<uint32_t>(o.kv_heads);
    d.head_dim_k = static_cast<uint32_t>(o.dim);
    d.capacity = capacity;
    d.max_seqs = max_seqs;
    d.type_k = d.type_v = o.type;
    return d;
}

// Rows [layer][token][row] of the tokens [first, first + n) of a prompt,
// from per-token random rows (`rows` holds the prompt's tokens, all layers).
std::vector<float> slice(const std::vector<float>& rows, uint64_t n_prompt, uint64_t first, uint64_t n, uint64_t layers,
                         uint64_t row) {
    std::vector<float> out(layers * n * row);
    for (uint64_t l = 0; l < layers; ++l)
        std::copy_n(rows.data() + (l * n_prompt + first) * row, n * row, out.data() + l * n * row);
    return out;
}

}  // namespace

int run_paged(Env& env, const Args& args, std::vector<Row>* rows) {
    Options o;
    if (!parse(args, &o)) return 2;
    const uint64_t B = o.block, n_prompt = o.prefix + o.own, row = o.kv_heads * o.dim;
    const uint32_t seqs = static_cast<uint32_t>(o.seqs);
    // Paged capacity: the prefix's full blocks once, each sequence's other
    // blocks, and 4 blocks for the fork measurements.
    const uint64_t shared_blocks = o.prefix / B;
    const uint64_t own_blocks = (n_prompt + B - 1) / B - shared_blocks;
    const uint64_t paged_capacity = B * (shared_blocks + o.seqs * own_blocks + 4);
    const uint64_t own_capacity = o.seqs * n_prompt, shared_capacity = o.prefix + o.seqs * o.own;
    if (own_capacity > (1u << 30)) {
        std::fprintf(stderr, "error: --seqs x (--prefix + --own) exceeds 2^30 cells\n");
        return 2;
    }
    Caches c;
    kvrt_paged_layout_desc pl = KVRT_PAGED_LAYOUT_DESC_INIT;
    pl.block_size = static_cast<uint32_t>(B);
    kvrt_cache_desc d = cache_desc(o, static_cast<uint32_t>(paged_capacity), seqs + 1);
    d.layout = KVRT_LAYOUT_PAGED;
    d.next = &pl;
    d.label = "bench paged";
    kvrt_result r = kvrt_cache_create(env.ctx, &d, &c.paged);
    d = cache_desc(o, static_cast<uint32_t>(own_capacity), seqs);
    d.label = "bench paged: cells, own copies";
    if (r == KVRT_SUCCESS) r = kvrt_cache_create(env.ctx, &d, &c.own);
    d = cache_desc(o, static_cast<uint32_t>(shared_capacity), seqs);
    d.label = "bench paged: cells, seq_cp";
    if (r == KVRT_SUCCESS) r = kvrt_cache_create(env.ctx, &d, &c.shared);
    if (r != KVRT_SUCCESS) return report("bench paged: create", r);

    // The prompts: one prefix, own tokens per sequence; rows per token.
    std::mt19937 rng(5);
    std::normal_distribution<float> normal;
    std::uniform_int_distribution<int32_t> token(0, 150000);
    std::vector<int32_t> prefix_ids(o.prefix), positions(n_prompt);
    for (int32_t& id : prefix_ids) id = token(rng);
    for (uint64_t i = 0; i < n_prompt; ++i) positions[i] = static_cast<int32_t>(i);
    std::vector<float> prefix_rows(o.layers * o.prefix * row);
    for (float& x : prefix_rows) x = normal(rng);

    std::vector<double> admit_ms, store_ms;
    uint64_t cached_tokens = 0;
    const Clock::time_point start = Clock::now();
    for (uint32_t s = 0; s < seqs && r == KVRT_SUCCESS; ++s) {
        std::vector<int32_t> ids = prefix_ids;
        for (uint64_t i = 0; i < o.own; ++i) ids.push_back(token(rng));
        // The prompt's rows [layer][token][row]: the prefix's, then its own.
        std::vector<float> prompt(o.layers * n_prompt * row);
        for (uint64_t l = 0; l < o.layers; ++l) {
            std::copy_n(prefix_rows.data() + l * o.prefix * row, o.prefix * row, prompt.data() + l * n_prompt * row);
            for (uint64_t i = o.prefix * row; i < n_prompt * row; ++i) prompt[l * n_prompt * row + i] = normal(rng);
        }
        const int32_t seq = static_cast<int32_t>(s);
        // Paged: admit, then write the rows of the tokens not cached.
        Clock::time_point t0 = Clock::now();
        uint32_t n_cached = 0;
        std::vector<uint32_t> cells(n_prompt);
        r = kvrt_cache_paged_admit(c.paged, seq, static_cast<uint32_t>(n_prompt), ids.data(), positions.data(), 0,
                                   &n_cached, cells.data());
        if (r == KVRT_SUCCESS) {
            const std::vector<float> rest = slice(prompt, n_prompt, n_cached, n_prompt - n_cached, o.layers, row);
            const kvrt_tensor_ref t = host_tensor(rest.data());
            r = kvrt_cache_write(c.paged, nullptr, static_cast<uint32_t>(n_prompt - n_cached), cells.data() + n_cached,
                                 -1, &t, &t);
        }
        if (s > 0) {
            admit_ms.push_back(ms_since(t0));
            cached_tokens += n_cached;
        }
        // Cells, own copies: the whole prompt.
        if (r == KVRT_SUCCESS) {
            std::vector<int32_t> seq_ids(n_prompt, seq);
            const kvrt_batch b = make_batch(static_cast<uint32_t>(n_prompt), positions.data(), seq_ids.data());
            const kvrt_tensor_ref t = host_tensor(prompt.data());
            t0 = Clock::now();
            r = kvrt_cache_store(c.own, nullptr, &b, -1, &t, &t, nullptr);
            if (s > 0) store_ms.push_back(ms_since(t0));
        }
        // Cells, seq_cp: the prefix once, shared; own tokens per sequence.
        if (r == KVRT_SUCCESS && s == 0) {
            std::vector<int32_t> seq_ids(o.prefix, 0);
            const kvrt_batch b = make_batch(static_cast<uint32_t>(o.prefix), positions.data(), seq_ids.data());
            const kvrt_tensor_ref t = host_tensor(prefix_rows.data());
            r = kvrt_cache_store(c.shared, nullptr, &b, -1, &t, &t, nullptr);
        } else if (r == KVRT_SUCCESS) {
            r = kvrt_cache_seq_cp(c.shared, 0, seq, 0, static_cast<int32_t>(o.prefix));
        }
        if (r == KVRT_SUCCESS) {
            std::vector<int32_t> seq_ids(o.own, seq);
            const kvrt_batch b = make_batch(static_cast<uint32_t>(o.own), positions.data() + o.prefix, seq_ids.data());
            const std::vector<float> rest = slice(prompt, n_prompt, o.prefix, o.own, o.layers, row);
            const kvrt_tensor_ref t = host_tensor(rest.data());
            r = kvrt_cache_store(c.shared, nullptr, &b, -1, &t, &t, nullptr);
        }
        if (!env.quiet && r == KVRT_SUCCESS)
            std::fprintf(stderr, "bench paged: sequence %u/%u in (%u tokens cached), %.1f s\n", s + 1, seqs, n_cached,
                         ms_since(start) / 1e3);
    }
    if (r != KVRT_SUCCESS) return report("bench paged: fill", r);

    // Fork: metadata only. Then the copy-on-write of a shared, partly filled
    // block: sequence 0 gets one more token, is forked, and the fork appends.
    const int32_t spare = static_cast<int32_t>(seqs);
    std::vector<double> fork_us;
    Measurement cow;
    TimedStream stream(env.ctx);
    r = stream.result();
    std::vector<float> one(o.layers * row, 0.5f);
    const int32_t next_pos = static_cast<int32_t>(n_prompt), next_id = 7;
    uint32_t cell = 0;
    if (r == KVRT_SUCCESS) r = kvrt_cache_paged_append(c.paged, nullptr, 0, 1, &next_id, &next_pos, &cell);
    if (r == KVRT_SUCCESS) {
        const kvrt_tensor_ref t = host_tensor(one.data());
        r = kvrt_cache_write(c.paged, nullptr, 1, &cell, -1, &t, &t);
    }
    const int32_t after = next_pos + 1;
    for (int run = 0; run < env.warmup + env.runs && r == KVRT_SUCCESS; ++run) {
        const Clock::time_point t0 = Clock::now();
        r = kvrt_cache_paged_fork(c.paged, 0, spare);
        const double us = ms_since(t0) * 1e3;
        if (r == KVRT_SUCCESS) r = kvrt_stream_begin(stream);
        if (r == KVRT_SUCCESS) {
            r = kvrt_cache_paged_append(c.paged, stream, spare, 1, &next_id, &after, &cell);
            const kvrt_result s = kvrt_stream_submit(stream);
            if (r == KVRT_SUCCESS) r = s;
            if (s == KVRT_SUCCESS) {
                const kvrt_result w = kvrt_stream_wait(stream, UINT64_MAX);
                if (r == KVRT_SUCCESS) r = w;
            }
        }
        if (r == KVRT_SUCCESS && run >= env.warmup) {
            fork_us.push_back(us);
            uint32_t n = 0;
            r = kvrt_stream_get_timings(stream, nullptr, &n);
            std::vector<kvrt_timing> tm(n, kvrt_timing KVRT_TIMING_INIT);
            if (r == KVRT_SUCCESS) r = kvrt_stream_get_timings(stream, tm.data(), &n);
            double ns = 0;
            for (uint32_t i = 0; i < n; ++i) ns += static_cast<double>(tm[i].ns);
            cow.ms.push_back(ns / 1e6);
        }
        if (r == KVRT_SUCCESS) r = kvrt_cache_seq_rm(c.paged, spare, -1, -1);
    }
    if (r == KVRT_SUCCESS) r = kvrt_cache_seq_rm(c.paged, 0, next_pos, -1);
    if (r != KVRT_SUCCESS) return report("bench paged: fork", r);

    // Decode attention: one query per sequence, every layer; runs interleaved.
    std::vector<int32_t> qpos(seqs, static_cast<int32_t>(n_prompt)), qseq(seqs);
    for (uint32_t s = 0; s < seqs; ++s) qseq[s] = static_cast<int32_t>(s);
    std::vector<float> q(seqs * o.heads * o.dim);
    for (float& x : q) x = normal(rng);
    kvrt_buffer qbuf = nullptr, obuf = nullptr;
    kvrt_buffer_desc bd = KVRT_BUFFER_DESC_INIT;
    bd.size = q.size() * 4;
    r = kvrt_buffer_create(env.ctx, &bd, &qbuf);
    if (r == KVRT_SUCCESS) r = kvrt_buffer_create(env.ctx, &bd, &obuf);
    if (r == KVRT_SUCCESS) r = kvrt_buffer_upload(qbuf, 0, q.data(), bd.size);
    const kvrt_cache subjects[3] = {c.paged, c.own, c.shared};
    std::vector<Measurement> attn;
    const kvrt_batch qb = make_batch(seqs, qpos.data(), qseq.data());
    if (r == KVRT_SUCCESS)
        r = measure_attention_interleaved(env, stream, {c.paged, c.own, c.shared}, static_cast<uint32_t>(o.layers), qb,
                                          buffer_tensor(qbuf, 0), buffer_output(obuf, 0), &attn);
    kvrt_buffer_destroy(qbuf);
    kvrt_buffer_destroy(obuf);
    if (r != KVRT_SUCCESS) return report("bench paged: attention", r);

    kvrt_cache_info info[3] = {KVRT_CACHE_INFO_INIT, KVRT_CACHE_INFO_INIT, KVRT_CACHE_INFO_INIT};
    for (int i = 0; i < 3 && r == KVRT_SUCCESS; ++i) r = kvrt_cache_get_info(subjects[i], &info[i]);
    kvrt_paged_stats st = KVRT_PAGED_STATS_INIT;
    if (r == KVRT_SUCCESS) r = kvrt_cache_paged_get_stats(c.paged, &st);
    if (r != KVRT_SUCCESS) return report("bench paged: info", r);

    const char* names[3] = {"paged", "cells-own", "cells-seq_cp"};
    const double admit = median_of(admit_ms), store = median_of(store_ms);
    for (int i = 0; i < 3; ++i) {
        Row out;
        out.name = "paged";
        out.params = {{"layout", names[i]},       {"type", o.type_name},
                      {"seqs", std::to_string(o.seqs)}, {"prefix", std::to_string(o.prefix)},
                      {"own", std::to_string(o.own)},   {"block", std::to_string(B)},
                      {"layers", std::to_string(o.layers)}};
        out.m = attn[i];
        out.bytes = static_cast<double>(info[i].bytes_per_token) * static_cast<double>(n_prompt) * o.seqs;
        out.extra = {{"device_mib", static_cast<double>(info[i].device_bytes) / (1 << 20)},
                     {"bytes_vs_own", static_cast<double>(info[i].device_bytes) / static_cast<double>(info[1].device_bytes)},
                     {"attn_vs_paged", attn[i].median() / attn[0].median()}};
        if (i == 0)
            out.extra.insert(out.extra.end(), {{"admit_ms", admit},
                                               {"cached_per_seq", static_cast<double>(cached_tokens) / (o.seqs - 1)},
                                               {"fork_us", median_of(fork_us)},
                                               {"cow_append_ms", cow.median()},
                                               {"used_blocks", static_cast<double>(st.used_blocks)},
                                               {"shared_blocks", static_cast<double>(st.shared_blocks)}});
        if (i == 1) out.extra.push_back({"store_ms", store});
        rows->push_back(out);
    }
    if (!env.quiet)
        std::fprintf(stderr,
                     "bench paged: device bytes %.3fx the own copies (%.3fx seq_cp); bringing a sequence in: admit + "
                     "own rows %.2f ms vs storing its prompt %.2f ms; fork %.1f us; decode attention %.2fx the own "
                     "copies' and %.2fx seq_cp's time\n",
                     static_cast<double>(info[0].device_bytes) / static_cast<double>(info[1].device_bytes),
                     static_cast<double>(info[0].device_bytes) / static_cast<double>(info[2].device_bytes), admit,
                     store, median_of(fork_us), attn[0].median() / attn[1].median(),
                     attn[0].median() / attn[2].median());
    return validation_status(env, "bench paged");
}

namespace {

const bool registered = register_case(
    {"paged",
     "[--seqs N] [--prefix P] [--own T] [--block 16|32|64] [--layers L] [--heads H] [--kv-heads K]\n"
     "                 [--head-dim D] [--type f16|q8_0|q4_0|...]: N sequences sharing a P-token prompt\n"
     "                 prefix, T own tokens each, in a paged cache and in two cell caches (every\n"
     "                 sequence its own copy; the prefix shared by seq_cp). Per layout: device_mib\n"
     "                 and bytes_vs_own (kvrt_cache_get_info), median/min ms of one decode\n"
     "                 attention (one query per sequence, all L layers; runs interleaved) and\n"
     "                 attn_vs_paged. paged: admit_ms (kvrt_cache_paged_admit + writing the\n"
     "                 uncached rows, wall, median over sequences 2..N), cached_per_seq, fork_us\n"
     "                 (wall), cow_append_ms (GPU time of the first append after a fork, a\n"
     "                 copy-on-write), used and shared blocks. cells-own: store_ms (storing a\n"
     "                 whole prompt, wall). Defaults: N 16, P 2048, T 128, block 16, L 4, H 32,\n"
     "                 K 8, D 128, f16",
     run_paged,
     {{"--seqs", "4", "--prefix", "256", "--own", "32", "--layers", "2", "--heads", "8", "--kv-heads", "2",
       "--head-dim", "64"}}});

}  // namespace

}  // namespace cli::bench
