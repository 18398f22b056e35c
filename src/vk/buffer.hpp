// Device buffers of any size, split into pieces that each fit one storage
// binding (maxStorageBufferRange, often 128 MiB on mobile GPUs and lavapipe).
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "core/result.hpp"
#include "vk/context.hpp"

namespace kvrt::vk {

// Where a buffer's memory lives.
enum class MemoryKind {
    Device,  // device-local; mapped when also host-visible (unless staging is forced)
    Upload,  // host-visible and mapped, read by kernels (small per-submission data)
};

class Buffer {
public:
    struct Piece {
        VkBuffer buffer = VK_NULL_HANDLE;
        VkDeviceMemory memory = VK_NULL_HANDLE;
        void* mapped = nullptr;  // persistent mapping, or null (staging path)
        uint64_t size = 0;       // bytes of the piece (a multiple of 16, or a wrapped range)
        uint64_t base = 0;       // offset of the piece inside `buffer` (wrapped buffers)
        uint64_t memory_size = 0;     // the allocation's size (>= size)
        uint32_t memory_type = 0;     // its memory type index
    };

    // Where one byte of an exported buffer lies (export_memory).
    struct Exported {
        int fd = -1;                  // a new file descriptor, the caller's to close
        uint32_t memory_type = 0;
        uint64_t memory_size = 0;
        uint64_t offset = 0;          // of the byte inside the memory
        uint64_t contiguous = 0;      // bytes of the buffer from it on in that memory
    };

    // Creates a zeroed buffer of `size` bytes. `piece_bytes` (0 = the
    // context's largest binding) sets the size of every piece but the last; it
    // must be a multiple of 256 and at most the largest binding. Nothing stays
    // allocated on failure.
    // `export_types` (a subset of the context's export_types()) makes the
    // memory exportable as those handle types (export_memory).
    static Result create(Context& ctx, uint64_t size, uint64_t piece_bytes, const char* label,
                         std::unique_ptr<Buffer>* out, MemoryKind kind = MemoryKind::Device,
                         VkExternalMemoryHandleTypeFlags export_types = 0);

    // Wraps an application's VkBuffer range as a one-piece buffer; kvrt never
    // frees it. `offset` must meet minStorageBufferOffsetAlignment and `size`
    // the largest binding.
    static Result wrap(Context& ctx, VkBuffer buffer, uint64_t offset, uint64_t size, std::unique_ptr<Buffer>* out);

    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    // Releases the memory once the GPU is done with it, and tells streams
    // still recording with this buffer that they can no longer submit.
    ~Buffer();

    Context& context() const { return ctx_; }
    uint64_t size() const { return size_; }
    uint64_t piece_bytes() const { return piece_bytes_; }
    const Piece& piece(size_t i) const { return pieces_[i]; }

    // The piece holding byte `offset` (< size) and the offset inside it.
    void locate(uint64_t offset, size_t* piece, uint64_t* in_piece) const {
        *piece = static_cast<size_t>(offset / piece_bytes_);
        *in_piece = offset % piece_bytes_;
    }

    // The handle types its memory can be exported as (0: none).
    VkExternalMemoryHandleTypeFlags export_types() const { return export_types_; }
    // Exports the memory of the piece holding byte `offset` (< size) as a
    // file descriptor of handle type `type` (one of export_types()).
    Result export_memory(uint64_t offset, VkExternalMemoryHandleTypeFlagBits type, Exported* out) const;

    // Host <-> device copies, ordered after submitted work that uses the
    // buffer. Ranges are checked by the caller.
    Result upload(uint64_t offset, const void* data, uint64_t size);
    Result download(uint64_t offset, void* data, uint64_t size);

    // Makes host writes through the mappings visible to the device (a no-op
    // for coherent memory).
    Result flush_mapped();

    // The last submission that uses this buffer.
    Serial last_use() const {
        std::lock_guard<std::mutex> lock(uses_mutex_);
        return last_use_;
    }
    // Records a submission that uses the buffer: one of kvrt's own, or an
    // application's (`external`, kvrt_stream_end_vulkan). Any thread: the
    // streams of several threads may read one buffer.
    void mark_used(Serial s, bool external);
    // Waits (with the context's timeout) for the submissions that use it.
    Result wait_idle();

private:
    explicit Buffer(Context& ctx) : ctx_(ctx) {}
    Result alloc_piece(uint64_t size, const char* label, size_t index, MemoryKind kind,
                       VkExternalMemoryHandleTypeFlags export_types);
    Result zero();
    Result staged_copy(uint64_t offset, uint64_t size, bool to_device, void* host);
    static void release(Context& ctx, const std::vector<Piece>& pieces);

    Context& ctx_;
    uint64_t size_ = 0;
    uint64_t piece_bytes_ = 0;
    std::vector<Piece> pieces_;
    bool coherent_ = true;
    bool wrapped_ = false;
    VkExternalMemoryHandleTypeFlags export_types_ = 0;
    // Submissions that use the buffer, under uses_mutex_ (lock order:
    // context.hpp).
    mutable std::mutex uses_mutex_;
    Serial last_use_ = 0;      // newest of all uses
    Serial last_own_use_ = 0;  // newest of kvrt's own: settles the older own ones
    std::vector<Serial> external_uses_;  // an application's, which complete in any order
};

}  // namespace kvrt::vk
