// `kvrt bench static-append`: the cost of appending tokens to the static
// padded layout (SPEC 5), and what the reservation R buys.
//
// A static-layout cache of one sequence receives --tokens tokens, one
// kvrt_cache_store per token (all layers, f16 K/V from a device buffer or
// host memory), each its own submission and wait, as an engine's decode loop
// would. Each run starts from an empty sequence (kvrt_cache_seq_rm), so every
// run does the same work: the window fills, then slides whenever the
// reservation runs out. Its GPU time is the sum of the timestamps of all its
// submissions; its wall time covers recording, submission and waits.
//
// Rows moved: with W = S-1 and Rr = ceil(R*W) reserved rows, the window
// restarts at the region's start every P = Rr - W + 1 appends, copying the
// rows that stay in it (min(m*P - 1, W - 1) at restart m). The case checks
// kvrt_cache_static_get_stats against that closed form after every run. With
// R = 2 a slide of W-1 rows comes every W+1 tokens; with R = 1 every append
// slides the whole window.
//
// Several reserves (--reserve 2,1): one cache each, runs interleaved so that a
// shared machine's load affects them alike and their ratio is meaningful.
// `ring` in the list is the smart-mask style (KVRT_STATIC_STYLE_SMART_MASK): a
// ring of S-1 rows that never slides, so it moves no row (checked).
//
// Speculative decoding (--drafts D > 1): each step appends D draft tokens in
// one kvrt_cache_store, then rejects all but the first (kvrt_cache_seq_rm of
// the newest D-1, synchronous), so that a run still advances N positions. A
// rejection moves the window back, or copies rows; the counters then include
// those copies, and the closed form (single appends) is not checked. GPU time
// counts the stores' submissions; wall time includes the removals.
#include <algorithm>
#include <chrono>
#include <cmath>
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

constexpr uint64_t kWaitNs = 600ull * 1000 * 1000 * 1000;
// Distinct tokens of K/V data, reused round robin (times do not depend on values).
constexpr uint32_t kDistinctTokens = 64;

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Options {
    uint64_t seq_len = 2048, layers = 4, kv_heads = 8, head_dim = 128, tokens = 0, drafts = 1;
    std::vector<double> reserves;
    std::vector<std::string> reserve_text;
    kvrt_type type = KVRT_TYPE_F16;
    std::string type_name = "f16";
    bool host_input = false;
    int runs = 3, warmup = 1;
};

bool parse(const Env& env, const Args& args, Options* o) {
    std::string error;
    bool ok = args.u64("seq-len", 2048, &o->seq_len, &error) && args.u64("layers", 4, &o->layers, &error) &&
              args.u64("kv-heads", 8, &o->kv_heads, &error) && args.u64("head-dim", 128, &o->head_dim, &error);
    if (ok && (o->seq_len < 2 || o->seq_len > (1u << 20))) {
        error = "--seq-len must be 2..2^20";
        ok = false;
    }
    if (ok) ok = args.u64("tokens", 4 * (o->seq_len - 1), &o->tokens, &error);
    if (ok) ok = args.u64("drafts", 1, &o->drafts, &error);
    if (ok && (o->drafts == 0 || o->drafts > std::min<uint64_t>(kDistinctTokens, o->seq_len - 1))) {
        error = "--drafts must be 1..min(64, seq-len - 1)";
        ok = false;
    }
    std::stringstream list(args.str("reserve", "2"));
    for (std::string item; ok && std::getline(list, item, ',');) {
        char* end = nullptr;
        const double r = item == "ring" ? 0.0 : std::strtod(item.c_str(), &end);
        if (item != "ring" && (item.empty() || *end || !std::isfinite(r) || r < 1.0 || r > 64.0)) {
            error = "--reserve must be a comma-separated list of decimals from 1 to 64 or 'ring', not '" +
                    args.str("reserve") + "'";
            ok = false;
        }
        o->reserves.push_back(r);
        o->reserve_text.push_back(item);
    }
    if (ok && (o->reserves.empty() || o->reserves.size() > 8)) {
        error = "--reserve takes 1 to 8 values";
        ok = false;
    }
    o->type_name = args.str("type", "f16");
    if (ok && (kvrt_type_from_name(o->type_name.c_str(), &o->type) != KVRT_SUCCESS || !value_bytes(o->type))) {
        error = "--type must be a type of one value per block (f16, f32, u8_static or u16_static), not '" +
                o->type_name + "'";
        ok = false;
    }
    if (ok) o->type_name = type_name(o->type);
    const std::string input = args.str("input", "device");
    if (ok && input != "device" && input != "host") {
        error = "--input must be device or host, not '" + input + "'";
        ok = false;
    }
    o->host_input = input == "host";
    if (ok && (o->layers == 0 || o->layers > 256 || o->kv_heads == 0 || o->kv_heads > 256 || o->head_dim == 0 ||
               o->head_dim > 1024 || o->head_dim * value_bytes(o->type) % 4 || o->tokens == 0 ||
               o->tokens > (1u << 24))) {
        error = "sizes out of range: layers and kv-heads 1..256, head-dim 1..1024 with rows of a multiple of 4 bytes, "
                "tokens 1..2^24";
        ok = false;
    }
    if (!ok) std::fprintf(stderr, "error: %s\n", error.c_str());
    // Each run appends N tokens, so fewer runs than the framework's default.
    o->runs = args.has("runs") ? env.runs : 3;
    o->warmup = args.has("warmup") ? env.warmup : 1;
    return ok;
}

