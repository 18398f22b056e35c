// Opening the Vulkan loader and filling the dispatch tables.
#pragma once

#include "core/result.hpp"
#include "vk/dispatch.hpp"

namespace kvrt::vk {

// The system's Vulkan loader, opened with dlopen. Move-only; closes on
// destruction.
class Loader {
public:
    Loader() = default;
    Loader(const Loader&) = delete;
    Loader& operator=(const Loader&) = delete;
    Loader(Loader&& other) noexcept;
    Loader& operator=(Loader&& other) noexcept;
    ~Loader();

    // Opens libvulkan (libvulkan.so.1, or libvulkan.so on Android) and loads the
    // global entry points. KVRT_ERROR_UNSUPPORTED if there is no loader.
    Result open();

    // Uses an application's vkGetInstanceProcAddr instead of opening a library.
    Result adopt(PFN_vkGetInstanceProcAddr get_instance_proc_addr);

    const GlobalFns& global() const { return global_; }

private:
    void* library_ = nullptr;
    GlobalFns global_;
};

// Loads the instance-level entry points of `instance`. Missing required ones
// give KVRT_ERROR_UNSUPPORTED. Debug-utils functions are loaded when
// `debug_utils` is true and left null otherwise.
Result load_instance_functions(PFN_vkGetInstanceProcAddr gipa, VkInstance instance,
                               bool debug_utils, InstanceFns* out);

// Loads the device-level entry points of `device`; with `timeline`, also the
// timeline-semaphore ones (core names first, then the KHR aliases); with
// `external_fd`, VK_KHR_external_memory_fd's; KVRT_ERROR_UNSUPPORTED if
// they are missing.
Result load_device_functions(const InstanceFns& ifn, VkDevice device, bool timeline, bool external_fd,
                             DeviceFns* out);

// Maps a failing VkResult to a kvrt result and records a detail message naming
// the call that failed.
Result vk_fail(VkResult r, const char* what);

// Name of a VkResult, e.g. "VK_ERROR_OUT_OF_DEVICE_MEMORY".
const char* vk_result_name(VkResult r);

}  // namespace kvrt::vk

// Calls a Vulkan function returning VkResult; on failure records the detail
// message and returns the mapped kvrt result from the enclosing function.
#define KVRT_VK_CHECK(call)                                          \
    do {                                                             \
        const VkResult kvrt_vk_r_ = (call);                          \
        if (kvrt_vk_r_ != VK_SUCCESS) return ::kvrt::vk::vk_fail(kvrt_vk_r_, #call); \
    } while (0)
