// Cache geometry and the estimator's numbers (SPEC 1), with no device.
#include <catch2/catch.hpp>

#include <cmath>

#include "kv/format.hpp"
#include "kv/geometry.hpp"

using namespace kvrt;

namespace {

kvrt_cache_desc desc(uint32_t layers, uint32_t kv_heads, uint32_t dim, kvrt_type t, uint32_t cells) {
    kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
    d.n_layers = layers;
    d.n_heads = kv_heads;
    d.n_kv_heads = kv_heads;
    d.head_dim_k = dim;
    d.capacity = cells;
    d.type_k = t;
    d.type_v = t;
    return d;
}

// The address of a temporary descriptor, for the length of one full expression.
const kvrt_cache_desc* ptr(const kvrt_cache_desc& d) { return &d; }

}  // namespace

TEST_CASE("bytes per token match the published model sizes", "[geometry]") {
    kv::CacheGeometry g;
    REQUIRE(kv::CacheGeometry::from_desc(ptr(desc(16, 8, 64, KVRT_TYPE_F16, 4096)), 128 << 20, &g) == KVRT_SUCCESS);
    CHECK(g.bytes_per_token == 32 * 1024);  // Llama-3.2-1B
    CHECK(g.data_bytes == 4096ull * 32 * 1024);
    // No padding for this shape; the metadata mirror adds 12 bytes per cell
    // (a position and 64 sequence bits), the sequences' lists of cells 4.
    CHECK(g.meta_words == 3);
    CHECK(g.meta_bytes == 4096ull * 12);
    CHECK(g.list_bytes == 4096ull * 4);
    CHECK(g.device_bytes == g.data_bytes + g.meta_bytes + g.list_bytes);
    REQUIRE(kv::CacheGeometry::from_desc(ptr(desc(28, 8, 128, KVRT_TYPE_F16, 4096)), 128 << 20, &g) == KVRT_SUCCESS);
    CHECK(g.bytes_per_token == 112 * 1024);  // Llama-3.2-3B
    REQUIRE(kv::CacheGeometry::from_desc(ptr(desc(32, 32, 128, KVRT_TYPE_F16, 4096)), 128 << 20, &g) == KVRT_SUCCESS);
    CHECK(g.bytes_per_token == 512 * 1024);  // Llama-2-7B
    CHECK(g.max_seqs == 64);
}

TEST_CASE("quantized types use 34 and 18 bytes per 32 values", "[geometry]") {
    kv::CacheGeometry g;
    REQUIRE(kv::CacheGeometry::from_desc(ptr(desc(16, 8, 64, KVRT_TYPE_Q8_0, 100)), 128 << 20, &g) == KVRT_SUCCESS);
    CHECK(g.bytes_per_token == 16ull * 8 * 2 * (64 / 32 * 34));
    CHECK(g.k.stride == g.k.row_bytes);
    REQUIRE(kv::CacheGeometry::from_desc(ptr(desc(1, 1, 96, KVRT_TYPE_Q4_0, 10)), 128 << 20, &g) == KVRT_SUCCESS);
    CHECK(g.k.row_bytes == 3 * 18);  // 54 bytes: padded to 56 per cell
    CHECK(g.k.stride == 56);
    CHECK(g.bytes_per_token == 2 * 54);
    // K and V: 10 cells of 56 bytes, a multiple of 16 already; the mirror's
    // 10 cells of 12 bytes padded to 128; the lists' 10 words padded to 48.
    CHECK(g.device_bytes == 2 * 560 + 128 + 48);
}

TEST_CASE("the metadata mirror grows with max_seqs and splits into binding-sized pieces", "[geometry]") {
    kv::CacheGeometry g;
    kvrt_cache_desc d = desc(1, 1, 64, KVRT_TYPE_F16, 1000);
    d.max_seqs = 130;  // 3 words of 64 bits: 7 words per cell
    REQUIRE(kv::CacheGeometry::from_desc(&d, 4096, &g) == KVRT_SUCCESS);
    CHECK(g.meta_words == 7);
    CHECK(g.meta_cells_per_piece == 4096 / 28);  // 146 cells of 28 bytes
    CHECK(g.meta_piece_bytes == 4096);           // 4088 padded to 16
    // 6 full pieces of 146 cells, then 124 cells of 28 bytes (3472).
    CHECK(g.meta_bytes == 6 * 4096 + 3472);
    CHECK(g.list_bytes == 0);  // a mirror in pieces: attention reads whole runs, no lists
    d.max_seqs = 1;
    REQUIRE(kv::CacheGeometry::from_desc(&d, 4096, &g) == KVRT_SUCCESS);
    CHECK(g.list_bytes == 0);  // one sequence: nothing to list
    d.max_seqs = 2;
    d.capacity = 300;  // a mirror of 3,600 bytes: one piece
    REQUIRE(kv::CacheGeometry::from_desc(&d, 4096, &g) == KVRT_SUCCESS);
    CHECK(g.list_bytes == 1200);
    d.capacity = 1000;
    d.max_seqs = 65536;  // 2049 words: 8196 bytes, more than a 4096-byte binding
    CHECK(kv::CacheGeometry::from_desc(&d, 4096, &g) == KVRT_ERROR_INVALID_ARGUMENT);
}

