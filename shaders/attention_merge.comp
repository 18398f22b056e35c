#version 450
// Attention, second pass: combines the partial results of a row's splits,
//   M = max(m_i, sink), L = sum l_i e^(m_i - M) + e^(sink - M),
//   out = sum acc_i e^(m_i - M) / L,
// and writes the row in f32 or f16 (OUT_F16). A row that saw no cell gets
// zeros. One workgroup per row (grid-stride), invocations over the dims.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "quant.glsl"

layout(constant_id = 1) const uint D_V = 128;

layout(std430, set = 0, binding = 0) readonly buffer Partials { float partials[]; };
layout(std430, set = 0, binding = 1) buffer Out { uint out_words[]; };
layout(std430, set = 0, binding = 2) readonly buffer Sinks { float sinks[]; };

layout(push_constant) uniform Push {
    uint n_rows;         // n_queries * n_heads
    uint n_heads;
    uint splits;
    uint out_offset;     // word offset of query 0's output
    uint out_stride;     // words between queries
    uint has_sinks;
    uint sinks_offset;   // float offset of the per-head sink logits
    uint partials_offset;
    uint out_head_stride;  // words between the heads of one query's output
} pc;

void main() {
    for (uint row = gl_WorkGroupID.x; row < pc.n_rows; row += gl_NumWorkGroups.x) {
        const uint head = row % pc.n_heads;
        const uint query = row / pc.n_heads;
        const uint base = pc.partials_offset + row * pc.splits * (D_V + KVRT_PARTIAL_HEAD);
        float big = -1.0 / 0.0;
        for (uint s = 0u; s < pc.splits; ++s) big = max(big, partials[base + s * (D_V + KVRT_PARTIAL_HEAD)]);
        const bool seen = big > -1.0 / 0.0;
        float sum = 0.0;
        if (seen) {
            if (pc.has_sinks != 0u) big = max(big, sinks[pc.sinks_offset + head]);
            for (uint s = 0u; s < pc.splits; ++s) {
                const uint p = base + s * (D_V + KVRT_PARTIAL_HEAD);
                const float ms = partials[p];
                if (ms > -1.0 / 0.0) sum += partials[p + 1u] * exp(ms - big);
            }
            if (pc.has_sinks != 0u) sum += exp(sinks[pc.sinks_offset + head] - big);
        }
        const uint out_row = pc.out_offset + query * pc.out_stride;
#ifdef OUT_F16
        for (uint w = gl_LocalInvocationID.x; w < D_V / 2u; w += gl_WorkGroupSize.x) {
            float o[2];
            for (uint k = 0u; k < 2u; ++k) {
                float a = 0.0;
                const uint d = 2u * w + k;
                if (seen) {
                    for (uint s = 0u; s < pc.splits; ++s) {
                        const uint p = base + s * (D_V + KVRT_PARTIAL_HEAD);
                        const float ms = partials[p];
                        if (ms > -1.0 / 0.0) a += partials[p + KVRT_PARTIAL_HEAD + d] * exp(ms - big);
                    }
                    a = KVRT_FDIV(a, sum);
                }
                o[k] = a;
            }
            out_words[out_row + head * pc.out_head_stride + w] = kvrt_f32_to_f16(o[0]) | (kvrt_f32_to_f16(o[1]) << 16);
        }
#else
        for (uint d = gl_LocalInvocationID.x; d < D_V; d += gl_WorkGroupSize.x) {
            float a = 0.0;
            if (seen) {
                for (uint s = 0u; s < pc.splits; ++s) {
                    const uint p = base + s * (D_V + KVRT_PARTIAL_HEAD);
                    const float ms = partials[p];
                    if (ms > -1.0 / 0.0) a += partials[p + KVRT_PARTIAL_HEAD + d] * exp(ms - big);
                }
                a = KVRT_FDIV(a, sum);
            }
            out_words[out_row + head * pc.out_head_stride + d] = floatBitsToUint(a);
        }
#endif
    }
}
