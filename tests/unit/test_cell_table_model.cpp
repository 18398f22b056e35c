// The seeded model check of kv::CellTable: 100,000 random operations against a
// plain reference model, compared after every step.
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
#include "common/random.hpp"

using kvrt::kv::CellMove;
using kvrt::kv::CellTable;
using kvrt::kv::Placement;
using kvrt::kv::Token;

#include "cell_table_snapshot.hpp"

using namespace cell_table_test;

// ---- Model check ---------------------------------------------------------------

// A REQUIRE for the hot loop: no per-step cost when it holds (Catch's INFO and
// assertion bookkeeping would dominate a debug build), and the step on failure.
#define MODEL_REQUIRE(cond)                                              \
    do {                                                                 \
        if (!(cond)) FAIL("step " << step << " (" << name << "): " #cond); \
    } while (0)

namespace {

// The reference: for each sequence, the (position, cell) pairs it uses, plus the
// pending delta of each cell. Deliberately naive; positions belong to cells.
struct Model {
    uint32_t capacity;
    std::vector<std::set<std::pair<int32_t, uint32_t>>> seqs;
    std::vector<int64_t> delta;

    Model(uint32_t cap, uint32_t n_seqs) : capacity(cap), seqs(n_seqs), delta(cap, 0) {}

    std::vector<int32_t> cell_pos() const {
        std::vector<int32_t> pos(capacity, -1);
        for (const auto& s : seqs)
            for (const auto& e : s) pos[e.second] = e.first;
        return pos;
    }
    bool has(int32_t seq, int32_t pos) const {
        auto it = seqs[seq].lower_bound({pos, 0u});
        return it != seqs[seq].end() && it->first == pos;
    }
    int64_t pos_max(int32_t seq) const { return seqs[seq].empty() ? -1 : seqs[seq].rbegin()->first; }
    std::vector<std::pair<int32_t, uint32_t>> in_range(int32_t seq, int64_t lo, int64_t hi) const {
        std::vector<std::pair<int32_t, uint32_t>> v;
        if (lo > INT32_MAX) return v;
        for (auto it = seqs[seq].lower_bound({int32_t(lo), 0u}); it != seqs[seq].end() && it->first < hi; ++it)
            v.push_back(*it);
        return v;
    }
    // Gives each listed cell a new position in every sequence (< 0: frees it).
    void move_cells(const std::map<uint32_t, int64_t>& to) {
        const std::vector<int32_t> pos = cell_pos();
        for (const auto& kv : to) {
            for (auto& s : seqs) {
                if (s.count({pos[kv.first], kv.first}) == 0) continue;
                s.erase({pos[kv.first], kv.first});
                if (kv.second >= 0) s.insert({int32_t(kv.second), kv.first});
            }
        }
    }
    void rm(int32_t seq, int64_t lo, int64_t hi) {
        if (seq >= 0) {
            for (const auto& e : in_range(seq, lo, hi)) seqs[seq].erase(e);
            return;
        }
        std::map<uint32_t, int64_t> to;
        const std::vector<int32_t> pos = cell_pos();
        for (uint32_t c = 0; c < capacity; ++c)
            if (pos[c] >= 0 && pos[c] >= lo && pos[c] < hi) to[c] = -1;
        move_cells(to);
    }
    void cp(int32_t src, int32_t dst, int64_t lo, int64_t hi) {
        for (const auto& e : in_range(src, lo, hi)) seqs[dst].insert(e);
    }
    void keep(int32_t seq) {
        for (size_t s = 0; s < seqs.size(); ++s)
            if (int32_t(s) != seq) seqs[s].clear();
    }
    void add(int32_t seq, int64_t lo, int64_t hi, int32_t d) {
        std::map<uint32_t, int64_t> to;
        for (const auto& e : in_range(seq, lo, hi)) {
            to[e.second] = int64_t(e.first) + d;
            delta[e.second] += d;
        }
        move_cells(to);
    }
    void div(int32_t seq, int64_t lo, int64_t hi, int32_t d) {
        std::map<uint32_t, int64_t> to;
        for (const auto& e : in_range(seq, lo, hi)) {
            to[e.second] = e.first / d;
            delta[e.second] += e.first / d - e.first;
        }
        move_cells(to);
    }
    void apply_moves(const std::vector<CellMove>& moves) {
        for (const CellMove& m : moves) {
            const int32_t p = cell_pos()[m.src_cell];
            for (auto& s : seqs)
                if (s.erase({p, m.src_cell}) != 0) s.insert({p, m.dst_cell});
            delta[m.dst_cell] = delta[m.src_cell];
        }
    }
};

// Streams its arguments into a string.
template <class... Parts>
std::string say(const Parts&... parts) {
    std::ostringstream os;
    (void)(os << ... << parts);
    return os.str();
}

// The first disagreement between table and model, or "".
std::string diff(const CellTable& t, const Model& m) {
    static thread_local std::vector<int32_t> pos;  // reused: this runs 100,000 times
    static thread_local std::vector<uint64_t> words;
    pos.assign(m.capacity, -1);
    words.assign(m.capacity, 0);
    for (size_t s = 0; s < m.seqs.size(); ++s) {
        for (const auto& e : m.seqs[s]) {
            if (pos[e.second] >= 0 && pos[e.second] != e.first) return "model: a cell has two positions";
            pos[e.second] = e.first;
            words[e.second] |= uint64_t(1) << s;
        }
    }
    uint32_t used = 0, used_end = 0;
    bool shifted = false;
    const int32_t* t_pos = t.positions();
    const int32_t* t_delta = t.deltas();
    const uint64_t* t_words = t.seq_words();  // one word per cell: max_seqs <= 64 here
    for (uint32_t c = 0; c < m.capacity; ++c) {
        const int64_t want_delta = pos[c] >= 0 ? m.delta[c] : 0;
        if (t_pos[c] != pos[c] || t_words[c] != words[c] || t_delta[c] != want_delta) {
            return say("cell ", c, ": pos/words/delta ", t_pos[c], "/", t_words[c], "/", t_delta[c], ", model ",
                       pos[c], "/", words[c], "/", want_delta);
        }
        if (pos[c] >= 0) {
            ++used;
            used_end = c + 1;
            shifted = shifted || want_delta != 0;
        }
    }
    const uint32_t attend = used_end == 0 ? 0 : std::min(m.capacity, (used_end + 31) / 32 * 32);
    const double frag = used_end == 0 ? 0.0 : double(used_end - used) / double(used_end);
    if (t.used() != used || t.used_end() != used_end || t.has_pending_shift() != shifted ||
        t.n_attend() != attend || t.fragmentation() != frag) {
        return say("used ", t.used(), "/", used, ", end ", t.used_end(), "/", used_end, ", n_attend ", t.n_attend(),
                   "/", attend);
    }
    for (size_t s = 0; s < m.seqs.size(); ++s) {
        const auto& set = m.seqs[s];
        const int32_t q = int32_t(s);
        if (set.empty() && t.seq_cell_count(q) == 0 && t.seq_pos_max(q) == -1) continue;
        const int32_t lo = set.empty() ? -1 : set.begin()->first;
        const int32_t hi = set.empty() ? -1 : set.rbegin()->first;
        if (t.seq_pos_min(q) != lo || t.seq_pos_max(q) != hi || t.seq_cell_count(q) != set.size()) {
            return say("seq ", s, ": min/max/count ", t.seq_pos_min(q), "/", t.seq_pos_max(q), "/",
                       t.seq_cell_count(q), ", model ", lo, "/", hi, "/", set.size());
        }
    }
    return "";
}

}  // namespace

TEST_CASE("CellTable agrees with a reference model over 100,000 random operations", "[kv][cell_table][model]") {
    constexpr uint32_t kCap = 150;  // not a power of two: exercises the wrap and the n_attend cap
    constexpr int32_t kSeqs = 64;
    constexpr int kSteps = 100000;
    kvrt_test::Rng rng(0x6b767274u);
    std::map<std::string, int> ok, failed;  // per operation
    // Uniform enough for a test, and cheap in a debug build.
    auto rnd = [&](int64_t lo, int64_t hi) { return rng.between(lo, hi); };
    CellTable t;
    REQUIRE(t.init(kCap, kSeqs) == KVRT_SUCCESS);
    Model m(kCap, kSeqs);
    Placement pl;
    std::vector<CellMove> moves;
    std::map<std::string, int> stats;  // what happened how often, to show coverage

    // Mostly a few hot sequences; sometimes an invalid id (valid "all" for seq_rm).
    auto pick_seq = [&](bool may_fail) -> int32_t {
        const int64_t r = rnd(0, 99);
        if (r < 70 || (!may_fail && r < 85)) return int32_t(rnd(0, 7));
        if (r < 97 || !may_fail) return int32_t(rnd(8, kSeqs - 1));
        return r == 97 ? kSeqs : r == 98 ? -1 : INT32_MIN;
    };
    auto norm = [](int32_t p0, int32_t p1, int64_t* lo, int64_t* hi) {
        *lo = std::max(p0, 0);
        *hi = p1 < 0 ? INT64_MAX : p1;
        return !(p0 >= 0 && p1 >= 0 && p1 < p0);
    };

    for (int step = 0; step < kSteps; ++step) {
        // Taken before any call expected to fail or to be rolled back.
        Snapshot before;
        bool have_before = false;
        auto keep_before = [&] { before = snapshot(t), have_before = true; };
        int64_t top = 0;
        for (int32_t s = 0; s < kSeqs; ++s) top = std::max(top, m.pos_max(s));
        int32_t p0 = 0, p1 = 0;
        switch (rnd(0, 9)) {
            case 0: p0 = -1, p1 = -1; break;
            case 1: p0 = -int32_t(rnd(1, 5)), p1 = int32_t(rnd(0, top + 20)); break;
            case 2: p0 = int32_t(rnd(0, top + 20)), p1 = -int32_t(rnd(1, 3)); break;
            case 3: p1 = int32_t(rnd(0, top + 20)), p0 = p1 + int32_t(rnd(1, 40)); break;  // reversed
            default: p0 = int32_t(rnd(0, top + 20)), p1 = p0 + int32_t(rnd(0, 120)); break;
        }
        int64_t lo = 0, hi = 0;
        const bool range_ok = norm(p0, p1, &lo, &hi);
        auto seq_ok = [&](int32_t s) { return s >= 0 && s < kSeqs; };
        const int64_t op = rnd(0, 999);
        kvrt::Result r = KVRT_SUCCESS, want = KVRT_SUCCESS;
        const char* name = "";
        bool moved = false;  // a compaction moved cells
        const uint64_t revision = t.revision();

        if (op < 400) {
            name = "place";
            const int64_t size_class = rnd(0, 99);
            const uint32_t n = uint32_t(size_class < 70 ? rnd(1, 8) : size_class < 94 ? rnd(9, 40)
                                        : size_class < 97 ? rnd(41, 160) : 0);
            std::vector<std::array<int32_t, 4>> ids(n);  // 1-3 ids, one more for a fault
            std::vector<Token> toks(n);
            std::vector<int64_t> next(kSeqs, -1);  // next unused position per sequence
            for (uint32_t i = 0; i < n; ++i) {
                const uint32_t k = uint32_t(rnd(1, 3));
                for (uint32_t j = 0; j < k;) {
                    const int32_t s = pick_seq(false);
                    if (std::find(ids[i].begin(), ids[i].begin() + j, s) == ids[i].begin() + j) ids[i][j++] = s;
                }
                int64_t pos = 0;
                for (uint32_t j = 0; j < k; ++j) {
                    const int32_t s = ids[i][j];
                    pos = std::max(pos, next[s] >= 0 ? next[s] : m.pos_max(s) + 1);
                }
                if (rnd(0, 99) < 10) pos = rnd(0, top + 10);
                for (uint32_t j = 0; j < k; ++j) next[ids[i][j]] = std::max(next[ids[i][j]], pos + 1);
                toks[i] = Token{int32_t(pos), nullptr, k};
            }
            if (n > 0 && rnd(0, 99) < 8) {  // inject one fault
                const uint32_t i = uint32_t(rnd(0, n - 1));
                switch (rnd(0, 5)) {
                    case 0: toks[i].pos = -int32_t(rnd(1, 100)); break;
                    case 1: toks[i].n_seq = 0; break;
                    case 2: ids[i][0] = rnd(0, 1) ? kSeqs : -1; break;
                    case 3: ids[i][toks[i].n_seq++] = ids[i][0]; break;
                    case 4:  // repeat the previous token
                        if (i > 0) toks[i].pos = toks[i - 1].pos, ids[i] = ids[i - 1], toks[i].n_seq = toks[i - 1].n_seq;
                        break;
                    default:  // a position the sequence already has
                        if (!m.seqs[ids[i][0]].empty()) toks[i].pos = m.seqs[ids[i][0]].begin()->first;
                        break;
                }
            }
            // What the model expects: per-token checks, then capacity, then repeats.
            std::set<std::pair<int32_t, int32_t>> pairs;
            bool repeats = false;
            for (uint32_t i = 0; i < n; ++i) {
                toks[i].seq_ids = ids[i].data();
                if (toks[i].pos < 0 || toks[i].n_seq == 0) want = KVRT_ERROR_INVALID_ARGUMENT;
                for (uint32_t j = 0; j < toks[i].n_seq; ++j) {
                    const int32_t s = ids[i][j];
                    if (!seq_ok(s) || m.has(s, toks[i].pos)) want = KVRT_ERROR_INVALID_ARGUMENT;
                    repeats = !pairs.insert({s, toks[i].pos}).second || repeats;
                }
            }
            const std::vector<int32_t> mpos = m.cell_pos();
            const uint32_t n_free = uint32_t(std::count(mpos.begin(), mpos.end(), -1));
            if (want == KVRT_SUCCESS && n > n_free) want = KVRT_ERROR_CACHE_FULL;
            if (want == KVRT_SUCCESS && repeats) want = KVRT_ERROR_INVALID_ARGUMENT;
            const bool roll_back = rnd(0, 99) < 12;
            if (want != KVRT_SUCCESS || roll_back) keep_before();
            r = t.plan(toks.data(), n, &pl);
            if (r == KVRT_SUCCESS && want == KVRT_SUCCESS) {
                // The plan: n distinct empty cells; a run when one exists, else the lowest.
                std::vector<uint32_t> lowest;
                bool has_run = n == 0;
                for (uint32_t c = 0, run = 0; c < kCap; ++c) {
                    run = mpos[c] < 0 ? run + 1 : 0;
                    has_run = has_run || run >= n;
                    if (mpos[c] < 0 && lowest.size() < n) lowest.push_back(c);
                }
                MODEL_REQUIRE(pl.size() == n);
                std::set<uint32_t> distinct(pl.cells().begin(), pl.cells().end());
                MODEL_REQUIRE(distinct.size() == n);
                MODEL_REQUIRE(std::all_of(pl.cells().begin(), pl.cells().end(),
                                          [&](uint32_t c) { return mpos[c] == -1; }));
                MODEL_REQUIRE(pl.contiguous() == (has_run || n <= 1));
                if (has_run && n > 0) MODEL_REQUIRE(pl.cells().back() == pl.cells().front() + n - 1);
                if (!has_run) MODEL_REQUIRE(pl.cells() == lowest);
                if (!has_run) stats["scattered"]++;
                MODEL_REQUIRE(t.apply(pl) == KVRT_SUCCESS);
                if (roll_back) {
                    MODEL_REQUIRE(t.rollback(pl) == KVRT_SUCCESS);
                    MODEL_REQUIRE(snapshot(t).same_state(before));
                    stats["rolled back"]++;
                } else {
                    for (uint32_t i = 0; i < n; ++i) {
                        for (uint32_t j = 0; j < toks[i].n_seq; ++j)
                            m.seqs[ids[i][j]].insert({toks[i].pos, pl.cells()[i]});
                        m.delta[pl.cells()[i]] = 0;
                    }
                }
            }
        } else if (op < 550) {
            name = "seq_rm";
            const int32_t s = rnd(0, 19) == 0 ? -1 : pick_seq(true);
            want = s < kSeqs && range_ok ? KVRT_SUCCESS : KVRT_ERROR_INVALID_ARGUMENT;
            if (want != KVRT_SUCCESS) keep_before();
            r = t.seq_rm(s, p0, p1);
            if (r == KVRT_SUCCESS) m.rm(s, lo, hi);
        } else if (op < 650) {
            name = "seq_cp";
            const int32_t src = pick_seq(true), dst = pick_seq(true);
            want = seq_ok(src) && seq_ok(dst) && range_ok ? KVRT_SUCCESS : KVRT_ERROR_INVALID_ARGUMENT;
            if (want != KVRT_SUCCESS) keep_before();
            r = t.seq_cp(src, dst, p0, p1);
            if (r == KVRT_SUCCESS) m.cp(src, dst, lo, hi);
        } else if (op < 670) {
            name = "seq_keep";
            const int32_t s = pick_seq(true);
            want = seq_ok(s) ? KVRT_SUCCESS : KVRT_ERROR_INVALID_ARGUMENT;
            if (want != KVRT_SUCCESS) keep_before();
            r = t.seq_keep(s);
            if (r == KVRT_SUCCESS) m.keep(s);
        } else if (op < 780) {
            name = "seq_add";
            const int32_t s = pick_seq(true);
            const int32_t d = int32_t(rnd(-60, 60));
            want = seq_ok(s) && range_ok ? KVRT_SUCCESS : KVRT_ERROR_INVALID_ARGUMENT;
            const uint32_t used0 = t.used();
            if (want != KVRT_SUCCESS) keep_before();
            r = t.seq_add(s, p0, p1, d);
            if (r == KVRT_SUCCESS) m.add(s, lo, hi, d);
            if (t.used() < used0) stats["freed by seq_add"]++;
        } else if (op < 840) {
            name = "seq_div";
            const int32_t s = pick_seq(true);
            const int32_t d = int32_t(rnd(-1, 5));
            want = seq_ok(s) && range_ok && d > 0 ? KVRT_SUCCESS : KVRT_ERROR_INVALID_ARGUMENT;
            if (want != KVRT_SUCCESS) keep_before();
            r = t.seq_div(s, p0, p1, d);
            if (r == KVRT_SUCCESS && d > 0) m.div(s, lo, hi, d);
        } else if (op < 870) {
            name = "clear_pending_shifts";
            t.clear_pending_shifts();
            std::fill(m.delta.begin(), m.delta.end(), 0);
        } else if (op < 900) {
            name = "compaction";
            const double thresholds[4] = {0.0, 0.05, 0.25, 0.6};
            const double threshold = thresholds[rnd(0, 3)];
            const double frag = t.fragmentation();
            const uint32_t max_moves = uint32_t(rnd(0, 48));
            MODEL_REQUIRE(kvrt::kv::plan_compaction(t, threshold, max_moves, &moves) == KVRT_SUCCESS);
            const bool holes = t.used() < t.used_end();
            MODEL_REQUIRE(moves.empty() == (frag < threshold || !holes || max_moves == 0));
            if (rnd(0, 9) < 8) {  // the device copy succeeded
                MODEL_REQUIRE(t.apply_moves(moves) == KVRT_SUCCESS);
                m.apply_moves(moves);
                moved = !moves.empty();
                if (moved) stats["compacted"]++;
            } else if (t.used() > 0 && t.used() < kCap) {  // a bogus list is refused
                const std::vector<CellMove> bad = {{uint32_t(rnd(0, kCap - 1)), uint32_t(rnd(0, kCap - 1))}};
                want = !t.cell_is_empty(bad[0].src_cell) && t.cell_is_empty(bad[0].dst_cell)
                           ? KVRT_SUCCESS : KVRT_ERROR_INVALID_ARGUMENT;
                if (want != KVRT_SUCCESS) keep_before();
                r = t.apply_moves(bad);
                if (r == KVRT_SUCCESS) m.apply_moves(bad);
            }
        } else if (op < 902) {
            name = "clear";
            t.clear();
            m = Model(kCap, kSeqs);
        } else {
            name = "plan only";  // a plan that is never applied changes nothing
            const int32_t s = pick_seq(false);
            const Token tok{int32_t(m.pos_max(s) + 1), &s, 1};
            want = t.used() < kCap ? KVRT_SUCCESS : KVRT_ERROR_CACHE_FULL;
            keep_before();
            r = t.plan(&tok, 1, &pl);
            MODEL_REQUIRE(snapshot(t).identical(before));
        }

        if (r != want) {
            FAIL("step " << step << " (" << name << "): " << kvrt::result_name(r) << ", expected "
                         << kvrt::result_name(want) << ": " << kvrt::last_error_message());
        }
        (r == KVRT_SUCCESS ? ok : failed)[name]++;
        if (r == KVRT_ERROR_CACHE_FULL) stats["cache full"]++;
        if (r != KVRT_SUCCESS) MODEL_REQUIRE((have_before && snapshot(t).identical(before)));
        const std::string d = diff(t, m);
        if (!d.empty()) FAIL("step " << step << " (" << name << "): " << d);
        // Each sequence's run of cells holds all its cells; it is empty for
        // an empty sequence and exact after a compaction moved cells or a
        // seq_rm or seq_keep changed the table.
        const std::string op_name = name;
        const bool exact =
            moved || ((op_name == "seq_rm" || op_name == "seq_keep") && r == KVRT_SUCCESS && t.revision() != revision);
        for (int32_t s = 0; s < int32_t(kSeqs); ++s) {
            uint32_t span_lo = 0, span_hi = 0;
            t.seq_cell_span(s, &span_lo, &span_hi);
            uint32_t first = UINT32_MAX, last = 0;
            for (const auto& e : m.seqs[size_t(s)]) {
                first = std::min(first, e.second);
                last = std::max(last, e.second + 1);
            }
            const bool ok_span = m.seqs[size_t(s)].empty() ? span_lo == 0 && span_hi == 0
                                 : exact ? span_lo == first && span_hi == last
                                         : span_lo <= first && span_hi >= last && span_hi <= kCap;
            if (!ok_span)
                FAIL("step " << step << " (" << name << "): sequence " << s << " has the span [" << span_lo
                             << ", " << span_hi << ") for cells [" << first << ", " << last << ")");
        }
        if (step % 97 == 0 && t.verify() != KVRT_SUCCESS) FAIL("step " << step << ": " << kvrt::last_error_message());
    }
    REQUIRE(t.verify() == KVRT_SUCCESS);

    // The run exercised what it claims to (this seed gives counts far above these).
    for (const char* op : {"place", "seq_rm", "seq_cp", "seq_keep", "seq_add", "seq_div"}) {
        INFO(op << ": " << ok[op] << " ok, " << failed[op] << " failed");
        CHECK(ok[op] > 1000);
        CHECK(failed[op] > 20);
    }
    CHECK(stats["cache full"] > 200);
    CHECK(stats["rolled back"] > 1000);
    CHECK(stats["scattered"] > 100);
    CHECK(stats["freed by seq_add"] > 200);
    CHECK(stats["compacted"] > 200);
    CHECK(ok["clear"] > 50);
}
