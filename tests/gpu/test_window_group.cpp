// Windowed layers in a group of their own (kvrt_window_layout_desc): memory,
// the rows dropped out of every window, the refusals that protect them, and
// random schedules checked against a model and the double reference.
//
// The model keeps, per sequence, position -> token for the cache and for the
// group. It drops the group's positions as the contract says (at a
// placement with lowest position m: positions n_keep..m-W) and predicts every
// refusal (a window that reaches a dropped position, a full group). Attention
// of every layer must match the double reference computed from the model's
// tokens alone, with each layer's window and the sinks.
#include "gpu_test.hpp"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "api/handles.hpp"
#include "common/random.hpp"
#include "reference/attention.hpp"
#include "reference/metrics.hpp"

using namespace kvrt_test;

namespace {

constexpr uint32_t kHeads = 4, kKvHeads = 2, kDim = 32;
constexpr uint32_t kRow = kKvHeads * kDim;

// Values exact in f16 (multiples of 1/64 in [-2, 2]), unique per (token,
// layer, array, element) up to collisions that do not matter.
float value(uint32_t token, uint32_t layer, uint32_t array, uint32_t e) {
    uint64_t h = (uint64_t{token} * 0x9E3779B97F4A7C15ull) ^ (uint64_t{layer} << 40) ^ (uint64_t{array} << 48) ^ e;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    return static_cast<float>(static_cast<int32_t>(h % 257) - 128) / 64.0f;
}

std::vector<float> rows(const std::vector<uint32_t>& tokens, uint32_t layers, uint32_t array) {
    std::vector<float> out(tokens.size() * layers * kRow);
    // Layer-major: layer l's rows of every token, then layer l + 1's.
    for (uint32_t l = 0; l < layers; ++l)
        for (size_t t = 0; t < tokens.size(); ++t)
            for (uint32_t e = 0; e < kRow; ++e) out[(l * tokens.size() + t) * kRow + e] = value(tokens[t], l, array, e);
    return out;
}

// A cache of these tests: one layer per window, `capacity` cells; .group()
// adds the window group.
CacheSpec spec(const std::vector<uint32_t>& windows, uint32_t capacity, uint32_t max_seqs) {
    CacheSpec sp;
    sp.shape(static_cast<uint32_t>(windows.size()), kHeads, kKvHeads, kDim).cells(capacity, max_seqs);
    sp.windows = windows;
    sp.label = "window group test";
    return sp;
}

// Stores `tokens` of one sequence at `positions`, every layer at once.
kvrt_result store(kvrt_cache c, uint32_t layers, const std::vector<uint32_t>& tokens,
                  const std::vector<int32_t>& positions, const std::vector<int32_t>& seqs,
                  std::vector<uint32_t>* cells = nullptr) {
    const std::vector<float> k = rows(tokens, layers, 0), v = rows(tokens, layers, 1);
    const kvrt_batch b = make_batch(static_cast<uint32_t>(tokens.size()), positions.data(), seqs.data());
    const kvrt_tensor_ref kt = host_tensor(k.data()), vt = host_tensor(v.data());
    std::vector<uint32_t> out(tokens.size());
    const kvrt_result r = kvrt_cache_store(c, nullptr, &b, -1, &kt, &vt, out.data());
    if (cells) *cells = out;
    return r;
}

kvrt::cache::Cache& impl(kvrt_cache c) { return *kvrt::api::cache_of(c); }

}  // namespace

