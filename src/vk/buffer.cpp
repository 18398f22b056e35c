#include "vk/buffer.hpp"

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <string>

#include "core/checked.hpp"
#include "core/fault.hpp"
#include "vk/stream.hpp"

namespace kvrt::vk {

namespace {
// Staging transfers move at most this much per one-off submission.
constexpr uint64_t kStagingChunk = 16ull << 20;

// The mapped range covering [in, in + n) of a piece, widened to whole
// non-coherent atoms as flushes and invalidations require.
VkMappedMemoryRange atom_range(const Buffer::Piece& p, uint64_t in, uint64_t n, uint64_t atom) {
    VkMappedMemoryRange mr{};
    mr.sType = VK_STRUCTURE_TYPE_MAPPED_MEMORY_RANGE;
    mr.memory = p.memory;
    mr.offset = align_down(in, atom);
    mr.size = std::min(align_up(in + n, atom), p.size) - mr.offset;
    return mr;
}
}  // namespace

Result Buffer::create(Context& ctx, uint64_t size, uint64_t piece_bytes, const char* label,
                      std::unique_ptr<Buffer>* out, MemoryKind kind, VkExternalMemoryHandleTypeFlags export_types) {
    if (size == 0) return fail(KVRT_ERROR_INVALID_ARGUMENT, "buffer size is 0");
    if (export_types & ~ctx.export_types())
        return fail(KVRT_ERROR_UNSUPPORTED, "this device cannot export buffer memory as the handle types asked for");
    if (piece_bytes == 0) piece_bytes = ctx.max_binding_bytes();
    if (piece_bytes % 16 != 0 || piece_bytes > ctx.max_binding_bytes())
        return fail(KVRT_ERROR_INTERNAL, "bad piece size %llu", static_cast<unsigned long long>(piece_bytes));
    uint64_t padded = 0;
    if (!checked_align_up(size, 16, &padded))
        return fail(KVRT_ERROR_OUT_OF_DEVICE_MEMORY, "buffer size %llu overflows",
                    static_cast<unsigned long long>(size));
    // A request larger than the device's memory is an error here, before the
    // driver is asked: some drivers (lavapipe among them) would otherwise hand
    // out overcommitted host memory and fail later, when it is touched.
    const uint64_t heap = ctx.info().device_local_bytes;
    if (heap && padded > heap)
        return fail(KVRT_ERROR_OUT_OF_DEVICE_MEMORY,
                    "buffer of %llu bytes exceeds the device's %llu bytes of memory",
                    static_cast<unsigned long long>(size), static_cast<unsigned long long>(heap));

    std::unique_ptr<Buffer> buf(new Buffer(ctx));
    buf->size_ = size;
    buf->piece_bytes_ = piece_bytes;
    buf->export_types_ = export_types;
    const uint64_t n_pieces = (padded + piece_bytes - 1) / piece_bytes;
    buf->pieces_.reserve(static_cast<size_t>(n_pieces));
    for (uint64_t i = 0; i < n_pieces; ++i) {
        const uint64_t bytes = std::min(piece_bytes, padded - i * piece_bytes);
        KVRT_TRY(buf->alloc_piece(bytes, label, static_cast<size_t>(i), kind, export_types));
    }
    KVRT_TRY(buf->zero());
    *out = std::move(buf);
    return KVRT_SUCCESS;
}

Result Buffer::wrap(Context& ctx, VkBuffer buffer, uint64_t offset, uint64_t size, std::unique_ptr<Buffer>* out) {
    const uint64_t align = ctx.info().props.limits.minStorageBufferOffsetAlignment;
    if (buffer == VK_NULL_HANDLE) return fail(KVRT_ERROR_INVALID_ARGUMENT, "the VkBuffer is VK_NULL_HANDLE");
    if (size == 0 || size % 4 != 0) return fail(KVRT_ERROR_INVALID_ARGUMENT, "size must be a non-zero multiple of 4");
    if (align && offset % align != 0)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "offset %llu is not a multiple of minStorageBufferOffsetAlignment (%llu)",
                    static_cast<unsigned long long>(offset), static_cast<unsigned long long>(align));
    if (size > ctx.max_binding_bytes())
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "size %llu exceeds the largest storage binding (%llu); wrap a smaller range",
                    static_cast<unsigned long long>(size), static_cast<unsigned long long>(ctx.max_binding_bytes()));
    std::unique_ptr<Buffer> buf(new Buffer(ctx));
    buf->size_ = size;
    buf->piece_bytes_ = size;
    buf->wrapped_ = true;
    Piece p;
    p.buffer = buffer;
    p.size = size;
    p.base = offset;
    buf->pieces_.push_back(p);
    *out = std::move(buf);
    return KVRT_SUCCESS;
}

