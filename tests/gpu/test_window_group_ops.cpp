// The window group under the operations that move, fork, shift and undo
// cells: context shifts, seq_add and seq_div on shared cells, compaction,
// token trees, and failures at every fault point.
//
// Differential: every operation runs on a cache with a window group and on
// a plain cache with the same windows (which keeps every row, and whose
// attention is checked against the double reference by the attention
// tests). Attention in every layer must then agree between the two, or, in
// a windowed layer, be refused with KVRT_ERROR_INVALID_STATE when the group
// dropped a row the query's window reaches: never a different answer.
#include "gpu_test.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "api/handles.hpp"
#include "core/fault.hpp"
#include "reference/metrics.hpp"

using namespace kvrt_test;

namespace {

constexpr uint32_t kHeads = 4, kKvHeads = 2, kDim = 32, kLayers = 3;
constexpr uint32_t kRow = kKvHeads * kDim;
const std::vector<uint32_t> kWindows = {8, 0, 12};

float value(uint32_t token, uint32_t layer, uint32_t array, uint32_t e) {
    return std::sin(0.37f * static_cast<float>(token) + 1.3f * static_cast<float>(layer) +
                    0.71f * static_cast<float>(array) + 0.113f * static_cast<float>(e));
}

// The plain cache; spec().group(cells, n_keep) is the one with a window group.
CacheSpec spec() {
    CacheSpec sp;
    sp.shape(kLayers, kHeads, kKvHeads, kDim).cells(128, 3);
    sp.windows = kWindows;
    return sp;
}

// The same operations on a cache with a window group and a plain one.
class Pair {
public:
    explicit Pair(kvrt_context ctx) {
        kvrt_window_layout_desc wl = KVRT_WINDOW_LAYOUT_DESC_INIT;
        wl.cells = 48;
        wl.n_keep = 2;
        grouped_ = spec().group(wl.cells, wl.n_keep).create(ctx);
        plain_ = spec().create(ctx);
    }
    Pair(const Pair&) = delete;
    Pair& operator=(const Pair&) = delete;

    kvrt_cache grouped() const { return grouped_; }
    kvrt_cache plain() const { return plain_; }

    // Stores tokens (one sequence each, or a tree) in both; the same result.
    std::vector<uint32_t> store(const std::vector<int32_t>& pos, const std::vector<int32_t>& seqs,
                                const kvrt_batch_tree* tree = nullptr, std::vector<uint32_t>* plain_cells = nullptr) {
        const uint32_t n = static_cast<uint32_t>(pos.size());
        std::vector<float> k(size_t{kLayers} * n * kRow), v(k.size());
        for (uint32_t l = 0; l < kLayers; ++l)
            for (uint32_t t = 0; t < n; ++t)
                for (uint32_t e = 0; e < kRow; ++e) {
                    k[(size_t{l} * n + t) * kRow + e] = value(next_token_ + t, l, 0, e);
                    v[(size_t{l} * n + t) * kRow + e] = value(next_token_ + t, l, 1, e);
                }
        next_token_ += n;
        kvrt_batch b = make_batch(n, pos.data(), seqs.data());
        const kvrt_tensor_ref kt = host_tensor(k.data()), vt = host_tensor(v.data());
        std::vector<uint32_t> a(n), p(n);
        kvrt_batch_tree ta = tree ? *tree : kvrt_batch_tree{}, tp = ta;
        if (tree) b.next = &ta;
        const kvrt_result r = kvrt_cache_store(grouped_, nullptr, &b, -1, &kt, &vt, a.data());
        INFO("store at " << pos[0] << " in sequence " << seqs[0] << ": " << kvrt_last_error_message());
        REQUIRE(r == KVRT_SUCCESS);
        if (tree) b.next = &tp;
        REQUIRE(kvrt_cache_store(plain_, nullptr, &b, -1, &kt, &vt, p.data()) == KVRT_SUCCESS);
        REQUIRE(impl(grouped_).window_verify() == KVRT_SUCCESS);
        if (plain_cells) *plain_cells = p;
        return a;
    }

