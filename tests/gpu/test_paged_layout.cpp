// The paged layout (kvrt_paged.h): random schedules of admits (with prefix
// sharing), appends, stores, forks, tail removals and shifts, checked after
// every step against a cell-layout cache in which every sequence keeps its own
// copy of every token (byte-identical rows, equal attention); attention over
// shared blocks against the double-precision reference; copy-on-write,
// isolation of sequences with sharing off, eviction, and bad input.
#include "gpu_test.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>

#include "reference/attention.hpp"
#include "reference/half.hpp"
#include "reference/metrics.hpp"

using namespace kvrt_test;

namespace {

struct Shape {
    uint32_t layers = 2, heads = 4, kv_heads = 2, dk = 32, dv = 32;
    kvrt_type type = KVRT_TYPE_F16;
};

kvrt_cache make_cache(kvrt_context ctx, const Shape& sh, bool paged, uint32_t capacity, uint32_t max_seqs,
                      uint32_t block_size = 16) {
    kvrt_paged_layout_desc pl = KVRT_PAGED_LAYOUT_DESC_INIT;
    pl.block_size = block_size;
    kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
    d.n_layers = sh.layers;
    d.n_heads = sh.heads;
    d.n_kv_heads = sh.kv_heads;
    d.head_dim_k = sh.dk;
    d.head_dim_v = sh.dv;
    d.type_k = d.type_v = sh.type;
    d.capacity = capacity;
    d.max_seqs = max_seqs;
    if (paged) {
        d.layout = KVRT_LAYOUT_PAGED;
        d.next = &pl;
    }
    kvrt_cache c = nullptr;
    KVRT_REQUIRE_OK(kvrt_cache_create(ctx, &d, &c));
    return c;
}

// Element (layer, head, d) of K or V of token `id` at position `pos`: what a
// model computes is a function of the token and its place (here, of its id
// and position only), so equal prefixes give equal rows.
float value(int32_t id, int32_t pos, uint32_t layer, uint32_t head, uint32_t d, bool v) {
    uint32_t h = static_cast<uint32_t>(id) * 2654435761u ^ static_cast<uint32_t>(pos) * 2246822519u ^
                 (layer * 131u + head * 17u + d * 3u + (v ? 7919u : 0u)) * 3266489917u;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    return static_cast<float>(h % 2001u) / 1000.0f - 1.0f;
}

// f32 rows [layer][token][head][dim] of K and V for the tokens.
void token_rows(const Shape& sh, const std::vector<int32_t>& ids, const std::vector<int32_t>& pos,
                std::vector<float>* k, std::vector<float>* v) {
    const size_t n = ids.size();
    k->assign(size_t{sh.layers} * n * sh.kv_heads * sh.dk, 0.0f);
    v->assign(size_t{sh.layers} * n * sh.kv_heads * sh.dv, 0.0f);
    for (uint32_t l = 0; l < sh.layers; ++l)
        for (size_t t = 0; t < n; ++t)
            for (uint32_t h = 0; h < sh.kv_heads; ++h) {
                for (uint32_t d = 0; d < sh.dk; ++d)
                    (*k)[((l * n + t) * sh.kv_heads + h) * sh.dk + d] = value(ids[t], pos[t], l, h, d, false);
                for (uint32_t d = 0; d < sh.dv; ++d)
                    (*v)[((l * n + t) * sh.kv_heads + h) * sh.dv + d] = value(ids[t], pos[t], l, h, d, true);
            }
}

// Writes the rows of tokens [from, ids.size()) into `cells` (all layers).
void write_rows(kvrt_cache c, const Shape& sh, const std::vector<int32_t>& ids, const std::vector<int32_t>& pos,
                size_t from, const uint32_t* cells) {
    if (from >= ids.size()) return;
    const std::vector<int32_t> i2(ids.begin() + static_cast<ptrdiff_t>(from), ids.end());
    const std::vector<int32_t> p2(pos.begin() + static_cast<ptrdiff_t>(from), pos.end());
    std::vector<float> k, v;
    token_rows(sh, i2, p2, &k, &v);
    kvrt_tensor_ref kr = host_tensor(k.data()), vr = host_tensor(v.data());
    KVRT_REQUIRE_OK(kvrt_cache_write(c, nullptr, static_cast<uint32_t>(i2.size()), cells, -1, &kr, &vr));
}

// The stored bytes of `cells` of one layer and array.
std::vector<uint8_t> raw_rows(kvrt_cache c, int32_t layer, kvrt_kv_array a, const std::vector<uint32_t>& cells) {
    kvrt_cache_info info = KVRT_CACHE_INFO_INIT;
    KVRT_REQUIRE_OK(kvrt_cache_get_info(c, &info));
    const uint64_t row = a == KVRT_KV_ARRAY_K ? info.k_row_bytes : info.v_row_bytes;
    std::vector<uint8_t> out(cells.size() * row);
    KVRT_REQUIRE_OK(kvrt_cache_read_raw(c, layer, a, static_cast<uint32_t>(cells.size()), cells.data(), out.data(),
                                        out.size()));
    return out;
}

std::vector<uint32_t> paged_cells(kvrt_cache c, int32_t seq) {
    uint32_t n = 0;
    KVRT_REQUIRE_OK(kvrt_cache_paged_get_cells(c, seq, 0, 0, nullptr, &n));
    std::vector<uint32_t> cells(n);
    uint32_t again = 0;
    KVRT_REQUIRE_OK(kvrt_cache_paged_get_cells(c, seq, 0, n, cells.data(), &again));
    REQUIRE(again == n);
    return cells;
}

// Attention of one query per sequence (at the sequence's next position).
std::vector<float> attend(kvrt_cache c, const Shape& sh, uint32_t layer, const std::vector<int32_t>& seqs,
                          const std::vector<int32_t>& positions, const std::vector<float>& q) {
    const uint32_t n = static_cast<uint32_t>(seqs.size());
    std::vector<float> out(size_t{n} * sh.heads * sh.dv, -7.0f);
    kvrt_batch b = make_batch(n, positions.data(), seqs.data());
    kvrt_tensor_ref qr = host_tensor(q.data());
    kvrt_output_ref o = host_output(out.data());
    kvrt_attention_params p = KVRT_ATTENTION_PARAMS_INIT;
    p.scale = 0.25f;
    KVRT_REQUIRE_OK(kvrt_cache_attention(c, nullptr, static_cast<int32_t>(layer), &b, &qr, &o, &p));
    return out;
}

// The model of one sequence: its tokens, and where the cell-layout twin keeps them.
struct SeqModel {
    std::vector<int32_t> ids, pos;
    std::vector<uint32_t> twin_cells;
    bool sharing = true;
};

// Stores tokens into the twin cache as the sequence's own copy.
void twin_store(kvrt_cache twin, const Shape& sh, int32_t seq, SeqModel& m, const std::vector<int32_t>& ids,
                const std::vector<int32_t>& pos) {
    const uint32_t n = static_cast<uint32_t>(ids.size());
    std::vector<int32_t> seqs(n, seq);
    std::vector<float> k, v;
    token_rows(sh, ids, pos, &k, &v);
    kvrt_batch b = make_batch(n, pos.data(), seqs.data());
    kvrt_tensor_ref kr = host_tensor(k.data()), vr = host_tensor(v.data());
    std::vector<uint32_t> cells(n);
    KVRT_REQUIRE_OK(kvrt_cache_store(twin, nullptr, &b, -1, &kr, &vr, cells.data()));
    m.ids.insert(m.ids.end(), ids.begin(), ids.end());
    m.pos.insert(m.pos.end(), pos.begin(), pos.end());
    m.twin_cells.insert(m.twin_cells.end(), cells.begin(), cells.end());
}

// Every sequence's rows in the paged cache equal its twin's, byte for byte,
// and each has the model's length.
void check_rows(kvrt_cache paged, kvrt_cache twin, const Shape& sh, const std::vector<SeqModel>& model) {
    std::vector<uint32_t> pc, tc;
    for (size_t s = 0; s < model.size(); ++s) {
        const std::vector<uint32_t> cells = paged_cells(paged, static_cast<int32_t>(s));
        REQUIRE(cells.size() == model[s].ids.size());
        pc.insert(pc.end(), cells.begin(), cells.end());
        tc.insert(tc.end(), model[s].twin_cells.begin(), model[s].twin_cells.end());
        int32_t lo = -2, hi = -2;
        KVRT_REQUIRE_OK(kvrt_cache_seq_pos_min(paged, static_cast<int32_t>(s), &lo));
        KVRT_REQUIRE_OK(kvrt_cache_seq_pos_max(paged, static_cast<int32_t>(s), &hi));
        REQUIRE(lo == (model[s].pos.empty() ? -1 : *std::min_element(model[s].pos.begin(), model[s].pos.end())));
        REQUIRE(hi == (model[s].pos.empty() ? -1 : *std::max_element(model[s].pos.begin(), model[s].pos.end())));
    }
    if (pc.empty()) return;
    for (uint32_t l = 0; l < sh.layers; ++l)
        for (kvrt_kv_array a : {KVRT_KV_ARRAY_K, KVRT_KV_ARRAY_V}) {
            INFO("layer " << l << " array " << a);
            REQUIRE(raw_rows(paged, static_cast<int32_t>(l), a, pc) == raw_rows(twin, static_cast<int32_t>(l), a, tc));
        }
}

// One query per non-empty sequence; the paged cache attends like the twin.
void check_attention(kvrt_cache paged, kvrt_cache twin, const Shape& sh, const std::vector<SeqModel>& model,
                     std::mt19937& rng) {
    std::vector<int32_t> seqs, positions;
    for (size_t s = 0; s < model.size(); ++s) {
        if (model[s].pos.empty()) continue;
        seqs.push_back(static_cast<int32_t>(s));
        positions.push_back(*std::max_element(model[s].pos.begin(), model[s].pos.end()) + 1);
    }
    if (seqs.empty()) return;
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> q(seqs.size() * sh.heads * sh.dk);
    for (float& x : q) x = nd(rng);
    for (uint32_t l = 0; l < sh.layers; ++l) {
        const std::vector<float> a = attend(paged, sh, l, seqs, positions, q);
        const std::vector<float> b = attend(twin, sh, l, seqs, positions, q);
        const double e = kvrt::ref::nmse(a, b);
        INFO("layer " << l << " nmse paged vs cells " << e);
        REQUIRE(e <= 1e-10);
    }
}

}  // namespace

