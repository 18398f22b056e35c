// Enum values that come from callers. A C caller may pass any int where kvrt.h
// names an enum ((kvrt_type)12345, (kvrt_kv_array)-7); in C++ loading such a
// value as the enum type is undefined when it lies outside the enum's range.
// So the library reads the raw integer first, validates it, and only then
// uses the value as the enum.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace kvrt {

// The integer stored in `e` (a struct field or an argument), read without
// loading it as the enum type.
template <class E>
int32_t raw_enum(const E& e) {
    static_assert(std::is_enum<E>::value && sizeof(E) == sizeof(int32_t), "a 32-bit enum of kvrt.h");
    int32_t v;
    std::memcpy(&v, &e, sizeof v);
    return v;
}

}  // namespace kvrt
