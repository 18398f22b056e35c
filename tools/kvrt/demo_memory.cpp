// The memory strategy of `kvrt demo`; see demo_memory.hpp.
#include "demo_memory.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "cli.hpp"

namespace cli::demo {

// ---- MemoryReference ------------------------------------------------------------

MemoryReference::MemoryReference(const Model& model, uint32_t seqs)
    : layers_(model.config().n_layers),
      heads_(model.config().n_heads),
      slots_(model.config().memory_slots),
      dim_(model.config().head_dim) {
    const size_t block = static_cast<size_t>(heads_) * static_cast<size_t>(slots_) * static_cast<size_t>(dim_);
    for (int l = 0; l < layers_; ++l) {
        const std::vector<float>& keys = model.memory_keys(l);
        mk_.emplace_back(keys.begin(), keys.end());
    }
    mv_.assign(static_cast<size_t>(seqs) * static_cast<size_t>(layers_), std::vector<double>(block, 0.0));
}

void MemoryReference::update(uint32_t seq, int layer, const float* wq, const float* wv) {
    const std::vector<double>& mk = mk_[static_cast<size_t>(layer)];
    std::vector<double>& mv = mv_[index(seq, layer)];
    std::vector<double> ww(static_cast<size_t>(slots_));
    const size_t head_block = static_cast<size_t>(slots_) * static_cast<size_t>(dim_);
    for (int h = 0; h < heads_; ++h) {
        const float* wq_h = wq + static_cast<size_t>(h) * dim_;
        const float* wv_h = wv + static_cast<size_t>(h) * dim_;
        const double* mk_h = mk.data() + h * head_block;
        double* mv_h = mv.data() + h * head_block;
        // ww = softmax(MK wq), without scale; the largest score becomes exp(0).
        double top = -INFINITY;
        for (int j = 0; j < slots_; ++j) {
            const double* key = mk_h + static_cast<size_t>(j) * dim_;
            double dot = 0;
            for (int i = 0; i < dim_; ++i) dot += key[i] * wq_h[i];
            ww[static_cast<size_t>(j)] = dot;
            top = std::max(top, dot);
        }
        double sum = 0;
        for (double& w : ww) sum += (w = std::exp(w - top));
        // MV += ww (outer) wv.
        for (int j = 0; j < slots_; ++j) {
            const double w = ww[static_cast<size_t>(j)] / sum;
            double* row = mv_h + static_cast<size_t>(j) * dim_;
            for (int i = 0; i < dim_; ++i) row[i] += w * wv_h[i];
        }
    }
}

void MemoryReference::read(uint32_t seq, int layer, const float* q, double* out) const {
    const std::vector<double>& mk = mk_[static_cast<size_t>(layer)];
    const std::vector<double>& mv = mv_[index(seq, layer)];
    const double scale = 1.0 / std::sqrt(static_cast<double>(dim_));  // kvrt's default (batch scale 0)
    std::vector<double> p(static_cast<size_t>(slots_));
    const size_t head_block = static_cast<size_t>(slots_) * static_cast<size_t>(dim_);
    for (int h = 0; h < heads_; ++h) {
        const float* q_h = q + static_cast<size_t>(h) * dim_;
        const double* mk_h = mk.data() + h * head_block;
        const double* mv_h = mv.data() + h * head_block;
        double top = -INFINITY;
        for (int j = 0; j < slots_; ++j) {
            const double* key = mk_h + static_cast<size_t>(j) * dim_;
            double dot = 0;
            for (int i = 0; i < dim_; ++i) dot += key[i] * q_h[i];
            p[static_cast<size_t>(j)] = dot * scale;
            top = std::max(top, p[static_cast<size_t>(j)]);
        }
        double sum = 0;
        for (double& w : p) sum += (w = std::exp(w - top));
        double* o = out + static_cast<size_t>(h) * dim_;
        std::fill(o, o + dim_, 0.0);
        for (int j = 0; j < slots_; ++j) {
            const double w = p[static_cast<size_t>(j)] / sum;
            const double* row = mv_h + static_cast<size_t>(j) * dim_;
            for (int i = 0; i < dim_; ++i) o[i] += w * row[i];
        }
    }
}

void MemoryReference::fork(uint32_t src, uint32_t dst) {
    for (int l = 0; l < layers_; ++l) mv_[index(dst, l)] = mv_[index(src, l)];
}

namespace {

// Tokens per chunk of the memory's parallel kernels: the prompt fits in one
// chunk, and the working memory is an eighth of the default 512's.
constexpr uint32_t kChunkTokens = 64;

// Folds the errors of `got` against `ref` (one call, or one state) into the
// worst figures so far. NMSE = sum((got - ref)^2) / sum(ref^2).
void fold(const double* ref, const float* got, size_t n, ErrorFigures* worst) {
    double err = 0, norm = 0;
    for (size_t i = 0; i < n; ++i) {
        const double d = static_cast<double>(got[i]) - ref[i];
        err += d * d;
        norm += ref[i] * ref[i];
        worst->max_abs = std::max(worst->max_abs, std::fabs(d));
    }
    worst->nmse = std::max(worst->nmse, norm > 0 ? err / norm : err);
}

class MemoryRunner {
public:
    MemoryRunner(const Options& opt, Results* res)
        : opt_(opt), res_(*res), model_(config(opt)), ref_(model_, opt.seqs), absorbed_(opt.seqs, 0) {}

