// Token trees (kvrt_batch_tree): random draft trees over several sequences,
// stored in one batch, verified by one attention against the double
// reference, then accepted branch by branch; and the rules that refuse a
// malformed tree or a stale one without changing anything.
//
// The reference's inputs come from this test's own model of the cells (built
// from the cells kvrt_cache_store returned and the rules of kvrt.h), not from
// the cache's table; K and V are the cache's own rows, dequantized.
#include "gpu_test.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/random.hpp"
#include "reference/attention.hpp"
#include "reference/metrics.hpp"

using namespace kvrt_test;

namespace {

// The cache of these tests: 1 layer, 4 query and 2 KV heads, head dims 64,
// 384 cells for 4 sequences, F16.
struct Geometry : CacheSpec {
    Geometry() { shape(1, 4, 2, 64, 64).cells(384, 4); }
};

// The cells as the test models them.
struct Model {
    std::vector<int32_t> pos;
    std::vector<std::vector<int32_t>> seqs;
    explicit Model(uint32_t capacity) : pos(capacity, -1), seqs(capacity) {}
    uint32_t used() const {
        return static_cast<uint32_t>(std::count_if(pos.begin(), pos.end(), [](int32_t p) { return p >= 0; }));
    }
    int32_t pos_max(int32_t seq) const {
        int32_t m = -1;
        for (size_t c = 0; c < pos.size(); ++c)
            if (std::find(seqs[c].begin(), seqs[c].end(), seq) != seqs[c].end()) m = std::max(m, pos[c]);
        return m;
    }
};

// A batch of tokens, a token tree when `parents` is not empty.
struct Tokens {
    std::vector<int32_t> pos, seq, parents;
    std::vector<uint32_t> cells;
    uint32_t size() const { return static_cast<uint32_t>(pos.size()); }
};

// Chains `tree` (parents and cells of `t`) on `b` when `t` is a tree.
kvrt_batch batch_of(const Tokens& t, kvrt_batch_tree* tree) {
    kvrt_batch b = make_batch(t.size(), t.pos.data(), t.seq.data());
    if (!t.parents.empty()) {
        *tree = KVRT_BATCH_TREE_INIT;
        tree->parents = t.parents.data();
        tree->cells = t.cells.empty() ? nullptr : t.cells.data();
        b.next = tree;
    }
    return b;
}

// Stores `t` with random K/V; fills t.cells and the model.
void store(kvrt_cache cache, const Geometry& g, Tokens& t, Model& m, Rng& rng) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> k(size_t{t.size()} * g.kv_heads * g.dk), v(k.size());
    for (auto& x : k) x = normal(rng);
    for (auto& x : v) x = normal(rng);
    t.cells.assign(t.size(), 0);
    std::vector<uint32_t> cells(t.size());
    kvrt_batch_tree tree;
    const Tokens shape{t.pos, t.seq, t.parents, {}};
    const kvrt_batch b = batch_of(shape, &tree);
    const kvrt_tensor_ref kr = host_tensor(k.data()), vr = host_tensor(v.data());
    KVRT_REQUIRE_OK(kvrt_cache_store(cache, nullptr, &b, -1, &kr, &vr, cells.data()));
    t.cells = cells;
    for (uint32_t i = 0; i < t.size(); ++i) {
        REQUIRE(m.pos[cells[i]] < 0);
        m.pos[cells[i]] = t.pos[i];
        m.seqs[cells[i]] = {t.seq[i]};
    }
}

