#include "vk/stream.hpp"

#include <algorithm>
#include <cstring>

#include "core/checked.hpp"

#include "core/fault.hpp"
#include "vk/barrier.hpp"
#include "vk/buffer.hpp"

namespace kvrt::vk {

namespace {
constexpr uint32_t kSetsPerPool = 256;
constexpr uint32_t kDescriptorsPerPool = kSetsPerPool * 8;
}  // namespace

Stream::Stream(Context& ctx) : ctx_(ctx) {}

Result Stream::take(Arena& arena, uint64_t size, bool device, BufferUse* out) {
    KVRT_TRY(require_recording());
    // Chunks start small (a tiny cache's stream needs little) and double.
    constexpr uint64_t kFirstChunk = 256ull << 10;
    const uint64_t need = align_up(size ? size : 4, 256);
    if (need > ctx_.max_binding_bytes())
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "%llu bytes of %s exceed the largest binding",
                    static_cast<unsigned long long>(size), device ? "intermediate results" : "host data");
    auto& chunks = arena.chunks;
    while (arena.cur < chunks.size() && chunks[arena.cur].used + need > chunks[arena.cur].buffer->size()) ++arena.cur;
    if (arena.cur == chunks.size()) {
        ArenaChunk c;
        const uint64_t grown = chunks.empty() ? kFirstChunk : 2 * chunks.back().buffer->size();
        const uint64_t bytes = std::min(ctx_.max_binding_bytes(), std::max(grown, need));
        KVRT_TRY(Buffer::create(ctx_, bytes, bytes, device ? "kvrt stream scratch" : "kvrt stream upload", &c.buffer,
                                device ? MemoryKind::Device : MemoryKind::Upload));
        chunks.push_back(std::move(c));
    }
    ArenaChunk& c = chunks[arena.cur];
    *out = BufferUse{c.buffer.get(), 0, c.used, size, false};
    c.used += need;
    return KVRT_SUCCESS;
}

Result Stream::reserve(uint64_t size, BufferUse* out, void** mapped) {
    KVRT_TRY(take(upload_, size, false, out));
    *mapped = static_cast<uint8_t*>(out->buffer->piece(0).mapped) + out->offset;
    return KVRT_SUCCESS;
}

Result Stream::scratch(uint64_t size, BufferUse* out) { return take(scratch_, size, true, out); }

Result Stream::upload(const void* data, uint64_t size, BufferUse* out) {
    void* mapped = nullptr;
    KVRT_TRY(reserve(size, out, &mapped));
    if (size) std::memcpy(mapped, data, static_cast<size_t>(size));
    return KVRT_SUCCESS;
}

Result Stream::create(Context& ctx, bool timestamps, uint32_t max_timings, const char* label,
                      std::unique_ptr<Stream>* out) {
    std::unique_ptr<Stream> s(new Stream(ctx));
    if (label) s->label_ = label;
    const DeviceFns& fn = ctx.fn();
    VkCommandPoolCreateInfo pci{};
    pci.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO;
    pci.flags = VK_COMMAND_POOL_CREATE_TRANSIENT_BIT;
    pci.queueFamilyIndex = ctx.queue_family();
    KVRT_TRY(ctx.check(fn.vkCreateCommandPool(ctx.device(), &pci, nullptr, &s->pool_), "vkCreateCommandPool"));
    VkCommandBufferAllocateInfo ai{};
    ai.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
    ai.commandPool = s->pool_;
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 1;
    KVRT_TRY(ctx.check(fn.vkAllocateCommandBuffers(ctx.device(), &ai, &s->cb_), "vkAllocateCommandBuffers"));
    s->rec_ = s->cb_;
    if (timestamps) {
        if (ctx.info().timestamp_valid_bits == 0)
            return fail(KVRT_ERROR_UNSUPPORTED, "the device's compute queue has no timestamps");
        s->max_timings_ = max_timings ? max_timings : 256;
        VkQueryPoolCreateInfo qci{};
        qci.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO;
        qci.queryType = VK_QUERY_TYPE_TIMESTAMP;
        qci.queryCount = 2 * s->max_timings_;
        KVRT_TRY(ctx.check(fn.vkCreateQueryPool(ctx.device(), &qci, nullptr, &s->queries_), "vkCreateQueryPool"));
    }
    ctx.set_name(VK_OBJECT_TYPE_COMMAND_BUFFER, object_bits(s->cb_), label);
    ctx.add_stream(s.get());
    *out = std::move(s);
    return KVRT_SUCCESS;
}

