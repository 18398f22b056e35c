// The persistent pipeline cache: kvrt_context_get_pipeline_cache, and the
// saved bytes handed to a new context (kvrt_pipeline_cache_desc); data of
// another device or driver, or garbage, is ignored with an INFO message.
#include "gpu_test.hpp"

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace {

// A context of kvrt's own (validation on) that keeps its log, started from
// `cache_bytes` when given.
struct LoggedContext {
    kvrt_context ctx = nullptr;
    std::mutex mutex;
    std::vector<std::string> messages;
    std::vector<std::string> errors;

    static void on_log(void* user, kvrt_log_level level, const char* message) {
        auto* self = static_cast<LoggedContext*>(user);
        std::lock_guard<std::mutex> lock(self->mutex);
        self->messages.emplace_back(message);
        if (level >= KVRT_LOG_LEVEL_ERROR) self->errors.emplace_back(message);
    }

    explicit LoggedContext(const std::vector<uint8_t>* cache_bytes) {
        kvrt_pipeline_cache_desc pc = KVRT_PIPELINE_CACHE_DESC_INIT;
        kvrt_context_desc desc = KVRT_CONTEXT_DESC_INIT;
        desc.flags = KVRT_CONTEXT_VALIDATION;
        desc.log_callback = &LoggedContext::on_log;
        desc.log_user_data = this;
        desc.log_level = KVRT_LOG_LEVEL_INFO;
        if (cache_bytes) {
            pc.data = cache_bytes->data();
            pc.size = cache_bytes->size();
            desc.next = &pc;
        }
        KVRT_REQUIRE_OK(kvrt_context_create(&desc, &ctx));
    }
    ~LoggedContext() {
        kvrt_context_stats stats = KVRT_CONTEXT_STATS_INIT;
        KVRT_REQUIRE_OK(kvrt_context_get_stats(ctx, &stats));
        kvrt_context_destroy(ctx);
        for (const auto& e : errors) UNSCOPED_INFO(e);
        CHECK(stats.validation_errors == 0);
        CHECK(errors.empty());
    }

    bool logged(const char* text) {
        std::lock_guard<std::mutex> lock(mutex);
        for (const auto& m : messages)
            if (m.find(text) != std::string::npos) return true;
        return false;
    }

    std::vector<uint8_t> pipeline_cache() const {
        uint64_t size = 0;
        KVRT_REQUIRE_OK(kvrt_context_get_pipeline_cache(ctx, nullptr, &size));
        std::vector<uint8_t> bytes(size);
        KVRT_REQUIRE_OK(kvrt_context_get_pipeline_cache(ctx, bytes.data(), &size));
        bytes.resize(size);
        return bytes;
    }

    // Stores a few tokens of varied values and returns the attention of
    // decode (one query) and prefill (all of them), synchronously.
    std::vector<float> attention() const {
        constexpr uint32_t n = 40, heads = 4, kv_heads = 2, dim = 16;
        kvrt_cache_desc cd = KVRT_CACHE_DESC_INIT;
        cd.n_layers = 1;
        cd.n_heads = heads;
        cd.n_kv_heads = kv_heads;
        cd.head_dim_k = dim;
        cd.capacity = 64;
        kvrt_test::Cache cache;
        KVRT_REQUIRE_OK(kvrt_cache_create(ctx, &cd, cache.out()));
        std::vector<float> k(n * kv_heads * dim), v(k.size()), q(n * heads * dim);
        for (size_t i = 0; i < k.size(); ++i) {
            k[i] = float(int(i * 37 % 23) - 11) / 8.0f;
            v[i] = float(int(i * 53 % 29) - 14) / 4.0f;
        }
        for (size_t i = 0; i < q.size(); ++i) q[i] = float(int(i * 41 % 19) - 9) / 8.0f;
        std::vector<int32_t> pos(n), seq(n, 0);
        for (uint32_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(i);
        kvrt_batch b = KVRT_BATCH_INIT;
        b.n_tokens = n;
        b.positions = pos.data();
        b.seq_ids = seq.data();
        kvrt_tensor_ref kr = KVRT_TENSOR_REF_INIT, vr = KVRT_TENSOR_REF_INIT, qr = KVRT_TENSOR_REF_INIT;
        kr.host = k.data();
        vr.host = v.data();
        KVRT_REQUIRE_OK(kvrt_cache_store(cache, nullptr, &b, 0, &kr, &vr, nullptr));
        std::vector<float> out(q.size() + heads * dim);
        kvrt_output_ref o = KVRT_OUTPUT_REF_INIT;
        qr.host = q.data();
        o.host = out.data();
        KVRT_REQUIRE_OK(kvrt_cache_attention(cache, nullptr, 0, &b, &qr, &o, nullptr));  // prefill
        kvrt_batch one = b;
        one.n_tokens = 1;
        one.positions = &pos[n - 1];
        qr.host = &q[(n - 1) * heads * dim];
        o.host = &out[q.size()];
        KVRT_REQUIRE_OK(kvrt_cache_attention(cache, nullptr, 0, &one, &qr, &o, nullptr));  // decode
        return out;
    }
};

uint32_t le32(const std::vector<uint8_t>& b, size_t at) {
    return uint32_t(b[at]) | uint32_t(b[at + 1]) << 8 | uint32_t(b[at + 2]) << 16 | uint32_t(b[at + 3]) << 24;
}

}  // namespace

TEST_CASE("pipeline cache: saved, handed to a new context, and foreign data ignored", "[pipeline_cache]") {
    std::vector<uint8_t> saved;
    std::vector<float> first;
    {
        LoggedContext a(nullptr);
        first = a.attention();
        saved = a.pipeline_cache();
        // A Vulkan pipeline cache of this device: header version one.
        REQUIRE(saved.size() >= 32);
        kvrt_device_info info = KVRT_DEVICE_INFO_INIT;
        KVRT_REQUIRE_OK(kvrt_context_get_device_info(a.ctx, &info));
        CHECK(le32(saved, 4) == 1u);
        CHECK(le32(saved, 8) == info.vendor_id);
        CHECK(le32(saved, 12) == info.device_id);

        // Size queries and a buffer that is too small.
        uint64_t size = 0;
        KVRT_REQUIRE_OK(kvrt_context_get_pipeline_cache(a.ctx, nullptr, &size));
        CHECK(size == saved.size());
        std::vector<uint8_t> small(16);
        size = small.size();
        CHECK(kvrt_context_get_pipeline_cache(a.ctx, small.data(), &size) == KVRT_ERROR_INVALID_ARGUMENT);
        CHECK(std::string(kvrt_last_error_message()).find("buffer too small") != std::string::npos);
        CHECK(size <= small.size());
        CHECK(kvrt_context_get_pipeline_cache(a.ctx, nullptr, nullptr) == KVRT_ERROR_INVALID_ARGUMENT);
        CHECK(kvrt_context_get_pipeline_cache(nullptr, nullptr, &size) == KVRT_ERROR_INVALID_HANDLE);
    }
    {
        LoggedContext b(&saved);
        CHECK(b.logged("pipeline cache started from"));
        CHECK(b.attention() == first);  // bit for bit
    }
    {
        std::vector<uint8_t> garbage(1000);
        for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<uint8_t>(i * 131 + 7);
        LoggedContext c(&garbage);
        CHECK(c.logged("saved pipeline cache ignored"));
        CHECK(c.attention() == first);
    }
    {
        std::vector<uint8_t> foreign = saved;
        foreign[16] ^= 0xFF;  // another driver's pipelineCacheUUID
        LoggedContext d(&foreign);
        CHECK(d.logged("saved pipeline cache ignored"));
        CHECK(d.attention() == first);
        foreign = saved;
        foreign[8] ^= 0x01;  // another vendor
        LoggedContext e(&foreign);
        CHECK(e.logged("saved pipeline cache ignored"));
    }
    {
        // A header that matches with a body cut short: the driver's own
        // checks decide; either way creation succeeds.
        std::vector<uint8_t> truncated(saved.begin(), saved.begin() + std::min<size_t>(saved.size(), 40));
        LoggedContext f(&truncated);
        CHECK(f.attention() == first);
    }
    // Bad descriptions are refused.
    kvrt_pipeline_cache_desc pc = KVRT_PIPELINE_CACHE_DESC_INIT;
    pc.size = 64;  // data NULL
    kvrt_context_desc desc = KVRT_CONTEXT_DESC_INIT;
    desc.next = &pc;
    kvrt_context ctx = reinterpret_cast<kvrt_context>(0x1);
    CHECK(kvrt_context_create(&desc, &ctx) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(ctx == nullptr);
    kvrt_pipeline_cache_desc twice[2] = {KVRT_PIPELINE_CACHE_DESC_INIT, KVRT_PIPELINE_CACHE_DESC_INIT};
    twice[0].next = &twice[1];
    desc.next = &twice[0];
    CHECK(kvrt_context_create(&desc, &ctx) == KVRT_ERROR_INVALID_ARGUMENT);
}
