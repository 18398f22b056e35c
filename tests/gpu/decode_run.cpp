// The decode tests' shared loop over a KV cache; see decode_run.hpp.
#include "decode_run.hpp"

#include <cstring>

namespace kvrt_test::decode {

TokenBatch prompt_batch(uint32_t seqs) {
    const size_t n = std::strlen(kPrompt);
    TokenBatch b;
    for (uint32_t s = 0; s < seqs; ++s)
        for (size_t i = 0; i < n; ++i) b.add(static_cast<unsigned char>(kPrompt[i]), i, s);
    b.logit_rows = {static_cast<int>(n - 1)};
    return b;
}

CacheRun::CacheRun(kvrt_context ctx, kvrt_type kv_type, uint32_t seqs, uint32_t mirror_cells)
    : ctx_(ctx),
      kv_type_(kv_type),
      n_seqs_(seqs),
      model_(ModelConfig{}),
      mirror_(model_.config(), mirror_cells),
      check_(model_.config(), kv_type),
      seqs_(seqs) {}

CacheRun::~CacheRun() {
    kvrt_buffer_destroy(out_);
    kvrt_stream_destroy(stream_);
    kvrt_cache_destroy(cache_);
}

kvrt_cache_desc CacheRun::cache_desc() const {
    const ModelConfig& cfg = model_.config();
    kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
    d.n_layers = static_cast<uint32_t>(cfg.n_layers);
    d.n_heads = static_cast<uint32_t>(cfg.n_heads);
    d.n_kv_heads = static_cast<uint32_t>(cfg.n_kv_heads);
    d.head_dim_k = static_cast<uint32_t>(cfg.head_dim);
    d.max_seqs = n_seqs_;
    d.type_k = d.type_v = kv_type_;
    d.label = "decode test cache";
    return d;
}

kvrt_rope_desc CacheRun::model_rope() const {
    kvrt_rope_desc rope = KVRT_ROPE_DESC_INIT;
    rope.mode = KVRT_ROPE_MODE_NORMAL;
    rope.freq_base = static_cast<float>(model_.config().rope_base);
    return rope;
}

void CacheRun::create(const kvrt_cache_desc& desc, uint64_t rows) {
    KVRT_REQUIRE_OK(kvrt_cache_create(ctx_, &desc, &cache_));
    kvrt_stream_desc sd = KVRT_STREAM_DESC_INIT;
    sd.label = "decode test";
    KVRT_REQUIRE_OK(kvrt_stream_create(ctx_, &sd, &stream_));
    kvrt_buffer_desc bd = KVRT_BUFFER_DESC_INIT;
    bd.size = rows * static_cast<uint64_t>(model_.config().q_dim()) * sizeof(float);
    bd.label = "decode test attention output";
    KVRT_REQUIRE_OK(kvrt_buffer_create(ctx_, &bd, &out_));
}

kvrt_cache_info CacheRun::info() const {
    kvrt_cache_info i = KVRT_CACHE_INFO_INIT;
    KVRT_REQUIRE_OK(kvrt_cache_get_info(cache_, &i));
    return i;
}

void CacheRun::evaluate(const TokenBatch& b, bool check, const std::string& what, std::vector<float>* logits) {
    std::vector<uint32_t> cells(b.size());
    const kvrt_batch kb = make_batch(b.size(), b.positions.data(), b.seq_ids.data());
    KVRT_REQUIRE_OK(kvrt_cache_place(cache_, &kb, cells.data()));
    placed(b, cells);
    model_.forward(
        b.tokens, b.positions, b.logit_rows, [&](const AttentionIO& io) { attend(io, b, cells, check, what); }, logits);
}

// One layer: writes the batch's K/V into its cells and runs attention over
// the cache, both recorded into one stream and submitted together; then the
// optional check.
void CacheRun::attend(const AttentionIO& io, const TokenBatch& b, const std::vector<uint32_t>& cells, bool check,
                      const std::string& what) {
    const ModelConfig& cfg = model_.config();
    const uint32_t n = static_cast<uint32_t>(io.n);
    const size_t kvd = static_cast<size_t>(cfg.kv_dim());
    const kvrt_tensor_ref k = host_tensor(io.k), v = host_tensor(io.v), q = host_tensor(io.q);
    const kvrt_output_ref out = buffer_output(out_, 0);
    const kvrt_batch queries = make_batch(n, b.positions.data(), b.seq_ids.data());
    run_stream(stream_, [&] {
        KVRT_REQUIRE_OK(kvrt_cache_write(cache_, stream_, n, cells.data(), io.layer, &k, &v));
        KVRT_REQUIRE_OK(kvrt_cache_attention(cache_, stream_, io.layer, &queries, &q, &out, nullptr));
    });
    KVRT_REQUIRE_OK(
        kvrt_buffer_download(out_, 0, io.out, uint64_t{n} * static_cast<uint64_t>(cfg.q_dim()) * sizeof(float)));
    stored(io, b, cells);
    if (!check) return;

    std::vector<uint32_t> used, mirror_used;
    checked_cells(&used, &mirror_used);
    std::vector<float> cache_k(used.size() * kvd), cache_v(used.size() * kvd);
    KVRT_REQUIRE_OK(kvrt_cache_read(cache_, io.layer, static_cast<uint32_t>(used.size()), used.data(), cache_k.data(),
                                    bytes_of(cache_k), cache_v.data(), bytes_of(cache_v)));
    AttentionCall call;
    call.layer = io.layer;
    call.n = io.n;
    call.q = io.q;
    call.positions = b.positions.data();
    call.seq_ids = b.seq_ids.data();
    call.out = io.out;
    check_.check(call, mirror_, mirror_used, cache_k.data(), cache_v.data(),
                 what + ", layer " + std::to_string(io.layer));
}

void CacheRun::start_sequences(const std::vector<float>& logits) {
    const std::vector<int> prompt = prompt_batch(1).tokens;
    for (uint32_t s = 0; s < n_seqs_; ++s) {
        seqs_[s].tokens = prompt;
        seqs_[s].pending = ranked_token(logits.data(), s);
    }
}

TokenBatch CacheRun::step_batch() const {
    TokenBatch b;
    for (uint32_t s = 0; s < n_seqs_; ++s) {
        b.add(seqs_[s].pending, seqs_[s].tokens.size(), s);
        b.logit_rows.push_back(static_cast<int>(s));
    }
    return b;
}

void CacheRun::advance(const std::vector<float>& logits) {
    const size_t vocab = static_cast<size_t>(model_.config().vocab);
    for (uint32_t s = 0; s < n_seqs_; ++s) {
        Sequence& seq = seqs_[s];
        seq.tokens.push_back(seq.pending);
        seq.pending = ranked_token(logits.data() + s * vocab, 0);
    }
}

}  // namespace kvrt_test::decode