    ~MemoryRunner() {
        kvrt_buffer_destroy(out_);
        kvrt_stream_destroy(stream_);
        kvrt_memory_destroy(memory_);
        kvrt_context_destroy(ctx_);
    }

    MemoryRunner(const MemoryRunner&) = delete;
    MemoryRunner& operator=(const MemoryRunner&) = delete;

    int run() {
        const Clock::time_point t0 = Clock::now();
        bool done = setup();
        res_.setup_s = seconds_since(t0);
        done = done && prompt() && decode() && check_state();
        if (ctx_) finish();
        return done ? 0 : 1;
    }

private:
    static ModelConfig config(const Options& opt) {
        ModelConfig cfg;
        cfg.memory_slots = static_cast<int>(opt.slots);
        return cfg;
    }

    // Reports a failed kvrt call; true when `r` is a success.
    bool ok(kvrt_result r, const char* what) {
        if (r == KVRT_SUCCESS) return true;
        progress_clear();
        report(what, r);
        return false;
    }

    bool setup();
    bool prompt();
    bool decode();
    bool evaluate(const std::vector<int>& tokens, const std::vector<int32_t>& seq_ids,
                  const std::vector<int>& logit_rows, bool check, std::vector<float>* logits);
    bool attend(const AttentionIO& io, const std::vector<int32_t>& seq_ids, bool check);
    bool submit(const char* what);
    bool check_state();
    bool device_bytes(uint64_t* out);
    void finish();
    void progress(uint32_t step, double elapsed_s);
    void progress_clear();

    const Options& opt_;
    Results& res_;
    Model model_;
    MemoryReference ref_;
    std::vector<uint64_t> absorbed_;        // per sequence: tokens it absorbed
    std::vector<int> pending_;              // per sequence: the next token to evaluate
    uint64_t checked_calls_ = 0;

    kvrt_context ctx_ = nullptr;
    kvrt_memory memory_ = nullptr;
    kvrt_stream stream_ = nullptr;
    kvrt_buffer out_ = nullptr;  // reads, downloaded after each layer

