// Public handles and their validation. Every handle the library gives out is
// registered with its kind; an entry point accepts a handle only if it is
// registered with the expected kind, so NULL, destroyed, foreign and mixed-up
// handles are reported instead of dereferenced. The registry is shared by all
// threads and contexts (a reader-writer lock: checks run in parallel).
//
// A handle's address is never given to another object while the process
// runs: the structs behind handles take their storage from handle_alloc(),
// and handle_free() keeps the storage of a handle that was ever registered as
// a tombstone (the registry entry stays, marked dead). A destroyed handle is
// therefore reported as destroyed by every later call, also after new objects
// of the same kind were created. Cost: each destroyed handle keeps its
// struct's bytes (at most a few dozen) and one registry entry, well under
// 200 bytes in all.
#pragma once

#include <cstddef>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

#include "cache/cache.hpp"
#include "memory/memory.hpp"
#include "core/chain.hpp"
#include "core/result.hpp"
#include "vk/buffer.hpp"
#include "vk/context.hpp"
#include "vk/stream.hpp"

// Routes a handle struct's new/delete through handle_alloc/handle_free.
#define KVRT_HANDLE_STORAGE                                                                       \
    static void* operator new(std::size_t size) { return ::kvrt::api::handle_alloc(size); }       \
    static void operator delete(void* p) noexcept { ::kvrt::api::handle_free(p); }

namespace kvrt::api {

enum class Kind : uint8_t { Context = 1, Buffer, Stream, Cache, Memory };

// Storage of handle structs (see above); use KVRT_HANDLE_STORAGE in each.
void* handle_alloc(std::size_t size);
void handle_free(void* p) noexcept;

void register_handle(const void* handle, Kind kind);
void unregister_handle(const void* handle);
bool is_live(const void* handle, Kind kind);

const char* kind_name(Kind kind);

// Registers `child` as an object owned by `owner`; destroying the owner destroys
// its children first. The destroy callback must unregister the child. Children
// of one context are created and destroyed on any threads: add and remove
// lock the list (a leaf lock). destroy_all runs when nothing else uses the
// context (kvrt_context_destroy).
struct ChildList {
    struct Entry {
        void* handle;
        void (*destroy)(void*);
    };
    void add(void* handle, void (*destroy)(void*));
    void remove(void* handle);
    void destroy_all();

private:
    std::mutex mutex_;
    std::vector<Entry> entries_;
};

}  // namespace kvrt::api

struct kvrt_context_T {
    KVRT_HANDLE_STORAGE
    std::unique_ptr<kvrt::vk::Context> ctx;
    kvrt::api::ChildList children;
};

struct kvrt_buffer_T {
    KVRT_HANDLE_STORAGE
    kvrt_context_T* owner = nullptr;
    // Shared: a cache's window buffers are also the cache's own.
    std::shared_ptr<kvrt::vk::Buffer> buffer;
    // Set for a buffer a cache gives out (kvrt_static_window): the cache
    // destroys it, kvrt_buffer_destroy refuses to.
    struct kvrt_cache_T* owned_by_cache = nullptr;
};

struct kvrt_stream_T {
    KVRT_HANDLE_STORAGE
    kvrt_context_T* owner = nullptr;
    std::unique_ptr<kvrt::vk::Stream> stream;
};

struct kvrt_cache_T {
    KVRT_HANDLE_STORAGE
    kvrt_context_T* owner = nullptr;
    std::unique_ptr<kvrt::cache::Cache> cache;
    // Handles of the static layout's buffers, per (layer, K|V), made on demand.
    std::vector<kvrt_buffer_T*> window_buffers;
};

struct kvrt_memory_T {
    KVRT_HANDLE_STORAGE
    kvrt_context_T* owner = nullptr;
    std::unique_ptr<kvrt::memory::Memory> memory;
};

namespace kvrt::api {

// Checks a handle; on failure records which argument was bad.
template <class T>
Result check_handle(T* handle, Kind kind, const char* arg) {
    if (!handle) return fail(KVRT_ERROR_INVALID_HANDLE, "%s is NULL", arg);
    if (!is_live(handle, kind))
        return fail(KVRT_ERROR_INVALID_HANDLE, "%s is not a live %s handle (destroyed, or of another kind)", arg,
                    kind_name(kind));
    return KVRT_SUCCESS;
}

// Context handles also fail once the device is lost.
Result check_context(kvrt_context_T* ctx, const char* arg);

// A stream argument of an object of context `owner`: NULL, or a live stream
// of that context.
Result resolve_stream(kvrt_context_T* owner, kvrt_stream_T* s, vk::Stream** out);

// The buffer of a tensor or output argument `what` of an object of context
// `owner`: NULL, or a live buffer of that context.
Result resolve_buffer(kvrt_context_T* owner, const char* what, kvrt_buffer_T* b, const vk::Buffer** out);

// Runs an entry point's body: clears the thread's detail message and turns any
// exception into a result, so none crosses the C boundary.
template <class F>
kvrt_result guarded(F&& body) noexcept {
    clear_error_message();
    try {
        return body();
    } catch (const std::bad_alloc&) {
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "out of host memory");
    } catch (const std::exception& e) {
        return fail(KVRT_ERROR_INTERNAL, "internal error: %s", e.what());
    } catch (...) {
        return fail(KVRT_ERROR_INTERNAL, "internal error: unknown exception");
    }
}

// For entry points that return nothing (destroy functions).
template <class F>
void guarded_void(F&& body) noexcept {
    (void)guarded([&]() {
        body();
        return KVRT_SUCCESS;
    });
}

}  // namespace kvrt::api