// The closed form of the rows each region's slides copy over `tokens`
// single-row appends from empty (see the top of this file), and the number of
// slides that copy anything.
struct Expected {
    uint64_t rows_moved = 0, slides = 0, period = 0;
};

Expected expected(uint64_t seq_len, double reserve, uint64_t tokens) {
    Expected e;
    if (reserve == 0.0) {  // the smart-mask ring: never a slide
        e.period = tokens;
        return e;
    }
    const uint64_t w = seq_len - 1;
    const uint64_t rr = static_cast<uint64_t>(std::ceil(reserve * static_cast<double>(w)));
    e.period = rr - w + 1;                  // free appends, then a restart
    const uint64_t n = tokens / e.period;   // restarts
    const uint64_t m = std::min(n, w / e.period);  // restarts before the window is full: m*P - 1 rows
    e.rows_moved = e.period * m * (m + 1) / 2 - m + (n - m) * (w - 1);
    e.slides = w > 1 && n > 0 ? n - (e.period == 1 ? 1 : 0) : 0;  // R = 1: the first append restarts an empty window
    return e;
}

// One reserve's cache and figures.
struct Subject {
    double reserve = 2.0;
    std::string reserve_text;
    kvrt_cache cache = nullptr;
    Measurement gpu, wall;  // per run, ms
    kvrt_static_stats stats = KVRT_STATIC_STATS_INIT;
    ~Subject() { kvrt_cache_destroy(cache); }
};

struct Input {
    kvrt_buffer k = nullptr, v = nullptr;
    std::vector<uint16_t> host_k, host_v;
    ~Input() {
        kvrt_buffer_destroy(k);
        kvrt_buffer_destroy(v);
    }
};

