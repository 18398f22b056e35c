// A kvrt context: one Vulkan device and queue (created or imported), the
// submission timeline, deferred releases, staging and the pipeline cache.
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

// Options common to created and imported contexts, read from kvrt_context_desc
// and the environment.
struct ContextOptions {
    bool validation = false;
    bool force_staging = false;
    bool portable_kernels = false;
    std::string device_selector;
    Logger logger;
    uint64_t wait_timeout_ns = 60ull * 1000 * 1000 * 1000;
    uint64_t max_binding_bytes = 0;

    // Reads `desc` (may be NULL) and the KVRT_DEVICE / KVRT_VALIDATION
    // environment variables.
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

    // Sets a debug name when VK_EXT_debug_utils is on.
    void set_name(VkObjectType type, uint64_t handle, const char* name) const;

    // Maps a VkResult; marks the context lost on VK_ERROR_DEVICE_LOST.
    Result check(VkResult r, const char* what);
    bool lost() const { return lost_; }

    // --- Submission timeline ---------------------------------------------
    // Submits one command buffer, waiting on and signalling the semaphores of
    // `sync` (may be NULL); returns its serial.
    Result submit(VkCommandBuffer cb, Serial* out_serial, const SubmitSync* sync = nullptr);
    // Registers an application's submission that completes as `completion`
    // says (kvrt_stream_end_vulkan); returns its serial. kvrt polls the
    // semaphore or fence until it has seen the completion, then forgets it.
    Serial add_external(const ExternalCompletion& completion);
    // Waits until submission `serial` completed: KVRT_ERROR_TIMEOUT after
    // `timeout_ns`. For one of kvrt's own submissions this also covers every
    // earlier one of kvrt's own, not an application's.
    Result wait(Serial serial, uint64_t timeout_ns);
    // Waits with the context's own timeout.
    Result wait(Serial serial) { return wait(serial, options_.wait_timeout_ns); }
    // Non-blocking: has submission `serial` completed? Also retires finished
    // submissions.
    bool is_done(Serial serial);
    // Waits for every submission (used before destruction).
    Result wait_all(uint64_t timeout_ns);
    Serial last_submitted() const { return next_serial_ - 1; }

    // Runs `release` once `serial` and every submission before it completed
    // (immediately if they have).
    void release_after(Serial serial, std::function<void()> release);

    // Records a one-off command buffer with `record`, submits it and waits.
    Result run_now(const std::function<void(VkCommandBuffer)>& record);

    // --- Shared services --------------------------------------------------
    PipelineCache& pipelines() { return *pipelines_; }

    // Staging buffer of at least `size` bytes (grown on demand, kept).
    Result staging(uint64_t size, VkBuffer* out_buffer, void** out_mapped, bool* out_coherent);
    // For non-coherent staging memory: flush host writes (`to_device`) or
    // invalidate before host reads.
    Result sync_staging(bool to_device);

    // Streams register themselves so buffer destruction can reach them.
    void add_stream(Stream* s);
    void remove_stream(Stream* s);
    const std::vector<Stream*>& streams() const { return streams_; }

    // Device-memory accounting and counters for kvrt_context_get_stats.
    void track_device_bytes(int64_t delta);
    void fill_stats(kvrt_context_stats* out) const;
    uint64_t validation_errors() const { return validation_errors_.load(); }

private:
    Context() = default;
    Result init_common(const kvrt_pipeline_cache_desc* pipeline_cache);
    Result create_device(size_t device_index, const std::vector<PhysicalDeviceInfo>& devices);
    void retire();
    void lock_queue();
    void unlock_queue();

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
    bool lost_ = false;

    // Imported contexts may share the queue with the app.
    void (*app_lock_queue_)(void*) = nullptr;
    void (*app_unlock_queue_)(void*) = nullptr;
    void* app_queue_user_ = nullptr;
    std::mutex queue_mutex_;

    // In-flight submissions, oldest first; an entry leaves when it and all
    // before it completed (the watermark completed_).
    struct InFlight {
        Serial serial = 0;
        VkFence fence = VK_NULL_HANDLE;  // kvrt's own; recycled once done
        bool external = false;
        ExternalCompletion completion;   // the application's, while not done
        bool done = false;
    };
    InFlight* find_in_flight(Serial serial);
    // Polls one entry (and, for an own fence, marks earlier own ones done).
    void poll(InFlight& f);
    void mark_done(InFlight& f);
    void mark_own_done_through(Serial serial);
    std::deque<InFlight> in_flight_;
    std::vector<VkFence> free_fences_;
    struct Pending {
        Serial serial;
        std::function<void()> release;
    };
    std::deque<Pending> releases_;
    Serial next_serial_ = 1;
    Serial completed_ = 0;

    VkCommandPool oneoff_pool_ = VK_NULL_HANDLE;
    VkBuffer staging_buffer_ = VK_NULL_HANDLE;
    VkDeviceMemory staging_memory_ = VK_NULL_HANDLE;
    void* staging_mapped_ = nullptr;
    uint64_t staging_size_ = 0;
    bool staging_coherent_ = true;

    std::unique_ptr<PipelineCache> pipelines_;
    std::vector<Stream*> streams_;

    int64_t device_bytes_ = 0;
    int64_t peak_device_bytes_ = 0;
    uint64_t submissions_ = 0;
    std::atomic<uint64_t> validation_errors_{0};
    std::atomic<uint64_t> validation_warnings_{0};
};

// Lists the devices of a temporary instance (kvrt_enumerate_devices).
Result enumerate_devices(std::vector<PhysicalDeviceInfo>* out);

}  // namespace kvrt::vk
