// The decode tests' CPU model; see decode_model.hpp.
#include "decode_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <numeric>

namespace kvrt_test::decode {

const char* const kPrompt = "kvrt keeps every key and value on the GPU.";

int ranked_token(const float* logits, uint32_t r) {
    std::vector<int> order(0x7f - 0x20);
    std::iota(order.begin(), order.end(), 0x20);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
    return order[r];
}

namespace {

// PCG32 (O'Neill, pcg-random.org): small, fast and identical on every
// platform, so the weights, and therefore the tests' tokens, are too.
class Pcg32 {
public:
    explicit Pcg32(uint64_t seed) {
        next();
        state_ += seed;
        next();
    }
    uint32_t next() {
        const uint64_t old = state_;
        state_ = old * 6364136223846793005ull + 1442695040888963407ull;
        const uint32_t xorshifted = static_cast<uint32_t>(((old >> 18u) ^ old) >> 27u);
        const uint32_t rot = static_cast<uint32_t>(old >> 59u);
        return (xorshifted >> rot) | (xorshifted << ((32u - rot) & 31u));
    }
    // Uniform in [0, 1).
    float uniform() { return static_cast<float>(next() >> 8) * (1.0f / 16777216.0f); }
    // Zero mean, unit variance, bell-shaped: the sum of four uniforms
    // (Irwin-Hall), rescaled. Bounded by +-3.46, which keeps activations tame.
    float normalish() { return (uniform() + uniform() + uniform() + uniform() - 2.0f) * 1.7320508f; }

private:
    uint64_t state_ = 0;
};

std::vector<float> random_matrix(Pcg32& rng, int rows, int cols, float scale) {
    std::vector<float> m(static_cast<size_t>(rows) * static_cast<size_t>(cols));
    for (float& x : m) x = rng.normalish() * scale;
    return m;
}

// Every dimension of the model is a multiple of kLanes.
constexpr int kLanes = 16;
constexpr int kTileRows = 8;

// y += a * x over n values, n a multiple of kLanes. The fixed-length inner
// loop over non-aliasing arrays is what the compiler turns into vector code
// at -O2 (about 4x faster than the plain loop).
void axpy(float a, const float* __restrict x, float* __restrict y, int n) {
    for (int o = 0; o < n; o += kLanes)
        for (int j = 0; j < kLanes; ++j) y[o + j] += a * x[o + j];
}

// y[t] = x[t] * W for n rows, W stored [in][out]. Tokens are processed in
// tiles so that each row of W is loaded once per tile of kTileRows tokens.
void matmul(const float* x, int n, int in, const std::vector<float>& w, int out, float* y) {
    for (int t0 = 0; t0 < n; t0 += kTileRows) {
        const int t1 = std::min(n, t0 + kTileRows);
        std::fill(y + static_cast<size_t>(t0) * out, y + static_cast<size_t>(t1) * out, 0.0f);
        for (int i = 0; i < in; ++i) {
            const float* wi = w.data() + static_cast<size_t>(i) * out;
            for (int t = t0; t < t1; ++t)
                axpy(x[static_cast<size_t>(t) * in + i], wi, y + static_cast<size_t>(t) * out, out);
        }
    }
}

// out[t] = x[t] / rms(x[t]) * weight, for n rows of d values.
void rms_norm(const float* x, int n, int d, const std::vector<float>& weight, float eps, float* out) {
    for (int t = 0; t < n; ++t) {
        const float* xt = x + static_cast<size_t>(t) * d;
        double ss = 0;
        for (int i = 0; i < d; ++i) ss += static_cast<double>(xt[i]) * xt[i];
        const float inv = static_cast<float>(1.0 / std::sqrt(ss / d + eps));
        float* ot = out + static_cast<size_t>(t) * d;
        for (int i = 0; i < d; ++i) ot[i] = xt[i] * inv * weight[static_cast<size_t>(i)];
    }
}

// Rotates `n_heads` head vectors of `head_dim` values in place to position
// `pos` with RoPE in normal pairing: pair i = (2i, 2i+1) turns by
// pos * base^(-2i/head_dim). Angles are computed in double.
void rope_rotate(float* x, int n_heads, int head_dim, double base, int32_t pos) {
    for (int i = 0; i < head_dim / 2; ++i) {
        const double angle = pos * std::pow(base, -2.0 * i / head_dim);
        const float c = static_cast<float>(std::cos(angle));
        const float s = static_cast<float>(std::sin(angle));
        for (int h = 0; h < n_heads; ++h) {
            float* pair = x + static_cast<size_t>(h) * head_dim + 2 * i;
            const float x0 = pair[0], x1 = pair[1];
            pair[0] = x0 * c - x1 * s;
            pair[1] = x0 * s + x1 * c;
        }
    }
}

}  // namespace

Model::Model(const ModelConfig& cfg) : cfg_(cfg) {
    Pcg32 rng(cfg.seed);
    const int d = cfg.d_model;
    // Weights scaled by 1/sqrt(fan_in) keep every projection at unit scale.
    const auto scale = [](int fan_in) { return 1.0f / std::sqrt(static_cast<float>(fan_in)); };
    embed_ = random_matrix(rng, cfg.vocab, d, 1.0f);
    // Untied: with random weights, a tied output projection would mostly
    // predict the token just read (its own embedding), and greedy decoding
    // would repeat one byte forever.
    output_ = random_matrix(rng, cfg.vocab, d, scale(d));
    out_norm_.assign(static_cast<size_t>(d), 1.0f);
    layers_.resize(static_cast<size_t>(cfg.n_layers));
    for (Layer& l : layers_) {
        l.attn_norm.assign(static_cast<size_t>(d), 1.0f);
        l.ffn_norm.assign(static_cast<size_t>(d), 1.0f);
        l.wq = random_matrix(rng, d, cfg.q_dim(), scale(d));
        l.wk = random_matrix(rng, d, cfg.kv_dim(), scale(d));
        l.wv = random_matrix(rng, d, cfg.kv_dim(), scale(d));
        l.wo = random_matrix(rng, cfg.q_dim(), d, scale(cfg.q_dim()));
        l.w_gate = random_matrix(rng, d, cfg.d_ffn, scale(d));
        l.w_up = random_matrix(rng, d, cfg.d_ffn, scale(d));
        l.w_down = random_matrix(rng, cfg.d_ffn, d, scale(cfg.d_ffn));
    }
    if (!cfg.memory()) return;

    // The memory variant's parameters, from a generator of their own so that
    // the weights above do not depend on the variant. MK has unit-variance
    // entries, like a layer's keys. W_mq is scaled so that the update scores
    // MK wq (which kvrt does not scale) have a standard deviation of about 2:
    // with 256 slots, a token's update weights then spread over about twenty
    // of them (1 / sum(ww^2)), the largest about 0.2; neither even nor on one
    // slot. The reads use kvrt's default
    // scale 1/sqrt(head_dim) on the unit-scale Q, as attention would.
    Pcg32 mem_rng(cfg.seed ^ 0x6d656d6f7279ull);  // "memory"
    const int hd = cfg.n_heads * cfg.head_dim;
    for (Layer& l : layers_) {
        l.mem_keys = random_matrix(mem_rng, cfg.n_heads * cfg.memory_slots, cfg.head_dim, 1.0f);
        l.mem_wq = random_matrix(mem_rng, d, hd, scale(d) * 2.0f * scale(cfg.head_dim));
        l.mem_wv = random_matrix(mem_rng, d, hd, scale(d));
    }
}

void Model::forward(const std::vector<int>& tokens, const std::vector<int32_t>& positions,
                    const std::vector<int>& logit_rows, const AttendFn& attend, std::vector<float>* logits) const {
    const int n = static_cast<int>(tokens.size());
    const int d = cfg_.d_model, qd = cfg_.q_dim(), kvd = cfg_.kv_dim(), f = cfg_.d_ffn;
    const auto rows = [n](int width) { return std::vector<float>(static_cast<size_t>(n) * static_cast<size_t>(width)); };
    std::vector<float> x = rows(d), h = rows(d), proj = rows(d);
    const bool memory = cfg_.memory();
    // K and V (or the memory's wq and wv) of one layer.
    std::vector<float> q = rows(qd), attn = rows(qd);
    std::vector<float> k_raw = rows(memory ? 0 : kvd), k = rows(memory ? 0 : kvd), v = rows(memory ? 0 : kvd);
    std::vector<float> mem_wq = rows(memory ? qd : 0), mem_wv = rows(memory ? qd : 0);
    std::vector<float> gate = rows(f), up = rows(f);

    for (int t = 0; t < n; ++t)
        std::copy_n(embed_.data() + static_cast<size_t>(tokens[static_cast<size_t>(t)]) * d, d,
                    x.data() + static_cast<size_t>(t) * d);

    for (int li = 0; li < cfg_.n_layers; ++li) {
        const Layer& l = layers_[static_cast<size_t>(li)];
        // Attention block: x += Wo * attention(RoPE(Wq h), RoPE(Wk h), Wv h).
        // Memory variant: x += Wo * memory(wq = W_mq h, wv = W_mv h, q = Wq h).
        rms_norm(x.data(), n, d, l.attn_norm, cfg_.norm_eps, h.data());
        matmul(h.data(), n, d, l.wq, qd, q.data());
        AttentionIO io;
        io.layer = li;
        io.n = n;
        io.q = q.data();
        io.out = attn.data();
        if (memory) {
            matmul(h.data(), n, d, l.mem_wq, qd, mem_wq.data());
            matmul(h.data(), n, d, l.mem_wv, qd, mem_wv.data());
            io.mem_wq = mem_wq.data();
            io.mem_wv = mem_wv.data();
        } else {
            matmul(h.data(), n, d, l.wk, kvd, k_raw.data());
            matmul(h.data(), n, d, l.wv, kvd, v.data());
            k = k_raw;
            for (int t = 0; t < n; ++t) {
                const int32_t pos = positions[static_cast<size_t>(t)];
                rope_rotate(q.data() + static_cast<size_t>(t) * qd, cfg_.n_heads, cfg_.head_dim, cfg_.rope_base, pos);
                rope_rotate(k.data() + static_cast<size_t>(t) * kvd, cfg_.n_kv_heads, cfg_.head_dim, cfg_.rope_base,
                            pos);
            }
            io.k = k.data();
            io.k_raw = k_raw.data();
            io.v = v.data();
        }
        attend(io);
        matmul(attn.data(), n, qd, l.wo, d, proj.data());
        for (size_t i = 0; i < x.size(); ++i) x[i] += proj[i];

        // Feed-forward block: x += W_down * (silu(W_gate h) * W_up h).
        rms_norm(x.data(), n, d, l.ffn_norm, cfg_.norm_eps, h.data());
        matmul(h.data(), n, d, l.w_gate, f, gate.data());
        matmul(h.data(), n, d, l.w_up, f, up.data());
        for (size_t i = 0; i < gate.size(); ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
        matmul(gate.data(), n, f, l.w_down, d, proj.data());
        for (size_t i = 0; i < x.size(); ++i) x[i] += proj[i];
    }

    // Output: final norm, then the vocabulary projection.
    logits->assign(logit_rows.size() * static_cast<size_t>(cfg_.vocab), 0.0f);
    std::vector<float> last(static_cast<size_t>(d));
    for (size_t r = 0; r < logit_rows.size(); ++r) {
        rms_norm(x.data() + static_cast<size_t>(logit_rows[r]) * d, 1, d, out_norm_, cfg_.norm_eps, last.data());
        for (int tok = 0; tok < cfg_.vocab; ++tok) {
            const float* e = output_.data() + static_cast<size_t>(tok) * d;
            float acc = 0;
            for (int i = 0; i < d; ++i) acc += last[static_cast<size_t>(i)] * e[i];
            (*logits)[r * static_cast<size_t>(cfg_.vocab) + static_cast<size_t>(tok)] = acc;
        }
    }
}

}  // namespace kvrt_test::decode
