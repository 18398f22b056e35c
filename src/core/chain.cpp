#include "core/chain.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace kvrt {

const char* struct_type_name(kvrt_struct_type type) {
    switch (type) {
        case KVRT_STRUCT_TYPE_CONTEXT_DESC: return "kvrt_context_desc";
        case KVRT_STRUCT_TYPE_DEVICE_INFO: return "kvrt_device_info";
        case KVRT_STRUCT_TYPE_BUFFER_DESC: return "kvrt_buffer_desc";
        case KVRT_STRUCT_TYPE_STREAM_DESC: return "kvrt_stream_desc";
        case KVRT_STRUCT_TYPE_CONTEXT_STATS: return "kvrt_context_stats";
        case KVRT_STRUCT_TYPE_TIMING: return "kvrt_timing";
        case KVRT_STRUCT_TYPE_PIPELINE_CACHE_DESC: return "kvrt_pipeline_cache_desc";
        case KVRT_STRUCT_TYPE_TENSOR_REF: return "kvrt_tensor_ref";
        case KVRT_STRUCT_TYPE_OUTPUT_REF: return "kvrt_output_ref";
        case KVRT_STRUCT_TYPE_CACHE_DESC: return "kvrt_cache_desc";
        case KVRT_STRUCT_TYPE_CACHE_ESTIMATE: return "kvrt_cache_estimate";
        case KVRT_STRUCT_TYPE_CACHE_INFO: return "kvrt_cache_info";
        case KVRT_STRUCT_TYPE_ATTENTION_PARAMS: return "kvrt_attention_params";
        case KVRT_STRUCT_TYPE_STATIC_LAYOUT_DESC: return "kvrt_static_layout_desc";
        case KVRT_STRUCT_TYPE_STATIC_SCALES_DESC: return "kvrt_static_scales_desc";
        case KVRT_STRUCT_TYPE_STATIC_WINDOW: return "kvrt_static_window";
        case KVRT_STRUCT_TYPE_STATIC_STATS: return "kvrt_static_stats";
        case KVRT_STRUCT_TYPE_BATCH: return "kvrt_batch";
        case KVRT_STRUCT_TYPE_ROPE_DESC: return "kvrt_rope_desc";
        case KVRT_STRUCT_TYPE_MEMORY_DESC: return "kvrt_memory_desc";
        case KVRT_STRUCT_TYPE_MEMORY_BATCH: return "kvrt_memory_batch";
        case KVRT_STRUCT_TYPE_MEMORY_INIT: return "kvrt_memory_init";
        case KVRT_STRUCT_TYPE_MEMORY_ESTIMATE: return "kvrt_memory_estimate";
        case KVRT_STRUCT_TYPE_BATCH_TREE: return "kvrt_batch_tree";
        case KVRT_STRUCT_TYPE_PAGED_LAYOUT_DESC: return "kvrt_paged_layout_desc";
        case KVRT_STRUCT_TYPE_PAGED_STATS: return "kvrt_paged_stats";
        case KVRT_STRUCT_TYPE_WINDOW_LAYOUT_DESC: return "kvrt_window_layout_desc";
        case KVRT_STRUCT_TYPE_STATIC_MASK_DESC: return "kvrt_static_mask_desc";
        case KVRT_STRUCT_TYPE_STATIC_STYLE_DESC: return "kvrt_static_style_desc";
        case KVRT_STRUCT_TYPE_EXPORTED_MEMORY: return "kvrt_exported_memory";
        case KVRT_STRUCT_TYPE_VULKAN_IMPORT_DESC: return "kvrt_vulkan_import_desc";
        case KVRT_STRUCT_TYPE_VULKAN_SUBMIT_DESC: return "kvrt_vulkan_submit_desc";
        case KVRT_STRUCT_TYPE_VULKAN_COMPLETION: return "kvrt_vulkan_completion";
        case KVRT_STRUCT_TYPE_UNDEFINED:
        case KVRT_STRUCT_TYPE_MAX_ENUM: break;
    }
    return nullptr;
}

