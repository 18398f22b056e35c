// Core utilities: checked arithmetic, detail messages, logging.
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "core/checked.hpp"
#include "core/log.hpp"
#include "core/result.hpp"

using namespace kvrt;

TEST_CASE("checked arithmetic detects overflow", "[core]") {
    uint64_t out = 0;
    const uint64_t max = std::numeric_limits<uint64_t>::max();
    CHECK(checked_add(1, 2, &out));
    CHECK(out == 3);
    CHECK_FALSE(checked_add(max, 1, &out));
    CHECK(checked_add(max - 1, 1, &out));
    CHECK(out == max);
    CHECK(checked_mul(1ull << 32, 1ull << 31, &out));
    CHECK(out == 1ull << 63);
    CHECK_FALSE(checked_mul(1ull << 32, 1ull << 32, &out));
    CHECK(checked_mul(0, max, &out));
    CHECK(out == 0);
}

TEST_CASE("range_inside rejects ranges past the end, also when offset + size wraps", "[core]") {
    const uint64_t max = std::numeric_limits<uint64_t>::max();
    CHECK(range_inside(0, 16, 16));
    CHECK(range_inside(16, 0, 16));
    CHECK_FALSE(range_inside(17, 0, 16));
    CHECK_FALSE(range_inside(8, 9, 16));
    CHECK_FALSE(range_inside(8, max, 16));
    CHECK_FALSE(range_inside(max, 2, 16));
}

TEST_CASE("alignment helpers", "[core]") {
    uint64_t out = 0;
    CHECK(checked_align_up(0, 256, &out));
    CHECK(out == 0);
    CHECK(checked_align_up(257, 256, &out));
    CHECK(out == 512);
    CHECK_FALSE(checked_align_up(std::numeric_limits<uint64_t>::max() - 3, 256, &out));
    CHECK(align_down(511, 256) == 256);
    CHECK(is_pow2(64));
    CHECK_FALSE(is_pow2(0));
    CHECK_FALSE(is_pow2(96));
}

TEST_CASE("fail() records a thread-local detail message", "[core]") {
    clear_error_message();
    CHECK(std::string(last_error_message()).empty());
    CHECK(fail(KVRT_ERROR_INVALID_ARGUMENT, "bad %s %d", "value", 7) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(last_error_message()) == "bad value 7");
    std::string other;
    std::thread t([&]() {
        other = last_error_message();
        fail(KVRT_ERROR_IO, "from the other thread");
    });
    t.join();
    CHECK(other.empty());
    CHECK(std::string(last_error_message()) == "bad value 7");
    // Long messages are truncated, never overflow.
    const std::string long_text(5000, 'x');
    fail(KVRT_ERROR_INTERNAL, "%s", long_text.c_str());
    CHECK(std::string(last_error_message()).size() < 1024);
}

TEST_CASE("result names cover every code", "[core]") {
    CHECK(std::string(result_name(KVRT_SUCCESS)) == "KVRT_SUCCESS");
    CHECK(std::string(result_name(KVRT_ERROR_TIMEOUT)) == "KVRT_ERROR_TIMEOUT");
    CHECK(std::string(result_name(KVRT_ERROR_INTERNAL)) == "KVRT_ERROR_INTERNAL");
    CHECK(std::string(result_name(static_cast<kvrt_result>(-999))) == "KVRT_ERROR_UNKNOWN");
}

namespace {
struct Captured {
    std::vector<std::pair<kvrt_log_level, std::string>> messages;
};
void capture(void* user, kvrt_log_level level, const char* message) {
    static_cast<Captured*>(user)->messages.emplace_back(level, message);
}
}  // namespace

TEST_CASE("logger delivers at or above its threshold only", "[core]") {
    Captured c;
    Logger log(&capture, &c, KVRT_LOG_LEVEL_DEFAULT);  // WARN
    log.log(KVRT_LOG_LEVEL_INFO, "hidden %d", 1);
    log.log(KVRT_LOG_LEVEL_WARN, "shown %d", 2);
    log.log(KVRT_LOG_LEVEL_ERROR, "shown %d", 3);
    REQUIRE(c.messages.size() == 2);
    CHECK(c.messages[0].first == KVRT_LOG_LEVEL_WARN);
    CHECK(c.messages[0].second == "shown 2");
    CHECK(c.messages[1].second == "shown 3");

    Logger quiet(&capture, &c, KVRT_LOG_LEVEL_NONE);
    quiet.log(KVRT_LOG_LEVEL_ERROR, "dropped");
    CHECK(c.messages.size() == 2);

    Logger none;  // no callback: never calls anything
    none.log(KVRT_LOG_LEVEL_ERROR, "nowhere");
    CHECK_FALSE(none.enabled(KVRT_LOG_LEVEL_ERROR));
}
