// Stale handles: a destroyed handle is refused by every call, also after new
// objects of the same kind were created (its value is never given out again),
// and a destroyed object leaves nothing behind.
#include <set>
#include <vector>

#include "core/handle_table.hpp"
#include "gpu_test.hpp"

using namespace kvrt_test;

namespace {

constexpr int kBatch = 16;

kvrt_cache_desc small_cache() {
    kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
    d.n_layers = 1;
    d.n_heads = 2;
    d.n_kv_heads = 1;
    d.head_dim_k = 32;
    d.capacity = 16;
    d.type_k = KVRT_TYPE_F32;
    d.type_v = KVRT_TYPE_F32;
    return d;
}

kvrt_memory_desc small_memory() {
    kvrt_memory_desc d = KVRT_MEMORY_DESC_INIT;
    d.n_layers = 1;
    d.n_heads = 1;
    d.n_slots = 4;
    d.key_dim = 4;
    return d;
}

// Creates and destroys objects in batches (freed memory is handed out again
// soonest this way), collecting the destroyed handles in `dead`, then keeps a
// last batch alive; returns whether a live handle repeats a dead one (never,
// with addresses not reused).
template <class H, class Make, class Destroy>
bool reused(Make make, Destroy destroy, std::set<H>* dead, std::vector<H>* alive) {
    for (int round = 0; round < 4; ++round) {
        std::vector<H> batch;
        for (int i = 0; i < kBatch; ++i) batch.push_back(make());
        for (H h : batch) {
            REQUIRE(h != nullptr);
            REQUIRE(dead->count(h) == 0);
            destroy(h);
            dead->insert(h);
        }
    }
    bool hit = false;
    for (int i = 0; i < kBatch; ++i) {
        H h = make();
        hit = hit || dead->count(h) != 0;
        alive->push_back(h);
    }
    return hit;
}

}  // namespace

TEST_CASE("a destroyed handle stays invalid after new objects of its kind are created", "[handles]") {
    GpuContext ctx;
    const kvrt_cache_desc cd = small_cache();
    const kvrt_memory_desc md = small_memory();

    auto make_buffer = [&] {
        kvrt_buffer_desc d = KVRT_BUFFER_DESC_INIT;
        d.size = 256;
        kvrt_buffer b = nullptr;
        KVRT_REQUIRE_OK(kvrt_buffer_create(ctx, &d, &b));
        return b;
    };
    auto make_stream = [&] {
        kvrt_stream s = nullptr;
        KVRT_REQUIRE_OK(kvrt_stream_create(ctx, nullptr, &s));
        return s;
    };
    auto make_cache = [&] {
        kvrt_cache c = nullptr;
        KVRT_REQUIRE_OK(kvrt_cache_create(ctx, &cd, &c));
        return c;
    };
    auto make_memory = [&] {
        kvrt_memory m = nullptr;
        KVRT_REQUIRE_OK(kvrt_memory_create(ctx, &md, &m));
        return m;
    };

    std::set<kvrt_buffer> dead_buffers;
    std::set<kvrt_stream> dead_streams;
    std::set<kvrt_cache> dead_caches;
    std::set<kvrt_memory> dead_memories;
    std::vector<kvrt_buffer> buffers;
    std::vector<kvrt_stream> streams;
    std::vector<kvrt_cache> caches;
    std::vector<kvrt_memory> memories;
    CHECK_FALSE(reused(make_buffer, kvrt_buffer_destroy, &dead_buffers, &buffers));
    CHECK_FALSE(reused(make_stream, kvrt_stream_destroy, &dead_streams, &streams));
    CHECK_FALSE(reused(make_cache, kvrt_cache_destroy, &dead_caches, &caches));
    CHECK_FALSE(reused(make_memory, kvrt_memory_destroy, &dead_memories, &memories));

    // Every call with an old handle is refused, and destroying it again
    // touches nothing.
    uint64_t size = 0;
    uint32_t word = 0;
    kvrt_cache_info info = KVRT_CACHE_INFO_INIT;
    int32_t pos = 0;
    std::vector<float> state(64);
    for (kvrt_buffer b : dead_buffers) {
        REQUIRE(kvrt_buffer_get_size(b, &size) == KVRT_ERROR_INVALID_HANDLE);
        REQUIRE(kvrt_buffer_upload(b, 0, &word, 4) == KVRT_ERROR_INVALID_HANDLE);
        REQUIRE(kvrt_buffer_download(b, 0, &word, 4) == KVRT_ERROR_INVALID_HANDLE);
        kvrt_buffer_destroy(b);
    }
    for (kvrt_stream s : dead_streams) {
        REQUIRE(kvrt_stream_begin(s) == KVRT_ERROR_INVALID_HANDLE);
        REQUIRE(kvrt_stream_submit(s) == KVRT_ERROR_INVALID_HANDLE);
        REQUIRE(kvrt_stream_wait(s, 0) == KVRT_ERROR_INVALID_HANDLE);
        kvrt_stream_destroy(s);
    }
    for (kvrt_cache c : dead_caches) {
        REQUIRE(kvrt_cache_get_info(c, &info) == KVRT_ERROR_INVALID_HANDLE);
        REQUIRE(kvrt_cache_seq_rm(c, -1, -1, -1) == KVRT_ERROR_INVALID_HANDLE);
        REQUIRE(kvrt_cache_seq_pos_max(c, 0, &pos) == KVRT_ERROR_INVALID_HANDLE);
        REQUIRE(kvrt_cache_clear(c) == KVRT_ERROR_INVALID_HANDLE);
        // Mixed kinds: an old address never passes as another kind either.
        REQUIRE(kvrt_buffer_get_size(reinterpret_cast<kvrt_buffer>(c), &size) == KVRT_ERROR_INVALID_HANDLE);
        kvrt_cache_destroy(c);
    }
    for (kvrt_memory m : dead_memories) {
        REQUIRE(kvrt_memory_seq_rm(m, nullptr, 0) == KVRT_ERROR_INVALID_HANDLE);
        REQUIRE(kvrt_memory_get_state(m, 0, 0, state.data(), bytes_of(state)) == KVRT_ERROR_INVALID_HANDLE);
        kvrt_memory_destroy(m);
    }

    // The live objects are untouched by all of that.
    for (kvrt_buffer b : buffers) {
        KVRT_REQUIRE_OK(kvrt_buffer_get_size(b, &size));
        REQUIRE(size == 256);
    }
    for (kvrt_stream s : streams) KVRT_REQUIRE_OK(kvrt_stream_wait(s, 0));
    for (kvrt_cache c : caches) KVRT_REQUIRE_OK(kvrt_cache_get_info(c, &info));
    for (kvrt_memory m : memories) KVRT_REQUIRE_OK(kvrt_memory_get_state(m, 0, 0, state.data(), bytes_of(state)));
    for (kvrt_buffer b : buffers) kvrt_buffer_destroy(b);
    for (kvrt_stream s : streams) kvrt_stream_destroy(s);
    for (kvrt_cache c : caches) kvrt_cache_destroy(c);
    for (kvrt_memory m : memories) kvrt_memory_destroy(m);
}