    // Attention of one query per listed sequence at its last position, in
    // every layer: equal, or refused in a windowed layer. Returns the number
    // of windowed-layer queries answered.
    uint32_t compare(const std::vector<int32_t>& seqs, const std::vector<int32_t>& positions = {}) {
        uint32_t answered = 0;
        for (size_t i = 0; i < seqs.size(); ++i) {
            int32_t pos = 0;
            if (positions.empty()) REQUIRE(kvrt_cache_seq_pos_max(plain_, seqs[i], &pos) == KVRT_SUCCESS);
            else pos = positions[i];
            if (pos < 0) continue;
            std::vector<float> q(kHeads * kDim);
            for (uint32_t e = 0; e < q.size(); ++e) q[e] = std::cos(0.29f * static_cast<float>(e + 7 * i));
            kvrt_attention_params params = KVRT_ATTENTION_PARAMS_INIT;
            params.n_keep = 2;
            for (uint32_t l = 0; l < kLayers; ++l) {
                const AttentionPair r =
                    attend_both(grouped_, plain_, static_cast<int32_t>(l), seqs[i], pos, q, kHeads * kDim, params);
                REQUIRE(r.rb == KVRT_SUCCESS);
                INFO("layer " << l << ", sequence " << seqs[i] << ", position " << pos);
                if (kWindows[l] && r.ra == KVRT_ERROR_INVALID_STATE) continue;
                REQUIRE(r.ra == KVRT_SUCCESS);
                REQUIRE(kvrt::ref::nmse(r.a, r.b) <= 1e-10);
                if (kWindows[l]) ++answered;
            }
        }
        return answered;
    }

private:
    static kvrt::cache::Cache& impl(kvrt_cache c) { return *kvrt::api::cache_of(c); }
    Cache grouped_, plain_;
    uint32_t next_token_ = 1;
};

void both(const Pair& p, const std::function<kvrt_result(kvrt_cache)>& op) {
    REQUIRE(op(p.grouped()) == KVRT_SUCCESS);
    REQUIRE(op(p.plain()) == KVRT_SUCCESS);
    REQUIRE(kvrt::api::cache_of(p.grouped())->window_verify() == KVRT_SUCCESS);
}

std::vector<int32_t> range(int32_t first, int32_t n) {
    std::vector<int32_t> v;
    for (int32_t i = 0; i < n; ++i) v.push_back(first + i);
    return v;
}

}  // namespace

TEST_CASE("window group: context shifts, shared shifts, seq_div and compaction", "[window]") {
    GpuContext ctx;
    Pair p(ctx);
    // A prompt of 30 tokens, then 10 decoded one by one.
    p.store(range(0, 30), std::vector<int32_t>(30, 0));
    for (int32_t t = 30; t < 40; ++t) p.store({t}, {0});
    CHECK(p.compare({0}) == 2);

    // Context shift: keep 2, discard half of the rest, shift down.
    int32_t n_past = 0;
    both(p, [&](kvrt_cache c) { return kvrt_cache_context_shift(c, 0, 2, 0, &n_past); });
    CHECK(n_past == 21);
    CHECK(p.compare({0}) == 2);
    for (int32_t t = n_past; t < n_past + 6; ++t) p.store({t}, {0});
    CHECK(p.compare({0}) == 2);

    // Fork, then move positions of sequence 1 over cells both share: in the
    // cache a shared cell moves for both sequences.
    both(p, [](kvrt_cache c) { return kvrt_cache_seq_cp(c, 0, 1, -1, -1); });
    for (int32_t t = 27; t < 33; ++t) p.store({t}, {1});
    CHECK(p.compare({0, 1}) == 4);
    // Sequence 1 had dropped the cell at 20 from the group: the group cell,
    // now sequence 0's alone, follows its cell to 23 with a pending shift.
    both(p, [](kvrt_cache c) { return kvrt_cache_seq_add(c, 1, 20, -1, 3); });
    CHECK(p.compare({0, 1}) == 4);
    p.store({36}, {1});
    CHECK(p.compare({0, 1}) == 4);

    // SelfExtend grouping of sequence 0's middle (4..19 to 2..9: above the
    // sinks, which a group never lacks).
    both(p, [](kvrt_cache c) { return kvrt_cache_seq_div(c, 0, 4, 20, 2); });
    CHECK(p.compare({0, 1}) == 4);
    // Positions inside the window moved by seq_div: sequence 0 at 9 sees
    // 2..9, rows the group dropped long ago, and is refused there.
    CHECK(p.compare({0}, {9}) == 0);

    // Holes and compaction (the cache's cells move, the group's links follow).
    both(p, [](kvrt_cache c) { return kvrt_cache_seq_rm(c, 1, -1, -1); });
    uint32_t moved_a = 0, moved_b = 0;
    REQUIRE(kvrt_cache_compact(p.grouped(), nullptr, 0.0f, 0, &moved_a) == KVRT_SUCCESS);
    REQUIRE(kvrt_cache_compact(p.plain(), nullptr, 0.0f, 0, &moved_b) == KVRT_SUCCESS);
    CHECK(moved_a > 0);
    REQUIRE(kvrt::api::cache_of(p.grouped())->window_verify() == KVRT_SUCCESS);
    int32_t last = 0;
    REQUIRE(kvrt_cache_seq_pos_max(p.plain(), 0, &last) == KVRT_SUCCESS);
    p.store({last + 1}, {0});
    CHECK(p.compare({0}) == 2);
    // Reads after compaction: the windowed layer's rows of the last token
    // equal the plain cache's.
    std::vector<uint32_t> cells_a, cells_b;
    cells_a = p.store({last + 2}, {0}, nullptr, &cells_b);
    std::vector<float> ka(kRow), kb(kRow);
    REQUIRE(kvrt_cache_read(p.grouped(), 2, 1, cells_a.data(), ka.data(), bytes_of(ka), nullptr, 0) == KVRT_SUCCESS);
    REQUIRE(kvrt_cache_read(p.plain(), 2, 1, cells_b.data(), kb.data(), bytes_of(kb), nullptr, 0) == KVRT_SUCCESS);
    CHECK(ka == kb);
}

