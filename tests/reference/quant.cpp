// Q8_0 / Q4_0 / F16 / F32 and static-scale U8 / U16 row encoders and
// decoders; see quant.hpp.
#include "reference/quant.hpp"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "reference/half.hpp"

namespace kvrt::ref {

namespace {

void check_row_length(Type type, int64_t n) {
    const int64_t block = type_block_elems(type);
    if (n < 0 || n % block != 0) {
        throw std::invalid_argument(std::string("kvrt::ref: row length ") + std::to_string(n) +
                                    " is not a multiple of the block size " + std::to_string(block));
    }
}

// The Q8_0 scale of one block, in f32, before rounding to fp16.
float q8_0_scale(const float* x) {
    float amax = 0.0f;
    for (int j = 0; j < kQK8_0; ++j) {
        amax = std::fmax(amax, std::fabs(x[j]));
    }
    return amax / 127.0f;
}

// The Q4_0 scale of one block, in f32, before rounding to fp16: the value of
// largest magnitude (first one on ties, sign kept) divided by -8.
float q4_0_scale(const float* x) {
    float amax = 0.0f;
    float max = 0.0f;
    for (int j = 0; j < kQK4_0; ++j) {
        const float a = std::fabs(x[j]);
        if (amax < a) {
            amax = a;
            max = x[j];
        }
    }
    return max / -8.0f;
}

// A Q4_0 code: trunc(v + 8.5) through int8, as GGML's (int8_t) cast, then at
// most 15. For finite blocks v is in [-8, 8], so the sum is in [0.5, 16.5].
uint8_t q4_0_code(float v) {
    const int code = static_cast<int8_t>(v + 8.5f);
    return static_cast<uint8_t>(code < 15 ? code : 15);
}

}  // namespace

int type_block_elems(Type type) {
    switch (type) {
        case Type::F32:
        case Type::F16: return 1;
        case Type::Q8_0: return kQK8_0;
        case Type::Q4_0: return kQK4_0;
    }
    throw std::invalid_argument("kvrt::ref: unknown type");
}

size_t type_block_bytes(Type type) {
    switch (type) {
        case Type::F32: return 4;
        case Type::F16: return 2;
        case Type::Q8_0: return sizeof(BlockQ8_0);
        case Type::Q4_0: return sizeof(BlockQ4_0);
    }
    throw std::invalid_argument("kvrt::ref: unknown type");
}

size_t row_bytes(Type type, int64_t n) {
    check_row_length(type, n);
    return static_cast<size_t>(n / type_block_elems(type)) * type_block_bytes(type);
}

void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n) {
    check_row_length(Type::Q8_0, n);
    for (int64_t b = 0; b < n / kQK8_0; ++b) {
        const float* xb = x + b * kQK8_0;
        const float d = q8_0_scale(xb);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = f32_to_f16(d);
        for (int j = 0; j < kQK8_0; ++j) {
            y[b].qs[j] = static_cast<int8_t>(std::roundf(xb[j] * id));
        }
    }
}

void dequantize_row_q8_0(const BlockQ8_0* x, float* y, int64_t n) {
    check_row_length(Type::Q8_0, n);
    for (int64_t b = 0; b < n / kQK8_0; ++b) {
        const float d = f16_to_f32(x[b].d);
        for (int j = 0; j < kQK8_0; ++j) {
            y[b * kQK8_0 + j] = static_cast<float>(x[b].qs[j]) * d;
        }
    }
}

void quantize_row_q4_0(const float* x, BlockQ4_0* y, int64_t n) {
    check_row_length(Type::Q4_0, n);
    constexpr int kHalf = kQK4_0 / 2;
    for (int64_t b = 0; b < n / kQK4_0; ++b) {
        const float* xb = x + b * kQK4_0;
        const float d = q4_0_scale(xb);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = f32_to_f16(d);
        for (int j = 0; j < kHalf; ++j) {
            const uint8_t lo = q4_0_code(xb[j] * id);
            const uint8_t hi = q4_0_code(xb[j + kHalf] * id);
            y[b].qs[j] = static_cast<uint8_t>(lo | (hi << 4));
        }
    }
}

void dequantize_row_q4_0(const BlockQ4_0* x, float* y, int64_t n) {
    check_row_length(Type::Q4_0, n);
    constexpr int kHalf = kQK4_0 / 2;
    for (int64_t b = 0; b < n / kQK4_0; ++b) {
        const float d = f16_to_f32(x[b].d);
        for (int j = 0; j < kHalf; ++j) {
            const int lo = (x[b].qs[j] & 0x0F) - 8;
            const int hi = (x[b].qs[j] >> 4) - 8;
            y[b * kQK4_0 + j] = static_cast<float>(lo) * d;
            y[b * kQK4_0 + j + kHalf] = static_cast<float>(hi) * d;
        }
    }
}

