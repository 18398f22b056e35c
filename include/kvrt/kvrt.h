/*
 * kvrt.h: the C ABI of kvrt, a Vulkan compute runtime that owns an LLM's
 * key/value cache on the GPU and runs the cache's kernels.
 *
 * This header needs no Vulkan header. Interop with an application's own Vulkan
 * objects lives in kvrt_vulkan.h.
 *
 * Conventions
 * -----------
 * - Every function that can fail returns a kvrt_result: KVRT_SUCCESS (0) or a
 *   negative error. After an error, kvrt_last_error_message() gives a sentence
 *   that says what was wrong, for the calling thread. Each function's comment
 *   lists the errors it returns.
 * - Out-parameters come last. A function that creates an object writes NULL to
 *   its out-handle on failure.
 * - Destroy functions accept NULL and do nothing.
 * - A handle is an opaque value: the address of nothing the application may
 *   touch, in address space kvrt reserves and never maps (so a garbage
 *   collector never takes it for one of its own pointers). Once destroyed,
 *   a handle is refused with KVRT_ERROR_INVALID_HANDLE by every later call,
 *   whatever was created since, and its value is never given out again; a
 *   destroyed object leaves no memory behind. Looking a handle up takes no
 *   lock.
 * - No function aborts, prints or lets an exception escape. Bad input (NULL,
 *   destroyed or foreign handles, sizes or offsets out of range, arithmetic
 *   overflow) is reported as an error and changes nothing.
 *
 * Structs and extension (the rule that keeps old binaries working)
 * -----------------------------------------------------------------
 * - Every struct passed by pointer starts with `kvrt_struct_type type; const
 *   void* next;` and has a KVRT_*_INIT macro that sets `type` and the default
 *   of every field. Start from the macro: a zero field means "default" unless
 *   its comment says otherwise, and element types have no zero default.
 * - Structs are frozen: once released, a struct never grows, shrinks or
 *   changes a field. New options come as new structs chained through `next`
 *   (Vulkan's sType/pNext). A struct's `type` therefore names its exact
 *   layout, and the library reads and writes no byte beyond it.
 * - Every entry point checks every chain it is given: a `type` the library
 *   does not accept at that place, or a type given twice, is refused with
 *   KVRT_ERROR_INVALID_ARGUMENT and a message that names it. An application
 *   built against a newer header thus learns that the loaded library lacks an
 *   extension, instead of having it silently ignored.
 * - Output structs (kvrt_device_info, kvrt_cache_info, ...) are filled as
 *   their `type` says: the library writes the fields after `type` and `next`,
 *   never those two, and fills each struct chained on `next` that it accepts
 *   there. Arrays of output structs need `type` set in every element.
 * - Element types (kvrt_type) are one vocabulary for caches, tensors, outputs
 *   and the fixed memory; kvrt_type_name, kvrt_type_block_size and
 *   kvrt_type_block_bytes describe them, so callers need no table of their own.
 * - Where a call takes a source and a destination, the source comes first.
 *
 * Versions, SONAME and experimental parts
 * ---------------------------------------
 * - Result values, enum values and struct type values are pinned forever.
 * - Before 1.0, each minor version is its own ABI: the shared library's
 *   SONAME is libkvrt.so.0.MINOR, so a binary built against 0.1 never loads
 *   0.2 by accident, while patch releases (0.1.x) keep the ABI. From 1.0 on the
 *   SONAME is libkvrt.so.MAJOR and minor releases only add.
 * - Items marked "Experimental" may change in any minor release, also after
 *   1.0; everything else follows the rule above. They are declared only
 *   where the application opts in: it defines KVRT_EXPERIMENTAL before it
 *   includes a kvrt header (kvrt_memory.h refuses to compile without it).
 *   Their symbols are listed apart from the stable ones (the package's
 *   share/doc/kvrt/compatibility.md), and the stable ABI that each version
 *   promises leaves them out. Experimental now: the fixed-capacity memory
 *   (kvrt_memory.h) and recording into an application's command buffer
 *   (kvrt_stream_begin_vulkan, kvrt_stream_end_vulkan and
 *   kvrt_vulkan_completion in kvrt_vulkan.h).
 *
 * Threading
 * ---------
 * Like Vulkan, objects are externally synchronized per handle: two threads
 * may call kvrt at the same time as long as no handle is used by both calls
 * (a call uses every handle it takes, such as the cache, the stream and the
 * buffers of its tensors), unless a function's comment says
 * "Thread-safety: Safe". What the objects of one context share (its queue and
 * submission tracking, deferred releases, compiled kernels, staging memory,
 * counters, the list of its objects) is locked inside kvrt, so in detail:
 *
 * - Objects of one context may be used on different threads at the same
 *   time: for example, each thread with its own stream and cache (or
 *   memory), or with synchronous calls (stream NULL). Submissions of
 *   different streams are serialized internally on the context's queue; a
 *   thread waiting for the device (kvrt_stream_wait, a synchronous call,
 *   an upload or download) holds up no other thread's submissions.
 * - The context handle: the functions that create objects from it or read
 *   it are Safe, with one another and with calls on its objects:
 *   kvrt_buffer_create, kvrt_buffer_import_vulkan, kvrt_stream_create,
 *   kvrt_cache_create, kvrt_memory_create, kvrt_context_get_device_info,
 *   kvrt_context_get_stats, kvrt_context_get_pipeline_cache,
 *   kvrt_context_get_tuning and the
 *   *_estimate_size functions. kvrt_context_destroy needs every other call
 *   on the context and on its objects to have returned.
 * - A destroy function needs only the object it destroys; other objects of
 *   the context may be in use on other threads meanwhile.
 * - Buffers are only read by kvrt's calls, except kvrt_buffer_destroy: any
 *   number of threads may pass the same buffer to other calls at once (as a
 *   tensor, an output, a kvrt_cmd_fill or kvrt_cmd_copy operand, to
 *   kvrt_buffer_upload or _download). The order in which their GPU work and
 *   copies touch its bytes is the application's to arrange, as in Vulkan.
 *   kvrt_buffer_destroy must not overlap another call that takes the buffer.
 * - Caches and memories are used by one thread at a time
 *   (kvrt_cache_seq_transfer uses both of its caches).
 * - A stream's open recording ties the stream to the caches and memories it
 *   recorded work for: until the recording is submitted or dropped, a call
 *   on the stream (kvrt_stream_submit, kvrt_stream_end_vulkan and
 *   kvrt_stream_destroy roll back their metadata if the recording is
 *   dropped) must not overlap a call on those caches and memories other
 *   than their destruction. Recording a cache's work from the thread that
 *   uses the cache keeps to this.
 * - Destroying a buffer, cache or memory that another thread's open
 *   recording uses makes that recording unsubmittable (kvrt_stream_submit
 *   fails with KVRT_ERROR_INVALID_STATE and drops it), as on one thread.
 * - kvrt_result_string, kvrt_last_error_message, kvrt_version,
 *   kvrt_version_string and the other functions marked Safe may be called
 *   from any thread at any time.
 * - The log callback is called from any thread that calls into the context
 *   (and from the driver's threads), also from several at once, sometimes
 *   with kvrt's own locks held (it must not call back into kvrt).
 * - An imported context calls the application's lock_queue and unlock_queue
 *   (kvrt_vulkan_import_desc) from whichever thread submits, with kvrt's own
 *   locks held: while holding its queue lock, the application must not call
 *   kvrt functions on that context.
 *
 * Log messages reach the application only through the callback it gives at
 * context creation; the library itself never writes to stdout or stderr.
 *
 * Environment variables
 * ---------------------
 * A few environment variables let a user steer kvrt without changing the
 * application. They choose only what the application left to kvrt, never
 * against an explicit choice:
 * - KVRT_DEVICE picks the device where kvrt_context_desc.device is NULL or
 *   "" (kvrt_context_create; an imported context has the application's).
 * - KVRT_KERNELS picks the kernel variants where no kernel flag
 *   (KVRT_CONTEXT_PORTABLE_KERNELS, _SHUFFLE_KERNELS, _TILED_KERNELS) is set.
 * Where the application chose, the variable is not read (a bad value is then
 * no error), and a log message at KVRT_LOG_LEVEL_INFO says it was ignored.
 * KVRT_VALIDATION=1 (or gpu) can only add validation: it turns
 * KVRT_CONTEXT_VALIDATION on, never off. KVRT_DEVICE_PROFILE is for tests
 * (kvrt_enumerate_devices).
 */
#ifndef KVRT_H
#define KVRT_H

#include <stddef.h>
#include <stdint.h>

#include "kvrt/kvrt_version.h"

#if defined(_WIN32) && !defined(KVRT_STATIC)
#  if defined(KVRT_BUILDING_LIBRARY)
#    define KVRT_API __declspec(dllexport)
#  else
#    define KVRT_API __declspec(dllimport)
#  endif
#elif defined(__GNUC__) || defined(__clang__)
#  define KVRT_API __attribute__((visibility("default")))
#else
#  define KVRT_API
#endif

/* KVRT_ALIGN8 marks every 64-bit member (uint64_t, double, and the Vulkan
 * handles that are 64-bit integers on 32-bit targets) of every public struct,
 * so that a struct has one layout on all 32-bit targets: 32-bit ARM, MSVC's
 * x86 and the other 32-bit ABIs align such members to 8 bytes inside structs,
 * the System V i386 ABI (Linux and Android x86) to 4. Under __i386__ with GCC
 * or Clang it asks for 8; everywhere else it is empty and changes nothing. */
#if defined(__i386__) && (defined(__GNUC__) || defined(__clang__)) && !defined(_WIN32)
#  define KVRT_ALIGN8 __attribute__((aligned(8)))
#else
#  define KVRT_ALIGN8
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ========================================================================== */
/* Results                                                                    */
/* ========================================================================== */

/* Result codes. Their values are pinned forever; new codes only get new values. */
typedef enum kvrt_result {
    KVRT_SUCCESS = 0,
    /* An argument is NULL where it may not be, out of range, or inconsistent. */
    KVRT_ERROR_INVALID_ARGUMENT = -1,
    /* A handle is NULL, already destroyed, or not of the expected kind. */
    KVRT_ERROR_INVALID_HANDLE = -2,
    /* A host allocation failed. */
    KVRT_ERROR_OUT_OF_HOST_MEMORY = -3,
    /* A device allocation failed, or the request exceeds what the device has. */
    KVRT_ERROR_OUT_OF_DEVICE_MEMORY = -4,
    /* The Vulkan device was lost; the context must be destroyed. */
    KVRT_ERROR_DEVICE_LOST = -5,
    /* A wait ran past its timeout. The work may still complete later. */
    KVRT_ERROR_TIMEOUT = -6,
    /* The cache has no room for the request; nothing was changed. */
    KVRT_ERROR_CACHE_FULL = -7,
    /* The device, driver or build lacks something the request needs. */
    KVRT_ERROR_UNSUPPORTED = -8,
    /* Saved state is malformed, truncated or fails its checksum. */
    KVRT_ERROR_CORRUPT_STATE = -9,
    /* A file could not be read or written. */
    KVRT_ERROR_IO = -10,
    /* The object is not in a state that allows the call (for example, submitting
     * a stream that is not recording). */
    KVRT_ERROR_INVALID_STATE = -11,
    /* An unexpected internal failure; the detail message says where. */
    KVRT_ERROR_INTERNAL = -12,
    KVRT_RESULT_MAX_ENUM = 0x7FFFFFFF
} kvrt_result;

/* A short, static, English name for a result ("KVRT_ERROR_TIMEOUT: ..."); never
 * NULL, also for unknown values. Thread-safety: Safe. */
