// Unit tests of token trees on the host: the rules of a tree batch, each
// token's ancestor bits, what accepting leaves keeps, and the cell table's
// side (siblings sharing a position, placed and rolled back; rejected cells
// removed all or nothing), against brute-force walks of the parent links.
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <vector>

#include "kv/cell_table.hpp"
#include "kv/token_tree.hpp"
#include "common/random.hpp"

#include "cell_table_snapshot.hpp"

using namespace cell_table_test;
using kvrt::kv::check_tree;
using kvrt::kv::tree_ancestors;
using kvrt::kv::tree_kept;
using kvrt::kv::tree_words;

namespace {

// j is i or an ancestor of i, by walking the parent links.
bool is_ancestor(const std::vector<int32_t>& parents, int32_t j, int32_t i) {
    for (int32_t a = i; a >= 0; a = parents[size_t(a)])
        if (a == j) return true;
    return false;
}

}  // namespace

TEST_CASE("check_tree enforces the rules of a token tree", "[kv][tree]") {
    const int32_t pos[4] = {5, 5, 6, 7}, seq[4] = {1, 1, 1, 1};
    const int32_t good[4] = {-1, -1, 1, 2};
    CHECK(check_tree(4, pos, nullptr, seq, good) == KVRT_SUCCESS);
    CHECK(check_tree(0, nullptr, nullptr, nullptr, nullptr) == KVRT_SUCCESS);
    CHECK(check_tree(4, pos, nullptr, seq, nullptr) == KVRT_ERROR_INVALID_ARGUMENT);
    const int32_t later[4] = {-1, 2, 1, 2};  // token 1's parent comes after it
    CHECK(check_tree(4, pos, nullptr, seq, later) == KVRT_ERROR_INVALID_ARGUMENT);
    const int32_t self[4] = {-1, 1, 1, 2};
    CHECK(check_tree(4, pos, nullptr, seq, self) == KVRT_ERROR_INVALID_ARGUMENT);
    const int32_t below[4] = {-1, -3, 1, 2};
    CHECK(check_tree(4, pos, nullptr, seq, below) == KVRT_ERROR_INVALID_ARGUMENT);
    const int32_t same_pos[4] = {-1, 0, 1, 2};  // token 1 at 5 below token 0 at 5
    CHECK(check_tree(4, pos, nullptr, seq, same_pos) == KVRT_ERROR_INVALID_ARGUMENT);
    const int32_t other_seq[4] = {1, 1, 2, 1};
    CHECK(check_tree(4, pos, nullptr, other_seq, good) == KVRT_ERROR_INVALID_ARGUMENT);
    const uint32_t counts[4] = {1, 2, 1, 1};
    CHECK(check_tree(4, pos, counts, seq, good) == KVRT_ERROR_INVALID_ARGUMENT);
    std::vector<int32_t> chain(kvrt::kv::kMaxTreeTokens + 1), cpos(chain.size()), cseq(chain.size(), 0);
    for (size_t i = 0; i < chain.size(); ++i) {
        chain[i] = int32_t(i) - 1;
        cpos[i] = int32_t(i);
    }
    CHECK(check_tree(uint32_t(chain.size()), cpos.data(), nullptr, cseq.data(), chain.data()) ==
          KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(check_tree(uint32_t(chain.size() - 1), cpos.data(), nullptr, cseq.data(), chain.data()) == KVRT_SUCCESS);
}

TEST_CASE("ancestor bits and kept tokens match walks of the parent links", "[kv][tree]") {
    kvrt_test::Rng rng(17);
    for (int round = 0; round < 200; ++round) {
        const uint32_t n = 1 + rng.below(100);
        std::vector<int32_t> parents(n);
        for (uint32_t i = 0; i < n; ++i) parents[i] = i == 0 || rng.below(5) == 0 ? -1 : int32_t(rng.below(i));
        std::vector<uint32_t> anc;
        REQUIRE(tree_ancestors(n, parents.data(), &anc) == KVRT_SUCCESS);
        const uint32_t w = tree_words(n);
        REQUIRE(anc.size() == size_t(n) * w);
        for (uint32_t i = 0; i < n; ++i)
            for (uint32_t j = 0; j < w * 32; ++j) {
                const bool bit = (anc[size_t(i) * w + j / 32] >> (j % 32)) & 1u;
                INFO("round " << round << ", token " << i << ", bit " << j);
                REQUIRE(bit == (j < n && is_ancestor(parents, int32_t(j), int32_t(i))));
            }
        std::vector<int32_t> leaves;
        for (uint32_t k = rng.below(4); k > 0; --k) leaves.push_back(int32_t(rng.below(n)));
        std::vector<uint8_t> keep;
        REQUIRE(tree_kept(n, parents.data(), uint32_t(leaves.size()), leaves.data(), &keep) == KVRT_SUCCESS);
        for (uint32_t t = 0; t < n; ++t) {
            bool want = false;
            for (int32_t leaf : leaves) want = want || is_ancestor(parents, int32_t(t), leaf);
            REQUIRE(bool(keep[t]) == want);
        }
    }
    const int32_t parents[2] = {-1, 0}, bad[1] = {2};
    std::vector<uint8_t> keep;
    CHECK(tree_kept(2, parents, 1, bad, &keep) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(tree_kept(2, parents, 1, nullptr, &keep) == KVRT_ERROR_INVALID_ARGUMENT);
}

TEST_CASE("siblings share a position in the cell table; rejected cells go all or nothing", "[kv][tree][cell_table]") {
    CellTable t;
    REQUIRE(t.init(16, 2) == KVRT_SUCCESS);
    REQUIRE(place(t, {0}, 0, 3) == KVRT_SUCCESS);  // positions 0..2
    const int32_t s0 = 0;
    // Three candidates for position 3 and a child at 4.
    const Token tree[4] = {{3, &s0, 1}, {3, &s0, 1}, {3, &s0, 1}, {4, &s0, 1}};
    Placement p;
    CHECK(t.plan(tree, 4, &p) == KVRT_ERROR_INVALID_ARGUMENT);  // repeats need the tree's permission
    const Snapshot before = snapshot(t);
    REQUIRE(t.plan(tree, 4, &p, nullptr, true) == KVRT_SUCCESS);
    REQUIRE(t.apply(p) == KVRT_SUCCESS);
    CHECK(t.used() == 7);
    CHECK(t.seq_cell_count(0) == 7);
    CHECK(t.seq_pos_max(0) == 4);
    CHECK(t.verify() == KVRT_SUCCESS);
    REQUIRE(t.rollback(p) == KVRT_SUCCESS);
    CHECK(snapshot(t).same_state(before));
    CHECK(t.verify() == KVRT_SUCCESS);

    // A pair already in the table stays refused, tree or not; so does an id
    // repeated inside one token.
    const Token old_pos[2] = {{2, &s0, 1}, {3, &s0, 1}};
    CHECK(t.plan(old_pos, 2, &p, nullptr, true) == KVRT_ERROR_INVALID_ARGUMENT);
    const int32_t twice[2] = {0, 0};
    const Token dup_id[1] = {{3, twice, 2}};
    CHECK(t.plan(dup_id, 1, &p, nullptr, true) == KVRT_ERROR_INVALID_ARGUMENT);

    REQUIRE(t.plan(tree, 4, &p, nullptr, true) == KVRT_SUCCESS);
    REQUIRE(t.apply(p) == KVRT_SUCCESS);
    const std::vector<uint32_t> cells = p.cells();
    // Reject tokens 0 and 1; a stale entry (wrong position) refuses it all.
    const Snapshot placed = snapshot(t);
    const uint32_t rej[2] = {cells[0], cells[1]};
    const int32_t rej_pos[2] = {3, 3}, rej_seq[2] = {0, 0}, stale_pos[2] = {3, 4};
    CHECK(t.remove_cells(rej, stale_pos, rej_seq, 2) == KVRT_ERROR_INVALID_ARGUMENT);
    const int32_t other_seq[2] = {0, 1};
    CHECK(t.remove_cells(rej, rej_pos, other_seq, 2) == KVRT_ERROR_INVALID_ARGUMENT);
    const uint32_t same[2] = {cells[0], cells[0]};
    CHECK(t.remove_cells(same, rej_pos, rej_seq, 2) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(snapshot(t).identical(placed));
    REQUIRE(t.remove_cells(rej, rej_pos, rej_seq, 2) == KVRT_SUCCESS);
    CHECK(t.used() == 5);
    CHECK(t.cell_is_empty(cells[0]));
    CHECK(t.cell_is_empty(cells[1]));
    CHECK(t.cell_pos(cells[2]) == 3);
    CHECK(t.seq_pos_max(0) == 4);
    CHECK(t.verify() == KVRT_SUCCESS);
    // A cell shared with another sequence keeps that sequence.
    REQUIRE(t.seq_cp(0, 1, 3, 4) == KVRT_SUCCESS);
    const uint32_t kept[1] = {cells[2]};
    const int32_t kept_pos[1] = {3}, kept_seq[1] = {0};
    REQUIRE(t.remove_cells(kept, kept_pos, kept_seq, 1) == KVRT_SUCCESS);
    CHECK(!t.cell_is_empty(cells[2]));
    CHECK(t.cell_has_seq(cells[2], 1));
    CHECK(!t.cell_has_seq(cells[2], 0));
    CHECK(t.verify() == KVRT_SUCCESS);
}