// Every sequence in `seqs` gets a random tree of 1..max_tokens tokens below
// its next position; the trees are interleaved with parents first.
Tokens random_forest(Rng& rng, const Model& m, const std::vector<int32_t>& seqs, uint32_t max_tokens) {
    struct Local {
        std::vector<int32_t> pos, parent;  // parent: index within the sequence's tree
    };
    std::vector<Local> trees(seqs.size());
    for (size_t s = 0; s < seqs.size(); ++s) {
        const int32_t base = m.pos_max(seqs[s]) + 1;
        const uint32_t n = 1 + static_cast<uint32_t>(rng() % max_tokens);
        for (uint32_t i = 0; i < n; ++i) {
            // Mostly chains and bushes below earlier tokens; a few more roots.
            const int32_t parent = i == 0 || rng() % 6 == 0 ? -1 : static_cast<int32_t>(rng() % i);
            trees[s].parent.push_back(parent);
            trees[s].pos.push_back(parent < 0 ? base : trees[s].pos[static_cast<size_t>(parent)] + 1);
        }
    }
    Tokens t;
    std::vector<size_t> next(seqs.size(), 0);
    std::vector<std::vector<int32_t>> index(seqs.size());  // local -> batch index
    for (;;) {
        std::vector<size_t> open;
        for (size_t s = 0; s < seqs.size(); ++s)
            if (next[s] < trees[s].pos.size()) open.push_back(s);
        if (open.empty()) break;
        const size_t s = open[rng() % open.size()];
        const size_t i = next[s]++;
        const int32_t lp = trees[s].parent[i];
        index[s].push_back(static_cast<int32_t>(t.size()));
        t.parents.push_back(lp < 0 ? -1 : index[s][static_cast<size_t>(lp)]);
        t.pos.push_back(trees[s].pos[i]);
        t.seq.push_back(seqs[s]);
    }
    return t;
}

// Runs attention for `queries` (a tree when it has parents) and compares it
// with the reference over the modelled cells; returns the NMSE.
double check_attention(kvrt_context ctx, kvrt_cache cache, const Geometry& g, const Tokens& queries, const Model& m,
                       Rng& rng, std::vector<float>* out_values = nullptr) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const uint32_t nq = queries.size();
    std::vector<float> q(size_t{nq} * g.heads * g.dk), out(q.size(), -7.0f);
    for (auto& x : q) x = normal(rng);
    kvrt_batch_tree tree;
    const kvrt_batch b = batch_of(queries, &tree);
    const kvrt_tensor_ref qr = host_tensor(q.data());
    const kvrt_output_ref orf = host_output(out.data());
    KVRT_REQUIRE_OK(kvrt_cache_attention(cache, nullptr, 0, &b, &qr, &orf, nullptr));
    (void)ctx;

    std::vector<uint32_t> all(g.capacity);
    for (uint32_t c = 0; c < g.capacity; ++c) all[c] = c;
    std::vector<float> k(size_t{g.capacity} * g.kv_heads * g.dk), v(k.size());
    KVRT_REQUIRE_OK(kvrt_cache_read(cache, 0, g.capacity, all.data(), k.data(), bytes_of(k), v.data(), bytes_of(v)));
    std::vector<kvrt::ref::AttnCell> cells(g.capacity);
    for (uint32_t c = 0; c < g.capacity; ++c) cells[c] = {m.pos[c], m.seqs[c]};
    // Of the tree's cells, query i sees its ancestors' and its own.
    std::vector<std::vector<uint8_t>> hidden(nq);
    std::vector<kvrt::ref::AttnQuery> rq(nq);
    for (uint32_t i = 0; i < nq; ++i) {
        rq[i] = {queries.pos[i], queries.seq[i]};
        if (queries.parents.empty()) continue;
        hidden[i].assign(g.capacity, 0);
        std::vector<uint8_t> ancestor(nq, 0);
        for (int32_t a = static_cast<int32_t>(i); a >= 0; a = queries.parents[static_cast<size_t>(a)])
            ancestor[static_cast<size_t>(a)] = 1;
        for (uint32_t j = 0; j < nq; ++j) hidden[i][queries.cells[j]] = ancestor[j] ? 0 : 1;
        rq[i].hidden = &hidden[i];
    }
    kvrt::ref::AttnParams p;
    p.n_heads = static_cast<int>(g.heads);
    p.n_kv_heads = static_cast<int>(g.kv_heads);
    p.head_dim_k = p.head_dim_v = static_cast<int>(g.dk);
    p.scale = 1.0 / std::sqrt(static_cast<double>(g.dk));
    const std::vector<double> want = kvrt::ref::attention(p, q.data(), rq, k.data(), v.data(), cells);
    if (out_values) *out_values = out;
    return kvrt::ref::nmse(out, want);
}

// The tokens of `t` that accept(leaves) keeps, as this test reads the rule.
std::vector<uint8_t> kept_by(const Tokens& t, const std::vector<int32_t>& leaves) {
    std::vector<uint8_t> keep(t.size(), 0);
    for (int32_t leaf : leaves)
        for (int32_t a = leaf; a >= 0; a = t.parents[static_cast<size_t>(a)]) keep[static_cast<size_t>(a)] = 1;
    return keep;
}

