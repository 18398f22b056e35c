// Sequence isolation under random schedules. Each schedule is a short random
// list of operations on one small cache shared by 8 sequences: stores (some
// tokens belong to 2-3 sequences), seq_rm over any range (negative bounds and
// all sequences included), seq_cp, and rarely seq_keep, clear and compaction.
// A plain model keeps, per sequence, position -> token. After every schedule
// each sequence's cells are found through the table and read back: every
// (sequence, position) must hold exactly its token's K and V in every layer,
// and the table's positions must be the model's. Then one attention call per
// layer, a query for every sequence in one batch, must match the double
// reference computed from the model alone (the tokens' known K and V): what
// the kernel sees comes from the device's mirror of the cell metadata, which
// every operation above changes. In some schedules the attention is first
// recorded into a stream that is dropped unsubmitted, so the mirror update it
// carried never runs and must be sent again.
//
// The seed is fixed for reproducible runs; KVRT_TEST_SEED picks another one.
#include "gpu_test.hpp"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "api/handles.hpp"
#include "reference/attention.hpp"
#include "reference/half.hpp"
#include "reference/metrics.hpp"
#include "common/random.hpp"

using namespace kvrt_test;

namespace {

constexpr uint32_t kLayers = 2;
constexpr uint32_t kKvHeads = 2;
constexpr uint32_t kHeadDim = 32;
constexpr uint32_t kCapacity = 96;
constexpr int32_t kSeqs = 8;
constexpr uint32_t kRowElems = kKvHeads * kHeadDim;  // values per row, K and V alike
constexpr int32_t kPosRange = 48;                    // positions are drawn from [0, kPosRange)
constexpr uint32_t kSchedules = 1000;
constexpr uint32_t kMaxTokenId = 1u << 16;           // the encodings below are unique up to here

// The cache stores K as F32 and V as F16. Both encodings are exact in their
// type and unique per (token, layer, element), so every comparison is exact:
// K carries the token id in its integer part, V carries two bits of it in each
// element (16 bits per group of 8 elements) above the element's own index.
float k_value(uint32_t token, uint32_t layer, uint32_t e) {
    return static_cast<float>(token * kRowElems + e) + 0.25f * static_cast<float>(layer);
}
float v_value(uint32_t token, uint32_t layer, uint32_t e) {
    return static_cast<float>((layer * kRowElems + e) * 4 + ((token >> (2 * (e % 8))) & 3));
}
uint32_t token_of_k0(float k0) { return static_cast<uint32_t>(k0) / kRowElems; }


uint64_t test_seed() {
    const char* env = std::getenv("KVRT_TEST_SEED");
    return env && *env ? std::strtoull(env, nullptr, 0) : 0x6b7672745f69736full;
}

// A half-open position range with llama.cpp's conventions.
struct Range {
    int32_t p0 = -1, p1 = -1;
    bool contains(int32_t p) const { return (p0 < 0 || p >= p0) && (p1 < 0 || p < p1); }
};

Range random_range(Rng64& rng) {
    Range r;
    r.p0 = rng.percent(15) ? -1 - static_cast<int32_t>(rng.below(3)) : static_cast<int32_t>(rng.below(kPosRange + 4));
    r.p1 = rng.percent(15) ? -1 - static_cast<int32_t>(rng.below(3))
                           : std::max(r.p0, 0) + static_cast<int32_t>(rng.below(kPosRange / 2));  // may be empty
    return r;
}

// The model: per sequence, position -> the tokens there, sorted (usually one;
// seq_cp can give a sequence two cells with one position, as in llama.cpp).
using SeqModel = std::map<int32_t, std::vector<uint32_t>>;

struct Model {
    std::array<SeqModel, kSeqs> seqs;

    uint32_t live_tokens() const {
        std::set<uint32_t> all;
        for (const SeqModel& s : seqs)
            for (const auto& [pos, tokens] : s) all.insert(tokens.begin(), tokens.end());
        return static_cast<uint32_t>(all.size());
    }
    void erase(int32_t seq, const Range& r) {
        for (int32_t s = 0; s < kSeqs; ++s) {
            if (seq >= 0 && s != seq) continue;
            for (auto it = seqs[s].begin(); it != seqs[s].end();) it = r.contains(it->first) ? seqs[s].erase(it) : ++it;
        }
    }
};

std::string describe(const SeqModel& m) {
    std::ostringstream os;
    for (const auto& [pos, tokens] : m) {
        os << pos << ":";
        for (uint32_t t : tokens) os << "t" << t << ",";
        os << " ";
    }
    return os.str();
}

// Everything the table shows, to prove that a failed call changed nothing.
struct TableState {
    std::vector<int32_t> pos, delta;
    std::vector<uint64_t> words;
    uint32_t used = 0, used_end = 0, head = 0;

