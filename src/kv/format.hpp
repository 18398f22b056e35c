// CPU conversions of the cache's element formats (readback, state files).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kv/geometry.hpp"
#include "kvrt/kvrt.h"

namespace kvrt::kv {

// f16 bits -> f32, exact.
float f16_to_f32(uint16_t h);

// Decodes `n` values of `type` (F32, F16, Q8_0, Q4_0, U8_STATIC, U16_STATIC;
// n a multiple of the block size) from `src` into f32. Q8_0 gives d*q, Q4_0
// d*(q-8), with d the block's fp16 scale, as GGML dequantizes. The
// static-scale types give float(q - zero_point) * scale with `scale`'s values,
// bit-identical with the kernels; they need `scale` (without it every value
// decodes as NaN, so the mistake cannot pass for data).
void decode_row(kvrt_type type, const void* src, size_t n, float* out, const StaticScale* scale = nullptr);

}  // namespace kvrt::kv
