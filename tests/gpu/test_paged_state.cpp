// State save/load, host swap and sequence transfer in the paged layout
// (kvrt_state.h, kvrt_cache_seq_transfer): every moved sequence keeps its
// stored bytes (compared row by row in block-table order) and attends as
// before (at its end and in its middle, which checks the positions), a
// whole-cache state keeps the sharing its blocks allow, states cross between
// the cell and paged layouts in both directions, and a load or transfer that
// fails at any point leaves every sequence, its rows and the pool as they were.
#include "gpu_test.hpp"
#include "paged_check.hpp"

#include <algorithm>
#include <functional>
#include <random>

#include "common/random.hpp"
#include "core/fault.hpp"
#include "reference/metrics.hpp"

using namespace kvrt_test;
using namespace kvrt_test::paged;

namespace {

// Four sequences over shared blocks: 0 a prompt of 100 tokens; 1 a fork of 0
// with 10 tokens of its own (copy-on-write of 0's partly filled last block);
// 2 the first 64 tokens of 0 (mapped: 4 blocks) and 6 of its own; 3 a
// private prompt of 20.
void fill(kvrt_cache c, const Shape& sh) {
    REQUIRE(admit(c, sh, 0, prompt(100, 1)) == 0);
    KVRT_REQUIRE_OK(kvrt_cache_paged_fork(c, 0, 1));
    Prompt tail = prompt(110, 2);
    tail.ids.erase(tail.ids.begin(), tail.ids.begin() + 100);
    tail.pos.erase(tail.pos.begin(), tail.pos.begin() + 100);
    std::vector<uint32_t> cells(10);
    KVRT_REQUIRE_OK(kvrt_cache_paged_append(c, nullptr, 1, 10, tail.ids.data(), tail.pos.data(), cells.data()));
    write_rows(c, sh, tail.ids, tail.pos, 0, cells.data());
    Prompt p2 = prompt(70, 1);
    for (size_t i = 64; i < p2.ids.size(); ++i) p2.ids[i] = 7000 + static_cast<int32_t>(i);
    REQUIRE(admit(c, sh, 2, p2) == 64);
    REQUIRE(admit(c, sh, 3, prompt(20, 3)) == 0);
}

// The stored bytes of sequence `seq` of a paged cache, every layer, K and V,
// in block-table order.
std::vector<uint8_t> seq_rows(kvrt_cache c, const Shape& sh, int32_t seq) {
    std::vector<uint8_t> all;
    const std::vector<uint32_t> cells = paged_cells(c, seq);
    if (cells.empty()) return all;
    for (uint32_t l = 0; l < sh.layers; ++l)
        for (kvrt_kv_array a : {KVRT_KV_ARRAY_K, KVRT_KV_ARRAY_V}) {
            const std::vector<uint8_t> rows = raw_rows(c, static_cast<int32_t>(l), a, cells);
            all.insert(all.end(), rows.begin(), rows.end());
        }
    return all;
}

// Sequence `sa` of `a` attends like sequence `sb` of `b`: one query after its
// last token and one at position `mid` (which sees only the tokens at or
// before it), every layer.
void check_same_attention(kvrt_cache a, int32_t sa, kvrt_cache b, int32_t sb, const Shape& sh, int32_t mid) {
    int32_t hi_a = -2, hi_b = -2;
    KVRT_REQUIRE_OK(kvrt_cache_seq_pos_max(a, sa, &hi_a));
    KVRT_REQUIRE_OK(kvrt_cache_seq_pos_max(b, sb, &hi_b));
    REQUIRE(hi_a == hi_b);
    int32_t lo_a = -2, lo_b = -2;
    KVRT_REQUIRE_OK(kvrt_cache_seq_pos_min(a, sa, &lo_a));
    KVRT_REQUIRE_OK(kvrt_cache_seq_pos_min(b, sb, &lo_b));
    REQUIRE(lo_a == lo_b);
    Rng rng(static_cast<uint32_t>(sa * 31 + sb));
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> q(2 * sh.heads * sh.dk);
    for (float& x : q) x = nd(rng);
    const std::vector<int32_t> pos = {hi_a + 1, mid};
    for (uint32_t l = 0; l < sh.layers; ++l) {
        const std::vector<float> x = attend(a, sh, l, {sa, sa}, pos, q);
        const std::vector<float> y = attend(b, sh, l, {sb, sb}, pos, q);
        const double e = kvrt::ref::nmse(x, y);
        INFO("layer " << l << " nmse " << e);
        REQUIRE(e <= 1e-10);
    }
}

kvrt_paged_stats stats(kvrt_cache c) {
    kvrt_paged_stats s = KVRT_PAGED_STATS_INIT;
    KVRT_REQUIRE_OK(kvrt_cache_paged_get_stats(c, &s));
    return s;
}

}  // namespace