    explicit TableState(const kvrt::kv::CellTable& t)
        : pos(t.positions(), t.positions() + t.capacity()),
          delta(t.deltas(), t.deltas() + t.capacity()),
          words(t.seq_words(), t.seq_words() + size_t{t.capacity()} * t.words_per_cell()),
          used(t.used()),
          used_end(t.used_end()),
          head(t.head()) {}
    bool operator==(const TableState& o) const {
        return pos == o.pos && delta == o.delta && words == o.words && used == o.used && used_end == o.used_end &&
               head == o.head;
    }
};

struct Stats {
    uint32_t stores = 0, scattered = 0, shared_tokens = 0, full = 0, removes = 0, copies = 0, keeps = 0, clears = 0;
    uint32_t compactions = 0, moves = 0, checks = 0;
    uint32_t attention_checks = 0, dropped_recordings = 0, listed_checks = 0;
    double worst_nmse = 0;
};

// One cache, its model, and the operations of the schedules.
class IsolationRun {
public:
    explicit IsolationRun(kvrt_context ctx, uint64_t seed) : ctx_(ctx), rng_(seed) {
        kvrt_cache_desc desc = KVRT_CACHE_DESC_INIT;
        desc.n_layers = kLayers;
        desc.n_heads = 2 * kKvHeads;
        desc.n_kv_heads = kKvHeads;
        desc.head_dim_k = kHeadDim;
        desc.capacity = kCapacity;
        desc.max_seqs = kSeqs;
        desc.type_k = KVRT_TYPE_F32;
        desc.type_v = KVRT_TYPE_F16;
        desc.label = "isolation";
        KVRT_REQUIRE_OK(kvrt_cache_create(ctx, &desc, cache_.out()));
    }
    IsolationRun(const IsolationRun&) = delete;
    IsolationRun& operator=(const IsolationRun&) = delete;

    // Runs one schedule of 1-6 operations, then checks every sequence.
    void run_schedule() {
        log_.clear();
        const uint32_t n_ops = 1 + rng_.below(6);
        for (uint32_t i = 0; i < n_ops; ++i) {
            const uint32_t w = rng_.below(100);
            if (w < 46) op_store();
            else if (w < 72) op_seq_rm();
            else if (w < 85) op_seq_cp();
            else if (w < 95) op_compact();
            else if (w < 98) op_seq_keep();
            else op_clear();
        }
        check_all();
    }

    const Stats& stats() const { return stats_; }

private:
    const kvrt::kv::CellTable& table() const { return kvrt::api::cache_of(cache_)->table(); }

