// Cache failures the bad-input table (test_bad_input_cache.cpp) cannot
// express: caches too large to fit, which must fail quickly and allocate
// nothing, and bad input that needs a cache with shared tokens, holes and a
// known number of free cells. Every error must come with its exact result
// code and a detail message, and change nothing: the table (positions,
// deltas, sequence words, counters) and the data of every stored token are
// compared before and after.
#include "gpu_test.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <string>
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
    const kvrt::kv::CellTable& t = kvrt::api::cache_of(cache)->table();
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

// The simple bad-input cases of the cache (one call, one bad argument, the
// exact error, nothing changed) are rows of the bad-input table
// (test_bad_input_cache.cpp). These need what the table's cache lacks: a
// token shared by two sequences, a hole among the used cells, and the last
// free cell.

TEST_CASE("store and place: a position a shared token gave, and the last free cell", "[cache][errors]") {
    GpuContext ctx;
    Populated fx(ctx);
    const kvrt_result A = KVRT_ERROR_INVALID_ARGUMENT;

    // Both entry points place, so both check the batch the same way.
    auto both = [&](kvrt_result code, const StoreCall& c) {
        CHECK_REJECTED(fx, code, c.store(fx));
        CHECK_REJECTED(fx, code, c.place(fx));
    };
    // The first token is fine and the second is not.
    StoreCall c;
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

TEST_CASE("write rejects a hole among the used cells, and writes placed cells", "[cache][errors]") {
    GpuContext ctx;
    Populated fx(ctx);
    const kvrt_result A = KVRT_ERROR_INVALID_ARGUMENT;
    StoreCall c;

    // Every cell must be in use. The first cell of the list is fine, and
    // must not be written either.
    const uint32_t cells[2] = {0, 10};  // 10: a hole
    CHECK_REJECTED(fx, A, kvrt_cache_write(fx, nullptr, 2, cells, -1, &c.kref, &c.vref));
    CHECK_REJECTED(fx, A, kvrt_cache_write(fx, nullptr, 2, cells, 1, &c.kref, &c.vref));

    // Placed cells can be written; then nothing else changed but those rows.
    const kvrt_batch b = c.batch();
    uint32_t placed[2] = {};
    KVRT_REQUIRE_OK(kvrt_cache_place(fx, &b, placed));
    CHECK(placed[0] != placed[1]);
    KVRT_REQUIRE_OK(kvrt_cache_write(fx, nullptr, 2, placed, -1, &c.kref, &c.vref));
}