TEST_CASE("window group: memory follows the window, not the capacity", "[window]") {
    GpuContext ctx;
    // A Gemma-2-like geometry: every other layer windowed.
    const std::vector<uint32_t> windows = {0, 64, 0, 64};
    kvrt_window_layout_desc wl = KVRT_WINDOW_LAYOUT_DESC_INIT;
    kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
    d.n_layers = 4;
    d.n_heads = kHeads;
    d.n_kv_heads = kKvHeads;
    d.head_dim_k = kDim;
    d.capacity = 4096;
    d.max_seqs = 2;
    d.layer_windows = windows.data();
    kvrt_cache_estimate plain = KVRT_CACHE_ESTIMATE_INIT, grouped = KVRT_CACHE_ESTIMATE_INIT;
    REQUIRE(kvrt_cache_estimate_size(ctx, &d, &plain) == KVRT_SUCCESS);
    d.next = &wl;
    REQUIRE(kvrt_cache_estimate_size(ctx, &d, &grouped) == KVRT_SUCCESS);
    // The group: 2 * 64 + 512 = 640 cells of 2 layers instead of 4096.
    const uint64_t row = uint64_t{kRow} * 2 * 2;  // f16 K and V of one layer
    CHECK(plain.data_bytes == 4 * 4096 * row);
    CHECK(grouped.data_bytes == 2 * 4096 * row + 2 * 640 * row);
    CHECK(grouped.device_bytes < plain.device_bytes * 6 / 10);

    const uint64_t before = device_bytes(ctx);
    Cache c;
    REQUIRE(kvrt_cache_create(ctx, &d, c.out()) == KVRT_SUCCESS);
    kvrt_cache_info info = KVRT_CACHE_INFO_INIT;
    REQUIRE(kvrt_cache_get_info(c, &info) == KVRT_SUCCESS);
    CHECK(info.device_bytes == grouped.device_bytes);
    CHECK(device_bytes(ctx) - before == grouped.device_bytes);
    REQUIRE(impl(c).window_group() != nullptr);
    CHECK(impl(c).window_group()->table().capacity() == 640);
}

