// The static-scale integer types (U8_STATIC, U16_STATIC) on the CPU: the
// reference quantizer's rounding, saturation and NaN rules, and the library's
// readback decoder (kv::decode_row) against it, bit for bit. No device.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kv/format.hpp"
#include "kv/geometry.hpp"
#include "reference/quant.hpp"
#include "common/random.hpp"

using namespace kvrt;
using ref::StaticType;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
// The largest float below 0.5: roundf gives 0, floor(x + 0.5) gives 1.
constexpr float kJustBelowHalf = 0.49999997f;

uint32_t q8(float x, float scale, int32_t zp) { return ref::quantize_static(StaticType::U8, x, 1.0f / scale, zp); }
uint32_t q16(float x, float scale, int32_t zp) { return ref::quantize_static(StaticType::U16, x, 1.0f / scale, zp); }

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

}  // namespace

TEST_CASE("static quantization rounds halves away from zero, exactly", "[static-types][reference]") {
    // scale 1: x * inv == x, so the rounding rule alone decides.
    CHECK(q8(0.0f, 1.0f, 100) == 100);
    CHECK(q8(-0.0f, 1.0f, 100) == 100);
    CHECK(q8(0.5f, 1.0f, 100) == 101);
    CHECK(q8(-0.5f, 1.0f, 100) == 99);
    CHECK(q8(1.5f, 1.0f, 100) == 102);
    CHECK(q8(2.5f, 1.0f, 100) == 103);  // not to even (102)
    CHECK(q8(-2.5f, 1.0f, 100) == 97);
    CHECK(q8(kJustBelowHalf, 1.0f, 100) == 100);
    CHECK(q8(-kJustBelowHalf, 1.0f, 100) == 100);
    CHECK(q8(std::nextafter(2.5f, 0.0f), 1.0f, 100) == 102);
    // A power-of-two scale keeps halves exact: (k + 0.5) / 64 * 64 = k + 0.5.
    for (int k = -5; k <= 5; ++k) {
        const float x = (static_cast<float>(k) + 0.5f) / 64.0f;
        CHECK(q16(x, 1.0f / 64.0f, 1000) == static_cast<uint32_t>(1000 + k + (k >= 0 ? 1 : 0)));
    }
}

TEST_CASE("static quantization multiplies by the f32 reciprocal, not divides", "[static-types][reference]") {
    // 1/0.1f rounds to exactly 10.0f, so 0.25f * inv = 2.5 -> 3, while
    // 0.25 / 0.1f in exact arithmetic is 2.49999996... -> 2.
    const float scale = 0.1f;
    REQUIRE(1.0f / scale == 10.0f);
    REQUIRE(0.25 / static_cast<double>(scale) < 2.5);
    CHECK(q8(0.25f, scale, 0) == 3);
    CHECK(q8(-0.25f, scale, 10) == 7);
}

TEST_CASE("static quantization saturates and maps NaN to the zero point", "[static-types][reference]") {
    for (int32_t zp : {0, 1, 128, 255}) {
        INFO("zero point " << zp);
        CHECK(q8(1e30f, 0.5f, zp) == 255);
        CHECK(q8(-1e30f, 0.5f, zp) == 0);
        CHECK(q8(kInf, 0.5f, zp) == 255);
        CHECK(q8(-kInf, 0.5f, zp) == 0);
        CHECK(q8(std::numeric_limits<float>::max(), 1e-30f, zp) == 255);  // product overflows to inf
        CHECK(q8(kNaN, 0.5f, zp) == static_cast<uint32_t>(zp));
        CHECK(q8(-kNaN, 0.5f, zp) == static_cast<uint32_t>(zp));
        // The edges of the range, and half a step past them.
        const float top = static_cast<float>(255 - zp) * 0.5f, bottom = static_cast<float>(-zp) * 0.5f;
        CHECK(q8(top, 0.5f, zp) == 255);
        CHECK(q8(top + 0.25f, 0.5f, zp) == 255);
        CHECK(q8(bottom, 0.5f, zp) == 0);
        CHECK(q8(bottom - 0.25f, 0.5f, zp) == 0);
        CHECK(q8(top - 0.5f, 0.5f, zp) == 254);
    }
    CHECK(q16(1e30f, 1.0f / 4096.0f, 32768) == 65535);
    CHECK(q16(-1e30f, 1.0f / 4096.0f, 32768) == 0);
    CHECK(q16(kNaN, 1.0f / 4096.0f, 32768) == 32768);
    CHECK(q16(65535.0f / 8192.0f, 1.0f / 4096.0f, 32768) == 65535);  // 32767.5 -> 32768, + 32768, clamped
    CHECK(q16(-8.0f, 1.0f / 4096.0f, 32768) == 0);
    CHECK(q16(1.0f, 1.0f / 4096.0f, 0) == 4096);
}