TEST_CASE("deferred RoPE adds its table of angles, 4,096 bytes per rotated dim", "[geometry]") {
    kv::CacheGeometry plain, deferred;
    kvrt_cache_desc d = desc(2, 4, 128, KVRT_TYPE_F16, 1000);
    REQUIRE(kv::CacheGeometry::from_desc(&d, 128 << 20, &plain) == KVRT_SUCCESS);
    CHECK(plain.rope_table_bytes == 0);
    d.flags = KVRT_CACHE_DEFERRED_ROPE;
    REQUIRE(kv::CacheGeometry::from_desc(&d, 128 << 20, &deferred) == KVRT_SUCCESS);
    // 4 digits x 256 values x 64 pairs x (cos, sin) in f32.
    CHECK(deferred.rope_table_bytes == 4u * 256 * 64 * 8);
    CHECK(deferred.device_bytes == plain.device_bytes + 4096u * 128);
    kvrt_rope_desc r = KVRT_ROPE_DESC_INIT;
    r.n_rot = 32;
    d.next = &r;
    REQUIRE(kv::CacheGeometry::from_desc(&d, 128 << 20, &deferred) == KVRT_SUCCESS);
    CHECK(deferred.rope_table_bytes == 4096u * 32);
}

TEST_CASE("layers split into binding-sized pieces without splitting rows", "[geometry]") {
    kv::CacheGeometry g;
    // 8 heads x 128 x f16 = 2 KiB rows; 1 MiB binding -> 512 cells per piece.
    REQUIRE(kv::CacheGeometry::from_desc(ptr(desc(2, 8, 128, KVRT_TYPE_F16, 1300)), 1 << 20, &g) == KVRT_SUCCESS);
    CHECK(g.k.cells_per_piece == 512);
    CHECK(g.k.pieces == 3);
    CHECK(g.k.piece_bytes == (1 << 20));
    CHECK(g.k.layer_bytes == 2ull * (1 << 20) + 276ull * 2048);
    uint32_t piece = 0;
    uint64_t off = 0;
    g.k.locate(1023, &piece, &off);
    CHECK(piece == 1);
    CHECK(off == 511ull * 2048);
    // Q8_0 rows of 8 * 4 * 34 = 1088 bytes: 963 per 1 MiB piece, padded to 16.
    REQUIRE(kv::CacheGeometry::from_desc(ptr(desc(1, 8, 128, KVRT_TYPE_Q8_0, 2000)), 1 << 20, &g) == KVRT_SUCCESS);
    CHECK(g.k.cells_per_piece == (1u << 20) / 1088);
    CHECK(g.k.piece_bytes % 16 == 0);
    CHECK(g.k.piece_bytes <= (1u << 20));
}

TEST_CASE("invalid descriptors are rejected with a reason", "[geometry]") {
    kv::CacheGeometry g;
    kvrt_cache_desc d = desc(2, 4, 64, KVRT_TYPE_F16, 128);
    CHECK(kv::CacheGeometry::from_desc(&d, 128 << 20, &g) == KVRT_SUCCESS);
    auto bad = [&](kvrt_cache_desc x) { return kv::CacheGeometry::from_desc(&x, 128 << 20, &g); };
    kvrt_cache_desc x = d;
    x.type = KVRT_STRUCT_TYPE_UNDEFINED;
    CHECK(bad(x) == KVRT_ERROR_INVALID_ARGUMENT);
    x = d, x.capacity = 0;
    CHECK(bad(x) == KVRT_ERROR_INVALID_ARGUMENT);
    x = d, x.n_layers = 0;
    CHECK(bad(x) == KVRT_ERROR_INVALID_ARGUMENT);
    x = d, x.n_heads = 6;  // not a multiple of 4
    CHECK(bad(x) == KVRT_ERROR_INVALID_ARGUMENT);
    x = d, x.type_k = KVRT_TYPE_Q8_0, x.head_dim_k = 80;
    CHECK(bad(x) == KVRT_ERROR_INVALID_ARGUMENT);
    x = d, x.type_v = static_cast<kvrt_type>(99);
    CHECK(bad(x) == KVRT_ERROR_INVALID_ARGUMENT);
    x = d, x.layout = static_cast<kvrt_layout>(7);
    CHECK(bad(x) == KVRT_ERROR_INVALID_ARGUMENT);
    x = d, x.capacity = 0xFFFFFFFFu;
    CHECK(bad(x) == KVRT_ERROR_INVALID_ARGUMENT);
    x = d, x.head_dim_k = 63;
    CHECK(bad(x) == KVRT_ERROR_INVALID_ARGUMENT);
}

TEST_CASE("type names round-trip", "[geometry]") {
    for (kvrt_type t : {KVRT_TYPE_F32, KVRT_TYPE_F16, KVRT_TYPE_Q8_0, KVRT_TYPE_Q4_0}) {
        kvrt_type back = KVRT_TYPE_UNDEFINED;
        REQUIRE(kv::parse_type(kv::type_name(t), &back));
        CHECK(back == t);
    }
    kvrt_type out;
    CHECK_FALSE(kv::parse_type("q5_1", &out));
}

TEST_CASE("f16 decoding is exact", "[format]") {
    CHECK(kv::f16_to_f32(0x3c00) == 1.0f);
    CHECK(kv::f16_to_f32(0xc000) == -2.0f);
    CHECK(kv::f16_to_f32(0x0001) == 5.9604644775390625e-08f);  // smallest subnormal
    CHECK(kv::f16_to_f32(0x7bff) == 65504.0f);
    CHECK(std::isinf(kv::f16_to_f32(0x7c00)));
    CHECK(std::isnan(kv::f16_to_f32(0x7e00)));
    CHECK(std::signbit(kv::f16_to_f32(0x8000)));
}