TEST_CASE("window group: dropped rows, refusals and reads", "[window]") {
    GpuContext ctx;
    const std::vector<uint32_t> windows = {0, 16};
    Cache c = spec(windows, 256, 1).group(0, 2).create(ctx);
    const std::vector<int32_t> seq0 = {0};
    // 100 tokens, one by one (decode).
    std::vector<uint32_t> cell_of(100);
    for (int32_t p = 0; p < 100; ++p) {
        std::vector<uint32_t> cells;
        REQUIRE(store(c, 2, {static_cast<uint32_t>(p)}, {p}, seq0, &cells) == KVRT_SUCCESS);
        cell_of[static_cast<size_t>(p)] = cells[0];
        REQUIRE(impl(c).window_verify() == KVRT_SUCCESS);
    }
    // The last placement (99) dropped 2..83: the group holds 0, 1 and 84..99.
    CHECK(impl(c).window_group()->table().used() == 18);
    int32_t from = -1;
    REQUIRE(kvrt_cache_seq_window_pos_min(c, 0, &from) == KVRT_SUCCESS);
    CHECK(from == 84);
    REQUIRE(kvrt_cache_seq_pos_min(c, 0, &from) == KVRT_SUCCESS);
    CHECK(from == 0);

    // Reads: the windowed layer's rows of held cells are the stored values;
    // a dropped cell is refused there and read in the full layer.
    for (int32_t p : {0, 1, 84, 99}) {
        std::vector<float> k(kRow), v(kRow);
        const uint32_t cell = cell_of[static_cast<size_t>(p)];
        REQUIRE(kvrt_cache_read(c, 1, 1, &cell, k.data(), bytes_of(k), v.data(), bytes_of(v)) == KVRT_SUCCESS);
        for (uint32_t e = 0; e < kRow; ++e) {
            REQUIRE(k[e] == value(static_cast<uint32_t>(p), 1, 0, e));
            REQUIRE(v[e] == value(static_cast<uint32_t>(p), 1, 1, e));
        }
    }
    std::vector<float> k(kRow);
    const uint32_t dropped = cell_of[50];
    CHECK(kvrt_cache_read(c, 1, 1, &dropped, k.data(), bytes_of(k), nullptr, 0) == KVRT_ERROR_INVALID_ARGUMENT);
    std::vector<uint8_t> raw(kRow * 2);
    CHECK(kvrt_cache_read_raw(c, 1, KVRT_KV_ARRAY_K, 1, &dropped, raw.data(), raw.size()) ==
          KVRT_ERROR_INVALID_ARGUMENT);
    REQUIRE(kvrt_cache_read(c, 0, 1, &dropped, k.data(), bytes_of(k), nullptr, 0) == KVRT_SUCCESS);
    CHECK(k[0] == value(50, 0, 0, 0));

    // Attention: queries whose window reaches dropped rows are refused in the
    // windowed layer (not in the full one); n_keep above the group's too.
    std::vector<float> q(kHeads * kDim, 0.5f), out(kHeads * kDim);
    const kvrt_tensor_ref qt = host_tensor(q.data());
    const kvrt_output_ref ot = host_output(out.data());
    kvrt_attention_params params = KVRT_ATTENTION_PARAMS_INIT;
    params.n_keep = 2;
    // 99's window is 84..99 (and the sinks); 98's reaches the dropped 83.
    for (int32_t qpos : {99, 98}) {
        const kvrt_batch b = make_batch(1, &qpos, seq0.data());
        CHECK(kvrt_cache_attention(c, nullptr, 1, &b, &qt, &ot, &params) ==
              (qpos == 99 ? KVRT_SUCCESS : KVRT_ERROR_INVALID_STATE));
        CHECK(kvrt_cache_attention(c, nullptr, 0, &b, &qt, &ot, &params) == KVRT_SUCCESS);
    }
    const int32_t low = 90;
    const kvrt_batch lb = make_batch(1, &low, seq0.data());
    CHECK(kvrt_cache_attention(c, nullptr, 1, &lb, &qt, &ot, &params) == KVRT_ERROR_INVALID_STATE);
    CHECK(kvrt_cache_attention(c, nullptr, 0, &lb, &qt, &ot, &params) == KVRT_SUCCESS);
    const int32_t last = 99;
    const kvrt_batch b99 = make_batch(1, &last, seq0.data());
    params.n_keep = 3;
    CHECK(kvrt_cache_attention(c, nullptr, 1, &b99, &qt, &ot, &params) == KVRT_ERROR_INVALID_ARGUMENT);

    // Going back: removing the tail from 99 on leaves every row 99's window
    // needs (84 = kvrt_cache_seq_window_pos_min() + W - 1 - 15); from 90 on it
    // does not, and the store is refused unchanged.
    REQUIRE(kvrt_cache_seq_rm(c, 0, 99, -1) == KVRT_SUCCESS);
    REQUIRE(store(c, 2, {1099}, {99}, seq0) == KVRT_SUCCESS);
    REQUIRE(kvrt_cache_seq_rm(c, 0, 90, -1) == KVRT_SUCCESS);
    kvrt_cache_info before = KVRT_CACHE_INFO_INIT, after = KVRT_CACHE_INFO_INIT;
    REQUIRE(kvrt_cache_get_info(c, &before) == KVRT_SUCCESS);
    const uint32_t group_used = impl(c).window_group()->table().used();
    CHECK(store(c, 2, {1090}, {90}, seq0) == KVRT_ERROR_INVALID_STATE);
    REQUIRE(kvrt_cache_get_info(c, &after) == KVRT_SUCCESS);
    CHECK(after.used == before.used);
    CHECK(impl(c).window_group()->table().used() == group_used);
    // Positions at or below n_keep see only sinks: after removing from 2 on,
    // the sequence goes on at 2.
    REQUIRE(kvrt_cache_seq_rm(c, 0, 2, -1) == KVRT_SUCCESS);
    REQUIRE(store(c, 2, {2002, 2003}, {2, 3}, {0, 0}) == KVRT_SUCCESS);
    REQUIRE(impl(c).window_verify() == KVRT_SUCCESS);

}