    // Stores 1-8 tokens at positions their sequences do not have yet.
    void op_store() {
        const uint32_t want = 1 + rng_.below(8);
        std::vector<int32_t> pos, ids;
        std::vector<uint32_t> counts;
        std::array<std::set<int32_t>, kSeqs> in_batch;
        for (uint32_t i = 0; i < want; ++i) {
            const uint32_t r = rng_.below(10);
            const uint32_t n_seq = r < 7 ? 1 : r < 9 ? 2 : 3;
            std::vector<int32_t> seqs;
            while (seqs.size() < n_seq) {
                const int32_t s = static_cast<int32_t>(rng_.below(kSeqs));
                if (std::find(seqs.begin(), seqs.end(), s) == seqs.end()) seqs.push_back(s);
            }
            for (int attempt = 0; attempt < 16; ++attempt) {
                const int32_t p = static_cast<int32_t>(rng_.below(kPosRange));
                const bool free = std::all_of(seqs.begin(), seqs.end(), [&](int32_t s) {
                    return model_.seqs[s].count(p) == 0 && in_batch[s].count(p) == 0;
                });
                if (!free) continue;
                for (int32_t s : seqs) in_batch[s].insert(p);
                pos.push_back(p);
                counts.push_back(n_seq);
                ids.insert(ids.end(), seqs.begin(), seqs.end());
                break;
            }
        }
        const uint32_t n = static_cast<uint32_t>(pos.size());
        if (n == 0) return;
        REQUIRE(next_token_ + n <= kMaxTokenId);

        // Host rows in layer blocks: K as f32, V as f16 (exact conversions).
        std::vector<float> k(size_t{kLayers} * n * kRowElems);
        std::vector<uint16_t> v(k.size());
        for (uint32_t l = 0; l < kLayers; ++l)
            for (uint32_t i = 0; i < n; ++i)
                for (uint32_t e = 0; e < kRowElems; ++e) {
                    const size_t at = (size_t{l} * n + i) * kRowElems + e;
                    k[at] = k_value(next_token_ + i, l, e);
                    v[at] = kvrt::ref::f32_to_f16(v_value(next_token_ + i, l, e));
                }
        const kvrt_tensor_ref kref = host_tensor(k.data());
        const kvrt_tensor_ref vref = host_tensor(v.data(), KVRT_TYPE_F16);
        const kvrt_batch batch = make_batch(n, pos.data(), ids.data(), counts.data());

        std::ostringstream op;
        op << "store t" << next_token_ << "..:";
        for (uint32_t i = 0, at = 0; i < n; at += counts[i++]) {
            op << " " << pos[i] << "@";
            for (uint32_t j = 0; j < counts[i]; ++j) op << ids[at + j] << (j + 1 < counts[i] ? "+" : "");
        }
        log_ += op.str();

        const TableState before(table());
        const uint32_t free_cells = kCapacity - model_.live_tokens();
        std::vector<uint32_t> cells(n, UINT32_MAX);
        const kvrt_result r = kvrt_cache_store(cache_, nullptr, &batch, -1, &kref, &vref, cells.data());
        INFO(log_ << "\n" << kvrt_last_error_message());
        if (n > free_cells) {
            log_ += " -> CACHE_FULL\n";
            ++stats_.full;
            REQUIRE(r == KVRT_ERROR_CACHE_FULL);
            REQUIRE(kvrt_last_error_message()[0] != '\0');
            REQUIRE(TableState(table()) == before);
            return;
        }
        REQUIRE(r == KVRT_SUCCESS);
        log_ += "\n";
        // Each token got its own cell, empty before, now holding its position
        // and exactly its sequences.
        REQUIRE(std::set<uint32_t>(cells.begin(), cells.end()).size() == n);
        for (uint32_t i = 0, at = 0; i < n; at += counts[i++]) {
            REQUIRE(cells[i] < kCapacity);
            REQUIRE(before.pos[cells[i]] == -1);
            REQUIRE(table().cell_pos(cells[i]) == pos[i]);
            for (int32_t s = 0; s < kSeqs; ++s) {
                const bool member = std::find(&ids[at], &ids[at] + counts[i], s) != &ids[at] + counts[i];
                REQUIRE(table().cell_has_seq(cells[i], s) == member);
                if (member) model_.seqs[s][pos[i]].push_back(next_token_ + i);
            }
            if (counts[i] > 1) ++stats_.shared_tokens;
        }
        next_token_ += n;
        ++stats_.stores;
        for (uint32_t i = 1; i < n; ++i)
            if (cells[i] != cells[0] + i) {
                ++stats_.scattered;
                break;
            }
    }

    void op_seq_rm() {
        const int32_t seq = rng_.percent(10) ? -1 : static_cast<int32_t>(rng_.below(kSeqs));
        const Range r = random_range(rng_);
        log_ += "seq_rm(" + std::to_string(seq) + ", " + std::to_string(r.p0) + ", " + std::to_string(r.p1) + ")\n";
        INFO(log_);
        KVRT_REQUIRE_OK(kvrt_cache_seq_rm(cache_, seq, r.p0, r.p1));
        model_.erase(seq, r);
        ++stats_.removes;
    }

