// The bad-input rows of the stream, command and interop functions (see
// test_bad_input.cpp).
#include "test_bad_input.hpp"

#include <cstring>

#include <string>
#include <vector>

using namespace kvrt_test;

namespace kvrt_test::bad_input {

namespace {

constexpr uint64_t kWaitNs = 120ull * 1000 * 1000 * 1000;

}  // namespace

void add_stream_rows(World& w, std::vector<Row>* rows) {
    const Target N = Target::None, B = Target::Buffer;
    const auto inv = KVRT_ERROR_INVALID_ARGUMENT;
    const auto hnd = KVRT_ERROR_INVALID_HANDLE;
    const auto state = KVRT_ERROR_INVALID_STATE;
    auto& r = *rows;
    const auto stream_as_buffer = reinterpret_cast<kvrt_stream>(w.buffer);

    // Streams and commands.
    const auto stream_create = [&w](kvrt_stream_desc d) {
        return [&w, d] {
            kvrt_stream s = nullptr;
            Outcome o = out(kvrt_stream_create(w.a, &d, &s));
            if (s) {
                kvrt_stream_destroy(s);
                if (o.r != KVRT_SUCCESS) o.r = KVRT_ERROR_INTERNAL;  // a handle despite the error
            }
            return o;
        };
    };
    r.push_back(err("kvrt_stream_create", "out_stream NULL", inv, N, [&w] { return out(kvrt_stream_create(w.a, nullptr, nullptr)); }));
    {
        kvrt_stream_desc d = KVRT_STREAM_DESC_INIT;
        d.flags = 0x100;
        r.push_back(err("kvrt_stream_create", "unknown flag 0x100", inv, N, stream_create(d)));
        d.flags = 0;
        d.max_timings = kMaxU32;
        r.push_back(err("kvrt_stream_create", "max_timings UINT32_MAX", inv, N, stream_create(d)));
        d.max_timings = 0;
        d.type = bad_enum<kvrt_struct_type>(-7);
        r.push_back(err("kvrt_stream_create", "desc->type -7", inv, N, stream_create(d)));
        d.type = KVRT_STRUCT_TYPE_STREAM_DESC;
        static const Foreign foreign;
        d.next = &foreign;
        r.push_back(err("kvrt_stream_create", "a foreign struct chained", inv, N, stream_create(d)));
    }
    r.push_back(noop("kvrt_stream_destroy", "NULL", N, [] {
        kvrt_stream_destroy(nullptr);
        return Outcome{};
    }));
    r.push_back(noop("kvrt_stream_destroy", "a destroyed stream", N, [&w] {
        kvrt_stream_destroy(w.dead_stream);
        return Outcome{};
    }));
    r.push_back(noop("kvrt_stream_destroy", "a buffer cast to a stream", B, [&w, stream_as_buffer] {
        kvrt_stream_destroy(stream_as_buffer);
        uint64_t size = 0;
        return Outcome{holds(kvrt_buffer_get_size(w.buffer, &size) == KVRT_SUCCESS), ""};
    }));
    const std::pair<std::string, kvrt_stream> bad_streams[] = {
        {"stream NULL", nullptr}, {"a destroyed stream", w.dead_stream}, {"a buffer cast to a stream", stream_as_buffer}};
    for (const auto& [what, st] : bad_streams) {
        const kvrt_stream s = st;
        r.push_back(err("kvrt_stream_begin", what, hnd, N, [s] { return out(kvrt_stream_begin(s)); }));
        r.push_back(err("kvrt_stream_submit", what, hnd, N, [s] { return out(kvrt_stream_submit(s)); }));
        r.push_back(err("kvrt_stream_wait", what, hnd, N, [s] { return out(kvrt_stream_wait(s, kMax64)); }));
        r.push_back(err("kvrt_stream_get_timings", what, hnd, N, [s] {
            uint32_t n = 0;
            return out(kvrt_stream_get_timings(s, nullptr, &n));
        }));
        r.push_back(err("kvrt_cmd_fill", what, hnd, B, [&w, s] { return out(kvrt_cmd_fill(s, w.buffer, 0, 4, 0)); }));
        r.push_back(err("kvrt_cmd_copy", what, hnd, B, [&w, s] { return out(kvrt_cmd_copy(s, w.buffer, 0, w.buffer, 64, 4)); }));
        r.push_back(err("kvrt_stream_submit_vulkan", what, hnd, N, [s] { return out(kvrt_stream_submit_vulkan(s, nullptr)); }));
        r.push_back(err("kvrt_stream_begin_vulkan", what, hnd, N, [s] {
            return out(kvrt_stream_begin_vulkan(s, reinterpret_cast<VkCommandBuffer>(uintptr_t{0x10})));
        }));
        r.push_back(err("kvrt_stream_end_vulkan", what, hnd, N, [s] { return out(kvrt_stream_end_vulkan(s, nullptr)); }));
    }
    r.push_back(err("kvrt_stream_begin", "already recording", state, N, [&w] {
        return while_recording(w.stream, [&] { return out(kvrt_stream_begin(w.stream)); });
    }));
    r.push_back(err("kvrt_stream_submit", "not recording", state, N, [&w] { return out(kvrt_stream_submit(w.stream)); }));
    r.push_back(noop("kvrt_stream_wait", "nothing submitted, timeout UINT64_MAX: success", N,
                     [&w] { return Outcome{holds(kvrt_stream_wait(w.stream, kMax64) == KVRT_SUCCESS), ""}; }));
    r.push_back(err("kvrt_stream_get_timings", "count NULL", inv, N, [&w] { return out(kvrt_stream_get_timings(w.stream, nullptr, nullptr)); }));
    r.push_back(err("kvrt_stream_get_timings", "a stream without timestamps", state, N, [&w] {
        uint32_t n = 0;
        return out(kvrt_stream_get_timings(w.stream, nullptr, &n));
    }));
    r.push_back(noop("kvrt_stream_get_timings", "room for 0 entries after a timed submission: 0 filled", N, [&w] {
        // Once read past an empty copy (its NULL data taken for a size query).
        kvrt_stream_desc d = KVRT_STREAM_DESC_INIT;
        d.flags = KVRT_STREAM_TIMESTAMPS;
        kvrt_stream s = nullptr;
        const kvrt_result created = kvrt_stream_create(w.a, &d, &s);
        if (created == KVRT_ERROR_UNSUPPORTED) return Outcome{};  // a device without timestamps
        REQUIRE(created == KVRT_SUCCESS);
        REQUIRE(kvrt_stream_begin(s) == KVRT_SUCCESS);
        REQUIRE(kvrt_cmd_fill(s, w.buffer, 0, 64, 1) == KVRT_SUCCESS);
        REQUIRE(kvrt_cmd_fill(s, w.buffer, 64, 64, 2) == KVRT_SUCCESS);
        REQUIRE(kvrt_stream_submit(s) == KVRT_SUCCESS);
        REQUIRE(kvrt_stream_wait(s, kWaitNs) == KVRT_SUCCESS);
        struct {
            kvrt_timing t[1];
            unsigned char guard[64];
        } g;
        std::memset(static_cast<void*>(&g), 0x5A, sizeof g);
        g.t[0].type = KVRT_STRUCT_TYPE_TIMING;
        g.t[0].next = nullptr;
        uint32_t n = 0;
        const kvrt_result res = kvrt_stream_get_timings(s, g.t, &n);
        bool untouched = true;
        for (unsigned char c : g.guard) untouched = untouched && c == 0x5A;
        kvrt_stream_destroy(s);
        return Outcome{holds(res == KVRT_SUCCESS && n == 0 && untouched), ""};
    }));
    r.push_back(err("kvrt_stream_get_timings", "timings[0].type -7", inv, N, [&w] {
        kvrt_timing t = KVRT_TIMING_INIT;
        t.type = bad_enum<kvrt_struct_type>(-7);
        uint32_t n = 1;
        return out(kvrt_stream_get_timings(w.stream, &t, &n));
    }));
    r.push_back(err("kvrt_cmd_fill", "offset 2 (misaligned)", inv, B, [&w] {
        return while_recording(w.stream, [&] { return out(kvrt_cmd_fill(w.stream, w.buffer, 2, 8, 0)); });
    }));
    r.push_back(err("kvrt_cmd_fill", "a buffer of another context", inv, B, [&w] {
        return while_recording(w.stream, [&] { return out(kvrt_cmd_fill(w.stream, w.buffer_b, 0, 8, 0)); });
    }));
    r.push_back(err("kvrt_cmd_fill", "a stream that is not recording", state, B, [&w] { return out(kvrt_cmd_fill(w.stream, w.buffer, 0, 8, 0)); }));
    r.push_back(err("kvrt_cmd_copy", "overlapping ranges of one buffer", inv, B, [&w] {
        return while_recording(w.stream, [&] { return out(kvrt_cmd_copy(w.stream, w.buffer, 0, w.buffer, 4, 16)); });
    }));
    r.push_back(err("kvrt_cmd_copy", "dst of another context", inv, B, [&w] {
        return while_recording(w.stream, [&] { return out(kvrt_cmd_copy(w.stream, w.buffer, 0, w.buffer_b, 0, 16)); });
    }));
    r.push_back(err("kvrt_cmd_copy", "size 6 (misaligned)", inv, B, [&w] {
        return while_recording(w.stream, [&] { return out(kvrt_cmd_copy(w.stream, w.buffer, 0, w.buffer, 64, 6)); });
    }));
    r.push_back(err("kvrt_cmd_copy", "a stream that is not recording", state, B,
                    [&w] { return out(kvrt_cmd_copy(w.stream, w.buffer, 0, w.buffer, 64, 16)); }));

    // Ordering with the application's own GPU work. After an argument error
    // the stream still records: submitting it afterwards must succeed.
    const auto submit_vulkan = [&w](const std::function<kvrt_vulkan_submit_desc()>& make) {
        return [&w, make] {
            REQUIRE(kvrt_stream_begin(w.stream) == KVRT_SUCCESS);
            const kvrt_vulkan_submit_desc d = make();
            Outcome o = out(kvrt_stream_submit_vulkan(w.stream, &d));
            const bool still_recording = kvrt_stream_submit(w.stream) == KVRT_SUCCESS;
            REQUIRE(kvrt_stream_wait(w.stream, kWaitNs) == KVRT_SUCCESS);
            if (!still_recording) o.r = KVRT_ERROR_INTERNAL;
            return o;
        };
    };
    static const VkSemaphore null_sem = VK_NULL_HANDLE;
    // Never reaches Vulkan: the rows using it fail on another field first.
    static const VkSemaphore fake_sem = VkSemaphore(uintptr_t{0x1000});  // a pointer, or a uint64_t on 32-bit targets
    static const VkPipelineStageFlags zero_stage = 0, host_stage = VK_PIPELINE_STAGE_HOST_BIT;
    static const Foreign foreign;
    const std::pair<const char*, std::function<kvrt_vulkan_submit_desc()>> bad_submits[] = {
        {"desc->type -7", [] { kvrt_vulkan_submit_desc d = KVRT_VULKAN_SUBMIT_DESC_INIT; d.type = bad_enum<kvrt_struct_type>(-7); return d; }},
        {"a foreign struct chained", [] { kvrt_vulkan_submit_desc d = KVRT_VULKAN_SUBMIT_DESC_INIT; d.next = &foreign; return d; }},
        {"wait_count 1, wait_semaphores NULL", [] { kvrt_vulkan_submit_desc d = KVRT_VULKAN_SUBMIT_DESC_INIT; d.wait_count = 1; return d; }},
        {"signal_count UINT32_MAX, signal_semaphores NULL", [] { kvrt_vulkan_submit_desc d = KVRT_VULKAN_SUBMIT_DESC_INIT; d.signal_count = kMaxU32; return d; }},
        {"wait_semaphores[0] VK_NULL_HANDLE", [] { kvrt_vulkan_submit_desc d = KVRT_VULKAN_SUBMIT_DESC_INIT; d.wait_count = 1; d.wait_semaphores = &null_sem; return d; }},
        {"signal_semaphores[0] VK_NULL_HANDLE", [] { kvrt_vulkan_submit_desc d = KVRT_VULKAN_SUBMIT_DESC_INIT; d.signal_count = 1; d.signal_semaphores = &null_sem; return d; }},
        {"wait_stages[0] 0", [] { kvrt_vulkan_submit_desc d = KVRT_VULKAN_SUBMIT_DESC_INIT; d.wait_count = 1; d.wait_semaphores = &fake_sem; d.wait_stages = &zero_stage; return d; }},
        {"wait_stages[0] HOST", [] { kvrt_vulkan_submit_desc d = KVRT_VULKAN_SUBMIT_DESC_INIT; d.wait_count = 1; d.wait_semaphores = &fake_sem; d.wait_stages = &host_stage; return d; }},
    };
    for (const auto& [what, make] : bad_submits) r.push_back(err("kvrt_stream_submit_vulkan", what, inv, N, submit_vulkan(make)));
    r.push_back(err("kvrt_stream_submit_vulkan", "a stream that is not recording", state, N,
                    [&w] { return out(kvrt_stream_submit_vulkan(w.stream, nullptr)); }));
    r.push_back(err("kvrt_stream_begin_vulkan", "command_buffer VK_NULL_HANDLE", inv, N,
                    [&w] { return out(kvrt_stream_begin_vulkan(w.stream, VK_NULL_HANDLE)); }));
    r.push_back(err("kvrt_stream_end_vulkan", "not recording into an application's command buffer", state, N,
                    [&w] { return out(kvrt_stream_end_vulkan(w.stream, nullptr)); }));
    static const VkFence fake_fence = VkFence(uintptr_t{0x2000});
    const std::pair<const char*, std::function<kvrt_vulkan_completion()>> bad_completions[] = {
        {"completion->type -7", [] { kvrt_vulkan_completion c = KVRT_VULKAN_COMPLETION_INIT; c.type = bad_enum<kvrt_struct_type>(-7); c.fence = fake_fence; return c; }},
        {"a foreign struct chained", [] { kvrt_vulkan_completion c = KVRT_VULKAN_COMPLETION_INIT; c.next = &foreign; c.fence = fake_fence; return c; }},
        {"neither semaphore nor fence", [] { kvrt_vulkan_completion c = KVRT_VULKAN_COMPLETION_INIT; return c; }},
        {"both semaphore and fence", [] { kvrt_vulkan_completion c = KVRT_VULKAN_COMPLETION_INIT; c.semaphore = fake_sem; c.value = 1; c.fence = fake_fence; return c; }},
        {"a semaphore with value 0", [] { kvrt_vulkan_completion c = KVRT_VULKAN_COMPLETION_INIT; c.semaphore = fake_sem; return c; }},
    };
    for (const auto& [what, make] : bad_completions)
        r.push_back(err("kvrt_stream_end_vulkan", what, inv, N, [&w, make] {
            const kvrt_vulkan_completion c = make();
            return out(kvrt_stream_end_vulkan(w.stream, &c));
        }));
}

}  // namespace kvrt_test::bad_input
