// Streams and the fill/copy kernels, end to end with guard bands: every test
// surrounds the written range with sentinel words and checks that nothing
// outside it changed.
#include "gpu_test.hpp"

#include <chrono>
#include <random>

#include "common/random.hpp"

using namespace kvrt_test;

namespace {

constexpr uint32_t kSentinel = 0xDEADBEEFu;
constexpr uint64_t kSecond = 1000ull * 1000 * 1000;

}  // namespace

TEST_CASE("fill writes exactly its range, across piece boundaries", "[stream]") {
    const uint64_t piece = 64 << 10;
    GpuContext ctx(0, piece);
    const uint64_t words = 3 * piece / 4 + 37;  // 3 pieces and a partial one
    Buffer buf(ctx, words * 4);
    buf.upload_words(0, std::vector<uint32_t>(words, kSentinel));
    Stream s(ctx);

    struct Case { uint64_t first, count; uint32_t value; };
    const Case cases[] = {
        {1, 1, 0x11111111u},                          // one word
        {5, 1000, 0x22222222u},                       // inside the first piece
        {piece / 4 - 3, 10, 0x33333333u},             // straddles a boundary
        {piece / 4 - 1, 2 * piece / 4 + 2, 0x44u},    // spans a whole piece
        {words - 7, 7, 0x55555555u},                  // the last words
    };
    std::vector<uint32_t> expect(words, kSentinel);
    for (const Case& c : cases) {
        run_stream(s, [&] { KVRT_REQUIRE_OK(kvrt_cmd_fill(s, buf, c.first * 4, c.count * 4, c.value)); });
        std::fill(expect.begin() + c.first, expect.begin() + c.first + c.count, c.value);
        const auto got = buf.download_words(0, words);
        REQUIRE(got.size() == expect.size());
        for (uint64_t i = 0; i < words; ++i) {
            if (got[i] != expect[i]) FAIL("word " << i << " is " << std::hex << got[i] << ", expected " << expect[i]);
        }
    }
}

TEST_CASE("copy moves exactly its range between and within buffers", "[stream]") {
    const uint64_t piece = 64 << 10;
    for (kvrt_flags flags : {0u, static_cast<kvrt_flags>(KVRT_CONTEXT_FORCE_STAGING)}) {
        GpuContext ctx(flags, piece);
        const uint64_t words = piece / 2 + 1000;  // a bit over 2 pieces
        Buffer src(ctx, words * 4), dst(ctx, words * 4);
        std::vector<uint32_t> data(words);
        Rng rng(7);
        for (auto& w : data) w = static_cast<uint32_t>(rng.next());
        src.upload_words(0, data);
        dst.upload_words(0, std::vector<uint32_t>(words, kSentinel));
        Stream s(ctx);

        // Misaligned piece boundaries between src and dst.
        const uint64_t so = 123, d_o = piece / 4 - 50, n = piece / 4 + 333;
        run_stream(s, [&] { KVRT_REQUIRE_OK(kvrt_cmd_copy(s, src, so * 4, dst, d_o * 4, n * 4)); });
        const auto got = dst.download_words(0, words);
        for (uint64_t i = 0; i < words; ++i) {
            const uint32_t e = (i >= d_o && i < d_o + n) ? data[so + i - d_o] : kSentinel;
            if (got[i] != e) FAIL("word " << i << " is " << std::hex << got[i] << ", expected " << e);
        }
        // Within one buffer, non-overlapping.
        run_stream(s, [&] { KVRT_REQUIRE_OK(kvrt_cmd_copy(s, src, 0, src, 4000 * 4, 100 * 4)); });
        const auto self = src.download_words(0, words);
        for (uint64_t i = 0; i < words; ++i) {
            const uint32_t e = (i >= 4000 && i < 4100) ? data[i - 4000] : data[i];
            if (self[i] != e) FAIL("self-copy word " << i);
        }
    }
}

