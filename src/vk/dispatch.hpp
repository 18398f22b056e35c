// The private Vulkan dispatch table. kvrt never links libvulkan and defines no
// global Vulkan symbols: every entry point is loaded at run time into these
// tables, per instance and per device (so two contexts on different drivers, or
// an app's own loader, never collide).
#pragma once

#include <vulkan/vulkan.h>

namespace kvrt::vk {

// Entry points available before an instance exists.
#define KVRT_VK_GLOBAL_FUNCTIONS(X)          \
    X(vkCreateInstance)                      \
    X(vkEnumerateInstanceExtensionProperties) \
    X(vkEnumerateInstanceLayerProperties)

// Optional global entry point (Vulkan 1.1 loaders have it; 1.0 loaders do not).
#define KVRT_VK_GLOBAL_OPTIONAL_FUNCTIONS(X) X(vkEnumerateInstanceVersion)

#define KVRT_VK_INSTANCE_FUNCTIONS(X)              \
    X(vkDestroyInstance)                           \
    X(vkEnumeratePhysicalDevices)                  \
    X(vkGetPhysicalDeviceProperties)               \
    X(vkGetPhysicalDeviceProperties2)              \
    X(vkGetPhysicalDeviceFeatures2)                \
    X(vkGetPhysicalDeviceQueueFamilyProperties)    \
    X(vkGetPhysicalDeviceMemoryProperties)         \
    X(vkGetPhysicalDeviceMemoryProperties2)        \
    X(vkEnumerateDeviceExtensionProperties)        \
    X(vkGetPhysicalDeviceExternalBufferProperties) \
    X(vkCreateDevice)                              \
    X(vkGetDeviceProcAddr)

// Present only when VK_EXT_debug_utils is enabled on the instance.
#define KVRT_VK_DEBUG_FUNCTIONS(X)            \
    X(vkCreateDebugUtilsMessengerEXT)         \
    X(vkDestroyDebugUtilsMessengerEXT)        \
    X(vkSetDebugUtilsObjectNameEXT)

#define KVRT_VK_DEVICE_FUNCTIONS(X)       \
    X(vkDestroyDevice)                    \
    X(vkGetDeviceQueue)                   \
    X(vkDeviceWaitIdle)                   \
    X(vkQueueSubmit)                      \
    X(vkCreateBuffer)                     \
    X(vkDestroyBuffer)                    \
    X(vkGetBufferMemoryRequirements)      \
    X(vkAllocateMemory)                   \
    X(vkFreeMemory)                       \
    X(vkBindBufferMemory)                 \
    X(vkMapMemory)                        \
    X(vkUnmapMemory)                      \
    X(vkFlushMappedMemoryRanges)          \
    X(vkInvalidateMappedMemoryRanges)     \
    X(vkCreateCommandPool)                \
    X(vkDestroyCommandPool)               \
    X(vkResetCommandPool)                 \
    X(vkAllocateCommandBuffers)           \
    X(vkFreeCommandBuffers)               \
    X(vkBeginCommandBuffer)               \
    X(vkEndCommandBuffer)                 \
    X(vkCreateFence)                      \
    X(vkDestroyFence)                     \
    X(vkResetFences)                      \
    X(vkWaitForFences)                    \
    X(vkGetFenceStatus)                   \
    X(vkCreateShaderModule)               \
    X(vkDestroyShaderModule)              \
    X(vkCreateDescriptorSetLayout)        \
    X(vkDestroyDescriptorSetLayout)       \
    X(vkCreatePipelineLayout)             \
    X(vkDestroyPipelineLayout)            \
    X(vkCreateComputePipelines)           \
    X(vkDestroyPipeline)                  \
    X(vkCreatePipelineCache)              \
    X(vkDestroyPipelineCache)             \
    X(vkGetPipelineCacheData)             \
    X(vkCreateDescriptorPool)             \
    X(vkDestroyDescriptorPool)            \
    X(vkResetDescriptorPool)              \
    X(vkAllocateDescriptorSets)           \
    X(vkUpdateDescriptorSets)             \
    X(vkCreateQueryPool)                  \
    X(vkDestroyQueryPool)                 \
    X(vkGetQueryPoolResults)              \
    X(vkCmdBindPipeline)                  \
    X(vkCmdBindDescriptorSets)            \
    X(vkCmdPushConstants)                 \
    X(vkCmdDispatch)                      \
    X(vkCmdPipelineBarrier)               \
    X(vkCmdCopyBuffer)                    \
    X(vkCmdFillBuffer)                    \
    X(vkCmdResetQueryPool)                \
    X(vkCmdWriteTimestamp)

// Timeline semaphores (Vulkan 1.2 core, or the KHR-suffixed names of
// VK_KHR_timeline_semaphore): loaded only when the feature is enabled, and
// null otherwise.
#define KVRT_VK_TIMELINE_FUNCTIONS(X) \
    X(vkWaitSemaphores)               \
    X(vkGetSemaphoreCounterValue)

// Memory exported as a file descriptor (VK_KHR_external_memory_fd): loaded
// only when the extension is enabled, and null otherwise.
#define KVRT_VK_EXTERNAL_FD_FUNCTIONS(X) X(vkGetMemoryFdKHR)

#define KVRT_VK_DECLARE_MEMBER(name) PFN_##name name = nullptr;

struct GlobalFns {
    PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr = nullptr;
    KVRT_VK_GLOBAL_FUNCTIONS(KVRT_VK_DECLARE_MEMBER)
    KVRT_VK_GLOBAL_OPTIONAL_FUNCTIONS(KVRT_VK_DECLARE_MEMBER)
};

struct InstanceFns {
    KVRT_VK_INSTANCE_FUNCTIONS(KVRT_VK_DECLARE_MEMBER)
    KVRT_VK_DEBUG_FUNCTIONS(KVRT_VK_DECLARE_MEMBER)
};

struct DeviceFns {
    KVRT_VK_DEVICE_FUNCTIONS(KVRT_VK_DECLARE_MEMBER)
    KVRT_VK_TIMELINE_FUNCTIONS(KVRT_VK_DECLARE_MEMBER)
    KVRT_VK_EXTERNAL_FD_FUNCTIONS(KVRT_VK_DECLARE_MEMBER)
};

}  // namespace kvrt::vk