void Stream::forget_owner(const void* owner) {
    std::lock_guard<std::mutex> lock(mutex_);
    aborts_.erase(std::remove_if(aborts_.begin(), aborts_.end(), [owner](const Abort& a) { return a.owner == owner; }),
                  aborts_.end());
}

void Stream::on_abort(const void* owner, std::function<void()> undo) {
    std::lock_guard<std::mutex> lock(mutex_);
    aborts_.push_back({owner, std::move(undo)});
}

Stream::~Stream() {
    {
        // A recording that is never submitted is dropped: undo what it
        // changed. Under the lock, so an owner destroyed on another thread
        // meanwhile either removed its undos first or waits for them.
        std::lock_guard<std::mutex> lock(mutex_);
        std::vector<Abort> aborts = std::move(aborts_);
        aborts_.clear();
        for (auto it = aborts.rbegin(); it != aborts.rend(); ++it) it->undo();
        if (state_ == State::Recording) state_ = State::Idle;
    }
    // From here on no other thread reaches this stream.
    ctx_.remove_stream(this);
    Context& ctx = ctx_;
    VkCommandPool pool = pool_;
    VkQueryPool queries = queries_;
    std::vector<VkDescriptorPool> desc_pools = std::move(desc_pools_);
    const Serial serial = state_ == State::Pending ? serial_ : 0;
    std::vector<std::shared_ptr<void>> holds = std::move(holds_);
    ctx.release_after(serial, [&ctx, pool, queries, desc_pools, holds]() mutable {
        const DeviceFns& fn = ctx.fn();
        for (VkDescriptorPool p : desc_pools) fn.vkDestroyDescriptorPool(ctx.device(), p, nullptr);
        if (queries) fn.vkDestroyQueryPool(ctx.device(), queries, nullptr);
        if (pool) fn.vkDestroyCommandPool(ctx.device(), pool, nullptr);  // frees cb_
        holds.clear();  // buffers destroyed mid-recording go after the command buffer
    });
}

Result Stream::begin() {
    KVRT_TRY(start_recording());
    return KVRT_SUCCESS;
}

Result Stream::begin_external(VkCommandBuffer cb) {
    if (state_ == State::Recording) return fail(KVRT_ERROR_INVALID_STATE, "the stream is already recording");
    rec_ = cb;
    external_ = true;
    const Result r = start_recording();
    if (r != KVRT_SUCCESS) {
        rec_ = cb_;
        external_ = false;
    }
    return r;
}

Result Stream::start_recording() {
    if (state_ == State::Recording) return fail(KVRT_ERROR_INVALID_STATE, "the stream is already recording");
    if (ctx_.lost()) return fail(KVRT_ERROR_DEVICE_LOST, "the device was lost");
    // Refused until the submission is waited for, finished or not: whether a
    // begin succeeds must not depend on how fast the device is, and the wait
    // is what reports the submission's errors and timings.
    if (state_ == State::Pending)
        return fail(KVRT_ERROR_INVALID_STATE,
                    "the stream's last submission has not been waited for; call kvrt_stream_wait first");
    const DeviceFns& fn = ctx_.fn();
    KVRT_TRY(ctx_.check(fn.vkResetCommandPool(ctx_.device(), pool_, 0), "vkResetCommandPool"));
    for (VkDescriptorPool p : desc_pools_)
        KVRT_TRY(ctx_.check(fn.vkResetDescriptorPool(ctx_.device(), p, 0), "vkResetDescriptorPool"));
    desc_pool_cur_ = 0;
    for (Arena* a : {&upload_, &scratch_}) {
        for (ArenaChunk& c : a->chunks) c.used = 0;
        a->cur = 0;
    }
    if (!external_) {
        rec_ = cb_;
        VkCommandBufferBeginInfo bi{};
        bi.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
        bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
        KVRT_TRY(ctx_.check(fn.vkBeginCommandBuffer(cb_, &bi), "vkBeginCommandBuffer"));
    }
    // In an application's command buffer this also makes its earlier compute
    // and transfer writes visible to kvrt's operations.
    begin_barrier(fn, rec_);
    if (queries_) fn.vkCmdResetQueryPool(rec_, queries_, 0, 2 * max_timings_);
    ops_.clear();
    ops_timed_ = 0;
    op_depth_ = 0;
    since_barrier_.clear();
    wrote_ = false;
    std::lock_guard<std::mutex> lock(mutex_);
    used_.clear();
    aborts_.clear();
    broken_ = false;
    broken_why_.clear();
    state_ = State::Recording;
    return KVRT_SUCCESS;
}

