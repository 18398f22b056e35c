// The window group of a paged cache (kvrt_window_layout_desc chained with
// kvrt_paged_layout_desc): windowed layers keep about their window per
// sequence while block tables, prefix sharing, copy-on-write forks and shifts
// work as without the group.
//
// Differential: every operation runs on a paged cache with a window group
// and on a paged cache with the same windows that keeps every row (whose
// attention the paged and attention tests check against the double
// reference). Attention in every layer must agree, or, in a windowed layer,
// be refused with KVRT_ERROR_INVALID_STATE exactly when a plain model of the
// group (the positions each sequence still holds there) says a row the
// query's window reaches was dropped.
#include "gpu_test.hpp"

#include <algorithm>
#include <functional>
#include <tuple>
#include <set>
#include <string>
#include <vector>

#include "api/handles.hpp"
#include "common/random.hpp"
#include "core/fault.hpp"
#include "paged_check.hpp"
#include "reference/metrics.hpp"

using namespace kvrt_test;
using namespace kvrt_test::paged;

namespace {

constexpr uint32_t kB = 16, kSeqs = 4, kKeep = 2, kSpan = 12;
const std::vector<uint32_t> kWindows = {8, 0, 12};

// The plain cache: paged, 3 layers with kWindows. The grouped one chains a
// window group on it: CacheSpec(shape()).group(cells, kKeep).
Shape shape() {
    Shape sh;
    sh.layers = 3;
    sh.cells(64 * kB, kSeqs).paged(kB);
    sh.windows = kWindows;
    return sh;
}

kvrt::cache::Cache& impl(kvrt_cache c) { return *kvrt::api::cache_of(c); }

void verify_group(kvrt_cache c) {
    verify(c);
    const kvrt_result r = impl(c).window_verify();
    INFO(kvrt_last_error_message());
    REQUIRE(r == KVRT_SUCCESS);
}

// What each sequence holds: its tokens (the cache's) and the positions whose
// windowed rows the group still holds.
struct Model {
    struct Seq {
        std::vector<int32_t> ids, pos;
        std::set<int32_t> held;
    };
    Seq seqs[kSeqs];

    // Whether the group holds every row a query at `lowest` or later sees.
    bool serves(uint32_t s, int32_t lowest) const {
        for (int32_t p : seqs[s].pos)
            if ((p < static_cast<int32_t>(kKeep) || p > lowest - static_cast<int32_t>(kSpan)) && !seqs[s].held.count(p))
                return false;
        return true;
    }
    // What a placement at `lowest` drops first.
    void drop_before(uint32_t s, int32_t lowest) {
        std::set<int32_t>& h = seqs[s].held;
        for (auto it = h.begin(); it != h.end();)
            it = *it >= static_cast<int32_t>(kKeep) && *it <= lowest - static_cast<int32_t>(kSpan) ? h.erase(it)
                                                                                                   : std::next(it);
    }
    int32_t window_pos_min(uint32_t s) const {
        const std::set<int32_t>& h = seqs[s].held;
        auto it = h.lower_bound(static_cast<int32_t>(kKeep));
        if (it != h.end()) return *it;
        return h.empty() ? -1 : *h.begin();
    }
};

class Pair {
public:
    explicit Pair(kvrt_context ctx, uint32_t group_cells = 0)
        : grouped_(CacheSpec(shape()).group(group_cells, kKeep).create(ctx)), plain_(shape().create(ctx)) {}
    Pair(const Pair&) = delete;
    Pair& operator=(const Pair&) = delete;

    kvrt_cache grouped() const { return grouped_; }
    kvrt_cache plain() const { return plain_; }
    Model& model() { return model_; }

