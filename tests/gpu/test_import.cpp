// kvrt_context_import_vulkan: kvrt on an application's own VkInstance, VkDevice and
// queue, loaded through the application's vkGetInstanceProcAddr.
#include "app_vulkan.hpp"

#include <atomic>
#include <cstring>

using namespace kvrt_test;

namespace {

struct QueueLock {
    std::atomic<int> locks{0}, unlocks{0};
    static void lock(void* u) { static_cast<QueueLock*>(u)->locks++; }
    static void unlock(void* u) { static_cast<QueueLock*>(u)->unlocks++; }
};

}  // namespace

TEST_CASE("kvrt runs on an application's imported Vulkan device", "[import]") {
    AppVulkan app;
    QueueLock ql;

    kvrt_vulkan_import_desc vk = app.import_desc();
    vk.lock_queue = &QueueLock::lock;
    vk.unlock_queue = &QueueLock::unlock;
    vk.queue_user_data = &ql;

    kvrt_context ctx = nullptr;
    KVRT_REQUIRE_OK(kvrt_context_import_vulkan(nullptr, &vk, &ctx));
    kvrt_device_info info = KVRT_DEVICE_INFO_INIT;
    KVRT_REQUIRE_OK(kvrt_context_get_device_info(ctx, &info));
    // Only what the app enabled is reported (and used).
    CHECK((info.features & KVRT_DEVICE_FEATURE_SHADER_FLOAT16) == 0);
    CHECK((info.features & KVRT_DEVICE_FEATURE_STORAGE_8BIT) == 0);
    CHECK(((info.features & KVRT_DEVICE_FEATURE_STORAGE_16BIT) != 0) == (app.s16.storageBuffer16BitAccess != 0));
    {
        Buffer buf(ctx, 1 << 20);
        Stream s(ctx);
        run_stream(s, [&] { KVRT_REQUIRE_OK(kvrt_cmd_fill(s, buf, 4096, 8192, 0xABCD)); });
        const auto w = buf.download_words(4092, 2050);
        CHECK(w[0] == 0);
        CHECK(w[1] == 0xABCD);
        CHECK(w[2048] == 0xABCD);
        CHECK(w[2049] == 0);
    }
    kvrt_context_destroy(ctx);
    CHECK(ql.locks.load() >= 1);
    CHECK(ql.locks.load() == ql.unlocks.load());
    INFO(app.first_error);
    CHECK(app.validation_errors.load() == 0);
}

TEST_CASE("context import checks its arguments", "[import]") {
    kvrt_context ctx = reinterpret_cast<kvrt_context>(0x1);
    CHECK(kvrt_context_import_vulkan(nullptr, nullptr, &ctx) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(ctx == nullptr);
    kvrt_vulkan_import_desc vk = KVRT_VULKAN_IMPORT_DESC_INIT;
    CHECK(kvrt_context_import_vulkan(nullptr, &vk, &ctx) == KVRT_ERROR_INVALID_ARGUMENT);  // no handles
    CHECK(kvrt_context_import_vulkan(nullptr, &vk, nullptr) == KVRT_ERROR_INVALID_ARGUMENT);
    vk.type = KVRT_STRUCT_TYPE_CONTEXT_DESC;
    CHECK(kvrt_context_import_vulkan(nullptr, &vk, &ctx) == KVRT_ERROR_INVALID_ARGUMENT);

    AppVulkan app;
    vk = kvrt_vulkan_import_desc KVRT_VULKAN_IMPORT_DESC_INIT;
    vk.instance = app.instance;
    vk.physical_device = app.pd;
    vk.device = app.device;
    vk.queue = app.queue;
    vk.queue_family_index = 999;
    vk.get_instance_proc_addr = app.gipa;
    CHECK(kvrt_context_import_vulkan(nullptr, &vk, &ctx) == KVRT_ERROR_UNSUPPORTED);
    vk.queue_family_index = app.family;
    vk.lock_queue = &QueueLock::lock;  // without unlock_queue
    CHECK(kvrt_context_import_vulkan(nullptr, &vk, &ctx) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(ctx == nullptr);
}
