// A kvrt context: one Vulkan device and queue (created or imported), the
// submission timeline, deferred releases, staging and the pipeline cache.
//
// Threading (kvrt.h, "Threading"): the objects of one context (buffers,
// streams, caches, memories) may be used from different threads at once,
// each by one thread at a time. What they share is locked here, each part
// under its own mutex. Lock order: a thread that holds one of these takes
// only those further down the list.
//   1. streams_mutex_       the registry of streams (Context::streams())
//   2. Stream::mutex_       what other threads touch of a stream's recording
//   3. Buffer::uses_mutex_  a buffer's submissions
//   4. timeline_mutex_      submissions in flight, fences, serials, deferred
//                           releases; the queue itself (vkQueueSubmit)
//   5. the application's queue lock (kvrt_vulkan_import_desc.lock_queue)
// Leaves, never held while another lock is taken: oneoff_mutex_,
// staging_mutex_, PipelineCache's mutex, the handle registry's.
// No lock is held while waiting for the device: fence waits happen with
// timeline_mutex_ released, so other threads keep submitting. Deferred
// releases run after timeline_mutex_ is released and take only leaf locks;
// they free memory directly (Buffer's ReleaseToken), never through
// ~Buffer, which walks the stream registry (lock 1). Undo actions of a
// recording run under Stream::mutex_ and touch only their owner's metadata.
// Immutable after creation, so read without a lock: the device, its
// functions, info, options and limits.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "core/log.hpp"
#include "core/result.hpp"
#include "vk/device.hpp"
#include "vk/loader.hpp"

struct kvrt_vulkan_import_desc;
struct kvrt_pipeline_cache_desc;

namespace kvrt::vk {

class PipelineCache;
class Stream;

// The 64-bit value of a Vulkan handle, for debug names: dispatchable handles
// are pointers everywhere, non-dispatchable ones are integers on 32-bit ABIs.
template <class T>
uint64_t object_bits(T handle) {
    if constexpr (std::is_pointer_v<T>) return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(handle));
    else return static_cast<uint64_t>(handle);
}

// Which kernel variants a context records: kvrt's choice for the device, or
// one forced (KVRT_CONTEXT_PORTABLE_KERNELS / _SHUFFLE_KERNELS /
// _TILED_KERNELS, or the KVRT_KERNELS environment variable).
enum class KernelChoice { Auto, Portable, Shuffle, Tiled };

// Options common to created and imported contexts, read from kvrt_context_desc
// and the environment.
struct ContextOptions {
    bool validation = false;
    // With validation: the layer's GPU-assisted mode (shaders instrumented to
    // report out-of-bounds accesses) instead of synchronization validation
    // (KVRT_VALIDATION=gpu).
    bool gpu_assisted = false;
    bool force_staging = false;
    KernelChoice kernels = KernelChoice::Auto;
    std::string device_selector;
    Logger logger;
    uint64_t wait_timeout_ns = 60ull * 1000 * 1000 * 1000;
    uint64_t max_binding_bytes = 0;

    // Reads `desc` (may be NULL) and the KVRT_DEVICE / KVRT_VALIDATION /
    // KVRT_KERNELS environment variables; KVRT_DEVICE and KVRT_KERNELS only
    // where `desc` leaves the choice to kvrt.
    static Result from_desc(const kvrt_context_desc* desc, ContextOptions* out);
};

// A submission's number. kvrt's own submissions (fences it waits on) complete
// in serial order; an application's submission of a command buffer kvrt
// recorded into (kvrt_stream_end_vulkan) completes whenever the application
// submits it, so in no particular order. Serial 0 means "nothing".
using Serial = uint64_t;

// How kvrt learns that an application's submission completed: a timeline
// semaphore reaching `value`, or a fence. Exactly one is set.
struct ExternalCompletion {
    VkSemaphore semaphore = VK_NULL_HANDLE;
    uint64_t value = 0;
    VkFence fence = VK_NULL_HANDLE;
};

// The application's semaphores a submission waits on and signals
// (kvrt_stream_submit_vulkan). Value arrays are empty or match their
// semaphore arrays; non-empty ones need timeline semaphores.
struct SubmitSync {
    std::vector<VkSemaphore> waits;
    std::vector<uint64_t> wait_values;
    std::vector<VkPipelineStageFlags> wait_stages;  // one per wait
    std::vector<VkSemaphore> signals;
    std::vector<uint64_t> signal_values;