    // Appends tokens to `s` in both caches and writes their rows; returns
    // the grouped cache's result (the plain cache appends only if it did).
    kvrt_result append(uint32_t s, const std::vector<int32_t>& ids, const std::vector<int32_t>& pos) {
        const Shape sh = shape();
        const uint32_t n = static_cast<uint32_t>(ids.size());
        std::vector<uint32_t> cells(n);
        const kvrt_result r =
            kvrt_cache_paged_append(grouped_, nullptr, static_cast<int32_t>(s), n, ids.data(), pos.data(), cells.data());
        if (r != KVRT_SUCCESS) return r;
        write_rows(grouped_, sh, ids, pos, 0, cells.data());
        KVRT_REQUIRE_OK(
            kvrt_cache_paged_append(plain_, nullptr, static_cast<int32_t>(s), n, ids.data(), pos.data(), cells.data()));
        write_rows(plain_, sh, ids, pos, 0, cells.data());
        Model::Seq& m = model_.seqs[s];
        model_.drop_before(s, *std::min_element(pos.begin(), pos.end()));
        m.ids.insert(m.ids.end(), ids.begin(), ids.end());
        m.pos.insert(m.pos.end(), pos.begin(), pos.end());
        m.held.insert(pos.begin(), pos.end());
        return r;
    }

    // Admits a prompt into the empty `s` in both; returns both n_cached.
    std::pair<uint32_t, uint32_t> admit(uint32_t s, const Prompt& p) {
        const Shape sh = shape();
        std::pair<uint32_t, uint32_t> cached;
        for (kvrt_cache c : {grouped_.get(), plain_.get()}) {
            uint32_t n_cached = 0;
            std::vector<uint32_t> cells(p.ids.size());
            KVRT_REQUIRE_OK(kvrt_cache_paged_admit(c, static_cast<int32_t>(s), static_cast<uint32_t>(p.ids.size()),
                                                   p.ids.data(), p.pos.data(), 0, &n_cached, cells.data()));
            write_rows(c, sh, p.ids, p.pos, n_cached, cells.data() + n_cached);
            (c == grouped_ ? cached.first : cached.second) = n_cached;
        }
        Model::Seq& m = model_.seqs[s];
        m.ids = p.ids;
        m.pos = p.pos;
        m.held.clear();
        const int32_t lowest = *std::min_element(p.pos.begin() + cached.first, p.pos.end());
        for (size_t t = 0; t < p.pos.size(); ++t)
            if (t >= cached.first || p.pos[t] < static_cast<int32_t>(kKeep) ||
                p.pos[t] > lowest - static_cast<int32_t>(kSpan))
                m.held.insert(p.pos[t]);
        return cached;
    }

    void fork(uint32_t src, uint32_t dst) {
        for (kvrt_cache c : {grouped_.get(), plain_.get()})
            KVRT_REQUIRE_OK(kvrt_cache_paged_fork(c, static_cast<int32_t>(src), static_cast<int32_t>(dst)));
        model_.seqs[dst] = model_.seqs[src];
    }

    // Removes the tokens of `s` at positions >= p0 (p0 < 0: all of them).
    void remove_from(uint32_t s, int32_t p0) {
        for (kvrt_cache c : {grouped_.get(), plain_.get()})
            KVRT_REQUIRE_OK(kvrt_cache_seq_rm(c, static_cast<int32_t>(s), p0, -1));
        Model::Seq& m = model_.seqs[s];
        if (p0 < 0) {
            m = Model::Seq{};
            return;
        }
        size_t keep = 0;
        while (keep < m.pos.size() && m.pos[keep] < p0) ++keep;
        m.ids.resize(keep);
        m.pos.resize(keep);
        m.held.erase(m.held.lower_bound(p0), m.held.end());
    }

    // Moves the positions of `s` from p0 on by delta (positions rise, so it
    // is a suffix).
    void shift(uint32_t s, int32_t p0, int32_t delta) {
        for (kvrt_cache c : {grouped_.get(), plain_.get()})
            KVRT_REQUIRE_OK(kvrt_cache_seq_add(c, static_cast<int32_t>(s), p0, -1, delta));
        Model::Seq& m = model_.seqs[s];
        for (int32_t& p : m.pos)
            if (p >= p0) p += delta;
        std::set<int32_t> held;
        for (int32_t p : m.held) held.insert(p >= p0 ? p + delta : p);
        m.held = held;
    }

