// Ordering kvrt's work with an application's own GPU work (kvrt_vulkan.h):
// semaphores on kvrt's submissions and recording into the application's
// command buffers. The application here creates its own instance (validation
// layer with synchronization checks on) and device, and imports them; any
// validation error fails the test.
#include "app_vulkan.hpp"

#include <vector>

#include "api/handles.hpp"

using namespace kvrt_test;

namespace {

constexpr uint64_t kLong = 120ull * 1000 * 1000 * 1000;

// The application here: Vulkan 1.2, validation with synchronization checks,
// timeline semaphores enabled when the device has them (and nothing else).
AppVulkanOptions interop_options() {
    AppVulkanOptions o;
    o.api_version = VK_API_VERSION_1_2;
    o.sync_validation = true;
    o.storage_16bit = false;
    o.timeline = true;
    return o;
}

// Attention over a tiny cache whose expected output the application can
// compute by hand: K and Q all ones (every score equal), token t's V row all
// t + 1, so query i (position i) reads the mean of 1..i+1 = (i + 2) / 2.
constexpr uint32_t kTokens = 6, kHeads = 2, kDim = 8;
constexpr VkDeviceSize kOffK = 0, kOffV = 256, kOffQ = 512, kInputBytes = 1024;
constexpr VkDeviceSize kOutBytes = kTokens * kHeads * kDim * 4;

struct Scene {
    kvrt_context ctx = nullptr;
    Cache cache;
    kvrt_buffer input = nullptr;  // the application's input buffer, imported
    kvrt_buffer out = nullptr;    // kvrt's output buffer
    VkBuffer out_vk = VK_NULL_HANDLE;
    VkDeviceSize out_vk_offset = 0;
    int32_t positions[kTokens] = {};
    int32_t seqs[kTokens] = {};

    Scene(kvrt_context c, const AppBuffer& in) : ctx(c) {
        kvrt_cache_desc cd = KVRT_CACHE_DESC_INIT;
        cd.n_layers = 1;
        cd.n_heads = kHeads;
        cd.n_kv_heads = 1;
        cd.head_dim_k = kDim;
        cd.capacity = 32;
        cd.max_seqs = 1;
        KVRT_REQUIRE_OK(kvrt_cache_create(ctx, &cd, cache.out()));
        KVRT_REQUIRE_OK(kvrt_buffer_import_vulkan(ctx, in.buffer, 0, in.size, &input));
        kvrt_buffer_desc bd = KVRT_BUFFER_DESC_INIT;
        bd.size = kOutBytes;
        KVRT_REQUIRE_OK(kvrt_buffer_create(ctx, &bd, &out));
        VkDeviceSize contiguous = 0;
        KVRT_REQUIRE_OK(kvrt_buffer_get_vulkan(out, 0, &out_vk, &out_vk_offset, &contiguous));
        REQUIRE(contiguous >= kOutBytes);
        for (uint32_t i = 0; i < kTokens; ++i) positions[i] = static_cast<int32_t>(i);
    }
    ~Scene() {
        cache.reset();
        kvrt_buffer_destroy(input);
        kvrt_buffer_destroy(out);
    }

    // The application's commands that write the inputs.
    static void fill_inputs(const AppVulkan& app, VkCommandBuffer cb, const AppBuffer& in) {
        app.fill_f32(cb, in, kOffK, kTokens * kDim * 4, 1.0f);
        for (uint32_t t = 0; t < kTokens; ++t) app.fill_f32(cb, in, kOffV + t * kDim * 4, kDim * 4, float(t + 1));
        app.fill_f32(cb, in, kOffQ, kTokens * kHeads * kDim * 4, 1.0f);
    }

    kvrt_batch batch() const {
        kvrt_batch b = KVRT_BATCH_INIT;
        b.n_tokens = kTokens;
        b.positions = positions;
        b.seq_ids = seqs;
        return b;
    }