KVRT_API const char* kvrt_result_string(kvrt_result result);

/* The detail message of the most recent failed kvrt call on the calling thread,
 * or "" if none failed yet. The pointer stays valid until the next kvrt call on
 * this thread. Thread-safety: Safe (the message is thread-local). */
KVRT_API const char* kvrt_last_error_message(void);

/* ========================================================================== */
/* Version                                                                    */
/* ========================================================================== */

/* The version of the loaded library, packed by KVRT_MAKE_VERSION.
 * Thread-safety: Safe. */
KVRT_API uint32_t kvrt_version(void);

/* The version of the loaded library as "MAJOR.MINOR.PATCH"; static storage.
 * Thread-safety: Safe. */
KVRT_API const char* kvrt_version_string(void);

/* ========================================================================== */
/* Common types                                                               */
/* ========================================================================== */

typedef uint32_t kvrt_flags;

/* Identifies each struct, so that `next` chains can be checked. */
typedef enum kvrt_struct_type {
    KVRT_STRUCT_TYPE_UNDEFINED = 0,
    KVRT_STRUCT_TYPE_CONTEXT_DESC = 1,
    KVRT_STRUCT_TYPE_DEVICE_INFO = 2,
    KVRT_STRUCT_TYPE_BUFFER_DESC = 3,
    KVRT_STRUCT_TYPE_STREAM_DESC = 4,
    KVRT_STRUCT_TYPE_CONTEXT_STATS = 5,
    KVRT_STRUCT_TYPE_TIMING = 6,
    KVRT_STRUCT_TYPE_PIPELINE_CACHE_DESC = 7,
    KVRT_STRUCT_TYPE_TENSOR_REF = 8,
    KVRT_STRUCT_TYPE_OUTPUT_REF = 9,
    KVRT_STRUCT_TYPE_CACHE_DESC = 10,
    KVRT_STRUCT_TYPE_CACHE_ESTIMATE = 11,
    KVRT_STRUCT_TYPE_CACHE_INFO = 12,
    KVRT_STRUCT_TYPE_ATTENTION_PARAMS = 13,
    KVRT_STRUCT_TYPE_STATIC_LAYOUT_DESC = 14,
    KVRT_STRUCT_TYPE_STATIC_SCALES_DESC = 15,
    KVRT_STRUCT_TYPE_STATIC_WINDOW = 16,
    KVRT_STRUCT_TYPE_STATIC_STATS = 17,
    KVRT_STRUCT_TYPE_BATCH = 18,
    KVRT_STRUCT_TYPE_ROPE_DESC = 19,
    KVRT_STRUCT_TYPE_MEMORY_DESC = 20,
    KVRT_STRUCT_TYPE_MEMORY_BATCH = 21,
    KVRT_STRUCT_TYPE_MEMORY_INIT = 22,
    KVRT_STRUCT_TYPE_MEMORY_ESTIMATE = 23,
    KVRT_STRUCT_TYPE_BATCH_TREE = 24,
    KVRT_STRUCT_TYPE_PAGED_LAYOUT_DESC = 25,
    KVRT_STRUCT_TYPE_PAGED_STATS = 26,
    KVRT_STRUCT_TYPE_WINDOW_LAYOUT_DESC = 27,
    KVRT_STRUCT_TYPE_STATIC_MASK_DESC = 28,
    KVRT_STRUCT_TYPE_STATIC_STYLE_DESC = 29,
    KVRT_STRUCT_TYPE_EXPORTED_MEMORY = 30,
    KVRT_STRUCT_TYPE_VULKAN_IMPORT_DESC = 100,
    KVRT_STRUCT_TYPE_VULKAN_SUBMIT_DESC = 101,
    KVRT_STRUCT_TYPE_VULKAN_COMPLETION = 102,
    KVRT_STRUCT_TYPE_MAX_ENUM = 0x7FFFFFFF
} kvrt_struct_type;

/* Element types: of a cache's stored K and V, of the data given to kvrt
 * (kvrt_tensor_ref), of its results (kvrt_output_ref) and of the fixed
 * memory's state. There is no default type: the KVRT_*_INIT macros set the
 * usual one, and KVRT_TYPE_UNDEFINED (0) is refused everywhere. */
typedef enum kvrt_type {
    KVRT_TYPE_UNDEFINED = 0,
    KVRT_TYPE_F32 = 1,
    KVRT_TYPE_F16 = 2, /* IEEE binary16 */
    /* Blocks of 32 values: fp16 scale d = amax/127, then 32 int8 codes; 34
     * bytes. Bit-compatible with GGML's Q8_0. */
    KVRT_TYPE_Q8_0 = 3,
    /* Blocks of 32 values: fp16 scale d = m/-8 (m: the value of largest
     * magnitude, sign kept), then 16 bytes of 4-bit codes, element j in the
     * low nibble of byte j and element j+16 in its high nibble; 18 bytes.
     * Bit-compatible with GGML's Q4_0. */
    KVRT_TYPE_Q4_0 = 4,
    /* Static-scale unsigned integers (NPU/DSP interop): one (scale,
     * zero_point) per layer for K and per layer for V, fixed when the cache is
     * created (kvrt_static_scales_desc) and shared by every row, past and new.
     * value = scale * (q - zero_point); a value x is stored as
     * q = clamp(roundf(x * inv) + zero_point, 0, qmax), where inv = 1/scale
     * computed once in f32 and roundf rounds halves away from zero (NaN is
     * stored as zero_point, infinities saturate). The same convention as
     * QNN's UFIXED_POINT_8/16 with offset = -zero_point.
     * 1 byte (qmax 255) and 2 bytes (qmax 65535) per value. */
    KVRT_TYPE_U8_STATIC = 5,
    KVRT_TYPE_U16_STATIC = 6,
    KVRT_TYPE_MAX_ENUM = 0x7FFFFFFF
} kvrt_type;

/* The lowercase name of a type ("f32", "f16", "q8_0", "q4_0", "u8_static",
 * "u16_static"); static storage. NULL for KVRT_TYPE_UNDEFINED and unknown
 * values. Thread-safety: Safe. */
KVRT_API const char* kvrt_type_name(kvrt_type type);

/* The type named `name` (as kvrt_type_name spells it, case-insensitive).
 * Fails with KVRT_ERROR_INVALID_ARGUMENT for NULL arguments or an unknown
 * name (*out_type is then KVRT_TYPE_UNDEFINED). Thread-safety: Safe. */
KVRT_API kvrt_result kvrt_type_from_name(const char* name, kvrt_type* out_type);

/* Values per block of a type: 1 for F32, F16 and the static-scale types, 32
 * for Q8_0 and Q4_0; 0 for KVRT_TYPE_UNDEFINED and unknown values. A row of n
 * values (n a multiple of the block size) takes
 * n / kvrt_type_block_size(t) * kvrt_type_block_bytes(t) bytes.
 * Thread-safety: Safe. */
KVRT_API uint32_t kvrt_type_block_size(kvrt_type type);

/* Bytes per block of a type: 4 (F32), 2 (F16), 34 (Q8_0), 18 (Q4_0), 1
 * (U8_STATIC), 2 (U16_STATIC); 0 for KVRT_TYPE_UNDEFINED and unknown values.
 * Thread-safety: Safe. */
KVRT_API uint32_t kvrt_type_block_bytes(kvrt_type type);

typedef enum kvrt_log_level {
    KVRT_LOG_LEVEL_DEFAULT = 0, /* as a threshold: KVRT_LOG_LEVEL_WARN */
    KVRT_LOG_LEVEL_DEBUG = 1,
    KVRT_LOG_LEVEL_INFO = 2,
    KVRT_LOG_LEVEL_WARN = 3,
    KVRT_LOG_LEVEL_ERROR = 4,
    KVRT_LOG_LEVEL_NONE = 5,    /* as a threshold: deliver nothing */
    KVRT_LOG_LEVEL_MAX_ENUM = 0x7FFFFFFF
} kvrt_log_level;

/* Receives log messages of a context. `message` is valid only during the call
 * and has no trailing newline. The callback may be called from any thread that
 * calls into the context, and from the driver's threads for validation
 * messages; it must not call back into kvrt. */
typedef void (*kvrt_log_fn)(void* user_data, kvrt_log_level level, const char* message);

typedef struct kvrt_context_T* kvrt_context;
typedef struct kvrt_buffer_T* kvrt_buffer;
typedef struct kvrt_stream_T* kvrt_stream;

/* ========================================================================== */
/* Devices and contexts                                                       */
/* ========================================================================== */

typedef enum kvrt_device_type {
    KVRT_DEVICE_TYPE_OTHER = 0,
    KVRT_DEVICE_TYPE_INTEGRATED_GPU = 1,
    KVRT_DEVICE_TYPE_DISCRETE_GPU = 2,
    KVRT_DEVICE_TYPE_VIRTUAL_GPU = 3,
    KVRT_DEVICE_TYPE_CPU = 4,
    KVRT_DEVICE_TYPE_MAX_ENUM = 0x7FFFFFFF
} kvrt_device_type;

/* Device features kvrt cares about (kvrt_device_info.features). For a context,
 * a bit is set only when the feature is both supported and enabled on its
 * VkDevice; kvrt picks kernel variants from these bits. */
typedef enum kvrt_device_feature_bits {
    KVRT_DEVICE_FEATURE_SHADER_FLOAT16 = 0x00000001, /* 16-bit float arithmetic */
    KVRT_DEVICE_FEATURE_SHADER_INT8 = 0x00000002,    /* 8-bit integer arithmetic */
    KVRT_DEVICE_FEATURE_SHADER_INT16 = 0x00000004,   /* 16-bit integer arithmetic */
    KVRT_DEVICE_FEATURE_STORAGE_16BIT = 0x00000008,  /* 16-bit storage buffer access */
    KVRT_DEVICE_FEATURE_STORAGE_8BIT = 0x00000010,   /* 8-bit storage buffer access */
    KVRT_DEVICE_FEATURE_TIMESTAMPS = 0x00000020,     /* compute queue timestamps */
    /* the largest device-local heap is host-visible: kvrt maps its buffers
     * instead of staging (not a discrete GPU's small BAR heap) */
    KVRT_DEVICE_FEATURE_UNIFIED_MEMORY = 0x00000040,
    KVRT_DEVICE_FEATURE_SHADER_INT64 = 0x00000080,   /* 64-bit integer arithmetic */
    KVRT_DEVICE_FEATURE_MAX_ENUM = 0x7FFFFFFF
} kvrt_device_feature_bits;

/* Subgroup operations supported in compute shaders (same bits as Vulkan's
 * VkSubgroupFeatureFlagBits). */
typedef enum kvrt_subgroup_op_bits {
    KVRT_SUBGROUP_OP_BASIC = 0x001,
    KVRT_SUBGROUP_OP_VOTE = 0x002,
    KVRT_SUBGROUP_OP_ARITHMETIC = 0x004,
    KVRT_SUBGROUP_OP_BALLOT = 0x008,
    KVRT_SUBGROUP_OP_SHUFFLE = 0x010,
    KVRT_SUBGROUP_OP_SHUFFLE_RELATIVE = 0x020,
    KVRT_SUBGROUP_OP_CLUSTERED = 0x040,
    KVRT_SUBGROUP_OP_QUAD = 0x080,
    KVRT_SUBGROUP_OP_MAX_ENUM = 0x7FFFFFFF
} kvrt_subgroup_op_bits;

/* What a device is and what it can do. Set `type` (KVRT_DEVICE_INFO_INIT)
 * before passing it to a query. */