    void op_seq_cp() {
        const int32_t src = static_cast<int32_t>(rng_.below(kSeqs)), dst = static_cast<int32_t>(rng_.below(kSeqs));
        const Range r = random_range(rng_);
        log_ += "seq_cp(" + std::to_string(src) + ", " + std::to_string(dst) + ", " + std::to_string(r.p0) + ", " +
                std::to_string(r.p1) + ")\n";
        INFO(log_);
        KVRT_REQUIRE_OK(kvrt_cache_seq_cp(cache_, src, dst, r.p0, r.p1));
        if (src != dst) {
            for (const auto& [p, tokens] : model_.seqs[src]) {
                if (!r.contains(p)) continue;
                std::vector<uint32_t>& to = model_.seqs[dst][p];
                for (uint32_t t : tokens)
                    if (std::find(to.begin(), to.end(), t) == to.end()) to.push_back(t);
                std::sort(to.begin(), to.end());
            }
        }
        ++stats_.copies;
    }

    void op_seq_keep() {
        const int32_t seq = static_cast<int32_t>(rng_.below(kSeqs));
        log_ += "seq_keep(" + std::to_string(seq) + ")\n";
        INFO(log_);
        KVRT_REQUIRE_OK(kvrt_cache_seq_keep(cache_, seq));
        for (int32_t s = 0; s < kSeqs; ++s)
            if (s != seq) model_.seqs[s].clear();
        ++stats_.keeps;
    }

    void op_clear() {
        log_ += "clear\n";
        INFO(log_);
        KVRT_REQUIRE_OK(kvrt_cache_clear(cache_));
        for (SeqModel& s : model_.seqs) s.clear();
        ++stats_.clears;
    }

    // Compaction at threshold 0, mostly unbounded, sometimes 1-4 moves. The
    // expected number of moves is counted here from the cells: every used cell
    // at or above `used` must move below it.
    void op_compact() {
        const uint32_t max_moves = rng_.percent(30) ? 1 + rng_.below(4) : 0;
        const TableState before(table());
        uint32_t needed = 0;
        for (uint32_t c = before.used; c < kCapacity; ++c) needed += before.pos[c] >= 0 ? 1 : 0;
        const uint32_t expect = max_moves ? std::min(max_moves, needed) : needed;
        log_ += "compact(max_moves " + std::to_string(max_moves) + ", expect " + std::to_string(expect) + ")\n";
        INFO(log_);
        uint32_t moved = UINT32_MAX;
        KVRT_REQUIRE_OK(kvrt_cache_compact(cache_, nullptr, 0.0f, max_moves, &moved));
        REQUIRE(moved == expect);
        kvrt_cache_info info = KVRT_CACHE_INFO_INIT;
        KVRT_REQUIRE_OK(kvrt_cache_get_info(cache_, &info));
        REQUIRE(info.used == before.used);
        if (moved == needed) {
            REQUIRE(info.fragmentation == 0.0f);
            REQUIRE(table().used_end() == before.used);
        }
        ++stats_.compactions;
        stats_.moves += moved;
    }