    // Attention of every non-empty sequence at its next position in every
    // layer: equal, or refused where the model says so. Returns the number
    // of refused queries.
    uint32_t check(uint32_t step) {
        verify_group(grouped_);
        verify(plain_);
        const Shape sh = shape();
        kvrt_attention_params params = KVRT_ATTENTION_PARAMS_INIT;
        params.scale = 0.25f;
        uint32_t refused = 0;
        for (uint32_t s = 0; s < kSeqs; ++s) {
            const Model::Seq& m = model_.seqs[s];
            int32_t pos_min = -2;
            KVRT_REQUIRE_OK(kvrt_cache_seq_window_pos_min(grouped_, static_cast<int32_t>(s), &pos_min));
            INFO("step " << step << ", sequence " << s);
            CHECK(pos_min == model_.window_pos_min(s));
            if (m.pos.empty()) continue;
            const int32_t next = m.pos.back() + 1;
            std::vector<float> q(size_t{sh.heads} * sh.dk);
            for (size_t i = 0; i < q.size(); ++i)
                q[i] = 0.02f * static_cast<float>((i * 7 + s * 3 + step) % 23) - 0.2f;
            for (uint32_t layer = 0; layer < sh.layers; ++layer) {
                INFO("layer " << layer);
                const AttentionPair r = attend_both(grouped_, plain_, static_cast<int32_t>(layer),
                                                    static_cast<int32_t>(s), next, q, size_t{sh.heads} * sh.dv, params);
                REQUIRE(r.rb == KVRT_SUCCESS);
                const bool served = kWindows[layer] == 0 || model_.serves(s, next);
                if (!served) {
                    CHECK(r.ra == KVRT_ERROR_INVALID_STATE);
                    ++refused;
                    continue;
                }
                REQUIRE(r.ra == KVRT_SUCCESS);
                CHECK(kvrt::ref::nmse(r.a, r.b) <= 1e-10);
                ++checked_;
            }
        }
        return refused;
    }
    uint32_t checked() const { return checked_; }

private:
    Cache grouped_, plain_;
    Model model_;
    uint32_t checked_ = 0;
};

uint64_t group_bytes(kvrt_cache c) {
    kvrt_cache_info info = KVRT_CACHE_INFO_INIT;
    KVRT_REQUIRE_OK(kvrt_cache_get_info(c, &info));
    return info.device_bytes;
}

}  // namespace

TEST_CASE("paged window group: the windowed layers keep the window, shared blocks included", "[paged][window]") {
    GpuContext ctx;
    Pair pair(ctx);
    // The group: 568 cells (4 x (12 + 2) + 512) of two layers instead of
    // 1,024 cells of them.
    CHECK(impl(pair.grouped()).window_group()->table().capacity() == 568);
    CHECK(group_bytes(pair.grouped()) < group_bytes(pair.plain()));

    // A 40-token prompt, then 30 decoded tokens: the group keeps the sinks
    // and the last 12 positions.
    const Prompt p = prompt(40, 1);
    CHECK(pair.admit(0, p) == std::make_pair(0u, 0u));
    pair.check(0);
    for (int32_t t = 40; t < 70; ++t) REQUIRE(pair.append(0, {1000 + t}, {t}) == KVRT_SUCCESS);
    pair.check(1);
    CHECK(impl(pair.grouped()).window_group()->table().seq_cell_count(0) == 2 + 12);
    int32_t pos_min = -1;
    KVRT_REQUIRE_OK(kvrt_cache_seq_window_pos_min(pair.grouped(), 0, &pos_min));
    CHECK(pos_min == 58);

    // A fork shares every block and every group cell; the first append of
    // each side copies the shared partial block (70 = 4 x 16 + 6 tokens) and
    // the group rows of it that the windows still hold.
    pair.fork(0, 1);
    const uint32_t used_before = impl(pair.grouped()).window_group()->table().used();
    CHECK(used_before == 14);
    REQUIRE(pair.append(1, {5000}, {70}) == KVRT_SUCCESS);
    REQUIRE(pair.append(0, {6000}, {70}) == KVRT_SUCCESS);
    pair.check(2);
    CHECK(pair.checked() == 3 + 3 + 2 * 3);

    // A shift of one side copies what the other still sees, and rotates.
    pair.shift(1, 60, 3);
    pair.check(3);
    REQUIRE(pair.append(1, {5001}, {74}) == KVRT_SUCCESS);
    pair.check(4);
}