Result Stream::require_recording() const {
    if (state_ != State::Recording)
        return fail(KVRT_ERROR_INVALID_STATE, "the stream is not recording; call kvrt_stream_begin first");
    return KVRT_SUCCESS;
}

void Stream::mark_broken(const char* why) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!broken_) {
        broken_ = true;
        broken_why_ = why;
    }
}

void Stream::forget_buffer(const Buffer* buffer, const std::shared_ptr<void>& release) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (state_ != State::Recording) return;
    if (std::find(used_.begin(), used_.end(), buffer) == used_.end()) return;
    if (!broken_) {
        broken_ = true;
        broken_why_ = "a buffer used by the recorded commands was destroyed before submission";
    }
    if (release) holds_.push_back(release);
}

void Stream::abort() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (state_ == State::Recording) drop_recording_locked();
}

void Stream::drop_recording_locked() {
    // Resetting the pool returns the command buffer to the initial state
    // without ending it (ending it would reference destroyed buffers). An
    // application's command buffer is the application's to reset.
    ctx_.check(ctx_.fn().vkResetCommandPool(ctx_.device(), pool_, 0), "vkResetCommandPool");
    holds_.clear();
    std::vector<Abort> aborts = std::move(aborts_);
    aborts_.clear();
    for (auto it = aborts.rbegin(); it != aborts.rend(); ++it) it->undo();
    state_ = State::Idle;
    rec_ = cb_;
    external_ = false;
}

Result Stream::finish_recording_locked() {
    if (broken_) {
        const std::string why = broken_why_;
        drop_recording_locked();
        return fail(KVRT_ERROR_INVALID_STATE, "the recording was dropped: %s", why.c_str());
    }
    for (size_t i = 0; i < upload_.chunks.size() && i <= upload_.cur; ++i) {
        const Result fr = upload_.chunks[i].buffer->flush_mapped();
        if (fr != KVRT_SUCCESS) {
            drop_recording_locked();
            return fr;
        }
    }
    const DeviceFns& fn = ctx_.fn();
    if (external_) handover_barrier(fn, rec_);
    if (wrote_) host_read_barrier(fn, rec_);
    return KVRT_SUCCESS;
}

void Stream::handed_over_locked(Serial serial, bool external) {
    aborts_.clear();
    for (const Buffer* b : used_) const_cast<Buffer*>(b)->mark_used(serial, external);
    serial_ = serial;
    state_ = State::Pending;
    last_timings_.clear();
    rec_ = cb_;
    external_ = false;
}

Result Stream::submit(const SubmitSync* sync) {
    KVRT_TRY(require_recording());
    if (external_)
        return fail(KVRT_ERROR_INVALID_STATE,
                    "the stream records into an application's command buffer; end it with kvrt_stream_end_vulkan");
    if (sync && sync->has_values() && !ctx_.timeline())
        return fail(KVRT_ERROR_UNSUPPORTED,
                    "semaphore values need timeline semaphores, which are not enabled on the device; nothing was "
                    "submitted and the stream is still recording");
    std::lock_guard<std::mutex> lock(mutex_);
    KVRT_TRY(finish_recording_locked());
    Result r = ctx_.check(ctx_.fn().vkEndCommandBuffer(cb_), "vkEndCommandBuffer");
    if (r != KVRT_SUCCESS) {
        drop_recording_locked();
        return r;
    }
    Serial serial = 0;
    r = ctx_.submit(cb_, &serial, sync);
    if (r != KVRT_SUCCESS) {
        drop_recording_locked();
        return r;
    }
    handed_over_locked(serial, false);
    return KVRT_SUCCESS;
}

Result Stream::end_external(const ExternalCompletion* completion) {
    if (state_ != State::Recording || !external_)
        return fail(KVRT_ERROR_INVALID_STATE,
                    "the stream is not recording into an application's command buffer (kvrt_stream_begin_vulkan)");
    std::lock_guard<std::mutex> lock(mutex_);
    if (!completion) {
        drop_recording_locked();
        return KVRT_SUCCESS;
    }
    if (completion->semaphore && !ctx_.timeline()) {
        drop_recording_locked();
        return fail(KVRT_ERROR_UNSUPPORTED,
                    "completion by a timeline semaphore, but timeline semaphores are not enabled on the device; "
                    "the recording was dropped (use a fence)");
    }
    KVRT_TRY(finish_recording_locked());
    handed_over_locked(ctx_.add_external(*completion), true);
    return KVRT_SUCCESS;
}