typedef struct kvrt_device_info {
    kvrt_struct_type type;
    const void* next;
    uint32_t index;                  /* index in kvrt_enumerate_devices order */
    kvrt_device_type device_type;
    char name[256];                  /* e.g. "llvmpipe (LLVM 15.0.6, 256 bits)" */
    char driver_name[256];           /* e.g. "llvmpipe"; "" if unknown */
    char driver_info[256];           /* e.g. "Mesa 22.3.6"; "" if unknown */
    uint32_t vendor_id;
    uint32_t device_id;
    uint32_t api_version;            /* Vulkan version, VK_MAKE_API_VERSION packing */
    uint32_t driver_version;
    kvrt_flags features;             /* kvrt_device_feature_bits */
    kvrt_flags subgroup_ops;         /* kvrt_subgroup_op_bits, compute stage */
    uint32_t subgroup_size;
    uint32_t max_shared_memory_bytes;
    uint32_t max_workgroup_invocations;
    uint32_t max_push_constants_bytes;
    KVRT_ALIGN8 uint64_t max_storage_buffer_range; /* largest storage-buffer binding, bytes */
    KVRT_ALIGN8 uint64_t max_memory_allocation_size;
    KVRT_ALIGN8 uint64_t device_local_bytes;     /* size of the largest device-local heap */
    float timestamp_period_ns;       /* nanoseconds per timestamp tick */
} kvrt_device_info;

#define KVRT_DEVICE_INFO_INIT                                                   \
    {                                                                           \
        KVRT_STRUCT_TYPE_DEVICE_INFO, NULL, 0, KVRT_DEVICE_TYPE_OTHER, {0}, {0}, \
            {0}, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0.0f                    \
    }

/* Options of kvrt_context_create and kvrt_context_import_vulkan. */
typedef enum kvrt_context_flag_bits {
    /* Enable the Khronos validation layer (core and synchronization checks) and
     * route its messages to the log callback. Also enabled when the environment
     * variable KVRT_VALIDATION is set to 1; KVRT_VALIDATION=gpu enables the
     * layer's GPU-assisted mode instead of synchronization validation (every
     * kernel instrumented to report accesses outside its bindings; much
     * slower). Creation fails with KVRT_ERROR_UNSUPPORTED if the layer is not
     * installed. Ignored by kvrt_context_import_vulkan (the application owns
     * the instance). */
    KVRT_CONTEXT_VALIDATION = 0x00000001,
    /* Never map device memory: all uploads and downloads go through staging
     * buffers, as on GPUs whose device-local memory is not host-visible. Meant
     * for testing that path on unified-memory devices. */
    KVRT_CONTEXT_FORCE_STAGING = 0x00000002,
    /* Use the fallback kernels that need neither 16-bit arithmetic nor
     * subgroup operations, whatever the device supports. */
    KVRT_CONTEXT_PORTABLE_KERNELS = 0x00000004,
    /* Use the kernels built on subgroup shuffles (attention's lane groups)
     * wherever kvrt has them, also on devices where it would pick the
     * portable ones (CPU implementations). Creation fails with
     * KVRT_ERROR_UNSUPPORTED when the device lacks what they need: basic and
     * shuffle subgroup operations in compute shaders and subgroups of two or
     * more invocations (kvrt_device_info.subgroup_ops, .subgroup_size); it
     * never falls back. Excludes KVRT_CONTEXT_PORTABLE_KERNELS.
     *
     * Without any of these flags kvrt picks per device, and the environment
     * variable KVRT_KERNELS, when set, may make the choice instead (see
     * "Environment variables"): "portable", "shuffle", "tiled" (each as its
     * flag) or "auto" (kvrt's pick); any other value then fails creation
     * with KVRT_ERROR_INVALID_ARGUMENT. With one of the flags set, the flag
     * stands and KVRT_KERNELS is not read. */
    KVRT_CONTEXT_SHUFFLE_KERNELS = 0x00000008,
    /* Run every attention call with the kernel that loads K/V tiles into
     * shared memory once per workgroup of query rows (meant for prefill and
     * large batches on GPUs; kvrt does not pick it on its own yet), and the
     * portable variants of the other kernels. Needs no optional device
     * feature. Excludes the two flags above. */
    KVRT_CONTEXT_TILED_KERNELS = 0x00000010,
    KVRT_CONTEXT_FLAG_MAX_ENUM = 0x7FFFFFFF
} kvrt_context_flag_bits;

typedef struct kvrt_context_desc {
    kvrt_struct_type type;
    const void* next;
    kvrt_flags flags;           /* kvrt_context_flag_bits */
    /* Which device kvrt_context_create picks: NULL or "" leaves the choice to
     * kvrt (the device named by the environment variable KVRT_DEVICE when it
     * is set and not empty, else discrete > integrated > virtual > CPU, first
     * of each); otherwise a decimal index in kvrt_enumerate_devices order, or
     * a case-insensitive substring of the device name, which stands whatever
     * KVRT_DEVICE says (see "Environment variables"). */
    const char* device;
    kvrt_log_fn log_callback;   /* NULL: messages are dropped */
    void* log_user_data;
    kvrt_log_level log_level;   /* lowest level delivered; 0 = WARN */
    /* Limit for waits the library does on its own (uploads, downloads,
     * destruction); 0 = 60 s. A wait past it fails with KVRT_ERROR_TIMEOUT. */
    KVRT_ALIGN8 uint64_t wait_timeout_ns;
    /* Largest single storage-buffer binding kvrt will use, in bytes; 0 = the
     * device's maxStorageBufferRange. A smaller value splits arenas into more,
     * smaller pieces (useful to emulate small-limit mobile GPUs). */
    KVRT_ALIGN8 uint64_t max_binding_bytes;
} kvrt_context_desc;

#define KVRT_CONTEXT_DESC_INIT \
    { KVRT_STRUCT_TYPE_CONTEXT_DESC, NULL, 0, NULL, NULL, NULL, KVRT_LOG_LEVEL_DEFAULT, 0, 0 }

/* Pipeline-cache data to start a context with, chained on
 * kvrt_context_desc.next: bytes an earlier context returned from
 * kvrt_context_get_pipeline_cache. With them the device's compiler can skip
 * the work it did before when kvrt creates its kernels, so the first call of
 * each kernel is faster. Data from another device, driver or driver version
 * is detected by Vulkan's cache header and ignored (with a log message at
 * INFO), never an error. The bytes are copied during creation. */
typedef struct kvrt_pipeline_cache_desc {
    kvrt_struct_type type;   /* KVRT_STRUCT_TYPE_PIPELINE_CACHE_DESC */
    const void* next;
    const void* data;        /* may be NULL when size is 0 */
    KVRT_ALIGN8 uint64_t size;           /* bytes */
} kvrt_pipeline_cache_desc;

#define KVRT_PIPELINE_CACHE_DESC_INIT { KVRT_STRUCT_TYPE_PIPELINE_CACHE_DESC, NULL, NULL, 0 }

/* Counters of a context (kvrt_context_get_stats). */
typedef struct kvrt_context_stats {
    kvrt_struct_type type;
    const void* next;
    KVRT_ALIGN8 uint64_t validation_errors;   /* validation-layer errors seen so far */
    KVRT_ALIGN8 uint64_t validation_warnings;
    /* device memory held by kvrt now: buffers, arenas and staging buffers
     * kept for reuse; memory freed while the device still used it (after a
     * call that failed, or timed out, with work in flight) counts until the
     * device has finished with it */
    KVRT_ALIGN8 uint64_t device_bytes;
    KVRT_ALIGN8 uint64_t peak_device_bytes;   /* most device memory held at once */
    KVRT_ALIGN8 uint64_t submissions;         /* queue submissions made so far */
} kvrt_context_stats;

#define KVRT_CONTEXT_STATS_INIT { KVRT_STRUCT_TYPE_CONTEXT_STATS, NULL, 0, 0, 0, 0, 0 }

/* Lists the Vulkan devices kvrt can use. With `infos` NULL, writes the count to
 * *count. Otherwise fills up to *count entries (each must have `type` set),
 * writes the number filled to *count, and returns KVRT_ERROR_INVALID_ARGUMENT
 * with the detail "array too small" if there were more. Fails with
 * KVRT_ERROR_UNSUPPORTED when no Vulkan loader or no device is present.
 *
 * For tests: the environment variable KVRT_DEVICE_PROFILE=<name> shows every
 * device, here and to the contexts created on it, as a real GPU's published
 * properties make it (nvidia-rtx-5080, amd-rx-9070-xt, intel-arc-a770,
 * apple-m1, adreno-740, mali-g710, vulkan-minimum; unset or empty: none):
 * the smaller of each limit, only the features and subgroup operations both
 * have, the GPU's device type; vendor and device IDs, subgroup size and
 * timestamp period stay the device's. A name that is not a profile fails
 * here and in kvrt_context_create with KVRT_ERROR_INVALID_ARGUMENT
 * (device-profiles.md, installed in share/doc/kvrt/).
 * Thread-safety: Safe. */
KVRT_API kvrt_result kvrt_enumerate_devices(kvrt_device_info* infos, uint32_t* count);

/* Creates a context: its own Vulkan instance and device on the device chosen by
 * desc->device (or, where that is NULL or "", by KVRT_DEVICE), with one
 * compute queue. `desc` may be NULL for
 * all defaults; it accepts a kvrt_pipeline_cache_desc on its chain. Fails
 * with KVRT_ERROR_INVALID_ARGUMENT for a NULL `out_context`, a wrong
 * desc->type, a bad chain, unknown or conflicting flags, or a bad
 * KVRT_KERNELS (where it applies) or KVRT_DEVICE_PROFILE;
 * KVRT_ERROR_UNSUPPORTED when there is no Vulkan loader, no device matching
 * desc->device (or KVRT_DEVICE where it applies), a requested layer is
 * missing, or the device cannot run the kernels forced by
 * KVRT_CONTEXT_SHUFFLE_KERNELS or KVRT_KERNELS;
 * KVRT_ERROR_OUT_OF_HOST_MEMORY or _OUT_OF_DEVICE_MEMORY when Vulkan runs out;
 * KVRT_ERROR_DEVICE_LOST or KVRT_ERROR_INTERNAL for other Vulkan failures.
 * Thread-safety: Safe. */
KVRT_API kvrt_result kvrt_context_create(const kvrt_context_desc* desc, kvrt_context* out_context);

/* Waits for all work of the context (up to its wait timeout), then destroys it
 * together with every buffer, stream, cache and memory created from it; their
 * handles become invalid. NULL is a no-op. Thread-safety: Unsafe (on the
 * context and every object created from it: no other call on them may run). */
KVRT_API void kvrt_context_destroy(kvrt_context context);

/* Describes the context's device. Fails with KVRT_ERROR_INVALID_HANDLE or
 * KVRT_ERROR_INVALID_ARGUMENT (NULL `info`, a wrong `info->type` or an unknown
 * struct chained on it). Thread-safety: Safe. */
KVRT_API kvrt_result kvrt_context_get_device_info(kvrt_context context, kvrt_device_info* info);

/* Reads the context's counters. While other threads allocate or submit, each
 * counter is read on its own (current, not one snapshot of all). Fails with
 * KVRT_ERROR_INVALID_HANDLE, or KVRT_ERROR_INVALID_ARGUMENT for a NULL
 * `stats`, a wrong `stats->type` or an unknown struct chained on it.
 * Thread-safety: Safe. */
KVRT_API kvrt_result kvrt_context_get_stats(kvrt_context context, kvrt_context_stats* stats);

