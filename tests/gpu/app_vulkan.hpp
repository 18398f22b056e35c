// An application's own Vulkan objects, as an engine that hands them to kvrt
// (kvrt_context_import_vulkan) has them: an instance with the validation layer on
// (its errors counted, synchronization checks optional), a device, a compute
// queue, loaded through libvulkan's vkGetInstanceProcAddr; and the app's own
// buffers, semaphores, fences and command buffers.
#pragma once

#include <atomic>
#include <deque>
#include <string>
#include <vector>

#include "gpu_test.hpp"
#include "kvrt/kvrt_vulkan.h"

namespace kvrt_test {

#define KVRT_APP_DEVICE_FUNCTIONS(X)                                                                       \
    X(vkDestroyDevice) X(vkGetDeviceQueue) X(vkCreateBuffer) X(vkDestroyBuffer)                            \
    X(vkGetBufferMemoryRequirements) X(vkAllocateMemory) X(vkFreeMemory) X(vkBindBufferMemory)             \
    X(vkMapMemory) X(vkCreateCommandPool) X(vkDestroyCommandPool) X(vkAllocateCommandBuffers)              \
    X(vkFreeCommandBuffers) X(vkBeginCommandBuffer) X(vkEndCommandBuffer) X(vkCmdFillBuffer)               \
    X(vkCmdCopyBuffer) X(vkCreateSemaphore) X(vkDestroySemaphore) X(vkCreateFence) X(vkDestroyFence)       \
    X(vkWaitForFences) X(vkQueueSubmit) X(vkDeviceWaitIdle)

#define KVRT_APP_TIMELINE_FUNCTIONS(X) X(vkWaitSemaphores) X(vkSignalSemaphore) X(vkGetSemaphoreCounterValue)

// How the application sets up its instance and device. The defaults are an
// engine on Vulkan 1.1 that enables only 16-bit storage.
struct AppVulkanOptions {
    uint32_t api_version = VK_API_VERSION_1_1;
    // Synchronization validation on top of the core checks.
    bool sync_validation = false;
    // Enable 16-bit storage buffers (when the device has them).
    bool storage_16bit = true;
    // Enable timeline semaphores (when the device has them; needs api_version 1.2).
    bool timeline = false;
};

// A small host-visible buffer of the application, mapped.
struct AppBuffer {
    VkBuffer buffer = VK_NULL_HANDLE;
    VkDeviceMemory memory = VK_NULL_HANDLE;
    void* mapped = nullptr;
    VkDeviceSize size = 0;

    std::vector<float> floats(VkDeviceSize offset, size_t count) const;
};

struct AppVulkan {
    AppVulkanOptions options;
    void* lib = nullptr;
    PFN_vkGetInstanceProcAddr gipa = nullptr;
    VkInstance instance = VK_NULL_HANDLE;
    VkPhysicalDevice pd = VK_NULL_HANDLE;
    VkDevice device = VK_NULL_HANDLE;
    VkQueue queue = VK_NULL_HANDLE;
    uint32_t family = 0;
    VkDebugUtilsMessengerEXT messenger = VK_NULL_HANDLE;
    VkPhysicalDeviceMemoryProperties memory{};
    std::atomic<int> validation_errors{0};
    std::string first_error;
    // What the device was created with, as handed to kvrt: `features` chains
    // the enabled 16-bit storage and timeline structs (each only if asked for).
    VkPhysicalDevice16BitStorageFeatures s16{};
    VkPhysicalDeviceTimelineSemaphoreFeatures timeline_features{};
    VkPhysicalDeviceFeatures2 features{};
    bool timeline = false;  // timeline semaphores enabled (and their functions loaded)
    // The command pool of begin() (created by its first call).
    VkCommandPool pool = VK_NULL_HANDLE;
#define KVRT_APP_DECLARE(name) PFN_##name name = nullptr;
    KVRT_APP_DEVICE_FUNCTIONS(KVRT_APP_DECLARE)
    KVRT_APP_TIMELINE_FUNCTIONS(KVRT_APP_DECLARE)
#undef KVRT_APP_DECLARE

    // Creates the instance (validation layer and a messenger counting its
    // errors), picks the first device and a compute queue family, and creates
    // a device with only the features `options` asks for that it has.
    explicit AppVulkan(const AppVulkanOptions& options = {});
    ~AppVulkan();
    AppVulkan(const AppVulkan&) = delete;
    AppVulkan& operator=(const AppVulkan&) = delete;

    template <class T>
    T instance_fn(const char* name) const {
        return reinterpret_cast<T>(gipa(instance, name));
    }

    // The kvrt_vulkan_import_desc of these objects (KVRT_VULKAN_IMPORT_DESC_INIT
    // plus the handles, the API version and the enabled features).
    // `with_timeline` false hides timeline semaphores from kvrt: the features
    // it points at say so until the next call.
    kvrt_vulkan_import_desc import_desc(bool with_timeline = true);

    // A zeroed host-visible storage/transfer buffer, destroyed with the app.
    const AppBuffer& buffer(VkDeviceSize size);
    // A binary or timeline semaphore, destroyed with the app.
    VkSemaphore semaphore(bool timeline_type);
    // An unsignalled fence, destroyed with the app.
    VkFence fence();
    // A primary command buffer of the app's pool, begun (one-time submit).
    VkCommandBuffer begin();
    // Ends `cb` and submits it, waiting on `wait` (at the transfer stage) and
    // signalling `signal`; values for timeline semaphores, 0 for binary ones.
    void submit(VkCommandBuffer cb, VkSemaphore wait, uint64_t wait_value, VkSemaphore signal, uint64_t signal_value,
                VkFence signal_fence = VK_NULL_HANDLE);
    // Records a fill of `bytes` of `b` at `offset` with the float `value`.
    void fill_f32(VkCommandBuffer cb, const AppBuffer& b, VkDeviceSize offset, VkDeviceSize bytes, float value) const;

private:
    void create();
    void destroy();

    std::deque<AppBuffer> buffers_;  // stable addresses: buffer() returns references
    std::vector<VkSemaphore> semaphores_;
    std::vector<VkFence> fences_;
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
