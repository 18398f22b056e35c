// The run loop of `kvrt demo`; see demo_run.hpp.
#include "demo_run.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <numeric>

#include "cli.hpp"
#include "demo_memory.hpp"
#include "demo_model.hpp"
#include "demo_static.hpp"

namespace cli::demo {

const char* const kPrompt = "kvrt keeps every key and value on the GPU.";

namespace {

// Waits of the demo's own submissions.
constexpr uint64_t kWaitNs = 60ull * 1000 * 1000 * 1000;

using runner::Batch;
using runner::Labels;
using runner::Sequence;

// Shift and Reevaluate: a cell cache, made room in when it is full.
class Runner : public runner::RunnerBase {
public:
    Runner(const Options& opt, Results* res)
        : RunnerBase(opt, res, opt.capacity,
                     Labels{"placing the batch", "recording the K/V store", "running store and attention",
                            "reading the cache back"}),
          steps_(opt.tokens) {}

private:
    bool setup() override;
    bool prompt() override;
    bool decode() override;
    void placed(const Batch& b, const std::vector<uint32_t>& cells) override;
    void stored(const AttentionIO& io, const Batch& b, const std::vector<uint32_t>& cells) override;
    void checked_cells(std::vector<uint32_t>* cells, std::vector<uint32_t>* mirror_cells) const override;
    std::string progress_state() const override;
    bool make_room();
    bool verify_metadata();

