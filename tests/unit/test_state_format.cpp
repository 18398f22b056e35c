// The state format (src/state/): round trips through the writer and the
// parser, and the parser's refusals: every truncation, every single-bit
// flip, each malformed field behind a valid checksum, versions.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "core/result.hpp"
#include "fuzz/state_samples.hpp"
#include "state/state_format.hpp"

using namespace kvrt;
using kvrt_test::make_sample_state;
using kvrt_test::SampleSpec;

namespace {

uint32_t rd32(const std::vector<uint8_t>& b, size_t at) {
    return uint32_t(b[at]) | uint32_t(b[at + 1]) << 8 | uint32_t(b[at + 2]) << 16 | uint32_t(b[at + 3]) << 24;
}
void wr32(std::vector<uint8_t>* b, size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) (*b)[at + i] = uint8_t(v >> (8 * i));
}
// The checksum as the format documents it: XXH3-64 (seed 0) of every byte
// before it, little-endian in the last 8 bytes.
void reseal(std::vector<uint8_t>* b) {
    const uint64_t h = XXH3_64bits(b->data(), b->size() - 8);
    for (int i = 0; i < 8; ++i) (*b)[b->size() - 8 + i] = uint8_t(h >> (8 * i));
}

Result parse(const std::vector<uint8_t>& b, state::Plan* plan = nullptr) {
    state::Plan p;
    return state::parse(b.data(), b.size(), plan ? plan : &p);
}

// Bytes of 32 values of a type (SPEC 1).
uint64_t row_bytes_32(kvrt_type t) {
    switch (t) {
        case KVRT_TYPE_F32: return 128;
        case KVRT_TYPE_F16: return 64;
        case KVRT_TYPE_Q8_0: return 34;
        case KVRT_TYPE_Q4_0: return 18;
        case KVRT_TYPE_U8_STATIC: return 32;
        default: return 64;  // U16_STATIC
    }
}

// Offset of the first cell record of a sample without static scales.
constexpr size_t kCells = 64;

}  // namespace

TEST_CASE("state format: round trip of the header, cells and rows", "[state]") {
    for (kvrt_type t : {KVRT_TYPE_F32, KVRT_TYPE_F16, KVRT_TYPE_Q8_0, KVRT_TYPE_Q4_0, KVRT_TYPE_U8_STATIC,
                        KVRT_TYPE_U16_STATIC}) {
        for (int32_t seq : {-1, 2}) {
            SampleSpec spec;
            spec.type_k = t;
            spec.type_v = t == KVRT_TYPE_Q4_0 ? KVRT_TYPE_F32 : t;
            spec.head_dim_v = 64;
            spec.seq = seq;
            spec.deferred = seq >= 0;
            const std::vector<uint8_t> b = make_sample_state(spec);
            INFO("type " << int(t) << " seq " << seq);
            REQUIRE(!b.empty());
            state::Plan plan;
            REQUIRE(parse(b, &plan) == KVRT_SUCCESS);
            const state::Header& h = plan.desc.header;
            CHECK(std::memcmp(b.data(), "KVRTSTAT", 8) == 0);
            CHECK(rd32(b, 8) == 1);
            CHECK(h.version == 1);
            CHECK(h.n_layers == 2);
            CHECK(h.n_kv_heads == 2);
            CHECK(h.head_dim_k == 32);
            CHECK(h.head_dim_v == 64);
            CHECK(h.type_k == spec.type_k);
            CHECK(h.type_v == spec.type_v);
            CHECK(h.capacity == 16);
            CHECK(h.max_seqs == 4);
            CHECK(h.n_cells == 5);
            CHECK(h.seq == seq);
            CHECK(bool(h.flags & state::kFlagDeferredRope) == spec.deferred);
            CHECK(plan.desc.k_scales.size() == (kv::is_static_scale(spec.type_k) ? 2u : 0u));
            for (size_t l = 0; l < plan.desc.k_scales.size(); ++l) {
                CHECK(plan.desc.k_scales[l].scale == 0.01f * float(l + 1));
                CHECK(plan.desc.k_scales[l].zero_point == int32_t(7 + l));
            }
            REQUIRE(plan.desc.cells.size() == 5);
            for (uint32_t i = 0; i < 5; ++i) {
                CHECK(plan.desc.cells[i].cell == i * 3);
                CHECK(plan.desc.cells[i].pos == int32_t(3 * i));
                if (seq >= 0) CHECK(plan.desc.seq_ids[plan.desc.cells[i].seq_begin] == seq);
            }
            // Rows: K then V of each layer, back to back, right before the checksum.
            const uint64_t k_row = 2 * row_bytes_32(t);
            CHECK(plan.extents.k_row_bytes == k_row);
            const uint64_t v_row = 2 * 2 * row_bytes_32(spec.type_v);
            CHECK(plan.extents.v_row_bytes == v_row);
            CHECK(plan.v_rows(1) + 5 * v_row == b.data() + b.size() - 8);
            CHECK(plan.k_rows(0) == plan.bytes + plan.extents.data_offset);
            CHECK(plan.v_rows(0) == plan.k_rows(0) + 5 * k_row);
            CHECK(plan.k_rows(1) == plan.v_rows(0) + 5 * v_row);
        }
    }
}