Result Buffer::alloc_piece(uint64_t size, const char* label, size_t index, MemoryKind kind,
                           VkExternalMemoryHandleTypeFlags export_types) {
    KVRT_FAULT_POINT("device allocation", KVRT_ERROR_OUT_OF_DEVICE_MEMORY);
    KVRT_TRY(fault::named_point("host allocation", KVRT_ERROR_OUT_OF_HOST_MEMORY));
    const DeviceFns& fn = ctx_.fn();
    VkDevice dev = ctx_.device();
    Piece p;
    p.size = size;
    VkBufferCreateInfo bci{};
    bci.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
    bci.size = size;
    bci.usage = kBufferUsage;
    bci.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
    // Exportable memory: the buffer says which handle types may back it, the
    // allocation that it exports them (dedicated where a type needs it).
    VkExternalMemoryBufferCreateInfo ebci{};
    ebci.sType = VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO;
    ebci.handleTypes = export_types;
    if (export_types) bci.pNext = &ebci;
    KVRT_TRY(ctx_.check(fn.vkCreateBuffer(dev, &bci, nullptr, &p.buffer), "vkCreateBuffer"));
    VkMemoryRequirements req{};
    fn.vkGetBufferMemoryRequirements(dev, p.buffer, &req);
    uint32_t type = 0;
    bool mappable = false, coherent = true;
    Result r = kind == MemoryKind::Upload ? ctx_.staging_memory_type(req.memoryTypeBits, &type, &coherent)
                                          : ctx_.device_memory_type(req.memoryTypeBits, &type, &mappable, &coherent);
    if (kind == MemoryKind::Upload) mappable = true;
    if (r == KVRT_SUCCESS) {
        VkMemoryAllocateInfo mai{};
        mai.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO;
        mai.allocationSize = req.size;
        mai.memoryTypeIndex = type;
        VkExportMemoryAllocateInfo emai{};
        emai.sType = VK_STRUCTURE_TYPE_EXPORT_MEMORY_ALLOCATE_INFO;
        emai.handleTypes = export_types;
        VkMemoryDedicatedAllocateInfo dedicated{};
        dedicated.sType = VK_STRUCTURE_TYPE_MEMORY_DEDICATED_ALLOCATE_INFO;
        dedicated.buffer = p.buffer;
        if (export_types) {
            mai.pNext = &emai;
            if (export_types & ctx_.export_dedicated()) emai.pNext = &dedicated;
        }
        r = ctx_.check(fn.vkAllocateMemory(dev, &mai, nullptr, &p.memory), "vkAllocateMemory");
        p.memory_size = req.size;
        p.memory_type = type;
    }
    if (r == KVRT_SUCCESS) r = ctx_.check(fn.vkBindBufferMemory(dev, p.buffer, p.memory, 0), "vkBindBufferMemory");
    if (r == KVRT_SUCCESS && mappable)
        r = ctx_.check(fn.vkMapMemory(dev, p.memory, 0, VK_WHOLE_SIZE, 0, &p.mapped), "vkMapMemory");
    if (r != KVRT_SUCCESS) {
        if (p.memory) fn.vkFreeMemory(dev, p.memory, nullptr);
        fn.vkDestroyBuffer(dev, p.buffer, nullptr);
        return r;
    }
    coherent_ = coherent_ && coherent;
    if (label && *label) {
        const std::string name = pieces_.empty() && size == size_ ? std::string(label)
                                 : std::string(label) + "[" + std::to_string(index) + "]";
        ctx_.set_name(VK_OBJECT_TYPE_BUFFER, object_bits(p.buffer), name.c_str());
    }
    ctx_.track_device_bytes(static_cast<int64_t>(req.size));
    pieces_.push_back(p);
    return KVRT_SUCCESS;
}

