#include "core/handle_table.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <new>

namespace kvrt {

HandleTable::Params HandleTable::default_params() {
    if (sizeof(void*) >= 8) return Params{16, 14, 256};  // 1 GiB ranges, up to 4M live handles
    return Params{12, 12, 64};                           // 16 MiB ranges, up to 256K live handles
}

HandleTable::HandleTable(Params params)
    : params_(params),
      range_bytes_(uint64_t{1} << (params.gen_bits + params.slot_bits)),
      chunks_per_range_(params.slot_bits > kChunkBits ? 1u << (params.slot_bits - kChunkBits) : 1u),
      ranges_(new Range[params.max_ranges]) {}

HandleTable::~HandleTable() {
    const uint32_t n = n_ranges_.load(std::memory_order_acquire);
    for (uint32_t r = 0; r < n; ++r) {
        for (uint32_t c = 0; c < chunks_per_range_; ++c) delete ranges_[r].chunks[c].load(std::memory_order_relaxed);
        munmap(reinterpret_cast<void*>(ranges_[r].base), static_cast<size_t>(range_bytes_));
    }
}

HandleTable& HandleTable::global() {
    static auto* table = new HandleTable();  // never destroyed: handles stay checkable at exit
    return *table;
}

HandleTable::Slot* HandleTable::slot(uint32_t range, uint32_t index) const noexcept {
    Chunk* chunk = ranges_[range].chunks[index >> kChunkBits].load(std::memory_order_acquire);
    return chunk ? &chunk->slots[index & ((1u << kChunkBits) - 1)] : nullptr;
}

bool HandleTable::grow() {
    uint32_t n = n_ranges_.load(std::memory_order_relaxed);
    // The first range whose chunks are not all made (ranges fill in order).
    uint32_t chunk_index = chunks_per_range_;
    if (n > 0) {
        const Range& last = ranges_[n - 1];
        chunk_index = 0;
        while (chunk_index < chunks_per_range_ && last.chunks[chunk_index].load(std::memory_order_relaxed))
            ++chunk_index;
    }
    if (chunk_index == chunks_per_range_) {
        if (n == params_.max_ranges) return false;
        void* base = mmap(nullptr, static_cast<size_t>(range_bytes_), PROT_NONE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (base == MAP_FAILED) return false;
        Range& range = ranges_[n];
        range.chunks.reset(new (std::nothrow) std::atomic<Chunk*>[chunks_per_range_]);
        if (!range.chunks) {
            munmap(base, static_cast<size_t>(range_bytes_));
            return false;
        }
        for (uint32_t c = 0; c < chunks_per_range_; ++c) range.chunks[c].store(nullptr, std::memory_order_relaxed);
        range.base = reinterpret_cast<uintptr_t>(base);
        n_ranges_.store(++n, std::memory_order_release);  // lookups see the range whole
        chunk_index = 0;
    }
    auto* chunk = new (std::nothrow) Chunk();
    if (!chunk) return false;
    const uint32_t range = n - 1;
    const uint32_t per_chunk = std::min(1u << kChunkBits, 1u << params_.slot_bits);
    // Room for every slot: remove() then never allocates.
    free_.reserve(slots_ + per_chunk);
    ranges_[range].chunks[chunk_index].store(chunk, std::memory_order_release);
    // Pushed last first: the chunk's slots are handed out in order.
    for (uint32_t i = per_chunk; i-- > 0;)
        free_.push_back(range << params_.slot_bits | (chunk_index << kChunkBits | i));
    slots_ += per_chunk;
    return true;
}

uintptr_t HandleTable::add(void* object, uint8_t kind) {
    if (!object || kind == 0) return 0;
    std::lock_guard<std::mutex> lock(mutex_);
    if (free_.empty() && !grow()) return 0;
    const uint32_t id = free_.back();
    free_.pop_back();
    const uint32_t range = id >> params_.slot_bits;
    const uint32_t index = id & ((1u << params_.slot_bits) - 1);
    Slot* s = slot(range, index);
    const uint32_t gen = (s->tag.load(std::memory_order_relaxed) >> 8) + 1;  // never 0, never spent (see remove)
    s->object.store(object, std::memory_order_relaxed);
    s->tag.store(gen << 8 | kind, std::memory_order_release);  // publishes the object with the tag
    ++live_;
    return ranges_[range].base + (static_cast<uintptr_t>(index) << params_.gen_bits) + gen;
}

void* HandleTable::find(uintptr_t handle, uint8_t kind) const noexcept {
    if (kind == 0) return nullptr;
    const uint32_t n = n_ranges_.load(std::memory_order_acquire);
    for (uint32_t r = 0; r < n; ++r) {
        const uintptr_t offset = handle - ranges_[r].base;  // wraps to a large value below the base
        if (offset >= range_bytes_) continue;
        const uint32_t gen = static_cast<uint32_t>(offset & ((uintptr_t{1} << params_.gen_bits) - 1));
        const Slot* s = slot(r, static_cast<uint32_t>(offset >> params_.gen_bits));
        if (gen == 0 || !s || s->tag.load(std::memory_order_acquire) != (gen << 8 | kind)) return nullptr;
        return s->object.load(std::memory_order_relaxed);
    }
    return nullptr;
}

bool HandleTable::remove(uintptr_t handle, uint8_t kind) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!find(handle, kind)) return false;
    uint32_t r = 0;
    while (handle - ranges_[r].base >= range_bytes_) ++r;
    const uintptr_t offset = handle - ranges_[r].base;
    const uint32_t gen = static_cast<uint32_t>(offset & ((uintptr_t{1} << params_.gen_bits) - 1));
    const uint32_t index = static_cast<uint32_t>(offset >> params_.gen_bits);
    Slot* s = slot(r, index);
    s->tag.store(gen << 8, std::memory_order_release);  // kind 0: dead; the generation stays for the next
    s->object.store(nullptr, std::memory_order_relaxed);
    --live_;
    if (gen == (1u << params_.gen_bits) - 1) {
        ++retired_;  // generations spent: the slot is never handed out again
    } else {
        free_.push_back(r << params_.slot_bits | index);  // within the capacity grow() reserved
    }
    return true;
}

HandleTable::Stats HandleTable::stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    Stats s{};
    s.slots = slots_;
    s.live = live_;
    s.retired = retired_;
    s.ranges = n_ranges_.load(std::memory_order_relaxed);
    s.reserved_bytes = s.ranges * range_bytes_;
    s.slot_bytes = s.slots / std::min(1u << kChunkBits, 1u << params_.slot_bits) * sizeof(Chunk) +
                   s.ranges * chunks_per_range_ * sizeof(std::atomic<Chunk*>) + free_.capacity() * sizeof(uint32_t);
    return s;
}

}  // namespace kvrt