TEST_CASE("window group: token trees", "[window]") {
    GpuContext ctx;
    Pair p(ctx);
    p.store(range(0, 20), std::vector<int32_t>(20, 0));
    // A tree of 5 draft tokens after position 19: 20 <- 21 <- 22 and 20 <- 21' <- 22'.
    const std::vector<int32_t> pos = {20, 21, 22, 21, 22}, seqs(5, 0), parents = {-1, 0, 1, 0, 3};
    kvrt_batch_tree tree = KVRT_BATCH_TREE_INIT;
    tree.parents = parents.data();
    std::vector<uint32_t> cells_b;
    // Each cache gets its own cells: store returns them, and the tree's
    // attention and acceptance use them.
    kvrt_batch_tree t = tree;
    const std::vector<uint32_t> cells_a = p.store(pos, seqs, &t, &cells_b);
    std::vector<float> q(size_t{5} * kHeads * kDim);
    for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(0.17f * static_cast<float>(i));
    for (uint32_t l = 0; l < kLayers; ++l) {
        std::vector<float> a(q.size()), b(q.size());
        for (int which = 0; which < 2; ++which) {
            kvrt_batch_tree tt = tree;
            tt.cells = which == 0 ? cells_a.data() : cells_b.data();
            kvrt_batch qb = make_batch(5, pos.data(), seqs.data());
            qb.next = &tt;
            const kvrt_tensor_ref qt = host_tensor(q.data());
            const kvrt_output_ref ot = host_output(which == 0 ? a.data() : b.data());
            REQUIRE(kvrt_cache_attention(which == 0 ? p.grouped() : p.plain(), nullptr, static_cast<int32_t>(l), &qb,
                                         &qt, &ot, nullptr) == KVRT_SUCCESS);
        }
        CHECK(kvrt::ref::nmse(a, b) <= 1e-10);
    }
    // Keep the branch ending in 22' (token 4).
    const int32_t leaf = 4;
    for (int which = 0; which < 2; ++which) {
        kvrt_batch_tree tt = tree;
        tt.cells = which == 0 ? cells_a.data() : cells_b.data();
        kvrt_batch tb = make_batch(5, pos.data(), seqs.data());
        tb.next = &tt;
        REQUIRE(kvrt_cache_tree_accept(which == 0 ? p.grouped() : p.plain(), &tb, 1, &leaf) == KVRT_SUCCESS);
    }
    REQUIRE(kvrt::api::cache_of(p.grouped())->window_verify() == KVRT_SUCCESS);
    // The cache keeps 0..19 and the branch's 20, 21', 22'; the group the
    // sinks 0 and 1, 9..19 (the tree's lowest position 20 dropped 2..8) and
    // the branch.
    CHECK(kvrt::api::cache_of(p.grouped())->table().seq_cell_count(0) == 23);
    CHECK(kvrt::api::cache_of(p.grouped())->window_group()->table().seq_cell_count(0) == 16);
    p.store({23}, {0});
    CHECK(p.compare({0}) == 2);
}

