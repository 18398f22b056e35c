// The context's submission timeline: fences, waits with timeouts, deferred
// releases, one-off command buffers and the staging buffer.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "core/fault.hpp"
#include "vk/barrier.hpp"
#include "vk/context.hpp"

namespace kvrt::vk {

void Context::lock_queue() {
    queue_mutex_.lock();
    if (app_lock_queue_) app_lock_queue_(app_queue_user_);
}

void Context::unlock_queue() {
    if (app_unlock_queue_) app_unlock_queue_(app_queue_user_);
    queue_mutex_.unlock();
}

Result Context::submit(VkCommandBuffer cb, Serial* out_serial, const SubmitSync* sync) {
    if (lost_) return fail(KVRT_ERROR_DEVICE_LOST, "the device was lost");
    if (sync && sync->has_values() && !timeline())
        return fail(KVRT_ERROR_UNSUPPORTED, "semaphore values need timeline semaphores, which the device lacks");
    KVRT_FAULT_POINT("queue submit", KVRT_ERROR_DEVICE_LOST);
    retire();
    VkFence fence = VK_NULL_HANDLE;
    if (!free_fences_.empty()) {
        fence = free_fences_.back();
        free_fences_.pop_back();
    } else {
        VkFenceCreateInfo fci{};
        fci.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO;
        KVRT_TRY(check(dfn_.vkCreateFence(device_, &fci, nullptr, &fence), "vkCreateFence"));
    }
    VkSubmitInfo si{};
    si.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO;
    si.commandBufferCount = 1;
    si.pCommandBuffers = &cb;
    VkTimelineSemaphoreSubmitInfo tsi{};
    if (sync) {
        si.waitSemaphoreCount = static_cast<uint32_t>(sync->waits.size());
        si.pWaitSemaphores = sync->waits.data();
        si.pWaitDstStageMask = sync->wait_stages.data();
        si.signalSemaphoreCount = static_cast<uint32_t>(sync->signals.size());
        si.pSignalSemaphores = sync->signals.data();
        if (sync->has_values()) {
            tsi.sType = VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO;
            tsi.waitSemaphoreValueCount = static_cast<uint32_t>(sync->wait_values.size());
            tsi.pWaitSemaphoreValues = sync->wait_values.data();
            tsi.signalSemaphoreValueCount = static_cast<uint32_t>(sync->signal_values.size());
            tsi.pSignalSemaphoreValues = sync->signal_values.data();
            si.pNext = &tsi;
        }
    }
    lock_queue();
    const VkResult r = dfn_.vkQueueSubmit(queue_, 1, &si, fence);
    unlock_queue();
    if (r != VK_SUCCESS) {
        free_fences_.push_back(fence);  // unsignalled: the submission did not happen
        return check(r, "vkQueueSubmit");
    }
    const Serial serial = next_serial_++;
    InFlight f;
    f.serial = serial;
    f.fence = fence;
    in_flight_.push_back(f);
    ++submissions_;
    *out_serial = serial;
    return KVRT_SUCCESS;
}

Serial Context::add_external(const ExternalCompletion& completion) {
    const Serial serial = next_serial_++;
    InFlight f;
    f.serial = serial;
    f.external = true;
    f.completion = completion;
    in_flight_.push_back(f);
    return serial;
}

Context::InFlight* Context::find_in_flight(Serial serial) {
    // Serials in the list increase, so a binary search finds the entry.
    auto it = std::lower_bound(in_flight_.begin(), in_flight_.end(), serial,
                               [](const InFlight& f, Serial s) { return f.serial < s; });
    return it != in_flight_.end() && it->serial == serial ? &*it : nullptr;
}

void Context::mark_done(InFlight& f) {
    if (f.done) return;
    f.done = true;
    if (f.fence) {
        if (dfn_.vkResetFences(device_, 1, &f.fence) == VK_SUCCESS) free_fences_.push_back(f.fence);
        else dfn_.vkDestroyFence(device_, f.fence, nullptr);
        f.fence = VK_NULL_HANDLE;
    }
    // The application may reuse or destroy its semaphore or fence from now on.
    f.completion = ExternalCompletion{};
}

void Context::mark_own_done_through(Serial serial) {
    // A fence signal follows every command submitted before it on the queue,
    // so kvrt's own earlier submissions are done too (not an application's,
    // which it may submit later).
    for (InFlight& f : in_flight_) {
        if (f.serial > serial) break;
        if (!f.external) mark_done(f);
    }
}

void Context::poll(InFlight& f) {
    if (f.done) return;
    VkResult r = VK_NOT_READY;
    if (!f.external) {
        r = dfn_.vkGetFenceStatus(device_, f.fence);
    } else if (f.completion.fence) {
        r = dfn_.vkGetFenceStatus(device_, f.completion.fence);
    } else {
        uint64_t value = 0;
        r = dfn_.vkGetSemaphoreCounterValue(device_, f.completion.semaphore, &value);
        if (r == VK_SUCCESS && value < f.completion.value) r = VK_NOT_READY;
    }
    if (r == VK_NOT_READY) return;
    if (r != VK_SUCCESS) {
        check(r, f.external ? "polling an application's completion" : "vkGetFenceStatus");
        return;
    }
    if (f.external) mark_done(f);
    else mark_own_done_through(f.serial);
}

void Context::retire() {
    // kvrt's own fences signal in submission order: the newest signalled one
    // settles all before it, so polling stops at the first own one not ready.
    // The application's completions are polled one by one.
    bool own_pending = false;
    for (size_t i = 0; i < in_flight_.size(); ++i) {
        InFlight& f = in_flight_[i];
        if (f.done || (own_pending && !f.external)) continue;
        poll(f);
        if (!f.external && !f.done) own_pending = true;
    }
    while (!in_flight_.empty() && in_flight_.front().done) {
        completed_ = in_flight_.front().serial;
        in_flight_.pop_front();
    }
    while (!releases_.empty() && releases_.front().serial <= completed_) {
        auto release = std::move(releases_.front().release);
        releases_.pop_front();
        release();
    }
}

bool Context::is_done(Serial serial) {
    if (serial <= completed_) return true;
    retire();
    if (serial <= completed_) return true;
    const InFlight* f = find_in_flight(serial);
    return f && f->done;
}

Result Context::wait(Serial serial, uint64_t timeout_ns) {
    if (serial == 0 || serial <= completed_) return KVRT_SUCCESS;
    if (lost_) return fail(KVRT_ERROR_DEVICE_LOST, "the device was lost");
    KVRT_FAULT_POINT("wait", KVRT_ERROR_TIMEOUT);
    InFlight* f = find_in_flight(serial);
    if (!f) {
        retire();
        if (serial <= completed_) return KVRT_SUCCESS;
        return fail(KVRT_ERROR_INTERNAL, "submission %llu is unknown", static_cast<unsigned long long>(serial));
    }
    if (f->done) return KVRT_SUCCESS;
    VkResult r;
    const char* what = "vkWaitForFences";
    if (!f->external) {
        r = dfn_.vkWaitForFences(device_, 1, &f->fence, VK_TRUE, timeout_ns);
    } else if (f->completion.fence) {
        r = dfn_.vkWaitForFences(device_, 1, &f->completion.fence, VK_TRUE, timeout_ns);
    } else {
        VkSemaphoreWaitInfo wi{};
        wi.sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO;
        wi.semaphoreCount = 1;
        wi.pSemaphores = &f->completion.semaphore;
        wi.pValues = &f->completion.value;
        r = dfn_.vkWaitSemaphores(device_, &wi, timeout_ns);
        what = "vkWaitSemaphores";
    }
    if (r == VK_TIMEOUT)
        return fail(KVRT_ERROR_TIMEOUT, "GPU work did not complete within %.3f ms",
                    static_cast<double>(timeout_ns) / 1e6);
    KVRT_TRY(check(r, what));
    if (f->external) mark_done(*f);
    else mark_own_done_through(serial);
    retire();
    return KVRT_SUCCESS;
}

Result Context::wait_all(uint64_t timeout_ns) {
    using clock = std::chrono::steady_clock;
    const auto deadline = clock::now() + std::chrono::nanoseconds(std::min<uint64_t>(timeout_ns, INT64_MAX / 2));
    // The newest own submission settles the other own ones; an application's
    // are waited for one by one.
    std::vector<Serial> serials;
    Serial newest_own = 0;
    for (const InFlight& f : in_flight_) {
        if (f.done) continue;
        if (f.external) serials.push_back(f.serial);
        else newest_own = f.serial;
    }
    if (newest_own) serials.push_back(newest_own);
    for (Serial s : serials) {
        const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - clock::now()).count();
        KVRT_TRY(wait(s, left > 0 ? static_cast<uint64_t>(left) : 0));
    }
    retire();
    return KVRT_SUCCESS;
}

