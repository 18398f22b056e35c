#include "api/handles.hpp"

#include <algorithm>
#include <mutex>

namespace kvrt::api {

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

void ChildList::add(void* object, void (*destroy)(void*)) {
    std::lock_guard<std::mutex> lock(mutex_);
    entries_.push_back({object, destroy});
}

void ChildList::remove(void* object) {
    std::lock_guard<std::mutex> lock(mutex_);
    entries_.erase(std::remove_if(entries_.begin(), entries_.end(), [object](const Entry& e) { return e.object == object; }),
                   entries_.end());
}

void ChildList::destroy_all() {
    // Newest first: later objects may depend on earlier ones. The lock is
    // not held while a child is destroyed.
    for (;;) {
        Entry e;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (entries_.empty()) return;
            e = entries_.back();
            entries_.pop_back();
        }
        e.destroy(e.object);
    }
}

Result check_context(const ContextObj* ctx) {
    if (ctx->ctx->lost()) return fail(KVRT_ERROR_DEVICE_LOST, "the context's device was lost; destroy the context");
    return KVRT_SUCCESS;
}

Result resolve_context(kvrt_context handle, ContextObj** out, const char* arg) {
    KVRT_TRY(resolve(handle, out, arg));
    return check_context(*out);
}

Result resolve_stream(const ContextObj* owner, kvrt_stream s, vk::Stream** out) {
    *out = nullptr;
    if (!s) return KVRT_SUCCESS;
    StreamObj* obj = nullptr;
    KVRT_TRY(resolve(s, &obj, "stream"));
    if (obj->owner != owner) return fail(KVRT_ERROR_INVALID_ARGUMENT, "stream belongs to another context");
    *out = obj->stream.get();
    return KVRT_SUCCESS;
}

Result resolve_buffer(const ContextObj* owner, const char* what, kvrt_buffer b, const vk::Buffer** out) {
    *out = nullptr;
    if (!b) return KVRT_SUCCESS;
    BufferObj* obj = nullptr;
    KVRT_TRY(resolve(b, &obj, what));
    if (obj->owner != owner) return fail(KVRT_ERROR_INVALID_ARGUMENT, "%s's buffer belongs to another context", what);
    *out = obj->buffer.get();
    return KVRT_SUCCESS;
}

}  // namespace kvrt::api