TEST_CASE("paged layout: random schedules keep every sequence's rows and attention equal to its own copy",
          "[paged][attention]") {
    KVRT_EACH_KERNEL_VARIANT(variant);
    GpuContext ctx(variant.flags);
    Shape sh;
    sh.type = GENERATE(KVRT_TYPE_F16, KVRT_TYPE_Q8_0, KVRT_TYPE_Q4_0);
    const uint32_t block = GENERATE(16u, 32u);
    INFO("type " << sh.type << " block " << block);
    const uint32_t n_seqs = 6;
    kvrt_cache paged = make_cache(ctx, sh, true, 24 * block, n_seqs, block);
    kvrt_cache twin = make_cache(ctx, sh, false, 2048, n_seqs);
    std::mt19937 rng(1234 + block + static_cast<uint32_t>(sh.type));
    auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    // Three system prompts that new sequences start with.
    std::vector<std::vector<int32_t>> prompts(3);
    for (auto& p : prompts) {
        p.resize(static_cast<size_t>(pick(static_cast<int>(block), static_cast<int>(3 * block + 5))));
        for (int32_t& id : p) id = pick(0, 50000);
    }
    std::vector<SeqModel> model(n_seqs);
    // Sequence 0 keeps its tokens private.
    KVRT_REQUIRE_OK(kvrt_cache_paged_set_sharing(paged, 0, 0));
    model[0].sharing = false;
    uint64_t cached_total = 0, cow = 0, full = 0, shifts = 0, forks = 0;
    const int steps = 160;
    for (int step = 0; step < steps; ++step) {
        const int32_t s = pick(0, static_cast<int>(n_seqs) - 1);
        SeqModel& m = model[static_cast<size_t>(s)];
        const int op = pick(0, 9);
        INFO("step " << step << " seq " << s << " op " << op);
        if (m.ids.empty()) {
            if (op < 3) {
                // Fork a non-empty sequence into this one.
                std::vector<int32_t> src;
                for (size_t i = 0; i < n_seqs; ++i)
                    if (!model[i].ids.empty()) src.push_back(static_cast<int32_t>(i));
                if (src.empty()) continue;
                const int32_t from = src[static_cast<size_t>(pick(0, static_cast<int>(src.size()) - 1))];
                KVRT_REQUIRE_OK(kvrt_cache_paged_fork(paged, from, s));
                // The twin gets its own copy of the source's stored bytes.
                const SeqModel& f = model[static_cast<size_t>(from)];
                const uint32_t n = static_cast<uint32_t>(f.ids.size());
                std::vector<int32_t> seqs(n, s);
                kvrt_batch b = make_batch(n, f.pos.data(), seqs.data());
                std::vector<uint32_t> cells(n);
                KVRT_REQUIRE_OK(kvrt_cache_place(twin, &b, cells.data()));
                for (uint32_t l = 0; l < sh.layers; ++l) {
                    const std::vector<uint8_t> k = raw_rows(twin, static_cast<int32_t>(l), KVRT_KV_ARRAY_K, f.twin_cells);
                    const std::vector<uint8_t> v = raw_rows(twin, static_cast<int32_t>(l), KVRT_KV_ARRAY_V, f.twin_cells);
                    kvrt_tensor_ref kr = host_tensor(k.data(), sh.type), vr = host_tensor(v.data(), sh.type);
                    KVRT_REQUIRE_OK(kvrt_cache_write(twin, nullptr, n, cells.data(), static_cast<int32_t>(l), &kr, &vr));
                }
                m.ids = f.ids;
                m.pos = f.pos;
                m.twin_cells = cells;
                ++forks;
            } else {
                // Admit a prompt: a system prompt, cut anywhere, and a tail.
                const std::vector<int32_t>& sys = prompts[static_cast<size_t>(pick(0, 2))];
                std::vector<int32_t> ids(sys.begin(), sys.begin() + pick(1, static_cast<int>(sys.size())));
                for (int i = pick(0, 20); i > 0; --i) ids.push_back(pick(0, 50000));
                std::vector<int32_t> pos(ids.size());
                for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(i);
                uint32_t n_cached = 99999;
                std::vector<uint32_t> cells(ids.size());
                const kvrt_result r = kvrt_cache_paged_admit(paged, s, static_cast<uint32_t>(ids.size()), ids.data(),
                                                             pos.data(), 0, &n_cached, cells.data());
                if (r == KVRT_ERROR_CACHE_FULL) {
                    ++full;
                    REQUIRE(n_cached == 0);
                } else {
                    KVRT_REQUIRE_OK(r);
                    REQUIRE(n_cached % block == 0);
                    REQUIRE(n_cached < ids.size());
                    if (!m.sharing) REQUIRE(n_cached == 0);
                    cached_total += n_cached;
                    write_rows(paged, sh, ids, pos, n_cached, cells.data() + n_cached);
                    twin_store(twin, sh, s, m, ids, pos);
                }
            }
        } else if (op < 5) {
            // Append new tokens, through the paged API or a plain store.
            const uint32_t n = static_cast<uint32_t>(pick(1, 20));
            std::vector<int32_t> ids(n), pos(n);
            const int32_t next = *std::max_element(m.pos.begin(), m.pos.end()) + 1;
            for (uint32_t i = 0; i < n; ++i) {
                ids[i] = pick(0, 50000);
                pos[i] = next + static_cast<int32_t>(i);
            }
            const std::vector<uint32_t> cells_before = paged_cells(paged, s);
            kvrt_result r;
            if (op == 3) {
                std::vector<uint32_t> cells(n);
                r = kvrt_cache_paged_append(paged, nullptr, s, n, ids.data(), pos.data(), cells.data());
                if (r == KVRT_SUCCESS) write_rows(paged, sh, ids, pos, 0, cells.data());
            } else {
                std::vector<int32_t> seqs(n, s);
                std::vector<float> k, v;
                token_rows(sh, ids, pos, &k, &v);
                kvrt_batch b = make_batch(n, pos.data(), seqs.data());
                kvrt_tensor_ref kr = host_tensor(k.data()), vr = host_tensor(v.data());
                r = kvrt_cache_store(paged, nullptr, &b, -1, &kr, &vr, nullptr);
            }
            if (r == KVRT_ERROR_CACHE_FULL) {
                ++full;
            } else {
                KVRT_REQUIRE_OK(r);
                twin_store(twin, sh, s, m, ids, pos);
                // A copy-on-write moved the tokens of the shared last block.
                const std::vector<uint32_t> cells_after = paged_cells(paged, s);
                cow += !std::equal(cells_before.begin(), cells_before.end(), cells_after.begin());
            }
        } else if (op < 7) {
            // Remove a tail (sometimes all of it).
            const size_t keep = static_cast<size_t>(pick(0, static_cast<int>(m.ids.size()) - 1));
            const int32_t p0 = op == 5 && keep > 0 ? m.pos[keep] : -1;
            const size_t kept = p0 < 0 ? 0 : keep;
            KVRT_REQUIRE_OK(kvrt_cache_seq_rm(paged, s, p0, -1));
            KVRT_REQUIRE_OK(kvrt_cache_seq_rm(twin, s, p0, -1));
            m.ids.resize(kept);
            m.pos.resize(kept);
            m.twin_cells.resize(kept);
        } else if (op < 9) {
            // Shift a tail, keeping positions increasing.
            const size_t t = static_cast<size_t>(pick(0, static_cast<int>(m.ids.size()) - 1));
            const int32_t gap = t == 0 ? m.pos[0] : m.pos[t] - m.pos[t - 1] - 1;
            const int32_t delta = pick(-std::min(gap, 3), 4);
            const kvrt_result r = kvrt_cache_seq_add(paged, s, m.pos[t], -1, delta);
            if (r == KVRT_ERROR_CACHE_FULL) {
                ++full;
            } else {
                KVRT_REQUIRE_OK(r);
                KVRT_REQUIRE_OK(kvrt_cache_seq_add(twin, s, m.pos[t], -1, delta));
                KVRT_REQUIRE_OK(kvrt_cache_apply_shifts(twin, nullptr));
                for (size_t i = t; i < m.pos.size(); ++i) m.pos[i] += delta;
                shifts += delta != 0;
            }
        } else {
            // Keep every sequence but this one, now and then.
            if (pick(0, 3) != 0) continue;
            KVRT_REQUIRE_OK(kvrt_cache_seq_keep(paged, s));
            KVRT_REQUIRE_OK(kvrt_cache_seq_keep(twin, s));
            for (size_t i = 0; i < n_seqs; ++i)
                if (static_cast<int32_t>(i) != s) model[i] = SeqModel{{}, {}, {}, model[i].sharing};
        }
        check_rows(paged, twin, sh, model);
        if (step % 8 == 7) check_attention(paged, twin, sh, model, rng);
    }
    INFO("cached tokens " << cached_total << ", copy-on-write appends " << cow << ", shifts " << shifts << ", forks "
                          << forks << ", full " << full);
    // The schedule exercised what it is meant to.
    CHECK(cached_total > 0);
    CHECK(forks > 0);
    CHECK(shifts > 0);
    CHECK(cow > 0);
    kvrt_paged_stats st = KVRT_PAGED_STATS_INIT;
    KVRT_REQUIRE_OK(kvrt_cache_paged_get_stats(paged, &st));
    REQUIRE(st.free_blocks + st.cached_blocks + st.used_blocks == st.n_blocks);
    kvrt_cache_destroy(paged);
    kvrt_cache_destroy(twin);
    REQUIRE(ctx.validation_errors() == 0);
}
