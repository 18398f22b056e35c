// The decode tests of the fixed-capacity memory (SPEC.md section 6,
// kvrt_memory_* in kvrt.h): the memory variant of the model of
// decode_model.hpp, whose every layer's attention is a memory, streams three
// times as many tokens as the memory has slots through it, with one sequence
// and with two forked from the prompt's state.
//
// Per layer and query head the memory holds MK (slots keys of head_dim values,
// model parameters uploaded from the host at creation) and, per sequence, MV
// (slots values of head_dim values, starting at zero). For each token the
// model computes wq = W_mq x, wv = W_mv x and the read query q = Wq x (no
// RoPE: the memory has no positions); one kvrt_memory_update_read call per
// layer updates every sequence's state with its token and returns the token's
// read, which replaces the attention output. Nothing is ever evicted, so
// there is no context shift and the device memory stays the same however many
// tokens stream through.
//
// The prompt goes through sequence 0, then kvrt_memory_seq_cp copies its state
// to the other sequences, which then decode in one batch, each from its own
// state.
//
// Checked against the double-precision reference of memory_check.hpp (which
// knows MK and nothing else of kvrt and absorbs every token's wq and wv in
// order): the reads of the prompt, the first step after the forks, every
// check_every-th step and the last; the final MV of every sequence and layer
// (kvrt_memory_get_state); both held to SPEC 8's bound for the memory, NMSE
// <= 1e-6. And that the context's device memory after the last step is what
// it was after the prompt.
#include <cstring>
#include <string>

#include "decode_check.hpp"
#include "decode_model.hpp"
#include "memory_check.hpp"

using namespace kvrt_test;
using namespace kvrt_test::decode;

namespace {

// SPEC 8's limit of the memory's reads and state.
constexpr double kNmseLimit = 1e-6;

// Tokens per chunk of the memory's parallel kernels: the prompt fits in one
// chunk, and the working memory is an eighth of the default 512's.
constexpr uint32_t kChunkTokens = 64;

ModelConfig memory_model(uint32_t slots) {
    ModelConfig cfg;
    cfg.memory_slots = static_cast<int>(slots);
    return cfg;
}

// The memory of `model`: its MK from the host, MV from zero.
Geometry memory_geometry(const Model& model, uint32_t seqs) {
    const ModelConfig& cfg = model.config();
    Geometry g = shape(static_cast<uint32_t>(cfg.n_layers), static_cast<uint32_t>(cfg.n_heads),
                       static_cast<uint32_t>(cfg.memory_slots), static_cast<uint32_t>(cfg.head_dim),
                       static_cast<uint32_t>(cfg.head_dim), seqs, kChunkTokens);
    for (int l = 0; l < cfg.n_layers; ++l) {
        const std::vector<float>& k = model.memory_keys(l);
        g.host_keys.insert(g.host_keys.end(), k.begin(), k.end());
    }
    return g;
}

class MemoryRun {
public:
    MemoryRun(kvrt_context ctx, uint32_t slots, uint32_t seqs, uint32_t tokens, uint32_t check_every)
        : ctx_(ctx),
          seqs_(seqs),
          tokens_(tokens),
          check_every_(check_every),
          model_(memory_model(slots)),
          g_(memory_geometry(model_, seqs)),
          ref_(g_),
          memory_(ctx, g_),
          stream_(ctx),
          // The largest batch is the prompt or one token per sequence.
          out_(ctx, std::max<uint64_t>(std::strlen(kPrompt), seqs) * static_cast<uint64_t>(model_.config().q_dim()) *
                        sizeof(float)) {}

    void run() {
        prompt();
        const uint64_t bytes_start = device_bytes(ctx_);
        decode();
        REQUIRE(checked_ > 0);
        {
            INFO(checked_ << " calls compared; worst NMSE " << reads_.nmse << " at " << reads_.worst << ", max abs "
                          << reads_.max_abs);
            CHECK(reads_.nmse <= kNmseLimit);
        }
        CHECK(state_nmse(memory_, ref_, g_) <= kNmseLimit);
        CHECK(device_bytes(ctx_) == bytes_start);
    }

private:
    // The prompt as one batch in sequence 0, then its state forked into every
    // other sequence. Sequence s starts from the s-th most likely next token
    // (and decodes greedily after that), so that the sequences differ.
    void prompt() {
        const size_t n = std::strlen(kPrompt);
        std::vector<int> tokens;
        for (size_t i = 0; i < n; ++i) tokens.push_back(static_cast<unsigned char>(kPrompt[i]));
        std::vector<float> logits;
        evaluate(tokens, std::vector<int32_t>(n, 0), {static_cast<int>(n - 1)}, "the prompt", &logits);
        if (seqs_ > 1) {
            run_stream(stream_, [&] {
                for (uint32_t s = 1; s < seqs_; ++s)
                    KVRT_REQUIRE_OK(kvrt_memory_seq_cp(memory_, stream_, 0, static_cast<int32_t>(s)));
            });
            for (uint32_t s = 1; s < seqs_; ++s) ref_.seq_cp(0, s);
        }
        absorbed_ = n;
        for (uint32_t s = 0; s < seqs_; ++s) pending_.push_back(ranked_token(logits.data(), s));
    }