TEST_CASE("paged layout: sequence states save, load and swap with their rows bit for bit", "[paged][state]") {
    GpuContext ctx;
    Shape sh;
    sh.type(GENERATE(KVRT_TYPE_F16, KVRT_TYPE_Q8_0));
    INFO("type " << sh.type_k);
    Cache p = CacheSpec(sh).cells(512, 6).paged(16).create(ctx);
    Cache cells = CacheSpec(sh).cells(512, 6).create(ctx);
    fill(p, sh);
    const std::vector<uint8_t> rows1 = seq_rows(p, sh, 1), rows2 = seq_rows(p, sh, 2);

    // Sequence 1 (shared blocks and a copied one) into sequence 4: blocks of
    // its own, the same bytes in the same order, the same attention.
    const std::vector<uint8_t> s1 = save_state(p, 1);
    const uint32_t used = stats(p).used_blocks;
    KVRT_REQUIRE_OK(kvrt_cache_state_load(p, 4, s1.data(), s1.size()));
    CHECK(seq_rows(p, sh, 4) == rows1);
    CHECK(stats(p).used_blocks == used + 7);  // 110 tokens in blocks of 16
    check_same_attention(p, 4, p, 1, sh, 50);
    // Loading over a sequence replaces it.
    const std::vector<uint8_t> s2 = save_state(p, 2);
    KVRT_REQUIRE_OK(kvrt_cache_state_load(p, 4, s2.data(), s2.size()));
    CHECK(seq_rows(p, sh, 4) == rows2);
    CHECK(stats(p).used_blocks == used + 5);
    check_same_attention(p, 4, p, 2, sh, 66);

    // Into the cell layout and back: the cell cache attends like the paged
    // one, and its state loads into the paged layout in position order.
    KVRT_REQUIRE_OK(kvrt_cache_state_load(cells, 0, s1.data(), s1.size()));
    check_same_attention(cells, 0, p, 1, sh, 30);
    const std::vector<uint8_t> from_cells = save_state(cells, 0);
    KVRT_REQUIRE_OK(kvrt_cache_state_load(p, 5, from_cells.data(), from_cells.size()));
    CHECK(seq_rows(p, sh, 5) == rows1);
    check_same_attention(p, 5, p, 1, sh, 105);

    // Swap: sequence 1 leaves (its own block returns to the pool, the shared
    // ones stay with 0) and comes back with the same rows.
    const std::vector<uint8_t> rows0 = seq_rows(p, sh, 0);
    const uint32_t used_before = stats(p).used_blocks;
    uint64_t size = 0;
    KVRT_REQUIRE_OK(kvrt_cache_seq_swap_out(p, 1, nullptr, &size));
    std::vector<uint8_t> swapped(size);
    KVRT_REQUIRE_OK(kvrt_cache_seq_swap_out(p, 1, swapped.data(), &size));
    CHECK(paged_cells(p, 1).empty());
    CHECK(stats(p).used_blocks == used_before - 1);
    CHECK(seq_rows(p, sh, 0) == rows0);
    CHECK(kvrt_cache_seq_swap_in(p, 0, swapped.data(), swapped.size()) == KVRT_ERROR_INVALID_ARGUMENT);
    KVRT_REQUIRE_OK(kvrt_cache_seq_swap_in(p, 1, swapped.data(), swapped.size()));
    CHECK(seq_rows(p, sh, 1) == rows1);
    check_same_attention(p, 1, p, 4 + 1, sh, 40);
    verify(p);
    REQUIRE(ctx.validation_errors() == 0);
}

