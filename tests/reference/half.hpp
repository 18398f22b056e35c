// CPU reference for IEEE 754 binary16 ("half", fp16) conversions.
//
// Plain bit manipulation, no hardware intrinsics, so the result is the same on
// every host. Used by the quantizer references (fp16 block scales) and by every
// test that stores or compares F16 data.
#pragma once

#include <cstdint>
#include <vector>

namespace kvrt::ref {

// Converts a float to the bits of the nearest fp16 value, rounding to nearest
// with ties to even (the IEEE default, and what F16C's _cvtss_sh(x, 0), ggml's
// GGML_FP32_TO_FP16 and GLSL's packHalf2x16 on conforming drivers produce).
// - Values whose magnitude rounds past 65504 become +-inf.
// - Values below the normal range become fp16 subnormals (or +-0), correctly
//   rounded; the sign of zero is kept.
// - NaN stays NaN: the top 10 payload bits are kept and the quiet bit is set,
//   so the result is never mistaken for infinity.
uint16_t f32_to_f16(float x);

// Converts fp16 bits to the float with exactly the same value (every fp16
// value, subnormals included, is representable as a float). NaN payloads are
// kept in the top mantissa bits.
float f16_to_f32(uint16_t h);

// Rounds a float to the nearest fp16 value and returns it as a float, i.e.
// f16_to_f32(f32_to_f16(x)).
float round_to_f16(float x);

// Bit-level helpers, so tests need no memcpy of their own.
uint32_t f32_bits(float x);
float f32_from_bits(uint32_t bits);

// The bytes of `x` as packed fp16 (as_f16, each value rounded) or f32 values:
// input rows for the store kernels in either input type.
std::vector<uint8_t> encode_values(const std::vector<float>& x, bool as_f16);

}  // namespace kvrt::ref
