// A stream: one command buffer recorded by ops, submitted to the context's
// queue and waited for, with barriers derived from what each dispatch reads
// and writes, and optional GPU timestamps per op. A stream can also record into
// an application's command buffer, which the application submits itself
// (kvrt_stream_begin_vulkan / kvrt_stream_end_vulkan).
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/result.hpp"
#include "vk/context.hpp"
#include "vk/pipeline.hpp"

namespace kvrt::vk {

class Buffer;

// One storage binding of a dispatch (a whole piece of a buffer is bound), or a
// range a transfer command touches: [offset, offset + size) of the piece.
struct BufferUse {
    const Buffer* buffer = nullptr;
    size_t piece = 0;
    uint64_t offset = 0;
    uint64_t size = 0;
    bool write = false;
};

class Stream {
public:
    static Result create(Context& ctx, bool timestamps, uint32_t max_timings, const char* label,
                         std::unique_ptr<Stream>* out);
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;
    ~Stream();

    Context& context() const { return ctx_; }

    Result begin();
    // Submits the recording; with `sync`, the submission also waits on and
    // signals the application's semaphores. KVRT_ERROR_UNSUPPORTED (still
    // recording, nothing changed) for semaphore values without timeline
    // semaphores; KVRT_ERROR_INVALID_STATE (nothing changed) while recording
    // into an application's command buffer.
    Result submit(const SubmitSync* sync = nullptr);
    Result wait(uint64_t timeout_ns);

    // Starts recording into the application's command buffer `cb` (in the
    // recording state, of the context's queue family).
    Result begin_external(VkCommandBuffer cb);
    // Ends recording into the application's command buffer: the recording
    // counts as submitted and completes as `completion` says. NULL drops it
    // and rolls back what it changed. KVRT_ERROR_UNSUPPORTED (dropped) for a
    // semaphore without timeline semaphores.
    Result end_external(const ExternalCompletion* completion);
    // Copies the timings of the last completed submission (kvrt_stream_get_timings).
    Result timings(kvrt_timing* out, uint32_t* count);

    bool recording() const { return state_ == State::Recording; }
    // Drops the current recording (running its undos); a no-op when not recording.
    void abort();
    // Fails with KVRT_ERROR_INVALID_STATE unless recording; ops call it first.
    Result require_recording() const;

    // Brackets the commands of one op for timing. Ops nest at most one level.
    void begin_op(const char* label);
    void end_op();

    // Records a dispatch of `pipeline` with `uses` bound to bindings 0..n-1.
    // A failure (descriptor allocation) marks the recording as broken: submit
    // then fails and drops it.
    Result dispatch(const Pipeline& pipeline, const BufferUse* uses, uint32_t n_uses,
                    const void* push, uint32_t groups_x, uint32_t groups_y = 1, uint32_t groups_z = 1);

    // Declares accesses made by commands recorded directly on cmd() (copies,
    // fills), inserting a barrier first when they depend on earlier work.
    void track(const BufferUse* uses, uint32_t n_uses);
    // The command buffer being recorded: the stream's own, or the
    // application's between begin_external and end_external.
    VkCommandBuffer cmd() const { return rec_; }

    // Copies `size` bytes of host data into memory that the kernels of this
    // recording can read (a per-stream arena, recycled by the next begin()), and
    // describes where it is. Fails for sizes above the largest binding.
    Result upload(const void* data, uint64_t size, BufferUse* out);
    // Reserves `size` bytes of that memory and returns its mapping for the
    // caller to fill before submission.
    Result reserve(uint64_t size, BufferUse* out, void** mapped);
    // Reserves `size` bytes of device memory for intermediate results of this
    // recording's kernels (recycled by the next begin()).
    Result scratch(uint64_t size, BufferUse* out);

    // Called (from any thread) when a buffer is destroyed: a recording that
    // uses it can no longer be submitted, and keeps `release` (the buffer's
    // memory; may be null) until it is dropped, so the memory outlives the
    // command buffer that names it.
    void forget_buffer(const Buffer* buffer, const std::shared_ptr<void>& release);

    // Registers an undo for metadata of `owner` (a cache, a memory) that an op
    // changed while recording: run (newest first) if this recording is dropped
    // or its submission fails, discarded once the queue accepted it.
    void on_abort(const void* owner, std::function<void()> undo);

    // Makes the current recording unsubmittable (submit drops it and fails
    // with KVRT_ERROR_INVALID_STATE, saying `why`): for an op that failed
    // after recording commands that must not run without their metadata.
    void mark_broken(const char* why);
    // Drops the undos of an owner that is being destroyed (any thread).
    void forget_owner(const void* owner);

private:
    enum class State { Idle, Recording, Pending };
    struct Access {
        VkBuffer buffer;
        uint64_t offset, size;
        bool write;
    };
    struct Op {
        const char* label;
        uint32_t query;  // first of its two timestamps, or UINT32_MAX
    };

    explicit Stream(Context& ctx);
    // Resets pools and arenas and records the first commands into `rec_`.
    Result start_recording();
    // Flushes host writes of the recording and records its last barriers
    // (for the application's later work, for host reads); a broken recording
    // or a failure drops it. With mutex_ held.
    Result finish_recording_locked();
    // The recording was handed over as `serial`. With mutex_ held.
    void handed_over_locked(Serial serial, bool external);
    void drop_recording_locked();
    Result alloc_set(const Pipeline& pipeline, VkDescriptorSet* out);

    Context& ctx_;
    // Threads other than the stream's own reach a stream only through
    // Context::streams() (forget_buffer, forget_owner). mutex_ guards what
    // they touch: state_ and used_ (written under it, read by the stream's
    // own thread without it), broken_, broken_why_, holds_ and aborts_. A
    // submission holds it from the last check of broken_ until the buffers
    // are marked used, so a buffer destroyed meanwhile is either refused or
    // released after the submission.
    mutable std::mutex mutex_;
    State state_ = State::Idle;
    VkCommandPool pool_ = VK_NULL_HANDLE;
    VkCommandBuffer cb_ = VK_NULL_HANDLE;   // the stream's own
    VkCommandBuffer rec_ = VK_NULL_HANDLE;  // the one being recorded
    bool external_ = false;                 // rec_ is the application's
    std::vector<VkDescriptorPool> desc_pools_;
    size_t desc_pool_cur_ = 0;
    VkQueryPool queries_ = VK_NULL_HANDLE;
    uint32_t max_timings_ = 0;
    uint32_t ops_timed_ = 0;
    int op_depth_ = 0;
    std::vector<Op> ops_;
    std::vector<kvrt_timing> last_timings_;
    std::vector<Access> since_barrier_;
    std::vector<const Buffer*> used_;
    bool wrote_ = false;
    bool broken_ = false;
    std::string broken_why_;
    std::vector<std::shared_ptr<void>> holds_;  // releases of buffers destroyed mid-recording
    struct Abort {
        const void* owner;
        std::function<void()> undo;
    };
    std::vector<Abort> aborts_;
    Serial serial_ = 0;
    std::string label_;
    struct ArenaChunk {
        std::unique_ptr<Buffer> buffer;
        uint64_t used = 0;
    };
    struct Arena {
        std::vector<ArenaChunk> chunks;
        size_t cur = 0;
    };
    Result take(Arena& arena, uint64_t size, bool device, BufferUse* out);
    Arena upload_;
    Arena scratch_;
};

}  // namespace kvrt::vk