// Appends `tokens` tokens to an empty sequence 0 of `sub`, one submission
// each; adds the run's GPU and wall milliseconds when `timed`.
kvrt_result append_run(const Env& env, const Options& o, const Input& in, kvrt_stream stream, Subject* sub,
                       uint64_t tokens, bool timed, const std::string& what) {
    kvrt_result r = kvrt_cache_seq_rm(sub->cache, 0, -1, -1);
    const uint64_t row = o.kv_heads * o.head_dim * 2;  // f16 input
    const uint64_t distinct = std::min<uint64_t>(std::max(tokens, o.drafts), kDistinctTokens);
    const uint32_t d = static_cast<uint32_t>(o.drafts);  // tokens per store
    kvrt_tensor_ref k = buffer_tensor(in.k, 0, KVRT_TYPE_F16, 0, distinct * row);
    kvrt_tensor_ref v = k;
    v.buffer = in.v;
    if (o.host_input) {
        k.buffer = v.buffer = nullptr;
        k.layer_stride = v.layer_stride = 0;  // host data: layers packed, n_tokens (1) rows each
    }
    std::vector<uint16_t> host_k, host_v;
    if (o.host_input) {
        host_k.resize(o.layers * d * row / 2);
        host_v.resize(host_k.size());
    }
    const std::vector<int32_t> seqs(d, 0);
    std::vector<int32_t> pos(d);
    uint64_t gpu_ns = 0;
    std::vector<kvrt_timing> timings;
    const Clock::time_point t0 = Clock::now();
    double last_note = 0;
    for (uint64_t t = 0; t < tokens && r == KVRT_SUCCESS; ++t) {
        const uint64_t slot = t % (distinct - d + 1);
        if (o.host_input) {
            // The step's rows of every layer, from the distinct set (layer-major, as kvrt reads host data).
            for (uint64_t l = 0; l < o.layers; ++l) {
                const size_t src = (l * distinct + slot) * row / 2, dst = l * d * row / 2;
                std::copy_n(in.host_k.data() + src, d * row / 2, host_k.data() + dst);
                std::copy_n(in.host_v.data() + src, d * row / 2, host_v.data() + dst);
            }
            k.host = host_k.data();
            v.host = host_v.data();
        } else {
            k.offset = v.offset = slot * row;
        }
        for (uint32_t i = 0; i < d; ++i) pos[i] = static_cast<int32_t>(t + i);
        const kvrt_batch b = make_batch(d, pos.data(), seqs.data());
        r = kvrt_stream_begin(stream);
        if (r == KVRT_SUCCESS) {
            r = kvrt_cache_store(sub->cache, stream, &b, -1, &k, &v, nullptr);
            // Submitted even after a failed store: a dropped recording gives the window back.
            const kvrt_result s = kvrt_stream_submit(stream);
            if (r == KVRT_SUCCESS) r = s;
            if (s == KVRT_SUCCESS) {
                const kvrt_result w = kvrt_stream_wait(stream, kWaitNs);
                if (r == KVRT_SUCCESS) r = w;
            }
        }
        // The drafts but the first are rejected.
        if (r == KVRT_SUCCESS && d > 1) r = kvrt_cache_seq_rm(sub->cache, 0, pos[1], -1);
        if (r == KVRT_SUCCESS && timed) {
            uint32_t n = 0;
            r = kvrt_stream_get_timings(stream, nullptr, &n);
            timings.resize(n, kvrt_timing KVRT_TIMING_INIT);
            if (r == KVRT_SUCCESS) r = kvrt_stream_get_timings(stream, timings.data(), &n);
            for (uint32_t i = 0; i < n && r == KVRT_SUCCESS; ++i) gpu_ns += timings[i].ns;
        }
        const double elapsed = seconds_since(t0);
        if (!env.quiet && elapsed - last_note >= 5.0) {
            last_note = elapsed;
            std::fprintf(stderr, "bench static-append: %s: %llu/%llu tokens, %.1f s\n", what.c_str(),
                         static_cast<unsigned long long>(t + 1), static_cast<unsigned long long>(tokens), elapsed);
        }
    }
    if (r == KVRT_SUCCESS && timed) {
        sub->gpu.ms.push_back(static_cast<double>(gpu_ns) / 1e6);
        sub->wall.ms.push_back(seconds_since(t0) * 1e3);
    }
    return r;
}

