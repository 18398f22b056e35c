// K/V element types on the command line, and the host-side encoding the
// tools need to produce cache rows bit for bit: IEEE binary16.
#pragma once

#include <cstdint>
#include <string>

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

// Float to the bits of the nearest binary16 value, ties to even (what kvrt's
// F16 store produces); overflow gives infinity, NaN stays NaN.
uint16_t f32_to_f16(float x);

}  // namespace cli