Result Stream::wait(uint64_t timeout_ns) {
    if (state_ != State::Pending) return KVRT_SUCCESS;
    KVRT_TRY(ctx_.wait(serial_, timeout_ns, /*owner=*/true));
    {
        std::lock_guard<std::mutex> lock(mutex_);
        state_ = State::Idle;
    }
    if (queries_ && ops_timed_ > 0) {
        std::vector<uint64_t> stamps(2 * ops_timed_);
        KVRT_TRY(ctx_.check(ctx_.fn().vkGetQueryPoolResults(
                                ctx_.device(), queries_, 0, 2 * ops_timed_, stamps.size() * sizeof(uint64_t),
                                stamps.data(), sizeof(uint64_t), VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT),
                            "vkGetQueryPoolResults"));
        const uint32_t bits = ctx_.info().timestamp_valid_bits;
        const uint64_t mask = bits >= 64 ? ~0ull : ((1ull << bits) - 1);
        const double period = ctx_.info().props.limits.timestampPeriod;
        for (const Op& op : ops_) {
            if (op.query == UINT32_MAX) continue;
            const uint64_t t0 = stamps[op.query] & mask, t1 = stamps[op.query + 1] & mask;
            const uint64_t ticks = (t1 - t0) & mask;
            last_timings_.push_back(
                {KVRT_STRUCT_TYPE_TIMING, nullptr, op.label, static_cast<uint64_t>(static_cast<double>(ticks) * period)});
        }
    }
    return KVRT_SUCCESS;
}

Result Stream::timings(kvrt_timing* out, uint32_t* count) {
    if (!queries_) return fail(KVRT_ERROR_INVALID_STATE, "the stream was created without KVRT_STREAM_TIMESTAMPS");
    if (state_ != State::Idle)
        return fail(KVRT_ERROR_INVALID_STATE, "timings are available after kvrt_stream_wait succeeded");
    const uint32_t n = static_cast<uint32_t>(last_timings_.size());
    if (!out) {
        *count = n;
        return KVRT_SUCCESS;
    }
    const uint32_t k = std::min(*count, n);
    std::copy(last_timings_.begin(), last_timings_.begin() + k, out);
    *count = k;
    return KVRT_SUCCESS;
}

void Stream::begin_op(const char* label) {
    if (op_depth_++ > 0) return;
    Op op{label, UINT32_MAX};
    if (queries_ && ops_timed_ < max_timings_) {
        op.query = 2 * ops_timed_++;
        ctx_.fn().vkCmdWriteTimestamp(rec_, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, queries_, op.query);
    }
    ops_.push_back(op);
}

void Stream::end_op() {
    if (--op_depth_ > 0) return;
    const Op& op = ops_.back();
    if (op.query != UINT32_MAX)
        ctx_.fn().vkCmdWriteTimestamp(rec_, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, queries_, op.query + 1);
}

void Stream::track(const BufferUse* uses, uint32_t n_uses) {
    bool hazard = false;
    for (uint32_t i = 0; i < n_uses && !hazard; ++i) {
        const Buffer::Piece& p = uses[i].buffer->piece(uses[i].piece);
        const uint64_t off = p.base + uses[i].offset;
        for (const Access& a : since_barrier_) {
            if (a.buffer != p.buffer || !(a.write || uses[i].write)) continue;
            const bool overlap = off < a.offset + a.size && a.offset < off + uses[i].size;
            if (overlap) {
                hazard = true;
                break;
            }
        }
    }
    if (hazard) {
        work_barrier(ctx_.fn(), rec_);
        since_barrier_.clear();
    }
    for (uint32_t i = 0; i < n_uses; ++i) {
        const BufferUse& u = uses[i];
        const Buffer::Piece& p = u.buffer->piece(u.piece);
        since_barrier_.push_back({p.buffer, p.base + u.offset, u.size, u.write});
        wrote_ = wrote_ || u.write;
        if (std::find(used_.begin(), used_.end(), u.buffer) == used_.end()) {
            std::lock_guard<std::mutex> lock(mutex_);
            used_.push_back(u.buffer);
        }
    }
}