uint32_t used(kvrt_cache cache) {
    kvrt_cache_info info = KVRT_CACHE_INFO_INIT;
    REQUIRE(kvrt_cache_get_info(cache, &info) == KVRT_SUCCESS);
    return info.used;
}

// Rounds of: a random forest over every sequence, its attention against the
// reference, acceptance of one random branch per sequence (or none), then a
// decode query per sequence that must see the accepted branches only.
void run_rounds(kvrt_context ctx, const Geometry& g, uint32_t seed, int rounds) {
    Rng rng(seed);
    Cache cache = g.create(ctx);
    Model m(g.capacity);
    std::vector<int32_t> seqs;
    for (uint32_t s = 0; s < g.max_seqs; ++s) {
        seqs.push_back(static_cast<int32_t>(s));
        Tokens prompt;
        const uint32_t n = 10 + static_cast<uint32_t>(rng() % 30);
        for (uint32_t i = 0; i < n; ++i) {
            prompt.pos.push_back(static_cast<int32_t>(i));
            prompt.seq.push_back(static_cast<int32_t>(s));
        }
        store(cache, g, prompt, m, rng);
    }
    for (int round = 0; round < rounds; ++round) {
        Tokens t = random_forest(rng, m, seqs, 12);
        store(cache, g, t, m, rng);
        CHECK(used(cache) == m.used());
        const double tree_nmse = check_attention(ctx, cache, g, t, m, rng);
        INFO("round " << round << ": " << t.size() << " tree tokens");
        CHECK(tree_nmse <= 1e-6);

        // One random leaf per sequence, or none (the whole draft rejected).
        std::vector<int32_t> leaves;
        for (int32_t s : seqs) {
            std::vector<int32_t> mine;
            for (uint32_t i = 0; i < t.size(); ++i)
                if (t.seq[i] == s) mine.push_back(static_cast<int32_t>(i));
            if (rng() % 5 != 0) leaves.push_back(mine[rng() % mine.size()]);
        }
        kvrt_batch_tree tree;
        const kvrt_batch b = batch_of(t, &tree);
        KVRT_REQUIRE_OK(kvrt_cache_tree_accept(cache, &b, static_cast<uint32_t>(leaves.size()), leaves.data()));
        const std::vector<uint8_t> keep = kept_by(t, leaves);
        for (uint32_t i = 0; i < t.size(); ++i)
            if (!keep[i]) {
                m.pos[t.cells[i]] = -1;
                m.seqs[t.cells[i]].clear();
            }
        CHECK(used(cache) == m.used());
        for (int32_t s : seqs) {
            int32_t got = -2;
            REQUIRE(kvrt_cache_seq_pos_max(cache, s, &got) == KVRT_SUCCESS);
            CHECK(got == m.pos_max(s));
        }

        // The next token of every sequence, an ordinary batch: its position
        // is free again, and its query sees the accepted branch only.
        Tokens next;
        for (int32_t s : seqs) {
            next.pos.push_back(m.pos_max(s) + 1);
            next.seq.push_back(s);
        }
        store(cache, g, next, m, rng);
        const double decode_nmse = check_attention(ctx, cache, g, next, m, rng);
        CHECK(decode_nmse <= 1e-6);
    }
}

}  // namespace

TEST_CASE("tree attention matches the reference for random trees, and accepting keeps one branch",
          "[attention][tree]") {
    KVRT_EACH_KERNEL_VARIANT(variant);
    GpuContext ctx(variant.flags);
    Geometry g;
    run_rounds(ctx, g, 7, 4);
    g.type(KVRT_TYPE_Q8_0);
    g.heads = 8;
    g.kv_heads = 1;
    run_rounds(ctx, g, 8, 2);
    CHECK(ctx.validation_errors() == 0);
}

TEST_CASE("the tiled kernel honours token trees", "[attention][tree][kernels]") {
    GpuContext ctx(KVRT_CONTEXT_TILED_KERNELS);  // the flag stands whatever KVRT_KERNELS says
    Geometry g;
    run_rounds(ctx, g, 9, 3);
    CHECK(ctx.validation_errors() == 0);
}

