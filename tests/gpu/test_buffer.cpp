// Buffers: zeroed on creation, split across bindings, uploads and downloads on
// both the mapped and the staging path, and clear errors.
#include "gpu_test.hpp"

#include <cstring>
#include <numeric>
#include <random>

#include "kvrt/kvrt_vulkan.h"
#include "common/random.hpp"

using namespace kvrt_test;

namespace {

std::vector<uint8_t> pattern(size_t n, uint32_t seed) { return Rng(seed).bytes(n); }

// Uploads random bytes at several offsets (including ones that straddle piece
// boundaries) and checks that downloads return them and that the rest stayed
// zero.
void check_round_trips(kvrt_context ctx, uint64_t size, uint64_t piece) {
    Buffer buf(ctx, size);
    uint64_t got = 0;
    KVRT_REQUIRE_OK(kvrt_buffer_get_size(buf, &got));
    REQUIRE(got == size);

    const std::vector<uint64_t> offsets = {0, 3, piece - 5, piece, 2 * piece - 1, size - 1000};
    std::vector<uint8_t> shadow;  // only the probed windows are compared
    for (size_t i = 0; i < offsets.size(); ++i) {
        const uint64_t off = offsets[i];
        const auto data = pattern(1000 - (off == size - 1000 ? 0 : 1), static_cast<uint32_t>(i));
        std::vector<uint8_t> before(data.size() + 64);
        const uint64_t lo = off >= 32 ? off - 32 : 0;
        const uint64_t hi = std::min<uint64_t>(size, off + data.size() + 32);
        before.resize(static_cast<size_t>(hi - lo));
        KVRT_REQUIRE_OK(kvrt_buffer_download(buf, lo, before.data(), before.size()));
        KVRT_REQUIRE_OK(kvrt_buffer_upload(buf, off, data.data(), data.size()));
        std::vector<uint8_t> after(before.size());
        KVRT_REQUIRE_OK(kvrt_buffer_download(buf, lo, after.data(), after.size()));
        for (uint64_t b = lo; b < hi; ++b) {
            const uint8_t expect = (b >= off && b < off + data.size()) ? data[b - off] : before[b - lo];
            if (after[b - lo] != expect) {
                FAIL("byte " << b << " is " << int(after[b - lo]) << ", expected " << int(expect));
            }
        }
    }
}

}  // namespace

TEST_CASE("new buffers read back as zeros", "[buffer]") {
    for (kvrt_flags flags : {0u, static_cast<kvrt_flags>(KVRT_CONTEXT_FORCE_STAGING)}) {
        GpuContext ctx(flags, 64 << 10);
        Buffer buf(ctx, 300000);  // 5 pieces of 64 KiB, the last one partial
        std::vector<uint8_t> bytes(300000, 0xAB);
        KVRT_REQUIRE_OK(kvrt_buffer_download(buf, 0, bytes.data(), bytes.size()));
        CHECK(std::all_of(bytes.begin(), bytes.end(), [](uint8_t b) { return b == 0; }));
    }
}

TEST_CASE("uploads and downloads round-trip across piece boundaries (mapped path)", "[buffer]") {
    GpuContext ctx(0, 64 << 10);
    check_round_trips(ctx, 1 << 20, 64 << 10);
}

TEST_CASE("uploads and downloads round-trip through staging buffers", "[buffer]") {
    GpuContext ctx(KVRT_CONTEXT_FORCE_STAGING, 64 << 10);
    check_round_trips(ctx, 1 << 20, 64 << 10);
    // Larger than one staging chunk (16 MiB) in one call.
    Buffer big(ctx, 40u << 20);
    const auto data = pattern(40u << 20, 99);
    KVRT_REQUIRE_OK(kvrt_buffer_upload(big, 0, data.data(), data.size()));
    std::vector<uint8_t> back(data.size());
    KVRT_REQUIRE_OK(kvrt_buffer_download(big, 0, back.data(), back.size()));
    CHECK(back == data);
}

