// A harness for RoPE-shift tests: a cache of K rotated on the host to each
// token's position, the exact K of a position (double precision), and K as
// the shift kernels must leave it: each head rotated in single precision by
// the f32 (cos, sin) of its delta and stored again in the cache's type
// (rounded to f16, or quantized to Q8_0 / Q4_0 by the GGML rules). Against
// that reference a correct kernel is off by almost nothing, so a test catches
// a rotation that is only slightly wrong, which the format's own noise (what
// a comparison with freshly stored K measures) would hide.
#pragma once

#include <cstdint>
#include <vector>

#include "gpu_test.hpp"
#include "reference/rope.hpp"

namespace kvrt_test {

struct ShiftCache {
    Cache cache;
    kvrt_type type = KVRT_TYPE_F32;
    uint32_t kv_heads = 2, dim = 64, layers = 2;
    kvrt::ref::RopeParams rope;

    ShiftCache(kvrt_context ctx, kvrt_type type, kvrt_rope_desc rp, uint32_t capacity = 128, kvrt_flags flags = 0,
               uint32_t head_dim = 64);
    ShiftCache(const ShiftCache&) = delete;
    ShiftCache& operator=(const ShiftCache&) = delete;

    uint32_t row() const { return kv_heads * dim; }

    // K of token positions `pos` for sequence `seq`: raw vectors rotated to
    // their positions (rotate = false stores them raw, for deferred RoPE), in
    // every layer. V is a function of the raw K, so the same token always has
    // the same V. Returns the cells.
    std::vector<uint32_t> store(const std::vector<int32_t>& pos, int32_t seq, const std::vector<float>& raw,
                                bool rotate = true);
    // The same tokens with K given as stored bytes of the cache's type (one
    // layer's rows, used for every layer), V as store() makes it from `raw`.
    std::vector<uint32_t> store_bytes(const std::vector<int32_t>& pos, int32_t seq, const std::vector<float>& raw,
                                      const std::vector<uint8_t>& k_bytes);

    // The exact K (double precision) of raw vectors at positions `pos`.
    std::vector<float> exact(const std::vector<int32_t>& pos, const std::vector<float>& raw) const;

    // K of `cells` in `layer`, dequantized, and its stored bytes.
    std::vector<float> read_k(const std::vector<uint32_t>& cells, uint32_t layer) const;
    std::vector<uint8_t> read_k_bytes(const std::vector<uint32_t>& cells, uint32_t layer) const;

    // Stored bytes of K rows (n rows of row() values) in the cache's type.
    std::vector<uint8_t> encode(const std::vector<float>& k) const;
    std::vector<float> decode(const std::vector<uint8_t>& bytes) const;

    // The stored bytes K rows get from the shift kernels when row i (its
    // dequantized values in `k`) moves by delta[i] positions: each rotated
    // value x0 * c - x1 * s (x0 * s + x1 * c) with both products rounded to
    // f32 before the sum, whatever the host compiler would contract (GCC
    // fuses such a product into the add by default in C++ where the CPU has
    // FMA, as on aarch64; where the products cancel, that moves an f32
    // result by hundreds of its own ulps).
    std::vector<uint8_t> shifted(const std::vector<float>& k, const std::vector<int32_t>& delta) const;

    // The same with one product of each rotated value fused into the sum
    // (one multiply-add, rounded once): the first product for fused_first,
    // the second otherwise. SPIR-V lets a GPU compiler contract a multiply
    // and an add that the shader does not mark NoContraction, and a device
    // with FMA may: that is a correct kernel too.
    std::vector<uint8_t> shifted_fused(const std::vector<float>& k, const std::vector<int32_t>& delta,
                                       bool fused_first) const;

    // shifted() and both shifted_fused() forms: what a correct kernel leaves,
    // whichever way its compiler contracts the rotation.
    std::vector<std::vector<uint8_t>> shift_roundings(const std::vector<float>& k,
                                                      const std::vector<int32_t>& delta) const;
};

std::vector<float> random_raw(uint32_t n, uint32_t row, uint32_t seed);
std::vector<int32_t> iota(int32_t first, uint32_t n);
kvrt_rope_desc rope_params(kvrt_rope_mode mode, uint32_t n_rot, bool yarn);

// Attention outputs of one query (position `qpos`, sequence `seq`) over layer 0.
std::vector<float> attend(const ShiftCache& c, int32_t qpos, int32_t seq, const std::vector<float>& q);

// How K as the kernels left it (`got`, dequantized) compares with the stored
// bytes the reference shift gives: how many values differ, by how much at
// most in steps of the format there (an ulp of F32 or F16, the block's
// quantization step for Q8_0 and Q4_0), and the nmse (against the first
// expectation). With several expectations (shift_roundings()), each value
// is measured against the nearest one: a value equal to any of them does
// not differ.
struct ReferenceDiff {
    uint64_t values = 0, differ = 0;
    double max_steps = 0, nmse = 0;
};
ReferenceDiff compare_with_reference(const ShiftCache& c, const std::vector<float>& got,
                                     const std::vector<uint8_t>& expect);
ReferenceDiff compare_with_reference(const ShiftCache& c, const std::vector<float>& got,
                                     const std::vector<std::vector<uint8_t>>& expect);

// CHECKs that K matches the reference. The kernels agree with one of the
// shift_roundings() to the last bit on lavapipe on x86_64 (measured: no
// value differs in any shift test), and pass on lavapipe on aarch64 and
// 32-bit ARM under qemu (tests/android/qemu_tests.sh). A value near a
// rounding boundary of F16, Q8_0 or Q4_0 may still land one step away
// (about one in 10^4 for F16, fewer for the block formats). So at most 0.1%
// of the values (any for F32) may differ, each by at most one step; a
// rotation wrong by 1e-5 rad or more, a wrong rounding or scale does not
// pass.
void check_reference(const ReferenceDiff& d, kvrt_type type);

// How many values of `got` differ from `expect` (bit for bit).
uint64_t count_differences(const std::vector<float>& got, const std::vector<float>& expect);

}  // namespace kvrt_test
