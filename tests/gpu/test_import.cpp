// kvrt_context_import: kvrt on an application's own VkInstance, VkDevice and
// queue, loaded through the application's vkGetInstanceProcAddr.
#include "gpu_test.hpp"

#include <dlfcn.h>

#include <atomic>
#include <cstring>

#include "kvrt/kvrt_vulkan.h"

using namespace kvrt_test;

namespace {

struct AppVulkan {
    void* lib = nullptr;
    PFN_vkGetInstanceProcAddr gipa = nullptr;
    VkInstance instance = VK_NULL_HANDLE;
    VkPhysicalDevice pd = VK_NULL_HANDLE;
    VkDevice device = VK_NULL_HANDLE;
    VkQueue queue = VK_NULL_HANDLE;
    uint32_t family = 0;
    VkDebugUtilsMessengerEXT messenger = VK_NULL_HANDLE;
    std::atomic<int> validation_errors{0};
    std::string first_error;
    VkPhysicalDevice16BitStorageFeatures s16{};
    VkPhysicalDeviceFeatures2 features{};

    static VkBool32 VKAPI_PTR on_message(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                         VkDebugUtilsMessageTypeFlagsEXT,
                                         const VkDebugUtilsMessengerCallbackDataEXT* data, void* user) {
        auto* self = static_cast<AppVulkan*>(user);
        if (severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) {
            if (self->validation_errors++ == 0) self->first_error = data->pMessage;
        }
        return VK_FALSE;
    }

    template <class T>
    T instance_fn(const char* name) const {
        return reinterpret_cast<T>(gipa(instance, name));
    }

    void create() {
        lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
        REQUIRE(lib != nullptr);
        gipa = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(lib, "vkGetInstanceProcAddr"));
        REQUIRE(gipa != nullptr);
        auto create_instance = reinterpret_cast<PFN_vkCreateInstance>(gipa(VK_NULL_HANDLE, "vkCreateInstance"));
        VkApplicationInfo app{};
        app.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO;
        app.apiVersion = VK_API_VERSION_1_1;
        const char* layer = "VK_LAYER_KHRONOS_validation";
        const char* ext = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
        VkInstanceCreateInfo ci{};
        ci.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO;
        ci.pApplicationInfo = &app;
        ci.enabledLayerCount = 1;
        ci.ppEnabledLayerNames = &layer;
        ci.enabledExtensionCount = 1;
        ci.ppEnabledExtensionNames = &ext;
        REQUIRE(create_instance(&ci, nullptr, &instance) == VK_SUCCESS);

        VkDebugUtilsMessengerCreateInfoEXT mci{};
        mci.sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT;
        mci.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
        mci.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT;
        mci.pfnUserCallback = &AppVulkan::on_message;
        mci.pUserData = this;
        REQUIRE(instance_fn<PFN_vkCreateDebugUtilsMessengerEXT>("vkCreateDebugUtilsMessengerEXT")(
                    instance, &mci, nullptr, &messenger) == VK_SUCCESS);

        uint32_t n = 1;
        const VkResult er = instance_fn<PFN_vkEnumeratePhysicalDevices>("vkEnumeratePhysicalDevices")(instance, &n, &pd);
        REQUIRE((er == VK_SUCCESS || er == VK_INCOMPLETE));
        REQUIRE(n >= 1);
        uint32_t nf = 0;
        auto qprops = instance_fn<PFN_vkGetPhysicalDeviceQueueFamilyProperties>("vkGetPhysicalDeviceQueueFamilyProperties");
        qprops(pd, &nf, nullptr);
        std::vector<VkQueueFamilyProperties> fams(nf);
        qprops(pd, &nf, fams.data());
        family = UINT32_MAX;
        for (uint32_t i = 0; i < nf && family == UINT32_MAX; ++i)
            if (fams[i].queueFlags & VK_QUEUE_COMPUTE_BIT) family = i;
        REQUIRE(family != UINT32_MAX);