    // Records the store of all tokens and the attention of all of them.
    void record(kvrt_stream s) const {
        const kvrt_batch b = batch();
        kvrt_tensor_ref k = KVRT_TENSOR_REF_INIT;
        k.buffer = input;
        k.offset = kOffK;
        kvrt_tensor_ref v = k;
        v.offset = kOffV;
        KVRT_REQUIRE_OK(kvrt_cache_store(cache, s, &b, 0, &k, &v, nullptr));
        kvrt_tensor_ref q = k;
        q.offset = kOffQ;
        kvrt_output_ref o = KVRT_OUTPUT_REF_INIT;
        o.buffer = out;
        KVRT_REQUIRE_OK(kvrt_cache_attention(cache, s, 0, &b, &q, &o, nullptr));
    }

    // The application's copy of kvrt's output into its own buffer.
    void copy_out(const AppVulkan& app, VkCommandBuffer cb, const AppBuffer& result) const {
        VkBufferCopy region{out_vk_offset, 0, kOutBytes};
        app.vkCmdCopyBuffer(cb, out_vk, result.buffer, 1, &region);
    }

    static void check_output(const std::vector<float>& got) {
        REQUIRE(got.size() == kTokens * kHeads * kDim);
        for (uint32_t i = 0; i < kTokens; ++i) {
            const float want = (float(i) + 2.0f) / 2.0f;
            for (uint32_t j = 0; j < kHeads * kDim; ++j) {
                INFO("query " << i << " value " << j);
                CHECK(got[i * kHeads * kDim + j] == Approx(want).epsilon(1e-3));
            }
        }
    }

    uint32_t used() const {
        kvrt_cache_info info = KVRT_CACHE_INFO_INIT;
        KVRT_REQUIRE_OK(kvrt_cache_get_info(cache, &info));
        return info.used;
    }
};

kvrt_context import_context(AppVulkan& app, bool with_timeline) {
    const kvrt_vulkan_import_desc d = app.import_desc(with_timeline);
    kvrt_context ctx = nullptr;
    KVRT_REQUIRE_OK(kvrt_context_import_vulkan(nullptr, &d, &ctx));
    return ctx;
}

void check_app_validation(const AppVulkan& app) {
    INFO(app.first_error);
    CHECK(app.validation_errors.load() == 0);
}

}  // namespace

TEST_CASE("app work, kvrt work and app work ordered by binary semaphores only", "[interop_sync]") {
    AppVulkan app(interop_options());
    const AppBuffer& in = app.buffer(kInputBytes);
    const AppBuffer& result = app.buffer(kOutBytes);
    kvrt_context ctx = import_context(app, true);
    {
        Scene scene(ctx, in);
        Stream s(ctx);
        VkSemaphore filled = app.semaphore(false), computed = app.semaphore(false);
        VkFence done = app.fence();

        VkCommandBuffer fill = app.begin();
        Scene::fill_inputs(app, fill, in);
        app.submit(fill, VK_NULL_HANDLE, 0, filled, 0);

        KVRT_REQUIRE_OK(kvrt_stream_begin(s));
        scene.record(s);
        kvrt_vulkan_submit_desc sd = KVRT_VULKAN_SUBMIT_DESC_INIT;
        sd.wait_count = 1;
        sd.wait_semaphores = &filled;
        sd.signal_count = 1;
        sd.signal_semaphores = &computed;
        KVRT_REQUIRE_OK(kvrt_stream_submit_vulkan(s, &sd));

        VkCommandBuffer copy = app.begin();
        scene.copy_out(app, copy, result);
        app.submit(copy, computed, 0, VK_NULL_HANDLE, 0, done);

        // Only the application's fence is waited for: the semaphores ordered it all.
        REQUIRE(app.vkWaitForFences(app.device, 1, &done, VK_TRUE, kLong) == VK_SUCCESS);
        Scene::check_output(result.floats(0, kTokens * kHeads * kDim));
        KVRT_REQUIRE_OK(kvrt_stream_wait(s, kLong));
        CHECK(scene.used() == kTokens);
    }
    kvrt_context_destroy(ctx);
    check_app_validation(app);
}

