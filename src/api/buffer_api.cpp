// Buffers.
#include "kvrt/kvrt.h"
#include "kvrt/kvrt_vulkan.h"

#include <cstring>

#include "api/handles.hpp"
#include "core/checked.hpp"
#include "core/raw_enum.hpp"

using namespace kvrt;
using namespace kvrt::api;

namespace {

void destroy_buffer(void* object) {
    auto* b = static_cast<BufferObj*>(object);
    unpublish(b);
    delete b;
}

Result check_range(const BufferObj* b, uint64_t offset, uint64_t size, const void* data) {
    if (!data && size > 0) return fail(KVRT_ERROR_INVALID_ARGUMENT, "data is NULL");
    if (!range_inside(offset, size, b->buffer->size()))
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "range [%llu, +%llu) is outside the buffer of %llu bytes",
                    static_cast<unsigned long long>(offset), static_cast<unsigned long long>(size),
                    static_cast<unsigned long long>(b->buffer->size()));
    return KVRT_SUCCESS;
}

}  // namespace

extern "C" {

KVRT_API kvrt_result kvrt_buffer_create(kvrt_context context, const kvrt_buffer_desc* desc, kvrt_buffer* out_buffer) {
    return guarded([&]() -> Result {
        if (!out_buffer) return fail(KVRT_ERROR_INVALID_ARGUMENT, "out_buffer is NULL");
        *out_buffer = nullptr;
        ContextObj* c = nullptr;
        KVRT_TRY(resolve_context(context, &c, "context"));
        KVRT_TRY(check_struct("desc", desc, KVRT_STRUCT_TYPE_BUFFER_DESC));
        if (desc->size == 0) return fail(KVRT_ERROR_INVALID_ARGUMENT, "desc->size is 0");
        if (desc->flags & ~static_cast<kvrt_flags>(KVRT_BUFFER_EXPORTABLE))
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "unknown desc->flags 0x%x", static_cast<unsigned>(desc->flags));
        vk::Context& ctx = *c->ctx;
        const bool exportable = desc->flags & KVRT_BUFFER_EXPORTABLE;
        if (exportable && !ctx.export_types())
            return fail(KVRT_ERROR_UNSUPPORTED,
                        "KVRT_BUFFER_EXPORTABLE: this device cannot export memory as a file descriptor (%s)",
                        ctx.imported() ? "the context was imported from the application"
                                       : "it has no VK_KHR_external_memory_fd for storage buffers");
        auto obj = std::make_unique<BufferObj>();
        obj->owner = c;
        std::unique_ptr<vk::Buffer> buf;
        KVRT_TRY(vk::Buffer::create(ctx, desc->size, 0, desc->label, &buf, vk::MemoryKind::Device,
                                    exportable ? ctx.export_types() : 0));
        obj->buffer = std::move(buf);
        KVRT_TRY(adopt(c, obj.get(), &destroy_buffer));
        *out_buffer = obj.release()->handle;
        return KVRT_SUCCESS;
    });
}

KVRT_API kvrt_result kvrt_buffer_import_vulkan(kvrt_context context, VkBuffer buffer, VkDeviceSize offset,
                                               VkDeviceSize size, kvrt_buffer* out_buffer) {
    return guarded([&]() -> Result {
        if (!out_buffer) return fail(KVRT_ERROR_INVALID_ARGUMENT, "out_buffer is NULL");
        *out_buffer = nullptr;
        ContextObj* c = nullptr;
        KVRT_TRY(resolve_context(context, &c, "context"));
        // The range's end must be an address of the VkBuffer: offset + size may not wrap.
        uint64_t end = 0;
        if (!checked_add(offset, size, &end))
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "offset %llu + size %llu wraps around 64 bits",
                        static_cast<unsigned long long>(offset), static_cast<unsigned long long>(size));
        auto obj = std::make_unique<BufferObj>();
        obj->owner = c;
        std::unique_ptr<vk::Buffer> buf;
        KVRT_TRY(vk::Buffer::wrap(*c->ctx, buffer, offset, size, &buf));
        obj->buffer = std::move(buf);
        KVRT_TRY(adopt(c, obj.get(), &destroy_buffer));
        *out_buffer = obj.release()->handle;
        return KVRT_SUCCESS;
    });
}

KVRT_API void kvrt_buffer_destroy(kvrt_buffer buffer) {
    guarded_void([&]() {
        BufferObj* b = lookup(buffer);
        if (!b) return;
        if (b->owned_by_cache) {
            b->owner->ctx->log().log(KVRT_LOG_LEVEL_WARN,
                                          "kvrt_buffer_destroy: the buffer is a cache's (a static window's) and "
                                          "goes with the cache; ignored");
            return;
        }
        b->owner->children.remove(b);
        destroy_buffer(b);
    });
}