int run_static_append(Env& env, const Args& args, std::vector<Row>* rows) {
    Options o;
    if (!parse(env, args, &o)) return 2;
    const uint32_t eb = value_bytes(o.type);
    // Scales for static-scale types: unit-range data (|x| < ~4), zero point mid-range.
    const bool is_u8 = o.type == KVRT_TYPE_U8_STATIC;
    const float scale = is_u8 ? 4.0f / 127.0f : 4.0f / 32767.0f;
    const int32_t zero_point = is_u8 ? 128 : 32768;
    kvrt_static_scales_desc sd = KVRT_STATIC_SCALES_DESC_INIT;
    sd.count = 1;
    sd.k_scales = sd.v_scales = &scale;
    sd.k_zero_points = sd.v_zero_points = &zero_point;

    // K/V input: kDistinctTokens tokens of random f16 rows per layer.
    Input in;
    const uint64_t row_values = o.kv_heads * o.head_dim;
    const uint64_t distinct = std::min<uint64_t>(o.tokens, kDistinctTokens);
    in.host_k.resize(o.layers * distinct * row_values);
    in.host_v.resize(in.host_k.size());
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (uint16_t& x : in.host_k) x = f32_to_f16(nd(rng));
    for (uint16_t& x : in.host_v) x = f32_to_f16(nd(rng));
    kvrt_result r = KVRT_SUCCESS;
    if (!o.host_input) {
        kvrt_buffer_desc bd = KVRT_BUFFER_DESC_INIT;
        bd.size = in.host_k.size() * 2;
        bd.label = "bench static-append K/V";
        r = kvrt_buffer_create(env.ctx, &bd, &in.k);
        if (r == KVRT_SUCCESS) r = kvrt_buffer_create(env.ctx, &bd, &in.v);
        if (r == KVRT_SUCCESS) r = kvrt_buffer_upload(in.k, 0, in.host_k.data(), bd.size);
        if (r == KVRT_SUCCESS) r = kvrt_buffer_upload(in.v, 0, in.host_v.data(), bd.size);
    }

    std::vector<std::unique_ptr<Subject>> subs;
    for (size_t i = 0; i < o.reserves.size() && r == KVRT_SUCCESS; ++i) {
        subs.push_back(std::make_unique<Subject>());
        Subject& s = *subs.back();
        s.reserve = o.reserves[i];
        s.reserve_text = o.reserve_text[i];
        kvrt_static_layout_desc ld = KVRT_STATIC_LAYOUT_DESC_INIT;
        ld.seq_len = static_cast<uint32_t>(o.seq_len);
        ld.reserve = s.reserve;  // 0 for the ring: its R = 1
        kvrt_static_style_desc style = KVRT_STATIC_STYLE_DESC_INIT;
        style.style = KVRT_STATIC_STYLE_SMART_MASK;
        if (is_static_scale(o.type)) style.next = ld.next = &sd;
        if (s.reserve == 0.0) ld.next = &style;
        kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
        d.next = &ld;
        d.n_layers = static_cast<uint32_t>(o.layers);
        d.n_heads = d.n_kv_heads = static_cast<uint32_t>(o.kv_heads);
        d.head_dim_k = static_cast<uint32_t>(o.head_dim);
        d.max_seqs = 1;
        d.type_k = d.type_v = o.type;
        d.layout = KVRT_LAYOUT_STATIC;
        d.label = "bench static-append";
        r = kvrt_cache_create(env.ctx, &d, &s.cache);
    }
    TimedStream stream(env.ctx);
    if (r == KVRT_SUCCESS) r = stream.result();
    if (r != KVRT_SUCCESS) return report("bench static-append: setup", r);

    // Warm-up: enough appends for one slide (pipelines compile on first use).
    for (int w = 0; w < o.warmup && r == KVRT_SUCCESS; ++w)
        for (auto& s : subs) {
            const uint64_t n = std::min(o.tokens, expected(o.seq_len, s->reserve, o.tokens).period + 1);
            r = append_run(env, o, in, stream, s.get(), n, false, "R=" + s->reserve_text + " warm-up");
            if (r != KVRT_SUCCESS) break;
        }
    // Timed runs, interleaved; the counters are checked after each.
    bool counters_ok = true;
    for (int run = 0; run < o.runs && r == KVRT_SUCCESS; ++run) {
        for (auto& s : subs) {
            const std::string what = "R=" + s->reserve_text + " run " + std::to_string(run + 1) + "/" +
                                     std::to_string(o.runs);
            r = append_run(env, o, in, stream, s.get(), o.tokens, true, what);
            if (r == KVRT_SUCCESS) r = kvrt_cache_static_get_stats(s->cache, 0, &s->stats);
            if (r != KVRT_SUCCESS) break;
            const Expected e = expected(o.seq_len, s->reserve, o.tokens);
            const uint64_t row_bytes = o.layers * o.kv_heads * 2 * o.head_dim * eb;  // one row of every region
            const bool single = o.drafts == 1;  // the closed form counts single appends
            if (s->stats.rows_appended != o.tokens * o.drafts ||
                (single && (s->stats.rows_moved != e.rows_moved || s->stats.slides != e.slides)) ||
                s->stats.bytes_moved != s->stats.rows_moved * row_bytes) {
                std::fprintf(stderr,
                             "error: bench static-append: R=%s: kvrt_cache_static_get_stats says %llu rows appended, "
                             "%llu slides, %llu rows and %llu bytes moved; expected %llu, %llu, %llu and %llu\n",
                             s->reserve_text.c_str(), static_cast<unsigned long long>(s->stats.rows_appended),
                             static_cast<unsigned long long>(s->stats.slides),
                             static_cast<unsigned long long>(s->stats.rows_moved),
                             static_cast<unsigned long long>(s->stats.bytes_moved),
                             static_cast<unsigned long long>(o.tokens * o.drafts),
                             static_cast<unsigned long long>(single ? e.slides : s->stats.slides),
                             static_cast<unsigned long long>(single ? e.rows_moved : s->stats.rows_moved),
                             static_cast<unsigned long long>(s->stats.rows_moved * row_bytes));
                counters_ok = false;
            }
            if (!env.quiet)
                std::fprintf(stderr, "bench static-append: %s: %llu tokens, %llu slides, GPU %.1f ms, wall %.1f ms\n",
                             what.c_str(), static_cast<unsigned long long>(o.tokens),
                             static_cast<unsigned long long>(s->stats.slides), s->gpu.ms.back(), s->wall.ms.back());
        }
    }
    if (r != KVRT_SUCCESS) return report("bench static-append", r);

    const double n = static_cast<double>(o.tokens);
    for (size_t i = 0; i < subs.size(); ++i) {
        const Subject& s = *subs[i];
        const Expected e = expected(o.seq_len, s.reserve, o.tokens);
        const double moved_per_token = static_cast<double>(s.stats.bytes_moved) / n;  // per position advanced
        Row row;
        row.name = "static-append";
        row.params = {{"type", o.type_name},
                      {"S", std::to_string(o.seq_len)},
                      {"R", s.reserve_text},
                      {"layers", std::to_string(o.layers)},
                      {"kv_heads", std::to_string(o.kv_heads)},
                      {"head_dim", std::to_string(o.head_dim)},
                      {"tokens", std::to_string(o.tokens)},
                      {"drafts", std::to_string(o.drafts)},
                      {"input", o.host_input ? "host" : "device"}};
        row.m = s.gpu;
        // Bytes the device moves per run: the slides' copies and the appended rows.
        const double appended =
            n * static_cast<double>(o.drafts * o.layers * o.kv_heads * 2 * o.head_dim * eb);
        row.bytes = static_cast<double>(s.stats.bytes_moved) + appended;
        row.extra = {{"us_per_token", s.gpu.median() * 1000.0 / n},
                     {"wall_us_per_token", s.wall.median() * 1000.0 / n},
                     {"moved_bytes_per_token", moved_per_token},
                     {"slides", static_cast<double>(s.stats.slides)},
                     {"rows_moved", static_cast<double>(s.stats.rows_moved)},
                     {"expected_rows_moved", o.drafts == 1 ? static_cast<double>(e.rows_moved) : -1.0}};
        if (i > 0) {
            const Subject& f = *subs[0];
            const double f_moved = static_cast<double>(f.stats.bytes_moved);
            row.extra.push_back({"us_vs_first", s.gpu.median() / f.gpu.median()});
            row.extra.push_back({"wall_vs_first", s.wall.median() / f.wall.median()});
            row.extra.push_back(
                {"moved_vs_first", f_moved > 0 ? static_cast<double>(s.stats.bytes_moved) / f_moved : 0.0});
        }
        rows->push_back(row);
    }
    if (!env.quiet) {
        for (size_t i = 0; i < subs.size(); ++i) {
            const Subject& s = *subs[i];
            std::fprintf(stderr,
                         "bench static-append: R=%s: %.2f us GPU, %.1f us wall per token; %.0f bytes moved per token "
                         "(%llu slides, %llu rows per region%s)\n",
                         s.reserve_text.c_str(), s.gpu.median() * 1000.0 / n, s.wall.median() * 1000.0 / n,
                         static_cast<double>(s.stats.bytes_moved) / n, static_cast<unsigned long long>(s.stats.slides),
                         static_cast<unsigned long long>(s.stats.rows_moved),
                         o.drafts == 1 ? ", as the closed form expects" : ", removals' copies included");
        }
        for (size_t i = 1; i < subs.size(); ++i)
            std::fprintf(stderr, "bench static-append: R=%s over R=%s: %.2fx the GPU time, %.2fx the wall time per token\n",
                         subs[i]->reserve_text.c_str(), subs[0]->reserve_text.c_str(),
                         subs[i]->gpu.median() / subs[0]->gpu.median(), subs[i]->wall.median() / subs[0]->wall.median());
    }
    // Under the validation layer (KVRT_VALIDATION=1), its errors fail the case.
    kvrt_context_stats cs = KVRT_CONTEXT_STATS_INIT;
    if (kvrt_context_get_stats(env.ctx, &cs) == KVRT_SUCCESS && cs.validation_errors) {
        std::fprintf(stderr, "error: bench static-append: the Vulkan validation layer reported %llu errors\n",
                     static_cast<unsigned long long>(cs.validation_errors));
        return 1;
    }
    return counters_ok ? 0 : 1;
}