TEST_CASE("timeline semaphores: kvrt waits for a value not yet signalled, and signals one", "[interop_sync]") {
    AppVulkan app(interop_options());
    const AppBuffer& in = app.buffer(kInputBytes);
    const AppBuffer& result = app.buffer(kOutBytes);
    kvrt_context ctx = import_context(app, true);
    CHECK(kvrt::api::context_of(ctx)->timeline() == app.timeline);
    {
        Scene scene(ctx, in);
        Stream s(ctx);
        KVRT_REQUIRE_OK(kvrt_stream_begin(s));
        scene.record(s);
        if (!app.timeline) {
            // Without the feature, values are refused and the recording kept.
            const VkSemaphore binary = app.semaphore(false);
            const uint64_t value = 1;
            kvrt_vulkan_submit_desc sd = KVRT_VULKAN_SUBMIT_DESC_INIT;
            sd.signal_count = 1;
            sd.signal_semaphores = &binary;
            sd.signal_values = &value;
            CHECK(kvrt_stream_submit_vulkan(s, &sd) == KVRT_ERROR_UNSUPPORTED);
            CHECK(kvrt_stream_submit(s) == KVRT_SUCCESS);
            CHECK(kvrt_stream_wait(s, kLong) == KVRT_SUCCESS);
        } else {
            // The application's fill signals 1; kvrt waits for 2, which the
            // host signals only later (wait before signal), and signals 3; the
            // application's copy waits for 3 and signals 4. One queue runs
            // its batches in order, so the value kvrt waits for comes from
            // the host, not from a later batch.
            const VkSemaphore tl = app.semaphore(true);
            VkCommandBuffer fill = app.begin();
            Scene::fill_inputs(app, fill, in);
            app.submit(fill, VK_NULL_HANDLE, 0, tl, 1);
            const uint64_t wait_value = 2, signal_value = 3;
            kvrt_vulkan_submit_desc sd = KVRT_VULKAN_SUBMIT_DESC_INIT;
            sd.wait_count = 1;
            sd.wait_semaphores = &tl;
            sd.wait_values = &wait_value;
            sd.signal_count = 1;
            sd.signal_semaphores = &tl;
            sd.signal_values = &signal_value;
            KVRT_REQUIRE_OK(kvrt_stream_submit_vulkan(s, &sd));
            VkCommandBuffer copy = app.begin();
            scene.copy_out(app, copy, result);
            app.submit(copy, tl, 3, tl, 4);

            auto wait_value_of = [&](uint64_t v) {
                VkSemaphoreWaitInfo wi{};
                wi.sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO;
                wi.semaphoreCount = 1;
                wi.pSemaphores = &tl;
                wi.pValues = &v;
                return app.vkWaitSemaphores(app.device, &wi, kLong);
            };
            REQUIRE(wait_value_of(1) == VK_SUCCESS);
            CHECK(kvrt_stream_wait(s, 0) == KVRT_ERROR_TIMEOUT);  // kvrt still waits for 2
            uint64_t now = 0;
            REQUIRE(app.vkGetSemaphoreCounterValue(app.device, tl, &now) == VK_SUCCESS);
            CHECK(now == 1);
            VkSemaphoreSignalInfo si{};
            si.sType = VK_STRUCTURE_TYPE_SEMAPHORE_SIGNAL_INFO;
            si.semaphore = tl;
            si.value = 2;
            REQUIRE(app.vkSignalSemaphore(app.device, &si) == VK_SUCCESS);
            REQUIRE(wait_value_of(4) == VK_SUCCESS);
            Scene::check_output(result.floats(0, kTokens * kHeads * kDim));
            KVRT_REQUIRE_OK(kvrt_stream_wait(s, kLong));
        }
        CHECK(scene.used() == kTokens);
    }
    kvrt_context_destroy(ctx);
    check_app_validation(app);
}