TEST_CASE("a destroyed context handle stays invalid after new contexts are created", "[handles]") {
    kvrt_context old = nullptr;
    KVRT_REQUIRE_OK(kvrt_context_create(nullptr, &old));
    kvrt_context_destroy(old);
    bool hit = false;
    for (int i = 0; i < 4; ++i) {
        kvrt_context c = nullptr;
        KVRT_REQUIRE_OK(kvrt_context_create(nullptr, &c));
        hit = hit || c == old;
        kvrt_context_destroy(c);
    }
    CHECK_FALSE(hit);
    kvrt_context_stats stats = KVRT_CONTEXT_STATS_INIT;
    REQUIRE(kvrt_context_get_stats(old, &stats) == KVRT_ERROR_INVALID_HANDLE);
    kvrt_buffer_desc d = KVRT_BUFFER_DESC_INIT;
    d.size = 256;
    kvrt_buffer b = nullptr;
    REQUIRE(kvrt_buffer_create(old, &d, &b) == KVRT_ERROR_INVALID_HANDLE);
    REQUIRE(b == nullptr);
    kvrt_context_destroy(old);
}

TEST_CASE("destroyed objects leave no handle memory behind", "[handles]") {
    // Every kind created and destroyed thousands of times: the handle table
    // reuses its slots (a new generation each time), so it holds no more
    // slots than a chunk and every destroyed handle is gone from it.
    GpuContext ctx;
    const kvrt_cache_desc cd = small_cache();
    const kvrt::HandleTable& table = kvrt::HandleTable::global();
    const kvrt::HandleTable::Stats before = table.stats();
    std::set<kvrt_stream> seen;
    kvrt_buffer_desc bd = KVRT_BUFFER_DESC_INIT;
    bd.size = 256;
    for (int i = 0; i < 3000; ++i) {
        kvrt_stream s = nullptr;
        KVRT_REQUIRE_OK(kvrt_stream_create(ctx, nullptr, &s));
        REQUIRE(seen.insert(s).second);  // never a value given out before
        kvrt_buffer b = nullptr;
        KVRT_REQUIRE_OK(kvrt_buffer_create(ctx, &bd, &b));
        kvrt_stream_destroy(s);
        kvrt_buffer_destroy(b);
        if (i % 10 == 0) {
            kvrt_cache c = nullptr;
            KVRT_REQUIRE_OK(kvrt_cache_create(ctx, &cd, &c));
            kvrt_cache_destroy(c);
        }
    }
    const kvrt::HandleTable::Stats after = table.stats();
    CHECK(after.live == before.live);
    CHECK(after.slots - before.slots <= 256);
    CHECK(after.slot_bytes - before.slot_bytes <= 8192);
    // The oldest handles are still refused.
    uint32_t timings = 0;
    for (kvrt_stream s : seen) REQUIRE(kvrt_stream_get_timings(s, nullptr, &timings) == KVRT_ERROR_INVALID_HANDLE);
}
