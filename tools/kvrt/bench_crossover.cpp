// `kvrt bench memory-decode`: the per-token decode cost of the fixed-capacity
// memory against decode attention over a cell cache of N tokens, and where the
// memory overtakes it.
//
// Decode attention reads every cached token's K and V, so its cost grows with
// the context; the memory's update + read costs the same whatever the number
// of tokens it absorbed. For one model shape the case measures, with GPU
// timestamps:
//
//   (a) kvrt_memory_update_read of 1 token over all heads of one layer (the
//       memory's whole per-token work: update the state, then read it);
//   (b) kvrt_cache_attention of 1 query (at position N-1) over N filled cells
//       of one layer (the store of the new token's K/V is not included).
//
// One cache of the largest N is filled in order, and each N is measured when
// the cache holds exactly N tokens, so attention reads N cells (kvrt reads up
// to the highest used cell). (a) is measured again at every N, right after
// (b), so that both see the same machine load; its rows show that it stays
// flat. K/V and inputs are random: neither kernel's time depends on values.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench.hpp"
#include "kv_types.hpp"

namespace cli::bench {

namespace {

struct Options {
    uint64_t heads = 32, kv_heads = 8, head_dim = 128, slots = 2048;
    std::vector<uint64_t> tokens;
    std::string type = "f16";
    kvrt_type kv_type = KVRT_TYPE_F16;
    kvrt_type state = KVRT_TYPE_F32;
};

bool parse(const Args& args, Options* o) {
    std::string error;
    bool ok = args.u64("heads", 32, &o->heads, &error) && args.u64("kv-heads", 8, &o->kv_heads, &error) &&
              args.u64("head-dim", 128, &o->head_dim, &error) && args.u64("slots", 2048, &o->slots, &error);
    std::stringstream list(args.str("tokens", "512,2048,4096,8192,16384"));
    for (std::string item; ok && std::getline(list, item, ',');) {
        char* end = nullptr;
        const unsigned long long v = std::strtoull(item.c_str(), &end, 10);
        if (item.empty() || *end || item[0] == '-' || v == 0 || v > (1u << 22)) {
            error = "--tokens must be a comma-separated list of token counts from 1 to 2^22";
            ok = false;
        }
        o->tokens.push_back(v);
    }
    if (ok && !type_option(args, "type", "f16", &o->kv_type, &o->type)) return false;
    if (ok && !parse_type(args.str("state", "f32"), "state", &o->state)) return false;
    if (ok && o->state != KVRT_TYPE_F32 && o->state != KVRT_TYPE_F16) {
        error = "--state must be f32 or f16";
        ok = false;
    }
    if (ok && (o->heads == 0 || o->kv_heads == 0 || o->heads % o->kv_heads || o->heads > 256 || o->head_dim == 0 ||
               o->head_dim > 1024 || o->head_dim % 8 || o->slots == 0 || o->slots > (1u << 20) ||
               o->tokens.empty() || o->tokens.size() > 16)) {
        error = "sizes out of range (heads a multiple of kv-heads, up to 256; head dim a multiple of 8 up to 1024; "
                "1 to 16 token counts)";
        ok = false;
    }
    if (!ok) std::fprintf(stderr, "error: %s\n", error.c_str());
    std::sort(o->tokens.begin(), o->tokens.end());
    o->tokens.erase(std::unique(o->tokens.begin(), o->tokens.end()), o->tokens.end());
    return ok;
}

// Every handle of the case, destroyed at scope exit.
struct Resources {
    kvrt_cache cache = nullptr;
    kvrt_memory memory = nullptr;
    kvrt_buffer wq = nullptr, wv = nullptr, q = nullptr, mem_out = nullptr, attn_q = nullptr, attn_out = nullptr;
    ~Resources() {
        for (kvrt_buffer b : {wq, wv, q, mem_out, attn_q, attn_out}) kvrt_buffer_destroy(b);
        kvrt_memory_destroy(memory);
        kvrt_cache_destroy(cache);
    }
};

// A device buffer of `count` f32 values, random when `rng` is given.
kvrt_result make_buffer(kvrt_context ctx, uint64_t count, std::mt19937* rng, const char* label, kvrt_buffer* out) {
    kvrt_buffer_desc bd = KVRT_BUFFER_DESC_INIT;
    bd.size = count * sizeof(float);
    bd.label = label;
    kvrt_result r = kvrt_buffer_create(ctx, &bd, out);
    if (r != KVRT_SUCCESS || !rng) return r;
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> v(count);
    for (float& x : v) x = nd(*rng);
    return kvrt_buffer_upload(*out, 0, v.data(), bd.size);
}

// Stores positions [from, to) of sequence 0 into layer 0 of the cache, in
// chunks of `rows.size() / row` tokens, all with the K/V of `rows`.
kvrt_result fill(kvrt_cache cache, uint64_t from, uint64_t to, const std::vector<float>& rows, size_t row) {
    const uint64_t chunk = rows.size() / row;
    kvrt_result r = KVRT_SUCCESS;
    for (uint64_t p = from; p < to && r == KVRT_SUCCESS; p += chunk) {
        const uint32_t n = static_cast<uint32_t>(std::min(chunk, to - p));
        std::vector<int32_t> pos(n), seq(n, 0);
        for (uint32_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(p + i);
        const kvrt_batch b = make_batch(n, pos.data(), seq.data());
        const kvrt_tensor_ref t = host_tensor(rows.data());
        r = kvrt_cache_store(cache, nullptr, &b, 0, &t, &t, nullptr);
    }
    return r;
}

// The token count where a straight line fitted (least squares) to the
// attention times meets the memory's time; 0 when attention does not grow.
double crossover_estimate(const std::vector<uint64_t>& tokens, const std::vector<double>& attn_ms, double mem_ms) {
    const double n = static_cast<double>(tokens.size());
    if (tokens.size() < 2) return 0;
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (size_t i = 0; i < tokens.size(); ++i) {
        const double x = static_cast<double>(tokens[i]);
        sx += x;
        sy += attn_ms[i];
        sxx += x * x;
        sxy += x * attn_ms[i];
    }
    const double slope = (n * sxy - sx * sy) / (n * sxx - sx * sx);
    if (!(slope > 0)) return 0;
    const double intercept = (sy - slope * sx) / n;
    return std::max(0.0, (mem_ms - intercept) / slope);
}

int run_crossover(Env& env, const Args& args, std::vector<Row>* rows) {
    Options o;
    if (!parse(args, &o)) return 2;
    const uint64_t max_tokens = o.tokens.back();
    Resources res;
    std::mt19937 rng(1);

    // (a) The memory: one layer, every query head, keys of the head dim.
    kvrt_memory_desc md = KVRT_MEMORY_DESC_INIT;
    md.n_layers = 1;
    md.n_heads = static_cast<uint32_t>(o.heads);
    md.n_slots = static_cast<uint32_t>(o.slots);
    md.key_dim = md.value_dim = static_cast<uint32_t>(o.head_dim);
    md.state_type = o.state;
    kvrt_memory_init keys = KVRT_MEMORY_INIT_INIT;
    keys.source = KVRT_MEMORY_SOURCE_SEED;
    keys.seed = 1;
    md.keys = &keys;
    md.label = "bench memory-decode memory";
    kvrt_memory_estimate estimate_out = KVRT_MEMORY_ESTIMATE_INIT;
    kvrt_result r = kvrt_memory_estimate_size(env.ctx, &md, &estimate_out);
    const uint64_t memory_bytes = estimate_out.device_bytes;
    if (r == KVRT_SUCCESS) r = kvrt_memory_create(env.ctx, &md, &res.memory);
    const uint64_t row = o.heads * o.head_dim;  // one token of wq, wv, q or reads
    if (r == KVRT_SUCCESS) r = make_buffer(env.ctx, row, &rng, "bench memory-decode wq", &res.wq);
    if (r == KVRT_SUCCESS) r = make_buffer(env.ctx, row, &rng, "bench memory-decode wv", &res.wv);
    if (r == KVRT_SUCCESS) r = make_buffer(env.ctx, row, &rng, "bench memory-decode q", &res.q);
    if (r == KVRT_SUCCESS) r = make_buffer(env.ctx, row, nullptr, "bench memory-decode reads", &res.mem_out);

    // (b) The cell cache: one layer, the largest N cells, filled as we go.
    kvrt_cache_desc cd = KVRT_CACHE_DESC_INIT;
    cd.n_layers = 1;
    cd.n_heads = static_cast<uint32_t>(o.heads);
    cd.n_kv_heads = static_cast<uint32_t>(o.kv_heads);
    cd.head_dim_k = static_cast<uint32_t>(o.head_dim);
    cd.capacity = static_cast<uint32_t>(max_tokens);
    cd.type_k = cd.type_v = o.kv_type;
    kvrt_static_scales_desc scales = KVRT_STATIC_SCALES_DESC_INIT;
    cd.next = bench_scales(cd.type_k, cd.type_v, &scales);
    cd.label = "bench memory-decode cache";
    if (r == KVRT_SUCCESS) r = kvrt_cache_create(env.ctx, &cd, &res.cache);
    if (r == KVRT_SUCCESS) r = make_buffer(env.ctx, row, &rng, "bench memory-decode attention q", &res.attn_q);
    if (r == KVRT_SUCCESS) r = make_buffer(env.ctx, row, nullptr, "bench memory-decode attention out", &res.attn_out);
    TimedStream s(env.ctx);
    if (r == KVRT_SUCCESS) r = s.result();
    if (r != KVRT_SUCCESS) return report("bench memory-decode: setup", r);

    // One chunk of random K/V rows, stored over and over.
    const size_t kv_row = static_cast<size_t>(o.kv_heads * o.head_dim);
    std::vector<float> kv(256 * kv_row);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (float& x : kv) x = nd(rng);

    const kvrt_tensor_ref wq = buffer_tensor(res.wq, 0), wv = buffer_tensor(res.wv, 0), mq = buffer_tensor(res.q, 0);
    const kvrt_output_ref mout = buffer_output(res.mem_out, 0);
    kvrt_memory_batch mb = KVRT_MEMORY_BATCH_INIT;
    mb.n_tokens = 1;
    mb.layer = 0;
    mb.wq = &wq;
    mb.wv = &wv;
    mb.q = &mq;
    mb.out = &mout;
    const kvrt_tensor_ref qr = buffer_tensor(res.attn_q, 0);
    const kvrt_output_ref orf = buffer_output(res.attn_out, 0);

    std::vector<Measurement> attn(o.tokens.size()), mem(o.tokens.size());
    uint64_t filled = 0;
    for (size_t i = 0; i < o.tokens.size() && r == KVRT_SUCCESS; ++i) {
        const uint64_t n = o.tokens[i];
        if (!env.quiet) std::fprintf(stderr, "bench memory-decode: %llu tokens\n", static_cast<unsigned long long>(n));
        r = fill(res.cache, filled, n, kv, kv_row);
        filled = n;
        const int32_t pos = static_cast<int32_t>(n - 1), seq = 0;
        const kvrt_batch query = make_batch(1, &pos, &seq);
        if (r == KVRT_SUCCESS)
            r = measure(
                env, s, [&] { return kvrt_cache_attention(res.cache, s, 0, &query, &qr, &orf, nullptr); },
                "attention", &attn[i]);
        if (r == KVRT_SUCCESS)
            r = measure(env, s, [&] { return kvrt_memory_update_read(res.memory, s, &mb); }, "memory_update_read",
                        &mem[i]);
    }
    kvrt_cache_info info = KVRT_CACHE_INFO_INIT;
    if (r == KVRT_SUCCESS) r = kvrt_cache_get_info(res.cache, &info);
    if (r != KVRT_SUCCESS) return report("bench memory-decode", r);

    // The memory's cost is one figure: the median of its runs at every N.
    Measurement all_mem;
    std::vector<double> attn_ms;
    for (size_t i = 0; i < o.tokens.size(); ++i) {
        all_mem.ms.insert(all_mem.ms.end(), mem[i].ms.begin(), mem[i].ms.end());
        attn_ms.push_back(attn[i].median());
    }
    const double mem_ms = all_mem.median();
    const double estimate = crossover_estimate(o.tokens, attn_ms, mem_ms);
    for (size_t i = 0; i < o.tokens.size(); ++i) {
        const double kv_bytes = static_cast<double>(info.bytes_per_token) * static_cast<double>(o.tokens[i]);
        Row out;
        out.name = "memory-decode";
        out.params = {{"tokens", std::to_string(o.tokens[i])},
                      {"heads", std::to_string(o.heads)},
                      {"kv_heads", std::to_string(o.kv_heads)},
                      {"head_dim", std::to_string(o.head_dim)},
                      {"type", o.type},
                      {"slots", std::to_string(o.slots)},
                      {"cheaper", mem[i].median() < attn[i].median() ? "MEMORY" : "attn"}};
        out.m = attn[i];
        out.bytes = kv_bytes;
        out.extra = {{"memory_ms", mem[i].median()},
                     {"attn_over_memory", attn[i].median() / mem[i].median()},
                     {"kv_mib", kv_bytes / (1 << 20)},
                     {"memory_mib", static_cast<double>(memory_bytes) / (1 << 20)},
                     {"crossover_est", estimate}};
        rows->push_back(out);
    }
    if (!env.quiet) {
        size_t first = o.tokens.size();
        for (size_t i = 0; i < o.tokens.size() && first == o.tokens.size(); ++i)
            if (mem[i].median() < attn[i].median()) first = i;
        if (first < o.tokens.size())
            std::fprintf(stderr, "bench memory-decode: the memory (%.3f ms per token) is cheaper from %llu tokens on\n",
                         mem_ms, static_cast<unsigned long long>(o.tokens[first]));
        else
            std::fprintf(stderr, "bench memory-decode: attention stays cheaper than the memory (%.3f ms per token) "
                                 "up to %llu tokens\n", mem_ms, static_cast<unsigned long long>(max_tokens));
        if (estimate > 0)
            std::fprintf(stderr, "bench memory-decode: a line fitted to the attention times meets it at about %.0f "
                                 "tokens\n", estimate);
    }
    return 0;
}

const bool registered = register_case(
    {"memory-decode",
     "[--heads H] [--kv-heads K] [--head-dim D] [--slots M] [--type f16|q8_0|q4_0|f32]\n"
     "                 [--tokens N[,N2...]] [--state f32|f16]:\n"
     "                 per-token decode cost of the fixed-capacity memory against attention over N\n"
     "                 cached tokens. One row per N: median/min ms and GB/s are those of\n"
     "                 kvrt_cache_attention of 1 query over N filled cells (H query heads, K KV\n"
     "                 heads of dim D, K/V type); memory_ms the median of kvrt_memory_update_read\n"
     "                 of 1 token (H heads, M slots, keys and values of D, state type), measured at\n"
     "                 each N. cheaper=MEMORY marks the rows where the memory costs less;\n"
     "                 crossover_est is where a line fitted to the attention times meets the\n"
     "                 memory's overall median. kv_mib: the cache's K/V bytes for N tokens;\n"
     "                 memory_mib: kvrt_memory_estimate_size. Defaults: H 32, K 8, D 128, M 2048,\n"
     "                 f16, N 512,2048,4096,8192,16384, f32 state",
     run_crossover,
     {{"--tokens", "512,4096,16384"}}});

}  // namespace

}  // namespace cli::bench
