// `kvrt bench window`: what a window group (kvrt_window_layout_desc) saves
// and costs for sliding-window layers.
//
// --seqs sequences each hold --tokens tokens in two caches of windowed layers
// (every layer's window --window): one keeps a row for every cell (the
// window a mask only), the other keeps its rows in a window group. Both are
// filled the same way: a prompt of --tokens - --decode tokens per sequence
// in batches of 512 tokens, then --decode steps of one token per sequence (the group
// drops the rows out of every window as it goes). Figures: device bytes of
// each cache (kvrt_cache_get_info), the wall time of one decode step's
// kvrt_cache_store (all sequences, all layers; synchronous, median over the
// decode steps), and the GPU time of one decode attention call (one query
// per sequence, every layer) over each cache, runs interleaved. With
// --layout paged both caches are paged (blocks of 16 tokens).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench.hpp"

namespace cli::bench {

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
    uint64_t seqs = 4, tokens = 16384, window = 4096, decode = 32, layers = 4, heads = 32, kv_heads = 8, dim = 128;
    kvrt_type type = KVRT_TYPE_F16;
    std::string type_name = "f16";
    std::string layout = "cells";
};

bool parse(const Args& args, Options* o) {
    std::string error;
    bool ok = args.u64("seqs", 4, &o->seqs, &error) && args.u64("tokens", 16384, &o->tokens, &error) &&
              args.u64("window", 4096, &o->window, &error) && args.u64("decode", 32, &o->decode, &error) &&
              args.u64("layers", 4, &o->layers, &error) && args.u64("heads", 32, &o->heads, &error) &&
              args.u64("kv-heads", 8, &o->kv_heads, &error) && args.u64("head-dim", 128, &o->dim, &error);
    if (ok && (o->seqs == 0 || o->seqs > 256 || o->tokens == 0 || o->seqs * o->tokens > (1u << 30) ||
               o->window == 0 || o->window > (1u << 30) || o->decode == 0 || o->decode > o->tokens ||
               o->layers == 0 || o->layers > 256 || o->kv_heads == 0 || o->heads % o->kv_heads || o->heads > 256 ||
               o->dim == 0 || o->dim > 1024)) {
        error = "sizes out of range: 1..256 sequences of 1.. tokens (seqs x tokens at most 2^30), a window of "
                "1..2^30, 1..tokens decode steps, layers 1..256, heads a multiple of kv-heads up to 256, head-dim "
                "1..1024";
        ok = false;
    }
    o->layout = args.str("layout", "cells");
    if (ok && o->layout != "cells" && o->layout != "paged") {
        error = "--layout is cells or paged, not '" + o->layout + "'";
        ok = false;
    }
    if (!ok) std::fprintf(stderr, "error: %s\n", error.c_str());
    return ok && type_option(args, "type", "f16", &o->type, &o->type_name);
}

struct Caches {
    kvrt_cache c[2] = {};
    ~Caches() {
        for (kvrt_cache x : c) kvrt_cache_destroy(x);
    }
};

}  // namespace

