// Bad input to every cache entry point: NULL, destroyed, foreign and mixed-up
// handles, streams and buffers of another context, unknown sequences,
// reversed ranges, overflowing sizes and offsets, bad descriptors, caches
// that cannot fit, repeated or already stored (sequence, position) pairs, and
// cells that are empty or out of range. Every error must come with its exact
// result code and a detail message, set out-handles to NULL, and change
// nothing: the table (positions, deltas, sequence words, counters) and the
// data of every stored token are compared before and after.
#include "gpu_test.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "api/handles.hpp"

using namespace kvrt_test;

namespace {

constexpr uint32_t kLayers = 2;
constexpr uint32_t kKvHeads = 2;
constexpr uint32_t kDim = 32;
constexpr uint32_t kCapacity = 32;
constexpr int32_t kSeqs = 4;
constexpr uint32_t kRowElems = kKvHeads * kDim;
constexpr uint64_t kRowBytesF32 = kRowElems * 4;

kvrt_cache_desc cache_desc() {
    kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
    d.n_layers = kLayers;
    d.n_heads = 2 * kKvHeads;
    d.n_kv_heads = kKvHeads;
    d.head_dim_k = kDim;
    d.capacity = kCapacity;
    d.max_seqs = kSeqs;
    d.type_k = KVRT_TYPE_Q8_0;
    d.type_v = KVRT_TYPE_F16;
    return d;
}

// Input rows (f32, layer blocks) for tokens [first, first + n): distinct,
// smooth values, so quantization keeps them distinct too.
std::vector<float> rows(uint32_t first, uint32_t n, float salt) {
    std::vector<float> x(size_t{kLayers} * n * kRowElems);
    for (size_t i = 0; i < x.size(); ++i)
        x[i] = std::sin(0.37f * static_cast<float>(i + first * kRowElems) + salt) * (1.0f + static_cast<float>(first));
    return x;
}

// Everything a failed call must leave as it was.
struct Snapshot {
    std::vector<int32_t> pos, delta;
    std::vector<uint64_t> words;
    uint32_t used = 0, used_end = 0, head = 0;
    std::vector<float> data;  // K and V of every used cell, every layer
    uint32_t info_used = 0, n_attend = 0, pending = 0;
    float fragmentation = 0;

    bool operator==(const Snapshot& o) const {
        return pos == o.pos && delta == o.delta && words == o.words && used == o.used && used_end == o.used_end &&
               head == o.head && data == o.data && info_used == o.info_used && n_attend == o.n_attend &&
               pending == o.pending && fragmentation == o.fragmentation;
    }
};

Snapshot snapshot(kvrt_cache cache) {
    const kvrt::kv::CellTable& t = cache->cache->table();
    Snapshot s;
    s.pos.assign(t.positions(), t.positions() + t.capacity());
    s.delta.assign(t.deltas(), t.deltas() + t.capacity());
    s.words.assign(t.seq_words(), t.seq_words() + size_t{t.capacity()} * t.words_per_cell());
    s.used = t.used();
    s.used_end = t.used_end();
    s.head = t.head();
    std::vector<uint32_t> cells;
    for (uint32_t c = 0; c < t.capacity(); ++c)
        if (!t.cell_is_empty(c)) cells.push_back(c);
    const uint32_t n = static_cast<uint32_t>(cells.size());
    std::vector<float> k(size_t{n} * kRowElems), v(k.size());
    for (uint32_t l = 0; l < kLayers && n > 0; ++l) {
        KVRT_REQUIRE_OK(kvrt_cache_read(cache, static_cast<int32_t>(l), n, cells.data(), k.data(), bytes_of(k),
                                        v.data(), bytes_of(v)));
        s.data.insert(s.data.end(), k.begin(), k.end());
        s.data.insert(s.data.end(), v.begin(), v.end());
    }
    kvrt_cache_info info = KVRT_CACHE_INFO_INIT;
    KVRT_REQUIRE_OK(kvrt_cache_get_info(cache, &info));
    s.info_used = info.used;
    s.n_attend = info.n_attend;
    s.pending = info.pending_shifts;
    s.fragmentation = info.fragmentation;
    return s;
}

// A cache holding a few sequences, some cells shared, with holes:
//   seq 0: positions 0..7 (cells 0..7), seq 1 shares positions 0..3,
//   seq 2: positions 0, 1, 4, 5 (cells 8, 9, 12, 13; 10 and 11 are holes),
//   seqs 1 and 3: position 10 (cell 14).
class Populated {
public:
    explicit Populated(kvrt_context ctx) {
        const kvrt_cache_desc d = cache_desc();
        KVRT_REQUIRE_OK(kvrt_cache_create(ctx, &d, cache_.out()));
        store({0, 1, 2, 3, 4, 5, 6, 7}, {0});
        KVRT_REQUIRE_OK(kvrt_cache_seq_cp(cache_, 0, 1, 0, 4));
        store({0, 1, 2, 3, 4, 5}, {2});
        store({10}, {1, 3});
        KVRT_REQUIRE_OK(kvrt_cache_seq_rm(cache_, 2, 2, 4));
        before_ = snapshot(cache_);
        REQUIRE(before_.used == 13);
        REQUIRE(before_.used_end == 15);
    }
    Populated(const Populated&) = delete;
    Populated& operator=(const Populated&) = delete;

