// The few memory barriers kvrt records. Compute kernels and transfers are the
// only device work, so one global memory barrier between dependent operations
// is both correct and cheap (drivers implement buffer barriers as global ones).
#pragma once

#include "vk/dispatch.hpp"

namespace kvrt::vk {

constexpr VkPipelineStageFlags kWorkStages =
    VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
constexpr VkAccessFlags kWorkWrites = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
constexpr VkAccessFlags kWorkAccess = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                                      VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;

inline void memory_barrier(const DeviceFns& fn, VkCommandBuffer cb, VkPipelineStageFlags src_stages,
                           VkAccessFlags src_access, VkPipelineStageFlags dst_stages,
                           VkAccessFlags dst_access) {
    VkMemoryBarrier b{};
    b.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
    b.srcAccessMask = src_access;
    b.dstAccessMask = dst_access;
    fn.vkCmdPipelineBarrier(cb, src_stages, dst_stages, 0, 1, &b, 0, nullptr, 0, nullptr);
}

// Between two kvrt operations of one command buffer.
inline void work_barrier(const DeviceFns& fn, VkCommandBuffer cb) {
    memory_barrier(fn, cb, kWorkStages, kWorkWrites, kWorkStages, kWorkAccess);
}

// First command of a command buffer: orders it after everything submitted
// before on the queue (other streams, one-off transfers, host writes made
// visible by the submission itself).
inline void begin_barrier(const DeviceFns& fn, VkCommandBuffer cb) {
    memory_barrier(fn, cb, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, VK_ACCESS_MEMORY_WRITE_BIT,
                   kWorkStages, kWorkAccess);
}

// Last command kvrt records into an application's command buffer: makes
// kvrt's writes visible to whatever the application records or submits after
// it (any stage its queue has, reads and writes).
inline void handover_barrier(const DeviceFns& fn, VkCommandBuffer cb) {
    memory_barrier(fn, cb, kWorkStages, kWorkWrites, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT,
                   VK_ACCESS_MEMORY_READ_BIT | VK_ACCESS_MEMORY_WRITE_BIT);
}

// Last command of a command buffer that wrote memory the host may read
// (mapped device memory or staging).
inline void host_read_barrier(const DeviceFns& fn, VkCommandBuffer cb) {
    memory_barrier(fn, cb, kWorkStages, kWorkWrites, VK_PIPELINE_STAGE_HOST_BIT,
                   VK_ACCESS_HOST_READ_BIT);
}

}  // namespace kvrt::vk
