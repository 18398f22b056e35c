// `kvrt bench memory`: the fixed-capacity memory (update + read) per token,
// after a given number of tokens. The state's size does not depend on how many
// tokens it absorbed, so neither should the time per token: the case absorbs
// --tokens tokens first (untimed), then times update + read of the next
// --window tokens. With several token counts (--tokens 2048,65536) each gets
// its own memory and their timed runs are interleaved, so that a shared
// machine's load affects them alike and their ratio is meaningful.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench.hpp"
#include "kv_types.hpp"

namespace cli::bench {

namespace {

constexpr uint64_t kWaitNs = 3600ull * 1000 * 1000 * 1000;

struct Options {
    uint64_t slots = 2048, key_dim = 128, value_dim = 0, heads = 32, layers = 1, window = 512;
    std::vector<uint64_t> tokens;
    kvrt_type state = KVRT_TYPE_F32;
};

bool parse(const Args& args, Options* o) {
    std::string error;
    bool ok = args.u64("slots", 2048, &o->slots, &error) && args.u64("key-dim", 128, &o->key_dim, &error) &&
              args.u64("value-dim", 0, &o->value_dim, &error) && args.u64("heads", 32, &o->heads, &error) &&
              args.u64("layers", 1, &o->layers, &error) && args.u64("window", 512, &o->window, &error);
    std::stringstream list(args.str("tokens", "2048"));
    for (std::string item; ok && std::getline(list, item, ',');) {
        char* end = nullptr;
        const unsigned long long v = std::strtoull(item.c_str(), &end, 10);
        if (item.empty() || *end || item[0] == '-' || v > (1ull << 32)) {
            error = "--tokens must be a comma-separated list of token counts up to 2^32";
            ok = false;
        }
        o->tokens.push_back(v);
    }
    if (ok && !parse_type(args.str("state", "f32"), "state", &o->state)) return false;
    if (ok && o->state != KVRT_TYPE_F32 && o->state != KVRT_TYPE_F16) {
        error = "--state must be f32 or f16";
        ok = false;
    }
    if (!o->value_dim) o->value_dim = o->key_dim;
    const uint64_t limit = 1u << 20;
    if (ok && (o->slots == 0 || o->key_dim == 0 || o->heads == 0 || o->layers == 0 || o->window == 0 ||
               o->slots > limit || o->key_dim > limit || o->value_dim > limit || o->heads > 4096 ||
               o->layers > 4096 || o->window > limit || o->tokens.empty() || o->tokens.size() > 8)) {
        error = "sizes must be positive, and at most 8 token counts";
        ok = false;
    }
    if (!ok) std::fprintf(stderr, "error: %s\n", error.c_str());
    return ok;
}

// A device buffer of `count` random f32 values.
kvrt_result random_buffer(kvrt_context ctx, uint64_t count, uint32_t seed, kvrt_buffer* out) {
    kvrt_buffer_desc bd = KVRT_BUFFER_DESC_INIT;
    bd.size = count * 4;
    bd.label = "bench memory data";
    kvrt_result r = kvrt_buffer_create(ctx, &bd, out);
    if (r != KVRT_SUCCESS) return r;
    std::vector<float> v(count);
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (float& x : v) x = nd(rng);
    return kvrt_buffer_upload(*out, 0, v.data(), bd.size);
}

struct Buffers {
    kvrt_buffer wq = nullptr, wv = nullptr, q = nullptr, out = nullptr;
    ~Buffers() {
        for (kvrt_buffer b : {wq, wv, q, out}) kvrt_buffer_destroy(b);
    }
};

struct Memory {
    kvrt_memory mem = nullptr;
    uint64_t device_bytes = 0;
    ~Memory() { kvrt_memory_destroy(mem); }
};

int run_memory(Env& env, const Args& args, std::vector<Row>* rows) {
    Options o;
    if (!parse(args, &o)) return 2;
    kvrt_memory_desc desc = KVRT_MEMORY_DESC_INIT;
    desc.n_layers = static_cast<uint32_t>(o.layers);
    desc.n_heads = static_cast<uint32_t>(o.heads);
    desc.n_slots = static_cast<uint32_t>(o.slots);
    desc.key_dim = static_cast<uint32_t>(o.key_dim);
    desc.value_dim = static_cast<uint32_t>(o.value_dim);
    desc.state_type = o.state;
    kvrt_memory_init keys = KVRT_MEMORY_INIT_INIT;
    keys.source = KVRT_MEMORY_SOURCE_SEED;
    keys.seed = 1;
    desc.keys = &keys;
    desc.label = "bench memory";
    kvrt_memory_estimate estimate_out = KVRT_MEMORY_ESTIMATE_INIT;
    kvrt_result r = kvrt_memory_estimate_size(env.ctx, &desc, &estimate_out);
    const uint64_t estimate = estimate_out.device_bytes;
    if (r != KVRT_SUCCESS) return report("bench memory: estimate", r);

    const uint64_t w = o.window, values = o.layers * o.heads * w;
    Buffers in;
    r = random_buffer(env.ctx, values * o.key_dim, 1, &in.wq);
    if (r == KVRT_SUCCESS) r = random_buffer(env.ctx, values * o.value_dim, 2, &in.wv);
    if (r == KVRT_SUCCESS) r = random_buffer(env.ctx, values * o.key_dim, 3, &in.q);
    if (r == KVRT_SUCCESS) r = random_buffer(env.ctx, values * o.value_dim, 4, &in.out);
    TimedStream s(env.ctx);
    if (r == KVRT_SUCCESS) r = s.result();
    const kvrt_tensor_ref wq = buffer_tensor(in.wq, 0), wv = buffer_tensor(in.wv, 0), q = buffer_tensor(in.q, 0);
    const kvrt_output_ref out_ref = buffer_output(in.out, 0);
    kvrt_memory_batch batch = KVRT_MEMORY_BATCH_INIT;
    batch.layer = -1;
    batch.wq = &wq;
    batch.wv = &wv;
    batch.q = &q;
    batch.out = &out_ref;

    // One memory per token count, each absorbing its tokens first: one window
    // per submission, updates only (the state after N tokens does not depend
    // on the reads), untimed.
    std::vector<std::unique_ptr<Memory>> mems;
    for (size_t i = 0; i < o.tokens.size() && r == KVRT_SUCCESS; ++i) {
        mems.push_back(std::make_unique<Memory>());
        Memory& m = *mems.back();
        kvrt_context_stats before = KVRT_CONTEXT_STATS_INIT, after = KVRT_CONTEXT_STATS_INIT;
        kvrt_context_get_stats(env.ctx, &before);
        r = kvrt_memory_create(env.ctx, &desc, &m.mem);
        kvrt_context_get_stats(env.ctx, &after);
        m.device_bytes = after.device_bytes - before.device_bytes;
        for (uint64_t done = 0; r == KVRT_SUCCESS && done < o.tokens[i]; done += w) {
            batch.n_tokens = static_cast<uint32_t>(std::min(w, o.tokens[i] - done));
            r = kvrt_stream_begin(s);
            if (r == KVRT_SUCCESS) r = kvrt_memory_update(m.mem, s, &batch);
            if (r == KVRT_SUCCESS) r = kvrt_stream_submit(s);
            if (r == KVRT_SUCCESS) r = kvrt_stream_wait(s, kWaitNs);
            if (!env.quiet && r == KVRT_SUCCESS && (done / w) % 32 == 31)
                std::fprintf(stderr, "bench memory: %llu of %llu tokens absorbed\n",
                             static_cast<unsigned long long>(done + batch.n_tokens),
                             static_cast<unsigned long long>(o.tokens[i]));
        }
    }

    // Timed windows, interleaved across the memories.
    batch.n_tokens = static_cast<uint32_t>(w);
    std::vector<Row> out(o.tokens.size());
    Env warm = env, once = env;
    warm.runs = 0;
    once.warmup = 0;
    once.runs = 1;
    for (int run = -1; run < env.runs && r == KVRT_SUCCESS; ++run) {
        for (size_t i = 0; i < mems.size() && r == KVRT_SUCCESS; ++i) {
            Measurement m;
            r = measure(run < 0 ? warm : once, s, [&] { return kvrt_memory_update_read(mems[i]->mem, s, &batch); },
                        "memory_update_read", &m);
            out[i].m.ms.insert(out[i].m.ms.end(), m.ms.begin(), m.ms.end());
        }
    }
    if (r != KVRT_SUCCESS) return report("bench memory", r);
    for (size_t i = 0; i < mems.size(); ++i) {
        Row& row = out[i];
        row.name = "memory";
        row.params = {{"slots", std::to_string(o.slots)},   {"key", std::to_string(o.key_dim)},
                      {"value", std::to_string(o.value_dim)}, {"heads", std::to_string(o.heads)},
                      {"layers", std::to_string(o.layers)},  {"tokens", std::to_string(o.tokens[i])},
                      {"state", type_name(o.state)}};
        row.extra = {{"us_per_token", row.m.median() * 1000.0 / static_cast<double>(w)},
                     {"device_mib", static_cast<double>(mems[i]->device_bytes) / (1 << 20)},
                     {"estimate_mib", static_cast<double>(estimate) / (1 << 20)}};
        if (i > 0) row.extra.push_back({"vs_first", row.m.median() / out[0].m.median()});
        rows->push_back(row);
    }
    return 0;
}

const bool registered = register_case(
    {"memory",
     "[--slots M] [--key-dim E] [--value-dim D] [--heads H] [--layers L] [--tokens N[,N2...]] "
     "[--window W] [--state f32|f16]:\n"
     "                 fixed-capacity memory, update + read. Each memory first absorbs N tokens\n"
     "                 (untimed: kvrt_memory_update calls of W tokens; the state after N tokens\n"
     "                 does not depend on reads); then each timed run is one\n"
     "                 kvrt_memory_update_read call of the next W tokens over all L layers\n"
     "                 (512-token chunks), its GPU time from timestamps. Several N: one memory\n"
     "                 each, timed runs interleaved; vs_first = median / the first N's median.\n"
     "                 us_per_token = median / W. Defaults: M 2048, E 128, D = E, H 32, L 1,\n"
     "                 N 2048, W 512, f32 state. device_mib: the memory's device bytes\n"
     "                 (estimate_mib: kvrt_memory_estimate_size)",
     run_memory,
     {{"--slots", "1024", "--key-dim", "128", "--heads", "8", "--tokens", "2048,16384"}}});

}  // namespace

}  // namespace cli::bench