TEST_CASE("paged window group: admit maps what the group can serve", "[paged][window]") {
    GpuContext ctx;
    Pair pair(ctx);
    const Prompt p = prompt(64, 2);
    CHECK(pair.admit(0, p).first == 0);
    // The whole prompt is held: a second sequence with it and one more token
    // maps all four blocks (a query at 64 sees 53..63 and the sinks).
    Prompt longer = p;
    longer.ids.push_back(7);
    longer.pos.push_back(64);
    CHECK(pair.admit(1, longer) == std::make_pair(64u, 64u));
    pair.check(0);
    pair.remove_from(1, -1);

    // Sequence 0 drops its tail from 60 on: the group no longer holds rows
    // 60..63 for the fourth block, so admit maps three blocks (a query at 48
    // sees 37..47, all held).
    pair.remove_from(0, 60);
    const auto cached = pair.admit(2, longer);
    CHECK(cached.first == 48);
    CHECK(cached.second >= 48);
    pair.check(1);

    // Sequence 0 decodes on from 60 and sequence 2 leaves: rows 37..47 go
    // too, and with them every block whose window reaches them, down to the
    // first (a query at 16 sees 5..15).
    for (int32_t t = 60; t < 66; ++t) REQUIRE(pair.append(0, {100 + t}, {t}) == KVRT_SUCCESS);
    pair.remove_from(2, -1);
    CHECK(pair.admit(3, longer).first == 0);
    pair.check(2);
    CHECK(pair.checked() == 3 * 2 + 3 * 2 + 3 * 2);
}