TEST_CASE("window group: a failed store changes neither group", "[window]") {
    GpuContext ctx;
    kvrt_window_layout_desc wl = KVRT_WINDOW_LAYOUT_DESC_INIT;
    wl.cells = 32;
    wl.n_keep = 2;  // with windows of 12, positions up to 13 drop nothing
    Cache c = spec().group(wl.cells, wl.n_keep).create(ctx);
    const kvrt::cache::Cache& impl = *kvrt::api::cache_of(c);
    const std::vector<int32_t> pos0 = range(0, 10), seq0(10, 0);
    std::vector<float> k(size_t{kLayers} * 10 * kRow, 0.5f), v = k;
    kvrt_tensor_ref kt = host_tensor(k.data()), vt = host_tensor(v.data());
    kvrt_batch b0 = make_batch(10, pos0.data(), seq0.data());
    REQUIRE(kvrt_cache_store(c, nullptr, &b0, -1, &kt, &vt, nullptr) == KVRT_SUCCESS);

    // Two tokens within the window: the group drops nothing, so a failure
    // must leave both tables exactly as they were.
    const std::vector<int32_t> pos = {10, 11}, seqs = {0, 0};
    std::vector<float> k2(size_t{kLayers} * 2 * kRow, -1.0f), v2 = k2;
    const kvrt_tensor_ref kt2 = host_tensor(k2.data()), vt2 = host_tensor(v2.data());
    const kvrt_batch b = make_batch(2, pos.data(), seqs.data());
    const auto snapshot = [](const kvrt::kv::CellTable& t) {
        std::vector<int64_t> s(t.positions(), t.positions() + t.capacity());
        s.insert(s.end(), t.seq_words(), t.seq_words() + size_t{t.capacity()} * t.words_per_cell());
        s.push_back(t.used());
        return s;
    };
    uint32_t failures = 0;
    for (uint64_t n = 1;; ++n) {
        const auto before = snapshot(impl.table()), group_before = snapshot(impl.window_group()->table());
        uint64_t passed = 0;
        const kvrt_result r =
            with_fault_point(n, &passed, [&] { return kvrt_cache_store(c, nullptr, &b, -1, &kt2, &vt2, nullptr); });
        if (r == KVRT_SUCCESS) {
            CHECK(passed < n);
            break;
        }
        INFO("fault point " << n << ": " << kvrt_last_error_message());
        ++failures;
        REQUIRE(snapshot(impl.table()) == before);
        REQUIRE(snapshot(impl.window_group()->table()) == group_before);
        REQUIRE(impl.window_verify() == KVRT_SUCCESS);
        REQUIRE(n < 200);
    }
    CHECK(failures > 0);
    // And with a stream whose submission fails: the cells taken at recording
    // are given back in both groups.
    kvrt_stream s = nullptr;
    REQUIRE(kvrt_stream_create(ctx, nullptr, &s) == KVRT_SUCCESS);
    const std::vector<int32_t> pos3 = {12, 13};
    const kvrt_batch b3 = make_batch(2, pos3.data(), seqs.data());
    const auto before = snapshot(impl.table()), group_before = snapshot(impl.window_group()->table());
    REQUIRE(kvrt_stream_begin(s) == KVRT_SUCCESS);
    REQUIRE(kvrt_cache_store(c, s, &b3, -1, &kt2, &vt2, nullptr) == KVRT_SUCCESS);
    CHECK(impl.window_group()->table().used() == 14);
    uint32_t submit_failed = 0;
    for (uint64_t n = 1; n < 20 && !submit_failed; ++n) {
        kvrt::fault::arm(n);
        const kvrt_result r = kvrt_stream_submit(s);
        kvrt::fault::arm(0);
        if (r != KVRT_SUCCESS) submit_failed = 1;
        else break;
    }
    REQUIRE(submit_failed == 1);
    CHECK(snapshot(impl.table()) == before);
    CHECK(snapshot(impl.window_group()->table()) == group_before);
    REQUIRE(impl.window_verify() == KVRT_SUCCESS);
    kvrt_stream_destroy(s);
}

