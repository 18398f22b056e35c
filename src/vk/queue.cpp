// The context's submission timeline: fences, waits with timeouts, deferred
// releases, one-off command buffers and the staging buffers. Locking: see
// context.hpp.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "core/fault.hpp"
#include "vk/barrier.hpp"
#include "vk/context.hpp"

namespace kvrt::vk {

namespace {
void run_all(std::vector<std::function<void()>>& ready) {
    for (auto& r : ready) r();
    ready.clear();
}
}  // namespace

Result Context::submit(VkCommandBuffer cb, Serial* out_serial, const SubmitSync* sync) {
    if (lost()) return fail(KVRT_ERROR_DEVICE_LOST, "the device was lost");
    if (sync && sync->has_values() && !timeline())
        return fail(KVRT_ERROR_UNSUPPORTED, "semaphore values need timeline semaphores, which the device lacks");
    KVRT_FAULT_POINT("queue submit", KVRT_ERROR_DEVICE_LOST);
    if (fault::named_point("device loss at submission", KVRT_ERROR_DEVICE_LOST) != KVRT_SUCCESS)
        return check(VK_ERROR_DEVICE_LOST, "vkQueueSubmit (injected device loss)");  // marks the context lost
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
    Releases ready;
    Result result = KVRT_SUCCESS;
    {
        // The serial is taken and the entry queued together with the
        // vkQueueSubmit, so serials follow the queue's order (own fences
        // signal in that order).
        std::lock_guard<std::mutex> lock(timeline_mutex_);
        retire_locked(&ready);
        Fence* fence = nullptr;
        if (!free_fences_.empty()) {
            fence = free_fences_.back();
            free_fences_.pop_back();
        } else {
            VkFenceCreateInfo fci{};
            fci.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO;
            VkFence handle = VK_NULL_HANDLE;
            result = check(dfn_.vkCreateFence(device_, &fci, nullptr, &handle), "vkCreateFence");
            if (result == KVRT_SUCCESS) {
                fences_.push_back(Fence{handle, 0, false});
                fence = &fences_.back();
            }
        }
        if (fence) {
            if (app_lock_queue_) app_lock_queue_(app_queue_user_);
            const VkResult r = dfn_.vkQueueSubmit(queue_, 1, &si, fence->handle);
            if (app_unlock_queue_) app_unlock_queue_(app_queue_user_);
            if (r != VK_SUCCESS) {
                free_fences_.push_back(fence);  // unsignalled: the submission did not happen
                result = check(r, "vkQueueSubmit");
            } else {
                InFlight f;
                f.serial = next_serial_++;
                f.fence = fence;
                fence->retired = false;
                in_flight_.push_back(f);
                submissions_.fetch_add(1, std::memory_order_relaxed);
                *out_serial = f.serial;
            }
        }
    }
    run_all(ready);
    return result;
}

Serial Context::add_external(const ExternalCompletion& completion) {
    std::lock_guard<std::mutex> lock(timeline_mutex_);
    InFlight f;
    f.serial = next_serial_++;
    f.external = true;
    f.completion = completion;
    in_flight_.push_back(f);
    return f.serial;
}

Serial Context::last_submitted() {
    std::lock_guard<std::mutex> lock(timeline_mutex_);
    return next_serial_ - 1;
}

Context::InFlight* Context::find_in_flight_locked(Serial serial) {
    // Serials in the list increase, so a binary search finds the entry.
    auto it = std::lower_bound(in_flight_.begin(), in_flight_.end(), serial,
                               [](const InFlight& f, Serial s) { return f.serial < s; });
    return it != in_flight_.end() && it->serial == serial ? &*it : nullptr;
}

void Context::recycle_locked(Fence* fence) {
    fence->retired = false;
    if (dfn_.vkResetFences(device_, 1, &fence->handle) == VK_SUCCESS) {
        free_fences_.push_back(fence);
    } else {
        dfn_.vkDestroyFence(device_, fence->handle, nullptr);
        fence->handle = VK_NULL_HANDLE;  // the record stays, unused
    }
}

void Context::mark_done_locked(InFlight& f) {
    if (f.done) return;
    f.done = true;
    if (f.fence) {
        // A thread still in vkWaitForFences on it recycles it when it leaves.
        if (f.fence->waiters == 0) recycle_locked(f.fence);
        else f.fence->retired = true;
        f.fence = nullptr;
    }
    // The application may reuse or destroy its semaphore or fence from now on.
    f.completion = ExternalCompletion{};
}

void Context::mark_own_done_through_locked(Serial serial) {
    // A fence signal follows every command submitted before it on the queue,
    // so kvrt's own earlier submissions are done too (not an application's,
    // which it may submit later).
    for (InFlight& f : in_flight_) {
        if (f.serial > serial) break;
        if (!f.external) mark_done_locked(f);
    }
}

void Context::poll_locked(InFlight& f) {
    if (f.done) return;
    VkResult r = VK_NOT_READY;
    if (!f.external) {
        r = dfn_.vkGetFenceStatus(device_, f.fence->handle);
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
    if (f.external) mark_done_locked(f);
    else mark_own_done_through_locked(f.serial);
}

void Context::retire_locked(Releases* ready) {
    // kvrt's own fences signal in submission order: the newest signalled one
    // settles all before it, so polling stops at the first own one not ready.
    // The application's completions are polled one by one.
    bool own_pending = false;
    for (size_t i = 0; i < in_flight_.size(); ++i) {
        InFlight& f = in_flight_[i];
        if (f.done || (own_pending && !f.external)) continue;
        poll_locked(f);
        if (!f.external && !f.done) own_pending = true;
    }
    Serial completed = completed_.load(std::memory_order_relaxed);
    while (!in_flight_.empty() && in_flight_.front().done) {
        completed = in_flight_.front().serial;
        in_flight_.pop_front();
    }
    completed_.store(completed, std::memory_order_release);
    while (!releases_.empty() && releases_.front().serial <= completed) {
        ready->push_back(std::move(releases_.front().release));
        releases_.pop_front();
    }
}

bool Context::is_done(Serial serial) {
    if (serial <= completed_.load(std::memory_order_acquire)) return true;
    Releases ready;
    bool done = false;
    {
        std::lock_guard<std::mutex> lock(timeline_mutex_);
        retire_locked(&ready);
        const InFlight* f = find_in_flight_locked(serial);
        done = serial <= completed_.load(std::memory_order_relaxed) || (f && f->done);
    }
    run_all(ready);
    return done;
}

void Context::retire() {
    Releases ready;
    {
        std::lock_guard<std::mutex> lock(timeline_mutex_);
        retire_locked(&ready);
    }
    run_all(ready);
}

Result Context::wait_external_locked(std::unique_lock<std::mutex>& lock, Serial serial, uint64_t timeout_ns,
                                     bool owner, Releases* ready) {
    using clock = std::chrono::steady_clock;
    const auto deadline = clock::now() + std::chrono::nanoseconds(std::min<uint64_t>(timeout_ns, INT64_MAX / 2));
    auto nap = std::chrono::microseconds(20);
    for (;;) {
        InFlight* f = find_in_flight_locked(serial);
        if (!f || f->done) return KVRT_SUCCESS;  // gone from the list: done
        poll_locked(*f);
        if (lost()) return fail(KVRT_ERROR_DEVICE_LOST, "the device was lost");
        if (f->done) return KVRT_SUCCESS;
        const auto now = clock::now();
        if (now >= deadline)
            return fail(KVRT_ERROR_TIMEOUT, "GPU work did not complete within %.3f ms",
                        static_cast<double>(timeout_ns) / 1e6);
        const ExternalCompletion c = f->completion;
        lock.unlock();
        run_all(*ready);
        if (owner) {
            // The stream's own wait: the application keeps its object alive
            // until this returns, so a blocking wait is safe.
            const uint64_t left = static_cast<uint64_t>(
                std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - now).count());
            VkResult r;
            if (c.fence) {
                r = dfn_.vkWaitForFences(device_, 1, &c.fence, VK_TRUE, left);
            } else {
                VkSemaphoreWaitInfo wi{};
                wi.sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO;
                wi.semaphoreCount = 1;
                wi.pSemaphores = &c.semaphore;
                wi.pValues = &c.value;
                r = dfn_.vkWaitSemaphores(device_, &wi, left);
            }
            lock.lock();
            if (r != VK_SUCCESS && r != VK_TIMEOUT)
                return check(r, c.fence ? "vkWaitForFences" : "vkWaitSemaphores");
            // Poll again under the lock (also after a timeout: the deadline decides).
        } else {
            // Another thread's wait: the object may be destroyed as soon as
            // the stream's own wait succeeded, so it is only polled, under
            // the lock.
            std::this_thread::sleep_for(std::min(nap, std::chrono::duration_cast<std::chrono::microseconds>(
                                                          deadline - now + std::chrono::microseconds(1))));
            nap = std::min(nap * 2, std::chrono::microseconds(1000));
            lock.lock();
        }
    }
}

Result Context::wait(Serial serial, uint64_t timeout_ns, bool owner) {
    if (serial == 0 || serial <= completed_.load(std::memory_order_acquire)) return KVRT_SUCCESS;
    if (lost()) return fail(KVRT_ERROR_DEVICE_LOST, "the device was lost");
    KVRT_FAULT_POINT("wait", KVRT_ERROR_TIMEOUT);
    Releases ready;
    Result result = KVRT_SUCCESS;
    {
        std::unique_lock<std::mutex> lock(timeline_mutex_);
        InFlight* f = find_in_flight_locked(serial);
        if (!f) {
            retire_locked(&ready);
            if (serial > completed_.load(std::memory_order_relaxed))
                result = fail(KVRT_ERROR_INTERNAL, "submission %llu is unknown",
                              static_cast<unsigned long long>(serial));
        } else if (f->done) {
            // Completed, only not yet retired.
        } else if (f->external) {
            result = wait_external_locked(lock, serial, timeout_ns, owner, &ready);
            if (result == KVRT_SUCCESS) retire_locked(&ready);
        } else {
            // The fence stays this submission's while the wait runs
            // unlocked: it is recycled only once no thread waits on it.
            Fence* fence = f->fence;
            ++fence->waiters;
            lock.unlock();
            const VkResult r = dfn_.vkWaitForFences(device_, 1, &fence->handle, VK_TRUE, timeout_ns);
            lock.lock();
            --fence->waiters;
            if (r == VK_SUCCESS) mark_own_done_through_locked(serial);
            if (fence->waiters == 0 && fence->retired) recycle_locked(fence);
            if (r == VK_TIMEOUT) {
                result = fail(KVRT_ERROR_TIMEOUT, "GPU work did not complete within %.3f ms",
                              static_cast<double>(timeout_ns) / 1e6);
            } else {
                result = check(r, "vkWaitForFences");
                if (result == KVRT_SUCCESS) retire_locked(&ready);
            }
        }
    }
    run_all(ready);
    return result;
}

Result Context::wait_all(uint64_t timeout_ns) {
    using clock = std::chrono::steady_clock;
    const auto deadline = clock::now() + std::chrono::nanoseconds(std::min<uint64_t>(timeout_ns, INT64_MAX / 2));
    // The newest own submission settles the other own ones; an application's
    // are waited for one by one.
    std::vector<Serial> serials;
    Serial newest_own = 0;
    {
        std::lock_guard<std::mutex> lock(timeline_mutex_);
        for (const InFlight& f : in_flight_) {
            if (f.done) continue;
            if (f.external) serials.push_back(f.serial);
            else newest_own = f.serial;
        }
    }
    if (newest_own) serials.push_back(newest_own);
    for (Serial s : serials) {
        const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - clock::now()).count();
        KVRT_TRY(wait(s, left > 0 ? static_cast<uint64_t>(left) : 0));
    }
    Releases ready;
    {
        std::lock_guard<std::mutex> lock(timeline_mutex_);
        retire_locked(&ready);
    }
    run_all(ready);
    return KVRT_SUCCESS;
}