/* The context's pipeline cache: everything the device compiled for the
 * kernels kvrt created so far, to save and hand back at the next start
 * (kvrt_pipeline_cache_desc). With `data` NULL, writes the size to *size.
 * Otherwise writes up to *size bytes and the number written to *size, and
 * fails with KVRT_ERROR_INVALID_ARGUMENT ("buffer too small") when the data
 * did not fit (call again with the size a NULL query gives). Fails with
 * KVRT_ERROR_INVALID_HANDLE, KVRT_ERROR_INVALID_ARGUMENT for a NULL `size`,
 * or KVRT_ERROR_OUT_OF_HOST_MEMORY. Thread-safety: Safe (kernels that other
 * threads compile meanwhile may or may not be included). */
KVRT_API kvrt_result kvrt_context_get_pipeline_cache(kvrt_context context, void* data, uint64_t* size);

/* What kvrt picked for the context's device, as text: one "name value" line
 * per choice (the attention kernel variant, workgroup sizes, lane groups and
 * tile sizes for heads of 64 and 128 values, split limits, the fixed-capacity
 * memory's kernels, whether buffers are mapped, the device profile in force;
 * `kvrt info --tuning` prints it). The names are stable; the values follow
 * the device and kvrt's version. With `text` NULL, writes the size needed
 * (with the terminating NUL) to *size. Otherwise writes the NUL-terminated
 * text if *size holds it, and the size needed to *size in any case; fails
 * with KVRT_ERROR_INVALID_ARGUMENT ("buffer too small", nothing written) when
 * it does not. Fails with KVRT_ERROR_INVALID_HANDLE, or
 * KVRT_ERROR_INVALID_ARGUMENT for a NULL `size`. Thread-safety: Safe. */
KVRT_API kvrt_result kvrt_context_get_tuning(kvrt_context context, char* text, uint64_t* size);

/* ========================================================================== */
/* Buffers                                                                    */
/* ========================================================================== */

/* A buffer is device memory of any size up to the device's free memory. It is
 * split internally into pieces no larger than the device's largest binding, so a
 * 1 GiB buffer works on a device whose maxStorageBufferRange is 128 MiB. New
 * buffers are zeroed. */
typedef enum kvrt_buffer_flag_bits {
    /* The buffer's memory can be exported as a file descriptor
     * (kvrt_buffer_export_memory, kvrt_static.h): allocated for every
     * handle type the device exports. */
    KVRT_BUFFER_EXPORTABLE = 0x00000001,
    KVRT_BUFFER_FLAG_MAX_ENUM = 0x7FFFFFFF
} kvrt_buffer_flag_bits;

typedef struct kvrt_buffer_desc {
    kvrt_struct_type type;
    const void* next;
    KVRT_ALIGN8 uint64_t size;       /* bytes, > 0 */
    kvrt_flags flags;    /* kvrt_buffer_flag_bits */
    const char* label;   /* debug name for Vulkan tools; may be NULL */
} kvrt_buffer_desc;

#define KVRT_BUFFER_DESC_INIT { KVRT_STRUCT_TYPE_BUFFER_DESC, NULL, 0, 0, NULL }

/* Creates a zeroed device buffer. Fails with KVRT_ERROR_INVALID_HANDLE for a
 * bad context; KVRT_ERROR_INVALID_ARGUMENT for NULL arguments, a wrong
 * desc->type or bad chain, size 0 or unknown flags; KVRT_ERROR_UNSUPPORTED
 * for KVRT_BUFFER_EXPORTABLE where memory cannot be exported (see
 * kvrt_buffer_export_memory);
 * KVRT_ERROR_OUT_OF_DEVICE_MEMORY when the device cannot hold it (nothing
 * stays allocated); KVRT_ERROR_OUT_OF_HOST_MEMORY. Thread-safety: Safe. */
KVRT_API kvrt_result kvrt_buffer_create(kvrt_context context, const kvrt_buffer_desc* desc,
                                        kvrt_buffer* out_buffer);

/* Destroys a buffer. Memory still in use by submitted work is released once that
 * work completes. A stream that recorded commands on the buffer and has not
 * submitted them yet can no longer be submitted. NULL is a no-op, and so is a
 * buffer owned by a cache (kvrt_static_window.buffer; logged as a warning).
 * Thread-safety: Unsafe (on the buffer: no other call that takes it may run;
 * other objects of the context may be in use on other threads). */
KVRT_API void kvrt_buffer_destroy(kvrt_buffer buffer);

/* The buffer's size in bytes. Fails with KVRT_ERROR_INVALID_HANDLE, or
 * KVRT_ERROR_INVALID_ARGUMENT for a NULL `out_size`. Thread-safety: Safe,
 * except against kvrt_buffer_destroy of the buffer. */
KVRT_API kvrt_result kvrt_buffer_get_size(kvrt_buffer buffer, uint64_t* out_size);

/* Copies `size` bytes from host memory into the buffer at `offset`. First waits
 * (up to the context's wait timeout) for submitted work that uses the buffer, so
 * the write is ordered after it. Fails with KVRT_ERROR_INVALID_ARGUMENT when
 * [offset, offset + size) is outside the buffer or `data` is NULL with size > 0,
 * KVRT_ERROR_INVALID_HANDLE for a bad buffer, KVRT_ERROR_TIMEOUT or a device
 * error while waiting or copying; on failure the buffer is unchanged unless
 * the error is a device error.
 * Thread-safety: Safe, except against kvrt_buffer_destroy of the buffer (the
 * order of what concurrent calls do to its bytes is the application's; see
 * "Threading"). */
KVRT_API kvrt_result kvrt_buffer_upload(kvrt_buffer buffer, uint64_t offset, const void* data,
                                        uint64_t size);

/* Copies `size` bytes of the buffer at `offset` into host memory, after waiting
 * for submitted work that uses the buffer. Same errors as kvrt_buffer_upload.
 * Thread-safety: Safe, except against kvrt_buffer_destroy of the buffer. */
KVRT_API kvrt_result kvrt_buffer_download(kvrt_buffer buffer, uint64_t offset, void* data,
                                          uint64_t size);

/* ========================================================================== */
/* Streams                                                                    */
/* ========================================================================== */

/* A stream records kvrt operations into a command buffer, submits them to the
 * context's queue and waits for them:
 *
 *     kvrt_stream_begin(s);  kvrt_cmd_...(s, ...);  kvrt_stream_submit(s);
 *     kvrt_stream_wait(s, timeout_ns);
 *
 * Memory barriers between operations are inserted by kvrt from what each
 * operation reads and writes. */
typedef enum kvrt_stream_flag_bits {
    /* Record a pair of GPU timestamps around every operation, readable with
     * kvrt_stream_get_timings after the wait. Fails at creation with
     * KVRT_ERROR_UNSUPPORTED if the queue has no timestamps. */
    KVRT_STREAM_TIMESTAMPS = 0x00000001,
    KVRT_STREAM_FLAG_MAX_ENUM = 0x7FFFFFFF
} kvrt_stream_flag_bits;

typedef struct kvrt_stream_desc {
    kvrt_struct_type type;
    const void* next;
    kvrt_flags flags;         /* kvrt_stream_flag_bits */
    uint32_t max_timings;     /* operations timed per submission; 0 = 256 */
    const char* label;        /* debug name; may be NULL */
} kvrt_stream_desc;

#define KVRT_STREAM_DESC_INIT { KVRT_STRUCT_TYPE_STREAM_DESC, NULL, 0, 0, NULL }

/* The GPU time of one recorded operation (kvrt_stream_get_timings). */
typedef struct kvrt_timing {
    kvrt_struct_type type;  /* KVRT_STRUCT_TYPE_TIMING */
    const void* next;
    const char* label;      /* static string naming the operation, e.g. "fill" */
    KVRT_ALIGN8 uint64_t ns;            /* time between the operation's start and end stamps */
} kvrt_timing;

#define KVRT_TIMING_INIT { KVRT_STRUCT_TYPE_TIMING, NULL, NULL, 0 }

/* Creates a stream. Fails with KVRT_ERROR_INVALID_HANDLE for a bad context;
 * KVRT_ERROR_INVALID_ARGUMENT for a NULL `out_stream`, a wrong desc->type, a
 * bad chain or unknown flags; KVRT_ERROR_UNSUPPORTED for timestamps on a
 * queue without them; KVRT_ERROR_OUT_OF_HOST_MEMORY or
 * _OUT_OF_DEVICE_MEMORY. `desc` may be NULL for all defaults.
 * Thread-safety: Safe. */
KVRT_API kvrt_result kvrt_stream_create(kvrt_context context, const kvrt_stream_desc* desc,
                                        kvrt_stream* out_stream);

/* Destroys a stream; submitted work finishes on its own and its resources are
 * released afterwards. A recording still open is dropped and rolled back.
 * NULL is a no-op. Thread-safety: Unsafe (on the stream, and on the caches
 * and memories its open recording uses; see "Threading"). */
KVRT_API void kvrt_stream_destroy(kvrt_stream stream);

/* Starts recording. Fails with KVRT_ERROR_INVALID_HANDLE, or
 * KVRT_ERROR_INVALID_STATE if the stream is already recording, or submitted
 * and not yet waited for with kvrt_stream_wait (also when its work has
 * finished, e.g. a buffer download waited for it: a wait then returns at
 * once); KVRT_ERROR_DEVICE_LOST after a lost device.
 * Thread-safety: Unsafe (on the stream). */
KVRT_API kvrt_result kvrt_stream_begin(kvrt_stream stream);

/* Ends recording and submits. Fails with KVRT_ERROR_INVALID_HANDLE;
 * KVRT_ERROR_INVALID_STATE if the stream is not recording, or a buffer it
 * uses was destroyed meanwhile, or a failed call left the recording
 * unsubmittable (the recording is then dropped, what it changed is rolled
 * back, and the stream is idle again); KVRT_ERROR_OUT_OF_HOST_MEMORY,
 * _OUT_OF_DEVICE_MEMORY or _DEVICE_LOST from the submission (the same
 * rollback). Thread-safety: Unsafe (on the stream, and on the caches and
 * memories its recording uses; submissions of a context's streams are
 * serialized internally). */
KVRT_API kvrt_result kvrt_stream_submit(kvrt_stream stream);

/* Waits up to `timeout_ns` nanoseconds for the last submission. Returns
 * KVRT_SUCCESS when it completed (also when nothing was submitted),
 * KVRT_ERROR_TIMEOUT when it did not complete in time (wait again later), or
 * KVRT_ERROR_DEVICE_LOST; KVRT_ERROR_INVALID_HANDLE for a bad stream. A
 * timeout of 0 polls. Thread-safety: Unsafe (on the stream; other threads
 * keep submitting while it waits). */
KVRT_API kvrt_result kvrt_stream_wait(kvrt_stream stream, uint64_t timeout_ns);

/* After a successful wait on a stream created with KVRT_STREAM_TIMESTAMPS,
 * copies the timing of each operation of the last submission, in recording
 * order. With `timings` NULL writes the count to *count; otherwise fills up to
 * *count entries (each with `type` set) and writes the number filled. Fails
 * with KVRT_ERROR_INVALID_HANDLE; KVRT_ERROR_INVALID_ARGUMENT for a NULL
 * `count` or an entry with a wrong type; KVRT_ERROR_INVALID_STATE for a
 * stream without timestamps or whose last submission was not waited for.
 * Thread-safety: Unsafe (on the stream). */
KVRT_API kvrt_result kvrt_stream_get_timings(kvrt_stream stream, kvrt_timing* timings,
                                             uint32_t* count);