TEST_CASE("state format: an empty cache's state", "[state]") {
    SampleSpec spec;
    spec.n_cells = 0;
    const std::vector<uint8_t> b = make_sample_state(spec);
    REQUIRE(b.size() == 72);
    state::Plan plan;
    REQUIRE(parse(b, &plan) == KVRT_SUCCESS);
    CHECK(plan.desc.cells.empty());
}

TEST_CASE("state format: every truncation is refused", "[state]") {
    for (kvrt_type t : {KVRT_TYPE_F16, KVRT_TYPE_U8_STATIC}) {
        SampleSpec spec;
        spec.type_k = spec.type_v = t;
        spec.head_dim_k = spec.head_dim_v = 8;
        spec.n_cells = 3;
        const std::vector<uint8_t> b = make_sample_state(spec);
        REQUIRE(parse(b) == KVRT_SUCCESS);
        for (size_t n = 0; n < b.size(); ++n) {
            INFO("length " << n << " of " << b.size());
            state::Plan plan;
            CHECK(state::parse(b.data(), n, &plan) == KVRT_ERROR_CORRUPT_STATE);
        }
        // And a byte too many, also with the checksum fixed up.
        std::vector<uint8_t> longer = b;
        longer.insert(longer.end() - 8, 0);
        CHECK(parse(longer) == KVRT_ERROR_CORRUPT_STATE);
        reseal(&longer);
        CHECK(parse(longer) == KVRT_ERROR_CORRUPT_STATE);
        CHECK(std::string(last_error_message()).find("trailing bytes") != std::string::npos);
    }
}

TEST_CASE("state format: every single-bit flip is refused", "[state]") {
    for (int32_t seq : {-1, 1}) {
        SampleSpec spec;
        spec.type_k = KVRT_TYPE_Q8_0;
        spec.type_v = KVRT_TYPE_U16_STATIC;
        spec.n_layers = 1;
        spec.n_kv_heads = 1;
        spec.n_cells = 3;
        spec.seq = seq;
        const std::vector<uint8_t> b = make_sample_state(spec);
        REQUIRE(parse(b) == KVRT_SUCCESS);
        std::vector<uint8_t> m = b;
        for (size_t i = 0; i < b.size() * 8; ++i) {
            m[i / 8] ^= uint8_t(1u << (i % 8));
            const Result r = parse(m);
            INFO("bit " << i % 8 << " of byte " << i / 8 << ": " << last_error_message());
            // A flipped version bit names a newer version; all else is corrupt.
            if (i / 8 >= 8 && i / 8 < 12 && rd32(m, 8) > state::kVersion)
                CHECK(r == KVRT_ERROR_UNSUPPORTED);
            else
                CHECK(r == KVRT_ERROR_CORRUPT_STATE);
            m[i / 8] ^= uint8_t(1u << (i % 8));
        }
    }
}

TEST_CASE("state format: versions", "[state]") {
    std::vector<uint8_t> b = make_sample_state(SampleSpec{});
    // A state of the cell layout is written in version 1, the oldest that
    // holds it, and read.
    REQUIRE(rd32(b, 8) == 1);
    REQUIRE(rd32(b, 44) == KVRT_LAYOUT_CELLS);
    CHECK(parse(b) == KVRT_SUCCESS);
    // Version 2 adds the paged layout (3): read in version 2, corrupt in 1.
    // Version 3 adds the window group's section.
    REQUIRE(state::kVersion == 3);
    state::Header h;
    h.layout = KVRT_LAYOUT_PAGED;
    CHECK(state::version_for(h) == 2);
    h.layout = KVRT_LAYOUT_STATIC;
    CHECK(state::version_for(h) == 1);
    h.flags = state::kFlagWindowGroup;
    CHECK(state::version_for(h) == 3);
    wr32(&b, 44, KVRT_LAYOUT_PAGED);
    reseal(&b);
    CHECK(parse(b) == KVRT_ERROR_CORRUPT_STATE);
    CHECK(std::string(last_error_message()).find("unknown layout 3") != std::string::npos);
    wr32(&b, 8, 2);
    reseal(&b);
    CHECK(parse(b) == KVRT_SUCCESS);
    wr32(&b, 44, KVRT_LAYOUT_CELLS);
    reseal(&b);
    CHECK(parse(b) == KVRT_SUCCESS);
    wr32(&b, 44, 4);
    reseal(&b);
    CHECK(parse(b) == KVRT_ERROR_CORRUPT_STATE);
    wr32(&b, 44, KVRT_LAYOUT_CELLS);
    wr32(&b, 8, 3);
    reseal(&b);
    CHECK(parse(b) == KVRT_SUCCESS);
    for (uint32_t v : {4u, 0xFFFFFFFFu}) {
        wr32(&b, 8, v);
        reseal(&b);
        CHECK(parse(b) == KVRT_ERROR_UNSUPPORTED);
        CHECK(std::string(last_error_message()).find("newer") != std::string::npos);
    }
    wr32(&b, 8, 0);
    reseal(&b);
    CHECK(parse(b) == KVRT_ERROR_CORRUPT_STATE);
}

