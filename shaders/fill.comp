#version 450
// Writes one 32-bit value over a range of words of a buffer piece.
#include "common.glsl"

layout(std430, set = 0, binding = 0) writeonly buffer Dst { uint dst[]; };

layout(push_constant) uniform Push {
    uint offset_words; // first word to write
    uint count_words;  // words to write
    uint value;
} pc;

void main() {
    const uint stride = kvrt_grid_stride();
    for (uint i = gl_GlobalInvocationID.x; i < pc.count_words; i += stride) {
        dst[pc.offset_words + i] = pc.value;
    }
}