void Context::release_after(Serial serial, std::function<void()> release) {
    if (serial <= completed_.load(std::memory_order_acquire) || lost()) {
        release();
        return;
    }
    {
        std::lock_guard<std::mutex> lock(timeline_mutex_);
        // The watermark only moves under the lock: checked again here, an
        // entry queued behind it is never missed.
        if (serial > completed_.load(std::memory_order_relaxed)) {
            // Keep the list ordered by serial so retire_locked() can stop at
            // the first pending one.
            auto pos = std::upper_bound(releases_.begin(), releases_.end(), serial,
                                        [](Serial s, const Pending& p) { return s < p.serial; });
            releases_.insert(pos, Pending{serial, std::move(release)});
            return;
        }
    }
    release();
}

Result Context::run_now(const std::function<void(VkCommandBuffer)>& record, Serial* submitted) {
    Serial serial = 0;
    KVRT_TRY(run_async(record, &serial));
    if (submitted) *submitted = serial;
    return wait(serial);
}

Result Context::run_async(const std::function<void(VkCommandBuffer)>& record, Serial* submitted) {
    VkCommandBuffer cb = VK_NULL_HANDLE;
    auto free_cb = [this, &cb]() {
        std::lock_guard<std::mutex> lock(oneoff_mutex_);
        dfn_.vkFreeCommandBuffers(device_, oneoff_pool_, 1, &cb);
    };
    Result r = KVRT_SUCCESS;
    {
        // The pool, and so its command buffers, are used by one thread at a
        // time: allocation, recording and freeing happen under oneoff_mutex_.
        std::lock_guard<std::mutex> lock(oneoff_mutex_);
        VkCommandBufferAllocateInfo ai{};
        ai.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
        ai.commandPool = oneoff_pool_;
        ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
        ai.commandBufferCount = 1;
        KVRT_TRY(check(dfn_.vkAllocateCommandBuffers(device_, &ai, &cb), "vkAllocateCommandBuffers"));
        VkCommandBufferBeginInfo bi{};
        bi.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
        bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
        r = check(dfn_.vkBeginCommandBuffer(cb, &bi), "vkBeginCommandBuffer");
        if (r == KVRT_SUCCESS) {
            begin_barrier(dfn_, cb);
            record(cb);
            host_read_barrier(dfn_, cb);
            r = check(dfn_.vkEndCommandBuffer(cb), "vkEndCommandBuffer");
        }
    }
    Serial serial = 0;
    if (r == KVRT_SUCCESS) r = submit(cb, &serial);
    if (r != KVRT_SUCCESS) {
        free_cb();
        return r;
    }
    *submitted = serial;
    release_after(serial, [this, cb]() {
        std::lock_guard<std::mutex> lock(oneoff_mutex_);
        dfn_.vkFreeCommandBuffers(device_, oneoff_pool_, 1, &cb);
    });
    return KVRT_SUCCESS;
}