void Context::release_after(Serial serial, std::function<void()> release) {
    if (serial <= completed_ || lost_) {
        release();
        return;
    }
    // Keep the list ordered by serial so retire() can stop at the first
    // pending one.
    auto pos = std::upper_bound(releases_.begin(), releases_.end(), serial,
                                [](Serial s, const Pending& p) { return s < p.serial; });
    releases_.insert(pos, Pending{serial, std::move(release)});
}

Result Context::run_now(const std::function<void(VkCommandBuffer)>& record) {
    VkCommandBufferAllocateInfo ai{};
    ai.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
    ai.commandPool = oneoff_pool_;
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 1;
    VkCommandBuffer cb = VK_NULL_HANDLE;
    KVRT_TRY(check(dfn_.vkAllocateCommandBuffers(device_, &ai, &cb), "vkAllocateCommandBuffers"));
    auto free_cb = [this, cb]() { dfn_.vkFreeCommandBuffers(device_, oneoff_pool_, 1, &cb); };

    VkCommandBufferBeginInfo bi{};
    bi.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
    bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    Result r = check(dfn_.vkBeginCommandBuffer(cb, &bi), "vkBeginCommandBuffer");
    if (r == KVRT_SUCCESS) {
        begin_barrier(dfn_, cb);
        record(cb);
        host_read_barrier(dfn_, cb);
        r = check(dfn_.vkEndCommandBuffer(cb), "vkEndCommandBuffer");
    }
    Serial serial = 0;
    if (r == KVRT_SUCCESS) r = submit(cb, &serial);
    if (r != KVRT_SUCCESS) {
        free_cb();
        return r;
    }
    r = wait(serial);
    release_after(serial, free_cb);
    return r;
}