TEST_CASE("semaphore values without timeline semaphores are refused and change nothing", "[interop_sync]") {
    AppVulkan app(interop_options());
    kvrt_context ctx = import_context(app, false);  // the feature is hidden from kvrt
    CHECK_FALSE(kvrt::api::context_of(ctx)->timeline());
    {
        Buffer buf(ctx, 4096);
        Stream s(ctx);
        const VkSemaphore sem = app.semaphore(false);
        const uint64_t value = 1;
        KVRT_REQUIRE_OK(kvrt_stream_begin(s));
        KVRT_REQUIRE_OK(kvrt_cmd_fill(s, buf, 0, 4096, 7));
        kvrt_vulkan_submit_desc sd = KVRT_VULKAN_SUBMIT_DESC_INIT;
        sd.signal_count = 1;
        sd.signal_semaphores = &sem;
        sd.signal_values = &value;
        CHECK(kvrt_stream_submit_vulkan(s, &sd) == KVRT_ERROR_UNSUPPORTED);
        // Still recording: binary semaphores (no values) work.
        sd.signal_values = nullptr;
        KVRT_REQUIRE_OK(kvrt_stream_submit_vulkan(s, &sd));
        KVRT_REQUIRE_OK(kvrt_stream_wait(s, kLong));
        CHECK(buf.download_words(4092, 1)[0] == 7u);

        // Completion by a semaphore needs timelines: refused, recording dropped.
        VkCommandBuffer cb = app.begin();
        KVRT_REQUIRE_OK(kvrt_stream_begin_vulkan(s, cb));
        KVRT_REQUIRE_OK(kvrt_cmd_fill(s, buf, 0, 4096, 9));
        kvrt_vulkan_completion c = KVRT_VULKAN_COMPLETION_INIT;
        c.semaphore = sem;
        c.value = 1;
        CHECK(kvrt_stream_end_vulkan(s, &c) == KVRT_ERROR_UNSUPPORTED);
        CHECK(kvrt_stream_end_vulkan(s, nullptr) == KVRT_ERROR_INVALID_STATE);  // already dropped
        app.vkFreeCommandBuffers(app.device, app.pool, 1, &cb);
        CHECK(buf.download_words(4092, 1)[0] == 7u);
        // The binary semaphore was signalled above and never waited: consume it.
        VkCommandBuffer drain = app.begin();
        app.submit(drain, sem, 0, VK_NULL_HANDLE, 0);
        REQUIRE(app.vkDeviceWaitIdle(app.device) == VK_SUCCESS);
    }
    kvrt_context_destroy(ctx);
    check_app_validation(app);
}