TEST_CASE("window group: a shift that frees a group cell other sequences share", "[window]") {
    GpuContext ctx;
    Pair p(ctx);
    p.store(range(0, 20), std::vector<int32_t>(20, 0));
    both(p, [](kvrt_cache c) { return kvrt_cache_seq_cp(c, 0, 1, -1, -1); });
    both(p, [](kvrt_cache c) { return kvrt_cache_seq_cp(c, 0, 2, -1, -1); });
    // Sequence 2 goes on alone: the group drops it from the shared cells
    // below 24, which sequences 0 and 1 still hold there.
    for (int32_t t = 20; t < 36; ++t) p.store({t}, {2});
    CHECK(p.compare({0, 1, 2}) == 6);
    // Moving sequence 2's positions from 10 on moves the shared cells 10..19
    // for all three; their group cells (sequences 0 and 1 only) cannot
    // follow and are freed, so the windows of 0 and 1 that reach them are
    // refused from now on (never answered without them).
    both(p, [](kvrt_cache c) { return kvrt_cache_seq_add(c, 2, 10, -1, 5); });
    CHECK(p.compare({0, 1}) == 0);
    CHECK(p.compare({2}) == 2);
}

namespace {

// Every sequence's attention at positions 0, 3, ... max in every layer of
// two caches with the same windows.
AttentionGrid grid(int32_t max_pos) {
    AttentionGrid g;
    g.seqs = 3;
    g.heads = kHeads;
    g.head_dim_k = g.head_dim_v = kDim;
    g.layer_windows = kWindows;
    g.max_pos = max_pos;
    g.step = 3;
    g.params.n_keep = 2;
    return g;
}

}  // namespace