Result Buffer::zero() {
    if (!pieces_.empty() && pieces_[0].mapped) {
        for (const Piece& p : pieces_) std::memset(p.mapped, 0, static_cast<size_t>(p.size));
        if (!coherent_) {
            std::vector<VkMappedMemoryRange> ranges;
            for (const Piece& p : pieces_) {
                VkMappedMemoryRange mr{};
                mr.sType = VK_STRUCTURE_TYPE_MAPPED_MEMORY_RANGE;
                mr.memory = p.memory;
                mr.size = VK_WHOLE_SIZE;
                ranges.push_back(mr);
            }
            KVRT_TRY(ctx_.check(ctx_.fn().vkFlushMappedMemoryRanges(ctx_.device(), static_cast<uint32_t>(ranges.size()),
                                                                    ranges.data()), "vkFlushMappedMemoryRanges"));
        }
        return KVRT_SUCCESS;
    }
    // Not waited for on kvrt's own device: every later command buffer of its
    // queue begins with a barrier on all work submitted before it, so the
    // fill comes first, and the host never maps this memory. (A call that
    // creates a buffer does not wait, or time out, before its own work.) On
    // an application's device, whose other queues may run kvrt's recordings,
    // the fill is waited for. Either way the buffer's release waits for it.
    const auto fill = [this](VkCommandBuffer cb) {
        for (const Piece& p : pieces_) ctx_.fn().vkCmdFillBuffer(cb, p.buffer, 0, VK_WHOLE_SIZE, 0);
    };
    Serial serial = 0;
    const Result r = ctx_.imported() ? ctx_.run_now(fill, &serial) : ctx_.run_async(fill, &serial);
    if (serial) mark_used(serial, false);
    return r;
}

Result Buffer::flush_mapped() {
    if (coherent_) return KVRT_SUCCESS;
    for (const Piece& p : pieces_) {
        if (!p.mapped) continue;
        VkMappedMemoryRange mr{};
        mr.sType = VK_STRUCTURE_TYPE_MAPPED_MEMORY_RANGE;
        mr.memory = p.memory;
        mr.size = VK_WHOLE_SIZE;
        KVRT_TRY(ctx_.check(ctx_.fn().vkFlushMappedMemoryRanges(ctx_.device(), 1, &mr), "vkFlushMappedMemoryRanges"));
    }
    return KVRT_SUCCESS;
}

void Buffer::release(Context& ctx, const std::vector<Piece>& pieces) {
    int64_t bytes = 0;
    for (const Piece& p : pieces) {
        VkMemoryRequirements req{};
        ctx.fn().vkGetBufferMemoryRequirements(ctx.device(), p.buffer, &req);
        bytes += static_cast<int64_t>(req.size);
        ctx.fn().vkDestroyBuffer(ctx.device(), p.buffer, nullptr);
        ctx.fn().vkFreeMemory(ctx.device(), p.memory, nullptr);  // unmaps implicitly
    }
    ctx.track_device_bytes(-bytes);
}

namespace {
// Runs a release when the last holder lets go of it.
struct ReleaseToken {
    std::function<void()> release;
    ~ReleaseToken() { release(); }
};
}  // namespace

Buffer::~Buffer() {
    Context& ctx = ctx_;
    if (wrapped_) {
        // The application owns the VkBuffer; only make sure no recording still
        // names it and that submitted work finished before it may go.
        for (Stream* s : ctx.streams()) s->forget_buffer(this, nullptr);
        return;
    }
    std::vector<Piece> pieces = std::move(pieces_);
    // Holders: submitted work (until last_use_ completes) and any stream still
    // recording commands that name this buffer (until it drops the recording).
    auto token = std::make_shared<ReleaseToken>();
    token->release = [&ctx, pieces]() { release(ctx, pieces); };
    // A stream that submits a recording naming this buffer does so under its
    // own lock: here it is either still recording (and is told so), or its
    // mark_used() happened before and last_use() below includes it.
    for (Stream* s : ctx.streams()) s->forget_buffer(this, token);
    ctx.release_after(last_use(), [token]() mutable { token.reset(); });
}