TEST_CASE("dependent operations in one stream see each other's results", "[stream]") {
    // fill A, copy A->B, fill A again (write-after-read), copy B->C: each step
    // depends on the one before, so barriers must be right for C to hold the
    // first value and A the second. Synchronization validation checks them too.
    GpuContext ctx;
    const uint64_t bytes = 1 << 20;
    Buffer a(ctx, bytes), b(ctx, bytes), c(ctx, bytes);
    Stream s(ctx);
    run_stream(s, [&] {
        KVRT_REQUIRE_OK(kvrt_cmd_fill(s, a, 0, bytes, 1));
        KVRT_REQUIRE_OK(kvrt_cmd_copy(s, a, 0, b, 0, bytes));
        KVRT_REQUIRE_OK(kvrt_cmd_fill(s, a, 0, bytes, 2));
        KVRT_REQUIRE_OK(kvrt_cmd_copy(s, b, 0, c, 0, bytes));
        KVRT_REQUIRE_OK(kvrt_cmd_fill(s, b, 0, bytes / 2, 3));
    });
    const auto av = a.download_words(0, bytes / 4), bv = b.download_words(0, bytes / 4),
               cv = c.download_words(0, bytes / 4);
    CHECK(std::all_of(av.begin(), av.end(), [](uint32_t w) { return w == 2; }));
    CHECK(std::all_of(cv.begin(), cv.end(), [](uint32_t w) { return w == 1; }));
    CHECK(std::all_of(bv.begin(), bv.begin() + bytes / 8, [](uint32_t w) { return w == 3; }));
    CHECK(std::all_of(bv.begin() + bytes / 8, bv.end(), [](uint32_t w) { return w == 1; }));

    // Across submissions and streams: another stream reads what this one wrote.
    Stream s2(ctx);
    run_stream(s, [&] { KVRT_REQUIRE_OK(kvrt_cmd_fill(s, c, 0, bytes, 9)); });
    run_stream(s2, [&] { KVRT_REQUIRE_OK(kvrt_cmd_copy(s2, c, 0, a, 0, bytes)); });
    const auto av2 = a.download_words(0, bytes / 4);
    CHECK(std::all_of(av2.begin(), av2.end(), [](uint32_t w) { return w == 9; }));
}

TEST_CASE("uploads wait for submitted work on the buffer", "[stream]") {
    GpuContext ctx;
    const uint64_t bytes = 64u << 20;
    Buffer a(ctx, bytes);
    Stream s(ctx);
    KVRT_REQUIRE_OK(kvrt_stream_begin(s));
    KVRT_REQUIRE_OK(kvrt_cmd_fill(s, a, 0, bytes, 5));
    KVRT_REQUIRE_OK(kvrt_stream_submit(s));
    // Without waiting on the stream: the upload must land after the fill.
    const uint32_t mark = 0x12345678u;
    KVRT_REQUIRE_OK(kvrt_buffer_upload(a, bytes - 4, &mark, 4));
    uint32_t back[2] = {};
    KVRT_REQUIRE_OK(kvrt_buffer_download(a, bytes - 8, back, 8));
    CHECK(back[0] == 5);
    CHECK(back[1] == mark);
    KVRT_REQUIRE_OK(kvrt_stream_wait(s, 60 * kSecond));
}

