// Unit tests of kv::CellTable: focused tests of each operation's edge cases and
// llama.cpp semantics, then a seeded model check against a plain reference.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "kv/cell_table.hpp"
#include "kv/compaction.hpp"

using kvrt::kv::CellMove;
using kvrt::kv::CellTable;
using kvrt::kv::Placement;
using kvrt::kv::Token;

namespace {

// Everything observable about a table, to prove that a call changed nothing.
struct Snapshot {
    std::vector<int32_t> pos;
    std::vector<int32_t> delta;
    std::vector<uint64_t> words;
    std::vector<int32_t> pos_min;
    std::vector<int32_t> pos_max;
    std::vector<uint32_t> counts;
    uint32_t used = 0;
    uint32_t used_end = 0;
    uint32_t head = 0;
    uint32_t shifted = 0;
    uint64_t revision = 0;

    bool same_state(const Snapshot& o) const {
        return pos == o.pos && delta == o.delta && words == o.words && pos_min == o.pos_min &&
               pos_max == o.pos_max && counts == o.counts && used == o.used && used_end == o.used_end &&
               head == o.head && shifted == o.shifted;
    }
    bool identical(const Snapshot& o) const { return same_state(o) && revision == o.revision; }
};

Snapshot snapshot(const CellTable& t) {
    Snapshot s;
    const uint32_t cap = t.capacity();
    s.pos.assign(t.positions(), t.positions() + cap);
    s.delta.assign(t.deltas(), t.deltas() + cap);
    s.words.assign(t.seq_words(), t.seq_words() + size_t(cap) * t.words_per_cell());
    const uint32_t n = t.max_seqs();
    s.pos_min.resize(n);
    s.pos_max.resize(n);
    s.counts.resize(n);
    for (uint32_t q = 0; q < n; ++q) {
        s.pos_min[q] = t.seq_pos_min(int32_t(q));
        s.pos_max[q] = t.seq_pos_max(int32_t(q));
        s.counts[q] = t.seq_cell_count(int32_t(q));
    }
    s.used = t.used();
    s.used_end = t.used_end();
    s.head = t.head();
    s.shifted = t.shifted_cell_count();
    s.revision = t.revision();
    return s;
}

// Places tokens at positions [p0, p0 + n), each in all of `seqs`.
kvrt::Result place(CellTable& t, std::vector<int32_t> seqs, int32_t p0, uint32_t n,
                   std::vector<uint32_t>* cells = nullptr) {
    std::vector<Token> tokens(n);
    for (uint32_t i = 0; i < n; ++i) tokens[i] = Token{p0 + int32_t(i), seqs.data(), uint32_t(seqs.size())};
    Placement p;
    KVRT_TRY(t.plan(tokens.data(), n, &p));
    KVRT_TRY(t.apply(p));
    if (cells != nullptr) *cells = p.cells();
    return KVRT_SUCCESS;
}

std::vector<uint32_t> iota_cells(uint32_t first, uint32_t n) {
    std::vector<uint32_t> v(n);
    for (uint32_t i = 0; i < n; ++i) v[i] = first + i;
    return v;
}

std::vector<uint32_t> cells_of(const CellTable& t, int32_t seq) {
    std::vector<uint32_t> v;
    REQUIRE(t.cells_of_seq(seq, &v) == KVRT_SUCCESS);
    return v;
}

}  // namespace