/* Records a compute kernel that writes the 32-bit `value` over `size` bytes of
 * `buffer` from `offset`. Fails with KVRT_ERROR_INVALID_HANDLE for a bad
 * stream or buffer; KVRT_ERROR_INVALID_ARGUMENT when `offset` or `size` is not
 * a multiple of 4, the range is outside the buffer, or the buffer belongs to
 * another context; KVRT_ERROR_INVALID_STATE when the stream is not recording;
 * KVRT_ERROR_OUT_OF_HOST_MEMORY or _OUT_OF_DEVICE_MEMORY.
 * Thread-safety: Unsafe (on the stream). */
KVRT_API kvrt_result kvrt_cmd_fill(kvrt_stream stream, kvrt_buffer buffer, uint64_t offset,
                                   uint64_t size, uint32_t value);

/* Records a compute kernel that copies `size` bytes from `src` at `src_offset`
 * to `dst` at `dst_offset`. Fails like kvrt_cmd_fill, and with
 * KVRT_ERROR_INVALID_ARGUMENT when offsets or size are not multiples of 4 or
 * outside the buffers, or when src and dst are the same buffer and the
 * ranges overlap. Thread-safety: Unsafe (on the stream). */
KVRT_API kvrt_result kvrt_cmd_copy(kvrt_stream stream, kvrt_buffer src, uint64_t src_offset,
                                   kvrt_buffer dst, uint64_t dst_offset, uint64_t size);

/* ========================================================================== */
/* KV cache                                                                   */
/* ========================================================================== */

/* A cache holds the keys and values of one model (all its layers) for up to
 * `capacity` tokens, shared by up to `max_seqs` sequences.
 *
 * Cells (the general layout): each cell holds one token's K and V rows for every
 * layer, a position, and the set of sequences that use it. Tokens are placed in
 * free cells; sequence operations follow llama.cpp's memory API on half-open
 * position ranges [p0, p1) where a negative bound means "unbounded". */
typedef struct kvrt_cache_T* kvrt_cache;

/* How the cache arranges its rows. */
typedef enum kvrt_layout {
    KVRT_LAYOUT_DEFAULT = 0, /* KVRT_LAYOUT_CELLS */
    /* Cells (the general layout): any cell holds any token of any sequences. */
    KVRT_LAYOUT_CELLS = 1,
    /* The static padded layout of NPU/DSP engines: each sequence has,
     * per (layer, KV head), a K window and a V window of seq_len - 1 rows that
     * a static graph binds as its [1,1,S-1,D] past tensors. Needs a
     * kvrt_static_layout_desc in the descriptor's `next` chain; see "Static
     * padded layout" below. */
    KVRT_LAYOUT_STATIC = 2,
    /* Paged: the cells are a pool of blocks of B tokens; each sequence has a
     * block table, full blocks are shared between sequences by their exact
     * tokens (automatic prefix sharing), forks share every block and copy a
     * block on its first write (copy-on-write). Takes an optional
     * kvrt_paged_layout_desc in the descriptor's `next` chain; see
     * kvrt_paged.h. */
    KVRT_LAYOUT_PAGED = 3,
    KVRT_LAYOUT_MAX_ENUM = 0x7FFFFFFF
} kvrt_layout;

typedef enum kvrt_rope_mode {
    KVRT_ROPE_MODE_NORMAL = 0, /* pairs (2i, 2i+1) */
    KVRT_ROPE_MODE_NEOX = 1,   /* pairs (i, i + n_rot/2) */
    KVRT_ROPE_MODE_MAX_ENUM = 0x7FFFFFFF
} kvrt_rope_mode;

/* The RoPE of the model, chained on kvrt_cache_desc.next; kvrt uses it when
 * it rotates K itself (shifts, deferred RoPE). Without it: normal mode, all
 * of head_dim_k rotated, base 10000, no scaling. Zero fields take the default
 * given in each comment. Every float must be finite and >= 0: cache creation
 * and the estimate fail with KVRT_ERROR_INVALID_ARGUMENT otherwise. */
typedef struct kvrt_rope_desc {
    kvrt_struct_type type;   /* KVRT_STRUCT_TYPE_ROPE_DESC */
    const void* next;
    kvrt_rope_mode mode;
    uint32_t n_rot;          /* rotated dimensions; 0 = head_dim_k */
    float freq_base;         /* 0 = 10000 */
    float freq_scale;        /* 0 = 1 */
    float ext_factor;        /* YaRN extrapolation mix; 0 = off */
    float attn_factor;       /* YaRN magnitude; 0 = 1 */
    float beta_fast;         /* 0 = 32 */
    float beta_slow;         /* 0 = 1 */
    uint32_t n_ctx_orig;     /* YaRN original context; 0 = none */
} kvrt_rope_desc;

#define KVRT_ROPE_DESC_INIT \
    { KVRT_STRUCT_TYPE_ROPE_DESC, NULL, KVRT_ROPE_MODE_NORMAL, 0, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0 }

typedef enum kvrt_cache_flag_bits {
    /* Deferred RoPE: the engine stores K before rotation, and attention
     * rotates each cell's K by its current position. Shifts (seq_add,
     * seq_div, context shifts) then change metadata only and never touch K,
     * so repeated shifts add no error. Queries are rotated by the engine as
     * usual. The rotation is exact to a few f32 roundings at any position
     * (composed from a table of angles the cache computes once in double,
     * 4,096 bytes per rotated dimension; never the device's sin and cos). */
    KVRT_CACHE_DEFERRED_ROPE = 0x00000001,
    /* The K and V rows' memory (the static layout's windows among them) can
     * be exported as a file descriptor (kvrt_buffer_export_memory on
     * kvrt_static_window.buffer), so that another process or a DSP maps the
     * rows kvrt writes. Creation fails with KVRT_ERROR_UNSUPPORTED where
     * memory cannot be exported. */
    KVRT_CACHE_EXPORTABLE = 0x00000002,
    KVRT_CACHE_FLAG_MAX_ENUM = 0x7FFFFFFF
} kvrt_cache_flag_bits;

/* Structs that may be chained on a kvrt_cache_desc's `next`, in any order,
 * each at most once: kvrt_rope_desc (the model's RoPE),
 * kvrt_static_layout_desc (the static layout's sizes),
 * kvrt_static_style_desc (the static layout's style, kvrt_static.h),
 * kvrt_paged_layout_desc (the paged layout's block size),
 * kvrt_static_scales_desc (the scales of static-scale types) and
 * kvrt_window_layout_desc (windowed layers kept in a smaller group). */
typedef struct kvrt_cache_desc {
    kvrt_struct_type type;   /* KVRT_STRUCT_TYPE_CACHE_DESC */
    const void* next;
    uint32_t n_layers;
    uint32_t n_heads;        /* query heads; a multiple of n_kv_heads */
    uint32_t n_kv_heads;
    uint32_t head_dim_k;
    uint32_t head_dim_v;     /* 0 = head_dim_k */
    uint32_t capacity;       /* cells (tokens), at most 2^30; 0 with
                              * KVRT_LAYOUT_STATIC, where it is
                              * max_seqs * (seq_len - 1) */
    uint32_t max_seqs;       /* sequence ids are 0..max_seqs-1; 0 = 64 (1 with
                              * KVRT_LAYOUT_STATIC) */
    /* Stored types of K and V (KVRT_CACHE_DESC_INIT: F16). Q8_0 and Q4_0 need
     * head dims that are multiples of 32. */
    kvrt_type type_k;
    kvrt_type type_v;
    kvrt_layout layout;
    /* Sliding window of each layer (n_layers entries; 0 = full attention), or
     * NULL for none. A layer with window W attends to cells with
     * query_pos - cell_pos < W. Copied at creation. Windowed layers store
     * rows for every cell unless a kvrt_window_layout_desc is chained. */
    const uint32_t* layer_windows;
    const char* label;       /* debug name for Vulkan tools; may be NULL */
    kvrt_flags flags;        /* kvrt_cache_flag_bits */
} kvrt_cache_desc;

#define KVRT_CACHE_DESC_INIT                                                                 \
    {                                                                                        \
        KVRT_STRUCT_TYPE_CACHE_DESC, NULL, 0, 0, 0, 0, 0, 0, 0, KVRT_TYPE_F16, KVRT_TYPE_F16, \
            KVRT_LAYOUT_DEFAULT, NULL, NULL, 0                                               \
    }

/* Windowed layers in a group of their own, chained on kvrt_cache_desc.next
 * (cell and paged layouts; on a static-layout cache it is a struct not
 * accepted there, KVRT_ERROR_INVALID_ARGUMENT): the layers with a window (layer_windows[l] > 0) keep
 * their rows in a separate, smaller group of `cells` cells instead of one row
 * per cell of the cache, so their memory is about the window per sequence,
 * not the capacity (Gemma- and Mistral-style models that interleave local and
 * global layers).
 *
 * Cells keep their meaning: kvrt_cache_store, _place and _write return and
 * take the cache's cells, and every sequence operation applies to both
 * groups. When a batch is placed, the group first drops, for each of the
 * batch's sequences, the rows at positions no query at or after the batch's
 * lowest position of that sequence can see (position <= lowest - W, W the
 * largest window), except positions below `n_keep`. Afterwards:
 * - placing a token, or attending in a windowed layer, at a position whose
 *   window reaches rows the group dropped fails with
 *   KVRT_ERROR_INVALID_STATE and changes nothing. So after removing a
 *   sequence's tail from p0 on, the engine can go on at p0 when
 *   p0 >= kvrt_cache_seq_window_pos_min() + W - 1; otherwise it removes the
 *   sequence's positions from n_keep on and evaluates them again (removals
 *   themselves never fail);
 * - reading a windowed layer's dropped rows (kvrt_cache_read, _read_raw)
 *   fails with KVRT_ERROR_INVALID_ARGUMENT, and writing them is skipped;
 * - attention with kvrt_attention_params.n_keep above `n_keep` in a windowed
 *   layer fails with KVRT_ERROR_INVALID_ARGUMENT;
 * - a state (kvrt_state.h; format version 3) keeps exactly the rows the
 *   group holds, and loads into a cache (cell or paged layout) with the same
 *   windowed layers and a window group (KVRT_ERROR_INVALID_ARGUMENT
 *   otherwise); a state without a group loads too, each of its cells taking
 *   a group cell (KVRT_ERROR_CACHE_FULL, nothing changed, when the group is
 *   too small). Transfers (kvrt_cache_seq_transfer) fail with
 *   KVRT_ERROR_UNSUPPORTED.
 * A failed store or place may still have dropped rows; they are only rows
 * that no query at the batch's positions or later sees.
 * The group is full (KVRT_ERROR_CACHE_FULL, nothing placed) when it lacks a
 * cell for each token; size it for max_seqs * (W + n_keep) plus the largest
 * batch.
 *
 * In the paged layout (kvrt_paged.h) the group is a cell group too, and
 * follows the block tables: a fork shares the group's rows; the first
 * append into a shared partial block, and a shift of a shared block, copy
 * the rows the group holds for it (so the group needs a cell for each);
 * kvrt_cache_paged_admit maps only the leading blocks whose windowed rows
 * the group still holds for every computed token's window (the sinks and
 * the rows from the lowest computed position - W + 1 on), so *out_n_cached
 * may be smaller than without the group. The blocks such an admit fills
 * then replace, in the prefix registry, the ones it could not map, so the
 * next request with the same start maps them. Rows are shared between
 * sequences while some sequence's window still holds them: a request that
 * comes after its prefix's sequences moved W positions on computes the
 * prefix again. kvrt_cache_tree_accept fails with KVRT_ERROR_UNSUPPORTED. */