TEST_CASE("paged window group: random schedules agree with the plain cache and the model", "[paged][window]") {
    GpuContext ctx;
    Pair pair(ctx);
    Rng rng(20261128);
    auto pick = [&](uint32_t n) { return static_cast<uint32_t>(rng() % n); };
    uint32_t plain_shared = 0;
    uint32_t appends = 0, refused_appends = 0, admits = 0, shared_admits = 0, forks = 0, shifts = 0, removes = 0,
             refused = 0;
    int32_t next_id = 1;
    for (uint32_t step = 0; step < 1000; ++step) {
        Model& m = pair.model();
        const uint32_t s = pick(kSeqs);
        Model::Seq& seq = m.seqs[s];
        const uint32_t op = pick(10);
        if (seq.pos.empty()) {
            // Start it: a prompt, sharing a prefix of another sequence's
            // tokens half the time, or a fork.
            const uint32_t other = pick(kSeqs);
            const Model::Seq& o = m.seqs[other];
            if (op < 3 && other != s && !o.pos.empty()) {
                pair.fork(other, s);
                ++forks;
            } else {
                // The other's whole history (its windowed rows are held
                // when it has not gone on since its own prompt) or a prefix.
                Prompt p;
                if (op < 8 && other != s && !o.pos.empty()) {
                    const size_t n = op < 6 ? o.pos.size() : 1 + pick(static_cast<uint32_t>(o.pos.size()));
                    p.ids.assign(o.ids.begin(), o.ids.begin() + static_cast<ptrdiff_t>(n));
                    p.pos.assign(o.pos.begin(), o.pos.begin() + static_cast<ptrdiff_t>(n));
                }
                const uint32_t extra = 1 + pick(40);
                for (uint32_t i = 0; i < extra; ++i) {
                    p.ids.push_back(next_id++);
                    p.pos.push_back(p.pos.empty() ? 0 : p.pos.back() + 1);
                }
                // A second request with the same start comes in at once
                // half the time.
                std::vector<std::pair<uint32_t, Prompt>> requests = {{s, p}};
                uint32_t s2 = s;
                for (uint32_t o2 = 0; o2 < kSeqs; ++o2)
                    if (o2 != s && m.seqs[o2].pos.empty()) s2 = o2;
                if (op % 2 == 0 && s2 != s) {
                    Prompt p2 = p;
                    for (uint32_t i = pick(20); i > 0; --i) {
                        p2.ids.push_back(next_id++);
                        p2.pos.push_back(p2.pos.back() + 1);
                    }
                    requests.emplace_back(s2, p2);
                }
                for (const auto& [target, prompt_of] : requests) {
                    const auto cached = pair.admit(target, prompt_of);
                    CHECK(cached.first <= cached.second);
                    ++admits;
                    shared_admits += cached.first > 0;
                    plain_shared += cached.second > 0;
                }
            }
        } else if (op < 5) {
            // Append 1-5 tokens (decode or a small batch).
            std::vector<int32_t> ids, pos;
            const uint32_t n = 1 + pick(5);
            for (uint32_t i = 0; i < n; ++i) {
                ids.push_back(next_id++);
                pos.push_back(seq.pos.back() + 1 + static_cast<int32_t>(i));
            }
            const bool serves = m.serves(s, pos[0]);
            const kvrt_result r = pair.append(s, ids, pos);
            INFO("step " << step << ": " << kvrt_last_error_message());
            CHECK(r == (serves ? KVRT_SUCCESS : KVRT_ERROR_INVALID_STATE));
            ++appends;
            refused_appends += r != KVRT_SUCCESS;
        } else if (op < 7) {
            // Remove a tail (a rejected draft, an edited turn), or all of it.
            const int32_t p0 = op == 5 && pick(2) ? seq.pos[pick(static_cast<uint32_t>(seq.pos.size()))] : -1;
            pair.remove_from(s, p0);
            ++removes;
        } else if (op < 8) {
            // Open a gap of 1-3 positions in the tail.
            const int32_t p0 = seq.pos[pick(static_cast<uint32_t>(seq.pos.size()))];
            pair.shift(s, p0, 1 + static_cast<int32_t>(pick(3)));
            ++shifts;
        } else {
            // Decode one token.
            const int32_t p = seq.pos.back() + 1;
            const bool serves = m.serves(s, p);
            CHECK(pair.append(s, {next_id++}, {p}) == (serves ? KVRT_SUCCESS : KVRT_ERROR_INVALID_STATE));
            ++appends;
            refused_appends += !serves;
        }
        refused += pair.check(step);
    }
    INFO("appends " << appends << " (refused " << refused_appends << "), admits " << admits << " (shared "
                    << shared_admits << ", " << plain_shared << " without the group), forks " << forks << ", shifts " << shifts << ", removes " << removes
                    << ", checks " << pair.checked() << ", refused queries " << refused);
    // The schedule reaches every path.
    CHECK(shared_admits > 5);
    CHECK(forks > 5);
    CHECK(shifts > 5);
    CHECK(refused_appends > 0);
    CHECK(pair.checked() > 1000);
}

