// K/V element types on the command line, and the host-side encodings the
// tools need to produce or check cache rows bit for bit: IEEE binary16 and
// the static-scale integer types of the static padded layout (SPEC 5).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvrt/kvrt.h"

namespace cli {

// K/V types on the command line, by the library's own names
// (kvrt_type_from_name, kvrt_type_name): false with a message for an unknown
// name. `option` is the option's name for the message ("type").
bool parse_type(const std::string& text, const char* option, kvrt_type* out);

// The type's name, or "?" for a value the library does not name.
const char* type_name(kvrt_type t);

// "f32, f16, ...": every type the library names, for messages.
std::string type_names();

// True for KVRT_TYPE_U8_STATIC and KVRT_TYPE_U16_STATIC.
inline bool is_static_scale(kvrt_type t) { return t == KVRT_TYPE_U8_STATIC || t == KVRT_TYPE_U16_STATIC; }

// Bytes per value of a type with one value per block (F32, F16 and the
// static-scale types, as kvrt_type_block_size says); 0 for block types and
// unknown values.
inline uint32_t value_bytes(kvrt_type t) { return kvrt_type_block_size(t) == 1 ? kvrt_type_block_bytes(t) : 0; }

// One layer's quantization of a static-scale type: value = scale * (q - zero_point).
struct QuantScale {
    float scale = 0.0f;
    int32_t zero_point = 0;
};

// The kvrt_static_scales_desc of per-layer (or shared: one entry) K and V
// scales, holding the arrays it points at: keep it alive while desc() is
// used. An empty list leaves that array's pointers NULL.
class StaticScales {
public:
    StaticScales(const std::vector<QuantScale>& k, const std::vector<QuantScale>& v);
    StaticScales(const StaticScales&) = delete;
    StaticScales& operator=(const StaticScales&) = delete;
    kvrt_static_scales_desc* desc() { return &desc_; }

private:
    std::vector<float> k_scales_, v_scales_;
    std::vector<int32_t> k_zero_points_, v_zero_points_;
    kvrt_static_scales_desc desc_ = KVRT_STATIC_SCALES_DESC_INIT;
};

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
float static_dequantize(uint32_t q, const QuantScale& s);

}  // namespace cli