TEST_CASE("window group: state save and load keep exactly what the group holds", "[window][state]") {
    GpuContext ctx;
    Pair p(ctx);
    // Sequence 0: a prompt, then decoding (the group drops its early rows);
    // sequence 1 a fork of it that goes on; sequence 2 a short prompt.
    p.store(range(0, 20), std::vector<int32_t>(20, 0));
    for (int32_t t = 20; t < 34; ++t) p.store({t}, {0});
    both(p, [](kvrt_cache c) { return kvrt_cache_seq_cp(c, 0, 1, -1, -1); });
    for (int32_t t = 34; t < 38; ++t) p.store({t}, {1});
    p.store(range(0, 5), std::vector<int32_t>(5, 2));
    const kvrt_cache g = p.grouped();

    // Version 3, and smaller than the same cache's state without the group:
    // the windowed layers carry the group's rows only.
    const std::vector<uint8_t> state = save_state(g, -1);
    CHECK(state[8] == 3);
    CHECK(state.size() < save_state(p.plain(), -1).size());

    kvrt_window_layout_desc wl = KVRT_WINDOW_LAYOUT_DESC_INIT;
    wl.cells = 48;
    wl.n_keep = 2;
    Cache loaded = spec().group(wl.cells, wl.n_keep).create(ctx);
    KVRT_REQUIRE_OK(kvrt_cache_state_load(loaded, -1, state.data(), state.size()));
    REQUIRE(kvrt::api::cache_of(loaded)->window_verify() == KVRT_SUCCESS);
    CHECK(kvrt::api::cache_of(loaded)->window_group()->table().used() == kvrt::api::cache_of(g)->window_group()->table().used());
    for (int32_t s = 0; s < 3; ++s) {
        int32_t a = -1, b = -2;
        KVRT_REQUIRE_OK(kvrt_cache_seq_window_pos_min(g, s, &a));
        KVRT_REQUIRE_OK(kvrt_cache_seq_window_pos_min(loaded, s, &b));
        CHECK(a == b);
    }
    // Answered and refused alike, with the same values; and both go on alike.
    CHECK(same_attention(g, loaded, grid(40)) > 20);
    for (kvrt_cache c : {g, loaded.get()}) {
        const int32_t pos = 38, seq = 1;
        std::vector<float> k(size_t{kLayers} * kRow, 0.25f), v = k;
        const kvrt_tensor_ref kt = host_tensor(k.data()), vt = host_tensor(v.data());
        const kvrt_batch b = make_batch(1, &pos, &seq);
        KVRT_REQUIRE_OK(kvrt_cache_store(c, nullptr, &b, -1, &kt, &vt, nullptr));
    }
    CHECK(same_attention(g, loaded, grid(40)) > 20);

    // One sequence: swapped out and back in, it is what it was.
    const std::vector<uint8_t> before_swap = save_state(g, -1);
    uint64_t size = 0;
    KVRT_REQUIRE_OK(kvrt_cache_seq_swap_out(g, 1, nullptr, &size));
    std::vector<uint8_t> swapped(size);
    KVRT_REQUIRE_OK(kvrt_cache_seq_swap_out(g, 1, swapped.data(), &size));
    CHECK(swapped[8] == 3);
    int32_t last = 0;
    KVRT_REQUIRE_OK(kvrt_cache_seq_pos_max(g, 1, &last));
    CHECK(last == -1);
    KVRT_REQUIRE_OK(kvrt_cache_seq_swap_in(g, 1, swapped.data(), swapped.size()));
    REQUIRE(kvrt::api::cache_of(g)->window_verify() == KVRT_SUCCESS);
    CHECK(same_attention(g, loaded, grid(40)) > 20);

    // A state without a group loads into a cache with one: the group takes
    // every row (nothing was dropped), and answers as the plain cache does.
    const std::vector<uint8_t> plain_state = save_state(p.plain(), -1);
    CHECK(plain_state[8] == 1);
    // (44 cells: a group of 40 is too small, and the load changes nothing.)
    kvrt_window_layout_desc small = wl;
    small.cells = 40;
    Cache from_plain = spec().group(small.cells, small.n_keep).create(ctx);
    CHECK(kvrt_cache_state_load(from_plain, -1, plain_state.data(), plain_state.size()) == KVRT_ERROR_CACHE_FULL);
    kvrt_cache_info info = KVRT_CACHE_INFO_INIT;
    KVRT_REQUIRE_OK(kvrt_cache_get_info(from_plain, &info));
    CHECK(info.used == 0);
    kvrt_window_layout_desc big = wl;
    big.cells = 128;
    Cache roomy = spec().group(big.cells, big.n_keep).create(ctx);
    KVRT_REQUIRE_OK(kvrt_cache_state_load(roomy, -1, plain_state.data(), plain_state.size()));
    REQUIRE(kvrt::api::cache_of(roomy)->window_verify() == KVRT_SUCCESS);
    CHECK(same_attention(p.plain(), roomy, grid(40)) > 60);

    // A group's state needs a cache with the same group.
    CHECK(kvrt_cache_state_load(p.plain(), -1, state.data(), state.size()) == KVRT_ERROR_INVALID_ARGUMENT);

    // A load that fails at any point changes nothing: both tables and the
    // links (window_verify) stay, and so do the answers.
    const auto snapshot = [](const kvrt::kv::CellTable& t) {
        std::vector<int64_t> v(t.positions(), t.positions() + t.capacity());
        v.insert(v.end(), t.seq_words(), t.seq_words() + size_t{t.capacity()} * t.words_per_cell());
        return v;
    };
    uint32_t failures = 0;
    for (uint64_t n = 1;; ++n) {
        const auto main_before = snapshot(kvrt::api::cache_of(roomy)->table());
        const auto group_before = snapshot(kvrt::api::cache_of(roomy)->window_group()->table());
        kvrt::fault::arm(n);
        const kvrt_result r = kvrt_cache_state_load(roomy, -1, state.data(), state.size());
        kvrt::fault::arm(0);
        if (r == KVRT_SUCCESS || r == KVRT_ERROR_TIMEOUT) break;
        INFO("fault point " << n << ": " << kvrt_last_error_message());
        ++failures;
        REQUIRE(snapshot(kvrt::api::cache_of(roomy)->table()) == main_before);
        REQUIRE(snapshot(kvrt::api::cache_of(roomy)->window_group()->table()) == group_before);
        REQUIRE(kvrt::api::cache_of(roomy)->window_verify() == KVRT_SUCCESS);
        REQUIRE(n < 200);
    }
    CHECK(failures > 0);
    REQUIRE(kvrt::api::cache_of(roomy)->window_verify() == KVRT_SUCCESS);
    // (The state is from before the store at 38 and the swap.)
    Cache again = spec().group(wl.cells, wl.n_keep).create(ctx);
    KVRT_REQUIRE_OK(kvrt_cache_state_load(again, -1, state.data(), state.size()));
    CHECK(same_attention(again, roomy, grid(40)) > 20);
    REQUIRE(ctx.validation_errors() == 0);
}
