// Unit tests of kv::CellTable: focused tests of each operation's edge cases and
// llama.cpp semantics (the model check is in test_cell_table_model.cpp).
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
using kvrt::kv::CellSet;
using kvrt::kv::CellTable;
using kvrt::kv::Placement;
using kvrt::kv::Token;

#include "cell_table_snapshot.hpp"

using namespace cell_table_test;

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

TEST_CASE("Placement restarts from cell 0 when the head ran far past the used cells", "[kv][cell_table]") {
    CellTable t;
    REQUIRE(t.init(64, 2) == KVRT_SUCCESS);
    REQUIRE(place(t, {0}, 0, 40) == KVRT_SUCCESS);
    for (int32_t p = 0; p < 40; p += 2) REQUIRE(t.seq_rm(0, p, p + 1) == KVRT_SUCCESS);  // 20 single holes
    std::vector<uint32_t> cells;
    REQUIRE(place(t, {1}, 0, 2, &cells) == KVRT_SUCCESS);  // no pair below 40
    CHECK(cells == iota_cells(40, 2));
    CHECK(t.head() == 42);
    REQUIRE(place(t, {1}, 2, 1, &cells) == KVRT_SUCCESS);  // 42 > 22 used + 2: from 0
    CHECK(cells == std::vector<uint32_t>{0});
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
    const int32_t five[5] = {0, 1, 2, 3, 0};
    rejects({{5, five, 5}}, KVRT_ERROR_INVALID_ARGUMENT);             // more ids than max_seqs
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

TEST_CASE("remove_seq and restore_seq put a sequence back exactly", "[kv][cell_table]") {
    CellTable t;
    REQUIRE(t.init(64, 8) == KVRT_SUCCESS);
    // Sequence 2 owns cells alone, shares some with 0 (seq_cp), has pending
    // shifts, and holds the highest cell (its removal lowers used_end and
    // the head).
    REQUIRE(place(t, {0}, 0, 10) == KVRT_SUCCESS);
    REQUIRE(place(t, {2}, 0, 6) == KVRT_SUCCESS);
    REQUIRE(place(t, {1}, 0, 4) == KVRT_SUCCESS);
    REQUIRE(t.seq_rm(1, 0, 2) == KVRT_SUCCESS);
    REQUIRE(t.seq_cp(0, 2, 6, 10) == KVRT_SUCCESS);
    REQUIRE(place(t, {2}, 10, 5) == KVRT_SUCCESS);
    REQUIRE(t.seq_add(2, 2, 5, 7) == KVRT_SUCCESS);
    const Snapshot before = snapshot(t);
    const std::vector<uint32_t> cells2 = cells_of(t, 2);
    const uint32_t head = t.head(), used_end = t.used_end();
    const auto epoch = [&](uint32_t c) { return t.cell_is_empty(c) ? 0 : t.cell_epoch(c); };
    std::vector<uint64_t> epochs;
    for (uint32_t c = 0; c < t.capacity(); ++c) epochs.push_back(epoch(c));

    kvrt::kv::SeqRemoval removed;
    REQUIRE(t.remove_seq(2, &removed) == KVRT_SUCCESS);
    CHECK(removed.cells.size() == cells2.size());
    CHECK(t.seq_cell_count(2) == 0);
    CHECK(t.seq_cell_count(0) == 10);  // the shared cells stay with sequence 0
    CHECK(t.used_end() < used_end);
    CHECK(t.head() < head);

    // A load's placement, applied and given back, then the sequence.
    const int32_t s2 = 2;
    std::vector<Token> tokens;
    for (int32_t i = 0; i < 7; ++i) tokens.push_back(Token{100 + i, &s2, 1});
    Placement p;
    REQUIRE(t.plan(tokens.data(), 7, &p) == KVRT_SUCCESS);
    REQUIRE(t.apply(p) == KVRT_SUCCESS);
    REQUIRE(t.rollback(p) == KVRT_SUCCESS);
    t.restore_seq(removed);
    CHECK(snapshot(t).same_state(before));
    CHECK(cells_of(t, 2) == cells2);
    for (uint32_t c = 0; c < t.capacity(); ++c) CHECK(epoch(c) == epochs[c]);
    CHECK(t.verify() == KVRT_SUCCESS);

    uint32_t lo = 0, hi = 0, lo2 = 0, hi2 = 0;
    t.seq_cell_span(2, &lo, &hi);

    // Saved, then changed by mirror_seq (which never narrows a run), then
    // restored with no rollback: the same again, its run included.
    kvrt::kv::SeqRemoval saved;
    REQUIRE(t.save_seq(2, &saved) == KVRT_SUCCESS);
    CHECK(snapshot(t).same_state(before));
    const CellSet moved[2] = {{40, 200, 0}, {41, 201, 0}};
    REQUIRE(t.mirror_seq(2, cells2.data(), 3, moved, 2) == KVRT_SUCCESS);
    CHECK(cells_of(t, 2) != cells2);
    t.restore_seq(saved);
    CHECK(snapshot(t).same_state(before));
    t.seq_cell_span(2, &lo2, &hi2);
    CHECK(lo2 == lo);
    CHECK(hi2 == hi);
    for (uint32_t c = 0; c < t.capacity(); ++c) CHECK(epoch(c) == epochs[c]);
    CHECK(t.verify() == KVRT_SUCCESS);

    // Bad ids change nothing.
    CHECK(t.save_seq(8, &saved) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(t.remove_seq(8, &removed) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(t.remove_seq(-1, &removed) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(snapshot(t).same_state(before));

    // An empty sequence: nothing to put back.
    REQUIRE(t.remove_seq(5, &removed) == KVRT_SUCCESS);
    CHECK(removed.cells.empty());
    t.restore_seq(removed);
    CHECK(snapshot(t).same_state(before));
}

TEST_CASE("restore_seqs puts back sequences whose cells went to each other", "[kv][cell_table]") {
    CellTable t;
    REQUIRE(t.init(32, 4) == KVRT_SUCCESS);
    REQUIRE(place(t, {0}, 0, 6) == KVRT_SUCCESS);
    REQUIRE(place(t, {1}, 0, 6) == KVRT_SUCCESS);
    REQUIRE(place(t, {0, 1}, 6, 2) == KVRT_SUCCESS);
    const Snapshot before = snapshot(t);
    std::vector<kvrt::kv::SeqRemoval> saved(2);
    REQUIRE(t.save_seq(0, &saved[0]) == KVRT_SUCCESS);
    REQUIRE(t.save_seq(1, &saved[1]) == KVRT_SUCCESS);
    // A whole load's edits: both emptied, then sequence 1 in sequence 0's
    // old cells at other positions, sequence 0 in new ones.
    REQUIRE(t.seq_rm(0, -1, -1) == KVRT_SUCCESS);
    REQUIRE(t.seq_rm(1, -1, -1) == KVRT_SUCCESS);
    std::vector<CellSet> one, zero;
    for (uint32_t i = 0; i < 6; ++i) one.push_back({i, int32_t(50 + i), 0});
    for (uint32_t i = 0; i < 3; ++i) zero.push_back({20 + i, int32_t(i), 0});
    REQUIRE(t.mirror_seq(1, nullptr, 0, one.data(), one.size()) == KVRT_SUCCESS);
    REQUIRE(t.mirror_seq(0, nullptr, 0, zero.data(), zero.size()) == KVRT_SUCCESS);
    t.restore_seqs(saved.data(), saved.size());
    CHECK(snapshot(t).same_state(before));
    CHECK(t.verify() == KVRT_SUCCESS);
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

TEST_CASE("cell table: plan at cells the caller chooses", "[cell_table]") {
    CellTable t;
    REQUIRE(t.init(16, 2) == KVRT_SUCCESS);
    const int32_t s0 = 0, s1 = 1;
    Placement p;
    Token two[2] = {{5, &s0, 1}, {6, &s0, 1}};
    const uint32_t at[2] = {9, 10};
    REQUIRE(t.plan(two, 2, &p, at) == KVRT_SUCCESS);
    CHECK(p.contiguous());
    CHECK(p.cells() == std::vector<uint32_t>{9, 10});
    REQUIRE(t.apply(p) == KVRT_SUCCESS);
    CHECK(t.cell_pos(9) == 5);
    CHECK(t.cell_pos(10) == 6);
    CHECK(t.used_end() == 11);
    // Scattered cells; the rollback restores the table exactly.
    const uint32_t apart[2] = {14, 2};
    Token other[2] = {{0, &s1, 1}, {1, &s1, 1}};
    REQUIRE(t.plan(other, 2, &p, apart) == KVRT_SUCCESS);
    CHECK_FALSE(p.contiguous());
    REQUIRE(t.apply(p) == KVRT_SUCCESS);
    CHECK(t.cell_pos(14) == 0);
    CHECK(t.cell_pos(2) == 1);
    REQUIRE(t.rollback(p) == KVRT_SUCCESS);
    CHECK(t.cell_is_empty(14));
    CHECK(t.cell_is_empty(2));
    CHECK(t.used() == 2);
    // A cell in use, out of range or repeated is refused and plans nothing.
    const uint32_t used[2] = {10, 11}, outside[2] = {3, 16}, twice[2] = {4, 4};
    Token next2[2] = {{7, &s0, 1}, {8, &s0, 1}};
    CHECK(t.plan(next2, 2, &p, used) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK_FALSE(p.planned());
    CHECK(t.plan(next2, 2, &p, outside) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(t.plan(next2, 2, &p, twice) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(t.verify() == KVRT_SUCCESS);
}

TEST_CASE("CellTable mirror_seq edits one sequence's cells, checking the whole edit first", "[kv][cell_table]") {
    CellTable t;
    REQUIRE(t.init(16, 4) == KVRT_SUCCESS);
    // Sequence 0 joins cells 0..3 (empty: they take position and shift).
    const CellSet join0[] = {{0, 10, 0}, {1, 11, 0}, {2, 12, 2}, {3, 13, 0}};
    REQUIRE(t.reserve(4) == KVRT_SUCCESS);
    REQUIRE(t.mirror_seq(0, nullptr, 0, join0, 4) == KVRT_SUCCESS);
    CHECK(t.used() == 4);
    CHECK(t.used_end() == 4);
    CHECK(t.seq_cell_count(0) == 4);
    CHECK(t.cell_delta(2) == 2);
    CHECK(t.has_pending_shift());
    // Sequence 1 shares cells 0..1 (same positions).
    const CellSet join1[] = {{0, 10, 0}, {1, 11, 0}};
    REQUIRE(t.reserve(2) == KVRT_SUCCESS);  // the caller reserves before each edit
    REQUIRE(t.mirror_seq(1, nullptr, 0, join1, 2) == KVRT_SUCCESS);
    CHECK(t.cell_has_seq(0, 1));
    CHECK(t.seq_pos_max(1) == 11);
    // Refused, and nothing changes: a shared cell cannot move; an occupied
    // cell cannot take another position; dropping a cell the sequence does
    // not use; a cell given twice; a bad sequence.
    const uint64_t rev = t.revision();
    const CellSet move_shared[] = {{0, 20, 0}};
    CHECK(t.mirror_seq(0, nullptr, 0, move_shared, 1) == KVRT_ERROR_INTERNAL);
    const CellSet other_pos[] = {{3, 99, 0}};
    CHECK(t.mirror_seq(1, nullptr, 0, other_pos, 1) == KVRT_ERROR_INTERNAL);
    const uint32_t not_ours[] = {2};
    CHECK(t.mirror_seq(1, not_ours, 1, nullptr, 0) == KVRT_ERROR_INTERNAL);
    const CellSet twice[] = {{5, 1, 0}, {5, 1, 0}};
    CHECK(t.mirror_seq(2, nullptr, 0, twice, 2) == KVRT_ERROR_INTERNAL);
    CHECK(t.mirror_seq(4, nullptr, 0, join1, 2) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(t.revision() == rev);
    CHECK(t.verify() == KVRT_SUCCESS);
    // A copy: sequence 1 leaves cells 0..1 for 4..5 (a dropped cell freed by
    // the same edit may be joined again); sequence 0 moves its own cell 3.
    const uint32_t leave[] = {0, 1};
    const CellSet copy[] = {{4, 10, 0}, {5, 11, 0}};
    REQUIRE(t.reserve(2) == KVRT_SUCCESS);
    REQUIRE(t.mirror_seq(1, leave, 2, copy, 2) == KVRT_SUCCESS);
    CHECK(!t.cell_has_seq(0, 1));
    CHECK(t.cell_has_seq(0, 0));
    CHECK(t.cell_has_seq(5, 1));
    const CellSet shift[] = {{3, 15, 2}};
    REQUIRE(t.reserve(1) == KVRT_SUCCESS);
    REQUIRE(t.mirror_seq(0, nullptr, 0, shift, 1) == KVRT_SUCCESS);
    CHECK(t.cell_pos(3) == 15);
    CHECK(t.seq_pos_max(0) == 15);
    // Sequence 0 leaves everything: its cells are freed, 1's stay.
    const uint32_t all0[] = {0, 1, 2, 3};
    REQUIRE(t.mirror_seq(0, all0, 4, nullptr, 0) == KVRT_SUCCESS);
    CHECK(t.used() == 2);
    CHECK(t.cell_is_empty(0));
    CHECK(t.seq_cell_count(0) == 0);
    CHECK(!t.has_pending_shift());
    CHECK(t.verify() == KVRT_SUCCESS);
}