typedef struct kvrt_window_layout_desc {
    kvrt_struct_type type;   /* KVRT_STRUCT_TYPE_WINDOW_LAYOUT_DESC */
    const void* next;
    /* Cells of the windowed group; 0 = min(capacity,
     * max_seqs * (W + n_keep) + 512), W the largest window. At most the
     * capacity. */
    uint32_t cells;
    /* Positions below n_keep are never dropped (attention sinks). */
    uint32_t n_keep;
} kvrt_window_layout_desc;

#define KVRT_WINDOW_LAYOUT_DESC_INIT { KVRT_STRUCT_TYPE_WINDOW_LAYOUT_DESC, NULL, 0, 0 }

/* The sizes of a static layout (KVRT_LAYOUT_STATIC), chained on
 * kvrt_cache_desc.next. W = seq_len - 1 rows per window, reserved
 * ceil(reserve * W) rows per (sequence, layer, KV head, K|V). */
typedef struct kvrt_static_layout_desc {
    kvrt_struct_type type;   /* KVRT_STRUCT_TYPE_STATIC_LAYOUT_DESC */
    const void* next;
    uint32_t seq_len;        /* S >= 2: the graph's sequence length */
    KVRT_ALIGN8 double reserve;          /* R >= 1 (1.5 allowed); 0 = 2 */
} kvrt_static_layout_desc;

#define KVRT_STATIC_LAYOUT_DESC_INIT { KVRT_STRUCT_TYPE_STATIC_LAYOUT_DESC, NULL, 0, 0.0 }

/* The scales of static-scale K/V types (KVRT_TYPE_U8_STATIC,
 * KVRT_TYPE_U16_STATIC), chained on kvrt_cache_desc.next; needed when either
 * type is one, in either layout. Each array has `count` entries: 1 (shared by
 * all layers) or n_layers (one per layer). value = scale * (q - zero_point),
 * where a scale is finite, normal (>= FLT_MIN) and > 0, and a zero point is
 * 0..255 (U8_STATIC) or 0..65535 (U16_STATIC). Copied at creation. */
typedef struct kvrt_static_scales_desc {
    kvrt_struct_type type;        /* KVRT_STRUCT_TYPE_STATIC_SCALES_DESC */
    const void* next;
    uint32_t count;
    const float* k_scales;        /* when type_k is static-scale; else NULL */
    const int32_t* k_zero_points; /* with k_scales */
    const float* v_scales;        /* when type_v is static-scale; else NULL */
    const int32_t* v_zero_points; /* with v_scales */
} kvrt_static_scales_desc;

#define KVRT_STATIC_SCALES_DESC_INIT { KVRT_STRUCT_TYPE_STATIC_SCALES_DESC, NULL, 0, NULL, NULL, NULL, NULL }

/* Sizes of a cache, computed before anything is allocated. */
typedef struct kvrt_cache_estimate {
    kvrt_struct_type type;   /* KVRT_STRUCT_TYPE_CACHE_ESTIMATE */
    const void* next;
    /* K and V bytes of one token over all layers:
     * n_layers * n_kv_heads * (head_dim_k * size(type_k) + head_dim_v * size(type_v)),
     * with size(Q8_0) = 34/32 and size(Q4_0) = 18/32 bytes. */
    KVRT_ALIGN8 uint64_t bytes_per_token;
    /* bytes_per_token * capacity. With KVRT_LAYOUT_STATIC: the regions,
     * 2 * max_seqs * n_layers * n_kv_heads * ceil(R*(S-1)) * row_stride (for
     * Llama-2-7B, f16, S = 2048, R = 2, one sequence: 2,146,435,072; in the
     * smart-mask style R = 1: 1,073,217,536). */
    KVRT_ALIGN8 uint64_t data_bytes;
    /* The device memory kvrt_cache_create allocates: data_bytes plus alignment
     * padding (each cell's row is padded to a multiple of 4 bytes, and each
     * layer's K and V are split into pieces no larger than the largest storage
     * binding, each padded to 16 bytes), plus the cells' metadata that the
     * kernels read on the device: 4 * (1 + 2 * ceil(max_seqs / 64)) bytes per
     * cell, in pieces padded the same way, and, for the cell and paged layouts
     * with max_seqs > 1 whose metadata fits one binding, 4 bytes per cell for
     * the per-sequence lists of cells that attention reads (see
     * kvrt_cache_attention), and, with KVRT_CACHE_DEFERRED_ROPE, 4,096 bytes
     * per rotated dimension for its table of angles. Equals the growth of
     * kvrt_context_stats.device_bytes on creation, up to the driver's own
     * allocation rounding. */
    KVRT_ALIGN8 uint64_t device_bytes;
    /* The largest binding the estimate assumed (the context's, or 128 MiB
     * without a context). */
    KVRT_ALIGN8 uint64_t max_binding_bytes;
} kvrt_cache_estimate;

#define KVRT_CACHE_ESTIMATE_INIT { KVRT_STRUCT_TYPE_CACHE_ESTIMATE, NULL, 0, 0, 0, 0 }

/* A batch of tokens: token i has position positions[i] and belongs to the
 * seq_id_counts[i] sequences listed next in seq_ids (flattened, in token
 * order). seq_id_counts NULL means one sequence per token. Used to place
 * tokens (kvrt_cache_store, kvrt_cache_place) and to describe queries
 * (kvrt_cache_attention, where each token has exactly one sequence). */
typedef struct kvrt_batch {
    kvrt_struct_type type;   /* KVRT_STRUCT_TYPE_BATCH */
    const void* next;
    uint32_t n_tokens;
    const int32_t* positions;
    const uint32_t* seq_id_counts;
    const int32_t* seq_ids;
} kvrt_batch;

#define KVRT_BATCH_INIT { KVRT_STRUCT_TYPE_BATCH, NULL, 0, NULL, NULL, NULL }

/* The most tokens a batch with a kvrt_batch_tree may have. */
#define KVRT_MAX_TREE_TOKENS 1024u

/* A tree of tokens, chained on a kvrt_batch (kvrt_batch.next): the draft
 * tokens that speculative decoding (Medusa, EAGLE, lookahead) verifies in one
 * batch. Token i's parent is token parents[i] of the same batch, with
 * parents[i] < i, or -1 for a token whose only context is the cache. Every
 * token belongs to exactly one sequence, its parent's, and has a position
 * greater than its parent's (usually the parent's + 1): siblings share
 * positions. Each token sees the cache's cells of its sequence as any query
 * does, but of the tree's own tokens only its ancestors and itself.
 * - kvrt_cache_store, kvrt_cache_place: the batch's tokens may share
 *   (sequence, position) pairs with each other (not with cells already in the
 *   cache); `cells` is not read. Not for the static layout
 *   (KVRT_ERROR_UNSUPPORTED).
 * - kvrt_cache_attention: query i is token i of the tree, stored in cell
 *   cells[i] (as kvrt_cache_store returned it); of those cells, query i sees
 *   its own and its ancestors' only. Every other cell follows the usual rules.
 * - kvrt_cache_tree_accept: keeps the accepted branches, drops the rest.
 * A batch with a tree has at most KVRT_MAX_TREE_TOKENS tokens. */
typedef struct kvrt_batch_tree {
    kvrt_struct_type type;   /* KVRT_STRUCT_TYPE_BATCH_TREE */
    const void* next;
    const int32_t* parents;  /* n_tokens entries */
    const uint32_t* cells;   /* n_tokens entries: each token's cell */
} kvrt_batch_tree;

#define KVRT_BATCH_TREE_INIT { KVRT_STRUCT_TYPE_BATCH_TREE, NULL, NULL, NULL }

/* Data for kvrt to read: for each token, one row per head of `head_dim`
 * values (n_kv_heads rows of K or V for a store, n_heads rows of Q for
 * attention), at
 *
 *     offset + layer * layer_stride + token * row_stride + head * head_stride
 *
 * bytes into `buffer` or `host`. Exactly one of `buffer` and `host` is set;
 * host data is copied during the call.
 * - element_type F32 or F16 (KVRT_TENSOR_REF_INIT: F32): values, quantized
 *   by kvrt to the stored type. Offset and strides are multiples of 4.
 * - element_type equal to the cache's stored type (Q8_0, Q4_0, U8_STATIC,
 *   U16_STATIC; F32 and F16 are the case above): the stored bytes
 *   themselves, copied bit for bit (pre-quantized rows, in GGML's block
 *   layout for Q8_0 and Q4_0; codes for the static-scale types). A head row
 *   is then head_dim / kvrt_type_block_size * kvrt_type_block_bytes bytes;
 *   offset and strides are multiples of 2 (1 for U8_STATIC).
 * Zero strides mean packed: head_stride 0 is the head row's bytes,
 * row_stride 0 is n_heads * head_stride (the heads of one token back to
 * back), and layer_stride 0 is the larger of n_tokens * row_stride and
 * n_heads * head_stride (one layer's tokens back to back, token-major or
 * head-major).
 * Head-major data (GGML's permuted [head_dim, n_tokens, n_heads]) sets
 * row_stride to one head row and head_stride to n_tokens of them. */
typedef struct kvrt_tensor_ref {
    kvrt_struct_type type;    /* KVRT_STRUCT_TYPE_TENSOR_REF */
    const void* next;
    kvrt_buffer buffer;       /* a kvrt buffer (also one wrapping an app's VkBuffer) */
    const void* host;         /* or host memory */
    kvrt_type element_type;
    KVRT_ALIGN8 uint64_t offset;          /* bytes to the first value */
    KVRT_ALIGN8 uint64_t row_stride;      /* bytes between tokens; 0 = packed */
    KVRT_ALIGN8 uint64_t head_stride;     /* bytes between heads of one token; 0 = packed */
    KVRT_ALIGN8 uint64_t layer_stride;    /* bytes between layers when a call covers all
                               * layers; 0 = packed */
} kvrt_tensor_ref;

#define KVRT_TENSOR_REF_INIT { KVRT_STRUCT_TYPE_TENSOR_REF, NULL, NULL, NULL, KVRT_TYPE_F32, 0, 0, 0, 0 }

/* Where kvrt writes results: for each token, one row per head of head_dim
 * values at offset + layer * layer_stride + token * row_stride + head *
 * head_stride bytes into `buffer`, or into `host` memory (only when the call
 * is synchronous, stream NULL; written only when it succeeds). Offset and
 * strides are multiples of 4; zero strides mean packed, as in
 * kvrt_tensor_ref. The rows may not overlap. Bytes between and around the
 * rows are never written. */
typedef struct kvrt_output_ref {
    kvrt_struct_type type;    /* KVRT_STRUCT_TYPE_OUTPUT_REF */
    const void* next;
    kvrt_buffer buffer;
    void* host;
    kvrt_type element_type;   /* F32 or F16 (KVRT_OUTPUT_REF_INIT: F32) */
    KVRT_ALIGN8 uint64_t offset;          /* bytes to the first value */
    KVRT_ALIGN8 uint64_t row_stride;      /* bytes between tokens; 0 = packed */
    KVRT_ALIGN8 uint64_t head_stride;     /* bytes between heads of one token; 0 = packed */
    KVRT_ALIGN8 uint64_t layer_stride;    /* bytes between layers when a call covers all
                               * layers; 0 = packed */
} kvrt_output_ref;

#define KVRT_OUTPUT_REF_INIT { KVRT_STRUCT_TYPE_OUTPUT_REF, NULL, NULL, NULL, KVRT_TYPE_F32, 0, 0, 0, 0 }