Result Stream::alloc_set(const Pipeline& pipeline, VkDescriptorSet* out) {
    const DeviceFns& fn = ctx_.fn();
    while (true) {
        if (desc_pool_cur_ == desc_pools_.size()) {
            VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, kDescriptorsPerPool};
            VkDescriptorPoolCreateInfo ci{};
            ci.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO;
            ci.maxSets = kSetsPerPool;
            ci.poolSizeCount = 1;
            ci.pPoolSizes = &size;
            VkDescriptorPool pool = VK_NULL_HANDLE;
            KVRT_TRY(ctx_.check(fn.vkCreateDescriptorPool(ctx_.device(), &ci, nullptr, &pool), "vkCreateDescriptorPool"));
            desc_pools_.push_back(pool);
        }
        VkDescriptorSetAllocateInfo ai{};
        ai.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO;
        ai.descriptorPool = desc_pools_[desc_pool_cur_];
        ai.descriptorSetCount = 1;
        ai.pSetLayouts = &pipeline.set_layout;
        const VkResult r = fn.vkAllocateDescriptorSets(ctx_.device(), &ai, out);
        if (r == VK_SUCCESS) return KVRT_SUCCESS;
        if (r != VK_ERROR_OUT_OF_POOL_MEMORY && r != VK_ERROR_FRAGMENTED_POOL)
            return ctx_.check(r, "vkAllocateDescriptorSets");
        ++desc_pool_cur_;  // this pool is full: move on to the next (or a new one)
    }
}

Result Stream::dispatch(const Pipeline& pipeline, const BufferUse* uses, uint32_t n_uses, const void* push,
                        uint32_t groups_x, uint32_t groups_y, uint32_t groups_z) {
    KVRT_TRY(require_recording());
    if (n_uses != pipeline.n_bindings)
        return fail(KVRT_ERROR_INTERNAL, "dispatch of '%s' with %u bindings, pipeline has %u", pipeline.label,
                    n_uses, pipeline.n_bindings);
    if (groups_x == 0 || groups_y == 0 || groups_z == 0) return KVRT_SUCCESS;
    const auto& lim = ctx_.info().props.limits.maxComputeWorkGroupCount;
    if (groups_x > lim[0] || groups_y > lim[1] || groups_z > lim[2])
        return fail(KVRT_ERROR_INTERNAL, "dispatch of '%s' exceeds the workgroup count limit", pipeline.label);
    VkDescriptorSet set = VK_NULL_HANDLE;
    Result r = fault::point("dispatch recording", KVRT_ERROR_OUT_OF_DEVICE_MEMORY);
    if (r == KVRT_SUCCESS) r = alloc_set(pipeline, &set);
    if (r != KVRT_SUCCESS) {
        mark_broken("a descriptor set could not be allocated");
        return r;
    }
    VkDescriptorBufferInfo infos[16];
    VkWriteDescriptorSet writes[16];
    if (n_uses > 16) return fail(KVRT_ERROR_INTERNAL, "too many bindings");
    for (uint32_t i = 0; i < n_uses; ++i) {
        const Buffer::Piece& p = uses[i].buffer->piece(uses[i].piece);
        infos[i] = VkDescriptorBufferInfo{p.buffer, p.base, p.size};
        writes[i] = VkWriteDescriptorSet{};
        writes[i].sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET;
        writes[i].dstSet = set;
        writes[i].dstBinding = i;
        writes[i].descriptorCount = 1;
        writes[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
        writes[i].pBufferInfo = &infos[i];
    }
    const DeviceFns& fn = ctx_.fn();
    fn.vkUpdateDescriptorSets(ctx_.device(), n_uses, writes, 0, nullptr);
    // A binding makes the whole piece accessible to the kernel, and that is
    // what synchronization must cover (it is also what the validation layer
    // checks), whatever part the kernel really touches.
    BufferUse whole[16];
    for (uint32_t i = 0; i < n_uses; ++i) {
        whole[i] = uses[i];
        whole[i].offset = 0;
        whole[i].size = uses[i].buffer->piece(uses[i].piece).size;
    }
    track(whole, n_uses);
    fn.vkCmdBindPipeline(rec_, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline.pipeline);
    fn.vkCmdBindDescriptorSets(rec_, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline.layout, 0, 1, &set, 0, nullptr);
    if (pipeline.push_bytes)
        fn.vkCmdPushConstants(rec_, pipeline.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, pipeline.push_bytes, push);
    fn.vkCmdDispatch(rec_, groups_x, groups_y, groups_z);
    return KVRT_SUCCESS;
}

}  // namespace kvrt::vk