TEST_CASE("paged window group: a failure at any point changes nothing", "[paged][window]") {
    GpuContext ctx;
    Cache c = CacheSpec(shape()).group(0, kKeep).create(ctx);
    const kvrt::cache::Cache& in = impl(c);
    const Shape sh = shape();
    const auto snapshot = [&]() {
        const kvrt::kv::CellTable& t = in.table();
        const kvrt::kv::CellTable& g = in.window_group()->table();
        std::vector<int64_t> s;
        for (const kvrt::kv::CellTable* x : {&t, &g}) {
            s.insert(s.end(), x->positions(), x->positions() + x->capacity());
            s.insert(s.end(), x->seq_words(), x->seq_words() + size_t{x->capacity()} * x->words_per_cell());
            s.push_back(x->used());
        }
        return std::make_pair(s, state_of(c, kSeqs));
    };
    // Ten tokens of sequence 0, shared by sequence 1: its first append
    // copies the partial block and the ten group rows.
    const Prompt p = prompt(10, 3);
    CHECK(admit(c, sh, 0, p) == 0);
    KVRT_REQUIRE_OK(kvrt_cache_paged_fork(c, 0, 1));
    struct Op {
        const char* name;
        std::function<kvrt_result()> run;
    };
    const std::vector<int32_t> ids = {77, 78}, pos = {10, 11};
    Prompt longer = prompt(40, 4);
    const std::vector<Op> ops = {
        {"append after a fork",
         [&] {
             std::vector<uint32_t> cells(2);
             return kvrt_cache_paged_append(c, nullptr, 1, 2, ids.data(), pos.data(), cells.data());
         }},
        {"admit",
         [&] {
             uint32_t n_cached = 0;
             return kvrt_cache_paged_admit(c, 2, 40, longer.ids.data(), longer.pos.data(), 0, &n_cached, nullptr);
         }},
    };
    for (const Op& op : ops) {
        INFO(op.name);
        uint32_t failures = 0;
        for (uint64_t n = 1;; ++n) {
            const auto before = snapshot();
            uint64_t passed = 0;
            const kvrt_result r = with_fault_point(n, &passed, [&] { return op.run(); });
            if (r == KVRT_SUCCESS) {
                CHECK(passed < n);
                break;
            }
            INFO("fault point " << n << ": " << kvrt_last_error_message());
            ++failures;
            if (r == KVRT_ERROR_TIMEOUT) {
                // A wait that timed out keeps the call (its work completes
                // later): the group must agree; then start over.
                verify_group(c);
                KVRT_REQUIRE_OK(kvrt_cache_seq_rm(c, 1, -1, -1));
                KVRT_REQUIRE_OK(kvrt_cache_paged_fork(c, 0, 1));
                continue;
            }
            const auto after = snapshot();
            REQUIRE(after.first == before.first);
            REQUIRE(after.second == before.second);
            verify_group(c);
            REQUIRE(n < 200);
        }
        CHECK(failures > 0);
        verify_group(c);
    }
    CHECK(impl(c).window_group()->table().used() == 10 + 10 + 2 + 40);

    // A shift of the shared block copies it and its group rows. A failure
    // before the copies ran changes nothing; one in the rotation afterwards
    // keeps the shift (pending), as documented; the group agrees either way.
    KVRT_REQUIRE_OK(kvrt_cache_seq_rm(c, 2, -1, -1));
    KVRT_REQUIRE_OK(kvrt_cache_seq_rm(c, 1, -1, -1));
    KVRT_REQUIRE_OK(kvrt_cache_paged_fork(c, 0, 1));
    uint32_t unchanged = 0, kept = 0;
    for (uint64_t n = 1;; ++n) {
        const auto before = snapshot();
        kvrt::fault::arm(n);
        const kvrt_result r = kvrt_cache_seq_add(c, 1, 4, -1, 3);
        kvrt::fault::arm(0);
        if (r == KVRT_SUCCESS || r == KVRT_ERROR_TIMEOUT) break;
        INFO("fault point " << n << ": " << kvrt_last_error_message());
        verify_group(c);
        if (snapshot() == before) {
            ++unchanged;
        } else {
            ++kept;
            int32_t last = -1;
            KVRT_REQUIRE_OK(kvrt_cache_seq_pos_max(c, 1, &last));
            REQUIRE(last == 12);
            KVRT_REQUIRE_OK(kvrt_cache_apply_shifts(c, nullptr));
            break;
        }
        REQUIRE(n < 200);
    }
    CHECK(unchanged > 0);
    verify_group(c);
    int32_t last = -1;
    KVRT_REQUIRE_OK(kvrt_cache_seq_pos_max(c, 1, &last));
    CHECK(last == 12);
    REQUIRE(ctx.validation_errors() == 0);
}

