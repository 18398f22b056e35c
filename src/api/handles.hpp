// Public handles and their validation. A handle is a value of the process's
// HandleTable (core/handle_table.hpp): an address in space kvrt
// reserved and never maps, encoding a slot and its generation. An entry point
// resolves each handle argument to its object with resolve() (no lock), so
// NULL, destroyed, foreign and mixed-up handles are reported instead of
// dereferenced, and a destroyed handle is refused by every later call, also
// after new objects of its kind were created. The structs behind the
// handles (ContextObj, ...) are freed when destroyed; the public
// `struct kvrt_*_T` types stay incomplete here, so a handle cannot be
// dereferenced by mistake.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

#include "cache/cache.hpp"
#include "core/chain.hpp"
#include "core/handle_table.hpp"
#include "core/result.hpp"
#include "memory/memory.hpp"
#include "vk/buffer.hpp"
#include "vk/context.hpp"
#include "vk/stream.hpp"

namespace kvrt::api {

enum class Kind : uint8_t { Context = 1, Buffer, Stream, Cache, Memory };

const char* kind_name(Kind kind);

// Registers `child` as an object owned by `owner`; destroying the owner destroys
// its children first. The destroy callback must end the child's handle. Children
// of one context are created and destroyed on any threads: add and remove
// lock the list (a leaf lock). destroy_all runs when nothing else uses the
// context (kvrt_context_destroy).
struct ChildList {
    struct Entry {
        void* object;
        void (*destroy)(void*);
    };
    void add(void* object, void (*destroy)(void*));
    void remove(void* object);
    void destroy_all();

private:
    std::mutex mutex_;
    std::vector<Entry> entries_;
};

struct ContextObj {
    static constexpr Kind kKind = Kind::Context;
    using Handle = kvrt_context;
    Handle handle = nullptr;
    std::unique_ptr<vk::Context> ctx;
    ChildList children;
};

struct CacheObj;

struct BufferObj {
    static constexpr Kind kKind = Kind::Buffer;
    using Handle = kvrt_buffer;
    Handle handle = nullptr;
    ContextObj* owner = nullptr;
    // Shared: a cache's window buffers are also the cache's own.
    std::shared_ptr<vk::Buffer> buffer;
    // Set for a buffer a cache gives out (kvrt_static_window): the cache
    // destroys it, kvrt_buffer_destroy refuses to.
    CacheObj* owned_by_cache = nullptr;
};

struct StreamObj {
    static constexpr Kind kKind = Kind::Stream;
    using Handle = kvrt_stream;
    Handle handle = nullptr;
    ContextObj* owner = nullptr;
    std::unique_ptr<vk::Stream> stream;
};

struct CacheObj {
    static constexpr Kind kKind = Kind::Cache;
    using Handle = kvrt_cache;
    Handle handle = nullptr;
    ContextObj* owner = nullptr;
    std::unique_ptr<cache::Cache> cache;
    // The static layout's buffers, per (layer, K|V), made on demand.
    std::vector<BufferObj*> window_buffers;
};

struct MemoryObj {
    static constexpr Kind kKind = Kind::Memory;
    using Handle = kvrt_memory;
    Handle handle = nullptr;
    ContextObj* owner = nullptr;
    std::unique_ptr<memory::Memory> memory;
};

template <class H>
struct ObjectOf;
template <>
struct ObjectOf<kvrt_context> {
    using type = ContextObj;
};
template <>
struct ObjectOf<kvrt_buffer> {
    using type = BufferObj;
};
template <>
struct ObjectOf<kvrt_stream> {
    using type = StreamObj;
};
template <>
struct ObjectOf<kvrt_cache> {
    using type = CacheObj;
};
template <>
struct ObjectOf<kvrt_memory> {
    using type = MemoryObj;
};

// The object of a live handle of its kind, or NULL. No lock.
template <class H>
typename ObjectOf<H>::type* lookup(H handle) noexcept {
    using Obj = typename ObjectOf<H>::type;
    return static_cast<Obj*>(
        HandleTable::global().find(reinterpret_cast<uintptr_t>(handle), static_cast<uint8_t>(Obj::kKind)));
}

// Gives `obj` its handle (obj->handle); OUT_OF_HOST_MEMORY when none is left.
template <class Obj>
Result publish(Obj* obj) {
    const uintptr_t h = HandleTable::global().add(obj, static_cast<uint8_t>(Obj::kKind));
    if (!h) return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "no %s handle left: the address space kvrt reserves for "
                        "handles is spent or cannot be reserved", kind_name(Obj::kKind));
    obj->handle = reinterpret_cast<typename Obj::Handle>(h);
    return KVRT_SUCCESS;
}

// Ends `obj`'s handle (if it has one); every later call with it is refused.
template <class Obj>
void unpublish(Obj* obj) noexcept {
    if (obj->handle)
        HandleTable::global().remove(reinterpret_cast<uintptr_t>(obj->handle), static_cast<uint8_t>(Obj::kKind));
}

// Makes `obj` a child of `owner` and gives it its handle: both or neither.
template <class Obj>
Result adopt(ContextObj* owner, Obj* obj, void (*destroy)(void*)) {
    owner->children.add(obj, destroy);
    const Result r = publish(obj);
    if (r != KVRT_SUCCESS) owner->children.remove(obj);
    return r;
}

// Resolves a handle argument; on failure records which argument was bad.
template <class H>
Result resolve(H handle, typename ObjectOf<H>::type** out, const char* arg) {
    using Obj = typename ObjectOf<H>::type;
    *out = nullptr;
    if (!handle) return fail(KVRT_ERROR_INVALID_HANDLE, "%s is NULL", arg);
    Obj* obj = lookup(handle);
    if (!obj)
        return fail(KVRT_ERROR_INVALID_HANDLE, "%s is not a live %s handle (destroyed, or of another kind)", arg,
                    kind_name(Obj::kKind));
    *out = obj;
    return KVRT_SUCCESS;
}

// An object's context, which also fails once the device is lost.
Result check_context(const ContextObj* ctx);

// A handle argument of an object whose context is usable (its device not lost).
template <class H>
Result resolve_usable(H handle, typename ObjectOf<H>::type** out, const char* arg) {
    KVRT_TRY(resolve(handle, out, arg));
    return check_context((*out)->owner);
}

// A context argument: live, and its device not lost.
Result resolve_context(kvrt_context handle, ContextObj** out, const char* arg);

// A stream argument of an object of context `owner`: NULL, or a live stream
// of that context.
Result resolve_stream(const ContextObj* owner, kvrt_stream s, vk::Stream** out);

// The buffer of a tensor or output argument `what` of an object of context
// `owner`: NULL, or a live buffer of that context.
Result resolve_buffer(const ContextObj* owner, const char* what, kvrt_buffer b, const vk::Buffer** out);

// The internal objects behind live handles, or NULL (for the tests and
// tools, which reach internals through them).
inline vk::Context* context_of(kvrt_context handle) noexcept {
    ContextObj* c = lookup(handle);
    return c ? c->ctx.get() : nullptr;
}
inline cache::Cache* cache_of(kvrt_cache handle) noexcept {
    CacheObj* c = lookup(handle);
    return c ? c->cache.get() : nullptr;
}

}  // namespace kvrt::api

namespace kvrt::api {

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
