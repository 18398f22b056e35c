// The bad-input table of every exported function (tests/abi/kvrt.symbols):
// shared objects and the row type. test_bad_input.cpp runs the table and
// holds the rows of the result, type, context and buffer functions;
// test_bad_input_cache.cpp and test_bad_input_memory.cpp add the cache's and
// the memory's, test_bad_input_stream.cpp the streams'.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "gpu_test.hpp"
#include "kvrt/kvrt_vulkan.h"

namespace kvrt_test::bad_input {

constexpr uint64_t kMax64 = std::numeric_limits<uint64_t>::max();
constexpr int32_t kMin32 = std::numeric_limits<int32_t>::min();
constexpr int32_t kMax32 = std::numeric_limits<int32_t>::max();
constexpr uint32_t kMaxU32 = std::numeric_limits<uint32_t>::max();

// Values of no enumerator, as a C caller can pass them.
template <class E>
E bad_enum(int32_t v) {
    return static_cast<E>(v);
}

// The objects the rows call on. Two contexts (the second for "of another
// context" rows), and handles of every kind that were destroyed before the
// table runs.
struct World {
    // The cell cache: 2 layers, 2 query heads, 1 KV head, head dims 32,
    // 64 cells, 4 sequences, F16; sequence 0 holds positions 0..7, sequence
    // 1 positions 0..3.
    static constexpr uint32_t kLayers = 2, kHeads = 2, kKvHeads = 1, kDim = 32, kCapacity = 64, kSeqs = 4;
    // The static cache: 1 layer, 1 head, head dim 32, seq_len 8, 2 sequences,
    // F16; sequence 0 holds positions 0..2.
    static constexpr uint32_t kStaticSeqLen = 8;
    // The memory: 1 layer, 2 heads, 16 slots, key and value dims 16, 2
    // sequences; sequence 0 has seen 3 tokens.
    static constexpr uint32_t kMemHeads = 2, kMemDim = 16, kMemSlots = 16, kMemSeqs = 2;
    static constexpr uint64_t kBufferBytes = 4096;

    GpuContext a;
    GpuContext b{0};
    kvrt_buffer buffer = nullptr, buffer_b = nullptr;
    kvrt_stream stream = nullptr, stream_b = nullptr;
    Cache cache, cache_b, static_cache;
    kvrt_memory memory = nullptr;
    // The VkBuffer of `buffer` (for kvrt_buffer_import_vulkan rows).
    VkBuffer vk_buffer = VK_NULL_HANDLE;
    // Destroyed handles.
    kvrt_context dead_context = nullptr;
    kvrt_buffer dead_buffer = nullptr;
    kvrt_stream dead_stream = nullptr;
    kvrt_cache dead_cache = nullptr;
    kvrt_memory dead_memory = nullptr;
    // A cache whose context was destroyed (which destroyed the cache).
    kvrt_cache orphan_cache = nullptr;

    World();
    ~World();
    World(const World&) = delete;
    World& operator=(const World&) = delete;

    // A descriptor of the cell cache (KVRT_CACHE_DESC_INIT plus its sizes).
    static kvrt_cache_desc cache_desc();
    // A descriptor of the memory; its key source is SEED.
    static kvrt_memory_desc memory_desc();
};

// A call's result and its detail message, taken at once (the next kvrt
// call, a cleanup included, replaces the message).
struct Outcome {
    kvrt_result r = KVRT_SUCCESS;
    std::string message;
};
inline Outcome out(kvrt_result r) { return Outcome{r, kvrt_last_error_message()}; }

// Begins `s`, makes the row's call, then submits and waits (when the
// recording is still submittable), so that argument errors are checked on a
// recording stream.
Outcome while_recording(kvrt_stream s, const std::function<Outcome()>& call);

// Which object a row must leave as it was: read back and compared before
// and after the row. Device: the device memory context `a` holds (a failed
// creation allocates nothing).
enum class Target { None, Buffer, Cache, StaticCache, Memory, Device };

// One row: a call of `fn` with one kind of bad input.
struct Row {
    std::string fn;    // the exported function
    std::string what;  // the bad input
    Target target = Target::None;
    // An error: the exact result, with a non-empty message.
    // A documented no-op (or documented value): noop is set, and `call`
    // returns KVRT_SUCCESS when the documented outcome held.
    kvrt_result want = KVRT_ERROR_INVALID_ARGUMENT;
    bool noop = false;
    std::function<Outcome()> call;
};

// Row builders.
inline Row err(std::string fn, std::string what, kvrt_result want, Target target, std::function<Outcome()> call) {
    return Row{std::move(fn), std::move(what), target, want, false, std::move(call)};
}
inline Row noop(std::string fn, std::string what, Target target, std::function<Outcome()> call) {
    return Row{std::move(fn), std::move(what), target, KVRT_SUCCESS, true, std::move(call)};
}
// KVRT_SUCCESS when `ok`, else KVRT_ERROR_INTERNAL (the documented outcome did not hold).
inline kvrt_result holds(bool ok) { return ok ? KVRT_SUCCESS : KVRT_ERROR_INTERNAL; }

// A struct of a type no kvrt defines, for the one chain row of each
// function that takes a struct (tests/gpu/test_abi_chains.cpp covers chains).
struct Foreign {
    kvrt_struct_type type = bad_enum<kvrt_struct_type>(31249);
    const void* next = nullptr;
    uint64_t payload = 0;
};

void add_general_rows(World& w, std::vector<Row>* rows);
void add_stream_rows(World& w, std::vector<Row>* rows);
void add_cache_rows(World& w, std::vector<Row>* rows);
void add_memory_rows(World& w, std::vector<Row>* rows);
void add_state_rows(World& w, std::vector<Row>* rows);

}  // namespace kvrt_test::bad_input
