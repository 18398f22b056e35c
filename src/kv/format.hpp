// CPU conversions of the cache's element formats (readback, state files).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvrt/kvrt.h"

namespace kvrt::kv {

// f16 bits -> f32, exact.
float f16_to_f32(uint16_t h);

// Decodes `n` values of `type` (F32, F16, Q8_0, Q4_0; n a multiple of the
// block size) from `src` into f32. Q8_0 gives d*q, Q4_0 d*(q-8), with d the
// block's fp16 scale, as GGML dequantizes.
void decode_row(kvrt_type type, const void* src, size_t n, float* out);

}  // namespace kvrt::kv
