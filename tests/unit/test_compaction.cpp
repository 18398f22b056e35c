// Unit tests of the compaction planner and CellTable::apply_moves, with a shadow
// array standing in for the K/V rows the device moves alongside the metadata.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "kv/cell_table.hpp"
#include "kv/compaction.hpp"
#include "common/random.hpp"

using kvrt::kv::CellMove;
using kvrt::kv::CellTable;
using kvrt::kv::compaction_moves_needed;
using kvrt::kv::Placement;
using kvrt::kv::plan_compaction;
using kvrt::kv::Token;

namespace {

// Places tokens at positions [p0, p0 + n) in `seq`; returns the cells.
std::vector<uint32_t> place(CellTable& t, int32_t seq, int32_t p0, uint32_t n) {
    std::vector<Token> tokens(n);
    for (uint32_t i = 0; i < n; ++i) tokens[i] = Token{p0 + int32_t(i), &seq, 1};
    Placement p;
    REQUIRE(t.plan(tokens.data(), n, &p) == KVRT_SUCCESS);
    REQUIRE(t.apply(p) == KVRT_SUCCESS);
    return p.cells();
}

// Checks every documented property of `moves`, planned on `t` with `max_moves`;
// returns "" when they all hold.
std::string check_plan(const CellTable& t, const std::vector<CellMove>& moves, uint32_t max_moves) {
    std::vector<uint32_t> holes, used_desc;
    for (uint32_t c = 0; c < t.used_end(); ++c) {
        if (t.cell_is_empty(c)) holes.push_back(c);
    }
    for (uint32_t c = t.used_end(); c-- > 0;) {
        if (!t.cell_is_empty(c)) used_desc.push_back(c);
    }
    std::ostringstream os;
    if (moves.size() > max_moves) return "more moves than allowed";
    std::set<uint32_t> seen;
    for (size_t i = 0; i < moves.size(); ++i) {
        const CellMove& m = moves[i];
        if (m.dst_cell >= m.src_cell) os << "move " << i << " goes up; ";
        if (i >= holes.size() || m.dst_cell != holes[i]) os << "move " << i << " is not into the next lowest hole; ";
        if (i >= used_desc.size() || m.src_cell != used_desc[i]) os << "move " << i << " is not from the next highest cell; ";
        if (!seen.insert(m.src_cell).second || !seen.insert(m.dst_cell).second) os << "move " << i << " reuses a cell; ";
    }
    if (moves.size() < max_moves && moves.size() != compaction_moves_needed(t) && !moves.empty()) {
        os << "a plan not cut short by max_moves is incomplete; ";
    }
    return os.str();
}

// (position, delta, sequence words, row id) of every used cell, in cell-independent order.
using CellContent = std::tuple<int32_t, int32_t, uint64_t, uint32_t>;

std::multiset<CellContent> contents(const CellTable& t, const std::vector<uint32_t>& rows) {
    std::multiset<CellContent> s;
    for (uint32_t c = 0; c < t.capacity(); ++c) {
        if (!t.cell_is_empty(c)) s.insert({t.cell_pos(c), t.cell_delta(c), t.seq_words()[c], rows[c]});
    }
    return s;
}

}  // namespace

TEST_CASE("plan_compaction fills the lowest holes with the highest cells", "[kv][compaction]") {
    CellTable t;
    REQUIRE(t.init(16, 2) == KVRT_SUCCESS);
    place(t, 0, 0, 12);
    REQUIRE(t.seq_rm(0, 2, 4) == KVRT_SUCCESS);  // holes 2, 3
    REQUIRE(t.seq_rm(0, 6, 7) == KVRT_SUCCESS);  // hole 6
    CHECK(t.used() == 9);
    CHECK(t.fragmentation() == Approx(3.0 / 12.0));
    CHECK(compaction_moves_needed(t) == 3);

    std::vector<CellMove> moves;
    REQUIRE(plan_compaction(t, 0.2, 100, &moves) == KVRT_SUCCESS);
    REQUIRE(moves.size() == 3);
    CHECK((moves[0].src_cell == 11 && moves[0].dst_cell == 2));
    CHECK((moves[1].src_cell == 10 && moves[1].dst_cell == 3));
    CHECK((moves[2].src_cell == 9 && moves[2].dst_cell == 6));
    CHECK(check_plan(t, moves, 100) == "");

    REQUIRE(t.apply_moves(moves) == KVRT_SUCCESS);
    CHECK(t.used() == 9);
    CHECK(t.used_end() == 9);
    CHECK(t.fragmentation() == 0.0);
    CHECK(t.n_attend(1) == 9);
    CHECK(t.cell_pos(2) == 11);
    CHECK(t.cell_pos(3) == 10);
    CHECK(t.cell_pos(6) == 9);
    CHECK(t.cell_has_seq(2, 0));
    CHECK(t.seq_pos_max(0) == 11);  // positions do not change
    CHECK(t.seq_cell_count(0) == 9);
    CHECK(t.verify() == KVRT_SUCCESS);

    // Nothing left to do.
    REQUIRE(plan_compaction(t, 0.0, 100, &moves) == KVRT_SUCCESS);
    CHECK(moves.empty());
    CHECK(compaction_moves_needed(t) == 0);
    // New tokens go after the compacted cells.
    CHECK(place(t, 0, 12, 2) == std::vector<uint32_t>{9, 10});
}