TEST_CASE("a tree that breaks the rules is refused and nothing changes", "[attention][tree][bad_input]") {
    GpuContext ctx;
    Geometry g;
    Rng rng(3);
    Cache cache = g.create(ctx);
    Model m(g.capacity);
    Tokens prompt{{0, 1, 2, 3}, {0, 0, 0, 0}, {}, {}};
    store(cache, g, prompt, m, rng);
    const uint32_t before = used(cache);
    std::vector<float> kv(size_t{2048} * g.kv_heads * g.dk, 0.5f);
    const kvrt_tensor_ref kr = host_tensor(kv.data()), vr = host_tensor(kv.data());

    const auto refused = [&](Tokens t, const char* why, kvrt_result expect = KVRT_ERROR_INVALID_ARGUMENT) {
        INFO(why);
        kvrt_batch_tree tree;
        kvrt_batch b = batch_of(t, &tree);
        std::vector<uint32_t> cells(t.size());
        CHECK(kvrt_cache_store(cache, nullptr, &b, -1, &kr, &vr, cells.data()) == expect);
        CHECK(kvrt_cache_place(cache, &b, cells.data()) == expect);
        CHECK(used(cache) == before);
    };
    refused({{4, 5}, {0, 0}, {-1, 1}, {}}, "a parent that is not earlier");
    refused({{4, 5}, {0, 0}, {-1, 0 - 2}, {}}, "a parent below -1");
    refused({{4, 5}, {0, 1}, {-1, 0}, {}}, "a parent in another sequence");
    refused({{4, 4}, {0, 0}, {-1, 0}, {}}, "a position not above the parent's");
    refused({{4, 2, 3}, {0, 0, 0}, {-1, -1, 1}, {}}, "a position already in the cache (2)");
    {
        Tokens big;
        for (int32_t i = 0; i < 1025; ++i) {
            big.pos.push_back(4 + i);
            big.seq.push_back(0);
            big.parents.push_back(i - 1);
        }
        refused(big, "more than KVRT_MAX_TREE_TOKENS tokens");
    }
    {
        INFO("two sequences on one tree token");
        const int32_t pos[2] = {4, 5}, ids[3] = {0, 1, 0};
        const uint32_t counts[2] = {2, 1};
        const int32_t parents[2] = {-1, 0};
        kvrt_batch b = make_batch(2, pos, ids, counts);
        kvrt_batch_tree tree = KVRT_BATCH_TREE_INIT;
        tree.parents = parents;
        b.next = &tree;
        CHECK(kvrt_cache_place(cache, &b, nullptr) == KVRT_ERROR_INVALID_ARGUMENT);
        tree.parents = nullptr;
        CHECK(kvrt_cache_place(cache, &b, nullptr) == KVRT_ERROR_INVALID_ARGUMENT);
        CHECK(used(cache) == before);
    }
    // Without a tree, siblings' shared positions stay refused.
    refused({{4, 4}, {0, 0}, {}, {}}, "a repeated pair without a tree");

    // A well-formed tree: two siblings at position 4, a child of the second.
    Tokens t{{4, 4, 5}, {0, 0, 0}, {-1, -1, 1}, {}};
    store(cache, g, t, m, rng);
    CHECK(used(cache) == before + 3);
    CHECK(check_attention(ctx, cache, g, t, m, rng) <= 1e-6);

    // Attention with a tree whose cells do not hold its tokens.
    {
        std::vector<float> q(size_t{3} * g.heads * g.dk, 0.1f), out(q.size());
        const kvrt_tensor_ref qr = host_tensor(q.data());
        const kvrt_output_ref orf = host_output(out.data());
        Tokens wrong = t;
        std::swap(wrong.cells[0], wrong.cells[2]);  // positions 4 and 5 swapped
        kvrt_batch_tree tree;
        kvrt_batch b = batch_of(wrong, &tree);
        CHECK(kvrt_cache_attention(cache, nullptr, 0, &b, &qr, &orf, nullptr) == KVRT_ERROR_INVALID_ARGUMENT);
        wrong.cells = t.cells;
        wrong.cells[1] = wrong.cells[0];  // two tokens in one cell
        b = batch_of(wrong, &tree);
        CHECK(kvrt_cache_attention(cache, nullptr, 0, &b, &qr, &orf, nullptr) == KVRT_ERROR_INVALID_ARGUMENT);
        b = batch_of(t, &tree);
        tree.cells = nullptr;
        CHECK(kvrt_cache_attention(cache, nullptr, 0, &b, &qr, &orf, nullptr) == KVRT_ERROR_INVALID_ARGUMENT);
    }

    // Accepting: bad leaves, no tree, a stale token: refused, nothing changes.
    kvrt_batch_tree tree;
    kvrt_batch b = batch_of(t, &tree);
    const int32_t leaf_out[1] = {3}, leaf_ok[1] = {2};
    CHECK(kvrt_cache_tree_accept(cache, &b, 1, leaf_out) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(kvrt_cache_tree_accept(cache, &b, 1, nullptr) == KVRT_ERROR_INVALID_ARGUMENT);
    kvrt_batch plain = make_batch(t.size(), t.pos.data(), t.seq.data());
    CHECK(kvrt_cache_tree_accept(cache, &plain, 1, leaf_ok) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(used(cache) == before + 3);
    // Sequence 0 gives up position 5 (token 2) behind the tree's back.
    REQUIRE(kvrt_cache_seq_rm(cache, 0, 5, 6) == KVRT_SUCCESS);
    CHECK(kvrt_cache_tree_accept(cache, &b, 1, leaf_ok) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(used(cache) == before + 2);
    // Without the stale token, accepting token 1 drops its sibling, token 0.
    Tokens rest{{4, 4}, {0, 0}, {-1, -1}, {t.cells[0], t.cells[1]}};
    b = batch_of(rest, &tree);
    const int32_t leaf_1[1] = {1};
    KVRT_REQUIRE_OK(kvrt_cache_tree_accept(cache, &b, 1, leaf_1));
    CHECK(used(cache) == before + 1);
    int32_t max_pos = -1;
    REQUIRE(kvrt_cache_seq_pos_max(cache, 0, &max_pos) == KVRT_SUCCESS);
    CHECK(max_pos == 4);

    // The static layout keeps one position per row of a window: no trees.
    Cache st = CacheSpec(g).static_layout(65).cells(0, g.max_seqs).create(ctx);  // capacity: max_seqs * (seq_len - 1)
    Tokens st_tree{{0, 0}, {0, 0}, {-1, -1}, {}};
    kvrt_batch_tree st_chain;
    const kvrt_batch sb = batch_of(st_tree, &st_chain);
    CHECK(kvrt_cache_store(st, nullptr, &sb, -1, &kr, &vr, nullptr) == KVRT_ERROR_UNSUPPORTED);
    CHECK(kvrt_cache_place(st, &sb, nullptr) == KVRT_ERROR_UNSUPPORTED);
    CHECK(ctx.validation_errors() == 0);
}

TEST_CASE("a cache with an open tree saves and loads, and attends the same", "[attention][tree][state]") {
    GpuContext ctx;
    Geometry g;
    Rng rng(21);
    Cache cache = g.create(ctx);
    Model m(g.capacity);
    Tokens prompt{{0, 1, 2, 3, 4, 5}, {0, 0, 0, 0, 0, 0}, {}, {}};
    store(cache, g, prompt, m, rng);
    Tokens t = random_forest(rng, m, {0}, 12);
    t.pos.push_back(6);  // and a sibling at position 6 for sure
    t.seq.push_back(0);
    t.parents.push_back(-1);
    store(cache, g, t, m, rng);

    uint64_t size = 0;
    KVRT_REQUIRE_OK(kvrt_cache_state_save(cache, -1, nullptr, &size));
    std::vector<uint8_t> state(size);
    KVRT_REQUIRE_OK(kvrt_cache_state_save(cache, -1, state.data(), &size));
    Cache loaded = g.create(ctx);
    KVRT_REQUIRE_OK(kvrt_cache_state_load(loaded, -1, state.data(), size));
    CHECK(used(loaded) == used(cache));

    Rng rng_a(5), rng_b(5);
    std::vector<float> a, b;
    CHECK(check_attention(ctx, cache, g, t, m, rng_a, &a) <= 1e-6);
    CHECK(check_attention(ctx, loaded, g, t, m, rng_b, &b) <= 1e-6);
    CHECK(a == b);
    CHECK(ctx.validation_errors() == 0);
}