TEST_CASE("paged window group: a full group refuses and changes nothing", "[paged][window]") {
    GpuContext ctx;
    Cache c = CacheSpec(shape()).group(24, kKeep).create(ctx);
    const Shape sh = shape();
    const auto state = [&]() {
        const kvrt::kv::CellTable& g = impl(c).window_group()->table();
        return std::make_tuple(state_of(c, kSeqs), g.used(),
                               std::vector<int32_t>(g.positions(), g.positions() + g.capacity()));
    };
    // 20 tokens fill 20 of the 24 group cells.
    const Prompt p = prompt(20, 5);
    CHECK(admit(c, sh, 0, p) == 0);
    KVRT_REQUIRE_OK(kvrt_cache_paged_fork(c, 0, 1));
    // A prompt of 8 more tokens has no room.
    auto before = state();
    const Prompt q = prompt(8, 6);
    uint32_t n_cached = 0;
    CHECK(kvrt_cache_paged_admit(c, 2, 8, q.ids.data(), q.pos.data(), 0, &n_cached, nullptr) ==
          KVRT_ERROR_CACHE_FULL);
    CHECK(state() == before);
    verify_group(c);
    // Sequence 1's append copies the shared partial block (4 tokens, all in
    // the group) and places one token: 5 cells, and 4 are free.
    const int32_t id = 99, pos = 20;
    CHECK(kvrt_cache_paged_append(c, nullptr, 1, 1, &id, &pos, nullptr) == KVRT_ERROR_CACHE_FULL);
    CHECK(state() == before);
    verify_group(c);
    // Sequence 0 going on alone drops rows of the window first, and fits.
    KVRT_REQUIRE_OK(kvrt_cache_seq_rm(c, 1, -1, -1));
    const int32_t ids[4] = {1, 2, 3, 4}, ps[4] = {20, 21, 22, 23};
    std::vector<uint32_t> cells(4);
    KVRT_REQUIRE_OK(kvrt_cache_paged_append(c, nullptr, 0, 4, ids, ps, cells.data()));
    CHECK(impl(c).window_group()->table().used() == 2 + 11 + 4);  // sinks, 9..19, 20..23
    verify_group(c);

    REQUIRE(ctx.validation_errors() == 0);
}

TEST_CASE("paged window group: admit at the window's edge, and blocks computed again", "[paged][window]") {
    GpuContext ctx;
    {
        // Sequence 0 holds 0..65 and decoded 64 and 65 one by one: the group
        // dropped 2..53. A query at 64 sees 53..63: one row short, so the four
        // blocks of the prompt cannot be mapped (nor fewer).
        Pair pair(ctx);
        const Prompt p = prompt(64, 7);
        CHECK(pair.admit(0, p).first == 0);
        REQUIRE(pair.append(0, {900}, {64}) == KVRT_SUCCESS);
        REQUIRE(pair.append(0, {901}, {65}) == KVRT_SUCCESS);
        int32_t pos_min = -1;
        KVRT_REQUIRE_OK(kvrt_cache_seq_window_pos_min(pair.grouped(), 0, &pos_min));
        CHECK(pos_min == 54);
        Prompt longer = p;
        longer.ids.push_back(900);
        longer.pos.push_back(64);
        CHECK(pair.admit(1, longer) == std::make_pair(0u, 64u));
        pair.check(0);
    }
    {
        // Sequence 1 could not map the blocks of sequence 0, whose rows are
        // gone, and computed them again: its blocks take their place in the
        // registry, so sequence 2, with the same start, maps them.
        Pair pair(ctx);
        const Prompt p = prompt(40, 8);
        CHECK(pair.admit(0, p).first == 0);
        for (int32_t t = 40; t < 60; ++t) REQUIRE(pair.append(0, {100 + t}, {t}) == KVRT_SUCCESS);
        Prompt a = p;
        for (int32_t t = 40; t < 45; ++t) {
            a.ids.push_back(5000 + t);
            a.pos.push_back(t);
        }
        CHECK(pair.admit(1, a) == std::make_pair(0u, 32u));
        Prompt b = a;
        for (int32_t t = 45; t < 48; ++t) {
            b.ids.push_back(6000 + t);
            b.pos.push_back(t);
        }
        CHECK(pair.admit(2, b) == std::make_pair(32u, 32u));
        pair.check(0);
        CHECK(pair.checked() == 3 * 3);
    }
}

namespace {

// Every sequence's attention at positions 0, 5, ... max in every layer of
// two paged caches with the same windows.
AttentionGrid grid(int32_t max_pos) {
    const Shape sh = shape();
    AttentionGrid g;
    g.seqs = kSeqs;
    g.heads = sh.heads;
    g.head_dim_k = sh.dk;
    g.head_dim_v = sh.dv;
    g.layer_windows = kWindows;
    g.max_pos = max_pos;
    g.step = 5;
    g.params.scale = 0.25f;
    return g;
}

}  // namespace