/* Occupancy of a cache (kvrt_cache_get_info). */
typedef struct kvrt_cache_info {
    kvrt_struct_type type;    /* KVRT_STRUCT_TYPE_CACHE_INFO */
    const void* next;
    uint32_t capacity;
    uint32_t used;            /* cells in use */
    uint32_t n_attend;        /* cells an attention pass reads: the highest used
                               * cell + 1, rounded up to 32 */
    uint32_t pending_shifts;  /* cells whose K awaits a RoPE shift */
    float fragmentation;      /* empty share of the cells below n_attend */
    KVRT_ALIGN8 uint64_t device_bytes;    /* device memory the cache holds */
    KVRT_ALIGN8 uint64_t bytes_per_token;
    /* Stored bytes of one cell's K (and V) in one layer, all KV heads, as
     * kvrt_cache_read_raw gives them: n_kv_heads * head_dim / block size *
     * block bytes of the stored type. */
    KVRT_ALIGN8 uint64_t k_row_bytes;
    KVRT_ALIGN8 uint64_t v_row_bytes;
} kvrt_cache_info;

#define KVRT_CACHE_INFO_INIT { KVRT_STRUCT_TYPE_CACHE_INFO, NULL, 0, 0, 0, 0, 0.0f, 0, 0, 0, 0 }

/* Computes the sizes of a cache for `desc` without allocating anything.
 * `context` may be NULL; with it, the estimate uses the device's binding limit.
 * Fails with KVRT_ERROR_INVALID_HANDLE for a context that is not NULL and not
 * live; KVRT_ERROR_INVALID_ARGUMENT for NULL `desc` or `out`, a wrong type or
 * bad chain on either, an invalid descriptor (the same checks as
 * kvrt_cache_create) or sizes that overflow 64 bits. Thread-safety: Safe. */
KVRT_API kvrt_result kvrt_cache_estimate_size(kvrt_context context, const kvrt_cache_desc* desc,
                                              kvrt_cache_estimate* out);

/* Creates an empty cache in device-local memory. Fails with
 * KVRT_ERROR_INVALID_HANDLE for a bad context; KVRT_ERROR_INVALID_ARGUMENT for
 * NULL arguments or an invalid descriptor (a wrong type or bad chain, zero
 * sizes, n_heads not a multiple of n_kv_heads, quantized types with head dims
 * not multiples of 32, undefined or unknown types or layouts, more than 2^30
 * cells or, in the static layout, more than 2^30 reserved rows in all);
 * KVRT_ERROR_UNSUPPORTED for a static layout whose region exceeds the
 * device's binding limit; KVRT_ERROR_OUT_OF_DEVICE_MEMORY or
 * _OUT_OF_HOST_MEMORY when it does not fit (nothing stays allocated).
 * Thread-safety: Safe. */
KVRT_API kvrt_result kvrt_cache_create(kvrt_context context, const kvrt_cache_desc* desc,
                                       kvrt_cache* out_cache);

/* Destroys a cache; memory still used by submitted work is released when it
 * completes. NULL is a no-op. Thread-safety: Unsafe (on the cache and the
 * buffers of its static windows). */
KVRT_API void kvrt_cache_destroy(kvrt_cache cache);

/* Reads the cache's occupancy. Fails with KVRT_ERROR_INVALID_HANDLE, or
 * KVRT_ERROR_INVALID_ARGUMENT for a NULL `info`, a wrong `info->type` or an
 * unknown struct chained on it. Thread-safety: Unsafe. */
KVRT_API kvrt_result kvrt_cache_get_info(kvrt_cache cache, kvrt_cache_info* info);

/* Places `batch` in free cells and writes its K and V, all or nothing:
 * - `layer` is a layer index, or -1 for all layers (then `k` and `v` hold
 *   n_layers blocks of rows, layer_stride apart);
 * - `k` and `v` are values (F32, F16) or pre-quantized rows in the stored
 *   type (see kvrt_tensor_ref);
 * - `out_cells` (may be NULL) receives the cell of each token.
 * With `stream` NULL the call records, submits and waits itself, and on any
 * failure (KVRT_ERROR_CACHE_FULL, a bad argument, out of device memory, device
 * lost, KVRT_ERROR_TIMEOUT) no cell of the cache changed. With a stream, the
 * writes are recorded into it; the cells are taken at once (later calls see
 * them), and if the recording is dropped or its submission fails they are
 * given back. Fails with KVRT_ERROR_CACHE_FULL (nothing changed) when fewer
 * free cells than tokens remain; KVRT_ERROR_INVALID_HANDLE for a bad cache,
 * stream or buffer; KVRT_ERROR_INVALID_ARGUMENT for a NULL or mistyped batch
 * or tensor, negative positions, unknown sequence ids, a (sequence, position)
 * pair already stored, a layer out of range, data that does not match the
 * geometry or lies outside its buffer, or a stream or buffer of another
 * context; KVRT_ERROR_INVALID_STATE for a stream that is not recording; and
 * the device errors KVRT_ERROR_OUT_OF_DEVICE_MEMORY, _OUT_OF_HOST_MEMORY,
 * _DEVICE_LOST and _TIMEOUT. A batch with a kvrt_batch_tree chained may
 * repeat (sequence, position) pairs among its own tokens (see
 * kvrt_batch_tree). Thread-safety: Unsafe (on the cache and the stream). */
KVRT_API kvrt_result kvrt_cache_store(kvrt_cache cache, kvrt_stream stream, const kvrt_batch* batch,
                                      int32_t layer, const kvrt_tensor_ref* k,
                                      const kvrt_tensor_ref* v, uint32_t* out_cells);

/* Places `batch` without writing data, for engines that store layer by layer
 * (kvrt_cache_write for each layer afterwards). All or nothing; same errors as
 * kvrt_cache_store. Until every layer is written the rows of these cells hold
 * stale data. Thread-safety: Unsafe. */
KVRT_API kvrt_result kvrt_cache_place(kvrt_cache cache, const kvrt_batch* batch, uint32_t* out_cells);

/* Writes K and V rows of `n_tokens` tokens into `cells` (cells in use, as
 * returned by kvrt_cache_place) for `layer` (or -1: all layers); values or
 * pre-quantized rows, as in kvrt_cache_store. With `stream` NULL,
 * synchronous. Fails like kvrt_cache_store, and with
 * KVRT_ERROR_INVALID_ARGUMENT for a NULL `cells` or an empty or repeated
 * cell. Thread-safety: Unsafe. */
KVRT_API kvrt_result kvrt_cache_write(kvrt_cache cache, kvrt_stream stream, uint32_t n_tokens,
                                      const uint32_t* cells, int32_t layer, const kvrt_tensor_ref* k,
                                      const kvrt_tensor_ref* v);

/* Reads back K and V of `n_cells` cells of one layer, dequantized to f32,
 * cell after cell in the order of `cells`: `k_out` gets n_cells *
 * n_kv_heads * head_dim_k floats and `v_out` n_cells * n_kv_heads *
 * head_dim_v. `k_out_bytes` and `v_out_bytes` are the sizes of the two
 * buffers in bytes and must hold those floats (4 bytes each); bytes beyond
 * them are not written. Either buffer may be NULL: that array is not read
 * and its size is ignored. Waits (up to the context's wait timeout) for
 * submitted work that writes the cache. Fails with
 * KVRT_ERROR_INVALID_HANDLE; KVRT_ERROR_INVALID_ARGUMENT (nothing written)
 * for a layer out of range, a NULL `cells` with n_cells > 0, a cell out of
 * range, or `k_out_bytes` or `v_out_bytes` too small; KVRT_ERROR_TIMEOUT or
 * a device error while waiting (the buffers' contents are then unspecified).
 * Thread-safety: Unsafe. */
KVRT_API kvrt_result kvrt_cache_read(kvrt_cache cache, int32_t layer, uint32_t n_cells, const uint32_t* cells,
                                     float* k_out, uint64_t k_out_bytes, float* v_out, uint64_t v_out_bytes);

/* Which array of a cache. */
typedef enum kvrt_kv_array {
    KVRT_KV_ARRAY_UNDEFINED = 0,
    KVRT_KV_ARRAY_K = 1,
    KVRT_KV_ARRAY_V = 2,
    KVRT_KV_ARRAY_MAX_ENUM = 0x7FFFFFFF
} kvrt_kv_array;

/* Reads the stored bytes of `n_cells` cells of one layer's K or V, bit for
 * bit, in the stored type: for each cell in order, n_kv_heads head rows of
 * head_dim / block size * block bytes (GGML's block layout for Q8_0 and
 * Q4_0, the codes for the static-scale types), back to back with no padding:
 * kvrt_cache_info.k_row_bytes (or v_row_bytes) per cell. `out_bytes` must be
 * at least n_cells times that. What is read can be stored again, into this
 * or another cache of the same type, with kvrt_cache_store or
 * kvrt_cache_write and a kvrt_tensor_ref of the stored type. Waits (up to the
 * context's wait timeout) for submitted work that writes the cache. Fails
 * with KVRT_ERROR_INVALID_HANDLE; KVRT_ERROR_INVALID_ARGUMENT for a layer out
 * of range, an undefined array, a NULL `cells` or `out` with n_cells > 0, a
 * cell out of range or `out_bytes` too small; KVRT_ERROR_TIMEOUT or a device
 * error while waiting. Thread-safety: Unsafe. */
KVRT_API kvrt_result kvrt_cache_read_raw(kvrt_cache cache, int32_t layer, kvrt_kv_array array, uint32_t n_cells,
                                         const uint32_t* cells, void* out, uint64_t out_bytes);

/* Sequence operations (llama.cpp's memory API). Ranges are half-open [p0, p1);
 * p0 < 0 means 0 and p1 < 0 means no end; 0 <= p1 < p0 is an error. They change
 * metadata only (but for some removals in the static layout, see
 * kvrt_static.h) and fail with KVRT_ERROR_INVALID_HANDLE for a bad cache,
 * KVRT_ERROR_INVALID_ARGUMENT (nothing changed) for an unknown sequence id, a
 * reversed range or a NULL out-pointer, and KVRT_ERROR_UNSUPPORTED for the
 * operations a static layout lacks (see "Static padded layout").
 * Thread-safety: Unsafe. */

/* Drops positions [p0, p1) of `seq` (seq < 0: of every sequence); a cell no
 * sequence uses becomes free. A static-layout removal that copies rows also
 * fails with the device errors of kvrt_cache_store. */
KVRT_API kvrt_result kvrt_cache_seq_rm(kvrt_cache cache, int32_t seq, int32_t p0, int32_t p1);
/* Makes `dst` share the cells of `src` in [p0, p1) (no data is copied). */
KVRT_API kvrt_result kvrt_cache_seq_cp(kvrt_cache cache, int32_t src, int32_t dst, int32_t p0, int32_t p1);
/* Drops every sequence but `seq`. */
KVRT_API kvrt_result kvrt_cache_seq_keep(kvrt_cache cache, int32_t seq);
/* Adds `delta` to the positions of `seq` in [p0, p1) and records the K shift
 * (applied before the next attention). As in llama.cpp, a cell shared with
 * other sequences moves for all of them; cells moved below 0 are dropped. */
KVRT_API kvrt_result kvrt_cache_seq_add(kvrt_cache cache, int32_t seq, int32_t p0, int32_t p1,
                                        int32_t delta);
/* Integer-divides the positions of `seq` in [p0, p1) by d > 0 (SelfExtend) and
 * records the K shift. */