    const uint32_t steps_;
    // Positions [0, shared_end_) are cells shared by every sequence (the
    // prompt, copied with kvrt_cache_seq_cp); 0 with a single sequence.
    int32_t shared_end_ = 0;
};

bool Runner::setup() {
    const ModelConfig& cfg = model_.config();
    if (!create_context()) return false;

    kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
    d.n_layers = static_cast<uint32_t>(cfg.n_layers);
    d.n_heads = static_cast<uint32_t>(cfg.n_heads);
    d.n_kv_heads = static_cast<uint32_t>(cfg.n_kv_heads);
    d.head_dim_k = static_cast<uint32_t>(cfg.head_dim);
    d.capacity = opt_.capacity;
    d.max_seqs = opt_.seqs;
    d.type_k = d.type_v = opt_.kv_type;
    kvrt_rope_desc rope = KVRT_ROPE_DESC_INIT;  // the model's RoPE, for kvrt's shifts
    rope.mode = KVRT_ROPE_NORMAL;
    rope.freq_base = static_cast<float>(cfg.rope_base);
    d.next = &rope;
    d.label = "kvrt demo cache";
    if (!ok(kvrt_cache_create(ctx_, &d, &cache_), "creating the cache")) return false;
    if (!create_stream()) return false;
    // The largest batch is the prompt or a re-evaluation, never above capacity.
    return create_output(opt_.capacity);
}

// Evaluates the prompt as one batch in sequence 0, then lets every other
// sequence share its cells. Sequence s starts from the s-th most likely next
// token (and decodes greedily after that), so that the sequences differ.
bool Runner::prompt() {
    const Clock::time_point t0 = Clock::now();
    const double check0 = res_.check_s;
    const size_t n = std::strlen(kPrompt);
    Batch b;
    for (size_t i = 0; i < n; ++i) b.add(static_cast<unsigned char>(kPrompt[i]), i, 0);
    b.logit_rows = {static_cast<int>(n - 1)};
    std::vector<float> logits;
    if (!evaluate(b, true, &logits)) return false;
    res_.prompt_tokens = static_cast<uint32_t>(n);
    for (uint32_t s = 0; s < opt_.seqs; ++s) {
        if (s > 0) {
            ScopeTimer t(&res_.runtime_s);
            if (!ok(kvrt_cache_seq_cp(cache_, 0, static_cast<int32_t>(s), -1, -1), "sharing the prompt")) return false;
            mirror_.seq_cp(0, static_cast<int>(s));
        }
        seqs_[s].tokens = b.tokens;
        seqs_[s].pending = ranked_token(logits.data(), s);
    }
    shared_end_ = opt_.seqs > 1 ? static_cast<int32_t>(n) : 0;
    res_.text.assign(opt_.seqs, std::string());
    res_.prompt_s = seconds_since(t0) - (res_.check_s - check0);
    return true;
}

// The decode loop: each step evaluates the pending token of every sequence
// in one batch and samples the next greedily. When the cache has no cell left
// for the step, the strategy makes room first.
bool Runner::decode() {
    const Clock::time_point t0 = Clock::now();
    const double check0 = res_.check_s;
    bool made_room = false;
    for (uint32_t step = 0; step < steps_; ++step) {
        // Make room until the step fits: with shared cells, one round may free
        // fewer cells than there are sequences.
        for (;;) {
            kvrt_cache_info info = KVRT_CACHE_INFO_INIT;
            {
                ScopeTimer t(&res_.runtime_s);
                if (!ok(kvrt_cache_get_info(cache_, &info), "reading the cache's occupancy")) return false;
            }
            if (info.capacity - info.used >= opt_.seqs) break;
            if (!make_room()) return false;
            made_room = true;
        }
        Batch b;
        for (uint32_t s = 0; s < opt_.seqs; ++s) {
            b.add(seqs_[s].pending, seqs_[s].tokens.size(), s);
            b.logit_rows.push_back(static_cast<int>(s));
        }
        // Check every check_every steps, and the first step after a context shift
        // or re-evaluation (the re-evaluated batch itself is checked too).
        const bool check = made_room || (step + 1) % opt_.check_every == 0;
        std::vector<float> logits;
        if (!evaluate(b, check, &logits)) return false;
        made_room = false;
        advance(logits);
        progress(step + 1, seconds_since(t0) - (res_.check_s - check0));
    }
    progress_clear();
    res_.decode_s = seconds_since(t0) - (res_.check_s - check0);
    return true;
}

// Frees cells in every sequence: keeps the first n_keep positions (attention
// sinks) and drops n_discard after them, half of the rest by default.
//   shift:      kvrt_cache_context_shift moves the newer half down by
//               n_discard; kvrt rotates their keys (applied here, in a
//               submission of its own, so that its GPU time shows apart).
//   reevaluate: kvrt_cache_discard_for_reevaluation drops everything after
//               the sinks and names the tokens to evaluate again at their new
//               positions; the model runs them as one batch.
bool Runner::make_room() {
    const int32_t n_past = static_cast<int32_t>(seqs_[0].tokens.size());
    const int32_t n_keep = static_cast<int32_t>(opt_.n_keep);
    // Cells shared by all sequences must leave all of them in the same round:
    // a shift moves a shared cell for every sequence that uses it (kvrt.h,
    // kvrt_cache_seq_add), and re-evaluated tokens become private copies. So
    // at least the shared positions past the sinks are discarded.
    const int32_t n_discard = std::max((n_past - n_keep) / 2, shared_end_ - n_keep);
    if (opt_.strategy == Strategy::Shift) {
        for (uint32_t s = 0; s < opt_.seqs; ++s) {
            const int32_t seq = static_cast<int32_t>(s);
            int32_t new_past = -1;
            {
                ScopeTimer t(&res_.runtime_s);
                if (!ok(kvrt_cache_context_shift(cache_, seq, n_keep, n_discard, &new_past), "context shift"))
                    return false;
            }
            mirror_.seq_rm(seq, n_keep, n_keep + n_discard);
            mirror_.seq_add(seq, n_keep + n_discard, n_past, -n_discard);
            std::vector<int>& tokens = seqs_[s].tokens;
            tokens.erase(tokens.begin() + n_keep, tokens.begin() + n_keep + n_discard);
            if (new_past != static_cast<int32_t>(tokens.size()))
                return mismatch("kvrt_cache_context_shift left sequence %u at n_past %d, expected %zu", s, new_past,
                                tokens.size());
        }
        {
            ScopeTimer t(&res_.runtime_s);
            if (!ok(kvrt_stream_begin(stream_), "recording the RoPE shift") ||
                !ok(kvrt_cache_apply_shifts(cache_, stream_), "recording the RoPE shift") ||
                !submit("applying the RoPE shift"))
                return false;
        }
        ++res_.shifts;
    } else {
        Batch b;
        for (uint32_t s = 0; s < opt_.seqs; ++s) {
            const int32_t seq = static_cast<int32_t>(s);
            int32_t src = -1, dst = -1, count = -1;
            {
                ScopeTimer t(&res_.runtime_s);
                if (!ok(kvrt_cache_discard_for_reevaluation(cache_, seq, n_keep, n_discard, &src, &dst, &count),
                        "discarding for re-evaluation"))
                    return false;
            }
            mirror_.seq_rm(seq, n_keep, -1);
            if (dst != n_keep || src != n_keep + n_discard || count != n_past - src)
                return mismatch("kvrt_cache_discard_for_reevaluation asked to move [%d, %d) to %d; expected [%d, %d) to %d",
                                src, src + count, dst, n_keep + n_discard, n_past, n_keep);
            std::vector<int>& tokens = seqs_[s].tokens;
            for (int32_t i = 0; i < count; ++i) b.add(tokens[static_cast<size_t>(src + i)], static_cast<size_t>(dst + i), s);
            tokens.erase(tokens.begin() + dst, tokens.begin() + src);
        }
        ++res_.reevaluations;
        res_.reevaluated += b.size();
        std::vector<float> no_logits;
        if (b.size() && !evaluate(b, true, &no_logits)) return false;
    }
    res_.discarded += uint64_t{opt_.seqs} * static_cast<uint64_t>(n_discard);
    shared_end_ = std::min(shared_end_, n_keep);
    return verify_metadata();
}

// Compares kvrt's cell metadata with the demo's after a context change.
bool Runner::verify_metadata() {
    ScopeTimer t(&res_.runtime_s);
    kvrt_cache_info info = KVRT_CACHE_INFO_INIT;
    if (!ok(kvrt_cache_get_info(cache_, &info), "reading the cache's occupancy")) return false;
    if (info.used != mirror_.used())
        return mismatch("kvrt reports %u cells in use, the demo counts %u", info.used, mirror_.used());
    if (info.pending_shifts != 0) return mismatch("%u cells still wait for their RoPE shift", info.pending_shifts);
    for (uint32_t s = 0; s < opt_.seqs; ++s) {
        const int32_t seq = static_cast<int32_t>(s);
        int32_t lo = -1, hi = -1;
        if (!ok(kvrt_cache_seq_pos_min(cache_, seq, &lo), "reading a sequence's positions") ||
            !ok(kvrt_cache_seq_pos_max(cache_, seq, &hi), "reading a sequence's positions"))
            return false;
        if (lo != mirror_.pos_min(seq) || hi != mirror_.pos_max(seq))
            return mismatch("sequence %u spans positions [%d, %d] in kvrt, [%d, %d] in the demo", s, lo, hi,
                            mirror_.pos_min(seq), mirror_.pos_max(seq));
    }
    return true;
}

void Runner::placed(const Batch& b, const std::vector<uint32_t>& cells) {
    for (size_t i = 0; i < cells.size(); ++i) mirror_.place(cells[i], b.positions[i], b.seq_ids[i]);
}

void Runner::stored(const AttentionIO& io, const Batch&, const std::vector<uint32_t>& cells) {
    const size_t kvd = static_cast<size_t>(model_.config().kv_dim());
    for (size_t i = 0; i < cells.size(); ++i) mirror_.set_layer(cells[i], io.layer, io.k_raw + i * kvd, io.v + i * kvd);
}

void Runner::checked_cells(std::vector<uint32_t>* cells, std::vector<uint32_t>* mirror_cells) const {
    *cells = mirror_.used_cells();
    *mirror_cells = *cells;
}

std::string Runner::progress_state() const {
    char buf[128];
    std::snprintf(buf, sizeof buf, "cache %u/%u cells | %s %u", mirror_.used(), opt_.capacity,
                  opt_.strategy == Strategy::Shift ? "context shifts" : "re-evaluations",
                  opt_.strategy == Strategy::Shift ? res_.shifts : res_.reevaluations);
    return buf;
}

}  // namespace

namespace runner {

RunnerBase::RunnerBase(const Options& opt, Results* res, uint32_t mirror_cells, const Labels& labels)
    : opt_(opt),
      res_(*res),
      model_(ModelConfig{}),
      mirror_(model_.config(), mirror_cells),
      checker_(model_.config(), opt.kv_type),
      seqs_(opt.seqs),
      labels_(labels) {}

RunnerBase::~RunnerBase() {
    kvrt_buffer_destroy(out_);
    kvrt_stream_destroy(stream_);
    kvrt_cache_destroy(cache_);
    kvrt_context_destroy(ctx_);
}

int RunnerBase::run() {
    const Clock::time_point t0 = Clock::now();
    bool done = setup();
    res_.setup_s = seconds_since(t0);
    done = done && prompt() && decode();
    if (ctx_) {
        finish_common();
        finish();
    }
    return done ? 0 : 1;
}

bool RunnerBase::ok(kvrt_result r, const char* what) {
    if (r == KVRT_SUCCESS) return true;
    progress_clear();
    report(what, r);
    return false;
}

bool RunnerBase::mismatch(const char* fmt, ...) {
    progress_clear();
    std::va_list args;
    va_start(args, fmt);
    std::fprintf(stderr, "error: ");
    std::vfprintf(stderr, fmt, args);
    std::fprintf(stderr, "\n");
    va_end(args);
    return false;
}

bool RunnerBase::create_context() {
    const char* step = "";
    return ok(demo::create_context(opt_, &ctx_, &res_.device, &step), step);
}

bool RunnerBase::create_stream() {
    return ok(create_timed_stream(ctx_, &stream_, &res_.timestamps), "creating the stream");
}

bool RunnerBase::create_output(uint64_t rows) {
    kvrt_buffer_desc bd = KVRT_BUFFER_DESC_INIT;
    bd.size = rows * static_cast<uint64_t>(model_.config().q_dim()) * sizeof(float);
    bd.label = "kvrt demo attention output";
    return ok(kvrt_buffer_create(ctx_, &bd, &out_), "creating the output buffer");
}

bool RunnerBase::evaluate(const Batch& b, bool check, std::vector<float>* logits) {
    std::vector<uint32_t> cells(b.size());
    const kvrt_batch kb = make_batch(b.size(), b.positions.data(), b.seq_ids.data());
    {
        ScopeTimer t(&res_.runtime_s);
        if (!ok(kvrt_cache_place(cache_, &kb, cells.data()), labels_.place)) return false;
    }
    placed(b, cells);
    double attend_s = 0;
    const Clock::time_point t0 = Clock::now();
    const bool done = model_.forward(
        b.tokens, b.positions, b.logit_rows,
        [&](const AttentionIO& io) {
            ScopeTimer t(&attend_s);
            return attend(io, b, cells, check);
        },
        logits);
    res_.model_s += seconds_since(t0) - attend_s;
    res_.evaluated += b.size();
    if (check) ++res_.checkpoints;
    return done;
}

// One layer: writes the batch's K/V into its cells and runs attention over
// the cache, both recorded into one stream and submitted together; then the
// optional reference check.
bool RunnerBase::attend(const AttentionIO& io, const Batch& b, const std::vector<uint32_t>& cells, bool check) {
    const ModelConfig& cfg = model_.config();
    const uint32_t n = static_cast<uint32_t>(io.n);
    const size_t kvd = static_cast<size_t>(cfg.kv_dim());
    const kvrt_tensor_ref k = host_tensor(io.k);
    const kvrt_tensor_ref v = host_tensor(io.v);
    const kvrt_tensor_ref q = host_tensor(io.q);
    const kvrt_output_ref out = buffer_output(out_, 0);
    const kvrt_batch queries = make_batch(n, b.positions.data(), b.seq_ids.data());
    {
        ScopeTimer t(&res_.runtime_s);
        if (!ok(kvrt_stream_begin(stream_), "starting a recording") ||
            !ok(kvrt_cache_write(cache_, stream_, n, cells.data(), io.layer, &k, &v), labels_.write) ||
            !ok(kvrt_cache_attention(cache_, stream_, io.layer, &queries, &q, &out, nullptr), "recording attention") ||
            !submit(labels_.submit) ||
            !ok(kvrt_buffer_download(out_, 0, io.out, uint64_t{n} * static_cast<uint64_t>(cfg.q_dim()) * sizeof(float)),
                "downloading the attention output"))
            return false;
    }
    stored(io, b, cells);
    if (!check) return true;

    ScopeTimer t(&res_.check_s);
    std::vector<uint32_t> used, mirror_used;
    checked_cells(&used, &mirror_used);
    std::vector<float> cache_k(used.size() * kvd), cache_v(used.size() * kvd);
    if (!ok(kvrt_cache_read(cache_, io.layer, static_cast<uint32_t>(used.size()), used.data(), cache_k.data(),
                            cache_v.data()),
            labels_.read))
        return false;
    AttentionCall call;
    call.layer = io.layer;
    call.n = io.n;
    call.q = io.q;
    call.positions = b.positions.data();
    call.seq_ids = b.seq_ids.data();
    call.out = io.out;
    checker_.check(call, mirror_, mirror_used, cache_k.data(), cache_v.data());
    return true;
}

void RunnerBase::advance(const std::vector<float>& logits) {
    const int vocab = model_.config().vocab;
    for (uint32_t s = 0; s < opt_.seqs; ++s) {
        Sequence& seq = seqs_[s];
        seq.tokens.push_back(seq.pending);
        res_.text[s].push_back(static_cast<char>(seq.pending));
        seq.pending = ranked_token(logits.data() + static_cast<size_t>(s) * vocab, 0);
    }
    res_.generated += opt_.seqs;
}

bool RunnerBase::submit(const char* what) {
    const char* step = what;
    const kvrt_result r = submit_timed(stream_, res_.timestamps, &res_.gpu, &step);
    return ok(r, step ? step : what);
}

void RunnerBase::finish_common() {
    res_.cache = KVRT_CACHE_INFO_INIT;
    if (cache_) (void)kvrt_cache_get_info(cache_, &res_.cache);
    read_context_stats(ctx_, &res_);
    res_.checked_calls = checker_.calls();
    res_.vs_cache = checker_.vs_cache();
    res_.vs_fresh = checker_.vs_fresh();
    res_.cache_limit = Checker::cache_limit();
    res_.fresh_limit = checker_.fresh_limit();
    res_.checks_passed = checker_.calls() > 0 && checker_.passed();
}

void RunnerBase::progress(uint32_t step, double elapsed_s) {
    progress_line_.update(step, opt_.tokens, opt_.seqs, elapsed_s, [&] { return progress_state(); });
}

void RunnerBase::progress_clear() { progress_line_.clear(); }

}  // namespace runner

kvrt_result submit_timed(kvrt_stream stream, bool timestamps, std::map<std::string, OpTime>* gpu, const char** step) {
    kvrt_result r = kvrt_stream_submit(stream);
    if (r == KVRT_SUCCESS) r = kvrt_stream_wait(stream, kWaitNs);
    if (r != KVRT_SUCCESS || !timestamps) return r;
    *step = "reading GPU timings";
    uint32_t count = 0;
    if ((r = kvrt_stream_get_timings(stream, nullptr, &count)) != KVRT_SUCCESS) return r;
    std::vector<kvrt_timing> timings(count, kvrt_timing KVRT_TIMING_INIT);
    if ((r = kvrt_stream_get_timings(stream, timings.data(), &count)) != KVRT_SUCCESS) return r;
    for (uint32_t i = 0; i < count; ++i) {
        OpTime& op = (*gpu)[timings[i].label];
        ++op.count;
        op.ms += static_cast<double>(timings[i].ns) / 1e6;
    }
    return KVRT_SUCCESS;
}

kvrt_result create_context(const Options& opt, kvrt_context* ctx, std::string* device, const char** step) {
    kvrt_context_desc cd = KVRT_CONTEXT_DESC_INIT;
    cd.device = opt.device.empty() ? nullptr : opt.device.c_str();
    cd.log_callback = log_to_stderr;
    *step = "creating the context";
    kvrt_result r = kvrt_context_create(&cd, ctx);
    if (r != KVRT_SUCCESS) return r;
    kvrt_device_info info = KVRT_DEVICE_INFO_INIT;
    *step = "reading the device";
    if ((r = kvrt_context_get_device_info(*ctx, &info)) == KVRT_SUCCESS) *device = info.name;
    return r;
}

kvrt_result create_timed_stream(kvrt_context ctx, kvrt_stream* stream, bool* timestamps) {
    kvrt_stream_desc sd = KVRT_STREAM_DESC_INIT;
    sd.flags = KVRT_STREAM_TIMESTAMPS;
    sd.label = "kvrt demo";
    kvrt_result r = kvrt_stream_create(ctx, &sd, stream);
    if (r == KVRT_ERROR_UNSUPPORTED) {
        sd.flags = 0;
        r = kvrt_stream_create(ctx, &sd, stream);
    }
    if (r == KVRT_SUCCESS) *timestamps = sd.flags != 0;
    return r;
}

ProgressLine::ProgressLine() : tty_(isatty(fileno(stderr)) != 0) {}

void ProgressLine::print(uint32_t step, uint32_t steps, uint32_t seqs, double elapsed_s, const std::string& state) {
    last_s_ = elapsed_s;
    std::fprintf(stderr, "%stoken %u/%u | %s | %.1f tokens/s%s", tty_ ? "\r" : "", step, steps, state.c_str(),
                 elapsed_s > 0 ? step * seqs / elapsed_s : 0.0, tty_ ? "\033[K" : "\n");
    shown_ = tty_;
}

void ProgressLine::clear() {
    if (!shown_) return;
    std::fprintf(stderr, "\r\033[K");
    shown_ = false;
}

void read_context_stats(kvrt_context ctx, Results* res) {
    kvrt_context_stats stats = KVRT_CONTEXT_STATS_INIT;
    if (kvrt_context_get_stats(ctx, &stats) != KVRT_SUCCESS) return;
    res->peak_device_bytes = stats.peak_device_bytes;
    res->validation_errors = stats.validation_errors;
    res->validation_warnings = stats.validation_warnings;
}

int ranked_token(const float* logits, uint32_t r) {
    std::vector<int> order(0x7f - 0x20);
    std::iota(order.begin(), order.end(), 0x20);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
    return order[r];
}

uint32_t min_capacity(const Options& opt) {
    // Static: every sequence has a window of its own.
    return static_cast<uint32_t>(std::strlen(kPrompt)) + 4 * (opt.strategy == Strategy::Static ? 1 : opt.seqs);
}

int run(const Options& opt, Results* out) {
    if (opt.strategy == Strategy::Memory) return run_memory(opt, out);
    if (opt.strategy == Strategy::Static) return run_static(opt, out);
    Runner runner(opt, out);
    return runner.run();
}

}  // namespace cli::demo