TEST_CASE("state format: malformed fields behind a valid checksum", "[state]") {
    const std::vector<uint8_t> good = make_sample_state(SampleSpec{});
    REQUIRE(parse(good) == KVRT_SUCCESS);
    struct Case {
        const char* what;
        size_t at;
        uint32_t value;
    };
    const Case cases[] = {
        {"magic", 0, 0x4B565254u},  // "TRVK"
        {"header size", 12, 65},
        {"unknown flag", 16, 0x4},
        {"zero layers", 20, 0},
        {"zero heads", 24, 0},
        {"zero head dim", 28, 0},
        {"unknown K type", 36, 99},
        {"undefined V type", 40, 0},
        {"unknown layout", 44, 7},
        {"zero capacity", 48, 0},
        {"zero max_seqs", 52, 0},
        {"huge max_seqs", 52, 0x80000000u},
        {"more cells than capacity", 56, 17},
        {"seq in a whole-cache state", 60, 0},
        {"cell out of range", kCells, 16},
        {"negative position", kCells + 4, 0xFFFFFFFFu},
        {"no sequence", kCells + 8, 0},
        {"sequence out of range", kCells + 12, 4},
        {"negative sequence", kCells + 12, 0xFFFFFFFFu},
        {"repeated sequence", kCells + 16, 0},
        {"cells not ascending", kCells + 20, 0},
    };
    for (const Case& c : cases) {
        std::vector<uint8_t> b = good;
        wr32(&b, c.at, c.value);
        reseal(&b);
        INFO(c.what);
        CHECK(parse(b) == KVRT_ERROR_CORRUPT_STATE);
    }
    {
        // The second cell (sequence 1, position 3) moved onto position 0 of
        // the first cell's second sequence: one (sequence, position) pair in
        // two cells, as a token tree's siblings or seq_div leave it. Valid.
        std::vector<uint8_t> b = good;
        wr32(&b, kCells + 24, 0);
        reseal(&b);
        CHECK(parse(b) == KVRT_SUCCESS);
    }
    // A head dim that quantized blocks cannot hold.
    SampleSpec q;
    q.type_k = KVRT_TYPE_Q4_0;
    std::vector<uint8_t> b = make_sample_state(q);
    wr32(&b, 28, 48);
    reseal(&b);
    CHECK(parse(b) == KVRT_ERROR_CORRUPT_STATE);
    // A sequence state whose cell names another sequence.
    SampleSpec s;
    s.seq = 2;
    b = make_sample_state(s);
    REQUIRE(parse(b) == KVRT_SUCCESS);
    wr32(&b, kCells + 12, 1);
    reseal(&b);
    CHECK(parse(b) == KVRT_ERROR_CORRUPT_STATE);
    // Static scales: zero, NaN, infinite, subnormal, and a zero point out of range.
    SampleSpec u;
    u.type_k = KVRT_TYPE_U8_STATIC;
    const std::vector<uint8_t> ugood = make_sample_state(u);
    REQUIRE(parse(ugood) == KVRT_SUCCESS);
    for (uint32_t bits : {0u, 0x7FC00000u, 0x7F800000u, 0x00000001u, 0xBF800000u}) {
        b = ugood;
        wr32(&b, 64, bits);
        reseal(&b);
        CHECK(parse(b) == KVRT_ERROR_CORRUPT_STATE);
    }
    b = ugood;
    wr32(&b, 68, 256);
    reseal(&b);
    CHECK(parse(b) == KVRT_ERROR_CORRUPT_STATE);
}