    kvrt_cache get() const { return cache_; }
    operator kvrt_cache() const { return cache_; }
    uint32_t free_cells() const { return kCapacity - before_.used; }

    // The cache is exactly as it was at the last snapshot.
    void require_unchanged() const { REQUIRE((snapshot(cache_) == before_)); }
    // Accepts an intended change as the new reference state.
    void resnapshot() { before_ = snapshot(cache_); }

private:
    void store(std::vector<int32_t> pos, std::vector<int32_t> seqs) {
        const uint32_t n = static_cast<uint32_t>(pos.size());
        std::vector<uint32_t> counts(n, static_cast<uint32_t>(seqs.size()));
        std::vector<int32_t> ids;
        for (uint32_t i = 0; i < n; ++i) ids.insert(ids.end(), seqs.begin(), seqs.end());
        const auto k = rows(next_, n, 0.0f), v = rows(next_, n, 1.0f);
        next_ += n;
        const kvrt_tensor_ref kr = host_tensor(k.data());
        const kvrt_tensor_ref vr = host_tensor(v.data());
        const kvrt_batch b = make_batch(n, pos.data(), ids.data(), counts.data());
        KVRT_REQUIRE_OK(kvrt_cache_store(cache_, nullptr, &b, -1, &kr, &vr, nullptr));
    }

    Cache cache_;
    Snapshot before_;
    uint32_t next_ = 0;
};

// A store of new tokens (by default two tokens of sequence 3, positions 20
// and 21, from host f32 rows) whose fields a case breaks one at a time.
struct StoreCall {
    std::vector<int32_t> pos{20, 21};
    std::vector<uint32_t> counts{1, 1};
    std::vector<int32_t> ids{3, 3};
    std::vector<float> k = rows(100, 2, 0.0f), v = rows(100, 2, 1.0f);
    kvrt_tensor_ref kref = host_tensor(k.data());
    kvrt_tensor_ref vref = host_tensor(v.data());
    int32_t layer = -1;