TEST_CASE("CellTable init validates its arguments", "[kv][cell_table]") {
    CellTable t;
    Placement p;
    CHECK(t.plan(nullptr, 0, &p) == KVRT_ERROR_INVALID_STATE);
    CHECK(t.init(0, 1) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(t.init(1, 0) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(t.init(UINT32_MAX, 1) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(t.init(1, UINT32_MAX) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(t.capacity() == 0);

    REQUIRE(t.init(1, 1) == KVRT_SUCCESS);
    CHECK(t.capacity() == 1);
    CHECK(t.words_per_cell() == 1);
    CHECK(t.used() == 0);
    CHECK(t.n_attend() == 0);
    REQUIRE(place(t, {0}, 0, 1) == KVRT_SUCCESS);
    CHECK(place(t, {0}, 1, 1) == KVRT_ERROR_CACHE_FULL);

    // A failed re-init keeps the old contents.
    CHECK(t.init(0, 4) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(t.used() == 1);
    REQUIRE(t.init(256, 256) == KVRT_SUCCESS);
    CHECK(t.used() == 0);
    CHECK(t.words_per_cell() == 4);
    CHECK(t.verify() == KVRT_SUCCESS);
}

TEST_CASE("Placement takes a contiguous first fit from the rotating head", "[kv][cell_table]") {
    CellTable t;
    REQUIRE(t.init(64, 4) == KVRT_SUCCESS);
    std::vector<uint32_t> cells;
    REQUIRE(place(t, {0}, 0, 10, &cells) == KVRT_SUCCESS);
    CHECK(cells == iota_cells(0, 10));
    CHECK(t.head() == 10);
    REQUIRE(place(t, {1}, 0, 5, &cells) == KVRT_SUCCESS);
    CHECK(cells == iota_cells(10, 5));

    // Freed cells below the head pull it back (llama.cpp's seq_rm does too).
    REQUIRE(t.seq_rm(0, 2, 5) == KVRT_SUCCESS);
    CHECK(t.head() == 2);
    REQUIRE(place(t, {2}, 0, 3, &cells) == KVRT_SUCCESS);
    CHECK(cells == iota_cells(2, 3));
    REQUIRE(place(t, {2}, 3, 4, &cells) == KVRT_SUCCESS);
    CHECK(cells == iota_cells(15, 4));
    CHECK(t.used() == 19);
    CHECK(t.used_end() == 19);
    CHECK(t.verify() == KVRT_SUCCESS);
}

TEST_CASE("Placement wraps to runs below the head, then scatters", "[kv][cell_table]") {
    CellTable t;
    REQUIRE(t.init(11, 4) == KVRT_SUCCESS);
    std::vector<uint32_t> cells;
    REQUIRE(place(t, {0}, 0, 2) == KVRT_SUCCESS);         // cells 0-1
    REQUIRE(place(t, {1}, 0, 5) == KVRT_SUCCESS);         // cells 2-6
    REQUIRE(t.seq_rm(0, -1, -1) == KVRT_SUCCESS);         // holes 0-1
    REQUIRE(place(t, {2}, 0, 3, &cells) == KVRT_SUCCESS);  // the hole is too small
    CHECK(cells == iota_cells(7, 3));
    CHECK(t.head() == 10);
    Placement p;
    const int32_t s3 = 3;
    Token two[2] = {{0, &s3, 1}, {1, &s3, 1}};
    REQUIRE(t.plan(two, 2, &p) == KVRT_SUCCESS);  // cell 10 alone is too small: wrap
    CHECK(p.contiguous());
    CHECK(p.cells() == iota_cells(0, 2));
    REQUIRE(t.apply(p) == KVRT_SUCCESS);

    // Only single holes left: scattered over the lowest empty cells.
    REQUIRE(t.verify() == KVRT_SUCCESS);
    REQUIRE(t.seq_rm(1, 1, 2) == KVRT_SUCCESS);  // cell 3
    REQUIRE(t.seq_rm(1, 3, 4) == KVRT_SUCCESS);  // cell 5
    CHECK(t.used() == 8);
    Token three[3] = {{2, &s3, 1}, {3, &s3, 1}, {4, &s3, 1}};
    REQUIRE(t.plan(three, 3, &p) == KVRT_SUCCESS);
    CHECK_FALSE(p.contiguous());
    CHECK(p.cells() == std::vector<uint32_t>{3, 5, 10});
    REQUIRE(t.apply(p) == KVRT_SUCCESS);
    CHECK(t.used() == 11);
    CHECK(t.seq_pos_max(3) == 4);
    CHECK(t.cell_pos(10) == 4);
    CHECK(t.verify() == KVRT_SUCCESS);
}

TEST_CASE("Placement finds a run that starts below the head and ends above it", "[kv][cell_table]") {
    CellTable t;
    REQUIRE(t.init(10, 4) == KVRT_SUCCESS);
    REQUIRE(place(t, {0}, 0, 3) == KVRT_SUCCESS);  // cells 0-2
    REQUIRE(t.seq_rm(0, 1, 2) == KVRT_SUCCESS);    // hole 1, head 1
    std::vector<uint32_t> cells;
    REQUIRE(place(t, {1}, 0, 3, &cells) == KVRT_SUCCESS);
    CHECK(cells == iota_cells(3, 3));
    REQUIRE(place(t, {2}, 0, 3, &cells) == KVRT_SUCCESS);
    CHECK(cells == iota_cells(6, 3));
    CHECK(t.head() == 9);
    REQUIRE(t.seq_rm(0, 2, 3) == KVRT_SUCCESS);  // cell 2: holes 1-2 and 9, head 2
    CHECK(t.head() == 2);
    const int32_t s3 = 3;
    const Token two[2] = {{0, &s3, 1}, {1, &s3, 1}};
    Placement p;
    REQUIRE(t.plan(two, 2, &p) == KVRT_SUCCESS);
    CHECK(p.contiguous());
    CHECK(p.cells() == iota_cells(1, 2));
}

TEST_CASE("Placement rejects bad batches and changes nothing", "[kv][cell_table]") {
    CellTable t;
    REQUIRE(t.init(32, 4) == KVRT_SUCCESS);
    REQUIRE(place(t, {0, 1}, 0, 4) == KVRT_SUCCESS);
    const Snapshot before = snapshot(t);
    Placement p;
    const int32_t s0 = 0, s4 = 4, sneg = -1;
    const int32_t dup[2] = {2, 2};
    const int32_t pair[2] = {2, 3};

    auto rejects = [&](std::vector<Token> tokens, kvrt::Result expected) {
        CHECK(t.plan(tokens.data(), uint32_t(tokens.size()), &p) == expected);
        CHECK_FALSE(p.planned());
        CHECK(snapshot(t).identical(before));
    };
    rejects({{-1, &s0, 1}}, KVRT_ERROR_INVALID_ARGUMENT);             // negative position
    rejects({{5, &s0, 0}}, KVRT_ERROR_INVALID_ARGUMENT);              // no sequence
    rejects({{5, nullptr, 1}}, KVRT_ERROR_INVALID_ARGUMENT);          // NULL ids
    rejects({{5, &s4, 1}}, KVRT_ERROR_INVALID_ARGUMENT);              // id == max_seqs
    rejects({{5, &sneg, 1}}, KVRT_ERROR_INVALID_ARGUMENT);            // negative id
    rejects({{5, dup, 2}}, KVRT_ERROR_INVALID_ARGUMENT);              // id twice in a token
    rejects({{3, &s0, 1}}, KVRT_ERROR_INVALID_ARGUMENT);              // (0, 3) exists
    rejects({{6, pair, 2}, {6, &pair[1], 1}}, KVRT_ERROR_INVALID_ARGUMENT);  // (3, 6) twice
    CHECK(t.plan(nullptr, 1, &p) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(t.plan(nullptr, 0, nullptr) == KVRT_ERROR_INVALID_ARGUMENT);

    // Full: 28 cells are empty.
    std::vector<Token> big(29, Token{0, &s4, 1});
    for (uint32_t i = 0; i < big.size(); ++i) big[i] = Token{100 + int32_t(i), &pair[0], 1};
    rejects(big, KVRT_ERROR_CACHE_FULL);
    CHECK(std::string(kvrt::last_error_message()).find("29") != std::string::npos);
    CHECK(std::string(kvrt::last_error_message()).find("28") != std::string::npos);
    big.pop_back();
    CHECK(t.plan(big.data(), uint32_t(big.size()), &p) == KVRT_SUCCESS);

    // An empty batch is a valid no-op plan.
    CHECK(t.plan(nullptr, 0, &p) == KVRT_SUCCESS);
    CHECK(p.size() == 0);
    // A failed plan clears a previous plan in the same object.
    rejects({{-3, &s0, 1}}, KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(t.apply(p) == KVRT_ERROR_INVALID_STATE);
}

TEST_CASE("Rollback restores the exact prior state", "[kv][cell_table]") {
    CellTable t;
    REQUIRE(t.init(48, 8) == KVRT_SUCCESS);
    REQUIRE(place(t, {0, 1}, 0, 6) == KVRT_SUCCESS);
    REQUIRE(place(t, {2}, 0, 6) == KVRT_SUCCESS);
    REQUIRE(t.seq_rm(2, 1, 3) == KVRT_SUCCESS);
    REQUIRE(t.seq_add(0, 3, -1, 2) == KVRT_SUCCESS);
    const Snapshot before = snapshot(t);

    const int32_t ids[3] = {1, 3, 7};
    std::vector<Token> tokens;
    for (int32_t i = 0; i < 5; ++i) tokens.push_back(Token{20 + i, ids, 3});
    Placement p;
    REQUIRE(t.plan(tokens.data(), 5, &p) == KVRT_SUCCESS);
    CHECK(p.planned());
    REQUIRE(t.apply(p) == KVRT_SUCCESS);
    CHECK(p.applied());
    CHECK(t.seq_pos_max(3) == 24);
    CHECK(t.apply(p) == KVRT_ERROR_INVALID_STATE);  // applied twice
    REQUIRE(t.rollback(p) == KVRT_SUCCESS);
    CHECK(snapshot(t).same_state(before));
    CHECK(t.verify() == KVRT_SUCCESS);
    CHECK(t.rollback(p) == KVRT_ERROR_INVALID_STATE);  // rolled back twice
    CHECK(t.apply(p) == KVRT_ERROR_INVALID_STATE);     // must be planned again

    // The same positions can be placed again (the index holds no leftovers).
    REQUIRE(t.plan(tokens.data(), 5, &p) == KVRT_SUCCESS);
    REQUIRE(t.apply(p) == KVRT_SUCCESS);

    // Only the most recent change can be rolled back.
    REQUIRE(t.seq_rm(0, 0, 1) == KVRT_SUCCESS);
    const Snapshot after_rm = snapshot(t);
    CHECK(t.rollback(p) == KVRT_ERROR_INVALID_STATE);
    CHECK(snapshot(t).identical(after_rm));

    // A plan goes stale when the table changes before apply().
    Placement q;
    const int32_t s5 = 5;
    const Token one{0, &s5, 1};
    REQUIRE(t.plan(&one, 1, &q) == KVRT_SUCCESS);
    REQUIRE(t.seq_rm(-1, 0, 1) == KVRT_SUCCESS);
    const Snapshot after_rm2 = snapshot(t);
    CHECK(t.apply(q) == KVRT_ERROR_INVALID_STATE);
    CHECK(snapshot(t).identical(after_rm2));

    // A plan made on one table is refused by another with the same contents.
    CellTable other;
    REQUIRE(other.init(48, 8) == KVRT_SUCCESS);
    REQUIRE(t.plan(&one, 1, &q) == KVRT_SUCCESS);
    CHECK(other.apply(q) == KVRT_ERROR_INVALID_STATE);
    CHECK(other.used() == 0);
}

TEST_CASE("seq_rm drops positions and frees unshared cells", "[kv][cell_table]") {
    CellTable t;
    REQUIRE(t.init(16, 4) == KVRT_SUCCESS);
    REQUIRE(place(t, {0, 1}, 0, 4) == KVRT_SUCCESS);  // cells 0-3, shared
    REQUIRE(place(t, {0}, 4, 4) == KVRT_SUCCESS);     // cells 4-7
    const Snapshot start = snapshot(t);

    // Reversed range and bad ids: errors, nothing changed.
    CHECK(t.seq_rm(0, 5, 2) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(t.seq_rm(4, -1, -1) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(snapshot(t).identical(start));
    // Empty range, empty sequence: no-ops that keep the revision.
    CHECK(t.seq_rm(0, 3, 3) == KVRT_SUCCESS);
    CHECK(t.seq_rm(2, -1, -1) == KVRT_SUCCESS);
    CHECK(snapshot(t).identical(start));

    // A shared cell stays while another sequence uses it.
    REQUIRE(t.seq_rm(0, -1, 2) == KVRT_SUCCESS);  // p0 < 0 = from 0
    CHECK(t.used() == 8);
    CHECK_FALSE(t.cell_has_seq(0, 0));
    CHECK(t.cell_has_seq(0, 1));
    CHECK(t.seq_pos_min(0) == 2);
    REQUIRE(t.seq_rm(0, 6, -1) == KVRT_SUCCESS);  // p1 < 0 = to infinity
    CHECK(t.used() == 6);
    CHECK(t.cell_is_empty(6));
    CHECK(t.cell_is_empty(7));
    CHECK(t.used_end() == 6);
    CHECK(t.seq_pos_max(0) == 5);

    REQUIRE(t.seq_rm(1, 0, 1) == KVRT_SUCCESS);
    CHECK(t.cell_is_empty(0));
    CHECK(t.cell_pos(0) == -1);
    CHECK(t.head() == 0);

    // seq < 0: every sequence in the range.
    REQUIRE(t.seq_rm(-1, 2, 5) == KVRT_SUCCESS);
    CHECK(cells_of(t, 0) == std::vector<uint32_t>{5});
    CHECK(cells_of(t, 1) == std::vector<uint32_t>{1});
    CHECK(t.used() == 2);
    REQUIRE(t.seq_rm(-7, -1, -1) == KVRT_SUCCESS);
    CHECK(t.used() == 0);
    CHECK(t.used_end() == 0);
    CHECK(t.seq_pos_min(0) == -1);
    CHECK(t.seq_pos_max(1) == -1);
    CHECK(t.verify() == KVRT_SUCCESS);
}

TEST_CASE("seq_cp shares cells and seq_keep drops the others", "[kv][cell_table]") {
    CellTable t;
    REQUIRE(t.init(16, 4) == KVRT_SUCCESS);
    REQUIRE(place(t, {0}, 0, 6) == KVRT_SUCCESS);
    REQUIRE(t.seq_cp(0, 1, 2, 4) == KVRT_SUCCESS);
    CHECK(t.used() == 6);
    CHECK(cells_of(t, 1) == std::vector<uint32_t>{2, 3});
    CHECK(t.seq_pos_min(1) == 2);
    CHECK(t.seq_pos_max(1) == 3);
    const Snapshot s = snapshot(t);
    CHECK(t.seq_cp(0, 0, -1, -1) == KVRT_SUCCESS);  // src == dst
    CHECK(t.seq_cp(0, 1, 2, 4) == KVRT_SUCCESS);    // already shared
    CHECK(t.seq_cp(3, 2, -1, -1) == KVRT_SUCCESS);  // empty source
    CHECK(snapshot(t).identical(s));
    CHECK(t.seq_cp(0, 4, -1, -1) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(t.seq_cp(-1, 1, -1, -1) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(t.seq_cp(0, 1, 4, 2) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(snapshot(t).identical(s));

    // (1, 2) exists now; (1, 4) does not.
    const int32_t s1 = 1;
    Placement p;
    const Token bad{2, &s1, 1};
    const Token good{4, &s1, 1};
    CHECK(t.plan(&bad, 1, &p) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(t.plan(&good, 1, &p) == KVRT_SUCCESS);

    REQUIRE(t.seq_cp(0, 2, -1, -1) == KVRT_SUCCESS);
    REQUIRE(t.seq_rm(0, -1, -1) == KVRT_SUCCESS);
    CHECK(t.used() == 6);  // seq 2 holds them all
    REQUIRE(t.seq_keep(1) == KVRT_SUCCESS);
    CHECK(t.used() == 2);
    CHECK(cells_of(t, 1) == std::vector<uint32_t>{2, 3});
    CHECK(t.seq_cell_count(2) == 0);
    CHECK_FALSE(t.cell_has_seq(2, 2));
    CHECK(t.seq_words()[2] == 0b10u);
    CHECK(t.seq_keep(-1) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(t.seq_keep(4) == KVRT_ERROR_INVALID_ARGUMENT);
    REQUIRE(t.seq_keep(3) == KVRT_SUCCESS);  // a sequence with no cell: all go
    CHECK(t.used() == 0);
    CHECK(t.verify() == KVRT_SUCCESS);
}

TEST_CASE("seq_add moves cells for all their sequences and records deltas", "[kv][cell_table]") {
    CellTable t;
    REQUIRE(t.init(16, 4) == KVRT_SUCCESS);
    REQUIRE(place(t, {0, 1}, 0, 4) == KVRT_SUCCESS);  // cells 0-3
    REQUIRE(place(t, {0}, 4, 2) == KVRT_SUCCESS);     // cells 4-5
    CHECK_FALSE(t.has_pending_shift());

    REQUIRE(t.seq_add(0, 2, -1, 10) == KVRT_SUCCESS);
    const std::vector<int32_t> pos(t.positions(), t.positions() + 6);
    CHECK(pos == std::vector<int32_t>{0, 1, 12, 13, 14, 15});
    const std::vector<int32_t> delta(t.deltas(), t.deltas() + 6);
    CHECK(delta == std::vector<int32_t>{0, 0, 10, 10, 10, 10});
    CHECK(t.seq_pos_max(1) == 13);  // the shared cells moved for seq 1 too
    CHECK(t.has_pending_shift());
    CHECK(t.shifted_cell_count() == 4);

    // A cell pushed below 0 is freed for every sequence.
    REQUIRE(t.seq_add(1, -1, 2, -1) == KVRT_SUCCESS);
    CHECK(t.cell_is_empty(0));
    CHECK(t.cell_delta(0) == 0);
    CHECK(t.cell_pos(1) == 0);
    CHECK(t.cell_delta(1) == -1);
    CHECK(t.seq_pos_min(0) == 0);
    CHECK(t.used() == 5);

    // Overflow past INT32_MAX is refused as a whole.
    const Snapshot s = snapshot(t);
    CHECK(t.seq_add(0, -1, -1, INT32_MAX) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(t.seq_add(0, 5, 1, 3) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(t.seq_add(4, -1, -1, 3) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(t.seq_add(-1, -1, -1, 3) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(t.seq_add(0, -1, -1, 0) == KVRT_SUCCESS);
    CHECK(t.seq_add(2, -1, -1, 5) == KVRT_SUCCESS);  // no cells
    CHECK(t.seq_add(0, 100, 200, 5) == KVRT_SUCCESS);  // no cells in range
    CHECK(snapshot(t).identical(s));
    REQUIRE(t.seq_add(0, 0, 1, INT32_MAX) == KVRT_SUCCESS);  // exactly INT32_MAX is fine
    CHECK(t.seq_pos_max(0) == INT32_MAX);
    CellTable edge;  // the bound itself
    REQUIRE(edge.init(4, 1) == KVRT_SUCCESS);
    REQUIRE(place(edge, {0}, 0, 2) == KVRT_SUCCESS);
    CHECK(edge.seq_add(0, -1, -1, INT32_MAX) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(edge.seq_pos_max(0) == 1);
    CellTable copy = t;  // an unbounded range reaches INT32_MAX
    REQUIRE(copy.seq_rm(-1, 20, -1) == KVRT_SUCCESS);
    CHECK(copy.cell_is_empty(1));
    CHECK(copy.verify() == KVRT_SUCCESS);

    // Shifts that cancel leave nothing pending.
    REQUIRE(t.seq_add(0, 14, 16, -14) == KVRT_SUCCESS);
    REQUIRE(t.seq_add(0, 0, 2, 14) == KVRT_SUCCESS);
    CHECK(t.cell_delta(4) == 10);
    REQUIRE(t.seq_add(0, 14, 16, -10) == KVRT_SUCCESS);
    CHECK(t.cell_delta(4) == 0);
    CHECK(t.cell_delta(5) == 0);
    CHECK(t.shifted_cell_count() == 3);
    t.clear_pending_shifts();
    CHECK_FALSE(t.has_pending_shift());
    CHECK(t.cell_pos(2) == 12);  // positions stay
    CHECK(t.verify() == KVRT_SUCCESS);
}

TEST_CASE("seq_div groups positions and records new - old", "[kv][cell_table]") {
    CellTable t;
    REQUIRE(t.init(16, 2) == KVRT_SUCCESS);
    REQUIRE(place(t, {0}, 0, 10) == KVRT_SUCCESS);
    REQUIRE(t.seq_div(0, 4, 10, 2) == KVRT_SUCCESS);
    const std::vector<int32_t> pos(t.positions(), t.positions() + 10);
    CHECK(pos == std::vector<int32_t>{0, 1, 2, 3, 2, 2, 3, 3, 4, 4});
    const std::vector<int32_t> delta(t.deltas(), t.deltas() + 10);
    CHECK(delta == std::vector<int32_t>{0, 0, 0, 0, -2, -3, -3, -4, -4, -5});
    CHECK(t.seq_cell_count(0) == 10);
    CHECK(t.seq_pos_max(0) == 4);

    const Snapshot s = snapshot(t);
    CHECK(t.seq_div(0, -1, -1, 0) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(t.seq_div(0, -1, -1, -2) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(t.seq_div(2, -1, -1, 2) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(t.seq_div(0, 9, 3, 2) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(t.seq_div(0, -1, -1, 1) == KVRT_SUCCESS);
    CHECK(t.seq_div(0, 0, 1, 7) == KVRT_SUCCESS);  // 0 / 7 == 0: nothing moves
    CHECK(snapshot(t).identical(s));

    // Merged positions: removing position 2 frees all three of its cells.
    REQUIRE(t.seq_rm(0, 2, 3) == KVRT_SUCCESS);
    CHECK(t.used() == 7);
    CHECK(t.cell_is_empty(2));
    CHECK(t.cell_is_empty(4));
    CHECK(t.cell_is_empty(5));
    REQUIRE(t.seq_rm(0, 4, 5) == KVRT_SUCCESS);
    CHECK(t.seq_pos_max(0) == 3);
    CHECK(t.used_end() == 8);
    CHECK(t.verify() == KVRT_SUCCESS);
}

TEST_CASE("The context-shift recipe of SPEC section 2", "[kv][cell_table]") {
    CellTable t;
    REQUIRE(t.init(32, 1) == KVRT_SUCCESS);
    REQUIRE(place(t, {0}, 0, 32) == KVRT_SUCCESS);
    CHECK(place(t, {0}, 32, 1) == KVRT_ERROR_CACHE_FULL);
    const int32_t n_keep = 4, n_past = 32, n_discard = (n_past - n_keep) / 2;
    REQUIRE(t.seq_rm(0, n_keep, n_keep + n_discard) == KVRT_SUCCESS);
    REQUIRE(t.seq_add(0, n_keep + n_discard, n_past, -n_discard) == KVRT_SUCCESS);
    CHECK(t.used() == 18);
    CHECK(t.seq_pos_min(0) == 0);
    CHECK(t.seq_pos_max(0) == 17);
    CHECK(t.shifted_cell_count() == 14);
    for (uint32_t c = 0; c < 32; ++c) {
        INFO("cell " << c);
        if (c < 4) {
            CHECK(t.cell_pos(c) == int32_t(c));
        } else if (c < 18) {
            CHECK(t.cell_is_empty(c));
        } else {
            CHECK(t.cell_pos(c) == int32_t(c) - n_discard);
            CHECK(t.cell_delta(c) == -n_discard);
        }
    }
    std::vector<uint32_t> cells;
    REQUIRE(place(t, {0}, 18, 14, &cells) == KVRT_SUCCESS);
    CHECK(cells == iota_cells(4, 14));
    CHECK(t.verify() == KVRT_SUCCESS);
}

TEST_CASE("n_attend, fragmentation and the upload layout", "[kv][cell_table]") {
    CellTable t;
    REQUIRE(t.init(100, 130) == KVRT_SUCCESS);
    CHECK(t.words_per_cell() == 3);
    CHECK(t.n_attend() == 0);
    CHECK(t.fragmentation() == 0.0);

    const int32_t ids[3] = {0, 64, 129};
    const Token tok{7, ids, 3};
    Placement p;
    REQUIRE(t.plan(&tok, 1, &p) == KVRT_SUCCESS);
    REQUIRE(t.apply(p) == KVRT_SUCCESS);
    CHECK(t.positions()[0] == 7);
    CHECK(t.seq_words()[0] == 1u);
    CHECK(t.seq_words()[1] == 1u);
    CHECK(t.seq_words()[2] == 2u);
    CHECK(t.cell_has_seq(0, 129));
    CHECK_FALSE(t.cell_has_seq(0, 130));
    CHECK_FALSE(t.cell_has_seq(100, 0));
    const int32_t s130 = 130;
    const Token bad{8, &s130, 1};
    CHECK(t.plan(&bad, 1, &p) == KVRT_ERROR_INVALID_ARGUMENT);

    REQUIRE(place(t, {1}, 0, 4) == KVRT_SUCCESS);  // cells 1-4
    CHECK(t.used_end() == 5);
    CHECK(t.n_attend() == 32);
    CHECK(t.n_attend(256) == 100);  // capped at capacity
    CHECK(t.n_attend(1) == 5);
    CHECK(t.n_attend(0) == 5);
    CHECK(t.n_attend(3) == 6);
    REQUIRE(place(t, {1}, 4, 36) == KVRT_SUCCESS);  // cells 5-40
    CHECK(t.n_attend() == 64);
    REQUIRE(t.seq_rm(1, 0, 10) == KVRT_SUCCESS);  // holes 1-10
    CHECK(t.used() == 31);
    CHECK(t.fragmentation() == Approx(10.0 / 41.0));
    REQUIRE(t.seq_rm(1, 20, -1) == KVRT_SUCCESS);  // cells 21-40 go; end drops to 21
    CHECK(t.used_end() == 21);
    CHECK(t.fragmentation() == Approx(10.0 / 21.0));
    CHECK(t.n_attend() == 32);

    std::vector<uint32_t> v;
    CHECK(t.cells_of_seq(130, &v) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(t.cells_of_seq(1, nullptr) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(cells_of(t, 1) == iota_cells(11, 10));
    t.clear();
    CHECK(t.used() == 0);
    CHECK(t.n_attend() == 0);
    CHECK(t.seq_pos_max(0) == -1);
    CHECK(t.verify() == KVRT_SUCCESS);
}

// ---- Model check ---------------------------------------------------------------

// A REQUIRE for the hot loop: no per-step cost when it holds (Catch's INFO and
// assertion bookkeeping would dominate a debug build), and the step on failure.
#define MODEL_REQUIRE(cond)                                              \
    do {                                                                 \
        if (!(cond)) FAIL("step " << step << " (" << name << "): " #cond); \
    } while (0)

namespace {

// The reference: for each sequence, the (position, cell) pairs it uses, plus the
// pending delta of each cell. Deliberately naive; positions belong to cells.
struct Model {
    uint32_t capacity;
    std::vector<std::set<std::pair<int32_t, uint32_t>>> seqs;
    std::vector<int64_t> delta;

    Model(uint32_t cap, uint32_t n_seqs) : capacity(cap), seqs(n_seqs), delta(cap, 0) {}

    std::vector<int32_t> cell_pos() const {
        std::vector<int32_t> pos(capacity, -1);
        for (const auto& s : seqs)
            for (const auto& e : s) pos[e.second] = e.first;
        return pos;
    }
    uint32_t used() const {
        const std::vector<int32_t> pos = cell_pos();
        return uint32_t(std::count_if(pos.begin(), pos.end(), [](int32_t p) { return p >= 0; }));
    }
    bool has(int32_t seq, int32_t pos) const {
        auto it = seqs[seq].lower_bound({pos, 0u});
        return it != seqs[seq].end() && it->first == pos;
    }
    int64_t pos_max(int32_t seq) const { return seqs[seq].empty() ? -1 : seqs[seq].rbegin()->first; }
    std::vector<std::pair<int32_t, uint32_t>> in_range(int32_t seq, int64_t lo, int64_t hi) const {
        std::vector<std::pair<int32_t, uint32_t>> v;
        if (lo > INT32_MAX) return v;
        for (auto it = seqs[seq].lower_bound({int32_t(lo), 0u}); it != seqs[seq].end() && it->first < hi; ++it)
            v.push_back(*it);
        return v;
    }
    // Gives each listed cell a new position in every sequence (< 0: frees it).
    void move_cells(const std::map<uint32_t, int64_t>& to) {
        const std::vector<int32_t> pos = cell_pos();
        for (const auto& kv : to) {
            for (auto& s : seqs) {
                if (s.count({pos[kv.first], kv.first}) == 0) continue;
                s.erase({pos[kv.first], kv.first});
                if (kv.second >= 0) s.insert({int32_t(kv.second), kv.first});
            }
        }
    }
    void rm(int32_t seq, int64_t lo, int64_t hi) {
        if (seq >= 0) {
            for (const auto& e : in_range(seq, lo, hi)) seqs[seq].erase(e);
            return;
        }
        std::map<uint32_t, int64_t> to;
        const std::vector<int32_t> pos = cell_pos();
        for (uint32_t c = 0; c < capacity; ++c)
            if (pos[c] >= 0 && pos[c] >= lo && pos[c] < hi) to[c] = -1;
        move_cells(to);
    }
    void cp(int32_t src, int32_t dst, int64_t lo, int64_t hi) {
        for (const auto& e : in_range(src, lo, hi)) seqs[dst].insert(e);
    }
    void keep(int32_t seq) {
        for (size_t s = 0; s < seqs.size(); ++s)
            if (int32_t(s) != seq) seqs[s].clear();
    }
    void add(int32_t seq, int64_t lo, int64_t hi, int32_t d) {
        std::map<uint32_t, int64_t> to;
        for (const auto& e : in_range(seq, lo, hi)) {
            to[e.second] = int64_t(e.first) + d;
            delta[e.second] += d;
        }
        move_cells(to);
    }
    void div(int32_t seq, int64_t lo, int64_t hi, int32_t d) {
        std::map<uint32_t, int64_t> to;
        for (const auto& e : in_range(seq, lo, hi)) {
            to[e.second] = e.first / d;
            delta[e.second] += e.first / d - e.first;
        }
        move_cells(to);
    }
    void apply_moves(const std::vector<CellMove>& moves) {
        for (const CellMove& m : moves) {
            const int32_t p = cell_pos()[m.src_cell];
            for (auto& s : seqs)
                if (s.erase({p, m.src_cell}) != 0) s.insert({p, m.dst_cell});
            delta[m.dst_cell] = delta[m.src_cell];
        }
    }
};

// The first disagreement between table and model, or "".
std::string diff(const CellTable& t, const Model& m) {
    static thread_local std::vector<int32_t> pos;  // reused: this runs 100,000 times
    static thread_local std::vector<uint64_t> words;
    pos.assign(m.capacity, -1);
    words.assign(m.capacity, 0);
    for (size_t s = 0; s < m.seqs.size(); ++s) {
        for (const auto& e : m.seqs[s]) {
            if (pos[e.second] >= 0 && pos[e.second] != e.first) return "model: a cell has two positions";
            pos[e.second] = e.first;
            words[e.second] |= uint64_t(1) << s;
        }
    }
    uint32_t used = 0, used_end = 0;
    bool shifted = false;
    const int32_t* t_pos = t.positions();
    const int32_t* t_delta = t.deltas();
    const uint64_t* t_words = t.seq_words();  // one word per cell: max_seqs <= 64 here
    for (uint32_t c = 0; c < m.capacity; ++c) {
        const int64_t want_delta = pos[c] >= 0 ? m.delta[c] : 0;
        if (t_pos[c] != pos[c] || t_words[c] != words[c] || t_delta[c] != want_delta) {
            std::ostringstream os;
            os << "cell " << c << ": pos/words/delta " << t_pos[c] << "/" << t_words[c] << "/" << t_delta[c]
               << ", model " << pos[c] << "/" << words[c] << "/" << want_delta;
            return os.str();
        }
        if (pos[c] >= 0) {
            ++used;
            used_end = c + 1;
            shifted = shifted || want_delta != 0;
        }
    }
    const uint32_t attend = used_end == 0 ? 0 : std::min(m.capacity, (used_end + 31) / 32 * 32);
    const double frag = used_end == 0 ? 0.0 : double(used_end - used) / double(used_end);
    if (t.used() != used || t.used_end() != used_end || t.has_pending_shift() != shifted ||
        t.n_attend() != attend || t.fragmentation() != frag) {
        std::ostringstream os;
        os << "used " << t.used() << "/" << used << ", end " << t.used_end() << "/" << used_end << ", n_attend "
           << t.n_attend() << "/" << attend;
        return os.str();
    }
    for (size_t s = 0; s < m.seqs.size(); ++s) {
        const auto& set = m.seqs[s];
        if (set.empty() && t.seq_cell_count(int32_t(s)) == 0 && t.seq_pos_max(int32_t(s)) == -1) continue;
        const int32_t lo = set.empty() ? -1 : set.begin()->first;
        const int32_t hi = set.empty() ? -1 : set.rbegin()->first;
        if (t.seq_pos_min(int32_t(s)) != lo || t.seq_pos_max(int32_t(s)) != hi ||
            t.seq_cell_count(int32_t(s)) != set.size()) {
            std::ostringstream os;
            os << "seq " << s << ": min/max/count " << t.seq_pos_min(int32_t(s)) << "/" << t.seq_pos_max(int32_t(s))
               << "/" << t.seq_cell_count(int32_t(s)) << ", model " << lo << "/" << hi << "/" << set.size();
            return os.str();
        }
    }
    return "";
}

}  // namespace

TEST_CASE("CellTable agrees with a reference model over 100,000 random operations", "[kv][cell_table][model]") {
    constexpr uint32_t kCap = 150;  // not a power of two: exercises the wrap and the n_attend cap
    constexpr int32_t kSeqs = 64;
    constexpr int kSteps = 100000;
    std::mt19937 rng(0x6b767274u);
    std::map<std::string, int> ok, failed;  // per operation
    // Uniform enough for a test, and cheap in a debug build.
    auto rnd = [&](int64_t lo, int64_t hi) { return lo + int64_t(rng() % uint64_t(hi - lo + 1)); };
    CellTable t;
    REQUIRE(t.init(kCap, kSeqs) == KVRT_SUCCESS);
    Model m(kCap, kSeqs);
    Placement pl;
    std::vector<CellMove> moves;
    std::map<std::string, int> stats;  // what happened how often, to show coverage

    // Mostly a few hot sequences; sometimes an invalid id (valid "all" for seq_rm).
    auto pick_seq = [&](bool may_fail) -> int32_t {
        const int64_t r = rnd(0, 99);
        if (r < 70 || (!may_fail && r < 85)) return int32_t(rnd(0, 7));
        if (r < 97 || !may_fail) return int32_t(rnd(8, kSeqs - 1));
        return r == 97 ? kSeqs : r == 98 ? -1 : INT32_MIN;
    };
    auto norm = [](int32_t p0, int32_t p1, int64_t* lo, int64_t* hi) {
        *lo = std::max(p0, 0);
        *hi = p1 < 0 ? INT64_MAX : p1;
        return !(p0 >= 0 && p1 >= 0 && p1 < p0);
    };

    for (int step = 0; step < kSteps; ++step) {
        // Taken before any call expected to fail or to be rolled back.
        Snapshot before;
        bool have_before = false;
        auto keep_before = [&] { before = snapshot(t), have_before = true; };
        int64_t top = 0;
        for (int32_t s = 0; s < kSeqs; ++s) top = std::max(top, m.pos_max(s));
        int32_t p0 = 0, p1 = 0;
        switch (rnd(0, 9)) {
            case 0: p0 = -1, p1 = -1; break;
            case 1: p0 = -int32_t(rnd(1, 5)), p1 = int32_t(rnd(0, top + 20)); break;
            case 2: p0 = int32_t(rnd(0, top + 20)), p1 = -int32_t(rnd(1, 3)); break;
            case 3: p1 = int32_t(rnd(0, top + 20)), p0 = p1 + int32_t(rnd(1, 40)); break;  // reversed
            default: p0 = int32_t(rnd(0, top + 20)), p1 = p0 + int32_t(rnd(0, 120)); break;
        }
        int64_t lo = 0, hi = 0;
        const bool range_ok = norm(p0, p1, &lo, &hi);
        auto seq_ok = [&](int32_t s) { return s >= 0 && s < kSeqs; };
        const int64_t op = rnd(0, 999);
        kvrt::Result r = KVRT_SUCCESS, want = KVRT_SUCCESS;
        const char* name = "";

        if (op < 400) {
            name = "place";
            const int64_t size_class = rnd(0, 99);
            const uint32_t n = uint32_t(size_class < 70 ? rnd(1, 8) : size_class < 94 ? rnd(9, 40)
                                        : size_class < 97 ? rnd(41, 160) : 0);
            std::vector<std::array<int32_t, 4>> ids(n);  // 1-3 ids, one more for a fault
            std::vector<Token> toks(n);
            std::vector<int64_t> next(kSeqs, -1);  // next unused position per sequence
            for (uint32_t i = 0; i < n; ++i) {
                const uint32_t k = uint32_t(rnd(1, 3));
                for (uint32_t j = 0; j < k;) {
                    const int32_t s = pick_seq(false);
                    if (std::find(ids[i].begin(), ids[i].begin() + j, s) == ids[i].begin() + j) ids[i][j++] = s;
                }
                int64_t pos = 0;
                for (uint32_t j = 0; j < k; ++j) {
                    const int32_t s = ids[i][j];
                    pos = std::max(pos, next[s] >= 0 ? next[s] : m.pos_max(s) + 1);
                }
                if (rnd(0, 99) < 10) pos = rnd(0, top + 10);
                for (uint32_t j = 0; j < k; ++j) next[ids[i][j]] = std::max(next[ids[i][j]], pos + 1);
                toks[i] = Token{int32_t(pos), nullptr, k};
            }
            if (n > 0 && rnd(0, 99) < 8) {  // inject one fault
                const uint32_t i = uint32_t(rnd(0, n - 1));
                switch (rnd(0, 5)) {
                    case 0: toks[i].pos = -int32_t(rnd(1, 100)); break;
                    case 1: toks[i].n_seq = 0; break;
                    case 2: ids[i][0] = rnd(0, 1) ? kSeqs : -1; break;
                    case 3: ids[i][toks[i].n_seq++] = ids[i][0]; break;
                    case 4: if (i > 0) toks[i].pos = toks[i - 1].pos, ids[i] = ids[i - 1], toks[i].n_seq = toks[i - 1].n_seq; break;
                    default: if (!m.seqs[ids[i][0]].empty()) toks[i].pos = m.seqs[ids[i][0]].begin()->first; break;
                }
            }
            // What the model expects.
            std::set<std::pair<int32_t, int32_t>> pairs;
            for (uint32_t i = 0; i < n; ++i) {
                toks[i].seq_ids = ids[i].data();
                if (toks[i].pos < 0 || toks[i].n_seq == 0) want = KVRT_ERROR_INVALID_ARGUMENT;
                for (uint32_t j = 0; j < toks[i].n_seq; ++j) {
                    const int32_t s = ids[i][j];
                    if (!seq_ok(s) || !pairs.insert({s, toks[i].pos}).second || m.has(s, toks[i].pos))
                        want = KVRT_ERROR_INVALID_ARGUMENT;
                }
            }
            const std::vector<int32_t> mpos = m.cell_pos();
            const uint32_t n_free = uint32_t(std::count(mpos.begin(), mpos.end(), -1));
            if (want == KVRT_SUCCESS && n > n_free) want = KVRT_ERROR_CACHE_FULL;
            const bool roll_back = rnd(0, 99) < 12;
            if (want != KVRT_SUCCESS || roll_back) keep_before();
            r = t.plan(toks.data(), n, &pl);
            if (r == KVRT_SUCCESS && want == KVRT_SUCCESS) {
                // The plan: n distinct empty cells; a run when one exists, else the lowest.
                std::vector<uint32_t> lowest;
                bool has_run = n == 0;
                for (uint32_t c = 0, run = 0; c < kCap; ++c) {
                    run = mpos[c] < 0 ? run + 1 : 0;
                    has_run = has_run || run >= n;
                    if (mpos[c] < 0 && lowest.size() < n) lowest.push_back(c);
                }
                MODEL_REQUIRE(pl.size() == n);
                std::set<uint32_t> distinct(pl.cells().begin(), pl.cells().end());
                MODEL_REQUIRE(distinct.size() == n);
                MODEL_REQUIRE(std::all_of(pl.cells().begin(), pl.cells().end(),
                                          [&](uint32_t c) { return mpos[c] == -1; }));
                MODEL_REQUIRE(pl.contiguous() == (has_run || n <= 1));
                if (has_run && n > 0) MODEL_REQUIRE(pl.cells().back() == pl.cells().front() + n - 1);
                if (!has_run) MODEL_REQUIRE(pl.cells() == lowest);
                if (!has_run) stats["scattered"]++;
                MODEL_REQUIRE(t.apply(pl) == KVRT_SUCCESS);
                if (roll_back) {
                    MODEL_REQUIRE(t.rollback(pl) == KVRT_SUCCESS);
                    MODEL_REQUIRE(snapshot(t).same_state(before));
                    stats["rolled back"]++;
                } else {
                    for (uint32_t i = 0; i < n; ++i) {
                        for (uint32_t j = 0; j < toks[i].n_seq; ++j)
                            m.seqs[ids[i][j]].insert({toks[i].pos, pl.cells()[i]});
                        m.delta[pl.cells()[i]] = 0;
                    }
                }
            }
        } else if (op < 550) {
            name = "seq_rm";
            const int32_t s = rnd(0, 19) == 0 ? -1 : pick_seq(true);
            want = s < kSeqs && range_ok ? KVRT_SUCCESS : KVRT_ERROR_INVALID_ARGUMENT;
            if (want != KVRT_SUCCESS) keep_before();
            r = t.seq_rm(s, p0, p1);
            if (r == KVRT_SUCCESS) m.rm(s, lo, hi);
        } else if (op < 650) {
            name = "seq_cp";
            const int32_t src = pick_seq(true), dst = pick_seq(true);
            want = seq_ok(src) && seq_ok(dst) && range_ok ? KVRT_SUCCESS : KVRT_ERROR_INVALID_ARGUMENT;
            if (want != KVRT_SUCCESS) keep_before();
            r = t.seq_cp(src, dst, p0, p1);
            if (r == KVRT_SUCCESS) m.cp(src, dst, lo, hi);
        } else if (op < 670) {
            name = "seq_keep";
            const int32_t s = pick_seq(true);
            want = seq_ok(s) ? KVRT_SUCCESS : KVRT_ERROR_INVALID_ARGUMENT;
            if (want != KVRT_SUCCESS) keep_before();
            r = t.seq_keep(s);
            if (r == KVRT_SUCCESS) m.keep(s);
        } else if (op < 780) {
            name = "seq_add";
            const int32_t s = pick_seq(true);
            const int32_t d = int32_t(rnd(-60, 60));
            want = seq_ok(s) && range_ok ? KVRT_SUCCESS : KVRT_ERROR_INVALID_ARGUMENT;
            const uint32_t used0 = t.used();
            if (want != KVRT_SUCCESS) keep_before();
            r = t.seq_add(s, p0, p1, d);
            if (r == KVRT_SUCCESS) m.add(s, lo, hi, d);
            if (t.used() < used0) stats["freed by seq_add"]++;
        } else if (op < 840) {
            name = "seq_div";
            const int32_t s = pick_seq(true);
            const int32_t d = int32_t(rnd(-1, 5));
            want = seq_ok(s) && range_ok && d > 0 ? KVRT_SUCCESS : KVRT_ERROR_INVALID_ARGUMENT;
            if (want != KVRT_SUCCESS) keep_before();
            r = t.seq_div(s, p0, p1, d);
            if (r == KVRT_SUCCESS && d > 0) m.div(s, lo, hi, d);
        } else if (op < 870) {
            name = "clear_pending_shifts";
            t.clear_pending_shifts();
            std::fill(m.delta.begin(), m.delta.end(), 0);
        } else if (op < 900) {
            name = "compaction";
            const double thresholds[4] = {0.0, 0.05, 0.25, 0.6};
            const double threshold = thresholds[rnd(0, 3)];
            const double frag = t.fragmentation();
            const uint32_t max_moves = uint32_t(rnd(0, 48));
            MODEL_REQUIRE(kvrt::kv::plan_compaction(t, threshold, max_moves, &moves) == KVRT_SUCCESS);
            const bool holes = t.used() < t.used_end();
            MODEL_REQUIRE(moves.empty() == (frag < threshold || !holes || max_moves == 0));
            if (rnd(0, 9) < 8) {  // the device copy succeeded
                MODEL_REQUIRE(t.apply_moves(moves) == KVRT_SUCCESS);
                m.apply_moves(moves);
                if (!moves.empty()) stats["compacted"]++;
            } else if (t.used() > 0 && t.used() < kCap) {  // a bogus list is refused
                const std::vector<CellMove> bad = {{uint32_t(rnd(0, kCap - 1)), uint32_t(rnd(0, kCap - 1))}};
                want = !t.cell_is_empty(bad[0].src_cell) && t.cell_is_empty(bad[0].dst_cell)
                           ? KVRT_SUCCESS : KVRT_ERROR_INVALID_ARGUMENT;
                if (want != KVRT_SUCCESS) keep_before();
                r = t.apply_moves(bad);
                if (r == KVRT_SUCCESS) m.apply_moves(bad);
            }
        } else if (op < 902) {
            name = "clear";
            t.clear();
            m = Model(kCap, kSeqs);
        } else {
            name = "plan only";  // a plan that is never applied changes nothing
            const int32_t s = pick_seq(false);
            const Token tok{int32_t(m.pos_max(s) + 1), &s, 1};
            want = t.used() < kCap ? KVRT_SUCCESS : KVRT_ERROR_CACHE_FULL;
            keep_before();
            r = t.plan(&tok, 1, &pl);
            MODEL_REQUIRE(snapshot(t).identical(before));
        }

        if (r != want) {
            FAIL("step " << step << " (" << name << "): " << kvrt::result_name(r) << ", expected "
                         << kvrt::result_name(want) << ": " << kvrt::last_error_message());
        }
        (r == KVRT_SUCCESS ? ok : failed)[name]++;
        if (r == KVRT_ERROR_CACHE_FULL) stats["cache full"]++;
        if (r != KVRT_SUCCESS) MODEL_REQUIRE((have_before && snapshot(t).identical(before)));
        const std::string d = diff(t, m);
        if (!d.empty()) FAIL("step " << step << " (" << name << "): " << d);
        if (step % 97 == 0 && t.verify() != KVRT_SUCCESS) FAIL("step " << step << ": " << kvrt::last_error_message());
    }
    REQUIRE(t.verify() == KVRT_SUCCESS);

    // The run exercised what it claims to (this seed gives counts far above these).
    for (const char* op : {"place", "seq_rm", "seq_cp", "seq_keep", "seq_add", "seq_div"}) {
        INFO(op << ": " << ok[op] << " ok, " << failed[op] << " failed");
        CHECK(ok[op] > 1000);
        CHECK(failed[op] > 20);
    }
    CHECK(stats["cache full"] > 200);
    CHECK(stats["rolled back"] > 1000);
    CHECK(stats["scattered"] > 100);
    CHECK(stats["freed by seq_add"] > 200);
    CHECK(stats["compacted"] > 200);
    CHECK(ok["clear"] > 50);
}