        s16.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES;
        features.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
        features.pNext = &s16;
        instance_fn<PFN_vkGetPhysicalDeviceFeatures2>("vkGetPhysicalDeviceFeatures2")(pd, &features);
        const float prio = 1.0f;
        VkDeviceQueueCreateInfo qci{};
        qci.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO;
        qci.queueFamilyIndex = family;
        qci.queueCount = 1;
        qci.pQueuePriorities = &prio;
        // Enable only 16-bit storage (if present); kvrt must not use more.
        VkPhysicalDeviceFeatures2 enable{};
        enable.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
        VkPhysicalDevice16BitStorageFeatures s16_enable{};
        s16_enable.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES;
        s16_enable.storageBuffer16BitAccess = s16.storageBuffer16BitAccess;
        enable.pNext = &s16_enable;
        VkDeviceCreateInfo dci{};
        dci.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO;
        dci.pNext = &enable;
        dci.queueCreateInfoCount = 1;
        dci.pQueueCreateInfos = &qci;
        REQUIRE(instance_fn<PFN_vkCreateDevice>("vkCreateDevice")(pd, &dci, nullptr, &device) == VK_SUCCESS);
        auto gdpa = instance_fn<PFN_vkGetDeviceProcAddr>("vkGetDeviceProcAddr");
        reinterpret_cast<PFN_vkGetDeviceQueue>(gdpa(device, "vkGetDeviceQueue"))(device, family, 0, &queue);
        // What the app enabled, as it will tell kvrt.
        s16 = s16_enable;
        s16.pNext = nullptr;
        features = enable;
        features.pNext = &s16;
    }

    ~AppVulkan() {
        if (device) {
            auto gdpa = instance_fn<PFN_vkGetDeviceProcAddr>("vkGetDeviceProcAddr");
            reinterpret_cast<PFN_vkDestroyDevice>(gdpa(device, "vkDestroyDevice"))(device, nullptr);
        }
        if (messenger)
            instance_fn<PFN_vkDestroyDebugUtilsMessengerEXT>("vkDestroyDebugUtilsMessengerEXT")(instance, messenger, nullptr);
        if (instance) instance_fn<PFN_vkDestroyInstance>("vkDestroyInstance")(instance, nullptr);
        if (lib) dlclose(lib);
    }
};

struct QueueLock {
    std::atomic<int> locks{0}, unlocks{0};
    static void lock(void* u) { static_cast<QueueLock*>(u)->locks++; }
    static void unlock(void* u) { static_cast<QueueLock*>(u)->unlocks++; }
};

}  // namespace

TEST_CASE("kvrt runs on an application's imported Vulkan device", "[import]") {
    AppVulkan app;
    app.create();
    QueueLock ql;

    kvrt_vulkan_import_desc vk = KVRT_VULKAN_IMPORT_DESC_INIT;
    vk.instance = app.instance;
    vk.physical_device = app.pd;
    vk.device = app.device;
    vk.queue = app.queue;
    vk.queue_family_index = app.family;
    vk.get_instance_proc_addr = app.gipa;
    vk.instance_api_version = VK_API_VERSION_1_1;
    vk.enabled_features = &app.features;
    vk.lock_queue = &QueueLock::lock;
    vk.unlock_queue = &QueueLock::unlock;
    vk.queue_user_data = &ql;

    kvrt_context ctx = nullptr;
    KVRT_REQUIRE_OK(kvrt_context_import(nullptr, &vk, &ctx));
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
    CHECK(kvrt_context_import(nullptr, nullptr, &ctx) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(ctx == nullptr);
    kvrt_vulkan_import_desc vk = KVRT_VULKAN_IMPORT_DESC_INIT;
    CHECK(kvrt_context_import(nullptr, &vk, &ctx) == KVRT_ERROR_INVALID_ARGUMENT);  // no handles
    CHECK(kvrt_context_import(nullptr, &vk, nullptr) == KVRT_ERROR_INVALID_ARGUMENT);
    vk.type = KVRT_STRUCT_TYPE_CONTEXT_DESC;
    CHECK(kvrt_context_import(nullptr, &vk, &ctx) == KVRT_ERROR_INVALID_ARGUMENT);

    AppVulkan app;
    app.create();
    vk = kvrt_vulkan_import_desc KVRT_VULKAN_IMPORT_DESC_INIT;
    vk.instance = app.instance;
    vk.physical_device = app.pd;
    vk.device = app.device;
    vk.queue = app.queue;
    vk.queue_family_index = 999;
    vk.get_instance_proc_addr = app.gipa;
    CHECK(kvrt_context_import(nullptr, &vk, &ctx) == KVRT_ERROR_UNSUPPORTED);
    vk.queue_family_index = app.family;
    vk.lock_queue = &QueueLock::lock;  // without unlock_queue
    CHECK(kvrt_context_import(nullptr, &vk, &ctx) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(ctx == nullptr);
}