int run_window(Env& env, const Args& args, std::vector<Row>* rows) {
    Options o;
    if (!parse(args, &o)) return 2;
    const uint64_t row = o.kv_heads * o.dim;
    const uint32_t seqs = static_cast<uint32_t>(o.seqs);
    const std::vector<uint32_t> windows(o.layers, static_cast<uint32_t>(o.window));
    Caches c;
    kvrt_window_layout_desc group = KVRT_WINDOW_LAYOUT_DESC_INIT;
    const bool paged = o.layout == "paged";
    kvrt_paged_layout_desc blocks[2] = {KVRT_PAGED_LAYOUT_DESC_INIT, KVRT_PAGED_LAYOUT_DESC_INIT};
    constexpr uint64_t B = 16;
    kvrt_result r = KVRT_SUCCESS;
    for (int i = 0; i < 2 && r == KVRT_SUCCESS; ++i) {
        kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
        d.n_layers = static_cast<uint32_t>(o.layers);
        d.n_heads = static_cast<uint32_t>(o.heads);
        d.n_kv_heads = static_cast<uint32_t>(o.kv_heads);
        d.head_dim_k = static_cast<uint32_t>(o.dim);
        // Paged: every sequence's tokens in whole blocks.
        d.capacity = static_cast<uint32_t>(o.seqs * (paged ? (o.tokens + B - 1) / B * B : o.tokens));
        d.max_seqs = seqs;
        d.type_k = d.type_v = o.type;
        d.layer_windows = windows.data();
        d.next = i ? &group : nullptr;
        if (paged) {
            d.layout = KVRT_LAYOUT_PAGED;
            blocks[i].block_size = static_cast<uint32_t>(B);
            blocks[i].next = d.next;
            d.next = &blocks[i];
        }
        d.label = i ? "bench window: window group" : "bench window: every cell";
        r = kvrt_cache_create(env.ctx, &d, &c.c[i]);
    }
    if (r != KVRT_SUCCESS) return report("bench window: create", r);

    // The prompts, in batches of 512 tokens (the default group holds
    // max_seqs x W + 512 cells).
    std::mt19937 rng(11);
    std::normal_distribution<float> normal;
    const uint64_t prompt = o.tokens - o.decode, chunk = std::max<uint64_t>(1, 512 / o.seqs);
    const Clock::time_point start = Clock::now();
    std::vector<float> rows_in;
    for (uint64_t first = 0; first < prompt && r == KVRT_SUCCESS; first += chunk) {
        const uint64_t n = std::min(chunk, prompt - first);
        std::vector<int32_t> pos, ids;
        for (uint32_t s = 0; s < seqs; ++s)
            for (uint64_t i = 0; i < n; ++i) {
                pos.push_back(static_cast<int32_t>(first + i));
                ids.push_back(static_cast<int32_t>(s));
            }
        rows_in.resize(o.layers * pos.size() * row);
        for (float& x : rows_in) x = normal(rng);
        const kvrt_batch b = make_batch(static_cast<uint32_t>(pos.size()), pos.data(), ids.data());
        const kvrt_tensor_ref t = host_tensor(rows_in.data());
        for (int i = 0; i < 2 && r == KVRT_SUCCESS; ++i) r = kvrt_cache_store(c.c[i], nullptr, &b, -1, &t, &t, nullptr);
        if (!env.quiet && r == KVRT_SUCCESS && (first / chunk) % 32 == 31)
            std::fprintf(stderr, "bench window: prompts at %llu/%llu tokens, %.1f s\n",
                         static_cast<unsigned long long>(first + n), static_cast<unsigned long long>(prompt),
                         ms_since(start) / 1e3);
    }
    if (r != KVRT_SUCCESS) return report("bench window: prompts", r);

    // Decode steps: one token per sequence, both caches, synchronous stores.
    std::vector<double> store_ms[2];
    std::vector<int32_t> ids(seqs), pos(seqs);
    for (uint32_t s = 0; s < seqs; ++s) ids[s] = static_cast<int32_t>(s);
    rows_in.resize(o.layers * seqs * row);
    for (uint64_t step = 0; step < o.decode && r == KVRT_SUCCESS; ++step) {
        std::fill(pos.begin(), pos.end(), static_cast<int32_t>(prompt + step));
        for (float& x : rows_in) x = normal(rng);
        const kvrt_batch b = make_batch(seqs, pos.data(), ids.data());
        const kvrt_tensor_ref t = host_tensor(rows_in.data());
        for (int i = 0; i < 2 && r == KVRT_SUCCESS; ++i) {
            const Clock::time_point t0 = Clock::now();
            r = kvrt_cache_store(c.c[i], nullptr, &b, -1, &t, &t, nullptr);
            store_ms[i].push_back(ms_since(t0));
        }
    }
    if (r != KVRT_SUCCESS) return report("bench window: decode", r);

    // Decode attention at the last position: one query per sequence, every
    // layer; runs interleaved.
    std::fill(pos.begin(), pos.end(), static_cast<int32_t>(o.tokens - 1));
    std::vector<float> q(seqs * o.heads * o.dim);
    for (float& x : q) x = normal(rng);
    kvrt_buffer qbuf = nullptr, obuf = nullptr;
    kvrt_buffer_desc bd = KVRT_BUFFER_DESC_INIT;
    bd.size = q.size() * 4;
    r = kvrt_buffer_create(env.ctx, &bd, &qbuf);
    if (r == KVRT_SUCCESS) r = kvrt_buffer_create(env.ctx, &bd, &obuf);
    if (r == KVRT_SUCCESS) r = kvrt_buffer_upload(qbuf, 0, q.data(), bd.size);
    TimedStream stream(env.ctx);
    if (r == KVRT_SUCCESS) r = stream.result();
    std::vector<Measurement> attn;
    const kvrt_batch qb = make_batch(seqs, pos.data(), ids.data());
    if (r == KVRT_SUCCESS)
        r = measure_attention_interleaved(env, stream, {c.c[0], c.c[1]}, static_cast<uint32_t>(o.layers), qb,
                                          buffer_tensor(qbuf, 0), buffer_output(obuf, 0), &attn);
    kvrt_buffer_destroy(qbuf);
    kvrt_buffer_destroy(obuf);
    if (r != KVRT_SUCCESS) return report("bench window: attention", r);

    kvrt_cache_info info[2] = {KVRT_CACHE_INFO_INIT, KVRT_CACHE_INFO_INIT};
    for (int i = 0; i < 2 && r == KVRT_SUCCESS; ++i) r = kvrt_cache_get_info(c.c[i], &info[i]);
    if (r != KVRT_SUCCESS) return report("bench window: info", r);

    const char* names[2] = {"every-cell", "window-group"};
    for (int i = 0; i < 2; ++i) {
        Row out;
        out.name = "window";
        out.params = {{"layout", names[i]},
                      {"type", o.type_name},
                      {"cache", o.layout},
                      {"seqs", std::to_string(o.seqs)},
                      {"tokens", std::to_string(o.tokens)},
                      {"window", std::to_string(o.window)},
                      {"layers", std::to_string(o.layers)}};
        out.m = attn[i];
        // The rows a decode query's window holds, every layer.
        out.bytes = static_cast<double>(info[i].bytes_per_token) * static_cast<double>(std::min(o.window, o.tokens)) *
                    static_cast<double>(o.seqs);
        out.extra = {{"device_mib", static_cast<double>(info[i].device_bytes) / (1 << 20)},
                     {"bytes_vs_every_cell",
                      static_cast<double>(info[i].device_bytes) / static_cast<double>(info[0].device_bytes)},
                     {"attn_vs_every_cell", attn[i].median() / attn[0].median()},
                     {"store_ms", median_of(store_ms[i])}};
        rows->push_back(out);
    }
    if (!env.quiet)
        std::fprintf(stderr,
                     "bench window: device bytes %.3fx every cell's; decode attention %.2fx; a decode step's store "
                     "%.2f ms vs %.2f ms\n",
                     static_cast<double>(info[1].device_bytes) / static_cast<double>(info[0].device_bytes),
                     attn[1].median() / attn[0].median(), median_of(store_ms[1]), median_of(store_ms[0]));
    return validation_status(env, "bench window");
}

namespace {

const bool registered = register_case(
    {"window",
     "[--seqs N] [--tokens T] [--window W] [--decode D] [--layers L] [--heads H] [--kv-heads K]\n"
     "                 [--head-dim D] [--type f16|q8_0|q4_0|...] [--layout cells|paged]: N sequences of\n"
     "                 T tokens (a prompt of T - D tokens, then D decode steps) in layers of window W,\n"
     "                 in a cache that keeps every cell and in one with a window group\n"
     "                 (kvrt_window_layout_desc), both of the cell layout or both paged. Reports\n"
     "                 device_mib and bytes_vs_every_cell (kvrt_cache_get_info), median/min ms of one\n"
     "                 decode attention (one query per sequence, all L layers; runs interleaved;\n"
     "                 GB/s over the rows of the queries' windows) and attn_vs_every_cell, and\n"
     "                 store_ms (one decode step's synchronous store, wall, median).\n"
     "                 Defaults: N 4, T 16384, W 4096, D 32, L 4, H 32, K 8, D 128, f16",
     run_window,
     {}});

}  // namespace

}  // namespace cli::bench