TEST_CASE("window group: bad descriptors and a full group", "[window]") {
    GpuContext ctx;
    const std::vector<uint32_t> none = {0, 0}, windows = {8, 0};
    kvrt_window_layout_desc wl = KVRT_WINDOW_LAYOUT_DESC_INIT;
    kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
    d.next = &wl;
    d.n_layers = 2;
    d.n_heads = kHeads;
    d.n_kv_heads = kKvHeads;
    d.head_dim_k = kDim;
    d.capacity = 64;
    d.max_seqs = 2;
    Cache c;
    CHECK(kvrt_cache_create(ctx, &d, c.out()) == KVRT_ERROR_INVALID_ARGUMENT);  // no layer_windows
    d.layer_windows = none.data();
    CHECK(kvrt_cache_create(ctx, &d, c.out()) == KVRT_ERROR_INVALID_ARGUMENT);  // no window
    d.layer_windows = windows.data();
    wl.cells = 65;
    CHECK(kvrt_cache_create(ctx, &d, c.out()) == KVRT_ERROR_INVALID_ARGUMENT);  // above the capacity
    wl.cells = 0;
    kvrt_static_layout_desc sl = KVRT_STATIC_LAYOUT_DESC_INIT;
    sl.seq_len = 17;
    wl.next = &sl;
    d.layout = KVRT_LAYOUT_STATIC;
    d.capacity = 0;
    CHECK(kvrt_cache_create(ctx, &d, c.out()) == KVRT_ERROR_INVALID_ARGUMENT);  // not accepted on a static cache
    CHECK(c == nullptr);
    wl.next = nullptr;
    d.capacity = 64;

    // A group of 12 cells for two sequences of window 8: a batch that does
    // not fit is refused with the cache unchanged.
    d.layout = KVRT_LAYOUT_CELLS;
    wl.cells = 12;
    REQUIRE(kvrt_cache_create(ctx, &d, c.out()) == KVRT_SUCCESS);
    std::vector<uint32_t> toks;
    std::vector<int32_t> pos, seqs;
    for (int32_t p = 0; p < 8; ++p) {
        toks.push_back(static_cast<uint32_t>(p));
        pos.push_back(p);
        seqs.push_back(0);
    }
    REQUIRE(store(c, 2, toks, pos, seqs) == KVRT_SUCCESS);
    for (uint32_t& t : toks) t += 100;
    std::fill(seqs.begin(), seqs.end(), 1);
    kvrt_cache_info before = KVRT_CACHE_INFO_INIT, after = KVRT_CACHE_INFO_INIT;
    REQUIRE(kvrt_cache_get_info(c, &before) == KVRT_SUCCESS);
    CHECK(store(c, 2, toks, pos, seqs) == KVRT_ERROR_CACHE_FULL);
    REQUIRE(kvrt_cache_get_info(c, &after) == KVRT_SUCCESS);
    CHECK(after.used == before.used);
    CHECK(impl(c).window_group()->table().used() == 8);
    REQUIRE(impl(c).window_verify() == KVRT_SUCCESS);
}

namespace {

constexpr int32_t kSeqs = 3;
constexpr int32_t kKeep = 2;
const std::vector<uint32_t> kWindows = {8, 0, 12};  // span 12
constexpr uint32_t kLayers = 3;
constexpr uint32_t kGroupCells = 40;

using Positions = std::map<int32_t, uint32_t>;  // position -> token

struct Model {
    std::array<Positions, kSeqs> cache, group;

    static std::set<uint32_t> tokens(const std::array<Positions, kSeqs>& m) {
        std::set<uint32_t> all;
        for (const Positions& s : m)
            for (const auto& [p, t] : s) all.insert(t);
        return all;
    }
    // Whether the group holds every position a query at `lowest` sees.
    bool window_held(int32_t s, int32_t lowest) const {
        const int32_t from = lowest - 12 + 1;
        for (const auto& [p, t] : cache[static_cast<size_t>(s)])
            if ((p >= from || p < kKeep) && !group[static_cast<size_t>(s)].count(p)) return false;
        return true;
    }
};

class WindowRun {
public:
    WindowRun(kvrt_context ctx, uint64_t seed) : ctx_(ctx), rng_(seed) {
        c_ = spec(kWindows, 160, kSeqs).group(kGroupCells, kKeep).create(ctx);
    }
    WindowRun(const WindowRun&) = delete;
    WindowRun& operator=(const WindowRun&) = delete;

    void step() {
        const uint32_t w = rng_() % 100;
        if (w < 55) op_append();
        else if (w < 70) op_rm_tail();
        else if (w < 78) op_rm_front();
        else if (w < 86) op_fork();
        else if (w < 92) op_compact();
        else op_drop();
        REQUIRE(impl(c_).window_verify() == KVRT_SUCCESS);
        check_tables();
        check_attention();
    }

    uint32_t appends = 0, refused_window = 0, refused_full = 0, attention_checks = 0, refused_attention = 0;
    double worst = 0;

private:
    int32_t next_pos(int32_t s) const {
        const Positions& m = model_.cache[static_cast<size_t>(s)];
        return m.empty() ? 0 : m.rbegin()->first + 1;
    }