TEST_CASE("paged layout: a whole-cache state keeps its sequences and the sharing its blocks allow",
          "[paged][state]") {
    GpuContext ctx;
    Shape sh;
    const uint32_t n_seqs = 4;
    Cache p = CacheSpec(sh).cells(512, n_seqs).paged(16).create(ctx);
    fill(p, sh);
    const kvrt_paged_stats before = stats(p);
    REQUIRE(before.shared_blocks == 6);  // 0's first 6 blocks (1 and 2 map 4 of them)
    const std::vector<uint8_t> whole = save_state(p, -1);

    // Into a new paged cache: every sequence's bytes in order, the same blocks
    // in use and shared, the same attention; nothing registered.
    Cache q = CacheSpec(sh).cells(512, n_seqs).paged(16).create(ctx);
    KVRT_REQUIRE_OK(kvrt_cache_state_load(q, -1, whole.data(), whole.size()));
    const kvrt_paged_stats after = stats(q);
    CHECK(after.used_blocks == before.used_blocks);
    CHECK(after.shared_blocks == before.shared_blocks);
    CHECK(after.registered_blocks == 0);
    for (int32_t s = 0; s < static_cast<int32_t>(n_seqs); ++s) {
        INFO("sequence " << s);
        CHECK(seq_rows(q, sh, s) == seq_rows(p, sh, s));
        check_same_attention(q, s, p, s, sh, 10 + 4 * s);
    }

    // Through the cell layout (cells shared by several sequences) and back
    // into the paged one: the sharing is found again.
    Cache cells = CacheSpec(sh).cells(512, n_seqs).create(ctx);
    KVRT_REQUIRE_OK(kvrt_cache_state_load(cells, -1, whole.data(), whole.size()));
    kvrt_cache_info info = KVRT_CACHE_INFO_INIT;
    KVRT_REQUIRE_OK(kvrt_cache_get_info(cells, &info));
    CHECK(info.used == 100 + 14 + 6 + 20);  // 1's copied block holds 4 tokens of 0 again
    const std::vector<uint8_t> via_cells = save_state(cells, -1);
    Cache r = CacheSpec(sh).cells(512, n_seqs).paged(16).create(ctx);
    KVRT_REQUIRE_OK(kvrt_cache_state_load(r, -1, via_cells.data(), via_cells.size()));
    CHECK(stats(r).used_blocks == before.used_blocks);
    CHECK(stats(r).shared_blocks == before.shared_blocks);
    for (int32_t s = 0; s < static_cast<int32_t>(n_seqs); ++s) {
        INFO("sequence " << s);
        CHECK(seq_rows(r, sh, s) == seq_rows(p, sh, s));
        check_same_attention(cells, s, p, s, sh, 60);
    }

    // A whole-cache load replaces what the cache held, registry included.
    KVRT_REQUIRE_OK(kvrt_cache_state_load(p, -1, via_cells.data(), via_cells.size()));
    CHECK(stats(p).registered_blocks == 0);
    CHECK(stats(p).used_blocks == before.used_blocks);
    for (int32_t s = 0; s < static_cast<int32_t>(n_seqs); ++s) CHECK(seq_rows(p, sh, s) == seq_rows(q, sh, s));
    // Too many blocks for the pool: CACHE_FULL, nothing changes.
    Cache small = CacheSpec(sh).cells(128, n_seqs).paged(16).create(ctx);
    REQUIRE(admit(small, sh, 3, prompt(20, 3)) == 0);
    const State small_before = state_of(small, n_seqs);
    const std::vector<uint8_t> small_rows = seen_rows(small, sh, n_seqs);
    CHECK(kvrt_cache_state_load(small, -1, whole.data(), whole.size()) == KVRT_ERROR_CACHE_FULL);
    CHECK(state_of(small, n_seqs) == small_before);
    CHECK(seen_rows(small, sh, n_seqs) == small_rows);
    for (kvrt_cache c : {p.get(), q.get(), r.get(), small.get()}) verify(c);
    REQUIRE(ctx.validation_errors() == 0);
}

