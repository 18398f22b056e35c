#include "api/handles.hpp"

#include <algorithm>
#include <mutex>
#include <unordered_map>

namespace kvrt::api {

namespace {

// Function-local statics: constructed on first use, so handle checks work
// during static initialization of an application too.
std::mutex& registry_mutex() {
    static std::mutex m;
    return m;
}

std::unordered_map<const void*, Kind>& registry() {
    static auto* r = new std::unordered_map<const void*, Kind>();  // never destroyed: safe at exit
    return *r;
}

}  // namespace

void register_handle(const void* handle, Kind kind) {
    std::lock_guard<std::mutex> lock(registry_mutex());
    registry()[handle] = kind;
}

void unregister_handle(const void* handle) {
    std::lock_guard<std::mutex> lock(registry_mutex());
    registry().erase(handle);
}

bool is_live(const void* handle, Kind kind) {
    std::lock_guard<std::mutex> lock(registry_mutex());
    auto it = registry().find(handle);
    return it != registry().end() && it->second == kind;
}

const char* kind_name(Kind kind) {
    switch (kind) {
        case Kind::Context: return "kvrt_context";
        case Kind::Buffer: return "kvrt_buffer";
        case Kind::Stream: return "kvrt_stream";
        case Kind::Cache: return "kvrt_cache";
        case Kind::Memory: return "kvrt_memory";
    }
    return "kvrt handle";
}

void ChildList::remove(void* handle) {
    entries.erase(std::remove_if(entries.begin(), entries.end(), [handle](const Entry& e) { return e.handle == handle; }),
                  entries.end());
}

void ChildList::destroy_all() {
    // Newest first: later objects may depend on earlier ones.
    while (!entries.empty()) {
        const Entry e = entries.back();
        entries.pop_back();
        e.destroy(e.handle);
    }
}

Result check_context(kvrt_context_T* ctx, const char* arg) {
    KVRT_TRY(check_handle(ctx, Kind::Context, arg));
    if (ctx->ctx->lost()) return fail(KVRT_ERROR_DEVICE_LOST, "the context's device was lost; destroy the context");
    return KVRT_SUCCESS;
}

}  // namespace kvrt::api