    // Reads every used cell (one read per layer) and compares each sequence,
    // through the table, with the model. Returns a description of the first
    // difference, or "".
    std::string compare_with_model() {
        const kvrt::kv::CellTable& t = table();
        if (t.verify() != KVRT_SUCCESS) return std::string("table.verify(): ") + kvrt_last_error_message();
        std::vector<uint32_t> used;
        for (uint32_t c = 0; c < kCapacity; ++c)
            if (!t.cell_is_empty(c)) used.push_back(c);
        const uint32_t n = static_cast<uint32_t>(used.size());
        if (n != model_.live_tokens())
            return "the table uses " + std::to_string(n) + " cells, the model has " +
                   std::to_string(model_.live_tokens()) + " tokens";

        // Which token each used cell holds, checked in every layer and element.
        std::vector<uint32_t> token_of(kCapacity, UINT32_MAX);
        std::vector<float> k(size_t{n} * kRowElems), v(k.size());
        for (uint32_t l = 0; l < kLayers && n > 0; ++l) {
            if (kvrt_cache_read(cache_, static_cast<int32_t>(l), n, used.data(), k.data(), bytes_of(k), v.data(),
                                bytes_of(v)) != KVRT_SUCCESS)
                return std::string("kvrt_cache_read: ") + kvrt_last_error_message();
            for (uint32_t i = 0; i < n; ++i) {
                const uint32_t c = used[i];
                if (l == 0) token_of[c] = token_of_k0(k[size_t{i} * kRowElems]);
                const uint32_t tok = token_of[c];
                for (uint32_t e = 0; e < kRowElems; ++e) {
                    const float gk = k[size_t{i} * kRowElems + e], gv = v[size_t{i} * kRowElems + e];
                    if (tok >= next_token_ || gk != k_value(tok, l, e) || gv != v_value(tok, l, e)) {
                        std::ostringstream os;
                        os << "cell " << c << " (pos " << t.cell_pos(c) << ") layer " << l << " element " << e
                           << ": K " << gk << " V " << gv << ", expected token " << tok << "'s K " << k_value(tok, l, e)
                           << " V " << v_value(tok, l, e);
                        return os.str();
                    }
                }
            }
        }
        // Cells are shared, never copied: a token lives in one cell.
        std::vector<uint32_t> tokens(token_of.begin(), token_of.end());
        tokens.erase(std::remove(tokens.begin(), tokens.end(), UINT32_MAX), tokens.end());
        if (std::set<uint32_t>(tokens.begin(), tokens.end()).size() != tokens.size())
            return "a token's rows appear in two cells";

        std::vector<uint32_t> cells;
        for (int32_t s = 0; s < kSeqs; ++s) {
            if (t.cells_of_seq(s, &cells) != KVRT_SUCCESS)
                return std::string("cells_of_seq: ") + kvrt_last_error_message();
            SeqModel got;
            for (uint32_t c : cells) got[t.cell_pos(c)].push_back(token_of[c]);
            for (auto& [pos, toks] : got) std::sort(toks.begin(), toks.end());
            if (got != model_.seqs[s])
                return "sequence " + std::to_string(s) + " holds {" + describe(got) + "}, the model {" +
                       describe(model_.seqs[s]) + "}";
            int32_t lo = -2, hi = -2;
            if (kvrt_cache_seq_pos_min(cache_, s, &lo) != KVRT_SUCCESS ||
                kvrt_cache_seq_pos_max(cache_, s, &hi) != KVRT_SUCCESS)
                return std::string("seq_pos_min/max: ") + kvrt_last_error_message();
            const int32_t want_lo = got.empty() ? -1 : got.begin()->first;
            const int32_t want_hi = got.empty() ? -1 : got.rbegin()->first;
            if (lo != want_lo || hi != want_hi)
                return "sequence " + std::to_string(s) + ": pos_min/max " + std::to_string(lo) + "/" +
                       std::to_string(hi) + ", expected " + std::to_string(want_lo) + "/" + std::to_string(want_hi);
        }
        return "";
    }

    void check_all() {
        const std::string diff = compare_with_model();
        INFO("operations of this schedule:\n" << log_);
        INFO(diff);
        REQUIRE(diff.empty());
        ++stats_.checks;
        check_attention();
    }

