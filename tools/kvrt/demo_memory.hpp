// `kvrt demo --strategy memory`: the demo's decoder with each layer's
// attention replaced by kvrt's fixed-capacity memory (SPEC.md section 6,
// kvrt_memory_* in kvrt.h), and the double-precision reference it is checked
// against.
//
// Per layer and query head the memory holds MK (--slots keys of head_dim
// values, model parameters uploaded at creation) and, per sequence, MV
// (--slots values of head_dim values, starting at zero). For each token the
// model computes wq = W_mq x, wv = W_mv x and the read query q = Wq x (no
// RoPE: the memory has no positions); one kvrt_memory_update_read call per
// layer updates every sequence's state with its token and returns the token's
// read, which replaces the attention output. Nothing is ever evicted, so
// there is no context shift and the device memory stays the same however many
// tokens stream through.
//
// Several sequences (--seqs K): the prompt goes through sequence 0, then
// kvrt_memory_seq_cp copies its state to sequences 1..K-1, which then
// decode in one batch, each from its own state.
//
// The reference (MemoryReference) knows MK from the model and nothing else of
// kvrt: it absorbs every token's wq and wv, in order, into its own state in
// double precision from the initial one (MV = 0), and computes the reads of
// the checked calls from that. At the end it also compares the final MV of
// every sequence and layer (kvrt_memory_get_state). Both are held to SPEC 8's
// bound for the memory: NMSE <= 1e-6.
#pragma once

#include <cstdint>
#include <vector>

#include "demo_model.hpp"
#include "demo_run.hpp"

namespace cli::demo {

// SPEC 6 in double precision for every (sequence, layer, head) of the demo's
// memory: MK from the model, MV starting at zero.
class MemoryReference {
public:
    MemoryReference(const Model& model, uint32_t seqs);

    // One token of `seq` at `layer`: MV += softmax(MK wq) (outer) wv for every
    // head; wq and wv hold n_heads * head_dim values, head-major.
    void update(uint32_t seq, int layer, const float* wq, const float* wv);
    // The read of `seq` at `layer` with `q` (n_heads * head_dim values):
    // softmax(MK q / sqrt(head_dim)) MV per head, into out (same size).
    void read(uint32_t seq, int layer, const float* q, double* out) const;
    // `dst` takes a copy of the state of `src` (kvrt_memory_seq_cp).
    void fork(uint32_t src, uint32_t dst);
    // MV of `seq` at `layer`: [n_heads][slots][head_dim], as
    // kvrt_memory_get_state returns it.
    const std::vector<double>& state(uint32_t seq, int layer) const { return mv_[index(seq, layer)]; }

private:
    size_t index(uint32_t seq, int layer) const {
        return static_cast<size_t>(seq) * static_cast<size_t>(layers_) + static_cast<size_t>(layer);
    }

    int layers_, heads_, slots_, dim_;
    std::vector<std::vector<double>> mk_;  // per layer: [n_heads][slots][dim]
    std::vector<std::vector<double>> mv_;  // per (seq, layer): [n_heads][slots][dim]
};

// The NMSE limit of the memory's reads and state (SPEC.md section 8).
constexpr double kMemoryNmseLimit = 1e-6;

// Runs the memory demo (Options::strategy == Strategy::Memory; the cache
// options do not apply). Returns 0, or 1 after printing why it stopped; `out`
// holds the figures gathered so far either way.
int run_memory(const Options& opt, Results* out);

}  // namespace cli::demo
