#version 450
// Copies a range of 32-bit words between two buffer pieces (or within one,
// without overlap).
#include "common.glsl"

layout(std430, set = 0, binding = 0) readonly buffer Src { uint src[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Dst { uint dst[]; };

layout(push_constant) uniform Push {
    uint src_offset_words;
    uint dst_offset_words;
    uint count_words;
} pc;

void main() {
    const uint stride = kvrt_grid_stride();
    for (uint i = gl_GlobalInvocationID.x; i < pc.count_words; i += stride) {
        dst[pc.dst_offset_words + i] = src[pc.src_offset_words + i];
    }
}
