// Results, version and element types: the entry points that need no object.
#include "kvrt/kvrt.h"

#include "api/handles.hpp"
#include "core/raw_enum.hpp"
#include "core/result.hpp"
#include "kv/geometry.hpp"

#define KVRT_STR2(x) #x
#define KVRT_STR(x) KVRT_STR2(x)

extern "C" {

KVRT_API const char* kvrt_result_string(kvrt_result result) {
    // Any int may arrive here: switch on it as an integer.
    switch (kvrt::raw_enum(result)) {
        case KVRT_SUCCESS: return "KVRT_SUCCESS: success";
        case KVRT_ERROR_INVALID_ARGUMENT: return "KVRT_ERROR_INVALID_ARGUMENT: an argument is invalid";
        case KVRT_ERROR_INVALID_HANDLE: return "KVRT_ERROR_INVALID_HANDLE: a handle is NULL, destroyed or of another kind";
        case KVRT_ERROR_OUT_OF_HOST_MEMORY: return "KVRT_ERROR_OUT_OF_HOST_MEMORY: out of host memory";
        case KVRT_ERROR_OUT_OF_DEVICE_MEMORY: return "KVRT_ERROR_OUT_OF_DEVICE_MEMORY: out of device memory";
        case KVRT_ERROR_DEVICE_LOST: return "KVRT_ERROR_DEVICE_LOST: the device was lost";
        case KVRT_ERROR_TIMEOUT: return "KVRT_ERROR_TIMEOUT: a wait timed out";
        case KVRT_ERROR_CACHE_FULL: return "KVRT_ERROR_CACHE_FULL: the cache has no room";
        case KVRT_ERROR_UNSUPPORTED: return "KVRT_ERROR_UNSUPPORTED: not supported by the device or build";
        case KVRT_ERROR_CORRUPT_STATE: return "KVRT_ERROR_CORRUPT_STATE: saved state is malformed";
        case KVRT_ERROR_IO: return "KVRT_ERROR_IO: a file could not be read or written";
        case KVRT_ERROR_INVALID_STATE: return "KVRT_ERROR_INVALID_STATE: the object's state does not allow the call";
        case KVRT_ERROR_INTERNAL: return "KVRT_ERROR_INTERNAL: internal error";
        default: return "KVRT_ERROR_UNKNOWN: unknown result code";
    }
}

KVRT_API const char* kvrt_last_error_message(void) { return kvrt::last_error_message(); }

KVRT_API uint32_t kvrt_version(void) { return static_cast<uint32_t>(KVRT_VERSION); }

KVRT_API const char* kvrt_version_string(void) {
    return KVRT_STR(KVRT_VERSION_MAJOR) "." KVRT_STR(KVRT_VERSION_MINOR) "." KVRT_STR(KVRT_VERSION_PATCH);
}

KVRT_API const char* kvrt_type_name(kvrt_type type) {
    const kvrt::kv::TypeInfo* t = kvrt::kv::type_info(type);
    return t ? t->name : nullptr;
}

KVRT_API kvrt_result kvrt_type_from_name(const char* name, kvrt_type* out_type) {
    return kvrt::api::guarded([&]() -> kvrt::Result {
        if (out_type) *out_type = KVRT_TYPE_UNDEFINED;
        if (!name) return kvrt::fail(KVRT_ERROR_INVALID_ARGUMENT, "name is NULL");
        if (!out_type) return kvrt::fail(KVRT_ERROR_INVALID_ARGUMENT, "out_type is NULL");
        if (!kvrt::kv::parse_type(name, out_type))
            return kvrt::fail(KVRT_ERROR_INVALID_ARGUMENT,
                              "'%.64s' is not a type name (f32, f16, q8_0, q4_0, u8_static, u16_static)", name);
        return KVRT_SUCCESS;
    });
}

KVRT_API uint32_t kvrt_type_block_size(kvrt_type type) {
    const kvrt::kv::TypeInfo* t = kvrt::kv::type_info(type);
    return t ? t->block_elems : 0;
}

KVRT_API uint32_t kvrt_type_block_bytes(kvrt_type type) {
    const kvrt::kv::TypeInfo* t = kvrt::kv::type_info(type);
    return t ? t->block_bytes : 0;
}

}  // extern "C"
