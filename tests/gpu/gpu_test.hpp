// Shared fixture of the GPU tests: a context with the Khronos validation layer
// on (core and synchronization checks). Any validation error seen during the
// context's life fails the test that owns it, with the messages printed.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "kvrt/kvrt.h"

namespace kvrt_test {

class GpuContext {
public:
    explicit GpuContext(kvrt_flags flags = 0, uint64_t max_binding_bytes = 0);
    ~GpuContext();
    GpuContext(const GpuContext&) = delete;
    GpuContext& operator=(const GpuContext&) = delete;

    kvrt_context get() const { return ctx_; }
    operator kvrt_context() const { return ctx_; }

    // Validation errors so far.
    uint64_t validation_errors() const;

private:
    static void on_log(void* user, kvrt_log_level level, const char* message);
    kvrt_context ctx_ = nullptr;
    mutable std::mutex mutex_;
    std::vector<std::string> errors_;
};

// A stream of `ctx` destroyed at scope exit.
class Stream {
public:
    explicit Stream(kvrt_context ctx, kvrt_flags flags = 0);
    ~Stream() { kvrt_stream_destroy(s_); }
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;
    operator kvrt_stream() const { return s_; }

private:
    kvrt_stream s_ = nullptr;
};

// A buffer of `ctx` destroyed at scope exit.
class Buffer {
public:
    Buffer(kvrt_context ctx, uint64_t size);
    ~Buffer() { kvrt_buffer_destroy(b_); }
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    operator kvrt_buffer() const { return b_; }

    std::vector<uint32_t> download_words(uint64_t offset, uint64_t count) const;
    void upload_words(uint64_t offset, const std::vector<uint32_t>& words) const;

private:
    kvrt_buffer b_ = nullptr;
};

// Device memory the context holds now (kvrt_context_stats.device_bytes).
uint64_t device_bytes(kvrt_context ctx);

// Runs begin/record/submit/wait on `s` with a generous timeout.
template <class F>
void run_stream(kvrt_stream s, F&& record) {
    REQUIRE(kvrt_stream_begin(s) == KVRT_SUCCESS);
    record();
    REQUIRE(kvrt_stream_submit(s) == KVRT_SUCCESS);
    REQUIRE(kvrt_stream_wait(s, 120ull * 1000 * 1000 * 1000) == KVRT_SUCCESS);
}

}  // namespace kvrt_test

// REQUIREs a kvrt call to succeed, showing the detail message if it does not.
#define KVRT_REQUIRE_OK(call)                                   \
    do {                                                        \
        const kvrt_result kvrt_r_ = (call);                     \
        INFO(#call << ": " << kvrt_last_error_message());       \
        REQUIRE(kvrt_r_ == KVRT_SUCCESS);                       \
    } while (0)