TEST_CASE("paged layout: sequences transfer to and from the paged layout bit for bit", "[paged][state]") {
    GpuContext ctx;
    Shape sh;
    sh.type(GENERATE(KVRT_TYPE_F16, KVRT_TYPE_Q4_0));
    INFO("type " << sh.type_k);
    Cache p = CacheSpec(sh).cells(512, 6).paged(16).create(ctx);
    Cache other = CacheSpec(sh).cells(256, 2).paged(32).create(ctx);
    Cache cells = CacheSpec(sh).cells(256, 2).create(ctx);
    fill(p, sh);
    const std::vector<uint8_t> rows1 = seq_rows(p, sh, 1);
    uint32_t n = 0;
    // Within one paged cache, into another with other blocks, to cells and back.
    KVRT_REQUIRE_OK(kvrt_cache_seq_transfer(p, 1, p, 4, &n));
    CHECK(n == 110);
    CHECK(seq_rows(p, sh, 4) == rows1);
    KVRT_REQUIRE_OK(kvrt_cache_seq_transfer(p, 1, other, 0, &n));
    CHECK(seq_rows(other, sh, 0) == rows1);
    check_same_attention(other, 0, p, 1, sh, 97);
    KVRT_REQUIRE_OK(kvrt_cache_seq_transfer(p, 1, cells, 1, &n));
    check_same_attention(cells, 1, p, 1, sh, 33);
    KVRT_REQUIRE_OK(kvrt_cache_seq_transfer(cells, 1, p, 5, &n));
    CHECK(n == 110);
    CHECK(seq_rows(p, sh, 5) == rows1);
    // A destination in use, and one too small: refused, nothing changes.
    const State before = state_of(other, 2);
    CHECK(kvrt_cache_seq_transfer(p, 2, other, 0, &n) == KVRT_ERROR_INVALID_ARGUMENT);
    KVRT_REQUIRE_OK(kvrt_cache_seq_transfer(p, 3, other, 1, &n));  // 20 tokens: one block of 32
    const State filled = state_of(other, 2);
    CHECK(filled.stats.used_blocks == before.stats.used_blocks + 1);
    KVRT_REQUIRE_OK(kvrt_cache_seq_rm(other, 1, -1, -1));
    KVRT_REQUIRE_OK(kvrt_cache_seq_transfer(p, 0, other, 1, &n));  // 100 tokens: 4 blocks, 8 in all
    KVRT_REQUIRE_OK(kvrt_cache_seq_rm(other, 1, -1, -1));
    REQUIRE(state_of(other, 2) == before);
    const std::vector<uint8_t> rows_other = seen_rows(other, sh, 2);
    Cache big = CacheSpec(sh).cells(512, 2).create(ctx);
    const Prompt long_prompt = prompt(300, 4);
    std::vector<uint32_t> big_cells(300);
    std::vector<int32_t> seqs(300, 0);
    kvrt_batch b = make_batch(300, long_prompt.pos.data(), seqs.data());
    KVRT_REQUIRE_OK(kvrt_cache_place(big, &b, big_cells.data()));
    write_rows(big, sh, long_prompt.ids, long_prompt.pos, 0, big_cells.data());
    CHECK(kvrt_cache_seq_transfer(big, 0, other, 1, &n) == KVRT_ERROR_CACHE_FULL);
    CHECK(state_of(other, 2) == before);
    CHECK(seen_rows(other, sh, 2) == rows_other);
    for (kvrt_cache c : {p.get(), other.get()}) verify(c);
    REQUIRE(ctx.validation_errors() == 0);
}