TEST_CASE("stream state is checked", "[stream]") {
    GpuContext ctx;
    Buffer buf(ctx, 4096);
    Stream s(ctx);
    CHECK(kvrt_stream_submit(s) == KVRT_ERROR_INVALID_STATE);
    CHECK(kvrt_cmd_fill(s, buf, 0, 16, 1) == KVRT_ERROR_INVALID_STATE);
    KVRT_REQUIRE_OK(kvrt_stream_wait(s, 0));  // nothing submitted: done
    KVRT_REQUIRE_OK(kvrt_stream_begin(s));
    CHECK(kvrt_stream_begin(s) == KVRT_ERROR_INVALID_STATE);
    // Bad command arguments leave the recording usable.
    CHECK(kvrt_cmd_fill(s, buf, 2, 16, 1) == KVRT_ERROR_INVALID_ARGUMENT);      // unaligned offset
    CHECK(kvrt_cmd_fill(s, buf, 0, 6, 1) == KVRT_ERROR_INVALID_ARGUMENT);       // unaligned size
    CHECK(kvrt_cmd_fill(s, buf, 4000, 100, 1) == KVRT_ERROR_INVALID_ARGUMENT);  // past the end
    CHECK(kvrt_cmd_fill(s, buf, ~0ull - 3, 8, 1) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(kvrt_cmd_fill(s, nullptr, 0, 8, 1) == KVRT_ERROR_INVALID_HANDLE);
    CHECK(kvrt_cmd_copy(s, buf, 0, buf, 8, 16) == KVRT_ERROR_INVALID_ARGUMENT);  // overlap
    KVRT_REQUIRE_OK(kvrt_cmd_fill(s, buf, 0, 0, 1));                           // empty is fine
    KVRT_REQUIRE_OK(kvrt_cmd_fill(s, buf, 0, 4096, 3));
    KVRT_REQUIRE_OK(kvrt_stream_submit(s));
    KVRT_REQUIRE_OK(kvrt_stream_wait(s, 60 * kSecond));
    CHECK(buf.download_words(4092, 1)[0] == 3);

    SECTION("a buffer from another context is rejected") {
        GpuContext other;
        Buffer foreign(other, 64);
        KVRT_REQUIRE_OK(kvrt_stream_begin(s));
        CHECK(kvrt_cmd_fill(s, foreign, 0, 64, 1) == KVRT_ERROR_INVALID_ARGUMENT);
        CHECK(kvrt_cmd_copy(s, buf, 0, foreign, 0, 64) == KVRT_ERROR_INVALID_ARGUMENT);
        KVRT_REQUIRE_OK(kvrt_stream_submit(s));
        KVRT_REQUIRE_OK(kvrt_stream_wait(s, 60 * kSecond));
    }
    SECTION("a buffer destroyed before submission drops the recording") {
        kvrt_buffer tmp = nullptr;
        kvrt_buffer_desc bd = KVRT_BUFFER_DESC_INIT;
        bd.size = 64;
        KVRT_REQUIRE_OK(kvrt_buffer_create(ctx, &bd, &tmp));
        KVRT_REQUIRE_OK(kvrt_stream_begin(s));
        KVRT_REQUIRE_OK(kvrt_cmd_fill(s, tmp, 0, 64, 1));
        kvrt_buffer_destroy(tmp);
        CHECK(kvrt_stream_submit(s) == KVRT_ERROR_INVALID_STATE);
        // The stream is usable again.
        run_stream(s, [&] { KVRT_REQUIRE_OK(kvrt_cmd_fill(s, buf, 0, 64, 8)); });
        CHECK(buf.download_words(0, 1)[0] == 8);
    }
    SECTION("a buffer destroyed while its work runs is released afterwards") {
        kvrt_buffer tmp = nullptr;
        kvrt_buffer_desc bd = KVRT_BUFFER_DESC_INIT;
        bd.size = 16u << 20;
        KVRT_REQUIRE_OK(kvrt_buffer_create(ctx, &bd, &tmp));
        KVRT_REQUIRE_OK(kvrt_stream_begin(s));
        KVRT_REQUIRE_OK(kvrt_cmd_fill(s, tmp, 0, bd.size, 1));
        KVRT_REQUIRE_OK(kvrt_stream_submit(s));
        kvrt_buffer_destroy(tmp);
        KVRT_REQUIRE_OK(kvrt_stream_wait(s, 60 * kSecond));
    }
}

TEST_CASE("a wait that runs out of time is KVRT_ERROR_TIMEOUT, never success", "[stream]") {
    GpuContext ctx;
    const uint64_t bytes = 128u << 20;
    Buffer a(ctx, bytes), b(ctx, bytes);
    Stream s(ctx);
    bool saw_timeout = false;
    // Enough work that a 1 µs wait cannot see it finish.
    for (int attempt = 0; attempt < 3 && !saw_timeout; ++attempt) {
        KVRT_REQUIRE_OK(kvrt_stream_begin(s));
        for (int i = 0; i < 4 << attempt; ++i) {
            KVRT_REQUIRE_OK(kvrt_cmd_fill(s, a, 0, bytes, static_cast<uint32_t>(i)));
            KVRT_REQUIRE_OK(kvrt_cmd_copy(s, a, 0, b, 0, bytes));
        }
        KVRT_REQUIRE_OK(kvrt_stream_submit(s));
        const auto t0 = std::chrono::steady_clock::now();
        const kvrt_result r = kvrt_stream_wait(s, 1000);
        const auto waited = std::chrono::steady_clock::now() - t0;
        CHECK(waited < std::chrono::seconds(5));  // it did not block
        if (r == KVRT_ERROR_TIMEOUT) {
            saw_timeout = true;
            CHECK(kvrt_stream_begin(s) == KVRT_ERROR_INVALID_STATE);  // still running
        } else {
            CHECK(r == KVRT_SUCCESS);
        }
        KVRT_REQUIRE_OK(kvrt_stream_wait(s, 120 * kSecond));
    }
    CHECK(saw_timeout);
}

TEST_CASE("a submission must be waited for before the next begin, even once its work finished", "[stream]") {
    GpuContext ctx;
    Buffer a(ctx, 4096);
    Stream s(ctx);
    KVRT_REQUIRE_OK(kvrt_stream_begin(s));
    KVRT_REQUIRE_OK(kvrt_cmd_fill(s, a, 0, 4096, 7u));
    KVRT_REQUIRE_OK(kvrt_stream_submit(s));
    // The download waits for the fill: the work has finished after it.
    std::vector<uint32_t> got(1024);
    KVRT_REQUIRE_OK(kvrt_buffer_download(a, 0, got.data(), 4096));
    CHECK(got[1023] == 7u);
    // Whether begin succeeds must not depend on the device's speed.
    CHECK(kvrt_stream_begin(s) == KVRT_ERROR_INVALID_STATE);
    KVRT_REQUIRE_OK(kvrt_stream_wait(s, 0));
    KVRT_REQUIRE_OK(kvrt_stream_begin(s));
    KVRT_REQUIRE_OK(kvrt_stream_submit(s));
    KVRT_REQUIRE_OK(kvrt_stream_wait(s, 120 * kSecond));
    REQUIRE(ctx.validation_errors() == 0);
}

TEST_CASE("timestamps time every operation", "[stream]") {
    GpuContext ctx;
    Buffer a(ctx, 8 << 20), b(ctx, 8 << 20);
    Stream plain(ctx);
    uint32_t n = 0;
    CHECK(kvrt_stream_get_timings(plain, nullptr, &n) == KVRT_ERROR_INVALID_STATE);

    if (!timestamps_or_refused(ctx)) return;
    Stream s(ctx, KVRT_STREAM_TIMESTAMPS);
    run_stream(s, [&] {
        KVRT_REQUIRE_OK(kvrt_cmd_fill(s, a, 0, 8 << 20, 1));
        KVRT_REQUIRE_OK(kvrt_cmd_copy(s, a, 0, b, 0, 8 << 20));
        KVRT_REQUIRE_OK(kvrt_cmd_fill(s, b, 0, 4096, 2));
    });
    KVRT_REQUIRE_OK(kvrt_stream_get_timings(s, nullptr, &n));
    REQUIRE(n == 3);
    std::vector<kvrt_timing> t(n, kvrt_timing KVRT_TIMING_INIT);
    KVRT_REQUIRE_OK(kvrt_stream_get_timings(s, t.data(), &n));
    CHECK(std::string(t[0].label) == "fill");
    CHECK(std::string(t[1].label) == "copy");
    CHECK(std::string(t[2].label) == "fill");
    CHECK(t[0].ns > 0);
    CHECK(t[1].ns > 0);
    CHECK(t[0].ns < 60 * kSecond);
    uint32_t one = 1;
    KVRT_REQUIRE_OK(kvrt_stream_get_timings(s, t.data(), &one));
    CHECK(one == 1);
    CHECK(kvrt_stream_get_timings(s, t.data(), nullptr) == KVRT_ERROR_INVALID_ARGUMENT);
    // Every entry needs its type, not only the first.
    t[2].type = KVRT_STRUCT_TYPE_UNDEFINED;
    uint32_t all = 3;
    CHECK(kvrt_stream_get_timings(s, t.data(), &all) == KVRT_ERROR_INVALID_ARGUMENT);

    kvrt_stream_desc bad = KVRT_STREAM_DESC_INIT;
    bad.flags = 0x100;
    kvrt_stream out = nullptr;
    CHECK(kvrt_stream_create(ctx, &bad, &out) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(out == nullptr);
}