    void op_append() {
        const int32_t s = static_cast<int32_t>(rng_() % kSeqs);
        const uint32_t n = 1 + static_cast<uint32_t>(rng_() % 5);
        const int32_t m = next_pos(s);
        std::vector<uint32_t> toks;
        std::vector<int32_t> pos, seqs;
        for (uint32_t i = 0; i < n; ++i) {
            toks.push_back(next_token_++);
            pos.push_back(m + static_cast<int32_t>(i));
            seqs.push_back(s);
        }
        Model expect = model_;
        kvrt_result want = KVRT_SUCCESS;
        if (Model::tokens(expect.cache).size() + n > 160) {
            want = KVRT_ERROR_CACHE_FULL;
        } else if (!expect.window_held(s, m)) {
            want = KVRT_ERROR_INVALID_STATE;
        } else {
            Positions& g = expect.group[static_cast<size_t>(s)];
            for (auto it = g.begin(); it != g.end();) it = it->first >= kKeep && it->first <= m - 12 ? g.erase(it) : ++it;
            if (Model::tokens(expect.group).size() + n > kGroupCells) {
                want = KVRT_ERROR_CACHE_FULL;  // the dropped rows stay dropped
            } else {
                for (uint32_t i = 0; i < n; ++i) {
                    expect.cache[static_cast<size_t>(s)][pos[i]] = toks[i];
                    g[pos[i]] = toks[i];
                }
            }
        }
        INFO("append " << n << " to sequence " << s << " at " << m);
        REQUIRE(store(c_, kLayers, toks, pos, seqs) == want);
        if (want == KVRT_ERROR_INVALID_STATE) {
            ++refused_window;
            return;
        }
        model_ = expect;
        if (want == KVRT_SUCCESS) ++appends;
        else ++refused_full;
    }

    void op_rm_tail() {
        const int32_t s = static_cast<int32_t>(rng_() % kSeqs);
        const int32_t end = next_pos(s);
        const int32_t p0 = end ? static_cast<int32_t>(rng_() % static_cast<uint32_t>(end)) : 0;
        REQUIRE(kvrt_cache_seq_rm(c_, s, p0, -1) == KVRT_SUCCESS);
        for (auto* m : {&model_.cache[static_cast<size_t>(s)], &model_.group[static_cast<size_t>(s)]})
            m->erase(m->lower_bound(p0), m->end());
    }

    void op_rm_front() {
        const int32_t s = static_cast<int32_t>(rng_() % kSeqs);
        const int32_t p1 = static_cast<int32_t>(rng_() % 8);
        REQUIRE(kvrt_cache_seq_rm(c_, s, -1, p1) == KVRT_SUCCESS);
        for (auto* m : {&model_.cache[static_cast<size_t>(s)], &model_.group[static_cast<size_t>(s)]})
            m->erase(m->begin(), m->lower_bound(p1));
    }

    void op_fork() {
        const int32_t src = static_cast<int32_t>(rng_() % kSeqs), dst = static_cast<int32_t>(rng_() % kSeqs);
        if (src == dst || !model_.cache[static_cast<size_t>(dst)].empty()) return;
        REQUIRE(kvrt_cache_seq_cp(c_, src, dst, -1, -1) == KVRT_SUCCESS);
        model_.cache[static_cast<size_t>(dst)] = model_.cache[static_cast<size_t>(src)];
        model_.group[static_cast<size_t>(dst)] = model_.group[static_cast<size_t>(src)];
    }

    void op_compact() {
        uint32_t moved = 0;
        REQUIRE(kvrt_cache_compact(c_, nullptr, 0.0f, 0, &moved) == KVRT_SUCCESS);
    }

    void op_drop() {
        const int32_t s = static_cast<int32_t>(rng_() % kSeqs);
        REQUIRE(kvrt_cache_seq_rm(c_, s, -1, -1) == KVRT_SUCCESS);
        model_.cache[static_cast<size_t>(s)].clear();
        model_.group[static_cast<size_t>(s)].clear();
    }