TEST_CASE("kvrt records into the application's command buffer, completed by timeline or fence",
          "[interop_sync]") {
    AppVulkan app(interop_options());
    const bool by_fence = GENERATE(false, true);
    const bool timestamps = GENERATE(false, true);
    INFO((by_fence ? "fence" : "timeline") << (timestamps ? ", timestamps" : ""));
    const AppBuffer& in = app.buffer(kInputBytes);
    const AppBuffer& result = app.buffer(kOutBytes);
    kvrt_context ctx = import_context(app, true);
    if (timestamps && !timestamps_or_refused(ctx)) {
        kvrt_context_destroy(ctx);
        return;
    }
    {
        Scene scene(ctx, in);
        kvrt_stream_desc sdesc = KVRT_STREAM_DESC_INIT;
        sdesc.flags = timestamps ? KVRT_STREAM_TIMESTAMPS : 0;
        kvrt_stream s = nullptr;
        KVRT_REQUIRE_OK(kvrt_stream_create(ctx, &sdesc, &s));

        // One command buffer: the app's fill, kvrt's store and attention, the
        // app's copy of the output; ordered only by kvrt's two barriers.
        VkCommandBuffer cb = app.begin();
        Scene::fill_inputs(app, cb, in);
        KVRT_REQUIRE_OK(kvrt_stream_begin_vulkan(s, cb));
        CHECK(kvrt_stream_begin_vulkan(s, cb) == KVRT_ERROR_INVALID_STATE);
        CHECK(kvrt_stream_begin(s) == KVRT_ERROR_INVALID_STATE);
        scene.record(s);
        // A buffer only this recording uses, destroyed before the application
        // even submits: its memory must stay until the work completed.
        kvrt_buffer tmp = nullptr;
        kvrt_buffer_desc bd = KVRT_BUFFER_DESC_INIT;
        bd.size = 1 << 16;
        KVRT_REQUIRE_OK(kvrt_buffer_create(ctx, &bd, &tmp));
        KVRT_REQUIRE_OK(kvrt_cmd_fill(s, tmp, 0, bd.size, 3));
        CHECK(kvrt_stream_submit(s) == KVRT_ERROR_INVALID_STATE);  // the app submits it
        kvrt_vulkan_completion c = KVRT_VULKAN_COMPLETION_INIT;
        VkSemaphore tl = VK_NULL_HANDLE;
        VkFence fence = VK_NULL_HANDLE;
        if (by_fence || !app.timeline) {
            fence = app.fence();
            c.fence = fence;
        } else {
            tl = app.semaphore(true);
            c.semaphore = tl;
            c.value = 5;
        }
        KVRT_REQUIRE_OK(kvrt_stream_end_vulkan(s, &c));
        scene.copy_out(app, cb, result);
        CHECK(kvrt_stream_wait(s, 0) == KVRT_ERROR_TIMEOUT);  // not submitted yet
        CHECK(kvrt_stream_begin(s) == KVRT_ERROR_INVALID_STATE);
        CHECK(scene.used() == kTokens);  // counts as submitted
        {
            // Where device memory is not mapped, the first download keeps a
            // staging buffer for the context's later transfers: take it now,
            // so that `held` counts it.
            Buffer warm(ctx, 4096);
            warm.download_words(0, 1);
        }
        const uint64_t held = device_bytes(ctx);
        kvrt_buffer_destroy(tmp);
        CHECK(device_bytes(ctx) == held);
        {
            // kvrt's own later work does not wait for the application's
            // submission, which has not even happened yet.
            Buffer other(ctx, 4096);
            Stream s2(ctx);
            run_stream(s2, [&] { KVRT_REQUIRE_OK(kvrt_cmd_fill(s2, other, 0, 4096, 11)); });
            CHECK(other.download_words(4092, 1)[0] == 11u);
        }

        app.submit(cb, VK_NULL_HANDLE, 0, tl, tl ? 5 : 0, fence);
        // A download waits for the application's submission that wrote it.
        std::vector<float> direct(kTokens * kHeads * kDim);
        KVRT_REQUIRE_OK(kvrt_buffer_download(scene.out, 0, direct.data(), kOutBytes));
        Scene::check_output(direct);
        KVRT_REQUIRE_OK(kvrt_stream_wait(s, kLong));
        CHECK(device_bytes(ctx) < held);  // released once the work completed
        Scene::check_output(result.floats(0, kTokens * kHeads * kDim));
        if (timestamps) {
            uint32_t n = 0;
            KVRT_REQUIRE_OK(kvrt_stream_get_timings(s, nullptr, &n));
            CHECK(n >= 2);  // store and attention
        }
        // The stream records into its own command buffer again.
        KVRT_REQUIRE_OK(kvrt_stream_begin(s));
        KVRT_REQUIRE_OK(kvrt_cmd_fill(s, scene.out, 0, kOutBytes, 0));
        KVRT_REQUIRE_OK(kvrt_stream_submit(s));
        KVRT_REQUIRE_OK(kvrt_stream_wait(s, kLong));
        CHECK(result.floats(0, 1)[0] == Approx(1.0f));  // the application's copy is its own
        kvrt_stream_destroy(s);
    }
    kvrt_context_destroy(ctx);
    check_app_validation(app);
}

