// Loading 8 consecutive values ("an octet") of a K or V row in any cache
// format, dequantized to f32. The row's buffer is `uint words[]`; `head_byte` is
// the byte offset of the head's first value (a multiple of 4 for F32/F16, of 2
// for quantized rows). Octet o covers values [8o, 8o + 8).
#ifndef KVRT_KV_LOAD_GLSL
#define KVRT_KV_LOAD_GLSL

// Two 32-bit words starting at a 2-byte aligned byte offset.
#define KVRT_LOAD_8_BYTES(buf, byte, lo, hi)                                       \
    {                                                                              \
        const uint w_ = (byte) >> 2;                                               \
        if (((byte) & 2u) == 0u) {                                                 \
            lo = buf[w_];                                                          \
            hi = buf[w_ + 1u];                                                     \
        } else {                                                                   \
            const uint a_ = buf[w_], b_ = buf[w_ + 1u], c_ = buf[w_ + 2u];         \
            lo = (a_ >> 16) | (b_ << 16);                                          \
            hi = (b_ >> 16) | (c_ << 16);                                          \
        }                                                                          \
    }

// A block's fp16 scale at a 2-byte aligned byte offset.
#define KVRT_LOAD_HALF(buf, byte) \
    unpackHalf2x16((buf[(byte) >> 2] >> ((((byte) >> 1) & 1u) * 16u)) & 0xffffu).x

// Defines `void NAME(uint head_byte, uint o, out float v[8])` reading from
// buffer BUF in format FMT (1 = F32, 2 = F16, 3 = Q8_0, 4 = Q4_0).
#define KVRT_DEFINE_OCTET_LOADER(NAME, BUF, FMT)                                    \
    void NAME(uint head_byte, uint o, out float v[8]) {                             \
        if (FMT == 1) {                                                             \
            const uint w = (head_byte >> 2) + o * 8u;                               \
            for (uint i = 0u; i < 8u; ++i) v[i] = uintBitsToFloat(BUF[w + i]);      \
        } else if (FMT == 2) {                                                      \
            const uint w = (head_byte >> 2) + o * 4u;                               \
            for (uint i = 0u; i < 4u; ++i) {                                        \
                const vec2 h = unpackHalf2x16(BUF[w + i]);                          \
                v[2u * i] = h.x;                                                    \
                v[2u * i + 1u] = h.y;                                               \
            }                                                                       \
        } else if (FMT == 3) {                                                      \
            const uint block = head_byte + (o >> 2) * 34u;                          \
            const float d = KVRT_LOAD_HALF(BUF, block);                             \
            uint lo, hi;                                                            \
            KVRT_LOAD_8_BYTES(BUF, block + 2u + (o & 3u) * 8u, lo, hi);             \
            for (uint i = 0u; i < 4u; ++i) {                                        \
                v[i] = d * float(int(lo << (24u - 8u * i)) >> 24);                  \
                v[i + 4u] = d * float(int(hi << (24u - 8u * i)) >> 24);             \
            }                                                                       \
        } else {                                                                    \
            const uint block = head_byte + (o >> 2) * 18u;                          \
            const float d = KVRT_LOAD_HALF(BUF, block);                             \
            uint lo, hi;                                                            \
            KVRT_LOAD_8_BYTES(BUF, block + 2u + (o & 1u) * 8u, lo, hi);             \
            const uint shift = (o & 2u) * 2u; /* octets 2, 3: high nibbles */       \
            for (uint i = 0u; i < 4u; ++i) {                                        \
                v[i] = d * float(int((lo >> (8u * i + shift)) & 15u) - 8);          \
                v[i + 4u] = d * float(int((hi >> (8u * i + shift)) & 15u) - 8);     \
            }                                                                       \
        }                                                                           \
    }

#endif