TEST_CASE("a 1 GiB buffer works on a device whose largest binding is smaller", "[buffer]") {
    // Bindings of 128 MiB, Vulkan's smallest maxStorageBufferRange, so that
    // every device splits the buffer (lavapipe's own limit is 128 MiB; GPUs
    // bind 4 GiB or more at once).
    const uint64_t binding = 128ull << 20;
    GpuContext ctx(0, binding);
    kvrt_device_info info = KVRT_DEVICE_INFO_INIT;
    KVRT_REQUIRE_OK(kvrt_context_get_device_info(ctx, &info));
    const uint64_t size = 1ull << 30;
    if (info.device_local_bytes < 2 * size) {
        WARN("device has only " << info.device_local_bytes << " bytes; using 512 MiB");
    }
    const uint64_t n = info.device_local_bytes < 2 * size ? size / 2 : size;
    Buffer buf(ctx, n);
    REQUIRE(info.max_storage_buffer_range >= binding);
    // Write a marker around every binding-sized boundary and read it back.
    for (uint64_t b = binding; b < n; b += binding) {
        const uint32_t marker[4] = {uint32_t(b >> 20), 0xC0FFEEu, 0xFACEu, uint32_t(b)};
        KVRT_REQUIRE_OK(kvrt_buffer_upload(buf, b - 8, marker, sizeof(marker)));
    }
    for (uint64_t b = binding; b < n; b += binding) {
        uint32_t back[4] = {};
        KVRT_REQUIRE_OK(kvrt_buffer_download(buf, b - 8, back, sizeof(back)));
        CHECK(back[0] == uint32_t(b >> 20));
        CHECK(back[1] == 0xC0FFEEu);
        CHECK(back[3] == uint32_t(b));
    }
    // The piece holding the last byte is its own VkBuffer within the binding limit.
    VkBuffer vb = VK_NULL_HANDLE;
    VkDeviceSize off = 0, contiguous = 0;
    KVRT_REQUIRE_OK(kvrt_buffer_get_vulkan(buf, n - 1, &vb, &off, &contiguous));
    CHECK(vb != VK_NULL_HANDLE);
    CHECK(off < binding);
    CHECK(contiguous == 1);
    KVRT_REQUIRE_OK(kvrt_buffer_get_vulkan(buf, binding + 16, &vb, &off, &contiguous));
    CHECK(off == 16);
    CHECK(contiguous == binding - 16);
}

TEST_CASE("buffer arguments are checked and failures change nothing", "[buffer]") {
    GpuContext ctx(0, 64 << 10);
    kvrt_buffer_desc desc = KVRT_BUFFER_DESC_INIT;
    kvrt_buffer buf = reinterpret_cast<kvrt_buffer>(0x1);

    CHECK(kvrt_buffer_create(ctx, &desc, &buf) == KVRT_ERROR_INVALID_ARGUMENT);  // size 0
    CHECK(buf == nullptr);
    CHECK(kvrt_buffer_create(ctx, nullptr, &buf) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(kvrt_buffer_create(nullptr, &desc, &buf) == KVRT_ERROR_INVALID_HANDLE);
    desc.size = 64;
    CHECK(kvrt_buffer_create(ctx, &desc, nullptr) == KVRT_ERROR_INVALID_ARGUMENT);
    desc.flags = 2;  // unknown (KVRT_BUFFER_EXPORTABLE is 1)
    CHECK(kvrt_buffer_create(ctx, &desc, &buf) == KVRT_ERROR_INVALID_ARGUMENT);
    desc.flags = 0;

    kvrt_context_stats before = KVRT_CONTEXT_STATS_INIT;
    KVRT_REQUIRE_OK(kvrt_context_get_stats(ctx, &before));
    for (uint64_t huge : {1ull << 50, ~0ull, ~0ull - 8}) {
        desc.size = huge;
        CHECK(kvrt_buffer_create(ctx, &desc, &buf) == KVRT_ERROR_OUT_OF_DEVICE_MEMORY);
        CHECK(buf == nullptr);
    }
    kvrt_context_stats after = KVRT_CONTEXT_STATS_INIT;
    KVRT_REQUIRE_OK(kvrt_context_get_stats(ctx, &after));
    CHECK(after.device_bytes == before.device_bytes);  // nothing left allocated

    Buffer b(ctx, 100);
    uint8_t data[128] = {1, 2, 3};
    CHECK(kvrt_buffer_upload(b, 0, nullptr, 4) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(kvrt_buffer_upload(b, 0, data, 101) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(kvrt_buffer_upload(b, 100, data, 1) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(kvrt_buffer_upload(b, ~0ull, data, 2) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(kvrt_buffer_upload(b, 4, data, ~0ull - 2) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(kvrt_buffer_download(b, 50, data, 51) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(kvrt_buffer_download(b, 0, nullptr, 1) == KVRT_ERROR_INVALID_ARGUMENT);
    KVRT_REQUIRE_OK(kvrt_buffer_upload(b, 100, nullptr, 0));  // empty is fine
    std::vector<uint8_t> back(100, 0xFF);
    KVRT_REQUIRE_OK(kvrt_buffer_download(b, 0, back.data(), back.size()));
    CHECK(std::all_of(back.begin(), back.end(), [](uint8_t x) { return x == 0; }));

    VkBuffer vb;
    VkDeviceSize off, n;
    CHECK(kvrt_buffer_get_vulkan(b, 100, &vb, &off, &n) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(kvrt_buffer_get_vulkan(b, 0, nullptr, &off, &n) == KVRT_ERROR_INVALID_ARGUMENT);
}