TEST_CASE("dropping a recording made into the application's command buffer rolls it back", "[interop_sync]") {
    AppVulkan app(interop_options());
    const AppBuffer& in = app.buffer(kInputBytes);
    kvrt_context ctx = import_context(app, true);
    {
        Scene scene(ctx, in);
        Stream s(ctx);
        CHECK(kvrt_stream_end_vulkan(s, nullptr) == KVRT_ERROR_INVALID_STATE);  // not recording

        VkCommandBuffer cb = app.begin();
        KVRT_REQUIRE_OK(kvrt_stream_begin_vulkan(s, cb));
        scene.record(s);
        CHECK(scene.used() == kTokens);
        // Bad completions change nothing: the stream still records.
        kvrt_vulkan_completion c = KVRT_VULKAN_COMPLETION_INIT;
        CHECK(kvrt_stream_end_vulkan(s, &c) == KVRT_ERROR_INVALID_ARGUMENT);  // neither
        c.fence = app.fence();
        c.semaphore = app.semaphore(false);
        CHECK(kvrt_stream_end_vulkan(s, &c) == KVRT_ERROR_INVALID_ARGUMENT);  // both
        c.fence = VK_NULL_HANDLE;
        c.value = 0;
        CHECK(kvrt_stream_end_vulkan(s, &c) == KVRT_ERROR_INVALID_ARGUMENT);  // value 0
        c.type = KVRT_STRUCT_TYPE_VULKAN_SUBMIT_DESC;
        CHECK(kvrt_stream_end_vulkan(s, &c) == KVRT_ERROR_INVALID_ARGUMENT);  // mistyped
        CHECK(scene.used() == kTokens);

        KVRT_REQUIRE_OK(kvrt_stream_end_vulkan(s, nullptr));
        CHECK(scene.used() == 0);  // the cells are given back
        app.vkFreeCommandBuffers(app.device, app.pool, 1, &cb);

        // A recording broken by a failed call is dropped by the end, too.
        kvrt_buffer tmp = nullptr;
        kvrt_buffer_desc bd = KVRT_BUFFER_DESC_INIT;
        bd.size = 4096;
        KVRT_REQUIRE_OK(kvrt_buffer_create(ctx, &bd, &tmp));
        cb = app.begin();
        KVRT_REQUIRE_OK(kvrt_stream_begin_vulkan(s, cb));
        scene.record(s);
        KVRT_REQUIRE_OK(kvrt_cmd_fill(s, tmp, 0, 4096, 1));
        kvrt_buffer_destroy(tmp);
        const VkFence fence = app.fence();
        c = kvrt_vulkan_completion KVRT_VULKAN_COMPLETION_INIT;
        c.fence = fence;
        CHECK(kvrt_stream_end_vulkan(s, &c) == KVRT_ERROR_INVALID_STATE);
        CHECK(scene.used() == 0);
        app.vkFreeCommandBuffers(app.device, app.pool, 1, &cb);

        // The same work through the stream's own command buffer still works.
        VkCommandBuffer fill = app.begin();
        Scene::fill_inputs(app, fill, in);
        const VkFence filled = app.fence();
        app.submit(fill, VK_NULL_HANDLE, 0, VK_NULL_HANDLE, 0, filled);
        REQUIRE(app.vkWaitForFences(app.device, 1, &filled, VK_TRUE, kLong) == VK_SUCCESS);
        run_stream(s, [&] { scene.record(s); });
        std::vector<float> got(kTokens * kHeads * kDim);
        KVRT_REQUIRE_OK(kvrt_buffer_download(scene.out, 0, got.data(), kOutBytes));
        Scene::check_output(got);
    }
    kvrt_context_destroy(ctx);
    check_app_validation(app);
}

