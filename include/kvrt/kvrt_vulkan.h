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

/* The application's Vulkan objects, for kvrt_context_import_vulkan. The instance must
 * be Vulkan 1.1 or newer, and the queue must support compute. */
typedef struct kvrt_vulkan_import_desc {
    kvrt_struct_type type;   /* KVRT_STRUCT_TYPE_VULKAN_IMPORT_DESC */
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
     * VkPhysicalDeviceTimelineSemaphoreFeatures,
     * VkPhysicalDeviceSubgroupSizeControlFeatures,
     * VkPhysicalDeviceVulkan11Features, VkPhysicalDeviceVulkan12Features,
     * VkPhysicalDeviceVulkan13Features chained). kvrt uses only what it says
     * is enabled. NULL: none of the optional features (no 16-bit storage or
     * arithmetic, no subgroup size control); the kernel variant still
     * follows the device's subgroup properties. */
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
 * NULL arguments, mistyped or badly chained structs and missing handles;
 * KVRT_ERROR_UNSUPPORTED for a device below Vulkan 1.1, a queue family
 * without compute, or a device that cannot run the kernels forced by
 * KVRT_CONTEXT_SHUFFLE_KERNELS or by KVRT_KERNELS (read only when `desc` sets
 * no kernel flag; see "Environment variables" in kvrt.h);
 * KVRT_ERROR_OUT_OF_HOST_MEMORY or _OUT_OF_DEVICE_MEMORY.
 * Thread-safety: Safe. */
KVRT_API kvrt_result kvrt_context_import_vulkan(const kvrt_context_desc* desc,
                                                const kvrt_vulkan_import_desc* vulkan,
                                                kvrt_context* out_context);

/* The VkBuffer that holds byte `offset` of a kvrt buffer. A kvrt buffer is made
 * of pieces no larger than the device's largest binding; this returns the piece
 * holding `offset`, the offset of that byte inside it, and how many bytes of the
 * kvrt buffer follow contiguously in the same VkBuffer (from *out_offset). The
 * VkBuffer stays owned by kvrt and valid until the kvrt buffer is destroyed.
 * Synchronization with the application's own commands is the application's
 * (kvrt_stream_submit_vulkan, kvrt_stream_begin_vulkan). Fails with
 * KVRT_ERROR_INVALID_HANDLE for a bad buffer and KVRT_ERROR_INVALID_ARGUMENT
 * for NULL out-pointers or an offset outside the buffer.
 * For a static-layout window (kvrt_static_window), pass window.offset: the
 * window lies whole in the returned VkBuffer (*out_contiguous_bytes >=
 * window.bytes), so a graph binds (*out_buffer, *out_offset) directly; the
 * VkBuffer lives as long as the cache.
 * Thread-safety: Safe, except against kvrt_buffer_destroy of the buffer. */
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
 * Fails with KVRT_ERROR_INVALID_ARGUMENT otherwise. Thread-safety: Safe. */
KVRT_API kvrt_result kvrt_buffer_import_vulkan(kvrt_context context, VkBuffer buffer, VkDeviceSize offset,
                                               VkDeviceSize size, kvrt_buffer* out_buffer);

/* ========================================================================== */
/* Ordering with the application's own GPU work                               */
/* ========================================================================== */

/* Semaphores a stream's submission waits on and signals
 * (kvrt_stream_submit_vulkan). Binary semaphores work on every device;
 * timeline semaphores need Vulkan 1.2's timelineSemaphore feature or
 * VK_KHR_timeline_semaphore, enabled on the device (kvrt enables it on the
 * devices it creates; an imported device reports it in enabled_features). */
typedef struct kvrt_vulkan_submit_desc {
    kvrt_struct_type type;                  /* KVRT_STRUCT_TYPE_VULKAN_SUBMIT_DESC */
    const void* next;
    uint32_t wait_count;
    const VkSemaphore* wait_semaphores;
    /* Values to wait for, one per wait semaphore (ignored for binary ones);
     * NULL when all are binary. */
    const uint64_t* wait_values;
    /* Stages of kvrt's work that wait, one per wait semaphore; NULL = compute
     * shader and transfer stages. */
    const VkPipelineStageFlags* wait_stages;
    uint32_t signal_count;
    const VkSemaphore* signal_semaphores;
    /* Values to signal, one per signal semaphore (ignored for binary ones);
     * NULL when all are binary. */
    const uint64_t* signal_values;
} kvrt_vulkan_submit_desc;

#define KVRT_VULKAN_SUBMIT_DESC_INIT \
    { KVRT_STRUCT_TYPE_VULKAN_SUBMIT_DESC, NULL, 0, NULL, NULL, NULL, 0, NULL, NULL }

/* Like kvrt_stream_submit, and the submission also waits on and signals the
 * application's semaphores: kvrt's work starts only when the waits are
 * satisfied, and the signals happen when it completed, so the application's
 * own queue work can be ordered before and after it without a CPU wait.
 * `desc` NULL is kvrt_stream_submit. Fails like kvrt_stream_submit, and with
 * KVRT_ERROR_INVALID_ARGUMENT for a mistyped or badly chained desc, NULL
 * arrays with nonzero counts, VK_NULL_HANDLE semaphores or wait stages that
 * are 0 or include VK_PIPELINE_STAGE_HOST_BIT; KVRT_ERROR_UNSUPPORTED when
 * values are given and the device has no timeline semaphores enabled; after
 * these two nothing was submitted and the stream is still recording (submit
 * again, or with kvrt_stream_submit). KVRT_ERROR_INVALID_STATE, without
 * changing anything, while the stream records into an application's command
 * buffer. A binary semaphore to wait on must have its signal submitted
 * before this call. A semaphore wait that is never satisfied leaves the
 * stream's work pending: kvrt_stream_wait times out and the context's
 * destruction waits up to its wait timeout.
 * Thread-safety: Unsafe (on the stream, and on the caches and memories its
 * recording uses; see kvrt.h, "Threading"). */
