// Devices and contexts.
#include "kvrt/kvrt.h"
#include "kvrt/kvrt_vulkan.h"

#include <cstdio>

#include "api/handles.hpp"
#include "core/raw_enum.hpp"

using namespace kvrt;
using namespace kvrt::api;

namespace {

// Checks a kvrt_context_desc (may be NULL) and its chain, and reads it;
// `pipeline_cache` gets the chained kvrt_pipeline_cache_desc or NULL.
Result read_context_desc(const kvrt_context_desc* desc, vk::ContextOptions* out,
                         const kvrt_pipeline_cache_desc** pipeline_cache) {
    const void* found[1] = {};
    KVRT_TRY(check_optional_struct("desc", desc, KVRT_STRUCT_TYPE_CONTEXT_DESC, {KVRT_STRUCT_TYPE_PIPELINE_CACHE_DESC},
                                   found));
    // The log level as the caller stored it, checked before it is read as the enum.
    if (desc && (raw_enum(desc->log_level) < KVRT_LOG_LEVEL_DEFAULT || raw_enum(desc->log_level) > KVRT_LOG_LEVEL_NONE))
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "desc->log_level %d is not a kvrt_log_level",
                    static_cast<int>(raw_enum(desc->log_level)));
    const auto* cache = static_cast<const kvrt_pipeline_cache_desc*>(found[0]);
    if (cache && cache->size > 0 && !cache->data)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "kvrt_pipeline_cache_desc.data is NULL with size %llu",
                    static_cast<unsigned long long>(cache->size));
    KVRT_TRY(vk::ContextOptions::from_desc(desc, out));
    *pipeline_cache = cache;
    return KVRT_SUCCESS;
}

Result finish_context(std::unique_ptr<vk::Context> ctx, kvrt_context* out) {
    auto obj = std::make_unique<ContextObj>();
    obj->ctx = std::move(ctx);
    KVRT_TRY(publish(obj.get()));
    *out = obj.release()->handle;
    return KVRT_SUCCESS;
}

}  // namespace

extern "C" {

KVRT_API kvrt_result kvrt_enumerate_devices(kvrt_device_info* infos, uint32_t* count) {
    return guarded([&]() -> Result {
        if (!count) return fail(KVRT_ERROR_INVALID_ARGUMENT, "count is NULL");
        if (infos) {
            for (uint32_t i = 0; i < *count; ++i) {
                char name[32];
                std::snprintf(name, sizeof name, "infos[%u]", i);
                KVRT_TRY(check_struct(name, &infos[i], KVRT_STRUCT_TYPE_DEVICE_INFO));
            }
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
        const kvrt_pipeline_cache_desc* pipeline_cache = nullptr;
        KVRT_TRY(read_context_desc(desc, &options, &pipeline_cache));
        std::unique_ptr<vk::Context> ctx;
        KVRT_TRY(vk::Context::create(options, &ctx, pipeline_cache));
        return finish_context(std::move(ctx), out_context);
    });
}

KVRT_API kvrt_result kvrt_context_import_vulkan(const kvrt_context_desc* desc, const kvrt_vulkan_import_desc* vulkan,
                                                kvrt_context* out_context) {
    return guarded([&]() -> Result {
        if (!out_context) return fail(KVRT_ERROR_INVALID_ARGUMENT, "out_context is NULL");
        *out_context = nullptr;
        KVRT_TRY(check_struct("vulkan", vulkan, KVRT_STRUCT_TYPE_VULKAN_IMPORT_DESC));
        vk::ContextOptions options;
        const kvrt_pipeline_cache_desc* pipeline_cache = nullptr;
        KVRT_TRY(read_context_desc(desc, &options, &pipeline_cache));
        std::unique_ptr<vk::Context> ctx;
        KVRT_TRY(vk::Context::import(options, *vulkan, &ctx, pipeline_cache));
        return finish_context(std::move(ctx), out_context);
    });
}

KVRT_API void kvrt_context_destroy(kvrt_context context) {
    guarded_void([&]() {
        ContextObj* c = lookup(context);
        if (!c) return;
        unpublish(c);
        c->children.destroy_all();
        delete c;  // waits for the device, then releases everything
    });
}

KVRT_API kvrt_result kvrt_context_get_device_info(kvrt_context context, kvrt_device_info* info) {
    return guarded([&]() -> Result {
        ContextObj* c = nullptr;
        KVRT_TRY(resolve(context, &c, "context"));
        KVRT_TRY(check_struct("info", info, KVRT_STRUCT_TYPE_DEVICE_INFO));
        vk::fill_device_info(c->ctx->info(), c->ctx->enabled(), info);
        return KVRT_SUCCESS;
    });
}

KVRT_API kvrt_result kvrt_context_get_stats(kvrt_context context, kvrt_context_stats* stats) {
    return guarded([&]() -> Result {
        ContextObj* c = nullptr;
        KVRT_TRY(resolve(context, &c, "context"));
        KVRT_TRY(check_struct("stats", stats, KVRT_STRUCT_TYPE_CONTEXT_STATS));
        // Memory whose last use the device has finished counts as freed.
        c->ctx->retire();
        c->ctx->fill_stats(stats);
        return KVRT_SUCCESS;
    });
}

}  // extern "C"