Result Context::staging(uint64_t size, VkBuffer* out_buffer, void** out_mapped, bool* out_coherent) {
    if (size > staging_size_) {
        // The old buffer may still be read by a one-off copy that timed out.
        if (staging_buffer_) {
            VkBuffer b = staging_buffer_;
            VkDeviceMemory m = staging_memory_;
            const int64_t bytes = static_cast<int64_t>(staging_size_);
            release_after(last_submitted(), [this, b, m, bytes]() {
                dfn_.vkDestroyBuffer(device_, b, nullptr);
                dfn_.vkFreeMemory(device_, m, nullptr);
                track_device_bytes(-bytes);
            });
            staging_buffer_ = VK_NULL_HANDLE;
            staging_memory_ = VK_NULL_HANDLE;
            staging_mapped_ = nullptr;
            staging_size_ = 0;
        }
        VkBufferCreateInfo bci{};
        bci.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
        bci.size = size;
        bci.usage = VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
        bci.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
        VkBuffer buffer = VK_NULL_HANDLE;
        KVRT_TRY(check(dfn_.vkCreateBuffer(device_, &bci, nullptr, &buffer), "vkCreateBuffer(staging)"));
        VkMemoryRequirements req{};
        dfn_.vkGetBufferMemoryRequirements(device_, buffer, &req);
        uint32_t type = 0;
        bool coherent = true;
        Result r = staging_memory_type(req.memoryTypeBits, &type, &coherent);
        VkDeviceMemory memory = VK_NULL_HANDLE;
        void* mapped = nullptr;
        if (r == KVRT_SUCCESS) {
            VkMemoryAllocateInfo mai{};
            mai.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO;
            mai.allocationSize = req.size;
            mai.memoryTypeIndex = type;
            r = check(dfn_.vkAllocateMemory(device_, &mai, nullptr, &memory), "vkAllocateMemory(staging)");
        }
        if (r == KVRT_SUCCESS) r = check(dfn_.vkBindBufferMemory(device_, buffer, memory, 0), "vkBindBufferMemory");
        if (r == KVRT_SUCCESS) r = check(dfn_.vkMapMemory(device_, memory, 0, VK_WHOLE_SIZE, 0, &mapped), "vkMapMemory");
        if (r != KVRT_SUCCESS) {
            dfn_.vkDestroyBuffer(device_, buffer, nullptr);
            if (memory) dfn_.vkFreeMemory(device_, memory, nullptr);
            return r;
        }
        set_name(VK_OBJECT_TYPE_BUFFER, object_bits(buffer), "kvrt staging");
        staging_buffer_ = buffer;
        staging_memory_ = memory;
        staging_mapped_ = mapped;
        staging_size_ = size;
        staging_coherent_ = coherent;
        track_device_bytes(static_cast<int64_t>(req.size));
    }
    *out_buffer = staging_buffer_;
    *out_mapped = staging_mapped_;
    *out_coherent = staging_coherent_;
    return KVRT_SUCCESS;
}

Result Context::sync_staging(bool to_device) {
    VkMappedMemoryRange mr{};
    mr.sType = VK_STRUCTURE_TYPE_MAPPED_MEMORY_RANGE;
    mr.memory = staging_memory_;
    mr.size = VK_WHOLE_SIZE;
    if (to_device)
        return check(dfn_.vkFlushMappedMemoryRanges(device_, 1, &mr), "vkFlushMappedMemoryRanges");
    return check(dfn_.vkInvalidateMappedMemoryRanges(device_, 1, &mr), "vkInvalidateMappedMemoryRanges");
}

}  // namespace kvrt::vk