TEST_CASE("paged layout: a load, swap or transfer that fails at any point changes nothing", "[paged][faults]") {
    GpuContext ctx;
    Shape sh;
    const uint32_t n_seqs = 5;
    Cache p = CacheSpec(sh).cells(512, n_seqs).paged(16).create(ctx);
    Cache cells = CacheSpec(sh).cells(256, 1).create(ctx);
    fill(p, sh);
    const std::vector<uint8_t> s1 = save_state(p, 1), whole = save_state(p, -1);
    uint32_t n = 0;
    KVRT_REQUIRE_OK(kvrt_cache_seq_transfer(p, 2, cells, 0, &n));
    struct Op {
        const char* what;
        std::function<kvrt_result()> call;
        std::function<void()> setup = [] {};  // before each try, not under the fault
    };
    const std::vector<Op> ops = {
        {"load a sequence state over a sequence", [&] { return kvrt_cache_state_load(p, 3, s1.data(), s1.size()); }},
        {"load a whole-cache state", [&] { return kvrt_cache_state_load(p, -1, whole.data(), whole.size()); }},
        {"swap in", [&] { return kvrt_cache_seq_swap_in(p, 4, s1.data(), s1.size()); },
         [&] { KVRT_REQUIRE_OK(kvrt_cache_seq_rm(p, 4, -1, -1)); }},
        {"transfer from the cell layout", [&] { return kvrt_cache_seq_transfer(cells, 0, p, 4, &n); },
         [&] { KVRT_REQUIRE_OK(kvrt_cache_seq_rm(p, 4, -1, -1)); }},
        {"transfer within the paged cache", [&] { return kvrt_cache_seq_transfer(p, 0, p, 4, &n); },
         [&] { KVRT_REQUIRE_OK(kvrt_cache_seq_rm(p, 4, -1, -1)); }},
    };
    for (const Op& op : ops) {
        for (uint64_t k = 1;; ++k) {
            INFO(op.what << ", fault point " << k);
            op.setup();
            const State before = state_of(p, n_seqs);
            const std::vector<uint8_t> rows_before = seen_rows(p, sh, n_seqs);
            uint64_t passed = 0;
            const kvrt_result r = with_fault_point(k, &passed, [&] { return op.call(); });
            INFO("result " << r << ": " << kvrt_last_error_message());
            // A synchronous wait that times out keeps the call (its work
            // completes later): the last point of such a call.
            if (r == KVRT_ERROR_TIMEOUT) break;
            if (r != KVRT_SUCCESS) {
                REQUIRE(state_of(p, n_seqs) == before);
                REQUIRE(seen_rows(p, sh, n_seqs) == rows_before);
                verify(p);
            }
            if (passed < k) {
                REQUIRE(r == KVRT_SUCCESS);  // the armed point was never reached: every point covered
                break;
            }
        }
    }
    // The whole-cache load came after the sequence load (a load whose wait
    // times out is kept; a transfer whose wait times out is undone).
    CHECK(paged_cells(p, 3).size() == 20);
    KVRT_REQUIRE_OK(kvrt_cache_seq_rm(p, 4, -1, -1));
    KVRT_REQUIRE_OK(kvrt_cache_seq_transfer(p, 0, p, 4, &n));
    CHECK(seq_rows(p, sh, 4) == seq_rows(p, sh, 0));
    verify(p);
    REQUIRE(ctx.validation_errors() == 0);
}