KVRT_API kvrt_result kvrt_stream_submit_vulkan(kvrt_stream stream, const kvrt_vulkan_submit_desc* desc);

#ifdef KVRT_EXPERIMENTAL
/* Recording into the application's command buffers (experimental: declared
 * with KVRT_EXPERIMENTAL defined; see "Versions, SONAME and experimental
 * parts" in kvrt.h). */

/* How kvrt learns that the application's submission of a command buffer it
 * recorded into (kvrt_stream_end_vulkan) has completed: a timeline semaphore
 * and the value that submission signals, or a fence it signals. Exactly one
 * of `semaphore` and `fence` is set. */
typedef struct kvrt_vulkan_completion {
    kvrt_struct_type type;    /* KVRT_STRUCT_TYPE_VULKAN_COMPLETION */
    const void* next;
    KVRT_ALIGN8 VkSemaphore semaphore;    /* a timeline semaphore */
    KVRT_ALIGN8 uint64_t value;           /* the value it reaches once the work completed */
    KVRT_ALIGN8 VkFence fence;            /* or a fence */
} kvrt_vulkan_completion;

#define KVRT_VULKAN_COMPLETION_INIT { KVRT_STRUCT_TYPE_VULKAN_COMPLETION, NULL, VK_NULL_HANDLE, 0, VK_NULL_HANDLE }

/* Starts recording kvrt operations into the application's command buffer
 * `command_buffer` instead of the stream's own: it must be in the recording
 * state, allocated from a pool of the context's queue family, and stay so
 * until kvrt_stream_end_vulkan. kvrt first records a barrier that makes the
 * application's earlier compute and transfer writes in it visible to kvrt's
 * operations. Calls that take this stream then record into `command_buffer`
 * as they would into the stream's own; synchronous calls (stream NULL) are
 * unaffected. kvrt's commands change the command buffer's compute pipeline,
 * descriptor set and push-constant bindings: the application binds its own
 * again after kvrt_stream_end_vulkan. A stream created with
 * KVRT_STREAM_TIMESTAMPS writes its timestamps into `command_buffer` too;
 * kvrt_stream_get_timings reads them after kvrt_stream_wait. Until
 * kvrt_stream_end_vulkan, kvrt_stream_submit on the stream fails with
 * KVRT_ERROR_INVALID_STATE. Fails with
 * KVRT_ERROR_INVALID_HANDLE for a bad stream; KVRT_ERROR_INVALID_ARGUMENT
 * for VK_NULL_HANDLE; KVRT_ERROR_INVALID_STATE when the stream is recording
 * or its last submission has not completed.
 * Experimental. Thread-safety: Unsafe (on the stream and the command buffer). */
KVRT_API kvrt_result kvrt_stream_begin_vulkan(kvrt_stream stream, VkCommandBuffer command_buffer);

/* Ends recording into the application's command buffer: records a barrier
 * that makes kvrt's writes visible to the application's later compute,
 * transfer and shader-read work in the same command buffer or in later
 * submissions, and hands the recording over. The application then submits
 * the command buffer itself, to the context's queue (under its queue lock if
 * it shares the queue with kvrt), and makes that submission signal
 * `completion`. kvrt treats the recording as submitted: it keeps what the
 * recording uses alive, and kvrt_stream_wait waits on `completion`, until the
 * work completed. kvrt polls the semaphore or fence: the application keeps
 * it alive, and a fence signalled (not reset), until kvrt_stream_wait on
 * the stream succeeded, or else until the context is destroyed. If the
 * application does not submit the command buffer after all, it calls
 * kvrt_stream_end_vulkan with NULL `completion` instead, which drops the
 * recording and rolls back what it changed, as a failed kvrt_stream_submit
 * does; the command buffer must then not be submitted. Fails with
 * KVRT_ERROR_INVALID_HANDLE; KVRT_ERROR_INVALID_STATE when the stream is not
 * recording into an application's command buffer or a failed call left the
 * recording unsubmittable (it is dropped and rolled back);
 * KVRT_ERROR_INVALID_ARGUMENT, changing nothing (the stream still records),
 * for a mistyped or badly chained `completion`, one with neither or both of
 * semaphore and fence, or a semaphore with value 0;
 * KVRT_ERROR_UNSUPPORTED for a semaphore without timeline semaphores enabled
 * (the recording is dropped). Experimental. Thread-safety: Unsafe (on the
 * stream, the command buffer, and the caches and memories the recording
 * uses; see kvrt.h, "Threading"). kvrt touches the semaphore or fence from
 * other threads (their waits on buffers the recording uses) only under its
 * own lock, never after kvrt_stream_wait on the stream succeeded. */
KVRT_API kvrt_result kvrt_stream_end_vulkan(kvrt_stream stream, const kvrt_vulkan_completion* completion);
#endif /* KVRT_EXPERIMENTAL */

#ifdef __cplusplus
}
#endif

#endif /* KVRT_VULKAN_H */
