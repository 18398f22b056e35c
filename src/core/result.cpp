#include "core/result.hpp"

#include <cstdarg>
#include <cstdio>

namespace kvrt {

namespace {
thread_local char g_message[1024] = "";
}

Result fail(Result code, const char* fmt, ...) {
    va_list args;
    va_start(args, fmt);
    std::vsnprintf(g_message, sizeof(g_message), fmt, args);
    va_end(args);
    return code;
}

const char* last_error_message() { return g_message; }

void clear_error_message() { g_message[0] = '\0'; }

const char* result_name(Result code) {
    switch (code) {
        case KVRT_SUCCESS: return "KVRT_SUCCESS";
        case KVRT_ERROR_INVALID_ARGUMENT: return "KVRT_ERROR_INVALID_ARGUMENT";
        case KVRT_ERROR_INVALID_HANDLE: return "KVRT_ERROR_INVALID_HANDLE";
        case KVRT_ERROR_OUT_OF_HOST_MEMORY: return "KVRT_ERROR_OUT_OF_HOST_MEMORY";
        case KVRT_ERROR_OUT_OF_DEVICE_MEMORY: return "KVRT_ERROR_OUT_OF_DEVICE_MEMORY";
        case KVRT_ERROR_DEVICE_LOST: return "KVRT_ERROR_DEVICE_LOST";
        case KVRT_ERROR_TIMEOUT: return "KVRT_ERROR_TIMEOUT";
        case KVRT_ERROR_CACHE_FULL: return "KVRT_ERROR_CACHE_FULL";
        case KVRT_ERROR_UNSUPPORTED: return "KVRT_ERROR_UNSUPPORTED";
        case KVRT_ERROR_CORRUPT_STATE: return "KVRT_ERROR_CORRUPT_STATE";
        case KVRT_ERROR_IO: return "KVRT_ERROR_IO";
        case KVRT_ERROR_INVALID_STATE: return "KVRT_ERROR_INVALID_STATE";
        case KVRT_ERROR_INTERNAL: return "KVRT_ERROR_INTERNAL";
        default: return "KVRT_ERROR_UNKNOWN";
    }
}

}  // namespace kvrt