void Context::destroy_staging(const Staging& s) {
    dfn_.vkDestroyBuffer(device_, s.buffer, nullptr);
    dfn_.vkFreeMemory(device_, s.memory, nullptr);  // unmaps implicitly
    track_device_bytes(-static_cast<int64_t>(s.bytes));
}

Result Context::take_staging(uint64_t size, Staging* out) {
    {
        std::lock_guard<std::mutex> lock(staging_mutex_);
        for (size_t i = 0; i < staging_pool_.size(); ++i) {
            if (staging_pool_[i].size < size) continue;
            *out = staging_pool_[i];
            staging_pool_.erase(staging_pool_.begin() + static_cast<std::ptrdiff_t>(i));
            return KVRT_SUCCESS;
        }
    }
    KVRT_TRY(fault::named_point("host allocation", KVRT_ERROR_OUT_OF_HOST_MEMORY));
    VkBufferCreateInfo bci{};
    bci.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
    bci.size = size;
    bci.usage = VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
    bci.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
    Staging s;
    s.size = size;
    KVRT_TRY(check(dfn_.vkCreateBuffer(device_, &bci, nullptr, &s.buffer), "vkCreateBuffer(staging)"));
    VkMemoryRequirements req{};
    dfn_.vkGetBufferMemoryRequirements(device_, s.buffer, &req);
    uint32_t type = 0;
    Result r = staging_memory_type(req.memoryTypeBits, &type, &s.coherent);
    if (r == KVRT_SUCCESS) {
        VkMemoryAllocateInfo mai{};
        mai.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO;
        mai.allocationSize = req.size;
        mai.memoryTypeIndex = type;
        r = check(dfn_.vkAllocateMemory(device_, &mai, nullptr, &s.memory), "vkAllocateMemory(staging)");
    }
    if (r == KVRT_SUCCESS) r = check(dfn_.vkBindBufferMemory(device_, s.buffer, s.memory, 0), "vkBindBufferMemory");
    if (r == KVRT_SUCCESS) r = check(dfn_.vkMapMemory(device_, s.memory, 0, VK_WHOLE_SIZE, 0, &s.mapped), "vkMapMemory");
    if (r != KVRT_SUCCESS) {
        dfn_.vkDestroyBuffer(device_, s.buffer, nullptr);
        if (s.memory) dfn_.vkFreeMemory(device_, s.memory, nullptr);
        return r;
    }
    set_name(VK_OBJECT_TYPE_BUFFER, object_bits(s.buffer), "kvrt staging");
    s.bytes = req.size;
    track_device_bytes(static_cast<int64_t>(req.size));
    *out = s;
    return KVRT_SUCCESS;
}

void Context::give_staging(const Staging& s, bool idle) {
    if (!idle) {
        // A copy that timed out may still read or write it.
        release_after(last_submitted(), [this, s]() { destroy_staging(s); });
        return;
    }
    // One idle buffer per thread that copied at once is kept; more than a
    // few is unlikely to be needed again.
    constexpr size_t kKeep = 4;
    {
        std::lock_guard<std::mutex> lock(staging_mutex_);
        if (staging_pool_.size() < kKeep) {
            staging_pool_.push_back(s);
            return;
        }
    }
    destroy_staging(s);
}

Result Context::sync_staging(const Staging& s, bool to_device) {
    VkMappedMemoryRange mr{};
    mr.sType = VK_STRUCTURE_TYPE_MAPPED_MEMORY_RANGE;
    mr.memory = s.memory;
    mr.size = VK_WHOLE_SIZE;
    if (to_device)
        return check(dfn_.vkFlushMappedMemoryRanges(device_, 1, &mr), "vkFlushMappedMemoryRanges");
    return check(dfn_.vkInvalidateMappedMemoryRanges(device_, 1, &mr), "vkInvalidateMappedMemoryRanges");
}

}  // namespace kvrt::vk