    void check_tables() {
        const kvrt::kv::CellTable& t = impl(c_).table();
        const kvrt::kv::CellTable& g = impl(c_).window_group()->table();
        REQUIRE(t.used() == Model::tokens(model_.cache).size());
        REQUIRE(g.used() == Model::tokens(model_.group).size());
        for (int32_t s = 0; s < kSeqs; ++s) {
            REQUIRE(t.seq_cell_count(s) == model_.cache[static_cast<size_t>(s)].size());
            REQUIRE(g.seq_cell_count(s) == model_.group[static_cast<size_t>(s)].size());
            for (const auto& [p, tok] : model_.group[static_cast<size_t>(s)]) REQUIRE(g.seq_count(s, p, p + 1) == 1);
        }
    }

    // Every sequence's last position as a query, in every layer.
    void check_attention() {
        std::vector<int32_t> qpos, qseq;
        for (int32_t s = 0; s < kSeqs; ++s) {
            if (model_.cache[static_cast<size_t>(s)].empty()) continue;
            qpos.push_back(next_pos(s) - 1);
            qseq.push_back(s);
        }
        if (qpos.empty()) return;
        const uint32_t n = static_cast<uint32_t>(qpos.size());
        std::vector<float> q(size_t{n} * kHeads * kDim);
        for (float& x : q) x = static_cast<float>(static_cast<int32_t>(rng_() % 257) - 128) / 64.0f;
        kvrt_attention_params params = KVRT_ATTENTION_PARAMS_INIT;
        params.n_keep = kKeep;
        for (uint32_t layer = 0; layer < kLayers; ++layer) {
            // Queries whose window reaches dropped rows are refused in a
            // windowed layer: check each such one alone, then the others.
            std::vector<int32_t> ok_pos, ok_seq;
            std::vector<float> ok_q;
            for (uint32_t i = 0; i < n; ++i) {
                const bool held = kWindows[layer] == 0 || model_.window_held(qseq[i], qpos[i]);
                if (!held) {
                    std::vector<float> out(kHeads * kDim);
                    const kvrt_batch b = make_batch(1, &qpos[i], &qseq[i]);
                    const kvrt_tensor_ref qt = host_tensor(q.data() + size_t{i} * kHeads * kDim);
                    const kvrt_output_ref ot = host_output(out.data());
                    REQUIRE(kvrt_cache_attention(c_, nullptr, static_cast<int32_t>(layer), &b, &qt, &ot, &params) ==
                            KVRT_ERROR_INVALID_STATE);
                    ++refused_attention;
                    continue;
                }
                ok_pos.push_back(qpos[i]);
                ok_seq.push_back(qseq[i]);
                ok_q.insert(ok_q.end(), q.begin() + static_cast<ptrdiff_t>(size_t{i} * kHeads * kDim),
                            q.begin() + static_cast<ptrdiff_t>(size_t{i + 1} * kHeads * kDim));
            }
            if (ok_pos.empty()) continue;
            const uint32_t m = static_cast<uint32_t>(ok_pos.size());
            std::vector<float> out(size_t{m} * kHeads * kDim);
            const kvrt_batch b = make_batch(m, ok_pos.data(), ok_seq.data());
            const kvrt_tensor_ref qt = host_tensor(ok_q.data());
            const kvrt_output_ref ot = host_output(out.data());
            REQUIRE(kvrt_cache_attention(c_, nullptr, static_cast<int32_t>(layer), &b, &qt, &ot, &params) ==
                    KVRT_SUCCESS);
            // The reference from the model's cache alone: every token of every
            // sequence, with the layer's window and the sinks.
            std::vector<kvrt::ref::AttnCell> cells;
            std::vector<float> k, v;
            std::map<uint32_t, size_t> index;
            for (int32_t s = 0; s < kSeqs; ++s)
                for (const auto& [p, tok] : model_.cache[static_cast<size_t>(s)]) {
                    auto [it, fresh] = index.emplace(tok, cells.size());
                    if (fresh) {
                        cells.push_back({p, {}});
                        for (uint32_t e = 0; e < kRow; ++e) {
                            k.push_back(value(tok, layer, 0, e));
                            v.push_back(value(tok, layer, 1, e));
                        }
                    }
                    cells[it->second].seq_ids.push_back(s);
                }
            kvrt::ref::AttnParams rp;
            rp.n_heads = kHeads;
            rp.n_kv_heads = kKvHeads;
            rp.head_dim_k = kDim;
            rp.head_dim_v = kDim;
            rp.scale = 1.0 / std::sqrt(static_cast<double>(kDim));
            rp.window = static_cast<int32_t>(kWindows[layer]);
            rp.n_keep = kKeep;
            std::vector<kvrt::ref::AttnQuery> queries;
            for (uint32_t i = 0; i < m; ++i) queries.push_back({ok_pos[i], ok_seq[i]});
            const std::vector<double> expect = kvrt::ref::attention(rp, ok_q.data(), queries, k.data(), v.data(), cells);
            const double e = kvrt::ref::nmse(out, expect);
            worst = std::max(worst, e);
            INFO("layer " << layer << ", " << m << " queries");
            REQUIRE(e <= 1e-6);
            ++attention_checks;
        }
    }

