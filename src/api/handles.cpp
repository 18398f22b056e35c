#include "api/handles.hpp"

#include <algorithm>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

namespace kvrt::api {

namespace {

// Function-local statics: constructed on first use, so handle checks work
// during static initialization of an application too.
std::shared_mutex& registry_mutex() {
    static std::shared_mutex m;
    return m;
}

// Every handle ever registered: live ones, and destroyed ones as tombstones
// (their storage is never freed, so the address never comes back). The map
// also keeps the tombstones' storage reachable for leak checkers.
struct Entry {
    Kind kind;
    bool live;
};

std::unordered_map<const void*, Entry>& registry() {
    static auto* r = new std::unordered_map<const void*, Entry>();  // never destroyed: safe at exit
    return *r;
}

}  // namespace

void* handle_alloc(std::size_t size) { return ::operator new(size); }

void handle_free(void* p) noexcept {
    if (!p) return;
    {
        std::shared_lock<std::shared_mutex> lock(registry_mutex());
        // Given out as a handle once: a tombstone for good.
        if (registry().count(p)) return;
    }
    ::operator delete(p);  // never registered (creation failed): nobody holds it
}

void register_handle(const void* handle, Kind kind) {
    std::unique_lock<std::shared_mutex> lock(registry_mutex());
    registry()[handle] = Entry{kind, true};
}

void unregister_handle(const void* handle) {
    std::unique_lock<std::shared_mutex> lock(registry_mutex());
    auto it = registry().find(handle);
    if (it != registry().end()) it->second.live = false;
}

bool is_live(const void* handle, Kind kind) {
    std::shared_lock<std::shared_mutex> lock(registry_mutex());
    auto it = registry().find(handle);
    return it != registry().end() && it->second.live && it->second.kind == kind;
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

void ChildList::add(void* handle, void (*destroy)(void*)) {
    std::lock_guard<std::mutex> lock(mutex_);
    entries_.push_back({handle, destroy});
}

void ChildList::remove(void* handle) {
    std::lock_guard<std::mutex> lock(mutex_);
    entries_.erase(std::remove_if(entries_.begin(), entries_.end(), [handle](const Entry& e) { return e.handle == handle; }),
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
        e.destroy(e.handle);
    }
}

Result check_context(kvrt_context_T* ctx, const char* arg) {
    KVRT_TRY(check_handle(ctx, Kind::Context, arg));
    if (ctx->ctx->lost()) return fail(KVRT_ERROR_DEVICE_LOST, "the context's device was lost; destroy the context");
    return KVRT_SUCCESS;
}

Result resolve_stream(kvrt_context_T* owner, kvrt_stream_T* s, vk::Stream** out) {
    *out = nullptr;
    if (!s) return KVRT_SUCCESS;
    KVRT_TRY(check_handle(s, Kind::Stream, "stream"));
    if (s->owner != owner) return fail(KVRT_ERROR_INVALID_ARGUMENT, "stream belongs to another context");
    *out = s->stream.get();
    return KVRT_SUCCESS;
}

Result resolve_buffer(kvrt_context_T* owner, const char* what, kvrt_buffer_T* b, const vk::Buffer** out) {
    *out = nullptr;
    if (!b) return KVRT_SUCCESS;
    KVRT_TRY(check_handle(b, Kind::Buffer, what));
    if (b->owner != owner) return fail(KVRT_ERROR_INVALID_ARGUMENT, "%s's buffer belongs to another context", what);
    *out = b->buffer.get();
    return KVRT_SUCCESS;
}

}  // namespace kvrt::api