    // One query per sequence that has tokens, after all of them (position
    // kPosRange), with random Q; K values grow with the token id, so the scale
    // keeps the scores within a few units.
    void check_attention() {
        std::vector<int32_t> qpos, qseq;
        for (int32_t s = 0; s < kSeqs; ++s)
            if (!model_.seqs[s].empty()) {
                qpos.push_back(kPosRange);
                qseq.push_back(s);
            }
        const uint32_t nq = static_cast<uint32_t>(qpos.size());
        if (nq == 0) return;
        constexpr uint32_t kHeads = 2 * kKvHeads;
        std::vector<float> q(size_t{nq} * kHeads * kHeadDim);
        for (float& x : q) x = static_cast<float>(rng_.below(2001)) / 1000.0f - 1.0f;
        kvrt_attention_params params = KVRT_ATTENTION_PARAMS_INIT;
        params.scale = 32.0f / (static_cast<float>(next_token_) * kRowElems * kHeadDim);

        // The reference's cells: every live token, with its sequences.
        std::map<uint32_t, kvrt::ref::AttnCell> by_token;
        for (int32_t s = 0; s < kSeqs; ++s)
            for (const auto& [pos, tokens] : model_.seqs[s])
                for (uint32_t t : tokens) {
                    by_token[t].pos = pos;
                    by_token[t].seq_ids.push_back(s);
                }
        std::vector<kvrt::ref::AttnCell> cells;
        std::vector<uint32_t> token_ids;
        for (const auto& [t, cell] : by_token) {
            cells.push_back(cell);
            token_ids.push_back(t);
        }
        std::vector<kvrt::ref::AttnQuery> queries(nq);
        for (uint32_t i = 0; i < nq; ++i) queries[i] = {qpos[i], qseq[i]};
        kvrt::ref::AttnParams rp;
        rp.n_heads = kHeads;
        rp.n_kv_heads = kKvHeads;
        rp.head_dim_k = rp.head_dim_v = kHeadDim;
        rp.scale = params.scale;

        const kvrt_batch batch = make_batch(nq, qpos.data(), qseq.data());
        const kvrt_tensor_ref qref = host_tensor(q.data());
        if (rng_.percent(20)) {
            // Recorded, then dropped: its mirror update never reaches the device.
            kvrt_stream s = nullptr;
            kvrt_stream_desc sd = KVRT_STREAM_DESC_INIT;
            KVRT_REQUIRE_OK(kvrt_stream_create(ctx_, &sd, &s));
            KVRT_REQUIRE_OK(kvrt_stream_begin(s));
            kvrt_buffer out_buf = nullptr;
            kvrt_buffer_desc bd = KVRT_BUFFER_DESC_INIT;
            bd.size = q.size() * 4;
            KVRT_REQUIRE_OK(kvrt_buffer_create(ctx_, &bd, &out_buf));
            const kvrt_output_ref oref = buffer_output(out_buf, 0);
            KVRT_REQUIRE_OK(kvrt_cache_attention(cache_, s, 0, &batch, &qref, &oref, &params));
            kvrt_stream_destroy(s);
            kvrt_buffer_destroy(out_buf);
            ++stats_.dropped_recordings;
        }
        std::vector<float> k(cells.size() * kRowElems), v(k.size()), out(q.size());
        for (uint32_t l = 0; l < kLayers; ++l) {
            for (size_t i = 0; i < token_ids.size(); ++i)
                for (uint32_t e = 0; e < kRowElems; ++e) {
                    k[i * kRowElems + e] = k_value(token_ids[i], l, e);
                    v[i * kRowElems + e] = v_value(token_ids[i], l, e);
                }
            const std::vector<double> want = kvrt::ref::attention(rp, q.data(), queries, k.data(), v.data(), cells);
            const kvrt_output_ref oref = host_output(out.data());
            INFO("layer " << l);
            KVRT_REQUIRE_OK(kvrt_cache_attention(cache_, nullptr, static_cast<int32_t>(l), &batch, &qref, &oref,
                                                 &params));
            const double e = kvrt::ref::nmse(out, want);
            INFO("attention NMSE " << e << " over " << cells.size() << " tokens, " << nq << " queries");
            REQUIRE(e <= 1e-6);
            stats_.worst_nmse = std::max(stats_.worst_nmse, e);
        }
        ++stats_.attention_checks;
        if (kvrt::api::cache_of(cache_)->current_lists() > 0) ++stats_.listed_checks;
    }

    kvrt_context ctx_ = nullptr;
    Cache cache_;
    Rng64 rng_;
    Model model_;
    uint32_t next_token_ = 0;
    std::string log_;
    Stats stats_;
};

}  // namespace

TEST_CASE("random schedules of stores and sequence operations keep every sequence isolated", "[cache][isolation]") {
    const uint64_t seed = test_seed();
    GpuContext ctx;
    IsolationRun run(ctx, seed);
    for (uint32_t i = 0; i < kSchedules; ++i) {
        INFO("KVRT_TEST_SEED=" << seed << ", schedule " << i);
        run.run_schedule();
    }
    // The schedules reached every situation this test is about.
    const Stats& s = run.stats();
    INFO("stores " << s.stores << " (" << s.scattered << " scattered), shared tokens " << s.shared_tokens
                   << ", cache full " << s.full << ", seq_rm " << s.removes << ", seq_cp " << s.copies << ", seq_keep "
                   << s.keeps << ", clear " << s.clears << ", compactions " << s.compactions << " (" << s.moves
                   << " moves)");
    CHECK(s.checks == kSchedules);
    INFO("attention checks " << s.attention_checks << " (" << s.dropped_recordings << " after a dropped recording, "
                             << s.listed_checks << " through lists of cells), worst NMSE " << s.worst_nmse);
    CHECK(s.attention_checks >= kSchedules / 2);
    CHECK(s.listed_checks >= 50);
    CHECK(s.dropped_recordings >= 50);
    CHECK(s.full >= 10);
    CHECK(s.scattered >= 10);
    CHECK(s.shared_tokens >= 100);
    CHECK(s.moves >= 100);
    CHECK(s.keeps >= 5);
    CHECK(s.clears >= 5);
}