    kvrt_context ctx_;
    Rng64 rng_;
    Cache c_;
    Model model_;
    uint32_t next_token_ = 1;
};

}  // namespace

TEST_CASE("window group: random schedules against the model and the reference", "[window]") {
    GpuContext ctx;
    const char* env = std::getenv("KVRT_TEST_SEED");
    const uint64_t seed = env && *env ? std::strtoull(env, nullptr, 0) : 0x77696e646f77ull;
    WindowRun run(ctx, seed);
    for (int i = 0; i < 400; ++i) {
        INFO("step " << i << ", seed " << seed);
        run.step();
    }
    INFO("appends " << run.appends << ", refused (window) " << run.refused_window << ", refused (full) "
                    << run.refused_full << ", attention checks " << run.attention_checks << ", refused attention "
                    << run.refused_attention << ", worst NMSE " << run.worst);
    CHECK(run.appends > 100);
    CHECK(run.refused_window > 0);
    CHECK(run.refused_full > 0);
    CHECK(run.refused_attention > 0);
    CHECK(ctx.validation_errors() == 0);
    WARN("window group schedules: " << run.appends << " appends, " << run.refused_window << " refused by a window, "
                                    << run.refused_full << " by a full group, " << run.attention_checks
                                    << " attention checks, worst NMSE " << run.worst);
}

TEST_CASE("window group: static-scale types keep each windowed layer's scales", "[window]") {
    GpuContext ctx;
    // Layers 1 and 2 are windowed: the group's layers 0 and 1 must use the
    // cache's layer 1 and 2 scales.
    const std::vector<uint32_t> windows = {0, 16, 16};
    const std::vector<float> scales = {0.02f, 0.03f, 0.04f};  // with the zero points: [-2, 2] fits
    const std::vector<int32_t> zero_points = {128, 100, 90};
    kvrt_static_scales_desc sc = KVRT_STATIC_SCALES_DESC_INIT;
    sc.count = 3;
    sc.k_scales = scales.data();
    sc.k_zero_points = zero_points.data();
    sc.v_scales = scales.data();
    sc.v_zero_points = zero_points.data();
    CacheSpec sp = spec(windows, 64, 1).type(KVRT_TYPE_U8_STATIC);
    sp.label = nullptr;
    sp.next = &sc;
    Cache caches[2] = {sp.create(ctx), CacheSpec(sp).group().create(ctx)};
    const std::vector<int32_t> pos = {0, 1, 2}, seqs = {0, 0, 0};
    std::vector<uint32_t> cells[2];
    for (int i = 0; i < 2; ++i) REQUIRE(store(caches[i], 3, {5, 6, 7}, pos, seqs, &cells[i]) == KVRT_SUCCESS);
    for (int32_t layer = 0; layer < 3; ++layer) {
        std::vector<float> k[2], v[2];
        for (int i = 0; i < 2; ++i) {
            k[i].resize(3 * kRow);
            v[i].resize(3 * kRow);
            REQUIRE(kvrt_cache_read(caches[i], layer, 3, cells[i].data(), k[i].data(), bytes_of(k[i]), v[i].data(),
                                    bytes_of(v[i])) == KVRT_SUCCESS);
        }
        INFO("layer " << layer);
        CHECK(k[0] == k[1]);
        CHECK(v[0] == v[1]);
        // Quantized with this layer's scale: within half a step of the value.
        for (uint32_t e = 0; e < kRow; ++e) CHECK(std::abs(k[1][e] - value(5, static_cast<uint32_t>(layer), 0, e)) <=
                                                  scales[static_cast<size_t>(layer)] * 0.5f + 1e-6f);
    }
}
