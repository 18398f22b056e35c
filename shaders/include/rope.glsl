// RoPE rotations of every kernel (SPEC 3): the rotation of one pair, and the
// (cos, sin) of a position's angle composed from the host's position table.
//
// No kernel takes the device's sin or cos of an angle: Vulkan bounds their
// error only on [-pi, pi], and there only by 2^-11 absolute, while RoPE
// angles reach millions of radians. Shifts get their (cos, sin) per delta
// from the host (kv::Rope::shift_table); deferred attention composes each
// cell's from the position table (kv::Rope::position_table) by angle
// addition: multiplications and additions, which Vulkan rounds correctly.
#ifndef KVRT_ROPE_GLSL
#define KVRT_ROPE_GLSL

// Rotates the pair (x0, x1) by the angle whose (cos, sin) is cs:
// (x0 c - x1 s, x0 s + x1 c).
void kvrt_rope_rotate(inout float x0, inout float x1, vec2 cs) {
    const float a = x0, b = x1;
    x0 = a * cs.x - b * cs.y;
    x1 = a * cs.y + b * cs.x;
}

// The rotation by the sum of two angles, from their (cos, sin).
vec2 kvrt_rope_compose(vec2 a, vec2 b) { return vec2(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x); }

// The position table, as kv::Rope lays it out: a position is 4 digits of 8
// bits, and entry (digit k, value e, pair i) at (k * 256 + e) * PAIRS + i
// holds the (cos, sin) of e * 2^(8k) * theta_i, computed in double on the
// host. Every 32-bit value has its entries: no position reads past the
// table, not even an empty cell's -1.
//
// KVRT_DEFINE_ROPE_TURN(NAME, TABLE) defines vec2 NAME(uint pos, uint pair,
// uint pairs): the (cos, sin) of pos * theta_pair, from TABLE (a vec2 array
// holding the table from index 0) with `pairs` = N_ROT / 2. Its error is a
// few f32 roundings at any position: four entries and three products.
#define KVRT_DEFINE_ROPE_TURN(NAME, TABLE)                                      \
    vec2 NAME(uint pos, uint pair, uint pairs) {                               \
        vec2 cs = TABLE[(pos & 255u) * pairs + pair];                          \
        cs = kvrt_rope_compose(cs, TABLE[(256u + ((pos >> 8) & 255u)) * pairs + pair]);  \
        cs = kvrt_rope_compose(cs, TABLE[(512u + ((pos >> 16) & 255u)) * pairs + pair]); \
        cs = kvrt_rope_compose(cs, TABLE[(768u + (pos >> 24)) * pairs + pair]); \
        return cs;                                                             \
    }

#endif
