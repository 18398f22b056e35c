// CPU references for the cache's element types: F32, F16, the block formats
// Q8_0 and Q4_0, bit-compatible with GGML's formats of the same names
// (ggml-quants.c, quantize_row_q8_0_ref / quantize_row_q4_0_ref), and the
// static-scale U8 / U16 codes (at the end).
//
// Rules (SPEC.md section 1), for each block of 32 values x[0..31]:
//
//   Q8_0: amax = max |x|, d = amax / 127 (f32), id = d != 0 ? 1/d : 0,
//         q[j] = roundf(x[j] * id) (halves away from zero), stored: fp16(d)
//         then 32 int8. Value = fp16(d) * q.
//   Q4_0: m = the x of largest magnitude, sign kept (the first one on ties),
//         d = m / -8 (f32), id = d != 0 ? 1/d : 0,
//         q[j] = min(15, (int8)(x[j] * id + 8.5f)) (truncation toward zero),
//         stored: fp16(d) then 16 bytes, element j in the low nibble of byte j
//         and element j+16 in the high nibble. Value = fp16(d) * (q - 8).
//
// "Divided by the scale as computed in f32" is done exactly as GGML does it:
// multiplication by the f32 reciprocal id = 1/d, not a division x/d. The two
// differ in the last bit for some inputs, which can move a value across a
// rounding boundary; GGML (and the gguf Python package, which follows it)
// multiplies, so kernels that want bit-identical blocks must too.
// A zero block gets d = 0 and zero codes (Q8_0: q = 0; Q4_0: q = 8, i.e. the
// bytes 0x88). Q8_0's zero scale is +0 (bits 0x0000); Q4_0's is -0 (bits
// 0x8000), because ggml-quants.c starts `max` at +0.0 and divides it by -8.
// All arithmetic is single precision, as in GGML.
//
// Domain: finite inputs. Blocks holding inf or NaN, or whose largest
// magnitude is so small that 1/d overflows (Q8_0: below ~4e-37, Q4_0: below
// ~2e-38), convert a non-finite float to an integer, which is undefined in
// GGML and here.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvrt::ref {

// Element types of K and V rows.
enum class Type : int {
    F32 = 0,
    F16 = 1,
    Q8_0 = 2,
    Q4_0 = 3,
};

// Number of values in one Q8_0 / Q4_0 block.
constexpr int kQK8_0 = 32;
constexpr int kQK4_0 = 32;

// One Q8_0 block: fp16 scale bits, then 32 signed codes. 34 bytes, no padding.
struct BlockQ8_0 {
    uint16_t d;
    int8_t qs[kQK8_0];
};
static_assert(sizeof(BlockQ8_0) == 34, "Q8_0 block must be 34 bytes");

// One Q4_0 block: fp16 scale bits, then 16 bytes of 4-bit codes. 18 bytes.
struct BlockQ4_0 {
    uint16_t d;
    uint8_t qs[kQK4_0 / 2];
};
static_assert(sizeof(BlockQ4_0) == 18, "Q4_0 block must be 18 bytes");

// Values per block: 1 for F32/F16, 32 for Q8_0/Q4_0.
int type_block_elems(Type type);

// Bytes per block: 4, 2, 34, 18.
size_t type_block_bytes(Type type);

// Bytes of a row of n values. n must be a multiple of type_block_elems(type);
// throws std::invalid_argument otherwise (and for n < 0).
size_t row_bytes(Type type, int64_t n);

// Q8_0: quantizes n values (n a multiple of 32) into n/32 blocks.
void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n);
// Q8_0: expands n/32 blocks into n values.
void dequantize_row_q8_0(const BlockQ8_0* x, float* y, int64_t n);

// Q4_0: quantizes n values (n a multiple of 32) into n/32 blocks.
void quantize_row_q4_0(const float* x, BlockQ4_0* y, int64_t n);
// Q4_0: expands n/32 blocks into n values.
void dequantize_row_q4_0(const BlockQ4_0* x, float* y, int64_t n);

// Encodes n floats into row_bytes(type, n) bytes at `out` (no alignment
// needed): F32 copies the bits, F16 rounds each value with f32_to_f16, Q8_0 and
// Q4_0 quantize as above. Throws std::invalid_argument for a bad n.
void encode_row(Type type, const float* x, int64_t n, void* out);

// Decodes row_bytes(type, n) bytes at `in` into n floats (exact for every
// type: fp16 values and block products are all representable as floats).
void decode_row(Type type, const void* in, int64_t n, float* out);

// One quantization step of the block that holds element `elem` of an encoded
// row: |fp16(d)| of that block for Q8_0 and Q4_0, the spacing between adjacent
// codes, so a kernel's stored value v passes when
// |decode(v) - decode(reference)| <= step. F32 and F16 stores must be
// bit-identical (SPEC.md section 8), so their step is 0.
double quant_step(Type type, const void* row, int64_t elem);

// The quantization step a block of 32 values would get, computed from the
// values themselves: |fp16(amax/127)| for Q8_0, |fp16(m/-8)| for Q4_0, 0 for
// F32/F16 (x points at the first value of the block).
double block_step(Type type, const float* x);

// ---------------------------------------------------------------------------
// Static-scale integer codes (KVRT_TYPE_U8_STATIC / U16_STATIC, SPEC 1 and 5):
// one (scale, zero_point) per tensor, fixed in advance.
//
//   inv  = 1.0f / scale                              (f32, computed once)
//   q    = clamp(roundf(x * inv) + zero_point, 0, qmax)   qmax 255 / 65535
//   x    = float(q - zero_point) * scale             (int difference, one f32 multiply)
//
// x * inv is one f32 multiply (correctly rounded), roundf sends halves away
// from zero, and the sum and clamp are exact integer arithmetic (done in
// double here, so huge products and infinities saturate instead of
// overflowing an int). A NaN input takes the code zero_point (value 0).

enum class StaticType : int {
    U8 = 0,
    U16 = 1,
};

// 255 or 65535.
uint32_t static_qmax(StaticType type);

// Bytes per code: 1 or 2.
size_t static_code_bytes(StaticType type);

// The code of x with the f32 reciprocal `inv` (= 1.0f / scale).
uint32_t quantize_static(StaticType type, float x, float inv, int32_t zero_point);

// The value of code q.
float dequantize_static(uint32_t q, float scale, int32_t zero_point);

// Encodes n values into n codes (little-endian for U16) at `out`, and decodes
// them back; `out`/`in` need no alignment.
void encode_row_static(StaticType type, const float* x, int64_t n, float scale, int32_t zero_point, void* out);
void decode_row_static(StaticType type, const void* in, int64_t n, float scale, int32_t zero_point, float* out);

}  // namespace kvrt::ref
