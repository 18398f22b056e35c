// The decode loop shared by the decode tests over a KV cache (cell layout in
// test_decode_cells.cpp, static padded layout in test_decode_static.cpp): an
// engine's loop over kvrt's public C API.
//
// The model (decode_model.hpp) computes Q, K and V on the CPU; everything
// about the cache goes through kvrt: kvrt_cache_place once per batch, then
// per layer kvrt_cache_write and kvrt_cache_attention recorded into one
// stream and submitted together. A checked batch then reads the K/V of the
// cells its queries see back with kvrt_cache_read and compares every layer's
// attention output with the reference (decode_check.hpp). What differs
// between layouts (which cells the mirror gives a token, which cells a check
// compares) a run supplies through the virtual functions below.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "decode_check.hpp"
#include "decode_model.hpp"
#include "gpu_test.hpp"

namespace kvrt_test::decode {

// Tokens evaluated together, each in one sequence; the tokens of a sequence
// in increasing positions.
struct TokenBatch {
    std::vector<int> tokens;
    std::vector<int32_t> positions;
    std::vector<int32_t> seq_ids;
    std::vector<int> logit_rows;  // rows whose logits are needed

    void add(int token, size_t pos, uint32_t seq) {
        tokens.push_back(token);
        positions.push_back(static_cast<int32_t>(pos));
        seq_ids.push_back(static_cast<int32_t>(seq));
    }
    uint32_t size() const { return static_cast<uint32_t>(tokens.size()); }
};

// The prompt (kPrompt) as a batch in each of `seqs` sequences, 0 to seqs - 1;
// the logits of sequence 0's last token are asked for.
TokenBatch prompt_batch(uint32_t seqs);

struct Sequence {
    std::vector<int> tokens;  // the token at each position of the sequence: its n_past is tokens.size()
    int pending = 0;          // sampled from the last logits, evaluated by the next step
};

class CacheRun {
public:
    CacheRun(kvrt_context ctx, kvrt_type kv_type, uint32_t seqs, uint32_t mirror_cells);
    virtual ~CacheRun();

    CacheRun(const CacheRun&) = delete;
    CacheRun& operator=(const CacheRun&) = delete;

protected:
    // After kvrt_cache_place gave the batch its cells: the run's own
    // bookkeeping (the mirror's cells).
    virtual void placed(const TokenBatch& b, const std::vector<uint32_t>& cells) = 0;
    // After a layer's K/V rows were stored in `cells`.
    virtual void stored(const AttentionIO& io, const TokenBatch& b, const std::vector<uint32_t>& cells) = 0;
    // The cells a check compares: kvrt's and the mirror's.
    virtual void checked_cells(std::vector<uint32_t>* cells, std::vector<uint32_t>* mirror_cells) const = 0;

    // The cache's geometry and type for the model, and the model's RoPE.
    kvrt_cache_desc cache_desc() const;
    kvrt_rope_desc model_rope() const;
    // Creates the cache, a stream and the attention output buffer for
    // batches of up to `rows` tokens.
    void create(const kvrt_cache_desc& desc, uint64_t rows);

    // Places a batch, then runs the model over it; with `check`, compares
    // every layer's attention with the reference. `what` names the batch in
    // the figures.
    void evaluate(const TokenBatch& b, bool check, const std::string& what, std::vector<float>* logits);
    // After the prompt: every sequence holds the prompt and starts from the
    // s-th most likely token of the prompt's last logits, so that the
    // sequences differ.
    void start_sequences(const std::vector<float>& logits);
    // The pending token of every sequence, one batch, with their logits asked for.
    TokenBatch step_batch() const;
    // Appends each sequence's pending token to it and samples the next from
    // its row of `logits` (row s for sequence s).
    void advance(const std::vector<float>& logits);
    // kvrt_cache_get_info, which must succeed.
    kvrt_cache_info info() const;

    const kvrt_context ctx_;
    const kvrt_type kv_type_;
    const uint32_t n_seqs_;
    const Model model_;
    Mirror mirror_;
    AttentionCheck check_;
    std::vector<Sequence> seqs_;

    kvrt_cache cache_ = nullptr;
    kvrt_stream stream_ = nullptr;
    kvrt_buffer out_ = nullptr;  // attention outputs, downloaded after each layer

private:
    void attend(const AttentionIO& io, const TokenBatch& b, const std::vector<uint32_t>& cells, bool check,
                const std::string& what);
};

}  // namespace kvrt_test::decode