TEST_CASE("plan_compaction is bounded by max_moves and converges", "[kv][compaction]") {
    CellTable t;
    REQUIRE(t.init(64, 1) == KVRT_SUCCESS);
    place(t, 0, 0, 64);
    for (int32_t p = 0; p < 64; p += 4) REQUIRE(t.seq_rm(0, p, p + 2) == KVRT_SUCCESS);  // 32 holes
    CHECK(t.used() == 32);
    const uint32_t needed = compaction_moves_needed(t);
    CHECK(needed == 16);  // used cells at or above index 32

    std::vector<CellMove> moves;
    REQUIRE(plan_compaction(t, 0.0, 0, &moves) == KVRT_SUCCESS);
    CHECK(moves.empty());
    uint32_t rounds = 0, total = 0;
    double last = t.fragmentation();
    while (true) {
        REQUIRE(plan_compaction(t, 0.0, 5, &moves) == KVRT_SUCCESS);
        if (moves.empty()) break;
        CHECK(moves.size() <= 5);
        CHECK(check_plan(t, moves, 5) == "");
        REQUIRE(t.apply_moves(moves) == KVRT_SUCCESS);
        CHECK(t.fragmentation() < last);
        last = t.fragmentation();
        total += uint32_t(moves.size());
        ++rounds;
        REQUIRE(rounds < 100);
    }
    CHECK(total == needed);
    CHECK(rounds == 4);  // 5 + 5 + 5 + 1
    CHECK(t.used_end() == 32);
    CHECK(t.fragmentation() == 0.0);
    CHECK(t.verify() == KVRT_SUCCESS);
}