namespace {

// The head of a caller's struct with `type` as the raw integer: a caller may
// have stored any int there, and only values in the enum's range may be
// loaded as kvrt_struct_type.
struct RawHeader {
    int32_t type;
    const void* next;
};
static_assert(sizeof(RawHeader) == sizeof(StructHeader) && offsetof(RawHeader, next) == offsetof(StructHeader, next),
              "RawHeader mirrors StructHeader");

RawHeader read_header(const void* s) {
    RawHeader h;
    std::memcpy(&h, s, sizeof h);
    return h;
}

// "kvrt_rope_desc (type 19)", "KVRT_STRUCT_TYPE_UNDEFINED (0)" or "an
// unknown struct type 12345".
void describe(int32_t type, char* out, size_t size) {
    // Non-negative values lie in kvrt_struct_type's range (0..0x7FFFFFFF).
    const char* name = type > 0 ? struct_type_name(static_cast<kvrt_struct_type>(type)) : nullptr;
    if (type == KVRT_STRUCT_TYPE_UNDEFINED)
        std::snprintf(out, size, "KVRT_STRUCT_TYPE_UNDEFINED (0)");
    else if (name)
        std::snprintf(out, size, "%s (type %d)", name, static_cast<int>(type));
    else
        std::snprintf(out, size, "an unknown struct type %d", static_cast<int>(type));
}

}  // namespace

Result check_chain(const char* owner, const void* next, std::initializer_list<kvrt_struct_type> allowed,
                   const void** found) {
    const size_t n = allowed.size();
    if (found)
        for (size_t i = 0; i < n; ++i) found[i] = nullptr;
    const void* seen[kMaxChain] = {};
    int depth = 0;
    for (const void* s = next; s; s = read_header(s).next) {
        if (depth == kMaxChain)
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "%s.next: the chain is longer than %d structs (a loop?)", owner,
                        kMaxChain);
        const RawHeader h = read_header(s);
        char what[96];
        describe(h.type, what, sizeof what);
        size_t at = n;
        size_t i = 0;
        for (kvrt_struct_type t : allowed) {
            if (static_cast<int32_t>(t) == h.type) at = i;
            ++i;
        }
        if (at == n) {
            if (n == 0)
                return fail(KVRT_ERROR_INVALID_ARGUMENT,
                            "%s.next: %s is not accepted here; this struct takes no chained structs", owner, what);
            return fail(KVRT_ERROR_INVALID_ARGUMENT,
                        "%s.next: %s is not accepted here (set `type` with the struct's _INIT macro, or this "
                        "library is older than the header that defines it)",
                        owner, what);
        }
        for (int j = 0; j < depth; ++j)
            if (read_header(seen[j]).type == h.type)
                return fail(KVRT_ERROR_INVALID_ARGUMENT, "%s.next: %s appears twice in the chain", owner, what);
        seen[depth++] = s;
        if (found) found[at] = s;
    }
    return KVRT_SUCCESS;
}

Result check_struct(const char* name, const void* s, kvrt_struct_type expected,
                    std::initializer_list<kvrt_struct_type> allowed, const void** found) {
    const char* want = struct_type_name(expected);
    if (!s) return fail(KVRT_ERROR_INVALID_ARGUMENT, "%s is NULL", name);
    const RawHeader h = read_header(s);
    if (h.type != static_cast<int32_t>(expected)) {
        char what[96];
        describe(h.type, what, sizeof what);
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "%s.type is %s, expected %s (type %d): initialize it with its _INIT macro",
                    name, what, want ? want : "?", static_cast<int>(expected));
    }
    return check_chain(name, h.next, allowed, found);
}

Result check_optional_struct(const char* name, const void* s, kvrt_struct_type expected,
                             std::initializer_list<kvrt_struct_type> allowed, const void** found) {
    if (!s) {
        if (found)
            for (size_t i = 0; i < allowed.size(); ++i) found[i] = nullptr;
        return KVRT_SUCCESS;
    }
    return check_struct(name, s, expected, allowed, found);
}

}  // namespace kvrt
