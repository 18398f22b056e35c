// The paged layout (kvrt_paged.h): random schedules of admits (with prefix
// sharing), appends, stores, forks, tail removals and shifts, checked after
// every step against a cell-layout cache in which every sequence keeps its own
// copy of every token (byte-identical rows, equal attention); attention over
// shared blocks against the double-precision reference; copy-on-write,
// isolation of sequences with sharing off, eviction, and bad input.
#include "gpu_test.hpp"
#include "paged_check.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <random>

#include "common/random.hpp"
#include "core/fault.hpp"
#include "reference/attention.hpp"
#include "reference/half.hpp"
#include "reference/metrics.hpp"

using namespace kvrt_test;
using namespace kvrt_test::paged;

namespace {

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

// The pool and its mirror are consistent, every sequence's rows in the paged
// cache equal its twin's, byte for byte, and each has the model's length.
void check_rows(kvrt_cache paged, kvrt_cache twin, const Shape& sh, const std::vector<SeqModel>& model) {
    verify(paged);
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
                     Rng& rng) {
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
    sh.type(GENERATE(KVRT_TYPE_F16, KVRT_TYPE_Q8_0, KVRT_TYPE_Q4_0));
    const uint32_t block = GENERATE(16u, 32u);
    INFO("type " << sh.type_k << " block " << block);
    const uint32_t n_seqs = 6;
    Cache paged = CacheSpec(sh).cells(24 * block, n_seqs).paged(block).create(ctx);
    Cache twin = CacheSpec(sh).cells(2048, n_seqs).create(ctx);
    Rng rng(1234 + block + static_cast<uint32_t>(sh.type_k));
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
                    kvrt_tensor_ref kr = host_tensor(k.data(), sh.type_k), vr = host_tensor(v.data(), sh.type_k);
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
    REQUIRE(ctx.validation_errors() == 0);
}


TEST_CASE("paged layout: attention over shared and copied blocks matches the double reference",
          "[paged][attention]") {
    KVRT_EACH_KERNEL_VARIANT(variant);
    GpuContext ctx(variant.flags);
    Shape sh;
    sh.heads = 8;
    Cache c = CacheSpec(sh).cells(512, 4).paged(16).create(ctx);
    // Sequence 0: 70 tokens. Sequence 1: the same first 64 and its own tail
    // (maps 4 blocks). Sequence 2: a fork of 1, then 5 tokens of its own
    // (copy-on-write of 1's partly filled last block).
    Prompt p0 = prompt(70, 1), p1 = prompt(75, 1);
    for (size_t i = 64; i < p1.ids.size(); ++i) p1.ids[i] = 9000 + static_cast<int32_t>(i);
    REQUIRE(admit(c, sh, 0, p0) == 0);
    REQUIRE(admit(c, sh, 1, p1) == 64);
    KVRT_REQUIRE_OK(kvrt_cache_paged_fork(c, 1, 2));
    Prompt tail;
    for (int32_t i = 0; i < 5; ++i) {
        tail.ids.push_back(777 + i);
        tail.pos.push_back(75 + i);
    }
    std::vector<uint32_t> cells(5);
    KVRT_REQUIRE_OK(kvrt_cache_paged_append(c, nullptr, 2, 5, tail.ids.data(), tail.pos.data(), cells.data()));
    write_rows(c, sh, tail.ids, tail.pos, 0, cells.data());
    std::vector<Prompt> seqs = {p0, p1, p1};
    seqs[2].ids.insert(seqs[2].ids.end(), tail.ids.begin(), tail.ids.end());
    seqs[2].pos.insert(seqs[2].pos.end(), tail.pos.begin(), tail.pos.end());
    REQUIRE(paged_cells(c, 2).size() == 80);
    // One query per sequence at its next position and two earlier ones of
    // sequence 2 (causal: they see part of it); then, as a prefill chunk, 48
    // queries of sequence 2 over its copied and its own blocks.
    const bool prefill = GENERATE(false, true);
    std::vector<int32_t> qseq = {0, 1, 2, 2, 2}, qpos = {70, 75, 80, 66, 10};
    if (prefill) {
        qseq.assign(48, 2);
        qpos.resize(48);
        for (int32_t i = 0; i < 48; ++i) qpos[static_cast<size_t>(i)] = 32 + i;
    }
    INFO((prefill ? "prefill" : "decode"));
    Rng rng(3);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> q(qseq.size() * sh.heads * sh.dk);
    for (float& x : q) x = nd(rng);
    // The reference: every (sequence, token) a cell of its own, with the f16
    // values the cache stores.
    std::vector<kvrt::ref::AttnCell> rc;
    std::vector<float> k_all, v_all;
    for (uint32_t l = 0; l < sh.layers; ++l) {
        rc.clear();
        k_all.clear();
        v_all.clear();
        for (int32_t s = 0; s < 3; ++s) {
            const Prompt& p = seqs[static_cast<size_t>(s)];
            for (size_t t = 0; t < p.ids.size(); ++t) {
                rc.push_back({p.pos[t], {s}});
                for (uint32_t h = 0; h < sh.kv_heads; ++h) {
                    for (uint32_t d = 0; d < sh.dk; ++d)
                        k_all.push_back(kvrt::ref::f16_to_f32(kvrt::ref::f32_to_f16(value(p.ids[t], p.pos[t], l, h, d, false))));
                    for (uint32_t d = 0; d < sh.dv; ++d)
                        v_all.push_back(kvrt::ref::f16_to_f32(kvrt::ref::f32_to_f16(value(p.ids[t], p.pos[t], l, h, d, true))));
                }
            }
        }
        kvrt::ref::AttnParams rp;
        rp.n_heads = static_cast<int>(sh.heads);
        rp.n_kv_heads = static_cast<int>(sh.kv_heads);
        rp.head_dim_k = static_cast<int>(sh.dk);
        rp.head_dim_v = static_cast<int>(sh.dv);
        rp.scale = 0.25;
        std::vector<kvrt::ref::AttnQuery> qs;
        for (size_t i = 0; i < qseq.size(); ++i) qs.push_back({qpos[i], qseq[i]});
        const std::vector<double> want = kvrt::ref::attention(rp, q.data(), qs, k_all.data(), v_all.data(), rc);
        const std::vector<float> got = attend(c, sh, l, qseq, qpos, q);
        const double e = kvrt::ref::nmse(got, want);
        INFO("layer " << l << " nmse " << e);
        REQUIRE(e <= 1e-6);
    }
    REQUIRE(ctx.validation_errors() == 0);
}

TEST_CASE("paged layout: prefix sharing maps only what the same tokens wrote", "[paged]") {
    GpuContext ctx;
    Shape sh;
    Cache c = CacheSpec(sh).cells(256, 6).paged(16).create(ctx);  // 16 blocks
    const Prompt p = prompt(50, 2);                     // 3 full blocks and 2 tokens
    REQUIRE(admit(c, sh, 0, p) == 0);
    REQUIRE(admit(c, sh, 1, p) == 48);
    // Another salt, or one token changed in block 1, maps less.
    {
        uint32_t n_cached = 1;
        KVRT_REQUIRE_OK(kvrt_cache_paged_admit(c, 2, 50, p.ids.data(), p.pos.data(), 42, &n_cached, nullptr));
        CHECK(n_cached == 0);
        KVRT_REQUIRE_OK(kvrt_cache_seq_rm(c, 2, -1, -1));
        Prompt q = p;
        q.ids[20] += 1;
        KVRT_REQUIRE_OK(kvrt_cache_paged_admit(c, 2, 50, q.ids.data(), q.pos.data(), 0, &n_cached, nullptr));
        CHECK(n_cached == 16);
        KVRT_REQUIRE_OK(kvrt_cache_seq_rm(c, 2, -1, -1));
    }
    // A private sequence neither maps nor registers.
    KVRT_REQUIRE_OK(kvrt_cache_paged_set_sharing(c, 3, 0));
    const Prompt secret = prompt(40, 3);
    REQUIRE(admit(c, sh, 3, secret) == 0);
    {
        uint32_t n_cached = 1;
        KVRT_REQUIRE_OK(kvrt_cache_paged_admit(c, 3 + 1, 40, secret.ids.data(), secret.pos.data(), 0, &n_cached,
                                               nullptr));
        CHECK(n_cached == 0);
        KVRT_REQUIRE_OK(kvrt_cache_seq_rm(c, 4, -1, -1));
        KVRT_REQUIRE_OK(kvrt_cache_seq_rm(c, 3, -1, -1));
        KVRT_REQUIRE_OK(kvrt_cache_paged_admit(c, 3, 50, p.ids.data(), p.pos.data(), 0, &n_cached, nullptr));
        CHECK(n_cached == 0);
        KVRT_REQUIRE_OK(kvrt_cache_seq_rm(c, 3, -1, -1));
    }
    // A shift leaves rows a fresh prompt would not compute: once sequence 0
    // moved its tokens from 20 on and back, only block 0 stays shareable.
    KVRT_REQUIRE_OK(kvrt_cache_seq_rm(c, 1, -1, -1));
    KVRT_REQUIRE_OK(kvrt_cache_seq_add(c, 0, 20, -1, 3));
    KVRT_REQUIRE_OK(kvrt_cache_seq_add(c, 0, 23, -1, -3));
    REQUIRE(admit(c, sh, 1, p) == 16);
    // Nor is a partly filled block that a shift moved once it fills up: its
    // parent is registered, but its rows are not what the prompt computes.
    {
        KVRT_REQUIRE_OK(kvrt_cache_seq_rm(c, 1, -1, -1));
        const Prompt q = prompt(49, 5);
        const Prompt head = prompt(40, 5);
        REQUIRE(admit(c, sh, 1, head) == 0);                   // blocks 0, 1 registered, 8 tokens in block 2
        KVRT_REQUIRE_OK(kvrt_cache_seq_add(c, 1, 36, -1, 3));  // moves block 2
        KVRT_REQUIRE_OK(kvrt_cache_seq_add(c, 1, 39, -1, -3));
        std::vector<uint32_t> cells(8);
        const std::vector<int32_t> ids(q.ids.begin() + 40, q.ids.begin() + 48), pos(q.pos.begin() + 40, q.pos.begin() + 48);
        KVRT_REQUIRE_OK(kvrt_cache_paged_append(c, nullptr, 1, 8, ids.data(), pos.data(), cells.data()));
        write_rows(c, sh, ids, pos, 0, cells.data());
        uint32_t n_cached = 0;
        KVRT_REQUIRE_OK(kvrt_cache_paged_admit(c, 2, 49, q.ids.data(), q.pos.data(), 0, &n_cached, nullptr));
        CHECK(n_cached == 32);
        KVRT_REQUIRE_OK(kvrt_cache_seq_rm(c, 2, -1, -1));
    }
    // Unregistered blocks of removed sequences are free; registered ones are
    // cached until the registry is cleared.
    KVRT_REQUIRE_OK(kvrt_cache_seq_rm(c, -1, -1, -1));
    kvrt_paged_stats st = KVRT_PAGED_STATS_INIT;
    KVRT_REQUIRE_OK(kvrt_cache_paged_get_stats(c, &st));
    CHECK(st.used_blocks == 0);
    CHECK(st.cached_blocks >= 1);
    KVRT_REQUIRE_OK(kvrt_cache_paged_clear_registry(c));
    KVRT_REQUIRE_OK(kvrt_cache_paged_get_stats(c, &st));
    CHECK(st.cached_blocks == 0);
    CHECK(st.free_blocks == 16);
    REQUIRE(admit(c, sh, 0, p) == 0);
    REQUIRE(ctx.validation_errors() == 0);
}

TEST_CASE("paged layout: cached blocks are reused least recently released first, and a full pool changes nothing",
          "[paged]") {
    GpuContext ctx;
    Shape sh;
    Cache c = CacheSpec(sh).cells(128, 4).paged(16).create(ctx);  // 8 blocks
    const Prompt a = prompt(33, 4), b = prompt(33, 5), big = prompt(129, 6);
    REQUIRE(admit(c, sh, 0, a) == 0);  // 3 blocks, 2 registered
    REQUIRE(admit(c, sh, 1, b) == 0);
    // Released tail first: a's block 1, a's block 0, b's block 1, b's block 0.
    KVRT_REQUIRE_OK(kvrt_cache_seq_rm(c, 0, -1, -1));
    KVRT_REQUIRE_OK(kvrt_cache_seq_rm(c, 1, -1, -1));
    kvrt_paged_stats st = KVRT_PAGED_STATS_INIT;
    KVRT_REQUIRE_OK(kvrt_cache_paged_get_stats(c, &st));
    REQUIRE(st.cached_blocks == 4);
    REQUIRE(st.free_blocks == 4);
    // Too big: nothing changes.
    const State before = state_of(c, 4);
    uint32_t n_cached = 5;
    CHECK(kvrt_cache_paged_admit(c, 2, 129, big.ids.data(), big.pos.data(), 0, &n_cached, nullptr) ==
          KVRT_ERROR_CACHE_FULL);
    CHECK(n_cached == 0);
    CHECK(state_of(c, 4) == before);
    // 5 new blocks: the 4 free ones and the oldest cached one (a's block 1).
    const Prompt five = prompt(80, 7);
    REQUIRE(admit(c, sh, 2, five) == 0);
    KVRT_REQUIRE_OK(kvrt_cache_paged_get_stats(c, &st));
    CHECK(st.cached_blocks == 3);
    // b maps its 2 blocks and takes the oldest cached one (a's block 0).
    REQUIRE(admit(c, sh, 3, b) == 32);
    // Every block in use: a is gone from the registry, and the pool is full.
    CHECK(kvrt_cache_paged_admit(c, 0, 33, a.ids.data(), a.pos.data(), 0, &n_cached, nullptr) ==
          KVRT_ERROR_CACHE_FULL);
    KVRT_REQUIRE_OK(kvrt_cache_seq_rm(c, 2, -1, -1));
    REQUIRE(admit(c, sh, 0, a) == 0);
    REQUIRE(ctx.validation_errors() == 0);
}

TEST_CASE("paged layout: a dropped recording cuts the sequence back and never shows unwritten rows", "[paged]") {
    GpuContext ctx;
    Shape sh;
    Cache c = CacheSpec(sh).cells(256, 4).paged(16).create(ctx);
    const Prompt p = prompt(40, 8);
    REQUIRE(admit(c, sh, 0, p) == 0);
    KVRT_REQUIRE_OK(kvrt_cache_paged_fork(c, 0, 1));
    const std::vector<uint32_t> before0 = paged_cells(c, 0), before1 = paged_cells(c, 1);
    {
        Stream s(ctx);
        KVRT_REQUIRE_OK(kvrt_stream_begin(s));
        const int32_t id = 1, pos = 40;
        uint32_t cell = 0;
        KVRT_REQUIRE_OK(kvrt_cache_paged_append(c, s, 1, 1, &id, &pos, &cell));
        REQUIRE(paged_cells(c, 1).size() == 41);
    }  // destroyed without submitting: the copy-on-write never ran
    // Sequence 1 is cut to the start of the block it copied; sequence 0 is whole.
    CHECK(paged_cells(c, 0) == before0);
    const std::vector<uint32_t> after1 = paged_cells(c, 1);
    REQUIRE(after1.size() == 32);
    CHECK(std::equal(after1.begin(), after1.end(), before1.begin()));
    // A store without a copy is cut back exactly.
    Prompt more;
    for (int32_t i = 0; i < 24; ++i) {
        more.ids.push_back(500 + i);
        more.pos.push_back(40 + i);
    }
    auto store_more = [&](kvrt_stream s) {
        std::vector<int32_t> seqs(24, 0);
        std::vector<float> k, v;
        token_rows(sh, more.ids, more.pos, &k, &v);
        kvrt_batch b = make_batch(24, more.pos.data(), seqs.data());
        kvrt_tensor_ref kr = host_tensor(k.data()), vr = host_tensor(v.data());
        KVRT_REQUIRE_OK(kvrt_cache_store(c, s, &b, -1, &kr, &vr, nullptr));
    };
    {
        Stream s(ctx);
        KVRT_REQUIRE_OK(kvrt_stream_begin(s));
        store_more(s);
        REQUIRE(paged_cells(c, 0).size() == 64);
    }
    CHECK(paged_cells(c, 0) == before0);
    // Submitted, the same store stays; its tokens' ids are unknown, so block 2
    // is not registered and a prompt with those ids maps blocks 0 and 1 only.
    {
        Stream s(ctx);
        run_stream(s, [&]() { store_more(s); });
    }
    CHECK(paged_cells(c, 0).size() == 64);
    Prompt longer = p;
    longer.ids.insert(longer.ids.end(), more.ids.begin(), more.ids.end());
    longer.pos.insert(longer.pos.end(), more.pos.begin(), more.pos.end());
    uint32_t n_cached = 0;
    KVRT_REQUIRE_OK(kvrt_cache_paged_admit(c, 2, 64, longer.ids.data(), longer.pos.data(), 0, &n_cached, nullptr));
    CHECK(n_cached == 32);
    REQUIRE(ctx.validation_errors() == 0);
}

TEST_CASE("paged layout: bad input and unsupported operations are refused and change nothing", "[paged][errors]") {
    GpuContext ctx;
    Shape sh;
    // Creation.
    {
        kvrt_paged_layout_desc pl = KVRT_PAGED_LAYOUT_DESC_INIT;
        kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
        d.n_layers = 1;
        d.n_heads = d.n_kv_heads = 1;
        d.head_dim_k = 32;
        d.capacity = 100;
        d.layout = KVRT_LAYOUT_PAGED;
        Cache bad;
        CHECK(kvrt_cache_create(ctx, &d, bad.out()) == KVRT_ERROR_INVALID_ARGUMENT);  // 100 % 16
        d.capacity = 128;
        d.next = &pl;
        for (uint32_t b : {8u, 24u, 128u}) {
            pl.block_size = b;
            CHECK(kvrt_cache_create(ctx, &d, bad.out()) == KVRT_ERROR_INVALID_ARGUMENT);
        }
        pl.block_size = 32;
        d.layout = KVRT_LAYOUT_CELLS;
        CHECK(kvrt_cache_create(ctx, &d, bad.out()) == KVRT_ERROR_INVALID_ARGUMENT);
        CHECK(bad == nullptr);
    }
    // The paged calls on a cell cache.
    {
        Cache cells = CacheSpec(sh).cells(64, 2).create(ctx);
        const Prompt p = prompt(4, 1);
        uint32_t n = 0;
        kvrt_paged_stats st = KVRT_PAGED_STATS_INIT;
        CHECK(kvrt_cache_paged_admit(cells, 0, 4, p.ids.data(), p.pos.data(), 0, &n, nullptr) == KVRT_ERROR_UNSUPPORTED);
        CHECK(kvrt_cache_paged_append(cells, nullptr, 0, 4, p.ids.data(), p.pos.data(), nullptr) ==
              KVRT_ERROR_UNSUPPORTED);
        CHECK(kvrt_cache_paged_fork(cells, 0, 1) == KVRT_ERROR_UNSUPPORTED);
        CHECK(kvrt_cache_paged_set_sharing(cells, 0, 0) == KVRT_ERROR_UNSUPPORTED);
        CHECK(kvrt_cache_paged_clear_registry(cells) == KVRT_ERROR_UNSUPPORTED);
        CHECK(kvrt_cache_paged_get_cells(cells, 0, 0, 0, nullptr, &n) == KVRT_ERROR_UNSUPPORTED);
        CHECK(kvrt_cache_paged_get_stats(cells, &st) == KVRT_ERROR_UNSUPPORTED);
    }
    Cache c = CacheSpec(sh).cells(128, 4).paged(16).create(ctx);
    const Prompt p = prompt(40, 1);
    REQUIRE(admit(c, sh, 0, p) == 0);
    KVRT_REQUIRE_OK(kvrt_cache_paged_fork(c, 0, 1));
    const State before = state_of(c, 4);
    uint32_t n = 0;
    std::vector<int32_t> bad_ids = p.ids;
    bad_ids[3] = -5;
    std::vector<int32_t> bad_pos = p.pos;
    bad_pos[7] = -1;
    const int32_t two[2] = {0, 1};
    const uint32_t counts[1] = {2};
    const int32_t pos0 = 100;
    kvrt_batch shared_token = make_batch(1, &pos0, two, counts);
    std::vector<float> rows(size_t{sh.layers} * sh.kv_heads * sh.dk, 0.0f);
    const kvrt_tensor_ref t = host_tensor(rows.data());
    int32_t n_past = 0;
    struct Case {
        const char* what;
        kvrt_result want;
        std::function<kvrt_result()> call;
    };
    const std::vector<Case> cases = {
        {"admit into a sequence in use", KVRT_ERROR_INVALID_ARGUMENT,
         [&] { return kvrt_cache_paged_admit(c, 0, 40, p.ids.data(), p.pos.data(), 0, &n, nullptr); }},
        {"admit out of range", KVRT_ERROR_INVALID_ARGUMENT,
         [&] { return kvrt_cache_paged_admit(c, 4, 40, p.ids.data(), p.pos.data(), 0, &n, nullptr); }},
        {"admit without out_n_cached", KVRT_ERROR_INVALID_ARGUMENT,
         [&] { return kvrt_cache_paged_admit(c, 2, 40, p.ids.data(), p.pos.data(), 0, nullptr, nullptr); }},
        {"admit a negative id", KVRT_ERROR_INVALID_ARGUMENT,
         [&] { return kvrt_cache_paged_admit(c, 2, 40, bad_ids.data(), p.pos.data(), 0, &n, nullptr); }},
        {"admit a negative position", KVRT_ERROR_INVALID_ARGUMENT,
         [&] { return kvrt_cache_paged_admit(c, 2, 40, p.ids.data(), bad_pos.data(), 0, &n, nullptr); }},
        {"admit NULL ids", KVRT_ERROR_INVALID_ARGUMENT,
         [&] { return kvrt_cache_paged_admit(c, 2, 40, nullptr, p.pos.data(), 0, &n, nullptr); }},
        {"admit more than the pool", KVRT_ERROR_CACHE_FULL,
         [&] {
             const Prompt big = prompt(120, 9);
             return kvrt_cache_paged_admit(c, 2, 120, big.ids.data(), big.pos.data(), 0, &n, nullptr);
         }},
        {"append NULL positions", KVRT_ERROR_INVALID_ARGUMENT,
         [&] { return kvrt_cache_paged_append(c, nullptr, 0, 3, p.ids.data(), nullptr, nullptr); }},
        {"append a negative id", KVRT_ERROR_INVALID_ARGUMENT,
         [&] { return kvrt_cache_paged_append(c, nullptr, 0, 5, bad_ids.data(), p.pos.data(), nullptr); }},
        {"append out of range", KVRT_ERROR_INVALID_ARGUMENT,
         [&] { return kvrt_cache_paged_append(c, nullptr, -1, 1, p.ids.data(), p.pos.data(), nullptr); }},
        {"append more than the pool", KVRT_ERROR_CACHE_FULL,
         [&] {
             const Prompt big = prompt(100, 9);
             return kvrt_cache_paged_append(c, nullptr, 1, 100, big.ids.data(), big.pos.data(), nullptr);
         }},
        {"fork into itself", KVRT_ERROR_INVALID_ARGUMENT, [&] { return kvrt_cache_paged_fork(c, 0, 0); }},
        {"fork into a sequence in use", KVRT_ERROR_INVALID_ARGUMENT, [&] { return kvrt_cache_paged_fork(c, 0, 1); }},
        {"fork out of range", KVRT_ERROR_INVALID_ARGUMENT, [&] { return kvrt_cache_paged_fork(c, 0, 9); }},
        {"sharing out of range", KVRT_ERROR_INVALID_ARGUMENT, [&] { return kvrt_cache_paged_set_sharing(c, 4, 1); }},
        {"cells out of range", KVRT_ERROR_INVALID_ARGUMENT,
         [&] { return kvrt_cache_paged_get_cells(c, 4, 0, 0, nullptr, &n); }},
        {"cells into NULL", KVRT_ERROR_INVALID_ARGUMENT,
         [&] { return kvrt_cache_paged_get_cells(c, 0, 0, 4, nullptr, &n); }},
        {"a token of two sequences", KVRT_ERROR_INVALID_ARGUMENT,
         [&] { return kvrt_cache_store(c, nullptr, &shared_token, -1, &t, &t, nullptr); }},
        {"removing the middle", KVRT_ERROR_UNSUPPORTED, [&] { return kvrt_cache_seq_rm(c, 0, 10, 20); }},
        {"removing the middle of all", KVRT_ERROR_UNSUPPORTED, [&] { return kvrt_cache_seq_rm(c, -1, 0, 5); }},
        {"shifting the middle", KVRT_ERROR_UNSUPPORTED, [&] { return kvrt_cache_seq_add(c, 0, 10, 20, 2); }},
        {"shifting below 0", KVRT_ERROR_UNSUPPORTED, [&] { return kvrt_cache_seq_add(c, 0, 5, -1, -6); }},
        {"copying part of a sequence", KVRT_ERROR_UNSUPPORTED, [&] { return kvrt_cache_seq_cp(c, 0, 2, 0, 10); }},
        {"copying into a sequence in use", KVRT_ERROR_UNSUPPORTED, [&] { return kvrt_cache_seq_cp(c, 0, 1, -1, -1); }},
        {"seq_div", KVRT_ERROR_UNSUPPORTED, [&] { return kvrt_cache_seq_div(c, 0, 0, -1, 2); }},
        {"context shift", KVRT_ERROR_UNSUPPORTED, [&] { return kvrt_cache_context_shift(c, 0, 4, 8, &n_past); }},
        {"reversed range", KVRT_ERROR_INVALID_ARGUMENT, [&] { return kvrt_cache_seq_rm(c, 0, 20, 10); }},
    };
    for (const Case& k : cases) {
        INFO(k.what);
        CHECK(k.call() == k.want);
        CHECK(std::strlen(kvrt_last_error_message()) > 0);
        CHECK(state_of(c, 4) == before);
    }
    // A whole-sequence copy into an empty sequence is a fork.
    KVRT_REQUIRE_OK(kvrt_cache_seq_cp(c, 0, 2, -1, -1));
    CHECK(paged_cells(c, 2) == paged_cells(c, 0));
    // Compaction moves nothing.
    uint32_t moved = 9;
    KVRT_REQUIRE_OK(kvrt_cache_compact(c, nullptr, 0.0f, 0, &moved));
    CHECK(moved == 0);
    REQUIRE(ctx.validation_errors() == 0);
}


TEST_CASE("paged layout: a call that fails at any point leaves every sequence as it was", "[paged][faults]") {
    GpuContext ctx;
    Shape sh;
    const uint32_t n_seqs = 4;
    Cache c = CacheSpec(sh).cells(256, n_seqs).paged(16).create(ctx);
    const Prompt p = prompt(40, 3);
    REQUIRE(admit(c, sh, 0, p) == 0);
    KVRT_REQUIRE_OK(kvrt_cache_paged_fork(c, 0, 1));  // shares the partly filled block 2
    std::vector<float> one_k, one_v;
    auto store_one = [&](int32_t seq, int32_t pos, kvrt_stream s) {
        const std::vector<int32_t> ids = {77}, ps = {pos}, seqs = {seq};
        token_rows(sh, ids, ps, &one_k, &one_v);
        kvrt_batch b = make_batch(1, ps.data(), seqs.data());
        kvrt_tensor_ref kr = host_tensor(one_k.data()), vr = host_tensor(one_v.data());
        return kvrt_cache_store(c, s, &b, -1, &kr, &vr, nullptr);
    };
    struct Op {
        const char* what;
        bool stream;
        std::function<kvrt_result(kvrt_stream)> call;
        std::function<void()> setup = [] {};    // before each try, not under the fault
        std::function<void()> after_failure = [] {};
    };
    const int32_t id = 5, pos40 = 40, pos41 = 41;
    uint32_t n_cached = 0;
    // A tree of 4 tokens after sequence 2's 40: 0 -> {1, 2}, 2 -> {3}.
    const std::vector<int32_t> tree_parents = {-1, 0, 0, 2}, tree_pos = {40, 41, 41, 42}, tree_seq(4, 2),
                               tree_ids = {60, 61, 62, 63};
    kvrt_batch_tree tree = KVRT_BATCH_TREE_INIT;
    tree.parents = tree_parents.data();
    std::vector<uint32_t> tree_cells(4);
    bool tree_stored = false;
    const std::vector<Op> ops = {
        {"store into a shared block (copy-on-write), synchronous", false,
         [&](kvrt_stream) { return store_one(1, 40, nullptr); }},
        {"append into a shared block (copy-on-write), recorded", true,
         [&](kvrt_stream s) { return kvrt_cache_paged_append(c, s, 2, 1, &id, &pos40, nullptr); },
         [&] { KVRT_REQUIRE_OK(kvrt_cache_paged_fork(c, 0, 2)); },
         [&] { KVRT_REQUIRE_OK(kvrt_cache_seq_rm(c, 2, -1, -1)); }},
        {"store a new block, recorded", true, [&](kvrt_stream s) { return store_one(0, 40, s); }},
        {"append, synchronous", false,
         [&](kvrt_stream) { return kvrt_cache_paged_append(c, nullptr, 0, 1, &id, &pos41, nullptr); }},
        {"admit over registered blocks", false,
         [&](kvrt_stream) {
             return kvrt_cache_paged_admit(c, 3, 40, p.ids.data(), p.pos.data(), 0, &n_cached, nullptr);
         }},
        {"shift of shared blocks (copy-on-shift)", false,
         [&](kvrt_stream) { return kvrt_cache_seq_add(c, 3, 10, -1, 2); }},
        {"fork", false, [&](kvrt_stream) { return kvrt_cache_paged_fork(c, 3, 2); },
         [&] { KVRT_REQUIRE_OK(kvrt_cache_seq_rm(c, 2, -1, -1)); }},
        {"tree accept (row moves)", false,
         [&](kvrt_stream) {
             kvrt_batch_tree t = tree;
             t.cells = tree_cells.data();
             kvrt_batch b = make_batch(4, tree_pos.data(), tree_seq.data());
             b.next = &t;
             const int32_t leaf = 3;
             return kvrt_cache_tree_accept(c, &b, 1, &leaf);
         },
         [&] {
             if (tree_stored) return;
             kvrt_batch b = make_batch(4, tree_pos.data(), tree_seq.data());
             b.next = &tree;
             token_rows(sh, tree_ids, tree_pos, &one_k, &one_v);
             kvrt_tensor_ref kr = host_tensor(one_k.data()), vr = host_tensor(one_v.data());
             KVRT_REQUIRE_OK(kvrt_cache_store(c, nullptr, &b, -1, &kr, &vr, tree_cells.data()));
             tree_stored = true;
         }},
    };
    for (const Op& op : ops) {
        for (uint64_t n = 1;; ++n) {
            INFO(op.what << ", fault point " << n);
            op.setup();
            const State before = state_of(c, n_seqs);
            const std::vector<uint8_t> rows_before = seen_rows(c, sh, n_seqs);
            Stream s(ctx);
            if (op.stream) KVRT_REQUIRE_OK(kvrt_stream_begin(s));
            uint64_t passed = 0;
            const kvrt_result r = with_fault_point(
                n, &passed, [&] { return op.call(op.stream ? static_cast<kvrt_stream>(s) : nullptr); });
            INFO("result " << r << ": " << kvrt_last_error_message());
            if (op.stream) {
                const kvrt_result submitted = kvrt_stream_submit(s);
                if (r == KVRT_SUCCESS) {
                    REQUIRE(submitted == KVRT_SUCCESS);
                    KVRT_REQUIRE_OK(kvrt_stream_wait(s, 60ull * 1000 * 1000 * 1000));
                }
            }
            // A synchronous wait that times out keeps the call (its work was
            // submitted and completes later): the last point of such a call.
            if (r == KVRT_ERROR_TIMEOUT) {
                REQUIRE(!op.stream);
                REQUIRE(!(state_of(c, n_seqs) == before));
                break;
            }
            if (r != KVRT_SUCCESS) {
                REQUIRE(state_of(c, n_seqs) == before);
                REQUIRE(seen_rows(c, sh, n_seqs) == rows_before);
                op.after_failure();
            }
            if (passed < n) {
                REQUIRE(r == KVRT_SUCCESS);  // the armed point was never reached: every point covered
                break;
            }
        }
    }
    // The successful calls did what they say.
    CHECK(paged_cells(c, 0).size() == 42);
    CHECK(paged_cells(c, 1).size() == 41);
    CHECK(paged_cells(c, 3).size() == 40);
    CHECK(paged_cells(c, 2).size() == 43);  // the fork of 3 and the accepted path 0, 2, 3
    CHECK(n_cached == 32);
    REQUIRE(ctx.validation_errors() == 0);
}

TEST_CASE("paged layout: a token tree is attended and accepted as in the cell layout", "[paged][attention]") {
    KVRT_EACH_KERNEL_VARIANT(variant);
    GpuContext ctx(variant.flags);
    Shape sh;
    sh.type(GENERATE(KVRT_TYPE_F16, KVRT_TYPE_Q8_0));
    Cache paged = CacheSpec(sh).cells(256, 2).paged(16).create(ctx);
    Cache twin = CacheSpec(sh).cells(256, 2).create(ctx);
    const Prompt p = prompt(20, 6);
    REQUIRE(admit(paged, sh, 0, p) == 0);
    std::vector<int32_t> seqs(20, 0);
    std::vector<float> k, v;
    token_rows(sh, p.ids, p.pos, &k, &v);
    std::vector<uint32_t> twin_cells(20);
    {
        kvrt_batch b = make_batch(20, p.pos.data(), seqs.data());
        kvrt_tensor_ref kr = host_tensor(k.data()), vr = host_tensor(v.data());
        KVRT_REQUIRE_OK(kvrt_cache_store(twin, nullptr, &b, -1, &kr, &vr, twin_cells.data()));
    }
    // A tree of 7 draft tokens: 0 -> {1, 2}, 1 -> {3, 4}, 2 -> {5}, 5 -> {6}.
    const std::vector<int32_t> parents = {-1, 0, 0, 1, 1, 2, 5}, tpos = {20, 21, 21, 22, 22, 22, 23};
    const std::vector<int32_t> tids = {900, 901, 902, 903, 904, 905, 906}, tseq(7, 0);
    token_rows(sh, tids, tpos, &k, &v);
    kvrt_batch_tree tree = KVRT_BATCH_TREE_INIT;
    tree.parents = parents.data();
    kvrt_batch tb = make_batch(7, tpos.data(), tseq.data());
    tb.next = &tree;
    kvrt_tensor_ref kr = host_tensor(k.data()), vr = host_tensor(v.data());
    std::vector<uint32_t> pc(7), tc(7);
    KVRT_REQUIRE_OK(kvrt_cache_store(paged, nullptr, &tb, -1, &kr, &vr, pc.data()));
    KVRT_REQUIRE_OK(kvrt_cache_store(twin, nullptr, &tb, -1, &kr, &vr, tc.data()));
    // Attention of the tree's queries: each sees the prompt and its ancestors.
    Rng rng(11);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> q(7 * sh.heads * sh.dk);
    for (float& x : q) x = nd(rng);
    auto attend_tree = [&](kvrt_cache c, const std::vector<uint32_t>& cells, uint32_t layer) {
        kvrt_batch_tree t = tree;
        t.cells = cells.data();
        kvrt_batch b = tb;
        b.next = &t;
        std::vector<float> out(7 * sh.heads * sh.dv);
        kvrt_tensor_ref qr = host_tensor(q.data());
        kvrt_output_ref o = host_output(out.data());
        kvrt_attention_params prm = KVRT_ATTENTION_PARAMS_INIT;
        prm.scale = 0.25f;
        KVRT_REQUIRE_OK(kvrt_cache_attention(c, nullptr, static_cast<int32_t>(layer), &b, &qr, &o, &prm));
        return out;
    };
    for (uint32_t l = 0; l < sh.layers; ++l) {
        const double e = kvrt::ref::nmse(attend_tree(paged, pc, l), attend_tree(twin, tc, l));
        INFO("layer " << l << " nmse " << e);
        REQUIRE(e <= 1e-10);
    }
    // A tree that is no longer the sequence's tail is refused, and nothing
    // changes; nor does a tree of cells that hold another sequence.
    {
        const int32_t id = 1, pos = 30;
        uint32_t cell = 0;
        KVRT_REQUIRE_OK(kvrt_cache_paged_append(paged, nullptr, 0, 1, &id, &pos, &cell));
        const State before = state_of(paged, 2);
        kvrt_batch_tree t = tree;
        t.cells = pc.data();
        kvrt_batch b = tb;
        b.next = &t;
        const int32_t leaf = 6;
        CHECK(kvrt_cache_tree_accept(paged, &b, 1, &leaf) == KVRT_ERROR_UNSUPPORTED);
        CHECK(state_of(paged, 2) == before);
        const std::vector<int32_t> wrong_seq(7, 1);
        b.seq_ids = wrong_seq.data();
        CHECK(kvrt_cache_tree_accept(paged, &b, 1, &leaf) == KVRT_ERROR_INVALID_ARGUMENT);
        CHECK(state_of(paged, 2) == before);
        KVRT_REQUIRE_OK(kvrt_cache_seq_rm(paged, 0, 30, -1));
    }
    // Accept the path 0, 2, 5, 6 in both.
    const int32_t leaf = 6;
    for (auto [c, cells] : {std::pair<kvrt_cache, std::vector<uint32_t>*>{paged, &pc}, {twin, &tc}}) {
        kvrt_batch_tree t = tree;
        t.cells = cells->data();
        kvrt_batch b = tb;
        b.next = &t;
        KVRT_REQUIRE_OK(kvrt_cache_tree_accept(c, &b, 1, &leaf));
    }
    // The sequence's rows in token order equal the twin's kept cells'.
    const std::vector<uint32_t> now = paged_cells(paged, 0);
    REQUIRE(now.size() == 24);
    std::vector<uint32_t> want = twin_cells;
    for (uint32_t i : {0u, 2u, 5u, 6u}) want.push_back(tc[i]);
    for (uint32_t l = 0; l < sh.layers; ++l)
        for (kvrt_kv_array a : {KVRT_KV_ARRAY_K, KVRT_KV_ARRAY_V})
            REQUIRE(raw_rows(paged, static_cast<int32_t>(l), a, now) == raw_rows(twin, static_cast<int32_t>(l), a, want));
    int32_t hi = 0;
    KVRT_REQUIRE_OK(kvrt_cache_seq_pos_max(paged, 0, &hi));
    CHECK(hi == 23);
    kvrt_cache_info info = KVRT_CACHE_INFO_INIT;
    KVRT_REQUIRE_OK(kvrt_cache_get_info(paged, &info));
    CHECK(info.used == 24);
    // And the next token attends alike.
    std::vector<SeqModel> model(1);
    model[0].pos = p.pos;
    model[0].pos.insert(model[0].pos.end(), {20, 21, 22, 23});
    check_attention(paged, twin, sh, model, rng);
    // Rejecting the whole draft drops it.
    KVRT_REQUIRE_OK(kvrt_cache_store(paged, nullptr, &tb, -1, &kr, &vr, pc.data()));
    {
        kvrt_batch_tree t = tree;
        t.cells = pc.data();
        kvrt_batch b = tb;
        b.next = &t;
        KVRT_REQUIRE_OK(kvrt_cache_tree_accept(paged, &b, 0, nullptr));
    }
    CHECK(paged_cells(paged, 0) == now);
    REQUIRE(ctx.validation_errors() == 0);
}
