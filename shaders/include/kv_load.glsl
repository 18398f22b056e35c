// Loading 8 consecutive values ("an octet") of a K or V row in any cache
// format, dequantized to f32. The row's buffer is `uint words[]`; `head_byte` is
// the byte offset of the head's first value (a multiple of 4 for F32, F16 and
// U16_STATIC, of 2 for Q8_0, Q4_0 and U8_STATIC: a U8 head of a row holding
// several heads starts at a multiple of 2 bytes only when head_dim % 4 == 2).
// Octet o covers values [8o, 8o + 8).
//
// Static-scale codes dequantize as float(int(q) - zero_point) * scale: an
// exact integer subtraction, then one f32 multiply (`precise`: never fused),
// bit-identical with the CPU's static_cast<float>(q - zp) * scale.
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
    kvrt_f16_to_f32(buf[(byte) >> 2] >> ((((byte) >> 1) & 1u) * 16u))

// One static-scale value: the code, dequantized.
float kvrt_dequant_static(uint q, float scale, int zero_point) {
    precise float v = float(int(q) - zero_point) * scale;
    return v;
}

// Defines `void NAME(uint head_byte, uint o, out float v[8])` reading from
// buffer BUF in format FMT (1 = F32, 2 = F16, 3 = Q8_0, 4 = Q4_0,
// 5 = U8_STATIC, 6 = U16_STATIC). SCALE (float) and ZP (int) are expressions
// giving the static-scale types' quantization, evaluated in the function
// (e.g. globals the kernel sets); the other formats ignore them.
#define KVRT_DEFINE_OCTET_LOADER(NAME, BUF, FMT, SCALE, ZP)                         \
    void NAME(uint head_byte, uint o, out float v[8]) {                             \
        if (FMT == 1) {                                                             \
            const uint w = (head_byte >> 2) + o * 8u;                               \
            for (uint i = 0u; i < 8u; ++i) v[i] = uintBitsToFloat(BUF[w + i]);      \
        } else if (FMT == 2) {                                                      \
            const uint w = (head_byte >> 2) + o * 4u;                               \
            for (uint i = 0u; i < 4u; ++i) {                                        \
                const vec2 h = kvrt_unpack_half2x16(BUF[w + i]);                    \
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
        } else if (FMT == 5) {                                                      \
            uint lo, hi;                                                            \
            KVRT_LOAD_8_BYTES(BUF, head_byte + o * 8u, lo, hi);                     \
            for (uint i = 0u; i < 4u; ++i) {                                        \
                v[i] = kvrt_dequant_static((lo >> (8u * i)) & 0xffu, SCALE, ZP);    \
                v[i + 4u] = kvrt_dequant_static((hi >> (8u * i)) & 0xffu, SCALE, ZP); \
            }                                                                       \
        } else if (FMT == 6) {                                                      \
            const uint w = (head_byte >> 2) + o * 4u;                               \
            for (uint i = 0u; i < 4u; ++i) {                                        \
                const uint two = BUF[w + i];                                        \
                v[2u * i] = kvrt_dequant_static(two & 0xffffu, SCALE, ZP);          \
                v[2u * i + 1u] = kvrt_dequant_static(two >> 16, SCALE, ZP);         \
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

// Whole Q8_0 and Q4_0 blocks, for kernels that walk a head octet by octet in
// one invocation: the block's words are read once for its 4 octets (Q8_0: 9
// words for 34 bytes, Q4_0: 5 for 18), where the octet loader above reads 3
// to 5 per octet (its realignment is a branch, and llvmpipe runs both sides
// of a branch and every load inside one as a loop over the SIMD lanes).
//
// Defines `void NAME(uint head_byte, uint b, out float d, out uint q[8])`:
// block b of the head at head_byte (a multiple of 2) in buffer BUF, format
// FMT (3 or 4): its scale d and its quants realigned to whole words (Q8_0: 32
// bytes in q[0..7]; Q4_0: 16 bytes in q[0..3], the rest 0). A block starts at
// a multiple of 4 bytes or 2 past one; both realignments are computed and one
// selected, without a branch.
#define KVRT_DEFINE_BLOCK_LOADER(NAME, BUF, FMT)                                    \
    void NAME(uint head_byte, uint b, out float d, out uint q[8]) {                \
        const uint block = head_byte + b * (FMT == 3 ? 34u : 18u);                \
        const uint w = block >> 2;                                                 \
        const bool odd = (block & 2u) != 0u; /* the quants start on a word */     \
        const uint n = FMT == 3 ? 8u : 4u;   /* words of quants */                \
        uint a[9];                                                                 \
        [[unroll]] for (uint i = 0u; i <= n; ++i) a[i] = BUF[w + i];               \
        d = kvrt_f16_to_f32(odd ? a[0] >> 16 : a[0]);                              \
        [[unroll]] for (uint i = 0u; i < 8u; ++i)                                  \
            q[i] = i >= n ? 0u : odd ? a[i + 1u] : (a[i] >> 16) | (a[i + 1u] << 16); \
    }

// Octet t (0..3) of a block from KVRT_DEFINE_BLOCK_LOADER's d and q, format
// fmt (3 or 4), dequantized as the octet loader does.
void kvrt_block_octet(uint fmt, float d, uint q[8], uint t, out float v[8]) {
    if (fmt == 3u) {
        const uint lo = q[2u * t], hi = q[2u * t + 1u];
        for (uint i = 0u; i < 4u; ++i) {
            v[i] = d * float(int(lo << (24u - 8u * i)) >> 24);
            v[i + 4u] = d * float(int(hi << (24u - 8u * i)) >> 24);
        }
    } else {
        const uint lo = q[(t & 1u) * 2u], hi = q[(t & 1u) * 2u + 1u];
        const uint shift = (t & 2u) * 2u; /* octets 2, 3: high nibbles */
        for (uint i = 0u; i < 4u; ++i) {
            v[i] = d * float(int((lo >> (8u * i + shift)) & 15u) - 8);
            v[i + 4u] = d * float(int((hi >> (8u * i + shift)) & 15u) - 8);
        }
    }
}

// Defines `float NAME(uint head_byte, uint d)`: value d of a static-scale
// head in buffer BUF (FMT 5: the U8 code at byte head_byte + d; FMT 6: the U16
// code at head_byte + 2d), dequantized with SCALE and ZP as above. For kernels
// that walk a head value by value, whatever its dimension.
#define KVRT_DEFINE_STATIC_LOADER(NAME, BUF, FMT, SCALE, ZP)                        \
    float NAME(uint head_byte, uint d) {                                            \
        const uint byte = head_byte + (FMT == 5 ? d : 2u * d);                      \
        const uint mask = FMT == 5 ? 0xffu : 0xffffu;                               \
        return kvrt_dequant_static((BUF[byte >> 2] >> ((byte & 3u) * 8u)) & mask, SCALE, ZP); \
    }

#endif