TEST_CASE("static dequantization subtracts in integers, then multiplies once", "[static-types][reference]") {
    CHECK(same_bits(ref::dequantize_static(128, 0.1f, 128), 0.0f));
    CHECK(same_bits(ref::dequantize_static(0, 0.1f, 128), -128.0f * 0.1f));
    CHECK(same_bits(ref::dequantize_static(65535, 3e-4f, 1), 65534.0f * 3e-4f));
    // Every U8 code survives quantize(dequantize(q)) unchanged for a few scales.
    for (float scale : {1.0f / 64.0f, 0.0371f, 3.3f}) {
        for (int32_t zp : {0, 77, 255}) {
            for (uint32_t q = 0; q < 256; ++q) {
                INFO("scale " << scale << " zp " << zp << " q " << q);
                REQUIRE(q8(ref::dequantize_static(q, scale, zp), scale, zp) == q);
            }
        }
    }
}

TEST_CASE("static rows encode U16 little-endian and decode back", "[static-types][reference]") {
    const float x[4] = {0.0f, 1.0f, -1.0f, 1000.0f};  // the last saturates
    unsigned char bytes[8];
    ref::encode_row_static(StaticType::U16, x, 4, 1.0f / 256.0f, 0x1234, bytes);
    const unsigned char expect[8] = {0x34, 0x12, 0x34, 0x13, 0x34, 0x11, 0xff, 0xff};
    CHECK(std::memcmp(bytes, expect, 8) == 0);
    float back[4];
    ref::decode_row_static(StaticType::U16, bytes, 4, 1.0f / 256.0f, 0x1234, back);
    CHECK(back[0] == 0.0f);
    CHECK(back[1] == 1.0f);
    CHECK(back[2] == -1.0f);
    CHECK(back[3] == static_cast<float>(0xffff - 0x1234) / 256.0f);
    CHECK_THROWS_AS(ref::encode_row_static(StaticType::U8, x, -1, 1.0f, 0, bytes), std::invalid_argument);
}

TEST_CASE("kv::decode_row decodes static-scale rows bit-identically with the reference", "[static-types][format]") {
    kvrt_test::Rng rng(7);
    for (kvrt_type type : {KVRT_TYPE_U8_STATIC, KVRT_TYPE_U16_STATIC}) {
        const StaticType st = type == KVRT_TYPE_U8_STATIC ? StaticType::U8 : StaticType::U16;
        const uint32_t qmax = ref::static_qmax(st);
        for (const kv::StaticScale s : {kv::StaticScale{0.0371f, 1.0f / 0.0371f, 3},
                                        kv::StaticScale{1.0f / 4096.0f, 4096.0f, static_cast<int32_t>(qmax / 2 + 1)},
                                        kv::StaticScale{2.5e-7f, 1.0f / 2.5e-7f, static_cast<int32_t>(qmax)}}) {
            const size_t n = 38;  // not a multiple of 4
            std::vector<unsigned char> bytes(n * ref::static_code_bytes(st));
            for (auto& b : bytes) b = static_cast<unsigned char>(rng.next());
            bytes[0] = 0;  // the extreme codes
            bytes[ref::static_code_bytes(st)] = 0xff;
            if (st == StaticType::U16) bytes[3] = 0xff;
            std::vector<float> got(n), expect(n);
            kv::decode_row(type, bytes.data(), n, got.data(), &s);
            ref::decode_row_static(st, bytes.data(), static_cast<int64_t>(n), s.scale, s.zero_point, expect.data());
            for (size_t i = 0; i < n; ++i) {
                INFO(kv::type_name(type) << " value " << i << ": " << got[i] << " vs " << expect[i]);
                REQUIRE(same_bits(got[i], expect[i]));
            }
            CHECK(got[1] == static_cast<float>(static_cast<int32_t>(qmax) - s.zero_point) * s.scale);
        }
        // Without its scale a static row cannot decode: NaN, never data.
        const unsigned char zeros[8] = {};
        float out[4] = {1, 2, 3, 4};
        kv::decode_row(type, zeros, 4, out, nullptr);
        for (float v : out) CHECK(std::isnan(v));
    }
}

TEST_CASE("static-scale types have their sizes and names", "[static-types][geometry]") {
    kv::TypeSize ts{};
    REQUIRE(kv::type_size(KVRT_TYPE_U8_STATIC, &ts));
    CHECK((ts.block_elems == 1 && ts.block_bytes == 1));
    REQUIRE(kv::type_size(KVRT_TYPE_U16_STATIC, &ts));
    CHECK((ts.block_elems == 1 && ts.block_bytes == 2));
    kvrt_type t = KVRT_TYPE_UNDEFINED;
    REQUIRE(kv::parse_type("u8_static", &t));
    CHECK(t == KVRT_TYPE_U8_STATIC);
    REQUIRE(kv::parse_type("u16_static", &t));
    CHECK(t == KVRT_TYPE_U16_STATIC);
}
