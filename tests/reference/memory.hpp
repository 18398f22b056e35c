// Double-precision CPU reference for the fixed-capacity memory (MV/MK) of
// SPEC.md section 6.
//
// One (layer, head) holds MK [M][E] and MV [M][D], row-major. Per token, with
// wq (E values) and wv (D values) supplied by the engine:
//
//   score = MK wq                 (M values, no scale)
//   ww    = softmax(score)        (M values)
//   MV   += ww (outer) wv         (M x D)
//
// A read with query q (E values) is attention of q over keys MK and values MV:
//
//   out = softmax(scale * MK q) MV     (D values)
//
// MK never changes after initialization. Softmaxes subtract their maximum
// first, so large scores do not overflow.
#pragma once

#include <cstddef>
#include <vector>

namespace kvrt::ref {

// The memory of one (layer, head).
struct MemoryHead {
    int m = 0;               // slots
    int e = 0;               // key size
    int d = 0;               // value size
    std::vector<double> mk;  // [m][e]
    std::vector<double> mv;  // [m][d]
};

// A memory of zeros (MK and MV). Throws std::invalid_argument for a size <= 0.
MemoryHead memory_head_zero(int m, int e, int d);

// A memory initialized from the given MK [m][e] and MV [m][d] (floats, as an
// engine would upload them). Throws std::invalid_argument for a size mismatch.
MemoryHead memory_head_init(int m, int e, int d, const std::vector<float>& mk,
                            const std::vector<float>& mv);

// Stable softmax of n values in place (the largest becomes exp(0) before the
// normalization). n == 0 does nothing.
void softmax_in_place(double* x, size_t n);

// The update weights of one token: softmax(MK wq), m values.
std::vector<double> memory_update_weights(const MemoryHead& mem, const float* wq);

// One token's update: MV += softmax(MK wq) (outer) wv.
void memory_update(MemoryHead& mem, const float* wq, const float* wv);

// Reads the memory: softmax(scale * MK q) MV, written to out[0..d).
void memory_read(const MemoryHead& mem, const float* q, double scale, double* out);

// Processes a chunk of n tokens one by one, as the parallel chunk kernel must
// reproduce: for token t, first the update with wq[t] and wv[t], then the read
// with q[t], so token t's read sees MV_t = MV_0 + sum_{i<=t} ww_i (outer) wv_i
// (its own update included). wq: [n][e], wv: [n][d], q: [n][e], out: [n][d].
void memory_process_chunk(MemoryHead& mem, int n, const float* wq, const float* wv,
                          const float* q, double scale, double* out);

// All heads of a memory cache: n_layers x n_heads MemoryHead, layer-major.
struct Memory {
    int n_layers = 0;
    int n_heads = 0;
    std::vector<MemoryHead> heads;

    // The head (layer, h); throws std::out_of_range when outside.
    MemoryHead& at(int layer, int h);
    const MemoryHead& at(int layer, int h) const;
};

// A zeroed memory of n_layers x n_heads heads of size (m, e, d).
Memory memory_zero(int n_layers, int n_heads, int m, int e, int d);

}  // namespace kvrt::ref
