// The context's submission timeline: fences, waits with timeouts, deferred
// releases, one-off command buffers and the staging buffer.
#include <algorithm>

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

Result Context::submit(VkCommandBuffer cb, Serial* out_serial) {
    if (lost_) return fail(KVRT_ERROR_DEVICE_LOST, "the device was lost");
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
    lock_queue();
    const VkResult r = dfn_.vkQueueSubmit(queue_, 1, &si, fence);
    unlock_queue();
    if (r != VK_SUCCESS) {
        free_fences_.push_back(fence);  // unsignalled: the submission did not happen
        return check(r, "vkQueueSubmit");
    }
    const Serial serial = next_serial_++;
    in_flight_.push_back({serial, fence});
    ++submissions_;
    *out_serial = serial;
    return KVRT_SUCCESS;
}

void Context::retire() {
    // Submissions on one queue complete in order: a fence's signal follows every
    // earlier submission, so the first unsignalled fence ends the scan.
    while (!in_flight_.empty()) {
        const InFlight f = in_flight_.front();
        const VkResult r = dfn_.vkGetFenceStatus(device_, f.fence);
        if (r == VK_NOT_READY) break;
        if (r != VK_SUCCESS) {
            check(r, "vkGetFenceStatus");
            break;
        }
        in_flight_.pop_front();
        completed_ = f.serial;
        if (dfn_.vkResetFences(device_, 1, &f.fence) == VK_SUCCESS) free_fences_.push_back(f.fence);
        else dfn_.vkDestroyFence(device_, f.fence, nullptr);
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
    return serial <= completed_;
}

Result Context::wait(Serial serial, uint64_t timeout_ns) {
    if (serial == 0 || serial <= completed_) return KVRT_SUCCESS;
    if (lost_) return fail(KVRT_ERROR_DEVICE_LOST, "the device was lost");
    KVRT_FAULT_POINT("wait", KVRT_ERROR_TIMEOUT);
    auto it = std::find_if(in_flight_.begin(), in_flight_.end(),
                           [serial](const InFlight& f) { return f.serial == serial; });
    if (it == in_flight_.end()) {
        retire();
        if (serial <= completed_) return KVRT_SUCCESS;
        return fail(KVRT_ERROR_INTERNAL, "submission %llu is unknown", static_cast<unsigned long long>(serial));
    }
    const VkResult r = dfn_.vkWaitForFences(device_, 1, &it->fence, VK_TRUE, timeout_ns);
    if (r == VK_TIMEOUT)
        return fail(KVRT_ERROR_TIMEOUT, "GPU work did not complete within %.3f ms",
                    static_cast<double>(timeout_ns) / 1e6);
    KVRT_TRY(check(r, "vkWaitForFences"));
    retire();
    return KVRT_SUCCESS;
}

Result Context::wait_all(uint64_t timeout_ns) {
    if (in_flight_.empty()) return KVRT_SUCCESS;
    return wait(in_flight_.back().serial, timeout_ns);
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
