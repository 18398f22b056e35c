#version 450
// Fixed-capacity memory: numerically stable softmax of the score rows of a
// chunk, in place, one workgroup per row. wq rows become the update weights
// ww = softmax(MK wq) and q rows the read weights p = softmax(scale MK q).
// Lanes walk the row in groups of 8 with an online maximum and sum (one
// exponential per element plus one per group); slots past n_slots (padding)
// are excluded and written as zeros.
#include "memory_common.glsl"

layout(std430, set = 0, binding = 0) buffer Work { GROUP_T work[]; };

layout(push_constant) uniform Push {
    uint s_off;      // group index of S (head 0) in Work
    uint head_work;  // groups between heads
    uint m;          // slots
    uint m8;         // groups per row
    uint rows;       // padded rows of each half of S
    uint w_rows;     // wq rows to normalize (0: none)
    uint q_rows;     // q rows to normalize (0: none)
    float scale;     // applied to q scores
} pc;

// Lowest finite float: exp() of differences with it stays finite.
const float kLowest = -3.402823466e38;

shared float s_max[gl_WorkGroupSize.x];
shared float s_sum[gl_WorkGroupSize.x];

// The 8 scaled scores of group k, padding slots at kLowest.
void load_scores(uint rs, uint k, float sc, out vec4 lo, out vec4 hi) {
    LOAD8(work, rs + k, lo, hi);
    const vec4 slot = vec4(8u * k) + vec4(0.0, 1.0, 2.0, 3.0);
    const vec4 limit = vec4(pc.m);
    lo = mix(vec4(kLowest), sc * lo, lessThan(slot, limit));
    hi = mix(vec4(kLowest), sc * hi, lessThan(slot + vec4(4.0), limit));
}

void main() {
    const uint r = gl_WorkGroupID.x;
    if (r >= pc.w_rows + pc.q_rows) return;  // uniform per workgroup
    const uint lane = gl_LocalInvocationID.x, wg = gl_WorkGroupSize.x;
    const bool is_w = r < pc.w_rows;
    const uint row = is_w ? r : pc.rows + (r - pc.w_rows);
    const float sc = is_w ? 1.0 : pc.scale;
    const uint rs = pc.s_off + gl_WorkGroupID.z * pc.head_work + row * pc.m8;

    float mx = kLowest, sum = 0.0;
    for (uint k = lane; k < pc.m8; k += wg) {
        vec4 lo, hi;
        load_scores(rs, k, sc, lo, hi);
        const vec4 b = max(lo, hi);
        const float nm = max(mx, max(max(b.x, b.y), max(b.z, b.w)));
        const vec4 e = exp(lo - nm) + exp(hi - nm);
        sum = sum * exp(mx - nm) + (e.x + e.y) + (e.z + e.w);
        mx = nm;
    }
    s_max[lane] = mx;
    s_sum[lane] = sum;
    barrier();
    for (uint s = wg / 2u; s > 0u; s >>= 1u) {
        if (lane < s) {
            const float m1 = s_max[lane], m2 = s_max[lane + s];
            const float mm = max(m1, m2);
            s_sum[lane] = s_sum[lane] * exp(m1 - mm) + s_sum[lane + s] * exp(m2 - mm);
            s_max[lane] = mm;
        }
        barrier();
    }
    const float gmax = s_max[0];
    const float inv = KVRT_FDIV(1.0, s_sum[0]);
    for (uint k = lane; k < pc.m8; k += wg) {
        vec4 lo, hi;
        load_scores(rs, k, sc, lo, hi);
        STORE8(work, rs + k, exp(lo - gmax) * inv, exp(hi - gmax) * inv);
    }
}