TEST_CASE("paged window group: state save, load and swap keep what the group holds", "[paged][window][state]") {
    GpuContext ctx;
    Pair pair(ctx);
    // A prompt shared by three sequences (admitted, forked), each going on:
    // the group drops rows as they decode, and shares what they share.
    const Prompt p = prompt(40, 9);
    CHECK(pair.admit(0, p).first == 0);
    pair.fork(0, 1);
    Prompt q = p;
    q.ids.push_back(41);
    q.pos.push_back(40);
    CHECK(pair.admit(2, q) == std::make_pair(32u, 32u));
    for (int32_t t = 40; t < 52; ++t) REQUIRE(pair.append(0, {300 + t}, {t}) == KVRT_SUCCESS);
    for (int32_t t = 40; t < 45; ++t) REQUIRE(pair.append(1, {400 + t}, {t}) == KVRT_SUCCESS);
    pair.check(0);
    const kvrt_cache g = pair.grouped();

    const std::vector<uint8_t> state = save_state(g, -1);
    CHECK(state[8] == 3);
    CHECK(state.size() < save_state(pair.plain(), -1).size());
    Cache loaded = CacheSpec(shape()).group(0, kKeep).create(ctx);
    KVRT_REQUIRE_OK(kvrt_cache_state_load(loaded, -1, state.data(), state.size()));
    verify_group(loaded);
    for (int32_t s = 0; s < static_cast<int32_t>(kSeqs); ++s) {
        int32_t a = -1, b = -2;
        KVRT_REQUIRE_OK(kvrt_cache_seq_window_pos_min(g, s, &a));
        KVRT_REQUIRE_OK(kvrt_cache_seq_window_pos_min(loaded, s, &b));
        CHECK(a == b);
    }
    CHECK(same_attention(g, loaded, grid(55)) > 20);

    // A sequence swapped out and back in answers as before.
    uint64_t size = 0;
    KVRT_REQUIRE_OK(kvrt_cache_seq_swap_out(loaded, 1, nullptr, &size));
    std::vector<uint8_t> swapped(size);
    KVRT_REQUIRE_OK(kvrt_cache_seq_swap_out(loaded, 1, swapped.data(), &size));
    KVRT_REQUIRE_OK(kvrt_cache_seq_swap_in(loaded, 1, swapped.data(), swapped.size()));
    verify_group(loaded);
    CHECK(same_attention(g, loaded, grid(55)) > 20);

    // The plain paged cache's state loads into a grouped one: every row.
    const std::vector<uint8_t> plain_state = save_state(pair.plain(), -1);
    Cache from_plain = CacheSpec(shape()).group(0, kKeep).create(ctx);
    KVRT_REQUIRE_OK(kvrt_cache_state_load(from_plain, -1, plain_state.data(), plain_state.size()));
    verify_group(from_plain);
    CHECK(same_attention(pair.plain(), from_plain, grid(55)) > 40);
    // A group's state needs a group.
    CHECK(kvrt_cache_state_load(pair.plain(), -1, state.data(), state.size()) == KVRT_ERROR_INVALID_ARGUMENT);

    // A load that fails at any point changes nothing.
    uint32_t failures = 0;
    for (uint64_t n = 1;; ++n) {
        const State before = state_of(from_plain, kSeqs);
        const uint32_t group_used = impl(from_plain).window_group()->table().used();
        kvrt::fault::arm(n);
        const kvrt_result r = kvrt_cache_state_load(from_plain, -1, state.data(), state.size());
        kvrt::fault::arm(0);
        if (r == KVRT_SUCCESS || r == KVRT_ERROR_TIMEOUT) break;
        INFO("fault point " << n << ": " << kvrt_last_error_message());
        ++failures;
        REQUIRE(state_of(from_plain, kSeqs) == before);
        REQUIRE(impl(from_plain).window_group()->table().used() == group_used);
        verify_group(from_plain);
        REQUIRE(n < 200);
    }
    CHECK(failures > 0);
    CHECK(same_attention(g, from_plain, grid(55)) > 20);
    REQUIRE(ctx.validation_errors() == 0);
}