    bool has_values() const { return !wait_values.empty() || !signal_values.empty(); }
};

// The usage of every buffer kvrt allocates (vk::Buffer), which the
// exportable handle types are queried for.
constexpr VkBufferUsageFlags kBufferUsage =
    VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;

class Context {
public:
    // Creates an instance and device of its own. `pipeline_cache` (may be
    // NULL) holds saved pipeline-cache bytes; they are copied, and ignored with
    // an INFO message when another device or driver made them.
    static Result create(const ContextOptions& options, std::unique_ptr<Context>* out,
                         const kvrt_pipeline_cache_desc* pipeline_cache = nullptr);
    // Wraps an application's Vulkan objects (kvrt_vulkan.h).
    static Result import(const ContextOptions& options, const kvrt_vulkan_import_desc& desc,
                         std::unique_ptr<Context>* out,
                         const kvrt_pipeline_cache_desc* pipeline_cache = nullptr);

    Context(const Context&) = delete;
    Context& operator=(const Context&) = delete;
    ~Context();

    // --- Device -----------------------------------------------------------
    const DeviceFns& fn() const { return dfn_; }
    const InstanceFns& ifn() const { return ifn_; }
    VkDevice device() const { return device_; }
    VkPhysicalDevice physical_device() const { return info_.handle; }
    const PhysicalDeviceInfo& info() const { return info_; }
    const FeatureSet& enabled() const { return enabled_; }
    const Logger& log() const { return options_.logger; }
    const ContextOptions& options() const { return options_; }
    uint32_t queue_family() const { return queue_family_; }
    bool imported() const { return imported_; }
    // Timeline semaphores are enabled on the device (and their functions loaded).
    bool timeline() const { return enabled_.timeline_semaphore; }
    // The memory handle types a buffer's memory can be exported as (opaque
    // fd, dma-buf), and those of them that need a dedicated allocation: only
    // on a device kvrt created, whose extensions it chose.
    VkExternalMemoryHandleTypeFlags export_types() const { return export_types_; }
    VkExternalMemoryHandleTypeFlags export_dedicated() const { return export_dedicated_; }

    // Largest binding kvrt uses: min(maxStorageBufferRange, max allocation,
    // the option), rounded down to 256 bytes.
    uint64_t max_binding_bytes() const { return max_binding_; }
    // Device-local memory type for buffers of the given type bits, and whether
    // it is mapped (host-visible and not forced to staging).
    Result device_memory_type(uint32_t type_bits, uint32_t* out_index, bool* out_mappable,
                              bool* out_coherent) const;
    // Host-visible memory type for staging.
    Result staging_memory_type(uint32_t type_bits, uint32_t* out_index, bool* out_coherent) const;
    VkDeviceSize non_coherent_atom() const { return info_.props.limits.nonCoherentAtomSize; }
    // Kernels convert f16 with integer operations instead of unpackHalf2x16:
    // on CPU drivers running on ARM, where lavapipe's LLVM 15 (Debian 12)
    // aborts compiling the conversion (shaders/include/common.glsl).
    bool soft_f16() const {
#if defined(__aarch64__) || defined(__arm__)
        return info_.cpu_driver;
#else
        return false;
#endif
    }

    // Sets a debug name when VK_EXT_debug_utils is on.
    void set_name(VkObjectType type, uint64_t handle, const char* name) const;

    // Maps a VkResult; marks the context lost on VK_ERROR_DEVICE_LOST.
    Result check(VkResult r, const char* what);
    bool lost() const { return lost_.load(std::memory_order_acquire); }