void Buffer::mark_used(Serial s, bool external) {
    std::lock_guard<std::mutex> lock(uses_mutex_);
    last_use_ = std::max(last_use_, s);
    if (!external) {
        last_own_use_ = std::max(last_own_use_, s);
        return;
    }
    external_uses_.erase(std::remove_if(external_uses_.begin(), external_uses_.end(),
                                        [this](Serial e) { return ctx_.is_done(e); }),
                         external_uses_.end());
    external_uses_.push_back(s);
}

Result Buffer::wait_idle() {
    // Only the submissions that use this buffer: an application's command
    // buffer that is not submitted yet must not hold up unrelated buffers.
    // The waits run unlocked (another thread's stream may mark the buffer
    // used meanwhile: that work is not what this call orders against).
    Serial own = 0;
    std::vector<Serial> external;
    {
        std::lock_guard<std::mutex> lock(uses_mutex_);
        own = last_own_use_;
        external = external_uses_;
    }
    KVRT_TRY(ctx_.wait(own));
    for (Serial e : external) KVRT_TRY(ctx_.wait(e));
    if (!external.empty()) {
        std::lock_guard<std::mutex> lock(uses_mutex_);
        external_uses_.erase(std::remove_if(external_uses_.begin(), external_uses_.end(),
                                            [&](Serial e) {
                                                return std::find(external.begin(), external.end(), e) !=
                                                       external.end();
                                            }),
                             external_uses_.end());
    }
    return KVRT_SUCCESS;
}

Result Buffer::export_memory(uint64_t offset, VkExternalMemoryHandleTypeFlagBits type, Exported* out) const {
    if (!(export_types_ & type))
        return fail(KVRT_ERROR_UNSUPPORTED,
                    "the buffer's memory is not exportable as that handle type (allocate it exportable: "
                    "KVRT_BUFFER_EXPORTABLE, KVRT_CACHE_EXPORTABLE)");
    size_t i = 0;
    uint64_t in = 0;
    locate(offset, &i, &in);
    const Piece& p = pieces_[i];
    VkMemoryGetFdInfoKHR gi{};
    gi.sType = VK_STRUCTURE_TYPE_MEMORY_GET_FD_INFO_KHR;
    gi.memory = p.memory;
    gi.handleType = type;
    int fd = -1;
    const VkResult vr = ctx_.fn().vkGetMemoryFdKHR(ctx_.device(), &gi, &fd);
    if (vr == VK_ERROR_TOO_MANY_OBJECTS)
        return fail(KVRT_ERROR_OUT_OF_HOST_MEMORY, "vkGetMemoryFdKHR: no file descriptor left (VK_ERROR_TOO_MANY_OBJECTS)");
    KVRT_TRY(ctx_.check(vr, "vkGetMemoryFdKHR"));
    out->fd = fd;
    out->memory_type = p.memory_type;
    out->memory_size = p.memory_size;
    out->offset = in;
    out->contiguous = std::min(p.size, size_ - i * piece_bytes_) - in;
    return KVRT_SUCCESS;
}

Result Buffer::upload(uint64_t offset, const void* data, uint64_t size) {
    if (size == 0) return KVRT_SUCCESS;
    KVRT_TRY(wait_idle());
    if (!pieces_[0].mapped) return staged_copy(offset, size, true, const_cast<void*>(data));
    const auto* src = static_cast<const uint8_t*>(data);
    std::vector<VkMappedMemoryRange> ranges;
    while (size > 0) {
        size_t pi;
        uint64_t in;
        locate(offset, &pi, &in);
        const uint64_t n = std::min(size, pieces_[pi].size - in);
        std::memcpy(static_cast<uint8_t*>(pieces_[pi].mapped) + in, src, static_cast<size_t>(n));
        if (!coherent_) ranges.push_back(atom_range(pieces_[pi], in, n, ctx_.non_coherent_atom()));
        src += n;
        offset += n;
        size -= n;
    }
    if (!ranges.empty())
        KVRT_TRY(ctx_.check(ctx_.fn().vkFlushMappedMemoryRanges(ctx_.device(), static_cast<uint32_t>(ranges.size()),
                                                                ranges.data()), "vkFlushMappedMemoryRanges"));
    return KVRT_SUCCESS;
}

