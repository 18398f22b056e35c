// Overflow-checked arithmetic and alignment helpers for sizes and offsets that
// come from callers.
#pragma once

#include <cstdint>
#include <limits>

namespace kvrt {

// a + b, or false on overflow.
inline bool checked_add(uint64_t a, uint64_t b, uint64_t* out) {
    if (a > std::numeric_limits<uint64_t>::max() - b) return false;
    *out = a + b;
    return true;
}

// a * b, or false on overflow.
inline bool checked_mul(uint64_t a, uint64_t b, uint64_t* out) {
    if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a) return false;
    *out = a * b;
    return true;
}

// True when [offset, offset + size) lies inside [0, limit), without overflow.
inline bool range_inside(uint64_t offset, uint64_t size, uint64_t limit) {
    return offset <= limit && size <= limit - offset;
}

// Rounds `v` up to a multiple of `align` (a power of two); false on overflow.
inline bool checked_align_up(uint64_t v, uint64_t align, uint64_t* out) {
    uint64_t t;
    if (!checked_add(v, align - 1, &t)) return false;
    *out = t & ~(align - 1);
    return true;
}

constexpr uint64_t align_up(uint64_t v, uint64_t align) { return (v + align - 1) & ~(align - 1); }
constexpr uint64_t align_down(uint64_t v, uint64_t align) { return v & ~(align - 1); }
constexpr bool is_pow2(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

}  // namespace kvrt