KVRT_API kvrt_result kvrt_cache_seq_div(kvrt_cache cache, int32_t seq, int32_t p0, int32_t p1, int32_t d);
/* Smallest and largest position of `seq`; -1 when it has none. */
KVRT_API kvrt_result kvrt_cache_seq_pos_min(kvrt_cache cache, int32_t seq, int32_t* out_pos);
KVRT_API kvrt_result kvrt_cache_seq_pos_max(kvrt_cache cache, int32_t seq, int32_t* out_pos);
/* Smallest position of `seq`, at or above the window group's n_keep, whose
 * rows the windowed layers still hold (see kvrt_window_layout_desc); if none,
 * the smallest they hold; -1 when they hold none. Without a window group, the
 * same as kvrt_cache_seq_pos_min. */
KVRT_API kvrt_result kvrt_cache_seq_window_pos_min(kvrt_cache cache, int32_t seq, int32_t* out_pos);
/* Frees every cell. Fails with KVRT_ERROR_INVALID_HANDLE. */
KVRT_API kvrt_result kvrt_cache_clear(kvrt_cache cache);

/* Ends the verification of a token tree: `tree` is the batch that stored it,
 * with its kvrt_batch_tree chained and `cells` set. Keeps each token listed
 * in `leaves` (indices into the batch) and all its ancestors, and removes
 * every other token of the tree from its cell (the cell becomes free unless
 * another sequence uses it). n_leaves 0 drops the whole tree; one leaf per
 * sequence keeps each sequence's accepted branch. All or nothing: fails with
 * KVRT_ERROR_INVALID_HANDLE for a bad cache; KVRT_ERROR_INVALID_ARGUMENT
 * (nothing changed) for a NULL or mistyped batch or tree, a tree that breaks
 * the rules of kvrt_batch_tree, a leaf out of range or a NULL `leaves` with
 * n_leaves > 0, or a token whose cell no longer holds its position and
 * sequence; KVRT_ERROR_UNSUPPORTED for the static layout;
 * KVRT_ERROR_OUT_OF_HOST_MEMORY. Metadata only, like the sequence
 * operations. Thread-safety: Unsafe. */
KVRT_API kvrt_result kvrt_cache_tree_accept(kvrt_cache cache, const kvrt_batch* tree, uint32_t n_leaves,
                                            const int32_t* leaves);

/* Compaction: when the empty share of the cells below n_attend exceeds
 * `threshold` (0..1; 0 = any hole), moves up to `max_moves` cells (0 = no
 * limit) from the end into the lowest holes, copying their rows in every layer
 * in one submission; `out_moved` (may be NULL) gets the number of cells moved.
 * With `stream` NULL, synchronous; metadata changes only after the copy
 * completed, so a failed call leaves data and metadata as they were. With a
 * stream, metadata changes when the stream's submission is accepted. Fails
 * with KVRT_ERROR_INVALID_HANDLE for a bad cache or stream;
 * KVRT_ERROR_INVALID_ARGUMENT for a threshold outside 0..1 or a stream of
 * another context; KVRT_ERROR_INVALID_STATE for a stream that is not
 * recording; and the device errors of kvrt_cache_store.
 * Thread-safety: Unsafe. */
KVRT_API kvrt_result kvrt_cache_compact(kvrt_cache cache, kvrt_stream stream, float threshold,
                                        uint32_t max_moves, uint32_t* out_moved);

/* ========================================================================== */
/* Positions: RoPE shifts and context management                              */
/* ========================================================================== */

/* Applies every pending RoPE shift (recorded by seq_add and seq_div) to the
 * keys of all layers in one batched dispatch, rotating each cell's K by its
 * accumulated delta with the cache's RoPE parameters (quantized K is
 * dequantized, rotated and quantized again in place). kvrt_cache_attention
 * does this by itself when shifts are pending; call it to choose when the work
 * happens. With a deferred-RoPE cache (KVRT_CACHE_DEFERRED_ROPE) shifts touch
 * metadata only and this does nothing. With `stream` NULL, synchronous; with a
 * stream, the deltas are cleared at once and restored if the recording is
 * dropped. Fails with KVRT_ERROR_INVALID_HANDLE for a bad cache or stream;
 * KVRT_ERROR_INVALID_ARGUMENT for a stream of another context;
 * KVRT_ERROR_INVALID_STATE for a stream that is not recording; and the device
 * errors of kvrt_cache_store (the deltas stay pending then).
 * Thread-safety: Unsafe (on the cache and the stream). */
KVRT_API kvrt_result kvrt_cache_apply_shifts(kvrt_cache cache, kvrt_stream stream);

/* Context shift of a full sequence, as llama.cpp does it: keeps positions
 * [0, n_keep) (attention sinks), drops the next `n_discard` positions (0 =
 * half of those after n_keep), and moves the rest left by n_discard:
 * seq_rm(seq, n_keep, n_keep + n_discard) then
 * seq_add(seq, n_keep + n_discard, n_past, -n_discard), where n_past is the
 * sequence's largest position + 1. The K rotation is pending until the next
 * attention or kvrt_cache_apply_shifts. `out_n_past` (may be NULL) gets the
 * new largest position + 1. Fails with KVRT_ERROR_INVALID_HANDLE for a bad
 * cache; KVRT_ERROR_INVALID_ARGUMENT for an unknown sequence, n_keep < 0 or
 * n_discard < 0, or when nothing would be discarded; KVRT_ERROR_UNSUPPORTED
 * on a static layout; nothing changes then. Thread-safety: Unsafe. */
KVRT_API kvrt_result kvrt_cache_context_shift(kvrt_cache cache, int32_t seq, int32_t n_keep, int32_t n_discard,
                                              int32_t* out_n_past);

/* The "discard and re-evaluate" alternative to a context shift: keeps
 * [0, n_keep), drops everything after it, and tells the engine which of the
 * dropped tokens to evaluate again (the runtime cannot recompute K/V): the
 * tokens the engine had at positions [*out_src_pos, *out_src_pos + *out_count)
 * must be stored again at positions [*out_dst_pos, *out_dst_pos + *out_count).
 * They are the newest tokens after discarding `n_discard` (0 = half of those
 * after n_keep). It works in every layout (in the static layout the removal
 * may copy rows: see kvrt_static.h). Fails like kvrt_cache_context_shift,
 * but never with KVRT_ERROR_UNSUPPORTED; with KVRT_ERROR_INVALID_ARGUMENT for
 * a NULL out-pointer; and with the errors of kvrt_cache_seq_rm.
 * Thread-safety: Unsafe. */
KVRT_API kvrt_result kvrt_cache_discard_for_reevaluation(kvrt_cache cache, int32_t seq, int32_t n_keep,
                                                         int32_t n_discard, int32_t* out_src_pos,
                                                         int32_t* out_dst_pos, int32_t* out_count);

/* ========================================================================== */
/* Attention                                                                  */
/* ========================================================================== */

typedef enum kvrt_attention_flag_bits {
    /* Let queries see cells at later positions too (encoder-style attention).
     * By default a query sees cells with position <= its own. */
    KVRT_ATTENTION_NON_CAUSAL = 0x00000001,
    KVRT_ATTENTION_FLAG_MAX_ENUM = 0x7FFFFFFF
} kvrt_attention_flag_bits;

/* Options of kvrt_cache_attention. Zero fields are off or default. The
 * cache's sliding window of the layer (kvrt_cache_desc.layer_windows) applies.
 * `scale` must be finite, `softcap` and `max_bias` finite and >= 0
 * (KVRT_ERROR_INVALID_ARGUMENT otherwise). */
typedef struct kvrt_attention_params {
    kvrt_struct_type type;    /* KVRT_STRUCT_TYPE_ATTENTION_PARAMS */
    const void* next;
    kvrt_flags flags;         /* kvrt_attention_flag_bits */
    float scale;              /* logit scale; 0 = 1/sqrt(head_dim_k) */
    float softcap;            /* logit soft-capping: cap * tanh(s / cap); 0 = off */
    float max_bias;           /* ALiBi maximum bias (slopes as in GGML); 0 = off */
    /* StreamingLLM sinks: cells with position < n_keep are visible whatever
     * the sliding window (still subject to sequence and causal masks). */
    uint32_t n_keep;
    /* Learned sink logit per query head (n_heads finite floats), added to
     * the softmax denominator only; NULL = none. Copied during the call. */
    const float* sinks;
} kvrt_attention_params;

#define KVRT_ATTENTION_PARAMS_INIT { KVRT_STRUCT_TYPE_ATTENTION_PARAMS, NULL, 0, 0.0f, 0.0f, 0.0f, 0, NULL }

/* Attention of the query tokens of `queries` over the cache's cells in
 * `layer`: query i (position positions[i], exactly one sequence seq_ids[i];
 * `q` holds n_heads rows of head_dim_k values per token) sees the cells of its
 * sequence with position <= its own (unless non-causal), inside the layer's
 * sliding window; its output (n_heads rows of head_dim_v values in `out`) is
 * softmax(scale * q K^T + bias) V with a numerically stable online softmax,
 * query head h reading KV head h / (n_heads / n_kv_heads). A query that sees
 * no cell gets zeros. Store the queries' own K/V first so that they see
 * themselves; tokens of one batch never see later positions of the same
 * batch, unless `queries` chains a kvrt_batch_tree: then each query sees, of
 * the tree's cells, only its ancestors' and its own. Pending RoPE shifts are
 * applied first (recorded into the same
 * stream). Decode (few queries) splits the cells across workgroups and merges
 * the partial results; prefill (up to thousands of queries) tiles the
 * queries. A group of queries reads only the run of cells that holds its
 * sequences' cells (each sequence's run grows as it takes cells, starts
 * again when it empties, and is exact after kvrt_cache_compact). Where a
 * sequence's cells fill at most half of its run (sequences stored in turns,
 * as continuous batching does), the first attention call after the cache
 * changed builds, on the device and in the same stream, a list of each such
 * sequence's cells, which the call and later ones (every layer of the
 * token) read instead of the run. Over many sequences, attention so costs
 * what their own cells cost, whether those lie together or interleave.
 * Head dims must be multiples of 8. `params` may be NULL for the
 * defaults. With `stream` NULL the call is synchronous. Fails with
 * KVRT_ERROR_INVALID_HANDLE for a bad cache, stream or buffer;
 * KVRT_ERROR_INVALID_ARGUMENT for NULL or mistyped structs or bad chains, a
 * layer out of range, a query with other than one sequence, unknown
 * sequences, negative positions, data outside its buffer, element types other
 * than F32/F16 for q and out, overlapping output rows, host output with a
 * stream, a stream or buffer of another context, or a tree that breaks the
 * rules of kvrt_batch_tree or whose cells do not hold its tokens;
 * KVRT_ERROR_UNSUPPORTED for a tree over the static layout; KVRT_ERROR_INVALID_STATE
 * for a stream that is not recording; and the device errors of
 * kvrt_cache_store. Thread-safety: Unsafe (on the cache and the stream). */
KVRT_API kvrt_result kvrt_cache_attention(kvrt_cache cache, kvrt_stream stream, int32_t layer,
                                          const kvrt_batch* queries, const kvrt_tensor_ref* q,
                                          const kvrt_output_ref* out, const kvrt_attention_params* params);

#ifdef __cplusplus
}
#endif

/* The static padded layout, the paged layout, state save/load and the fixed-capacity memory
 * (experimental: with KVRT_EXPERIMENTAL defined) have headers of their own; they come with
 * this one. */
#include "kvrt/kvrt_static.h"
#include "kvrt/kvrt_paged.h"
#include "kvrt/kvrt_state.h"
#ifdef KVRT_EXPERIMENTAL
#include "kvrt/kvrt_memory.h"
#endif /* KVRT_EXPERIMENTAL */

#endif /* KVRT_H */