Result Buffer::download(uint64_t offset, void* data, uint64_t size) {
    if (size == 0) return KVRT_SUCCESS;
    KVRT_TRY(wait_idle());
    if (!pieces_[0].mapped) return staged_copy(offset, size, false, data);
    auto* dst = static_cast<uint8_t*>(data);
    while (size > 0) {
        size_t pi;
        uint64_t in;
        locate(offset, &pi, &in);
        const uint64_t n = std::min(size, pieces_[pi].size - in);
        if (!coherent_) {
            const VkMappedMemoryRange mr = atom_range(pieces_[pi], in, n, ctx_.non_coherent_atom());
            KVRT_TRY(ctx_.check(ctx_.fn().vkInvalidateMappedMemoryRanges(ctx_.device(), 1, &mr),
                                "vkInvalidateMappedMemoryRanges"));
        }
        std::memcpy(dst, static_cast<const uint8_t*>(pieces_[pi].mapped) + in, static_cast<size_t>(n));
        dst += n;
        offset += n;
        size -= n;
    }
    return KVRT_SUCCESS;
}

Result Buffer::staged_copy(uint64_t offset, uint64_t size, bool to_device, void* host) {
    auto* h = static_cast<uint8_t*>(host);
    Context::Staging staging;
    KVRT_TRY(ctx_.take_staging(kStagingChunk, &staging));
    Result r = KVRT_SUCCESS;
    bool idle = true;
    while (size > 0 && r == KVRT_SUCCESS) {
        const uint64_t chunk = std::min(size, staging.size);
        if (to_device) {
            std::memcpy(staging.mapped, h, static_cast<size_t>(chunk));
            if (!staging.coherent) r = ctx_.sync_staging(staging, true);
            if (r != KVRT_SUCCESS) break;
        }
        // vkCmdCopyBuffer regions: the chunk may straddle pieces.
        std::vector<std::pair<size_t, VkBufferCopy>> regions;
        uint64_t done = 0;
        while (done < chunk) {
            size_t pi;
            uint64_t in;
            locate(offset + done, &pi, &in);
            const uint64_t n = std::min(chunk - done, pieces_[pi].size - in);
            VkBufferCopy c{};
            c.srcOffset = to_device ? done : pieces_[pi].base + in;
            c.dstOffset = to_device ? pieces_[pi].base + in : done;
            c.size = n;
            regions.emplace_back(pi, c);
            done += n;
        }
        Serial serial = 0;
        r = ctx_.run_now(
            [&](VkCommandBuffer cb) {
                for (const auto& [pi, c] : regions) {
                    if (to_device) ctx_.fn().vkCmdCopyBuffer(cb, staging.buffer, pieces_[pi].buffer, 1, &c);
                    else ctx_.fn().vkCmdCopyBuffer(cb, pieces_[pi].buffer, staging.buffer, 1, &c);
                }
            },
            &serial);
        // The copy names this buffer until it completes, also when the wait
        // fails: its release waits for it.
        if (serial) mark_used(serial, false);
        if (r != KVRT_SUCCESS) {
            idle = false;  // the copy may have been submitted and still run
            break;
        }
        if (!to_device) {
            if (!staging.coherent) r = ctx_.sync_staging(staging, false);
            if (r != KVRT_SUCCESS) break;
            std::memcpy(h, staging.mapped, static_cast<size_t>(chunk));
        }
        h += chunk;
        offset += chunk;
        size -= chunk;
    }
    ctx_.give_staging(staging, idle);
    return r;
}

}  // namespace kvrt::vk
