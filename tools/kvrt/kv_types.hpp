// K/V element types on the command line, and the host-side encodings the
// tools need to produce or check cache rows bit for bit: IEEE binary16 and
// the static-scale integer types of the static padded layout (SPEC 5).
#pragma once

#include <cstdint>
#include <string>

#include "kvrt/kvrt.h"

namespace cli {

// Parses a K/V type name: f32, f16, q8_0, q4_0, u8_static, u16_static. False
// for anything else.
bool parse_kv_type(const std::string& name, kvrt_type* out);

// The name parse_kv_type accepts for `t` ("?" for an unknown value).
const char* kv_type_name(kvrt_type t);

// True for KVRT_TYPE_U8_STATIC and KVRT_TYPE_U16_STATIC.
inline bool is_static_scale(kvrt_type t) { return t == KVRT_TYPE_U8_STATIC || t == KVRT_TYPE_U16_STATIC; }

// Bytes per value of the types with one value per element (F32, F16 and the
// static-scale types); 0 for the block types and unknown values.
uint32_t element_bytes(kvrt_type t);

// Float to the bits of the nearest binary16 value, ties to even (what kvrt's
// F16 store produces); overflow gives infinity, NaN stays NaN.
uint16_t f32_to_f16(float x);
// Binary16 bits to the float of exactly the same value.
float f16_to_f32(uint16_t h);

// The code of `x` in a static-scale type with `s`, as kvrt.h defines it:
// clamp(roundf(x * inv) + zero_point, 0, qmax) with inv = 1/scale computed
// once in f32 (pass it as `inv`) and roundf rounding halves away from zero.
// qmax is 255 (U8) or 65535 (U16). NaN gives zero_point.
uint32_t static_quantize(float x, float inv, int32_t zero_point, uint32_t qmax);
// The value of a code: scale * (q - zero_point), in f32.
float static_dequantize(uint32_t q, const kvrt_quant_scale& s);

}  // namespace cli
