/*
 * kvrt_vulkan.h: interop between kvrt and an application's own Vulkan objects.
 *
 * The only public kvrt header that includes <vulkan/vulkan.h>. kvrt itself never
 * links libvulkan: an imported context calls Vulkan only through the
 * vkGetInstanceProcAddr the application hands over.
 */
#ifndef KVRT_VULKAN_H
#define KVRT_VULKAN_H

#include <vulkan/vulkan.h>

#include "kvrt/kvrt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The application's Vulkan objects, for kvrt_context_import. The instance must
 * be Vulkan 1.1 or newer, and the queue must support compute. */
typedef struct kvrt_vulkan_import_desc {
    kvrt_struct_type type;
    const void* next;
    VkInstance instance;
    VkPhysicalDevice physical_device;
    VkDevice device;
    VkQueue queue;
    uint32_t queue_family_index;
    PFN_vkGetInstanceProcAddr get_instance_proc_addr;
    /* The apiVersion the instance was created with; 0 = VK_API_VERSION_1_1. */
    uint32_t instance_api_version;
    /* The feature chain the device was created with (VkPhysicalDeviceFeatures2
     * with any of VkPhysicalDevice16BitStorageFeatures,
     * VkPhysicalDeviceShaderFloat16Int8Features, VkPhysicalDevice8BitStorageFeatures,
     * VkPhysicalDeviceVulkan11Features, VkPhysicalDeviceVulkan12Features chained).
     * kvrt uses only what it says is enabled. NULL: none of the optional
     * features, so the portable kernels are used. */
    const VkPhysicalDeviceFeatures2* enabled_features;
    /* Optional: called around every vkQueueSubmit kvrt makes, so the
     * application can serialize its own use of the same VkQueue. Both or
     * neither. */
    void (*lock_queue)(void* user_data);
    void (*unlock_queue)(void* user_data);
    void* queue_user_data;
} kvrt_vulkan_import_desc;

#define KVRT_VULKAN_IMPORT_DESC_INIT                                                  \
    {                                                                                 \
        KVRT_STRUCT_TYPE_VULKAN_IMPORT_DESC, NULL, VK_NULL_HANDLE, VK_NULL_HANDLE,    \
            VK_NULL_HANDLE, VK_NULL_HANDLE, 0, NULL, 0, NULL, NULL, NULL, NULL         \
    }

/* Creates a context on the application's device and queue. `desc` (may be
 * NULL) supplies the log callback and options; KVRT_CONTEXT_VALIDATION and the
 * device selector are ignored (the application owns the instance). The
 * application keeps ownership of its objects and must keep them alive until
 * kvrt_context_destroy returns. Fails with KVRT_ERROR_INVALID_ARGUMENT for
 * missing handles and KVRT_ERROR_UNSUPPORTED for a device below Vulkan 1.1 or a
 * queue family without compute. Thread-safety: Safe. */
KVRT_API kvrt_result kvrt_context_import(const kvrt_context_desc* desc,
                                         const kvrt_vulkan_import_desc* vulkan,
                                         kvrt_context* out_context);

/* The VkBuffer that holds byte `offset` of a kvrt buffer. A kvrt buffer is made
 * of pieces no larger than the device's largest binding; this returns the piece
 * holding `offset`, the offset of that byte inside it, and how many bytes of the
 * kvrt buffer follow contiguously in the same VkBuffer (from *out_offset). The
 * VkBuffer stays owned by kvrt and valid until the kvrt buffer is destroyed.
 * Synchronization with the application's own commands is the application's.
 * For a static-layout window (kvrt_static_window), pass window.offset: the
 * window lies whole in the returned VkBuffer (*out_contiguous_bytes >=
 * window.bytes), so a graph binds (*out_buffer, *out_offset) directly; the
 * VkBuffer lives as long as the cache.
 * Thread-safety: Unsafe (on the buffer). */
KVRT_API kvrt_result kvrt_buffer_get_vulkan(kvrt_buffer buffer, uint64_t offset,
                                            VkBuffer* out_buffer, VkDeviceSize* out_offset,
                                            VkDeviceSize* out_contiguous_bytes);

/* Wraps a range of an application's VkBuffer as a kvrt buffer, so kvrt kernels
 * can read it (for example K/V projections an engine computed in its own
 * buffers, passed to kvrt_cache_store). The VkBuffer must belong to the
 * context's device and have VK_BUFFER_USAGE_STORAGE_BUFFER_BIT (and the
 * TRANSFER bits for kvrt_buffer_upload/download). `offset` must be a multiple
 * of minStorageBufferOffsetAlignment, `size` a multiple of 4 no larger than the
 * largest storage binding. kvrt never frees the VkBuffer; the application keeps
 * it alive until work that uses it completed and the kvrt buffer is destroyed.
 * Fails with KVRT_ERROR_INVALID_ARGUMENT otherwise. Thread-safety: Unsafe (on
 * the context). */
KVRT_API kvrt_result kvrt_buffer_import_vulkan(kvrt_context context, VkBuffer buffer, VkDeviceSize offset,
                                               VkDeviceSize size, kvrt_buffer* out_buffer);

#ifdef __cplusplus
}
#endif

#endif /* KVRT_VULKAN_H */