    ProgressLine progress_line_;
};

bool MemoryRunner::setup() {
    const ModelConfig& cfg = model_.config();
    const char* step = "";
    if (!ok(create_context(opt_, &ctx_, &res_.device, &step), step)) return false;

    // MK of every layer and head, layer-major: the model's parameters, copied
    // by kvrt_memory_create. MV starts at zero.
    std::vector<float> keys;
    for (int l = 0; l < cfg.n_layers; ++l) {
        const std::vector<float>& k = model_.memory_keys(l);
        keys.insert(keys.end(), k.begin(), k.end());
    }
    kvrt_memory_desc d = KVRT_MEMORY_DESC_INIT;
    d.n_layers = static_cast<uint32_t>(cfg.n_layers);
    d.n_heads = static_cast<uint32_t>(cfg.n_heads);
    d.n_slots = opt_.slots;
    d.key_dim = d.value_dim = static_cast<uint32_t>(cfg.head_dim);
    d.max_seqs = opt_.seqs;
    d.state_type = KVRT_TYPE_F32;
    d.chunk_tokens = kChunkTokens;
    kvrt_memory_init key_init = KVRT_MEMORY_INIT_INIT;
    key_init.source = KVRT_MEMORY_SOURCE_HOST;
    key_init.element_type = KVRT_TYPE_F32;
    key_init.host = keys.data();
    d.keys = &key_init;
    d.label = "kvrt demo memory";
    kvrt_memory_estimate estimate = KVRT_MEMORY_ESTIMATE_INIT;
    if (!ok(kvrt_memory_estimate_size(ctx_, &d, &estimate), "estimating the memory")) return false;
    res_.memory.estimate_bytes = estimate.device_bytes;
    uint64_t before = 0, after = 0;
    if (!device_bytes(&before) || !ok(kvrt_memory_create(ctx_, &d, &memory_), "creating the memory") ||
        !device_bytes(&after))
        return false;
    res_.memory.created_bytes = after - before;

    if (!ok(create_timed_stream(ctx_, &stream_, &res_.timestamps), "creating the stream")) return false;

    // The largest batch is the prompt or one token per sequence.
    const uint64_t rows = std::max<uint64_t>(std::strlen(kPrompt), opt_.seqs);
    kvrt_buffer_desc bd = KVRT_BUFFER_DESC_INIT;
    bd.size = rows * static_cast<uint64_t>(cfg.q_dim()) * sizeof(float);
    bd.label = "kvrt demo memory reads";
    return ok(kvrt_buffer_create(ctx_, &bd, &out_), "creating the output buffer");
}

// Evaluates the prompt as one batch in sequence 0, then forks its state into
// every other sequence. Sequence s starts from the s-th most likely next token
// (and decodes greedily after that), so that the sequences differ.
bool MemoryRunner::prompt() {
    const Clock::time_point t0 = Clock::now();
    const double check0 = res_.check_s;
    const size_t n = std::strlen(kPrompt);
    std::vector<int> tokens;
    for (size_t i = 0; i < n; ++i) tokens.push_back(static_cast<unsigned char>(kPrompt[i]));
    std::vector<float> logits;
    if (!evaluate(tokens, std::vector<int32_t>(n, 0), {static_cast<int>(n - 1)}, true, &logits)) return false;
    res_.prompt_tokens = static_cast<uint32_t>(n);
    if (opt_.seqs > 1) {
        ScopeTimer t(&res_.runtime_s);
        if (!ok(kvrt_stream_begin(stream_), "recording the forks")) return false;
        for (uint32_t s = 1; s < opt_.seqs; ++s) {
            if (!ok(kvrt_memory_seq_cp(memory_, stream_, 0, static_cast<int32_t>(s)), "forking the prompt's state"))
                return false;
            ref_.fork(0, s);
            ++res_.memory.forks;
        }
        if (!submit("forking the prompt's state")) return false;
    }
    for (uint32_t s = 0; s < opt_.seqs; ++s) {
        absorbed_[s] = n;
        pending_.push_back(ranked_token(logits.data(), s));
    }
    res_.text.assign(opt_.seqs, std::string());
    res_.prompt_s = seconds_since(t0) - (res_.check_s - check0);
    // The device memory before decoding; decode() takes it again at the end.
    res_.memory.tokens_start = n;
    ScopeTimer t(&res_.runtime_s);
    return device_bytes(&res_.memory.device_bytes_start);
}

// The decode loop: each step evaluates the pending token of every sequence in
// one batch and samples the next greedily. Checked: the first step (right
// after the forks), every check_every-th and the last.
bool MemoryRunner::decode() {
    const Clock::time_point t0 = Clock::now();
    const double check0 = res_.check_s;
    const int vocab = model_.config().vocab;
    std::vector<int32_t> seq_ids(opt_.seqs);
    std::vector<int> rows(opt_.seqs);
    for (uint32_t s = 0; s < opt_.seqs; ++s) {
        seq_ids[s] = static_cast<int32_t>(s);
        rows[s] = static_cast<int>(s);
    }
    for (uint32_t step = 0; step < opt_.tokens; ++step) {
        const bool check = step == 0 || (step + 1) % opt_.check_every == 0 || step + 1 == opt_.tokens;
        std::vector<float> logits;
        if (!evaluate(pending_, seq_ids, rows, check, &logits)) return false;
        for (uint32_t s = 0; s < opt_.seqs; ++s) {
            ++absorbed_[s];
            res_.text[s].push_back(static_cast<char>(pending_[s]));
            pending_[s] = ranked_token(logits.data() + static_cast<size_t>(s) * vocab, 0);
        }
        res_.generated += opt_.seqs;
        progress(step + 1, seconds_since(t0) - (res_.check_s - check0));
    }
    progress_clear();
    res_.decode_s = seconds_since(t0) - (res_.check_s - check0);
    res_.memory.tokens_end = absorbed_[0];
    ScopeTimer t(&res_.runtime_s);
    return device_bytes(&res_.memory.device_bytes_end);
}

// Runs the model over one batch (token i in sequence seq_ids[i]) and writes
// the logits of `logit_rows`; the model calls attend() for every layer.
bool MemoryRunner::evaluate(const std::vector<int>& tokens, const std::vector<int32_t>& seq_ids,
                            const std::vector<int>& logit_rows, bool check, std::vector<float>* logits) {
    // The memory has no positions, and the memory variant of the model applies
    // no RoPE; it still takes each token's index in its sequence.
    std::vector<int32_t> positions(tokens.size());
    std::vector<uint64_t> next = absorbed_;
    for (size_t i = 0; i < tokens.size(); ++i)
        positions[i] = static_cast<int32_t>(next[static_cast<size_t>(seq_ids[i])]++);
    double attend_s = 0;
    const Clock::time_point t0 = Clock::now();
    const bool done = model_.forward(
        tokens, positions, logit_rows,
        [&](const AttentionIO& io) {
            ScopeTimer t(&attend_s);
            return attend(io, seq_ids, check);
        },
        logits);
    res_.model_s += seconds_since(t0) - attend_s;
    res_.evaluated += tokens.size();
    if (check) ++res_.checkpoints;
    return done;
}

// One layer: a kvrt_memory_update_read call over the batch (host inputs, reads
// into the output buffer), submitted and downloaded; then the reference
// absorbs the same tokens and, for a checked call, compares the reads.
bool MemoryRunner::attend(const AttentionIO& io, const std::vector<int32_t>& seq_ids, bool check) {
    const ModelConfig& cfg = model_.config();
    const uint32_t n = static_cast<uint32_t>(io.n);
    const size_t width = static_cast<size_t>(cfg.q_dim());  // n_heads * head_dim, for wq, wv, q and reads
    const kvrt_tensor_ref wq = host_tensor(io.mem_wq), wv = host_tensor(io.mem_wv), q = host_tensor(io.q);
    const kvrt_output_ref out = buffer_output(out_, 0);
    kvrt_memory_batch b = KVRT_MEMORY_BATCH_INIT;
    b.n_tokens = n;
    b.seq_ids = seq_ids.data();
    b.layer = io.layer;
    b.wq = &wq;
    b.wv = &wv;
    b.q = &q;
    b.out = &out;
    b.scale = 0.0f;  // 1/sqrt(head_dim)
    {
        ScopeTimer t(&res_.runtime_s);
        if (!ok(kvrt_stream_begin(stream_), "starting a recording") ||
            !ok(kvrt_memory_update_read(memory_, stream_, &b), "recording the memory's update and read") ||
            !submit("running the memory's update and read") ||
            !ok(kvrt_buffer_download(out_, 0, io.out, uint64_t{n} * width * sizeof(float)),
                "downloading the memory's reads"))
            return false;
    }

    // Token by token, as SPEC 6 defines it: update, then read (the read sees
    // the token's own update).
    ScopeTimer t(&res_.check_s);
    std::vector<double> want(check ? n * width : 0);
    for (uint32_t i = 0; i < n; ++i) {
        const uint32_t seq = static_cast<uint32_t>(seq_ids[i]);
        ref_.update(seq, io.layer, io.mem_wq + i * width, io.mem_wv + i * width);
        if (check) ref_.read(seq, io.layer, io.q + i * width, want.data() + i * width);
    }
    if (check) {
        fold(want.data(), io.out, want.size(), &res_.memory.reads);
        ++checked_calls_;
    }
    return true;
}

// Submits the recording, waits, and adds its GPU timings per operation label.
bool MemoryRunner::submit(const char* what) {
    const char* step = what;
    const kvrt_result r = submit_timed(stream_, res_.timestamps, &res_.gpu, &step);
    return ok(r, step ? step : what);
}

// Compares the final MV of every sequence and layer with the reference's.
bool MemoryRunner::check_state() {
    ScopeTimer t(&res_.check_s);
    const ModelConfig& cfg = model_.config();
    std::vector<float> got(static_cast<size_t>(cfg.n_heads) * opt_.slots * static_cast<size_t>(cfg.head_dim));
    for (uint32_t s = 0; s < opt_.seqs; ++s) {
        for (int l = 0; l < cfg.n_layers; ++l) {
            if (!ok(kvrt_memory_get_state(memory_, static_cast<int32_t>(s), l, got.data()), "reading the state back"))
                return false;
            fold(ref_.state(s, l).data(), got.data(), got.size(), &res_.memory.state);
        }
    }
    return true;
}

bool MemoryRunner::device_bytes(uint64_t* out) {
    kvrt_context_stats stats = KVRT_CONTEXT_STATS_INIT;
    if (!ok(kvrt_context_get_stats(ctx_, &stats), "reading the device memory in use")) return false;
    *out = stats.device_bytes;
    return true;
}

// Gathers the figures of the end of the run.
void MemoryRunner::finish() {
    read_context_stats(ctx_, &res_);
    Results::MemoryFigures& m = res_.memory;
    m.limit = kMemoryNmseLimit;
    res_.checked_calls = checked_calls_;
    const bool constant = m.device_bytes_start != 0 && m.device_bytes_end == m.device_bytes_start;
    res_.checks_passed = checked_calls_ > 0 && m.reads.nmse <= m.limit && m.state.nmse <= m.limit && constant;
}

void MemoryRunner::progress(uint32_t step, double elapsed_s) {
    progress_line_.update(step, opt_.tokens, opt_.seqs, elapsed_s, [&] {
        return "memory " + std::to_string(opt_.slots) + " slots, " + std::to_string(absorbed_[0]) +
               " tokens absorbed per sequence";
    });
}

void MemoryRunner::progress_clear() { progress_line_.clear(); }

}  // namespace

int run_memory(const Options& opt, Results* out) {
    MemoryRunner runner(opt, out);
    return runner.run();
}

}  // namespace cli::demo