    // --- Submission timeline ---------------------------------------------
    // Submits one command buffer, waiting on and signalling the semaphores of
    // `sync` (may be NULL); returns its serial. Serials follow the queue's
    // order also when several threads submit.
    Result submit(VkCommandBuffer cb, Serial* out_serial, const SubmitSync* sync = nullptr);
    // Registers an application's submission that completes as `completion`
    // says (kvrt_stream_end_vulkan); returns its serial. kvrt polls the
    // semaphore or fence until it has seen the completion, then forgets it.
    Serial add_external(const ExternalCompletion& completion);
    // Waits until submission `serial` completed: KVRT_ERROR_TIMEOUT after
    // `timeout_ns`. For one of kvrt's own submissions this also covers every
    // earlier one of kvrt's own, not an application's. An application's
    // semaphore or fence is touched only under the timeline lock (it may be
    // destroyed as soon as the stream's wait succeeded), so it is polled,
    // except by `owner`, the wait of the stream that handed the recording
    // over (kvrt_stream_wait), during which the application keeps it alive.
    Result wait(Serial serial, uint64_t timeout_ns, bool owner = false);
    // Waits with the context's own timeout.
    Result wait(Serial serial) { return wait(serial, options_.wait_timeout_ns); }
    // Non-blocking: has submission `serial` completed? Also retires finished
    // submissions.
    bool is_done(Serial serial);
    // Non-blocking: retires the submissions that finished, running the
    // releases that waited for them.
    void retire();
    // Waits for every submission (used before destruction).
    Result wait_all(uint64_t timeout_ns);
    // The newest serial given out so far.
    Serial last_submitted();

    // Runs `release` once `serial` and every submission before it completed
    // (immediately if they have), on whichever thread notices it, after
    // timeline_mutex_ is released (the caller may hold a stream's or a
    // buffer's lock): a release may take only leaf locks.
    void release_after(Serial serial, std::function<void()> release);

    // Records a one-off command buffer with `record`, submits it and waits.
    // `submitted` (may be NULL) gets its serial once it is submitted, also
    // when the wait then fails: the buffers it names must outlive it.
    Result run_now(const std::function<void(VkCommandBuffer)>& record, Serial* submitted = nullptr);
    // The same without the wait: `submitted` gets the serial. Later command
    // buffers of kvrt's queue begin with a barrier on everything submitted
    // before, so they see its writes.
    Result run_async(const std::function<void(VkCommandBuffer)>& record, Serial* submitted);

    // --- Shared services --------------------------------------------------
    PipelineCache& pipelines() { return *pipelines_; }

    // A host-visible buffer for one staged copy (taken from the context's
    // pool, so threads copying at once each get their own).
    struct Staging {
        VkBuffer buffer = VK_NULL_HANDLE;
        VkDeviceMemory memory = VK_NULL_HANDLE;
        void* mapped = nullptr;
        uint64_t size = 0;
        uint64_t bytes = 0;  // device memory it holds
        bool coherent = true;
    };
    // Takes a staging buffer of at least `size` bytes.
    Result take_staging(uint64_t size, Staging* out);
    // Gives it back. `idle`: no submitted copy may still use it; otherwise it
    // is destroyed once every submission so far completed.
    void give_staging(const Staging& s, bool idle);
    // For non-coherent staging memory: flush host writes (`to_device`) or
    // invalidate before host reads.
    Result sync_staging(const Staging& s, bool to_device);

    // The streams of the context, locked for as long as the returned list
    // lives (a range-for over streams() holds the lock for the loop): buffer,
    // cache and memory destruction reach every stream through it. The loop
    // body may call the streams' own functions, but nothing that creates or
    // destroys a stream.
    class StreamList {
    public:
        StreamList(std::mutex& m, const std::vector<Stream*>& v) : lock_(m), v_(v) {}
        std::vector<Stream*>::const_iterator begin() const { return v_.begin(); }
        std::vector<Stream*>::const_iterator end() const { return v_.end(); }

    private:
        std::unique_lock<std::mutex> lock_;
        const std::vector<Stream*>& v_;
    };
    StreamList streams() { return StreamList(streams_mutex_, streams_); }
    void add_stream(Stream* s);
    void remove_stream(Stream* s);

    // Device-memory accounting and counters for kvrt_context_get_stats
    // (atomics: any thread, no lock).
    void track_device_bytes(int64_t delta);
    void fill_stats(kvrt_context_stats* out) const;
    uint64_t validation_errors() const { return validation_errors_.load(); }

private:
    Context() = default;
    Result init_common(const kvrt_pipeline_cache_desc* pipeline_cache);
    // At destruction, after the bounded wait failed: waits without a bound
    // for kvrt's submissions; false if an application's submission of
    // kvrt's commands is still pending (its objects must then be leaked).
    bool wait_idle_for_destruction();
    Result create_device(size_t device_index, const std::vector<PhysicalDeviceInfo>& devices);