    // n tokens of sequence 3 at positions 20.., with data.
    void resize(uint32_t n) {
        pos.resize(n);
        for (uint32_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(20 + i);
        counts.assign(n, 1);
        ids.assign(n, 3);
        k = rows(100, n, 0.0f);
        v = rows(100, n, 1.0f);
        kref.host = k.data();
        vref.host = v.data();
    }
    kvrt_batch batch() const {
        return make_batch(static_cast<uint32_t>(pos.size()), pos.data(), ids.data(), counts.data());
    }
    kvrt_result store(kvrt_cache c, kvrt_stream s = nullptr) const {
        const kvrt_batch b = batch();
        return kvrt_cache_store(c, s, &b, layer, &kref, &vref, nullptr);
    }
    kvrt_result place(kvrt_cache c) const {
        const kvrt_batch b = batch();
        return kvrt_cache_place(c, &b, nullptr);
    }
};

// A handle of one kind passed where another is expected.
template <class To, class From>
To as(From handle) {
    return reinterpret_cast<To>(handle);
}

}  // namespace

// `call` fails with exactly `code` and a detail message.
#define CHECK_FAILS(code, call)                                                                       \
    do {                                                                                              \
        const kvrt_result fails_r_ = (call);                                                          \
        const std::string fails_msg_ = kvrt_last_error_message();                                     \
        INFO(#call << " -> " << kvrt_result_string(fails_r_) << " \"" << fails_msg_ << "\"");          \
        CHECK(fails_r_ == (code));                                                                    \
        CHECK(!fails_msg_.empty());                                                                   \
    } while (0)

// ... and the populated cache `fx` is exactly as before.
#define CHECK_REJECTED(fx, code, call) \
    do {                               \
        CHECK_FAILS(code, call);       \
        (fx).require_unchanged();      \
    } while (0)

TEST_CASE("cache creation rejects bad descriptors and handles and allocates nothing", "[cache][errors]") {
    GpuContext ctx;
    Buffer buffer(ctx, 256);
    const uint64_t bytes_before = device_bytes(ctx);

    // Creation with `d` fails with `code`, sets the out-handle to NULL and
    // leaves the context's device memory as it was. The estimator applies the
    // same descriptor checks.
    auto create_fails = [&](kvrt_result code, const kvrt_cache_desc& d, bool estimate_too = true) {
        kvrt_cache out = as<kvrt_cache>(&buffer);  // anything but NULL
        CHECK_FAILS(code, kvrt_cache_create(ctx, &d, &out));
        CHECK(out == nullptr);
        CHECK(device_bytes(ctx) == bytes_before);
        if (estimate_too) {
            kvrt_cache_estimate e = KVRT_CACHE_ESTIMATE_INIT;
            CHECK_FAILS(KVRT_ERROR_INVALID_ARGUMENT, kvrt_cache_estimate_size(ctx, &d, &e));
        }
    };

    kvrt_cache_desc d = cache_desc();
    d.type = KVRT_STRUCT_TYPE_UNDEFINED;
    create_fails(KVRT_ERROR_INVALID_ARGUMENT, d);
    for (uint32_t kvrt_cache_desc::*field : {&kvrt_cache_desc::n_layers, &kvrt_cache_desc::n_heads,
                                            &kvrt_cache_desc::n_kv_heads, &kvrt_cache_desc::head_dim_k,
                                            &kvrt_cache_desc::capacity}) {
        d = cache_desc();
        d.*field = 0;
        create_fails(KVRT_ERROR_INVALID_ARGUMENT, d);
    }
    d = cache_desc();
    d.n_heads = 6;  // not a multiple of n_kv_heads
    d.n_kv_heads = 4;
    create_fails(KVRT_ERROR_INVALID_ARGUMENT, d);

    // Quantized types need head dims that are multiples of 32.
    d = cache_desc();
    d.head_dim_k = 48;
    create_fails(KVRT_ERROR_INVALID_ARGUMENT, d);
    d = cache_desc();
    d.type_v = KVRT_TYPE_Q4_0;
    d.head_dim_v = 16;
    create_fails(KVRT_ERROR_INVALID_ARGUMENT, d);
    d = cache_desc();
    d.type_v = KVRT_TYPE_Q8_0;
    d.head_dim_v = 40;
    create_fails(KVRT_ERROR_INVALID_ARGUMENT, d);

    // Undefined and unknown types, unknown layouts, bad RoPE settings (the
    // RoPE is part of the descriptor: the estimator checks it too).
    d = cache_desc();
    d.type_k = KVRT_TYPE_UNDEFINED;
    create_fails(KVRT_ERROR_INVALID_ARGUMENT, d);
    d = cache_desc();
    d.type_v = KVRT_TYPE_UNDEFINED;
    create_fails(KVRT_ERROR_INVALID_ARGUMENT, d);
    d = cache_desc();
    d.type_k = static_cast<kvrt_type>(99);
    create_fails(KVRT_ERROR_INVALID_ARGUMENT, d);
    d = cache_desc();
    d.type_v = static_cast<kvrt_type>(-5);
    create_fails(KVRT_ERROR_INVALID_ARGUMENT, d);
    d = cache_desc();
    d.layout = static_cast<kvrt_layout>(7);
    create_fails(KVRT_ERROR_INVALID_ARGUMENT, d);
    kvrt_rope_desc rope = KVRT_ROPE_DESC_INIT;
    d = cache_desc();
    d.next = &rope;
    rope.n_rot = 2 * kDim;  // more than head_dim_k
    create_fails(KVRT_ERROR_INVALID_ARGUMENT, d);
    rope.n_rot = 15;  // odd
    create_fails(KVRT_ERROR_INVALID_ARGUMENT, d);
    rope = kvrt_rope_desc KVRT_ROPE_DESC_INIT;
    rope.mode = static_cast<kvrt_rope_mode>(9);
    create_fails(KVRT_ERROR_INVALID_ARGUMENT, d);

    // NULL arguments and handles that are not live contexts.
    kvrt_cache out = as<kvrt_cache>(&buffer);
    d = cache_desc();
    CHECK_FAILS(KVRT_ERROR_INVALID_ARGUMENT, kvrt_cache_create(ctx, nullptr, &out));
    CHECK(out == nullptr);
    CHECK_FAILS(KVRT_ERROR_INVALID_ARGUMENT, kvrt_cache_create(ctx, &d, nullptr));
    out = as<kvrt_cache>(&buffer);
    CHECK_FAILS(KVRT_ERROR_INVALID_HANDLE, kvrt_cache_create(nullptr, &d, &out));
    CHECK(out == nullptr);
    out = as<kvrt_cache>(&buffer);
    const kvrt_context not_a_context = as<kvrt_context>(static_cast<kvrt_buffer>(buffer));
    CHECK_FAILS(KVRT_ERROR_INVALID_HANDLE, kvrt_cache_create(not_a_context, &d, &out));
    CHECK(out == nullptr);
    kvrt_context dead = nullptr;
    {
        kvrt_context_desc cd = KVRT_CONTEXT_DESC_INIT;
        KVRT_REQUIRE_OK(kvrt_context_create(&cd, &dead));
        kvrt_context_destroy(dead);
    }
    out = as<kvrt_cache>(&buffer);
    CHECK_FAILS(KVRT_ERROR_INVALID_HANDLE, kvrt_cache_create(dead, &d, &out));
    CHECK(out == nullptr);

    // The estimator's own arguments.
    kvrt_cache_estimate e = KVRT_CACHE_ESTIMATE_INIT;
    CHECK_FAILS(KVRT_ERROR_INVALID_ARGUMENT, kvrt_cache_estimate_size(ctx, nullptr, &e));
    CHECK_FAILS(KVRT_ERROR_INVALID_ARGUMENT, kvrt_cache_estimate_size(ctx, &d, nullptr));
    e.type = KVRT_STRUCT_TYPE_CACHE_INFO;
    CHECK_FAILS(KVRT_ERROR_INVALID_ARGUMENT, kvrt_cache_estimate_size(ctx, &d, &e));
    e = KVRT_CACHE_ESTIMATE_INIT;
    CHECK_FAILS(KVRT_ERROR_INVALID_HANDLE, kvrt_cache_estimate_size(not_a_context, &d, &e));
    CHECK_FAILS(KVRT_ERROR_INVALID_HANDLE, kvrt_cache_estimate_size(dead, &d, &e));
    CHECK(device_bytes(ctx) == bytes_before);
}

TEST_CASE("caches that cannot fit fail quickly with nothing allocated", "[cache][errors]") {
    GpuContext ctx;
    kvrt_device_info info = KVRT_DEVICE_INFO_INIT;
    KVRT_REQUIRE_OK(kvrt_context_get_device_info(ctx, &info));
    const uint64_t bytes_before = device_bytes(ctx);

    // Fails with either code, quickly: nothing in proportion to the capacity
    // may be allocated first (a host table of 2^30 cells would take many
    // seconds and gigabytes).
    auto too_big = [&](const kvrt_cache_desc& d) {
        kvrt_cache out = as<kvrt_cache>(&info);
        const auto t0 = std::chrono::steady_clock::now();
        const kvrt_result r = kvrt_cache_create(ctx, &d, &out);
        const std::chrono::duration<double> took = std::chrono::steady_clock::now() - t0;
        INFO("capacity " << d.capacity << ", " << d.n_layers << " layers: " << kvrt_result_string(r) << " \""
                         << kvrt_last_error_message() << "\" after " << took.count() << " s");
        CHECK((r == KVRT_ERROR_OUT_OF_DEVICE_MEMORY || r == KVRT_ERROR_INVALID_ARGUMENT));
        CHECK(took.count() < 2.0);
        CHECK(kvrt_last_error_message()[0] != '\0');
        CHECK(out == nullptr);
        CHECK(device_bytes(ctx) == bytes_before);
        if (out && out != as<kvrt_cache>(&info)) kvrt_cache_destroy(out);
    };

    // 2^30 cells of Llama-2-7B (512 KiB each), and more cells than that.
    kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
    d.n_layers = 32;
    d.n_heads = 32;
    d.n_kv_heads = 32;
    d.head_dim_k = 128;
    d.capacity = 1u << 30;
    too_big(d);
    d.capacity = UINT32_MAX;
    too_big(d);
    d.n_layers = UINT32_MAX;
    too_big(d);

    // Each layer's arrays fit the device, all of them together do not: the
    // cache must fail as a whole, before anything is allocated.
    d = KVRT_CACHE_DESC_INIT;
    d.n_heads = d.n_kv_heads = 8;
    d.head_dim_k = 128;
    d.capacity = 32768;  // 64 MiB per array and layer
    const uint64_t per_layer = 2ull * 2 * 8 * 128 * 32768;
    d.n_layers = static_cast<uint32_t>(std::min<uint64_t>(info.device_local_bytes / per_layer + 1, 4096));
    kvrt_cache_estimate e = KVRT_CACHE_ESTIMATE_INIT;
    KVRT_REQUIRE_OK(kvrt_cache_estimate_size(ctx, &d, &e));
    if (info.device_local_bytes != 0 && e.device_bytes > info.device_local_bytes) {
        kvrt_cache out = as<kvrt_cache>(&info);
        CHECK_FAILS(KVRT_ERROR_OUT_OF_DEVICE_MEMORY, kvrt_cache_create(ctx, &d, &out));
        CHECK(out == nullptr);
        if (out && out != as<kvrt_cache>(&info)) kvrt_cache_destroy(out);
        CHECK(device_bytes(ctx) == bytes_before);
    }
}

TEST_CASE("every cache entry point rejects NULL, destroyed and mixed-up cache handles", "[cache][errors]") {
    GpuContext ctx;
    Populated fx(ctx);
    Buffer buffer(ctx, 4096);
    Stream stream(ctx);

    // A destroyed cache, and a cache whose context was destroyed. No cache is
    // created after this point, so neither address can be handed out again.
    const kvrt_cache_desc d = cache_desc();
    kvrt_cache destroyed = nullptr, orphan = nullptr;
    KVRT_REQUIRE_OK(kvrt_cache_create(ctx, &d, &destroyed));
    kvrt_cache_destroy(destroyed);
    {
        kvrt_context other = nullptr;
        kvrt_context_desc cd = KVRT_CONTEXT_DESC_INIT;
        KVRT_REQUIRE_OK(kvrt_context_create(&cd, &other));
        KVRT_REQUIRE_OK(kvrt_cache_create(other, &d, &orphan));
        kvrt_context_destroy(other);
    }

    const std::vector<std::pair<const char*, kvrt_cache>> bad = {
        {"NULL", nullptr},
        {"destroyed cache", destroyed},
        {"cache of a destroyed context", orphan},
        {"buffer", as<kvrt_cache>(static_cast<kvrt_buffer>(buffer))},
        {"stream", as<kvrt_cache>(static_cast<kvrt_stream>(stream))},
        {"context", as<kvrt_cache>(ctx.get())},
    };
    StoreCall call;
    const kvrt_batch batch = call.batch();
    uint32_t cells[2] = {0, 1};
    std::vector<float> out(2 * kRowElems);
    for (const auto& [what, h] : bad) {
        INFO("cache handle: " << what);
        kvrt_cache_info info = KVRT_CACHE_INFO_INIT;
        int32_t pos = 0;
        uint32_t moved = 0;
        const kvrt_result H = KVRT_ERROR_INVALID_HANDLE;
        CHECK_REJECTED(fx, H, kvrt_cache_get_info(h, &info));
        CHECK_REJECTED(fx, H, kvrt_cache_store(h, nullptr, &batch, -1, &call.kref, &call.vref, nullptr));
        CHECK_REJECTED(fx, H, kvrt_cache_place(h, &batch, nullptr));
        CHECK_REJECTED(fx, H, kvrt_cache_write(h, nullptr, 2, cells, -1, &call.kref, &call.vref));
        CHECK_REJECTED(fx, H, kvrt_cache_read(h, 0, 2, cells, out.data(), bytes_of(out), out.data(), bytes_of(out)));
        CHECK_REJECTED(fx, H, kvrt_cache_seq_rm(h, 0, -1, -1));
        CHECK_REJECTED(fx, H, kvrt_cache_seq_cp(h, 0, 2, -1, -1));
        CHECK_REJECTED(fx, H, kvrt_cache_seq_keep(h, 0));
        CHECK_REJECTED(fx, H, kvrt_cache_seq_add(h, 0, -1, -1, 1));
        CHECK_REJECTED(fx, H, kvrt_cache_seq_div(h, 0, -1, -1, 2));
        CHECK_REJECTED(fx, H, kvrt_cache_seq_pos_min(h, 0, &pos));
        CHECK_REJECTED(fx, H, kvrt_cache_seq_pos_max(h, 0, &pos));
        CHECK_REJECTED(fx, H, kvrt_cache_clear(h));
        CHECK_REJECTED(fx, H, kvrt_cache_compact(h, nullptr, 0.0f, 0, &moved));
        kvrt_cache_destroy(h);  // a no-op for anything but a live cache
        fx.require_unchanged();
    }
    // The buffer and the stream survived being passed as caches.
    uint64_t size = 0;
    KVRT_REQUIRE_OK(kvrt_buffer_get_size(buffer, &size));
    CHECK(size == 4096);
    run_stream(stream, [] {});
}

TEST_CASE("streams and buffers of another context, destroyed or idle, are rejected", "[cache][errors]") {
    GpuContext ctx, other_ctx;
    Populated fx(ctx);
    Stream other_stream(other_ctx);
    Buffer other_buffer(other_ctx, 4096);
    Buffer buffer(ctx, 4096);
    Stream idle(ctx);  // never begun
    kvrt_stream dead_stream = nullptr;
    kvrt_stream_desc sd = KVRT_STREAM_DESC_INIT;
    KVRT_REQUIRE_OK(kvrt_stream_create(ctx, &sd, &dead_stream));
    kvrt_stream_destroy(dead_stream);
    kvrt_buffer dead_buffer = nullptr;
    kvrt_buffer_desc bd = KVRT_BUFFER_DESC_INIT;
    bd.size = 4096;
    KVRT_REQUIRE_OK(kvrt_buffer_create(ctx, &bd, &dead_buffer));
    kvrt_buffer_destroy(dead_buffer);

    REQUIRE(kvrt_stream_begin(other_stream) == KVRT_SUCCESS);
    StoreCall call;
    uint32_t cells[2] = {0, 1};
    uint32_t moved = 0;

    // Streams.
    const kvrt_result A = KVRT_ERROR_INVALID_ARGUMENT, H = KVRT_ERROR_INVALID_HANDLE, S = KVRT_ERROR_INVALID_STATE;
    for (const auto& [code, what, s] : std::vector<std::tuple<kvrt_result, const char*, kvrt_stream>>{
             {A, "a stream of another context", other_stream},
             {H, "a destroyed stream", dead_stream},
             {H, "a buffer", as<kvrt_stream>(static_cast<kvrt_buffer>(buffer))},
             {H, "a cache", as<kvrt_stream>(fx.get())},
             {S, "a stream that is not recording", idle}}) {
        INFO("stream: " << what);
        CHECK_REJECTED(fx, code, call.store(fx, s));
        CHECK_REJECTED(fx, code, kvrt_cache_write(fx, s, 2, cells, -1, &call.kref, &call.vref));
        CHECK_REJECTED(fx, code, kvrt_cache_compact(fx, s, 0.0f, 0, &moved));
    }
    KVRT_REQUIRE_OK(kvrt_stream_submit(other_stream));
    KVRT_REQUIRE_OK(kvrt_stream_wait(other_stream, UINT64_MAX));

    // Buffers as K or V sources.
    for (const auto& [code, what, b] : std::vector<std::tuple<kvrt_result, const char*, kvrt_buffer>>{
             {A, "a buffer of another context", other_buffer},
             {H, "a destroyed buffer", dead_buffer},
             {H, "a stream", as<kvrt_buffer>(static_cast<kvrt_stream>(idle))},
             {H, "a cache", as<kvrt_buffer>(fx.get())}}) {
        INFO("buffer: " << what);
        for (bool on_v : {false, true}) {
            StoreCall c;
            kvrt_tensor_ref& ref = on_v ? c.vref : c.kref;
            ref.host = nullptr;
            ref.buffer = b;
            CHECK_REJECTED(fx, code, c.store(fx));
            CHECK_REJECTED(fx, code, kvrt_cache_write(fx, nullptr, 2, cells, -1, &c.kref, &c.vref));
        }
    }
}

TEST_CASE("sequence operations reject unknown sequences and reversed ranges", "[cache][errors]") {
    GpuContext ctx;
    Populated fx(ctx);
    const kvrt_result A = KVRT_ERROR_INVALID_ARGUMENT;
    for (int32_t seq : {kSeqs, kSeqs + 1, INT32_MAX}) {
        INFO("sequence " << seq);
        CHECK_REJECTED(fx, A, kvrt_cache_seq_rm(fx, seq, -1, -1));
        CHECK_REJECTED(fx, A, kvrt_cache_seq_cp(fx, seq, 0, -1, -1));
        CHECK_REJECTED(fx, A, kvrt_cache_seq_cp(fx, 0, seq, -1, -1));
        CHECK_REJECTED(fx, A, kvrt_cache_seq_keep(fx, seq));
        CHECK_REJECTED(fx, A, kvrt_cache_seq_add(fx, seq, -1, -1, 1));
        CHECK_REJECTED(fx, A, kvrt_cache_seq_div(fx, seq, -1, -1, 2));
        int32_t pos = 0;
        CHECK_REJECTED(fx, A, kvrt_cache_seq_pos_min(fx, seq, &pos));
        CHECK_REJECTED(fx, A, kvrt_cache_seq_pos_max(fx, seq, &pos));
    }
    // Negative ids: allowed only by seq_rm (all sequences).
    for (int32_t seq : {-1, -7, INT32_MIN}) {
        INFO("sequence " << seq);
        CHECK_REJECTED(fx, A, kvrt_cache_seq_cp(fx, seq, 0, -1, -1));
        CHECK_REJECTED(fx, A, kvrt_cache_seq_cp(fx, 0, seq, -1, -1));
        CHECK_REJECTED(fx, A, kvrt_cache_seq_keep(fx, seq));
        CHECK_REJECTED(fx, A, kvrt_cache_seq_add(fx, seq, -1, -1, 1));
        CHECK_REJECTED(fx, A, kvrt_cache_seq_div(fx, seq, -1, -1, 2));
        int32_t pos = 0;
        CHECK_REJECTED(fx, A, kvrt_cache_seq_pos_min(fx, seq, &pos));
        CHECK_REJECTED(fx, A, kvrt_cache_seq_pos_max(fx, seq, &pos));
    }
    // Reversed ranges: 0 <= p1 < p0.
    for (auto [p0, p1] : {std::pair<int32_t, int32_t>{5, 2}, {1, 0}, {INT32_MAX, 0}}) {
        INFO("range [" << p0 << ", " << p1 << ")");
        CHECK_REJECTED(fx, A, kvrt_cache_seq_rm(fx, 0, p0, p1));
        CHECK_REJECTED(fx, A, kvrt_cache_seq_rm(fx, -1, p0, p1));
        CHECK_REJECTED(fx, A, kvrt_cache_seq_cp(fx, 0, 2, p0, p1));
        CHECK_REJECTED(fx, A, kvrt_cache_seq_add(fx, 0, p0, p1, 1));
        CHECK_REJECTED(fx, A, kvrt_cache_seq_div(fx, 0, p0, p1, 2));
    }
    // Divisors below 1, and positions pushed past INT32_MAX.
    CHECK_REJECTED(fx, A, kvrt_cache_seq_div(fx, 0, -1, -1, 0));
    CHECK_REJECTED(fx, A, kvrt_cache_seq_div(fx, 0, -1, -1, -3));
    CHECK_REJECTED(fx, A, kvrt_cache_seq_add(fx, 0, -1, -1, INT32_MAX));
    CHECK_REJECTED(fx, A, kvrt_cache_seq_add(fx, 1, 10, 11, INT32_MAX - 5));
    // NULL out-pointers.
    CHECK_REJECTED(fx, A, kvrt_cache_seq_pos_min(fx, 0, nullptr));
    CHECK_REJECTED(fx, A, kvrt_cache_seq_pos_max(fx, 0, nullptr));

    // Not errors, and no-ops: empty ranges, a copy onto itself, sequences
    // with nothing in the range.
    KVRT_REQUIRE_OK(kvrt_cache_seq_rm(fx, 0, 3, 3));
    KVRT_REQUIRE_OK(kvrt_cache_seq_rm(fx, 3, 0, 10));
    KVRT_REQUIRE_OK(kvrt_cache_seq_cp(fx, 0, 0, -1, -1));
    KVRT_REQUIRE_OK(kvrt_cache_seq_cp(fx, 3, 0, 0, 10));
    KVRT_REQUIRE_OK(kvrt_cache_seq_add(fx, 0, 0, -1, 0));
    KVRT_REQUIRE_OK(kvrt_cache_seq_div(fx, 0, 0, -1, 1));
    fx.require_unchanged();
}

TEST_CASE("store and place reject bad batches and change nothing", "[cache][errors]") {
    GpuContext ctx;
    Populated fx(ctx);
    const kvrt_result A = KVRT_ERROR_INVALID_ARGUMENT;

    // Both entry points place, so both check the batch the same way.
    auto both = [&](kvrt_result code, const StoreCall& c) {
        CHECK_REJECTED(fx, code, c.store(fx));
        CHECK_REJECTED(fx, code, c.place(fx));
    };
    {
        kvrt_batch b = StoreCall().batch();
        CHECK_REJECTED(fx, A, kvrt_cache_place(fx, nullptr, nullptr));
        StoreCall c;
        CHECK_REJECTED(fx, A, kvrt_cache_store(fx, nullptr, nullptr, -1, &c.kref, &c.vref, nullptr));
        b.positions = nullptr;
        CHECK_REJECTED(fx, A, kvrt_cache_place(fx, &b, nullptr));
        CHECK_REJECTED(fx, A, kvrt_cache_store(fx, nullptr, &b, -1, &c.kref, &c.vref, nullptr));
        b = c.batch();
        b.seq_ids = nullptr;
        CHECK_REJECTED(fx, A, kvrt_cache_place(fx, &b, nullptr));
        CHECK_REJECTED(fx, A, kvrt_cache_store(fx, nullptr, &b, -1, &c.kref, &c.vref, nullptr));
    }
    // In each case the first token is fine and the second is not.
    StoreCall c;
    c.pos[1] = -1;
    both(A, c);
    c = StoreCall();
    c.pos[1] = INT32_MIN;
    both(A, c);
    for (int32_t seq : {kSeqs, -1, INT32_MAX}) {
        c = StoreCall();
        c.ids[1] = seq;
        both(A, c);
    }
    c = StoreCall();
    c.counts[1] = 0;  // a token of no sequence
    c.ids.pop_back();
    both(A, c);
    c = StoreCall();
    c.pos[1] = c.pos[0];  // the same (sequence, position) twice in the batch
    both(A, c);
    c = StoreCall();
    c.counts = {1, 2};  // a sequence id repeated inside one token
    c.ids = {3, 2, 2};
    both(A, c);
    c = StoreCall();
    c.ids[1] = 0;
    c.pos[1] = 2;  // sequence 0 already has position 2
    both(A, c);
    c = StoreCall();
    c.ids[1] = 1;
    c.pos[1] = 10;  // sequence 1 got position 10 from a shared token
    both(A, c);

    // More tokens than free cells.
    c = StoreCall();
    c.resize(fx.free_cells() + 1);
    both(KVRT_ERROR_CACHE_FULL, c);
    c.resize(fx.free_cells());  // exactly fits: the only successful call here
    KVRT_REQUIRE_OK(c.store(fx));
    KVRT_REQUIRE_OK(kvrt_cache_seq_rm(fx, 3, 20, -1));
    fx.resnapshot();
}

TEST_CASE("store and write reject data that does not match or overflows", "[cache][errors]") {
    GpuContext ctx;
    Populated fx(ctx);
    const kvrt_result A = KVRT_ERROR_INVALID_ARGUMENT;
    // Two cells in use (seq 0, positions 0 and 1) for kvrt_cache_write.
    uint32_t cells[2] = {0, 1};
    auto both = [&](const StoreCall& c) {
        CHECK_REJECTED(fx, A, c.store(fx));
        CHECK_REJECTED(fx, A, kvrt_cache_write(fx, nullptr, 2, cells, c.layer, &c.kref, &c.vref));
    };

    StoreCall c;
    for (int32_t layer : {static_cast<int32_t>(kLayers), -2, INT32_MAX, INT32_MIN}) {
        c = StoreCall();
        c.layer = layer;
        both(c);
    }
    {
        c = StoreCall();
        const kvrt_batch b = c.batch();
        CHECK_REJECTED(fx, A, kvrt_cache_store(fx, nullptr, &b, -1, nullptr, &c.vref, nullptr));
        CHECK_REJECTED(fx, A, kvrt_cache_store(fx, nullptr, &b, -1, &c.kref, nullptr, nullptr));
        CHECK_REJECTED(fx, A, kvrt_cache_write(fx, nullptr, 2, cells, -1, nullptr, &c.vref));
        CHECK_REJECTED(fx, A, kvrt_cache_write(fx, nullptr, 2, cells, -1, &c.kref, nullptr));
    }
    // Inputs are F32, F16 or the stored type (K: Q8_0, V: F16).
    for (kvrt_type t : {KVRT_TYPE_UNDEFINED, KVRT_TYPE_Q8_0, KVRT_TYPE_Q4_0, KVRT_TYPE_U8_STATIC,
                        static_cast<kvrt_type>(77)}) {
        INFO("V element type " << t);
        c = StoreCall();
        c.vref.element_type = t;
        both(c);
    }
    for (kvrt_type t : {KVRT_TYPE_UNDEFINED, KVRT_TYPE_Q4_0, KVRT_TYPE_U16_STATIC}) {
        INFO("K element type " << t);
        c = StoreCall();
        c.kref.element_type = t;
        both(c);
    }
    Buffer small(ctx, 2 * kRowBytesF32);  // one layer's rows: too small for all layers
    Buffer big(ctx, 4 * kRowBytesF32);
    c = StoreCall();
    c.kref.buffer = big;  // both host and buffer
    both(c);
    c = StoreCall();
    c.kref.host = nullptr;  // neither
    both(c);
    c = StoreCall();
    c.kref.offset = 2;  // not a multiple of 4
    both(c);
    c = StoreCall();
    c.kref.row_stride = kRowBytesF32 + 2;
    both(c);
    c = StoreCall();
    c.kref.head_stride = 130;
    both(c);
    c = StoreCall();
    c.kref.layer_stride = 6;
    both(c);

    // Buffer sources that are too small, and offsets and strides that
    // overflow 64 bits.
    auto from_buffer = [&](kvrt_buffer b) {
        StoreCall s;
        s.kref.host = nullptr;
        s.kref.buffer = b;
        return s;
    };
    both(from_buffer(small));
    for (uint64_t offset : {4 * kRowBytesF32, uint64_t{1} << 63, UINT64_MAX - 3}) {
        c = from_buffer(big);
        c.kref.offset = offset;
        both(c);
    }
    for (uint64_t stride : {uint64_t{1} << 62, uint64_t{1} << 63, UINT64_MAX - 3}) {
        c = from_buffer(big);
        c.kref.row_stride = stride;
        both(c);
        c = from_buffer(big);
        c.kref.head_stride = stride;
        both(c);
        c = from_buffer(big);
        c.kref.layer_stride = stride;
        both(c);
    }
    // Host sources: the library cannot know their size, but the addresses it
    // computes from the offset and strides must not overflow (they would wrap
    // around to memory before the rows).
    for (uint64_t huge : {uint64_t{1} << 63, UINT64_MAX - 3}) {
        INFO("host row_stride " << huge);
        c = StoreCall();
        c.kref.row_stride = huge;
        both(c);
    }
    c = StoreCall();
    c.vref.layer_stride = UINT64_MAX - 3;
    both(c);
    c = StoreCall();
    c.vref.head_stride = UINT64_MAX - 3;
    both(c);
    c = StoreCall();
    c.kref.offset = UINT64_MAX - 3;
    both(c);
    // A token count whose rows overflow 64 bits (a real array of cells;
    // whatever is checked first, the call must fail and change nothing).
    {
        const uint32_t n = 1u << 22;
        std::vector<uint32_t> many(n, 0);
        c = from_buffer(big);
        c.kref.row_stride = uint64_t{1} << 43;
        CHECK_REJECTED(fx, A, kvrt_cache_write(fx, nullptr, n, many.data(), 0, &c.kref, &c.vref));
    }
}

TEST_CASE("write and read reject empty, repeated and out-of-range cells", "[cache][errors]") {
    GpuContext ctx;
    Populated fx(ctx);
    const kvrt_result A = KVRT_ERROR_INVALID_ARGUMENT;
    StoreCall c;

    // kvrt_cache_write: every cell must be in use, once. The first cell of
    // each list is fine, and must not be written either.
    const std::vector<std::vector<uint32_t>> bad_cells = {
        {0, 10},              // a hole
        {0, 20},              // never used
        {0, 0},               // repeated
        {0, kCapacity},       // out of range
        {0, UINT32_MAX},
    };
    for (const auto& cells : bad_cells) {
        INFO("cells " << cells[0] << ", " << cells[1]);
        CHECK_REJECTED(fx, A, kvrt_cache_write(fx, nullptr, 2, cells.data(), -1, &c.kref, &c.vref));
        CHECK_REJECTED(fx, A, kvrt_cache_write(fx, nullptr, 2, cells.data(), 1, &c.kref, &c.vref));
    }
    CHECK_REJECTED(fx, A, kvrt_cache_write(fx, nullptr, 2, nullptr, -1, &c.kref, &c.vref));

    // kvrt_cache_read: cells in range, a real layer; the outputs stay as they were.
    const float sentinel = 12345.0f;
    std::vector<float> k(2 * kRowElems, sentinel), v(k.size(), sentinel);
    auto outputs_untouched = [&] {
        for (size_t i = 0; i < k.size(); ++i)
            if (k[i] != sentinel || v[i] != sentinel) return false;
        return true;
    };
    for (const auto& cells : std::vector<std::vector<uint32_t>>{{0, kCapacity}, {UINT32_MAX, 0}}) {
        CHECK_REJECTED(fx, A, kvrt_cache_read(fx, 0, 2, cells.data(), k.data(), bytes_of(k), v.data(), bytes_of(v)));
        CHECK(outputs_untouched());
    }
    const uint32_t ok[2] = {0, 1};
    for (int32_t layer : {-1, static_cast<int32_t>(kLayers), INT32_MIN}) {
        CHECK_REJECTED(fx, A, kvrt_cache_read(fx, layer, 2, ok, k.data(), bytes_of(k), v.data(), bytes_of(v)));
        CHECK(outputs_untouched());
    }
    CHECK_REJECTED(fx, A, kvrt_cache_read(fx, 0, 2, nullptr, k.data(), bytes_of(k), v.data(), bytes_of(v)));
    CHECK(outputs_untouched());

    // Placed cells can be written; then nothing else changed but those rows.
    const kvrt_batch b = c.batch();
    uint32_t placed[2] = {};
    KVRT_REQUIRE_OK(kvrt_cache_place(fx, &b, placed));
    CHECK(placed[0] != placed[1]);
    KVRT_REQUIRE_OK(kvrt_cache_write(fx, nullptr, 2, placed, -1, &c.kref, &c.vref));
}

TEST_CASE("compaction and get_info reject bad arguments", "[cache][errors]") {
    GpuContext ctx;
    Populated fx(ctx);
    const kvrt_result A = KVRT_ERROR_INVALID_ARGUMENT;
    uint32_t moved = 7;
    for (float threshold : {-0.25f, 1.5f, std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity()}) {
        INFO("threshold " << threshold);
        CHECK_REJECTED(fx, A, kvrt_cache_compact(fx, nullptr, threshold, 0, &moved));
    }
    kvrt_cache_info info = KVRT_CACHE_INFO_INIT;
    CHECK_REJECTED(fx, A, kvrt_cache_get_info(fx, nullptr));
    info.type = KVRT_STRUCT_TYPE_CACHE_ESTIMATE;
    CHECK_REJECTED(fx, A, kvrt_cache_get_info(fx, &info));
}