TEST_CASE("state format: lengths are checked before anything is allocated", "[state]") {
    // Counts that would need gigabytes, in a state of a few dozen bytes: each
    // is refused from the bytes that remain, without trying to allocate.
    std::vector<uint8_t> b = make_sample_state(SampleSpec{});
    for (size_t at : {size_t(48), size_t(56)}) wr32(&b, at, 0xFFFFFFF0u);  // capacity, n_cells
    reseal(&b);
    CHECK(parse(b) == KVRT_ERROR_CORRUPT_STATE);
    CHECK(std::string(last_error_message()).find("truncated") != std::string::npos);
    SampleSpec u;
    u.type_k = KVRT_TYPE_U16_STATIC;
    b = make_sample_state(u);
    wr32(&b, 20, 0x40000000u);  // layers: their scales alone would be 8 GiB
    reseal(&b);
    CHECK(parse(b) == KVRT_ERROR_CORRUPT_STATE);
    // A cell with max_seqs ids where the bytes hold fewer.
    b = make_sample_state(SampleSpec{});
    wr32(&b, 52, 0x7FFFFFFFu);
    wr32(&b, kCells + 8, 0x7FFFFFFFu);
    reseal(&b);
    CHECK(parse(b) == KVRT_ERROR_CORRUPT_STATE);
    // The rows' size overflowing 64 bits.
    b = make_sample_state(SampleSpec{});
    wr32(&b, 20, 0xFFFFFFFFu);
    wr32(&b, 24, 0xFFFFFFFFu);
    wr32(&b, 28, 0xFFFFFFFFu);
    wr32(&b, 36, KVRT_TYPE_F32);
    reseal(&b);
    CHECK(parse(b) == KVRT_ERROR_CORRUPT_STATE);
}

TEST_CASE("state format: NULL arguments", "[state]") {
    state::Plan plan;
    CHECK(state::parse(nullptr, 10, &plan) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(state::parse(nullptr, 0, &plan) == KVRT_ERROR_CORRUPT_STATE);
    const std::vector<uint8_t> b = make_sample_state(SampleSpec{});
    CHECK(state::parse(b.data(), b.size(), nullptr) == KVRT_ERROR_INVALID_ARGUMENT);
}

TEST_CASE("state format: the window group's section", "[state]") {
    SampleSpec spec;
    spec.window_group = true;
    spec.n_layers = 3;
    spec.n_cells = 5;
    std::vector<uint8_t> b = make_sample_state(spec);
    REQUIRE(rd32(b, 8) == 3);
    state::Plan plan;
    REQUIRE(parse(b, &plan) == KVRT_SUCCESS);
    const state::Description& d = plan.desc;
    CHECK(d.windowed == std::vector<uint8_t>{1, 0, 0});
    REQUIRE(d.group.size() == 3);  // cells 0, 2 and 4
    CHECK(d.group[1].record == 2);
    // Layer 0 has the group's 3 rows, the others every cell's 5.
    const state::Extents& e = plan.extents;
    const uint64_t row = e.k_row_bytes + e.v_row_bytes;
    CHECK(e.rows(0, 5) == 3);
    CHECK(e.rows(1, 5) == 5);
    CHECK(e.k_offset(1) == e.data_offset + 3 * row);
    CHECK(e.k_offset(2) == e.data_offset + 8 * row);
    CHECK(e.checksum_offset == e.data_offset + 13 * row);
    CHECK(e.total == b.size());

    // Each field of the section, broken behind a valid checksum. The
    // section follows the cell records: the mask, the count, then records
    // of (record, n_seq, ids).
    const size_t mask_at = size_t(e.data_offset) - (4 + 4 + 3 * 12);
    struct Case {
        const char* what;
        size_t at;
        uint32_t value;
        const char* message;
    };
    const Case cases[] = {
        {"no windowed layer", mask_at, 0, "without windowed layers"},
        {"a layer past n_layers", mask_at, 0x9, "windowed layer 3"},
        {"more records than cells", mask_at + 4, 6, "group records for 5 cells"},
        {"a record out of range", mask_at + 8, 5, "out of range"},
        {"records not ascending", mask_at + 8 + 12, 0, "does not ascend"},
        {"no sequence", mask_at + 12, 0, "lists 0 sequences"},
        {"a sequence of another cell", mask_at + 16, 3, "not its cell's"},
    };
    for (const Case& c : cases) {
        INFO(c.what);
        std::vector<uint8_t> m = b;
        wr32(&m, c.at, c.value);
        reseal(&m);
        CHECK(parse(m) == KVRT_ERROR_CORRUPT_STATE);
        CHECK(std::string(last_error_message()).find(c.message) != std::string::npos);
    }
    // The flag needs version 3.
    std::vector<uint8_t> m = b;
    wr32(&m, 8, 2);
    reseal(&m);
    CHECK(parse(m) == KVRT_ERROR_CORRUPT_STATE);
    CHECK(std::string(last_error_message()).find("version 3") != std::string::npos);
    // Every truncation is refused.
    for (size_t n = 0; n < b.size(); ++n) {
        const std::vector<uint8_t> t(b.begin(), b.begin() + static_cast<ptrdiff_t>(n));
        CHECK(parse(t) == KVRT_ERROR_CORRUPT_STATE);
    }
}
