// The model of the decode tests: a small llama-style decoder (RMSNorm, RoPE,
// grouped-query attention, SwiGLU) with random weights from a fixed seed. Its
// matmuls run on the CPU, as an engine's would; attention is delegated to a
// callback, which the tests route through kvrt.
//
// The weights are random, so the tokens it picks are noise. What matters is
// that the activations look like a real model's (normalized, unit-scale Q and
// K, softmax neither flat nor one-hot), so the cache sees realistic data, and
// that each layer's input depends on the attention outputs of the layer
// before, as in a real forward pass.
//
// With memory_slots > 0 the model is the fixed-capacity-memory variant of the
// same decoder (SPEC.md section 6): each layer's attention reads a memory
// instead of a KV cache. Every layer then has three more parameters, per
// query head h:
//   MK_h   memory_slots keys of head_dim values (the memory's fixed keys),
//   W_mq   the update-key projection, wq = W_mq x (head_dim values per head),
//   W_mv   the update-value projection, wv = W_mv x (head_dim values per head),
// and the memory's read query is the existing Q projection, without RoPE (the
// memory has no positions). K and V are not computed. The extra parameters
// come from a generator of their own, so every other weight is the same in
// both variants.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace kvrt_test::decode {

struct ModelConfig {
    int n_layers = 4;
    int d_model = 256;
    int n_heads = 8;      // query heads
    int n_kv_heads = 2;   // KV heads (grouped-query attention: 4 query heads each)
    int head_dim = 64;
    int d_ffn = 512;      // SwiGLU hidden size
    int vocab = 256;      // one token per byte
    double rope_base = 10000.0;
    float norm_eps = 1e-5f;
    uint64_t seed = 0x6b767274u;  // "kvrt"
    int memory_slots = 0;         // > 0: the memory variant, M slots per layer and head

    bool memory() const { return memory_slots > 0; }

    int q_dim() const { return n_heads * head_dim; }
    int kv_dim() const { return n_kv_heads * head_dim; }
};

// One layer's attention for a batch of n tokens; every array is row-major, one
// row per token.
struct AttentionIO {
    int layer = 0;
    int n = 0;
    const float* q = nullptr;      // [n][q_dim], rotated to the token's position
                                   // (memory variant: not rotated)
    const float* k = nullptr;      // [n][kv_dim], rotated to the token's position
    const float* k_raw = nullptr;  // [n][kv_dim], the same keys before rotation
    const float* v = nullptr;      // [n][kv_dim]
    // Memory variant only (k, k_raw and v are then null): the memory's update
    // inputs, packed rows of every head as kvrt_memory_batch reads them.
    const float* mem_wq = nullptr;  // [n][n_heads * head_dim]
    const float* mem_wv = nullptr;  // [n][n_heads * head_dim]
    float* out = nullptr;          // [n][q_dim]: the attention output, written by the callback
};

class Model {
public:
    explicit Model(const ModelConfig& cfg);

    const ModelConfig& config() const { return cfg_; }

    // Memory variant: the fixed keys MK of `layer`, [n_heads][memory_slots]
    // [head_dim] (the layout of one layer of kvrt_memory_init).
    const std::vector<float>& memory_keys(int layer) const { return layers_[static_cast<size_t>(layer)].mem_keys; }

    // Fills io.out for one layer.
    using AttendFn = std::function<void(const AttentionIO& io)>;

    // Runs `tokens` (at `positions`) through every layer, calling `attend`
    // once per layer with the whole batch, and writes the logits of the rows
    // listed in `logit_rows` to `logits` ([logit_rows.size()][vocab]).
    void forward(const std::vector<int>& tokens, const std::vector<int32_t>& positions,
                 const std::vector<int>& logit_rows, const AttendFn& attend, std::vector<float>* logits) const;

private:
    struct Layer {
        std::vector<float> attn_norm, ffn_norm;  // [d_model]
        std::vector<float> wq, wk, wv, wo;       // [in][out]
        std::vector<float> w_gate, w_up, w_down;
        std::vector<float> mem_keys, mem_wq, mem_wv;  // memory variant only
    };

    ModelConfig cfg_;
    std::vector<float> embed_;   // [vocab][d_model]
    std::vector<float> output_;  // [vocab][d_model], the vocabulary projection
    std::vector<float> out_norm_;
    std::vector<Layer> layers_;
};

// The fixed prompt of the decode tests, one token per byte.
extern const char* const kPrompt;

// The token of rank `r` (0 = most likely) in a row of logits, among the
// printable ASCII bytes only (a logit mask, as engines apply for grammars).
int ranked_token(const float* logits, uint32_t r);

}  // namespace kvrt_test::decode