TEST_CASE("interop entry points refuse bad input", "[interop_sync]") {
    GpuContext ctx;
    Stream s(ctx);
    const VkSemaphore fake = VkSemaphore(uintptr_t(0x1234));  // a pointer, or a uint64_t on 32-bit targets
    kvrt_vulkan_submit_desc sd = KVRT_VULKAN_SUBMIT_DESC_INIT;
    CHECK(kvrt_stream_submit_vulkan(nullptr, &sd) == KVRT_ERROR_INVALID_HANDLE);
    CHECK(kvrt_stream_begin_vulkan(nullptr, reinterpret_cast<VkCommandBuffer>(uintptr_t(1))) ==
          KVRT_ERROR_INVALID_HANDLE);
    CHECK(kvrt_stream_end_vulkan(nullptr, nullptr) == KVRT_ERROR_INVALID_HANDLE);
    CHECK(kvrt_stream_begin_vulkan(s, VK_NULL_HANDLE) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(kvrt_stream_submit_vulkan(s, &sd) == KVRT_ERROR_INVALID_STATE);  // not recording

    KVRT_REQUIRE_OK(kvrt_stream_begin(s));
    sd.wait_count = 1;  // NULL array
    CHECK(kvrt_stream_submit_vulkan(s, &sd) == KVRT_ERROR_INVALID_ARGUMENT);
    const VkSemaphore null_sem = VK_NULL_HANDLE;
    sd.wait_semaphores = &null_sem;
    CHECK(kvrt_stream_submit_vulkan(s, &sd) == KVRT_ERROR_INVALID_ARGUMENT);
    sd.wait_semaphores = &fake;
    const VkPipelineStageFlags zero = 0, host = VK_PIPELINE_STAGE_HOST_BIT;
    sd.wait_stages = &zero;
    CHECK(kvrt_stream_submit_vulkan(s, &sd) == KVRT_ERROR_INVALID_ARGUMENT);
    sd.wait_stages = &host;
    CHECK(kvrt_stream_submit_vulkan(s, &sd) == KVRT_ERROR_INVALID_ARGUMENT);
    sd = kvrt_vulkan_submit_desc KVRT_VULKAN_SUBMIT_DESC_INIT;
    sd.signal_count = 2;
    CHECK(kvrt_stream_submit_vulkan(s, &sd) == KVRT_ERROR_INVALID_ARGUMENT);
    sd = kvrt_vulkan_submit_desc KVRT_VULKAN_SUBMIT_DESC_INIT;
    sd.type = KVRT_STRUCT_TYPE_VULKAN_COMPLETION;
    CHECK(kvrt_stream_submit_vulkan(s, &sd) == KVRT_ERROR_INVALID_ARGUMENT);
    const kvrt_timing chained = KVRT_TIMING_INIT;
    sd = kvrt_vulkan_submit_desc KVRT_VULKAN_SUBMIT_DESC_INIT;
    sd.next = &chained;
    CHECK(kvrt_stream_submit_vulkan(s, &sd) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(kvrt_stream_end_vulkan(s, nullptr) == KVRT_ERROR_INVALID_STATE);  // not an app's buffer

    // Still recording after all that; no semaphores is a plain submission, on
    // kvrt's own device too, which has timeline semaphores when supported.
    sd = kvrt_vulkan_submit_desc KVRT_VULKAN_SUBMIT_DESC_INIT;
    KVRT_REQUIRE_OK(kvrt_stream_submit_vulkan(s, &sd));
    KVRT_REQUIRE_OK(kvrt_stream_wait(s, kLong));
    KVRT_REQUIRE_OK(kvrt_stream_begin(s));
    KVRT_REQUIRE_OK(kvrt_stream_submit_vulkan(s, nullptr));
    KVRT_REQUIRE_OK(kvrt_stream_wait(s, kLong));
    const kvrt::vk::Context& vctx = *kvrt::api::context_of(ctx.get());
    CHECK(vctx.timeline() == vctx.info().supported.timeline_semaphore);
}
