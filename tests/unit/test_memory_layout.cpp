// The fixed-capacity memory's device layout (kv/memory_layout.hpp): byte
// sizes and offsets for a few geometries, worked out by hand from the
// layout's description, and its refusals.
#include <catch2/catch.hpp>

#include <cstdint>

#include "kv/memory_layout.hpp"
#include "kv/memory_half.hpp"

using namespace kvrt;

namespace {

// 2 layers, 3 heads, 10 slots, keys of 12, values of 20, 2 sequences, chunks
// of 40 tokens: padded to mp 16, ep 16, dp 24, tp 64, one sub-chunk.
kv::MemoryGeometry small(bool f16) {
    // n_layers, n_heads, m, e, d, max_seqs, chunk, state_f16, has_init.
    return kv::MemoryGeometry{2, 3, 10, 12, 20, 2, 40, f16, false};
}

}  // namespace

TEST_CASE("memory layout: sizes of a small f32 memory", "[memory][layout]") {
    kv::MemoryLayout l;
    REQUIRE(l.compute(small(false), kv::kMemoryPieceCap) == KVRT_SUCCESS);
    CHECK((l.mp == 16 && l.ep == 16 && l.dp == 24 && l.tp == 64 && l.nsub == 1));
    CHECK(l.keys_head == 1024);   // 16 x 16 x 4
    CHECK(l.state_head == 1024);  // 10 x 24 x 4 = 960, aligned to 256
    // Working memory of one head: x 2x64x16x4, s 2x64x16x4, wv 64x24x4,
    // snap 1x10x24x4 (aligned), a 64x64x4, temp one state head.
    CHECK(l.w_s == 8192);
    CHECK(l.w_wv == 16384);
    CHECK(l.w_snap == 22528);
    CHECK(l.w_a == 23552);
    CHECK(l.w_temp == 39936);
    CHECK(l.work_head == 40960);
    CHECK(l.stage_bytes == 15360);  // 64 x 3 x 20 x 4
    // Every head fits one group.
    CHECK((l.group == 3 && l.n_groups == 1 && l.groups_heads(0) == 3));
    CHECK(l.keys_block == 3072);
    CHECK(l.state_block == 3072);
    CHECK(l.keys_bytes == 2 * 3072);          // layers x groups x block
    CHECK(l.state_bytes == 2 * 2 * 2 * 3072);  // sequences x slots x layers x groups x block
    CHECK(l.init_bytes == 0);
    CHECK(l.work_bytes == 3 * 40960);
    CHECK(l.total_bytes == 6144 + 24576 + 122880 + 15360);
}

TEST_CASE("memory layout: f16 state, initial values", "[memory][layout]") {
    kv::MemoryGeometry g = small(true);
    g.has_init = true;
    kv::MemoryLayout l;
    REQUIRE(l.compute(g, kv::kMemoryPieceCap) == KVRT_SUCCESS);
    CHECK(l.state_head == 512);  // 10 x 24 x 2 = 480, aligned
    CHECK(l.work_head == 39936 + 512);  // the temp slot is in the state's precision
    CHECK(l.state_block == 3 * 512);
    CHECK(l.init_bytes == 2 * 3 * 512);  // layers x block
    CHECK(l.total_bytes == l.keys_bytes + l.state_bytes + l.init_bytes + l.work_bytes + l.stage_bytes);
}

TEST_CASE("memory layout: small bindings split the heads into groups", "[memory][layout]") {
    kv::MemoryLayout l;
    // 100,000 bytes round down to 99,840: two heads' working memory (40,960 each) per group.
    REQUIRE(l.compute(small(false), 100000) == KVRT_SUCCESS);
    CHECK(l.piece_cap == 99840);
    CHECK((l.group == 2 && l.n_groups == 2));
    CHECK((l.groups_heads(0) == 2 && l.groups_heads(1) == 1));
    CHECK(l.keys_block == 2048);
    CHECK(l.keys_piece == 48 * 2048);  // whole blocks per piece
    CHECK(l.keys_offset(1, 1) == 3 * 2048);
    CHECK(l.init_offset(1, 0) == 2 * 2048);
    // ((seq 1 x 2 + slot 1) x 2 layers + layer 1) x 2 groups + group 1, in blocks.
    CHECK(l.state_offset(1, 1, 1, 1) == 15 * 2048);
    CHECK(l.state_bytes == 2 * 2 * 2 * 2 * 2048);
}

TEST_CASE("memory layout: refuses a head larger than a binding and sizes that overflow", "[memory][layout]") {
    kv::MemoryLayout l;
    CHECK(l.compute(small(false), 40960 - 256) == KVRT_ERROR_INVALID_ARGUMENT);
    kv::MemoryGeometry g = small(false);
    g.max_seqs = UINT32_MAX;
    g.n_layers = UINT32_MAX;
    CHECK(l.compute(g, kv::kMemoryPieceCap) == KVRT_ERROR_INVALID_ARGUMENT);
}

TEST_CASE("memory half: conversions round to nearest even, seeds stay from -1 up to 1", "[memory][layout]") {
    CHECK(kv::memory_half::from_f32(1.0f) == 0x3C00);
    CHECK(kv::memory_half::to_f32(0x3C00) == 1.0f);
    CHECK(kv::memory_half::from_f32(65504.0f) == 0x7BFF);
    CHECK(kv::memory_half::from_f32(1.0f + 1.0f / 2048.0f) == 0x3C00);  // a tie rounds to even
    for (uint64_t i = 0; i < 1000; ++i) {
        const float v = kv::memory_half::seeded(7, i);
        CHECK((v >= -1.0f && v < 1.0f));
    }
}
