// Device loss, allocation failures and destruction after a timed-out wait,
// injected at the named fault points (core/fault.hpp), each with two caches:
// the failing call reports a clear error, the handles stay usable (or, after
// device loss, report it) and destroyable, and the cache that took no part in
// the failed work reads back unchanged.
#include <cstring>
#include <string>
#include <vector>

#include "core/fault.hpp"
#include "gpu_test.hpp"

using namespace kvrt_test;

namespace {

constexpr uint32_t kDim = 32;
constexpr uint32_t kTokens = 4;

struct SiteArm {
    explicit SiteArm(const char* site) { kvrt::fault::arm_site(site); }
    ~SiteArm() { kvrt::fault::arm(0); }
};

// The caches of these tests: 1 layer, 2 query heads, 1 KV head, 16 cells, F32.
CacheSpec spec() { return CacheSpec().shape(1, 2, 1, kDim).cells(16).type(KVRT_TYPE_F32); }

kvrt_result store(kvrt_cache c, int32_t seq, float base) {
    std::vector<float> k(kTokens * kDim), v(kTokens * kDim);
    for (size_t i = 0; i < k.size(); ++i) {
        k[i] = base + static_cast<float>(i);
        v[i] = -base - static_cast<float>(i);
    }
    std::vector<int32_t> pos, ids;
    for (uint32_t i = 0; i < kTokens; ++i) {
        pos.push_back(static_cast<int32_t>(i));
        ids.push_back(seq);
    }
    const kvrt_batch b = make_batch(kTokens, pos.data(), ids.data());
    const kvrt_tensor_ref kr = host_tensor(k.data());
    const kvrt_tensor_ref vr = host_tensor(v.data());
    return kvrt_cache_store(c, nullptr, &b, -1, &kr, &vr, nullptr);
}

kvrt_result read_raw(kvrt_cache c, std::vector<uint8_t>* out) {
    std::vector<uint32_t> cells(kTokens);
    for (uint32_t i = 0; i < kTokens; ++i) cells[i] = i;
    out->assign(2 * kTokens * kDim * sizeof(float), 0);
    const uint64_t half = out->size() / 2;
    kvrt_result r = kvrt_cache_read_raw(c, 0, KVRT_KV_ARRAY_K, kTokens, cells.data(), out->data(), half);
    if (r != KVRT_SUCCESS) return r;
    return kvrt_cache_read_raw(c, 0, KVRT_KV_ARRAY_V, kTokens, cells.data(), out->data() + half, half);
}

// Two caches, each holding one stored sequence; `b_bytes` is B's content.
struct Pair {
    kvrt_context ctx = nullptr;
    // Freed with the context, which a test destroys itself.
    kvrt_cache a = nullptr, b = nullptr;
    std::vector<uint8_t> b_bytes;
    std::vector<std::string> warnings;
    static void on_log(void* user, kvrt_log_level level, const char* message) {
        if (level >= KVRT_LOG_LEVEL_WARN) static_cast<Pair*>(user)->warnings.push_back(message);
    }
    Pair() {
        kvrt_context_desc d = KVRT_CONTEXT_DESC_INIT;
        d.log_callback = &Pair::on_log;
        d.log_user_data = this;
        KVRT_REQUIRE_OK(kvrt_context_create(&d, &ctx));
        a = spec().create(ctx).release();
        b = spec().create(ctx).release();
        KVRT_REQUIRE_OK(store(a, 0, 1.0f));
        KVRT_REQUIRE_OK(store(b, 0, 1000.0f));
        KVRT_REQUIRE_OK(read_raw(b, &b_bytes));
    }
    ~Pair() { kvrt_context_destroy(ctx); }
    bool warned(const char* what) const {
        for (const std::string& w : warnings)
            if (w.find(what) != std::string::npos) return true;
        return false;
    }
};

}  // namespace

