#include "kv/format.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

namespace kvrt::kv {

float f16_to_f32(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    uint32_t expo = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t bits;
    if (expo == 0x1f) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else if (expo == 0) {
        if (mant == 0) {
            bits = sign;
        } else {
            // Subnormal: normalize.
            int e = -1;
            do {
                ++e;
                mant <<= 1;
            } while (!(mant & 0x400u));
            bits = sign | ((127 - 15 - static_cast<uint32_t>(e)) << 23) | ((mant & 0x3ffu) << 13);
        }
    } else {
        bits = sign | ((expo + 127 - 15) << 23) | (mant << 13);
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

void decode_row(kvrt_type type, const void* src, size_t n, float* out, const StaticScale* scale) {
    const auto* b = static_cast<const uint8_t*>(src);
    switch (type) {
        case KVRT_TYPE_F32:
            std::memcpy(out, src, n * 4);
            return;
        case KVRT_TYPE_F16:
            for (size_t i = 0; i < n; ++i) {
                uint16_t h;
                std::memcpy(&h, b + 2 * i, 2);
                out[i] = f16_to_f32(h);
            }
            return;
        case KVRT_TYPE_Q8_0:
            for (size_t blk = 0; blk < n / 32; ++blk, b += 34) {
                uint16_t dh;
                std::memcpy(&dh, b, 2);
                const float d = f16_to_f32(dh);
                for (int j = 0; j < 32; ++j) out[blk * 32 + j] = d * static_cast<float>(static_cast<int8_t>(b[2 + j]));
            }
            return;
        case KVRT_TYPE_Q4_0:
            for (size_t blk = 0; blk < n / 32; ++blk, b += 18) {
                uint16_t dh;
                std::memcpy(&dh, b, 2);
                const float d = f16_to_f32(dh);
                for (int j = 0; j < 16; ++j) {
                    out[blk * 32 + j] = d * static_cast<float>((b[2 + j] & 0x0f) - 8);
                    out[blk * 32 + j + 16] = d * static_cast<float>((b[2 + j] >> 4) - 8);
                }
            }
            return;
        case KVRT_TYPE_U8_STATIC:
        case KVRT_TYPE_U16_STATIC: {
            if (!scale) {
                std::fill(out, out + n, std::numeric_limits<float>::quiet_NaN());
                return;
            }
            const bool wide = type == KVRT_TYPE_U16_STATIC;
            for (size_t i = 0; i < n; ++i) {
                uint16_t q = 0;
                if (wide) std::memcpy(&q, b + 2 * i, 2);
                else q = b[i];
                // An exact integer difference, then one f32 multiply: what the
                // kernels compute.
                out[i] = static_cast<float>(static_cast<int32_t>(q) - scale->zero_point) * scale->scale;
            }
            return;
        }
        default:
            return;
    }
}

}  // namespace kvrt::kv
