// Streams and the transfer kernels.
#include "kvrt/kvrt.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "api/handles.hpp"
#include "core/checked.hpp"
#include "ops/transfer.hpp"

using namespace kvrt;
using namespace kvrt::api;

namespace {

void destroy_stream(void* object) {
    auto* s = static_cast<StreamObj*>(object);
    unpublish(s);
    delete s;
}

// A buffer argument of a command: live, of the stream's context, and the range
// inside it and 4-byte aligned.
Result check_cmd_buffer(const StreamObj* s, kvrt_buffer handle, const char* arg, uint64_t offset, uint64_t size,
                        BufferObj** out) {
    KVRT_TRY(resolve(handle, out, arg));
    const BufferObj* b = *out;
    if (b->owner != s->owner) return fail(KVRT_ERROR_INVALID_ARGUMENT, "%s belongs to another context", arg);
    if (offset % 4 || size % 4)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "%s: offset and size must be multiples of 4", arg);
    if (!range_inside(offset, size, b->buffer->size()))
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "%s: range [%llu, +%llu) is outside the buffer of %llu bytes", arg,
                    static_cast<unsigned long long>(offset), static_cast<unsigned long long>(size),
                    static_cast<unsigned long long>(b->buffer->size()));
    return KVRT_SUCCESS;
}

}  // namespace

extern "C" {

KVRT_API kvrt_result kvrt_stream_create(kvrt_context context, const kvrt_stream_desc* desc, kvrt_stream* out_stream) {
    return guarded([&]() -> Result {
        if (!out_stream) return fail(KVRT_ERROR_INVALID_ARGUMENT, "out_stream is NULL");
        *out_stream = nullptr;
        ContextObj* c = nullptr;
        KVRT_TRY(resolve_context(context, &c, "context"));
        KVRT_TRY(check_optional_struct("desc", desc, KVRT_STRUCT_TYPE_STREAM_DESC));
        kvrt_stream_desc d = KVRT_STREAM_DESC_INIT;
        if (desc) d = *desc;
        if (d.flags & ~static_cast<kvrt_flags>(KVRT_STREAM_TIMESTAMPS))
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "unknown stream flags 0x%x", static_cast<unsigned>(d.flags));
        if (d.max_timings > 65536) return fail(KVRT_ERROR_INVALID_ARGUMENT, "max_timings above 65536");
        auto obj = std::make_unique<StreamObj>();
        obj->owner = c;
        KVRT_TRY(vk::Stream::create(*c->ctx, d.flags & KVRT_STREAM_TIMESTAMPS, d.max_timings, d.label, &obj->stream));
        KVRT_TRY(adopt(c, obj.get(), &destroy_stream));
        *out_stream = obj.release()->handle;
        return KVRT_SUCCESS;
    });
}

KVRT_API void kvrt_stream_destroy(kvrt_stream stream) {
    guarded_void([&]() {
        StreamObj* s = lookup(stream);
        if (!s) return;
        s->owner->children.remove(s);
        destroy_stream(s);
    });
}

KVRT_API kvrt_result kvrt_stream_begin(kvrt_stream stream) {
    return guarded([&]() -> Result {
        StreamObj* s = nullptr;
        KVRT_TRY(resolve_usable(stream, &s, "stream"));
        return s->stream->begin();
    });
}

KVRT_API kvrt_result kvrt_stream_submit(kvrt_stream stream) {
    return guarded([&]() -> Result {
        StreamObj* s = nullptr;
        KVRT_TRY(resolve_usable(stream, &s, "stream"));
        return s->stream->submit();
    });
}

KVRT_API kvrt_result kvrt_stream_wait(kvrt_stream stream, uint64_t timeout_ns) {
    return guarded([&]() -> Result {
        StreamObj* s = nullptr;
        KVRT_TRY(resolve(stream, &s, "stream"));
        return s->stream->wait(timeout_ns);
    });
}

KVRT_API kvrt_result kvrt_stream_get_timings(kvrt_stream stream, kvrt_timing* timings, uint32_t* count) {
    return guarded([&]() -> Result {
        StreamObj* s = nullptr;
        KVRT_TRY(resolve(stream, &s, "stream"));
        if (!count) return fail(KVRT_ERROR_INVALID_ARGUMENT, "count is NULL");
        if (timings) {
            for (uint32_t i = 0; i < *count; ++i) {
                char name[32];
                std::snprintf(name, sizeof name, "timings[%u]", i);
                KVRT_TRY(check_struct(name, &timings[i], KVRT_STRUCT_TYPE_TIMING));
            }
        }
        uint32_t n = 0;
        KVRT_TRY(s->stream->timings(nullptr, &n));
        if (!timings) {
            *count = n;
            return KVRT_SUCCESS;
        }
        // Filled through a copy: the caller's `type` and `next` stay as they are.
        n = std::min(n, *count);
        if (n == 0) {  // room for none: nothing to fill (an empty copy is no size query)
            *count = 0;
            return KVRT_SUCCESS;
        }
        std::vector<kvrt_timing> got(n);
        KVRT_TRY(s->stream->timings(got.data(), &n));
        for (uint32_t i = 0; i < n; ++i) {
            timings[i].label = got[i].label;
            timings[i].ns = got[i].ns;
        }
        *count = n;
        return KVRT_SUCCESS;
    });
}

KVRT_API kvrt_result kvrt_cmd_fill(kvrt_stream stream, kvrt_buffer buffer, uint64_t offset, uint64_t size,
                                   uint32_t value) {
    return guarded([&]() -> Result {
        StreamObj* s = nullptr;
        BufferObj* b = nullptr;
        KVRT_TRY(resolve_usable(stream, &s, "stream"));
        KVRT_TRY(check_cmd_buffer(s, buffer, "buffer", offset, size, &b));
        KVRT_TRY(s->stream->require_recording());
        if (size == 0) return KVRT_SUCCESS;
        return ops::record_fill(*s->stream, *b->buffer, offset, size, value);
    });
}

KVRT_API kvrt_result kvrt_cmd_copy(kvrt_stream stream, kvrt_buffer src, uint64_t src_offset, kvrt_buffer dst,
                                   uint64_t dst_offset, uint64_t size) {
    return guarded([&]() -> Result {
        StreamObj* s = nullptr;
        BufferObj* sb = nullptr;
        BufferObj* db = nullptr;
        KVRT_TRY(resolve_usable(stream, &s, "stream"));
        KVRT_TRY(check_cmd_buffer(s, src, "src", src_offset, size, &sb));
        KVRT_TRY(check_cmd_buffer(s, dst, "dst", dst_offset, size, &db));
        if (sb == db && src_offset < dst_offset + size && dst_offset < src_offset + size)
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "source and destination ranges overlap");
        KVRT_TRY(s->stream->require_recording());
        if (size == 0) return KVRT_SUCCESS;
        return ops::record_copy(*s->stream, *sb->buffer, src_offset, *db->buffer, dst_offset, size);
    });
}

}  // extern "C"