const bool registered = register_case(
    {"static-append",
     "[--seq-len S] [--reserve R[,R2...|ring]] [--layers L] [--kv-heads H] [--head-dim D]\n"
     "                 [--type f16|f32|u8_static|u16_static] [--tokens N] [--input device|host]\n"
     "                 [--drafts D]:\n"
     "                 appending to the static padded layout (SPEC 5), one sequence. Each run\n"
     "                 empties the sequence, then appends N tokens one at a time: one\n"
     "                 kvrt_cache_store of all L layers (f16 K and V, from a device buffer or\n"
     "                 host memory) per submission, as a decode loop does. median/min ms: a\n"
     "                 run's GPU time (the sum of its timestamps); us_per_token and\n"
     "                 wall_us_per_token: GPU and wall time per token (median run; wall\n"
     "                 includes recording, submission and waits); moved_bytes_per_token:\n"
     "                 kvrt_cache_static_get_stats' bytes_moved / rows_appended; slides and\n"
     "                 rows_moved (per region) are checked against the closed form\n"
     "                 (expected_rows_moved). GB/s counts the slides' bytes and the appended\n"
     "                 rows. Several R: one cache each, runs interleaved; *_vs_first = ratio to\n"
     "                 the first R. Defaults: S 2048, R 2, L 4, H 8, D 128, f16, N 4 x (S-1),\n"
     "                 device input, --runs 3 --warmup 1 (a warm-up appends until the first\n"
     "                 slide). Static-scale types get one scale, 4/127 (zero point 128) or\n"
     "                 4/32767 (32768), for the N(0, 1) data. R = 1 slides the whole window\n"
     "                 at every token: slow on CPU drivers (try --seq-len 512). `ring`: the\n"
     "                 smart-mask style, a ring of S-1 rows that never slides. --drafts D > 1:\n"
     "                 speculative decoding, each step stores D tokens and removes the newest\n"
     "                 D-1 again (kvrt_cache_seq_rm, in the wall time only); the counters\n"
     "                 include the removals' copies and the closed form is not checked.\n"
     "                 Fails when the counters differ from the closed form or under\n"
     "                 validation errors",
     run_static_append,
     {{"--seq-len", "256", "--reserve", "2,1,ring"}, {"--seq-len", "256", "--reserve", "2", "--drafts", "4"}}});

}  // namespace

}  // namespace cli::bench