void encode_row(Type type, const float* x, int64_t n, void* out) {
    check_row_length(type, n);
    auto* bytes = static_cast<unsigned char*>(out);
    switch (type) {
        case Type::F32:
            std::memcpy(bytes, x, static_cast<size_t>(n) * sizeof(float));
            return;
        case Type::F16:
            for (int64_t i = 0; i < n; ++i) {
                const uint16_t h = f32_to_f16(x[i]);
                std::memcpy(bytes + 2 * i, &h, sizeof h);
            }
            return;
        case Type::Q8_0:
            // Blocks one at a time through a local, so `out` needs no alignment.
            for (int64_t b = 0; b < n / kQK8_0; ++b) {
                BlockQ8_0 blk;
                quantize_row_q8_0(x + b * kQK8_0, &blk, kQK8_0);
                std::memcpy(bytes + static_cast<size_t>(b) * sizeof blk, &blk, sizeof blk);
            }
            return;
        case Type::Q4_0:
            for (int64_t b = 0; b < n / kQK4_0; ++b) {
                BlockQ4_0 blk;
                quantize_row_q4_0(x + b * kQK4_0, &blk, kQK4_0);
                std::memcpy(bytes + static_cast<size_t>(b) * sizeof blk, &blk, sizeof blk);
            }
            return;
    }
}

void decode_row(Type type, const void* in, int64_t n, float* out) {
    check_row_length(type, n);
    const auto* bytes = static_cast<const unsigned char*>(in);
    switch (type) {
        case Type::F32:
            std::memcpy(out, bytes, static_cast<size_t>(n) * sizeof(float));
            return;
        case Type::F16:
            for (int64_t i = 0; i < n; ++i) {
                uint16_t h;
                std::memcpy(&h, bytes + 2 * i, sizeof h);
                out[i] = f16_to_f32(h);
            }
            return;
        case Type::Q8_0:
            for (int64_t b = 0; b < n / kQK8_0; ++b) {
                BlockQ8_0 blk;
                std::memcpy(&blk, bytes + static_cast<size_t>(b) * sizeof blk, sizeof blk);
                dequantize_row_q8_0(&blk, out + b * kQK8_0, kQK8_0);
            }
            return;
        case Type::Q4_0:
            for (int64_t b = 0; b < n / kQK4_0; ++b) {
                BlockQ4_0 blk;
                std::memcpy(&blk, bytes + static_cast<size_t>(b) * sizeof blk, sizeof blk);
                dequantize_row_q4_0(&blk, out + b * kQK4_0, kQK4_0);
            }
            return;
    }
}

double quant_step(Type type, const void* row, int64_t elem) {
    if (elem < 0) {
        throw std::invalid_argument("kvrt::ref: negative element index");
    }
    if (type == Type::F32 || type == Type::F16) {
        return 0.0;
    }
    const int64_t block = elem / type_block_elems(type);
    const auto* bytes = static_cast<const unsigned char*>(row) +
                        static_cast<size_t>(block) * type_block_bytes(type);
    uint16_t d;  // both block types start with the fp16 scale
    std::memcpy(&d, bytes, sizeof d);
    return std::fabs(static_cast<double>(f16_to_f32(d)));
}

double block_step(Type type, const float* x) {
    switch (type) {
        case Type::F32:
        case Type::F16: return 0.0;
        case Type::Q8_0: return std::fabs(static_cast<double>(round_to_f16(q8_0_scale(x))));
        case Type::Q4_0: return std::fabs(static_cast<double>(round_to_f16(q4_0_scale(x))));
    }
    throw std::invalid_argument("kvrt::ref: unknown type");
}

uint32_t static_qmax(StaticType type) { return type == StaticType::U8 ? 255u : 65535u; }

size_t static_code_bytes(StaticType type) { return type == StaticType::U8 ? 1 : 2; }

uint32_t quantize_static(StaticType type, float x, float inv, int32_t zero_point) {
    if (std::isnan(x)) {
        return static_cast<uint32_t>(zero_point);
    }
    // A named f32 product: one rounding, as the kernel's multiply.
    const float product = x * inv;
    const double q = static_cast<double>(std::roundf(product)) + zero_point;
    const double qmax = static_qmax(type);
    return static_cast<uint32_t>(q < 0.0 ? 0.0 : q > qmax ? qmax : q);
}

float dequantize_static(uint32_t q, float scale, int32_t zero_point) {
    return static_cast<float>(static_cast<int32_t>(q) - zero_point) * scale;
}

void encode_row_static(StaticType type, const float* x, int64_t n, float scale, int32_t zero_point, void* out) {
    if (n < 0) {
        throw std::invalid_argument("kvrt::ref: negative row length");
    }
    const float inv = 1.0f / scale;
    auto* bytes = static_cast<unsigned char*>(out);
    for (int64_t i = 0; i < n; ++i) {
        const uint32_t q = quantize_static(type, x[i], inv, zero_point);
        if (type == StaticType::U8) {
            bytes[i] = static_cast<unsigned char>(q);
        } else {
            const uint16_t h = static_cast<uint16_t>(q);
            std::memcpy(bytes + 2 * i, &h, sizeof h);
        }
    }
}

void decode_row_static(StaticType type, const void* in, int64_t n, float scale, int32_t zero_point, float* out) {
    if (n < 0) {
        throw std::invalid_argument("kvrt::ref: negative row length");
    }
    const auto* bytes = static_cast<const unsigned char*>(in);
    for (int64_t i = 0; i < n; ++i) {
        uint32_t q = 0;
        if (type == StaticType::U8) {
            q = bytes[i];
        } else {
            uint16_t h;
            std::memcpy(&h, bytes + 2 * i, sizeof h);
            q = h;
        }
        out[i] = dequantize_static(q, scale, zero_point);
    }
}

}  // namespace kvrt::ref
