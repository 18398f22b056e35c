// Results inside the library: every internal function that can fail returns a
// kvrt_result, and the first place that sees a failure records a sentence for
// kvrt_last_error_message() with fail().
#pragma once

#include "kvrt/kvrt.h"

namespace kvrt {

using Result = kvrt_result;

// Records `fmt` (printf-style) as the calling thread's detail message and
// returns `code`, so call sites read `return fail(KVRT_ERROR_..., "...", ...);`.
Result fail(Result code, const char* fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

// The calling thread's detail message ("" if none).
const char* last_error_message();

// Clears the calling thread's detail message (done on entry to every API call).
void clear_error_message();

// The static name of a result code.
const char* result_name(Result code);

}  // namespace kvrt

// Returns from the enclosing function when `expr` is not KVRT_SUCCESS.
#define KVRT_TRY(expr)                                  \
    do {                                                \
        const ::kvrt::Result kvrt_try_r_ = (expr);      \
        if (kvrt_try_r_ != KVRT_SUCCESS) return kvrt_try_r_; \
    } while (0)
