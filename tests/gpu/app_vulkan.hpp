// An application's own Vulkan objects, as an engine that hands them to kvrt
// (kvrt_context_import) has them: an instance with the validation layer on
// (its errors counted), a device, a compute queue, loaded through libvulkan's
// vkGetInstanceProcAddr; and a command buffer of that queue family.
#pragma once

#include <atomic>
#include <string>

#include "gpu_test.hpp"
#include "kvrt/kvrt_vulkan.h"

namespace kvrt_test {

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
    template <class T>
    T device_fn(const char* name) const {
        return reinterpret_cast<T>(instance_fn<PFN_vkGetDeviceProcAddr>("vkGetDeviceProcAddr")(device, name));
    }

    // Creates the instance (validation layer and a messenger counting its
    // errors), picks the first device and a compute queue family, and creates
    // a device with only 16-bit storage enabled (when present).
    void create();
    ~AppVulkan();

    // The kvrt_vulkan_import_desc of these objects (KVRT_VULKAN_IMPORT_DESC_INIT
    // plus the handles, the API version and the enabled features).
    kvrt_vulkan_import_desc import_desc() const;
};

// A command pool, one primary command buffer of the app's queue family
// (begun: recording) and a fence, destroyed at scope exit.
class AppCommands {
public:
    explicit AppCommands(const AppVulkan& app);
    ~AppCommands();
    AppCommands(const AppCommands&) = delete;
    AppCommands& operator=(const AppCommands&) = delete;

    VkCommandBuffer buffer() const { return cmd_; }
    VkFence fence() const { return fence_; }
    // Ends the command buffer and submits it to the app's queue, signalling fence().
    VkResult end_and_submit();

private:
    const AppVulkan& app_;
    VkCommandPool pool_ = VK_NULL_HANDLE;
    VkCommandBuffer cmd_ = VK_NULL_HANDLE;
    VkFence fence_ = VK_NULL_HANDLE;
};

}  // namespace kvrt_test
