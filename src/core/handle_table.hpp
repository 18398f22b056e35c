// The values of the handles kvrt gives out, and the objects they stand for.
//
// A handle is an address inside address space the table reserved and never
// maps (PROT_NONE). No allocation of the process can ever be there: not
// malloc's, not a stack, not a garbage-collected heap (Go's collector ignores
// a pointer-typed value outside its own heap, and kvrt's handles are
// pointer-typed in every binding), and nothing can be read or written there.
// The address encodes a slot and the slot's generation:
//
//     handle = range base + (slot << gen_bits) + generation
//
// Lookups take no lock: two atomic loads (the slot's tag, generation and
// kind together, then its object). Adding and removing handles take the
// table's mutex. A removed handle's slot is reused with the next generation,
// so the old value stays invalid; a slot whose generations are all spent is
// retired, never reused. So a stale handle is refused every time, whatever
// was created since, and memory is bounded: a slot per handle alive at once,
// plus one retired slot (16 bytes) per 2^gen_bits creations. Address space:
// 1 GiB per range of 16,384 slots on 64-bit targets, 16 MiB per range of
// 4,096 slots on 32-bit ones; a range is reserved when the ones before it are
// full. No Vulkan here.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace kvrt {

class HandleTable {
public:
    struct Params {
        unsigned gen_bits;   // generations per slot: 2^gen_bits - 1 (0 is never used)
        unsigned slot_bits;  // slots per range: 2^slot_bits
        unsigned max_ranges;
    };
    // This target's sizes (see above).
    static Params default_params();

    struct Stats {
        uint64_t slots;    // slots made so far (live, free and retired)
        uint64_t live;     // handles alive now
        uint64_t retired;  // slots whose generations are spent
        uint32_t ranges;   // address ranges reserved
        uint64_t reserved_bytes;  // their address space (never mapped)
        uint64_t slot_bytes;      // memory the slots take
    };

    explicit HandleTable(Params params = default_params());
    ~HandleTable();
    HandleTable(const HandleTable&) = delete;
    HandleTable& operator=(const HandleTable&) = delete;

    // The process's table, for the handles of the C API. Never destroyed, so
    // handles stay checkable during static destruction too.
    static HandleTable& global();

    // A new handle for `object` (not NULL) of `kind` (1 to 255), or 0 when no
    // handle is left (the address space is spent or cannot be reserved).
    // Thread-safe.
    uintptr_t add(void* object, uint8_t kind);

    // The object of `handle` if it is alive and of `kind`, else NULL. Takes no
    // lock. Thread-safe; a handle removed by another thread at the same time
    // is the caller's race, as for any object (external synchronization).
    void* find(uintptr_t handle, uint8_t kind) const noexcept;

    // Ends `handle` if it is alive and of `kind`; returns whether it was.
    // Thread-safe.
    bool remove(uintptr_t handle, uint8_t kind) noexcept;

    Stats stats() const;

private:
    static constexpr unsigned kChunkBits = 8;  // slots are made 256 at a time
    struct Slot {
        std::atomic<uint32_t> tag{0};  // generation << 8 | kind; kind 0: not alive
        std::atomic<void*> object{nullptr};
    };
    struct Chunk {
        Slot slots[1u << kChunkBits];
    };
    struct Range {
        uintptr_t base = 0;
        std::unique_ptr<std::atomic<Chunk*>[]> chunks;
    };

    Slot* slot(uint32_t range, uint32_t index) const noexcept;
    bool grow();  // makes a chunk of free slots; mutex_ held

    const Params params_;
    const uint64_t range_bytes_;
    const uint32_t chunks_per_range_;
    std::unique_ptr<Range[]> ranges_;
    std::atomic<uint32_t> n_ranges_{0};

    mutable std::mutex mutex_;
    std::vector<uint32_t> free_;  // (range << slot_bits) | slot, reused newest first
    uint64_t slots_ = 0;
    uint64_t live_ = 0;
    uint64_t retired_ = 0;
};

}  // namespace kvrt
