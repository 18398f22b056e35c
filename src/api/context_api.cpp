// Devices and contexts.
#include "kvrt/kvrt.h"
#include "kvrt/kvrt_vulkan.h"

#include "api/handles.hpp"

using namespace kvrt;
using namespace kvrt::api;

namespace {

Result finish_context(std::unique_ptr<vk::Context> ctx, kvrt_context* out) {
    auto handle = std::make_unique<kvrt_context_T>();
    handle->ctx = std::move(ctx);
    register_handle(handle.get(), Kind::Context);
    *out = handle.release();
    return KVRT_SUCCESS;
}

}  // namespace

extern "C" {

KVRT_API kvrt_result kvrt_enumerate_devices(kvrt_device_info* infos, uint32_t* count) {
    return guarded([&]() -> Result {
        if (!count) return fail(KVRT_ERROR_INVALID_ARGUMENT, "count is NULL");
        if (infos) {
            for (uint32_t i = 0; i < *count; ++i)
                KVRT_TRY(check_struct(&infos[i], infos[i].type, KVRT_STRUCT_TYPE_DEVICE_INFO, "infos[i]"));
        }
        std::vector<vk::PhysicalDeviceInfo> devices;
        KVRT_TRY(vk::enumerate_devices(&devices));
        const uint32_t n = static_cast<uint32_t>(devices.size());
        if (!infos) {
            *count = n;
            return KVRT_SUCCESS;
        }
        const uint32_t k = std::min(*count, n);
        for (uint32_t i = 0; i < k; ++i) vk::fill_device_info(devices[i], devices[i].supported, &infos[i]);
        *count = k;
        if (k < n) return fail(KVRT_ERROR_INVALID_ARGUMENT, "array too small: %u devices, room for %u", n, k);
        return KVRT_SUCCESS;
    });
}

KVRT_API kvrt_result kvrt_context_create(const kvrt_context_desc* desc, kvrt_context* out_context) {
    return guarded([&]() -> Result {
        if (!out_context) return fail(KVRT_ERROR_INVALID_ARGUMENT, "out_context is NULL");
        *out_context = nullptr;
        vk::ContextOptions options;
        KVRT_TRY(vk::ContextOptions::from_desc(desc, &options));
        std::unique_ptr<vk::Context> ctx;
        KVRT_TRY(vk::Context::create(options, &ctx));
        return finish_context(std::move(ctx), out_context);
    });
}

KVRT_API kvrt_result kvrt_context_import(const kvrt_context_desc* desc, const kvrt_vulkan_import_desc* vulkan,
                                         kvrt_context* out_context) {
    return guarded([&]() -> Result {
        if (!out_context) return fail(KVRT_ERROR_INVALID_ARGUMENT, "out_context is NULL");
        *out_context = nullptr;
        if (!vulkan) return fail(KVRT_ERROR_INVALID_ARGUMENT, "vulkan is NULL");
        vk::ContextOptions options;
        KVRT_TRY(vk::ContextOptions::from_desc(desc, &options));
        std::unique_ptr<vk::Context> ctx;
        KVRT_TRY(vk::Context::import(options, *vulkan, &ctx));
        return finish_context(std::move(ctx), out_context);
    });
}

KVRT_API void kvrt_context_destroy(kvrt_context context) {
    guarded_void([&]() {
        if (!context || !is_live(context, Kind::Context)) return;
        unregister_handle(context);
        context->children.destroy_all();
        delete context;  // waits for the device, then releases everything
    });
}

KVRT_API kvrt_result kvrt_context_get_device_info(kvrt_context context, kvrt_device_info* info) {
    return guarded([&]() -> Result {
        KVRT_TRY(check_handle(context, Kind::Context, "context"));
        if (!info) return fail(KVRT_ERROR_INVALID_ARGUMENT, "info is NULL");
        KVRT_TRY(check_struct(info, info->type, KVRT_STRUCT_TYPE_DEVICE_INFO, "info"));
        vk::fill_device_info(context->ctx->info(), context->ctx->enabled(), info);
        return KVRT_SUCCESS;
    });
}

KVRT_API kvrt_result kvrt_context_get_stats(kvrt_context context, kvrt_context_stats* stats) {
    return guarded([&]() -> Result {
        KVRT_TRY(check_handle(context, Kind::Context, "context"));
        if (!stats) return fail(KVRT_ERROR_INVALID_ARGUMENT, "stats is NULL");
        KVRT_TRY(check_struct(stats, stats->type, KVRT_STRUCT_TYPE_CONTEXT_STATS, "stats"));
        context->ctx->fill_stats(stats);
        return KVRT_SUCCESS;
    });
}

}  // extern "C"
