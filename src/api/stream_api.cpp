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

void destroy_stream(void* h) {
    auto* s = static_cast<kvrt_stream_T*>(h);
    unregister_handle(s);
    delete s;
}

Result check_stream(kvrt_stream_T* s) {
    KVRT_TRY(check_handle(s, Kind::Stream, "stream"));
    return check_context(s->owner, "the stream's context");
}

// A buffer argument of a command: live, of the stream's context, and the range
// inside it and 4-byte aligned.
Result check_cmd_buffer(kvrt_stream_T* s, kvrt_buffer_T* b, const char* arg, uint64_t offset, uint64_t size) {
    KVRT_TRY(check_handle(b, Kind::Buffer, arg));
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
        KVRT_TRY(check_context(context, "context"));
        KVRT_TRY(check_optional_struct("desc", desc, KVRT_STRUCT_TYPE_STREAM_DESC));
        kvrt_stream_desc d = KVRT_STREAM_DESC_INIT;
        if (desc) d = *desc;
        if (d.flags & ~static_cast<kvrt_flags>(KVRT_STREAM_TIMESTAMPS))
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "unknown stream flags 0x%x", static_cast<unsigned>(d.flags));
        if (d.max_timings > 65536) return fail(KVRT_ERROR_INVALID_ARGUMENT, "max_timings above 65536");
        auto handle = std::make_unique<kvrt_stream_T>();
        handle->owner = context;
        KVRT_TRY(vk::Stream::create(*context->ctx, d.flags & KVRT_STREAM_TIMESTAMPS, d.max_timings, d.label,
                                    &handle->stream));
        context->children.add(handle.get(), &destroy_stream);
        register_handle(handle.get(), Kind::Stream);
        *out_stream = handle.release();
        return KVRT_SUCCESS;
    });
}

KVRT_API void kvrt_stream_destroy(kvrt_stream stream) {
    guarded_void([&]() {
        if (!stream || !is_live(stream, Kind::Stream)) return;
        stream->owner->children.remove(stream);
        destroy_stream(stream);
    });
}

KVRT_API kvrt_result kvrt_stream_begin(kvrt_stream stream) {
    return guarded([&]() -> Result {
        KVRT_TRY(check_stream(stream));
        return stream->stream->begin();
    });
}

KVRT_API kvrt_result kvrt_stream_submit(kvrt_stream stream) {
    return guarded([&]() -> Result {
        KVRT_TRY(check_stream(stream));
        return stream->stream->submit();
    });
}

KVRT_API kvrt_result kvrt_stream_wait(kvrt_stream stream, uint64_t timeout_ns) {
    return guarded([&]() -> Result {
        KVRT_TRY(check_handle(stream, Kind::Stream, "stream"));
        return stream->stream->wait(timeout_ns);
    });
}

KVRT_API kvrt_result kvrt_stream_get_timings(kvrt_stream stream, kvrt_timing* timings, uint32_t* count) {
    return guarded([&]() -> Result {
        KVRT_TRY(check_handle(stream, Kind::Stream, "stream"));
        if (!count) return fail(KVRT_ERROR_INVALID_ARGUMENT, "count is NULL");
        if (timings) {
            for (uint32_t i = 0; i < *count; ++i) {
                char name[32];
                std::snprintf(name, sizeof name, "timings[%u]", i);
                KVRT_TRY(check_struct(name, &timings[i], KVRT_STRUCT_TYPE_TIMING));
            }
        }
        uint32_t n = 0;
        KVRT_TRY(stream->stream->timings(nullptr, &n));
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
        KVRT_TRY(stream->stream->timings(got.data(), &n));
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
        KVRT_TRY(check_stream(stream));
        KVRT_TRY(check_cmd_buffer(stream, buffer, "buffer", offset, size));
        KVRT_TRY(stream->stream->require_recording());
        if (size == 0) return KVRT_SUCCESS;
        return ops::record_fill(*stream->stream, *buffer->buffer, offset, size, value);
    });
}

KVRT_API kvrt_result kvrt_cmd_copy(kvrt_stream stream, kvrt_buffer src, uint64_t src_offset, kvrt_buffer dst,
                                   uint64_t dst_offset, uint64_t size) {
    return guarded([&]() -> Result {
        KVRT_TRY(check_stream(stream));
        KVRT_TRY(check_cmd_buffer(stream, src, "src", src_offset, size));
        KVRT_TRY(check_cmd_buffer(stream, dst, "dst", dst_offset, size));
        if (src == dst && src_offset < dst_offset + size && dst_offset < src_offset + size)
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "source and destination ranges overlap");
        KVRT_TRY(stream->stream->require_recording());
        if (size == 0) return KVRT_SUCCESS;
        return ops::record_copy(*stream->stream, *src->buffer, src_offset, *dst->buffer, dst_offset, size);
    });
}

}  // extern "C"