TEST_CASE("plan_compaction honours the threshold and checks its arguments", "[kv][compaction]") {
    CellTable t;
    REQUIRE(t.init(40, 1) == KVRT_SUCCESS);
    std::vector<CellMove> moves = {{1, 2}};
    REQUIRE(plan_compaction(t, 0.0, 10, &moves) == KVRT_SUCCESS);  // empty table
    CHECK(moves.empty());
    place(t, 0, 0, 20);
    REQUIRE(plan_compaction(t, 0.0, 10, &moves) == KVRT_SUCCESS);  // no hole
    CHECK(moves.empty());
    REQUIRE(t.seq_rm(0, 0, 5) == KVRT_SUCCESS);  // fragmentation 5/20
    CHECK(t.fragmentation() == Approx(0.25));

    REQUIRE(plan_compaction(t, 0.3, 10, &moves) == KVRT_SUCCESS);
    CHECK(moves.empty());
    REQUIRE(plan_compaction(t, 0.25, 10, &moves) == KVRT_SUCCESS);  // at the threshold: plan
    CHECK(moves.size() == 5);
    REQUIRE(plan_compaction(t, 1.0, 10, &moves) == KVRT_SUCCESS);  // never reached
    CHECK(moves.empty());

    moves = {{1, 2}};
    CHECK(plan_compaction(t, -0.1, 10, &moves) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(moves.empty());
    CHECK(plan_compaction(t, 1.5, 10, &moves) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(plan_compaction(t, std::nan(""), 10, &moves) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(plan_compaction(t, 0.1, 10, nullptr) == KVRT_ERROR_INVALID_ARGUMENT);
}

TEST_CASE("apply_moves refuses moves that do not fit and changes nothing", "[kv][compaction]") {
    CellTable t;
    REQUIRE(t.init(8, 1) == KVRT_SUCCESS);
    place(t, 0, 0, 6);
    REQUIRE(t.seq_rm(0, 1, 3) == KVRT_SUCCESS);  // holes 1, 2
    const std::vector<int32_t> pos(t.positions(), t.positions() + 8);
    const uint64_t rev = t.revision();

    const std::vector<std::vector<CellMove>> bad = {
        {{1, 0}},                // source empty
        {{5, 0}},                // destination used
        {{5, 8}},                // destination out of range
        {{9, 1}},                // source out of range
        {{5, 1}, {4, 1}},        // second move into a cell the first one filled
        {{5, 1}, {5, 2}},        // second move from a cell the first one emptied
        {{5, 1}, {4, 2}, {3, 6}},  // valid (the last move goes up): applied below
    };
    for (size_t i = 0; i + 1 < bad.size(); ++i) {
        INFO("list " << i);
        CHECK(t.apply_moves(bad[i]) == KVRT_ERROR_INVALID_ARGUMENT);
        CHECK(std::vector<int32_t>(t.positions(), t.positions() + 8) == pos);
        CHECK(t.revision() == rev);
    }
    CHECK(t.apply_moves(nullptr, 1) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(t.apply_moves(nullptr, 0) == KVRT_SUCCESS);
    CHECK(t.revision() == rev);

    // A general (not planner-made) list is applied in order, upward moves too.
    REQUIRE(t.apply_moves(bad.back()) == KVRT_SUCCESS);
    CHECK(std::vector<int32_t>(t.positions(), t.positions() + 8) == std::vector<int32_t>{0, 5, 4, -1, -1, -1, 3, -1});
    CHECK(t.used_end() == 7);
    CHECK(t.verify() == KVRT_SUCCESS);
}

TEST_CASE("Rows moved with the metadata stay consistent, also when a copy fails", "[kv][compaction]") {
    constexpr uint32_t kCap = 200;
    kvrt_test::Rng rng(1234u);
    auto rnd = [&](int64_t lo, int64_t hi) { return rng.between(lo, hi); };
    CellTable t;
    REQUIRE(t.init(kCap, 8) == KVRT_SUCCESS);
    // The "device": one row per cell, holding the id of the token stored there
    // and the position its K was rotated for (pos - pending delta).
    std::vector<uint32_t> rows(kCap, 0);
    std::vector<int32_t> rotated_for(kCap, -1);
    uint32_t next_id = 1;
    uint32_t compactions = 0, failed_copies = 0;

    auto rows_match = [&]() {
        for (uint32_t c = 0; c < kCap; ++c) {
            if (t.cell_is_empty(c)) continue;
            if (rows[c] == 0 || rotated_for[c] != t.cell_pos(c) - t.cell_delta(c)) return false;
        }
        return true;
    };

    for (int round = 0; round < 800; ++round) {
        // Fill with a few sequences, then punch holes and shift some positions.
        for (int k = 0; k < 4; ++k) {
            const int32_t seq = int32_t(rnd(0, 7));
            const uint32_t n = uint32_t(rnd(1, 12));
            if (t.used() + n > kCap) break;
            std::vector<Token> tokens(n);
            for (uint32_t i = 0; i < n; ++i) tokens[i] = Token{t.seq_pos_max(seq) + 1 + int32_t(i), &seq, 1};
            Placement p;
            REQUIRE(t.plan(tokens.data(), n, &p) == KVRT_SUCCESS);
            REQUIRE(t.apply(p) == KVRT_SUCCESS);
            for (uint32_t i = 0; i < n; ++i) {  // the store kernel
                rows[p.cells()[i]] = next_id++;
                rotated_for[p.cells()[i]] = tokens[i].pos;
            }
        }
        const int32_t victim = int32_t(rnd(0, 7));
        const int32_t p0 = int32_t(rnd(0, std::max(0, t.seq_pos_max(victim))));
        REQUIRE(t.seq_rm(victim, p0, rnd(0, 9) == 0 ? -1 : p0 + int32_t(rnd(1, 30))) == KVRT_SUCCESS);
        if (rnd(0, 3) == 0) REQUIRE(t.seq_cp(victim, int32_t(rnd(0, 7)), -1, -1) == KVRT_SUCCESS);
        if (rnd(0, 3) == 0) REQUIRE(t.seq_add(victim, p0, -1, int32_t(rnd(-3, 3))) == KVRT_SUCCESS);
        REQUIRE(rows_match());

        std::vector<CellMove> moves;
        const uint32_t max_moves = uint32_t(rnd(1, 24));
        const double threshold = double(rnd(0, 5)) / 100.0;
        REQUIRE(plan_compaction(t, threshold, max_moves, &moves) == KVRT_SUCCESS);
        if (moves.empty()) continue;
        REQUIRE(check_plan(t, moves, max_moves) == "");
        const auto before = contents(t, rows);
        const uint32_t used = t.used();

        if (rnd(0, 2) == 0) {
            // The device copied only some rows, then failed: the metadata is not
            // touched, and since destinations were holes and sources are never
            // destinations, every used cell still finds its own row.
            const size_t copied = size_t(rnd(0, int64_t(moves.size()) - 1));
            for (size_t i = 0; i < copied; ++i) {
                rows[moves[i].dst_cell] = rows[moves[i].src_cell];
                rotated_for[moves[i].dst_cell] = rotated_for[moves[i].src_cell];
            }
            ++failed_copies;
            REQUIRE(rows_match());
            REQUIRE(contents(t, rows) == before);
        }
        for (const CellMove& m : moves) {  // the device copy
            rows[m.dst_cell] = rows[m.src_cell];
            rotated_for[m.dst_cell] = rotated_for[m.src_cell];
        }
        REQUIRE(t.apply_moves(moves) == KVRT_SUCCESS);
        ++compactions;
        REQUIRE(t.used() == used);
        REQUIRE(rows_match());
        REQUIRE(contents(t, rows) == before);
        REQUIRE(t.verify() == KVRT_SUCCESS);
        if (round % 50 == 49) {  // the device applies the pending shifts
            t.clear_pending_shifts();
            std::copy(t.positions(), t.positions() + kCap, rotated_for.begin());
        }
    }
    INFO(compactions << " compactions, " << failed_copies << " failed copies");
    CHECK(compactions > 150);
    CHECK(failed_copies > 50);
}

TEST_CASE("Plans on random tables keep their promises", "[kv][compaction]") {
    kvrt_test::Rng rng(99u);
    auto rnd = [&](int64_t lo, int64_t hi) { return rng.between(lo, hi); };
    uint32_t complete = 0, partial = 0;
    for (int iter = 0; iter < 1500; ++iter) {
        CellTable t;
        const uint32_t cap = uint32_t(rnd(1, 300));
        REQUIRE(t.init(cap, 3) == KVRT_SUCCESS);
        const uint32_t n = uint32_t(rnd(0, cap));
        if (n > 0) place(t, int32_t(rnd(0, 2)), 0, n);
        for (int k = int(rnd(0, 6)); k > 0; --k) {
            const int32_t p0 = int32_t(rnd(0, cap));
            REQUIRE(t.seq_rm(-1, p0, p0 + int32_t(rnd(0, 20))) == KVRT_SUCCESS);
        }
        const std::multiset<CellContent> before = contents(t, std::vector<uint32_t>(cap, 0));
        const double frag = t.fragmentation();
        const double threshold = rnd(0, 3) == 0 ? 0.0 : double(rnd(0, 100)) / 100.0;
        const uint32_t max_moves = rnd(0, 2) == 0 ? UINT32_MAX : uint32_t(rnd(0, 20));
        std::vector<CellMove> moves;
        REQUIRE(plan_compaction(t, threshold, max_moves, &moves) == KVRT_SUCCESS);
        INFO("iteration " << iter << ": capacity " << cap << ", fragmentation " << frag << ", threshold "
                          << threshold << ", max_moves " << max_moves);
        const bool holes = t.used() < t.used_end();
        REQUIRE(moves.empty() == (frag < threshold || !holes || max_moves == 0));
        REQUIRE(check_plan(t, moves, max_moves) == "");
        const uint32_t needed = compaction_moves_needed(t);
        REQUIRE(t.apply_moves(moves) == KVRT_SUCCESS);
        REQUIRE(t.verify() == KVRT_SUCCESS);
        REQUIRE(contents(t, std::vector<uint32_t>(cap, 0)) == before);
        REQUIRE(t.fragmentation() <= frag);
        if (!moves.empty() && moves.size() == needed) {
            REQUIRE(t.fragmentation() == 0.0);
            REQUIRE(t.used_end() == t.used());
            ++complete;
        } else if (!moves.empty()) {
            REQUIRE(t.fragmentation() > 0.0);
            ++partial;
        }
    }
    CHECK(complete > 100);
    CHECK(partial > 50);
}
