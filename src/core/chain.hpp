// Checks of the structs the C ABI takes by pointer: each starts with
// (kvrt_struct_type type, const void* next), and `next` chains extension
// structs. One checker serves every entry point, so that an unknown or
// repeated struct type is refused the same way everywhere, with a message
// that names it.
#pragma once

#include <cstddef>
#include <initializer_list>

#include "core/result.hpp"
#include "kvrt/kvrt.h"

namespace kvrt {

// The common head of every kvrt struct.
struct StructHeader {
    kvrt_struct_type type;
    const void* next;
};

// The C name of a struct type ("kvrt_rope_desc"), or nullptr for values no
// struct has.
const char* struct_type_name(kvrt_struct_type type);

// Chains longer than this are refused (a loop is the usual cause).
constexpr int kMaxChain = 16;

// Checks the chain that starts at `next`, the `next` of the struct named
// `owner`: each struct's type must be in `allowed`, none may appear twice.
// With `found` not NULL, found[i] receives the struct of type allowed[i], or
// nullptr when the chain has none.
Result check_chain(const char* owner, const void* next, std::initializer_list<kvrt_struct_type> allowed,
                   const void** found = nullptr);

// Checks a struct argument: not NULL, `type` equal to `expected`, and its
// chain as check_chain does. `name` is the argument as the caller wrote it
// ("desc", "params"); messages name the struct type as well.
Result check_struct(const char* name, const void* s, kvrt_struct_type expected,
                    std::initializer_list<kvrt_struct_type> allowed = {}, const void** found = nullptr);

// The same for an optional struct argument: NULL is accepted (found[] is then
// all nullptr).
Result check_optional_struct(const char* name, const void* s, kvrt_struct_type expected,
                             std::initializer_list<kvrt_struct_type> allowed = {}, const void** found = nullptr);

}  // namespace kvrt
