// Memory another process maps (kvrt_buffer_export_memory): a static window
// exported as an opaque file descriptor is read by a second process with a
// Vulkan instance and device of its own (tests/reader/memory_reader.cpp),
// which sees exactly the rows kvrt wrote, and later writes too. Bad input,
// and the refusals where memory was not allocated exportable.
#include "gpu_test.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "reference/half.hpp"

extern char** environ;

using namespace kvrt_test;

namespace {

using OwnedBuffer = Owned<kvrt_buffer, kvrt_buffer_destroy>;

constexpr uint32_t kLayers = 2, kHeads = 4, kKvHeads = 2, kDim = 8;

float value(int32_t pos, uint32_t layer, uint32_t head, uint32_t d, bool v) {
    const int32_t x = pos * 17 + static_cast<int32_t>(layer * 101 + head * 29 + d * 3) + (v ? 11 : 0);
    return static_cast<float>(x % 1024) * 0.25f - 128.0f;
}

void store(kvrt_cache c, int32_t first, uint32_t n) { store_values(c, 0, first, n, kLayers, kKvHeads, kDim, value); }

// Runs the reader on `fd` (dup'ed to its descriptor 3) and returns the bytes
// it printed; REQUIREs it to exit with 0.
std::vector<uint8_t> read_in_other_process(int fd, const kvrt_exported_memory& e, uint64_t bytes) {
    std::string uuid;
    for (uint8_t b : e.device_uuid) {
        char hex[3];
        std::snprintf(hex, sizeof hex, "%02x", b);
        uuid += hex;
    }
    const std::vector<std::string> args = {KVRT_MEMORY_READER,       "--fd",    "3",
                                           "--size",                 std::to_string(e.memory_size),
                                           "--type",                 std::to_string(e.memory_type_index),
                                           "--offset",               std::to_string(e.offset),
                                           "--bytes",                std::to_string(bytes),
                                           "--device-uuid",          uuid};
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    int out[2];
    REQUIRE(pipe(out) == 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fd, 3);  // dup2 clears close-on-exec
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    pid_t pid = 0;
    const int spawned = posix_spawn(&pid, KVRT_MEMORY_READER, &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(out[1]);
    REQUIRE(spawned == 0);
    std::vector<uint8_t> got;
    uint8_t chunk[4096];
    for (ssize_t n; (n = read(out[0], chunk, sizeof chunk)) != 0;) {
        if (n < 0) break;
        got.insert(got.end(), chunk, chunk + n);
    }
    close(out[0]);
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    INFO("the reader's exit status " << (WIFEXITED(status) ? WEXITSTATUS(status) : -1));
    REQUIRE(WIFEXITED(status));
    REQUIRE(WEXITSTATUS(status) == 0);
    return got;
}

// The f16 bits of the window's rows kvrt wrote: the newest `n_valid` of
// positions up to `last` at its last rows (layer 1, head 1, V).
void check_rows(const std::vector<uint8_t>& bytes, uint32_t W, uint32_t n_valid, int32_t last) {
    REQUIRE(bytes.size() == size_t{W} * kDim * 2);
    for (uint32_t i = 0; i < n_valid; ++i) {
        const uint32_t row = W - n_valid + i;
        const int32_t pos = last - static_cast<int32_t>(n_valid - 1 - i);
        for (uint32_t d = 0; d < kDim; ++d) {
            uint16_t h = 0;
            std::memcpy(&h, bytes.data() + (size_t{row} * kDim + d) * 2, 2);
            INFO("row " << row << " (position " << pos << ") dim " << d);
            REQUIRE(h == kvrt::ref::f32_to_f16(value(pos, 1, 1, d, true)));
        }
    }
}

}  // namespace

TEST_CASE("exported memory: another process reads exactly the rows kvrt wrote", "[export]") {
    GpuContext ctx;
    const uint32_t S = 16, W = S - 1;
    Cache c = CacheSpec().shape(kLayers, kHeads, kKvHeads, kDim, kDim).type(KVRT_TYPE_F16).static_layout(S, 2.0)
                  .cells(0, 1).with_flags(KVRT_CACHE_EXPORTABLE).create(ctx);
    store(c, 0, 9);
    kvrt_static_window w = KVRT_STATIC_WINDOW_INIT;
    KVRT_REQUIRE_OK(kvrt_cache_static_get_window(c, 0, 1, 1, KVRT_KV_ARRAY_V, &w));
    kvrt_exported_memory e = KVRT_EXPORTED_MEMORY_INIT;
    KVRT_REQUIRE_OK(kvrt_buffer_export_memory(w.buffer, w.offset, KVRT_MEMORY_HANDLE_OPAQUE_FD, &e));
    REQUIRE(e.fd >= 0);
    REQUIRE(e.contiguous_bytes >= w.bytes);
    REQUIRE(e.offset + w.bytes <= e.memory_size);

    std::vector<uint8_t> mine(w.bytes);
    KVRT_REQUIRE_OK(kvrt_buffer_download(w.buffer, w.offset, mine.data(), w.bytes));
    const std::vector<uint8_t> theirs = read_in_other_process(e.fd, e, w.bytes);
    REQUIRE(theirs == mine);
    check_rows(theirs, W, 9, 8);

    // kvrt writes on (the window slides through the same memory): the other
    // process sees the new rows through the same descriptor.
    store(c, 9, 12);
    KVRT_REQUIRE_OK(kvrt_cache_static_get_window(c, 0, 1, 1, KVRT_KV_ARRAY_V, &w));
    kvrt_exported_memory e2 = KVRT_EXPORTED_MEMORY_INIT;
    KVRT_REQUIRE_OK(kvrt_buffer_export_memory(w.buffer, w.offset, KVRT_MEMORY_HANDLE_OPAQUE_FD, &e2));
    REQUIRE(e2.memory_size == e.memory_size);  // the same allocation: one piece holds the layer
    KVRT_REQUIRE_OK(kvrt_buffer_download(w.buffer, w.offset, mine.data(), w.bytes));
    e.offset = e2.offset;
    const std::vector<uint8_t> later = read_in_other_process(e.fd, e, w.bytes);
    REQUIRE(later == mine);
    check_rows(later, W, W, 20);
    close(e.fd);
    close(e2.fd);
    REQUIRE(ctx.validation_errors() == 0);
}

TEST_CASE("exported memory: buffers, and what cannot be exported", "[export][errors]") {
    GpuContext ctx;
    // An exportable buffer of the application's, written by kvrt, read there.
    kvrt_buffer_desc bd = KVRT_BUFFER_DESC_INIT;
    bd.size = 4096;
    bd.flags = KVRT_BUFFER_EXPORTABLE;
    OwnedBuffer exportable;
    KVRT_REQUIRE_OK(kvrt_buffer_create(ctx, &bd, exportable.out()));
    std::vector<uint8_t> pattern(1024);
    for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<uint8_t>(i * 7 + 3);
    KVRT_REQUIRE_OK(kvrt_buffer_upload(exportable, 2048, pattern.data(), pattern.size()));
    kvrt_exported_memory e = KVRT_EXPORTED_MEMORY_INIT;
    KVRT_REQUIRE_OK(kvrt_buffer_export_memory(exportable, 2048, KVRT_MEMORY_HANDLE_OPAQUE_FD, &e));
    REQUIRE(e.offset == 2048);
    REQUIRE(e.contiguous_bytes == 2048);
    REQUIRE(read_in_other_process(e.fd, e, pattern.size()) == pattern);
    close(e.fd);

    // Refusals, each leaving `out` as it was.
    kvrt_exported_memory untouched = KVRT_EXPORTED_MEMORY_INIT;
    auto refused = [&](kvrt_buffer b, uint64_t offset, kvrt_memory_handle_type t, kvrt_exported_memory* out) {
        const kvrt_result r = kvrt_buffer_export_memory(b, offset, t, out);
        if (out) REQUIRE(out->fd == -1);
        return r;
    };
    OwnedBuffer plain;
    bd.flags = 0;
    KVRT_REQUIRE_OK(kvrt_buffer_create(ctx, &bd, plain.out()));
    REQUIRE(refused(plain, 0, KVRT_MEMORY_HANDLE_OPAQUE_FD, &untouched) == KVRT_ERROR_UNSUPPORTED);
    REQUIRE(refused(exportable, 4096, KVRT_MEMORY_HANDLE_OPAQUE_FD, &untouched) == KVRT_ERROR_INVALID_ARGUMENT);
    REQUIRE(refused(exportable, 0, KVRT_MEMORY_HANDLE_UNDEFINED, &untouched) == KVRT_ERROR_INVALID_ARGUMENT);
    REQUIRE(refused(exportable, 0, static_cast<kvrt_memory_handle_type>(7), &untouched) ==
            KVRT_ERROR_INVALID_ARGUMENT);
    REQUIRE(refused(exportable, 0, KVRT_MEMORY_HANDLE_OPAQUE_FD, nullptr) == KVRT_ERROR_INVALID_ARGUMENT);
    kvrt_exported_memory mistyped = KVRT_EXPORTED_MEMORY_INIT;
    mistyped.type = KVRT_STRUCT_TYPE_STATIC_WINDOW;
    REQUIRE(refused(exportable, 0, KVRT_MEMORY_HANDLE_OPAQUE_FD, &mistyped) == KVRT_ERROR_INVALID_ARGUMENT);
    REQUIRE(refused(nullptr, 0, KVRT_MEMORY_HANDLE_OPAQUE_FD, &untouched) == KVRT_ERROR_INVALID_HANDLE);
    // A dma-buf only where the device exports one (lavapipe does not).
    const kvrt_result dma = kvrt_buffer_export_memory(exportable, 0, KVRT_MEMORY_HANDLE_DMA_BUF, &untouched);
    if (dma == KVRT_SUCCESS) {
        REQUIRE(untouched.fd >= 0);
        close(untouched.fd);
    } else {
        REQUIRE(dma == KVRT_ERROR_UNSUPPORTED);
        REQUIRE(untouched.fd == -1);
    }
    // A cache's rows without KVRT_CACHE_EXPORTABLE, and unknown buffer flags.
    Cache c = CacheSpec().shape(kLayers, kHeads, kKvHeads, kDim, kDim).static_layout(8).cells(0, 1).create(ctx);
    kvrt_static_window w = KVRT_STATIC_WINDOW_INIT;
    KVRT_REQUIRE_OK(kvrt_cache_static_get_window(c, 0, 0, 0, KVRT_KV_ARRAY_K, &w));
    kvrt_exported_memory none = KVRT_EXPORTED_MEMORY_INIT;
    REQUIRE(refused(w.buffer, w.offset, KVRT_MEMORY_HANDLE_OPAQUE_FD, &none) == KVRT_ERROR_UNSUPPORTED);
    bd.flags = 0x4;
    OwnedBuffer bad;
    REQUIRE(kvrt_buffer_create(ctx, &bd, bad.out()) == KVRT_ERROR_INVALID_ARGUMENT);
    // An exportable cell cache, and the estimate: the flag changes no size.
    const CacheSpec cells = CacheSpec().shape(kLayers, kHeads, kKvHeads, kDim, kDim).cells(64, 2);
    kvrt_cache_estimate plain_e = KVRT_CACHE_ESTIMATE_INIT, exp_e = KVRT_CACHE_ESTIMATE_INIT;
    KVRT_REQUIRE_OK(cells.estimate(ctx, &plain_e));
    KVRT_REQUIRE_OK(CacheSpec(cells).with_flags(KVRT_CACHE_EXPORTABLE).estimate(ctx, &exp_e));
    REQUIRE(exp_e.device_bytes == plain_e.device_bytes);
    Cache ce = CacheSpec(cells).with_flags(KVRT_CACHE_EXPORTABLE).create(ctx);
    REQUIRE(ctx.validation_errors() == 0);
}