    // Each step evaluates the pending token of every sequence in one batch
    // and samples the next greedily.
    void decode() {
        const size_t vocab = static_cast<size_t>(model_.config().vocab);
        std::vector<int32_t> seq_ids(seqs_);
        std::vector<int> rows(seqs_);
        for (uint32_t s = 0; s < seqs_; ++s) {
            seq_ids[s] = static_cast<int32_t>(s);
            rows[s] = static_cast<int>(s);
        }
        for (uint32_t step = 0; step < tokens_; ++step) {
            const bool check = step == 0 || (step + 1) % check_every_ == 0 || step + 1 == tokens_;
            std::vector<float> logits;
            evaluate(pending_, seq_ids, rows, check ? "step " + std::to_string(step + 1) : std::string(), &logits);
            ++absorbed_;
            for (uint32_t s = 0; s < seqs_; ++s) pending_[s] = ranked_token(logits.data() + s * vocab, 0);
        }
    }

    // Runs the model over one batch (token i in sequence seq_ids[i]); every
    // layer's memory call is checked unless `what` is empty.
    void evaluate(const std::vector<int>& tokens, const std::vector<int32_t>& seq_ids, const std::vector<int>& logit_rows,
                  const std::string& what, std::vector<float>* logits) {
        // The memory variant applies no RoPE; the model still takes each
        // token's index in its sequence.
        std::vector<int32_t> positions(tokens.size());
        std::vector<uint64_t> next(seqs_, absorbed_);
        for (size_t i = 0; i < tokens.size(); ++i)
            positions[i] = static_cast<int32_t>(next[static_cast<size_t>(seq_ids[i])]++);
        model_.forward(tokens, positions, logit_rows, [&](const AttentionIO& io) { attend(io, seq_ids, what); }, logits);
    }

    // One layer: a kvrt_memory_update_read call over the batch (host inputs,
    // reads into the output buffer), submitted and downloaded; then the
    // reference absorbs the same tokens, updating and reading token by token
    // as SPEC 6 defines it (a read sees its token's own update).
    void attend(const AttentionIO& io, const std::vector<int32_t>& seq_ids, const std::string& what) {
        const size_t width = static_cast<size_t>(model_.config().q_dim()) * static_cast<size_t>(io.n);
        Batch b;
        b.n = static_cast<uint32_t>(io.n);
        b.layer = io.layer;
        b.ids = seq_ids;
        b.wq.assign(io.mem_wq, io.mem_wq + width);
        b.wv.assign(io.mem_wv, io.mem_wv + width);
        b.q.assign(io.q, io.q + width);
        MemoryBatch mb(b, nullptr);
        mb.output_to(out_);
        run_stream(stream_, [&] { KVRT_REQUIRE_OK(kvrt_memory_update_read(memory_, stream_, mb.get())); });
        KVRT_REQUIRE_OK(kvrt_buffer_download(out_, 0, io.out, width * sizeof(float)));
        std::vector<double> want;
        ref_.run(Op::UpdateRead, b, &want);
        if (what.empty()) return;
        fold(io.out, want.data(), want.size(), what + ", layer " + std::to_string(io.layer), &reads_);
        ++checked_;
    }

    const kvrt_context ctx_;
    const uint32_t seqs_, tokens_, check_every_;
    const Model model_;
    const Geometry g_;
    Reference ref_;
    Memory memory_;
    Stream stream_;
    Buffer out_;  // reads, downloaded after each layer
    uint64_t absorbed_ = 0;      // tokens each sequence absorbed
    std::vector<int> pending_;   // per sequence: the next token to evaluate
    ErrorFigures reads_;
    uint64_t checked_ = 0;
};

void run_case(uint32_t seqs) {
    GpuContext ctx;
    MemoryRun run(ctx, 64, seqs, 192, 16);
    run.run();
}

}  // namespace

TEST_CASE("decode: memory f32", "[decode][memory]") { run_case(1); }
TEST_CASE("decode: memory f32, 2 sequences", "[decode][memory]") { run_case(2); }