KVRT_API kvrt_result kvrt_buffer_get_size(kvrt_buffer buffer, uint64_t* out_size) {
    return guarded([&]() -> Result {
        BufferObj* b = nullptr;
        KVRT_TRY(resolve(buffer, &b, "buffer"));
        if (!out_size) return fail(KVRT_ERROR_INVALID_ARGUMENT, "out_size is NULL");
        *out_size = b->buffer->size();
        return KVRT_SUCCESS;
    });
}

KVRT_API kvrt_result kvrt_buffer_upload(kvrt_buffer buffer, uint64_t offset, const void* data, uint64_t size) {
    return guarded([&]() -> Result {
        BufferObj* b = nullptr;
        KVRT_TRY(resolve_usable(buffer, &b, "buffer"));
        KVRT_TRY(check_range(b, offset, size, data));
        return b->buffer->upload(offset, data, size);
    });
}

KVRT_API kvrt_result kvrt_buffer_download(kvrt_buffer buffer, uint64_t offset, void* data, uint64_t size) {
    return guarded([&]() -> Result {
        BufferObj* b = nullptr;
        KVRT_TRY(resolve_usable(buffer, &b, "buffer"));
        KVRT_TRY(check_range(b, offset, size, data));
        return b->buffer->download(offset, data, size);
    });
}

KVRT_API kvrt_result kvrt_buffer_export_memory(kvrt_buffer buffer, uint64_t offset,
                                               kvrt_memory_handle_type handle_type, kvrt_exported_memory* out) {
    return guarded([&]() -> Result {
        BufferObj* obj = nullptr;
        KVRT_TRY(resolve_usable(buffer, &obj, "buffer"));
        KVRT_TRY(check_struct("out", out, KVRT_STRUCT_TYPE_EXPORTED_MEMORY));
        const vk::Buffer& b = *obj->buffer;
        if (offset >= b.size())
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "offset %llu is outside the buffer of %llu bytes",
                        static_cast<unsigned long long>(offset), static_cast<unsigned long long>(b.size()));
        VkExternalMemoryHandleTypeFlagBits type;
        switch (raw_enum(handle_type)) {
            case KVRT_MEMORY_HANDLE_OPAQUE_FD: type = VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT; break;
            case KVRT_MEMORY_HANDLE_DMA_BUF: type = VK_EXTERNAL_MEMORY_HANDLE_TYPE_DMA_BUF_BIT_EXT; break;
            default:
                return fail(KVRT_ERROR_INVALID_ARGUMENT, "handle_type %d is not a kvrt_memory_handle_type",
                            static_cast<int>(raw_enum(handle_type)));
        }
        const vk::Context& ctx = b.context();
        if (!(ctx.export_types() & type))
            return fail(KVRT_ERROR_UNSUPPORTED, "this device does not export memory as %s%s",
                        type == VK_EXTERNAL_MEMORY_HANDLE_TYPE_DMA_BUF_BIT_EXT ? "a dma-buf" : "an opaque fd",
                        ctx.imported() ? " (the context was imported from the application)"
                        : type == VK_EXTERNAL_MEMORY_HANDLE_TYPE_DMA_BUF_BIT_EXT
                            ? " (it has no VK_EXT_external_memory_dma_buf)"
                            : " (it has no VK_KHR_external_memory_fd)");
        vk::Buffer::Exported e;
        KVRT_TRY(b.export_memory(offset, type, &e));
        out->fd = e.fd;
        out->memory_type_index = e.memory_type;
        out->memory_size = e.memory_size;
        out->offset = e.offset;
        out->contiguous_bytes = e.contiguous;
        std::memcpy(out->device_uuid, ctx.info().device_uuid, sizeof out->device_uuid);
        std::memcpy(out->driver_uuid, ctx.info().driver_uuid, sizeof out->driver_uuid);
        return KVRT_SUCCESS;
    });
}

KVRT_API kvrt_result kvrt_buffer_get_vulkan(kvrt_buffer buffer, uint64_t offset, VkBuffer* out_buffer,
                                            VkDeviceSize* out_offset, VkDeviceSize* out_contiguous_bytes) {
    return guarded([&]() -> Result {
        BufferObj* obj = nullptr;
        KVRT_TRY(resolve(buffer, &obj, "buffer"));
        if (!out_buffer || !out_offset || !out_contiguous_bytes)
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "an out-parameter is NULL");
        const vk::Buffer& b = *obj->buffer;
        if (offset >= b.size())
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "offset %llu is outside the buffer of %llu bytes",
                        static_cast<unsigned long long>(offset), static_cast<unsigned long long>(b.size()));
        size_t piece;
        uint64_t in;
        b.locate(offset, &piece, &in);
        const uint64_t piece_end = std::min<uint64_t>(b.size() - (offset - in), b.piece(piece).size);
        *out_buffer = b.piece(piece).buffer;
        *out_offset = in;
        *out_contiguous_bytes = piece_end - in;
        return KVRT_SUCCESS;
    });
}

}  // extern "C"
