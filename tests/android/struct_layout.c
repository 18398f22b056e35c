/* Compile-time check of every public struct's size and field offsets against
 * struct_layout_expected.h, for the target being compiled: LP64 (arm64-v8a,
 * x86_64) or ILP32 (armeabi-v7a, x86). Compiled by struct_layout.py
 * for the four Android targets with clang's freestanding headers:
 *
 *     clang --target=i686-linux-android24 -ffreestanding -nostdlibinc \
 *           -fsyntax-only -Iinclude -I<vulkan headers> struct_layout.c
 */
#include <stddef.h>

/* The experimental structs' layouts are checked too. */
#ifndef KVRT_EXPERIMENTAL
#define KVRT_EXPERIMENTAL
#endif
#include <kvrt/kvrt.h>
#include <kvrt/kvrt_memory.h>
#include <kvrt/kvrt_vulkan.h>

#if defined(__LP64__)
#define KVRT_PICK(lp64, ilp32) (lp64)
#else
#define KVRT_PICK(lp64, ilp32) (ilp32)
#endif

#define KVRT_LAYOUT_SIZE(s, lp64, ilp32) \
    _Static_assert(sizeof(s) == KVRT_PICK(lp64, ilp32), "sizeof(" #s ")");
#define KVRT_LAYOUT_FIELD(s, f, lp64, ilp32) \
    _Static_assert(offsetof(s, f) == KVRT_PICK(lp64, ilp32), "offsetof(" #s ", " #f ")");

#include "struct_layout_expected.h"

/* ISO C wants at least one declaration in a translation unit. */
typedef int kvrt_struct_layout_checked;