TEST_CASE("device loss at a submission is reported and the handles stay destroyable", "[faults][device]") {
    Pair p;
    kvrt_result r;
    {
        SiteArm arm("device loss at submission");
        r = store(p.a, 1, 5.0f);
    }
    INFO(kvrt_last_error_message());
    REQUIRE(r == KVRT_ERROR_DEVICE_LOST);
    // Every later call that needs the device reports the loss.
    REQUIRE(store(p.a, 2, 7.0f) == KVRT_ERROR_DEVICE_LOST);
    REQUIRE(store(p.b, 2, 7.0f) == KVRT_ERROR_DEVICE_LOST);
    Cache extra;
    kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
    d.n_layers = 1;
    d.n_heads = 1;
    d.n_kv_heads = 1;
    d.head_dim_k = kDim;
    d.capacity = 16;
    d.type_k = KVRT_TYPE_F32;
    d.type_v = KVRT_TYPE_F32;
    REQUIRE(kvrt_cache_create(p.ctx, &d, extra.out()) == KVRT_ERROR_DEVICE_LOST);
    REQUIRE(extra == nullptr);
    // Reads of the other cache either give its unchanged contents or report
    // the loss cleanly.
    std::vector<uint8_t> after;
    const kvrt_result rr = read_raw(p.b, &after);
    REQUIRE((rr == KVRT_SUCCESS || rr == KVRT_ERROR_DEVICE_LOST));
    if (rr == KVRT_SUCCESS) REQUIRE(after == p.b_bytes);
    kvrt_cache_info info = KVRT_CACHE_INFO_INIT;
    KVRT_REQUIRE_OK(kvrt_cache_get_info(p.b, &info));
    kvrt_cache_destroy(p.a);
    kvrt_cache_destroy(p.b);
}

TEST_CASE("a failed device allocation leaves both caches usable and unchanged", "[faults][device]") {
    Pair p;
    Cache c;
    kvrt_result r;
    {
        SiteArm arm("device allocation");
        kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
        d.n_layers = 1;
        d.n_heads = 1;
        d.n_kv_heads = 1;
        d.head_dim_k = kDim;
        d.capacity = 16;
        d.type_k = KVRT_TYPE_F32;
        d.type_v = KVRT_TYPE_F32;
        r = kvrt_cache_create(p.ctx, &d, c.out());
    }
    INFO(kvrt_last_error_message());
    REQUIRE(r == KVRT_ERROR_OUT_OF_DEVICE_MEMORY);
    REQUIRE(c == nullptr);
    std::vector<uint8_t> after;
    KVRT_REQUIRE_OK(read_raw(p.b, &after));
    REQUIRE(after == p.b_bytes);
    KVRT_REQUIRE_OK(store(p.a, 1, 3.0f));
    KVRT_REQUIRE_OK(read_raw(p.b, &after));
    REQUIRE(after == p.b_bytes);
}

TEST_CASE("a failed host allocation leaves both caches usable and unchanged", "[faults][device]") {
    Pair p;
    kvrt_buffer buf = nullptr;
    kvrt_result r;
    {
        SiteArm arm("host allocation");
        kvrt_buffer_desc d = KVRT_BUFFER_DESC_INIT;
        d.size = 4096;
        r = kvrt_buffer_create(p.ctx, &d, &buf);
    }
    INFO(kvrt_last_error_message());
    REQUIRE(r == KVRT_ERROR_OUT_OF_HOST_MEMORY);
    REQUIRE(buf == nullptr);
    std::vector<uint8_t> after;
    KVRT_REQUIRE_OK(read_raw(p.b, &after));
    REQUIRE(after == p.b_bytes);
    KVRT_REQUIRE_OK(store(p.a, 1, 3.0f));
    KVRT_REQUIRE_OK(read_raw(p.b, &after));
    REQUIRE(after == p.b_bytes);
}

TEST_CASE("destroying a context after a timed-out wait waits for the device first", "[faults][device][context]") {
    auto* p = new Pair();
    kvrt_result r;
    {
        SiteArm arm("wait");
        r = store(p->a, 1, 9.0f);
    }
    REQUIRE(r == KVRT_ERROR_TIMEOUT);
    // The context's own bounded wait at destruction times out too: it must
    // then wait for the device before anything is freed, and say so.
    {
        SiteArm arm("wait at context destruction");
        kvrt_context_destroy(p->ctx);
    }
    p->ctx = nullptr;
    CHECK(p->warned("context destroyed while GPU work is still running"));
    CHECK(p->warned("for the device before freeing"));
    delete p;
}