    static VkBool32 VKAPI_PTR debug_callback(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                             VkDebugUtilsMessageTypeFlagsEXT types,
                                             const VkDebugUtilsMessengerCallbackDataEXT* data,
                                             void* user);

    ContextOptions options_;
    Loader loader_;
    InstanceFns ifn_;
    DeviceFns dfn_;
    VkInstance instance_ = VK_NULL_HANDLE;
    VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
    VkDevice device_ = VK_NULL_HANDLE;
    VkQueue queue_ = VK_NULL_HANDLE;
    uint32_t queue_family_ = 0;
    PhysicalDeviceInfo info_;
    FeatureSet enabled_;
    VkPhysicalDeviceMemoryProperties memory_{};
    uint64_t max_binding_ = 0;
    bool imported_ = false;
    bool debug_utils_ = false;
    VkExternalMemoryHandleTypeFlags export_types_ = 0;
    VkExternalMemoryHandleTypeFlags export_dedicated_ = 0;
    std::atomic<bool> lost_{false};

    // Imported contexts may share the queue with the app.
    void (*app_lock_queue_)(void*) = nullptr;
    void (*app_unlock_queue_)(void*) = nullptr;
    void* app_queue_user_ = nullptr;

    // --- The timeline: everything below up to completed_ is guarded by
    // timeline_mutex_ (queue.cpp). Functions named *_locked expect it held.
    using Releases = std::vector<std::function<void()>>;
    std::mutex timeline_mutex_;
    // One of kvrt's fences. A fence is reset and reused only when no thread
    // waits on it: a waiter that finds it retired meanwhile recycles it.
    struct Fence {
        VkFence handle = VK_NULL_HANDLE;
        uint32_t waiters = 0;   // threads in vkWaitForFences on it
        bool retired = false;   // its submission is done; recycle when no waiter
    };
    // In-flight submissions, oldest first; an entry leaves when it and all
    // before it completed (the watermark completed_).
    struct InFlight {
        Serial serial = 0;
        Fence* fence = nullptr;          // kvrt's own
        bool external = false;
        ExternalCompletion completion;   // the application's, while not done
        bool done = false;
    };
    InFlight* find_in_flight_locked(Serial serial);
    // Polls one entry (and, for an own fence, marks earlier own ones done).
    void poll_locked(InFlight& f);
    void mark_done_locked(InFlight& f);
    void mark_own_done_through_locked(Serial serial);
    void recycle_locked(Fence* fence);
    // Polls what is in flight, advances the watermark and moves the releases
    // it allows into `ready` (run them after unlocking).
    void retire_locked(Releases* ready);
    Result wait_external_locked(std::unique_lock<std::mutex>& lock, Serial serial, uint64_t timeout_ns,
                                bool owner, Releases* ready);
    std::deque<InFlight> in_flight_;
    std::deque<Fence> fences_;          // every fence made (stable addresses)
    std::vector<Fence*> free_fences_;   // unsignalled, ready for a submission
    struct Pending {
        Serial serial;
        std::function<void()> release;
    };
    std::deque<Pending> releases_;
    Serial next_serial_ = 1;
    // Written under timeline_mutex_; read without it for the fast paths.
    std::atomic<Serial> completed_{0};

    // One-off command buffers (run_now) come from one pool: oneoff_mutex_
    // guards it (allocation, recording, freeing).
    std::mutex oneoff_mutex_;
    VkCommandPool oneoff_pool_ = VK_NULL_HANDLE;
    // Idle staging buffers, under staging_mutex_.
    std::mutex staging_mutex_;
    std::vector<Staging> staging_pool_;
    void destroy_staging(const Staging& s);

    std::unique_ptr<PipelineCache> pipelines_;
    std::mutex streams_mutex_;
    std::vector<Stream*> streams_;

    std::atomic<int64_t> device_bytes_{0};
    std::atomic<int64_t> peak_device_bytes_{0};
    std::atomic<uint64_t> submissions_{0};
    std::atomic<uint64_t> validation_errors_{0};
    std::atomic<uint64_t> validation_warnings_{0};
};

// Lists the devices of a temporary instance (kvrt_enumerate_devices).
Result enumerate_devices(std::vector<PhysicalDeviceInfo>* out);

}  // namespace kvrt::vk
