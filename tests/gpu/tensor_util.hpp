// Helpers of the stored-bytes and strided-tensor tests: caches that destroy
// themselves, the CPU reference encoding of a row in any stored type, raw
// reads, and the placement of packed rows at arbitrary strides (with sentinel
// bytes everywhere else).
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gpu_test.hpp"
#include "common/random.hpp"
#include "reference/half.hpp"
#include "reference/quant.hpp"

namespace kvrt_test {

// A cache destroyed at scope exit.
class CacheOwner {
public:
    CacheOwner(kvrt_context ctx, const kvrt_cache_desc& desc) {
        KVRT_REQUIRE_OK(kvrt_cache_create(ctx, &desc, c_.out()));
    }
    CacheOwner(const CacheOwner&) = delete;
    CacheOwner& operator=(const CacheOwner&) = delete;
    operator kvrt_cache() const { return c_; }

private:
    Cache c_;
};

// Normal random values, with a zero block and outliers so that every
// quantizer rounds in interesting places.
inline std::vector<float> random_values(size_t n, uint32_t seed) {
    std::vector<float> x = kvrt_test::Rng(seed).normal(n);
    for (size_t i = 0; i < n && i < 32; ++i) x[i] = 0.0f;
    for (size_t i = 40; i < n; i += 97) x[i] *= 25.0f;
    return x;
}

// Bytes of a row of n values of `type` (the stored type of a cache).
inline size_t stored_row_bytes(kvrt_type type, size_t n) {
    return n / kvrt_type_block_size(type) * kvrt_type_block_bytes(type);
}

// The CPU reference encoding of n values in `type`; static-scale types use
// (scale, zero_point).
inline std::vector<uint8_t> reference_encode(kvrt_type type, const float* x, size_t n, QuantScale q = {}) {
    std::vector<uint8_t> out(stored_row_bytes(type, n));
    namespace ref = kvrt::ref;
    switch (type) {
        case KVRT_TYPE_F32: ref::encode_row(ref::Type::F32, x, static_cast<int64_t>(n), out.data()); break;
        case KVRT_TYPE_F16: ref::encode_row(ref::Type::F16, x, static_cast<int64_t>(n), out.data()); break;
        case KVRT_TYPE_Q8_0: ref::encode_row(ref::Type::Q8_0, x, static_cast<int64_t>(n), out.data()); break;
        case KVRT_TYPE_Q4_0: ref::encode_row(ref::Type::Q4_0, x, static_cast<int64_t>(n), out.data()); break;
        case KVRT_TYPE_U8_STATIC:
            ref::encode_row_static(ref::StaticType::U8, x, static_cast<int64_t>(n), q.scale, q.zero_point, out.data());
            break;
        case KVRT_TYPE_U16_STATIC:
            ref::encode_row_static(ref::StaticType::U16, x, static_cast<int64_t>(n), q.scale, q.zero_point, out.data());
            break;
        default: FAIL("no reference encoding for type " << static_cast<int>(type));
    }
    return out;
}

// Values as the bytes of an F32 or F16 tensor.
inline std::vector<uint8_t> value_bytes(const std::vector<float>& x, kvrt_type type) {
    return kvrt::ref::encode_values(x, type == KVRT_TYPE_F16);
}

// kvrt_cache_read_raw of `cells`, which must succeed.
inline std::vector<uint8_t> read_raw(kvrt_cache cache, int32_t layer, kvrt_kv_array array,
                                     const std::vector<uint32_t>& cells) {
    kvrt_cache_info info = KVRT_CACHE_INFO_INIT;
    KVRT_REQUIRE_OK(kvrt_cache_get_info(cache, &info));
    const uint64_t row = array == KVRT_KV_ARRAY_K ? info.k_row_bytes : info.v_row_bytes;
    std::vector<uint8_t> out(row * cells.size());
    KVRT_REQUIRE_OK(kvrt_cache_read_raw(cache, layer, array, static_cast<uint32_t>(cells.size()), cells.data(),
                                        out.data(), out.size()));
    return out;
}

// Every stored byte of every cell of K and V in all layers.
inline std::vector<uint8_t> read_all_raw(kvrt_cache cache, uint32_t n_layers, const std::vector<uint32_t>& cells) {
    std::vector<uint8_t> all;
    for (uint32_t l = 0; l < n_layers; ++l)
        for (kvrt_kv_array a : {KVRT_KV_ARRAY_K, KVRT_KV_ARRAY_V}) {
            const auto part = read_raw(cache, static_cast<int32_t>(l), a, cells);
            all.insert(all.end(), part.begin(), part.end());
        }
    return all;
}

constexpr uint8_t kSentinel = 0xA5;

// Strided placement of packed rows: n_tokens x n_heads rows of row_bytes,
// given packed (token-major, heads back to back), put at offset + t * row +
// h * head of a region of `size` bytes filled with kSentinel elsewhere.
struct Strided {
    uint64_t offset = 0, row = 0, head = 0;
};

inline std::vector<uint8_t> place_rows(const uint8_t* packed, uint32_t n_tokens, uint32_t n_heads, size_t row_bytes,
                                       const Strided& s, size_t size) {
    std::vector<uint8_t> out(size, kSentinel);
    for (uint32_t t = 0; t < n_tokens; ++t)
        for (uint32_t h = 0; h < n_heads; ++h)
            std::memcpy(out.data() + s.offset + t * s.row + h * s.head,
                        packed + (size_t{t} * n_heads + h) * row_bytes, row_bytes);
    return out;
}

// The inverse: packed rows read back from a strided region.
inline std::vector<uint8_t> gather_rows(const uint8_t* region, uint32_t n_tokens, uint32_t n_heads, size_t row_bytes,
                                        const Strided& s) {
    std::vector<uint8_t> out(size_t{n_tokens} * n_heads * row_bytes);
    for (uint32_t t = 0; t < n_tokens; ++t)
        for (uint32_t h = 0; h < n_heads; ++h)
            std::memcpy(out.data() + (size_t{t} * n_heads + h) * row_bytes, region + s.offset + t * s.row + h * s.head,
                        row_bytes);
    return out;
}

// True when every byte of the region outside the strided rows is kSentinel.
inline bool sentinels_intact(const std::vector<uint8_t>& region, uint32_t n_tokens, uint32_t n_heads, size_t row_bytes,
                             const Strided& s) {
    std::vector<bool> inside(region.size(), false);
    for (uint32_t t = 0; t < n_tokens; ++t)
        for (uint32_t h = 0; h < n_heads; ++h)
            for (size_t b = 0; b < row_bytes; ++b) inside[s.offset + t * s.row + h * s.head + b] = true;
    for (size_t i = 0; i < region.size(); ++i)
        if (!inside[i] && region[i] != kSentinel) return false;
    return true;
}

// The extent of strided rows: one past their last byte.
inline size_t strided_end(uint32_t n_tokens, uint32_t n_heads, size_t row_bytes, const Strided& s) {
    return s.offset + (n_tokens - 1) * s.row + (n_heads - 1) * s.head + row_bytes;
}

// A kvrt buffer holding `bytes`.
inline void upload(const Buffer& b, const std::vector<uint8_t>& bytes) {
    KVRT_REQUIRE_OK(kvrt_buffer_upload(b, 0, bytes.data(), bytes.size()));
}

inline std::vector<uint8_t> download(const Buffer& b, size_t size) {
    std::vector<uint8_t> out(size);
    KVRT_REQUIRE_OK(kvrt_buffer_download(b, 0, out.data(), size));
    return out;
}

}  // namespace kvrt_test
