// Threads sharing one context (kvrt.h, "Threading"): each thread has its own
// cache, memory and stream, and they run at the same time.
//
// - Workers: two caches driven through their own streams and one through
//   synchronous calls (stream NULL), each storing tokens, attending, removing
//   positions and compacting in a loop; a fixed-capacity memory updated and
//   read through its own stream. Every output is compared with the CPU
//   reference, and must be bit-identical to the same worker's output when it
//   ran alone before.
// - Alongside them, a thread that creates and destroys buffers, streams and
//   small caches, copies through them and reads the context's counters.
// - Objects of one stream's recording destroyed on another thread (a buffer,
//   a cache) make that recording unsubmittable, as on one thread.
// - Staged copies (KVRT_CONTEXT_FORCE_STAGING) on several threads at once.
//
// Catch2's assertions are not thread-safe: threads collect their failures as
// text and the main thread checks them after joining. A watchdog aborts the
// program if the threads do not finish in time (a deadlock).
#include "gpu_test.hpp"

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/random.hpp"
#include "memory_check.hpp"
#include "reference/attention.hpp"
#include "reference/half.hpp"
#include "reference/metrics.hpp"

using namespace kvrt_test;
namespace ref = kvrt::ref;

namespace {

constexpr uint64_t kWaitNs = 120ull * 1000 * 1000 * 1000;
constexpr auto kWatchdog = std::chrono::minutes(5);

// What one thread saw: its outputs in order, and its failures.
struct Outcome {
    std::vector<float> outputs;
    std::vector<std::string> errors;

    bool ok() const { return errors.empty(); }
    // Records a failed kvrt call with the thread's detail message; true if `r` succeeded.
    bool check(kvrt_result r, const char* what) {
        if (r == KVRT_SUCCESS) return true;
        errors.push_back(std::string(what) + ": " + kvrt_result_string(r) + ": " + kvrt_last_error_message());
        return false;
    }
    bool expect(bool cond, const std::string& what) {
        if (!cond) errors.push_back(what);
        return cond;
    }
};

// Runs `fns` on threads of their own and waits for them; aborts the program
// if they do not finish within the watchdog's time.
void run_threads(const std::vector<std::function<void()>>& fns) {
    std::mutex m;
    std::condition_variable cv;
    size_t done = 0;
    std::vector<std::thread> threads;
    for (const auto& f : fns)
        threads.emplace_back([&, f]() {
            f();
            std::lock_guard<std::mutex> lock(m);
            ++done;
            cv.notify_all();
        });
    {
        std::unique_lock<std::mutex> lock(m);
        if (!cv.wait_for(lock, kWatchdog, [&]() { return done == fns.size(); })) {
            std::fprintf(stderr, "test_threads: %zu of %zu threads still running after the watchdog's time "
                                 "(deadlock?)\n", fns.size() - done, fns.size());
            std::abort();
        }
    }
    for (auto& t : threads) t.join();
}

void report(const char* who, const Outcome& o) {
    for (const auto& e : o.errors) UNSCOPED_INFO(who << ": " << e);
    CHECK(o.ok());
}

// --- A cache worker -------------------------------------------------------

constexpr uint32_t kLayers = 2, kHeads = 4, kKvHeads = 2, kDim = 32, kCapacity = 64;
constexpr int32_t kSeqs = 2;
constexpr uint32_t kRow = kKvHeads * kDim;  // K or V values of one token in one layer

struct Token {
    std::vector<float> k, v;  // [layer][kRow], f16-exact
};

// Stores, attends, removes and compacts in a loop on a cache of its own,
// through its own stream or (`sync`) through synchronous calls.
class CacheWorker {
public:
    CacheWorker(kvrt_context ctx, bool sync, uint32_t seed, int iterations)
        : ctx_(ctx), sync_(sync), rng_(seed), iterations_(iterations) {}

    Outcome run() {
        kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
        d.n_layers = kLayers;
        d.n_heads = kHeads;
        d.n_kv_heads = kKvHeads;
        d.head_dim_k = kDim;
        d.capacity = kCapacity;
        d.max_seqs = kSeqs;
        d.label = sync_ ? "sync worker cache" : "stream worker cache";
        if (o_.check(kvrt_cache_create(ctx_, &d, &cache_), "kvrt_cache_create") &&
            (sync_ || o_.check(kvrt_stream_create(ctx_, nullptr, &stream_), "kvrt_stream_create"))) {
            for (int it = 0; it < iterations_ && o_.ok(); ++it) step(it);
            o_.expect(!o_.ok() || moved_ > 0, "compaction never moved a cell");
        }
        kvrt_buffer_destroy(out_);
        kvrt_stream_destroy(stream_);
        kvrt_cache_destroy(cache_);
        return std::move(o_);
    }

private:
    float value() { return ref::round_to_f16(normal_(rng_)); }

    size_t used() const {
        size_t n = 0;
        for (const auto& s : model_) n += s.size();
        return n;
    }

    // Makes room for `n` tokens by dropping the oldest positions of the
    // fuller sequence.
    void make_room(uint32_t n) {
        while (used() + n > kCapacity && o_.ok()) {
            const int32_t s = model_[0].size() >= model_[1].size() ? 0 : 1;
            const int32_t cut = model_[s].begin()->first + 8;
            if (!o_.check(kvrt_cache_seq_rm(cache_, s, -1, cut), "kvrt_cache_seq_rm (oldest)")) return;
            model_[s].erase(model_[s].begin(), model_[s].lower_bound(cut));
        }
    }

    // Removes two positions from the middle of a sequence: a hole to compact.
    void punch_hole(int32_t s) {
        if (model_[s].size() < 6) return;
        auto it = model_[s].begin();
        std::advance(it, static_cast<long>(model_[s].size() / 2));
        const int32_t p = it->first;
        if (!o_.check(kvrt_cache_seq_rm(cache_, s, p, p + 2), "kvrt_cache_seq_rm (hole)")) return;
        model_[s].erase(model_[s].lower_bound(p), model_[s].lower_bound(p + 2));
        int32_t got = -2;
        if (o_.check(kvrt_cache_seq_pos_max(cache_, s, &got), "kvrt_cache_seq_pos_max"))
            o_.expect(got == model_[s].rbegin()->first, "seq_pos_max disagrees with the model");
    }

    void step(int it) {
        const int32_t s = it % kSeqs;
        const uint32_t n = 1 + static_cast<uint32_t>(rng_() % 5);
        make_room(n);
        if (!o_.ok()) return;

        // The new tokens, K and V of all layers: [layer][token][kRow].
        std::vector<int32_t> pos(n), seqs(n, s);
        std::vector<float> k(size_t{kLayers} * n * kRow), v(k.size());
        for (auto& x : k) x = value();
        for (auto& x : v) x = value();
        for (uint32_t i = 0; i < n; ++i) {
            pos[i] = next_pos_[s]++;
            Token& t = model_[s][pos[i]];
            for (uint32_t l = 0; l < kLayers; ++l) {
                const float* kr = &k[(size_t{l} * n + i) * kRow];
                const float* vr = &v[(size_t{l} * n + i) * kRow];
                t.k.insert(t.k.end(), kr, kr + kRow);
                t.v.insert(t.v.end(), vr, vr + kRow);
            }
        }

        // One query per sequence that has tokens, at its newest position.
        std::vector<int32_t> qpos, qseq;
        for (int32_t q = 0; q < kSeqs; ++q)
            if (!model_[q].empty()) {
                qpos.push_back(model_[q].rbegin()->first);
                qseq.push_back(q);
            }
        const uint32_t nq = static_cast<uint32_t>(qpos.size());
        std::vector<float> qv(size_t{nq} * kHeads * kDim);
        for (auto& x : qv) x = normal_(rng_);
        const int32_t layer = it % static_cast<int32_t>(kLayers);
        // Now and then a hole, punched after the store so that compaction
        // finds it (sequence operations change metadata at once, also
        // while a stream records).
        const bool compact = it % 4 == 3;

        const kvrt_batch b = make_batch(n, pos.data(), seqs.data());
        const kvrt_tensor_ref kr = host_tensor(k.data()), vr = host_tensor(v.data());
        const kvrt_batch qb = make_batch(nq, qpos.data(), qseq.data());
        const kvrt_tensor_ref qr = host_tensor(qv.data());
        std::vector<float> got(size_t{nq} * kHeads * kDim, NAN);
        uint32_t moved = 0;
        if (sync_) {
            const kvrt_output_ref orf = host_output(got.data());
            if (!o_.check(kvrt_cache_store(cache_, nullptr, &b, -1, &kr, &vr, nullptr), "kvrt_cache_store")) return;
            if (compact) punch_hole(1 - s);
            if (compact && o_.ok() && !o_.check(kvrt_cache_compact(cache_, nullptr, 0.0f, 0, &moved), "kvrt_cache_compact"))
                return;
            if (!o_.check(kvrt_cache_attention(cache_, nullptr, layer, &qb, &qr, &orf, nullptr), "kvrt_cache_attention"))
                return;
        } else {
            // A new output buffer now and then: buffers come and go while
            // the other threads submit.
            if (it % 3 == 0) {
                kvrt_buffer_destroy(out_);
                out_ = nullptr;
                kvrt_buffer_desc bd = KVRT_BUFFER_DESC_INIT;
                bd.size = size_t{kSeqs} * kHeads * kDim * 4;
                bd.label = "worker output";
                if (!o_.check(kvrt_buffer_create(ctx_, &bd, &out_), "kvrt_buffer_create")) return;
            }
            const kvrt_output_ref orf = buffer_output(out_, 0);
            if (!o_.check(kvrt_stream_begin(stream_), "kvrt_stream_begin")) return;
            bool ok = o_.check(kvrt_cache_store(cache_, stream_, &b, -1, &kr, &vr, nullptr), "kvrt_cache_store");
            if (ok && compact) {
                punch_hole(1 - s);
                ok = o_.ok();
            }
            if (ok && compact) ok = o_.check(kvrt_cache_compact(cache_, stream_, 0.0f, 0, &moved), "kvrt_cache_compact");
            if (ok) ok = o_.check(kvrt_cache_attention(cache_, stream_, layer, &qb, &qr, &orf, nullptr),
                                  "kvrt_cache_attention");
            if (ok) ok = o_.check(kvrt_stream_submit(stream_), "kvrt_stream_submit");
            // Every other time the download comes first: it waits for the
            // work on the buffer itself, so a wait after it returns at once
            // (timeout 0); the next begin needs that wait either way.
            const bool download_first = it % 2 == 1;
            if (ok && !download_first) ok = o_.check(kvrt_stream_wait(stream_, kWaitNs), "kvrt_stream_wait");
            if (ok) ok = o_.check(kvrt_buffer_download(out_, 0, got.data(), got.size() * 4), "kvrt_buffer_download");
            if (ok && download_first) ok = o_.check(kvrt_stream_wait(stream_, 0), "kvrt_stream_wait after the download");
            if (!ok) return;
        }
        moved_ += moved;
        compare(layer, qpos, qseq, qv, got, it);
        o_.outputs.insert(o_.outputs.end(), got.begin(), got.end());
    }

    void compare(int32_t layer, const std::vector<int32_t>& qpos, const std::vector<int32_t>& qseq,
                 const std::vector<float>& q, const std::vector<float>& got, int it) {
        std::vector<ref::AttnCell> cells;
        std::vector<float> k, v;
        for (int32_t s = 0; s < kSeqs; ++s)
            for (const auto& [p, t] : model_[s]) {
                cells.push_back({p, {s}});
                k.insert(k.end(), t.k.begin() + size_t(layer) * kRow, t.k.begin() + size_t(layer + 1) * kRow);
                v.insert(v.end(), t.v.begin() + size_t(layer) * kRow, t.v.begin() + size_t(layer + 1) * kRow);
            }
        std::vector<ref::AttnQuery> queries;
        for (size_t i = 0; i < qpos.size(); ++i) queries.push_back({qpos[i], qseq[i]});
        ref::AttnParams p;
        p.n_heads = kHeads;
        p.n_kv_heads = kKvHeads;
        p.head_dim_k = p.head_dim_v = kDim;
        p.scale = 1.0 / std::sqrt(double{kDim});
        const std::vector<double> want = ref::attention(p, q.data(), queries, k.data(), v.data(), cells);
        const double e = ref::nmse(got, want);
        std::ostringstream msg;
        msg << "iteration " << it << ": attention NMSE " << e;
        o_.expect(e <= 1e-6, msg.str());
    }

    kvrt_context ctx_;
    bool sync_;
    Rng rng_;
    std::normal_distribution<float> normal_{0.0f, 1.0f};
    int iterations_;
    Outcome o_;
    kvrt_cache cache_ = nullptr;
    kvrt_stream stream_ = nullptr;
    kvrt_buffer out_ = nullptr;
    std::map<int32_t, Token> model_[kSeqs];
    int32_t next_pos_[kSeqs] = {};
    uint32_t moved_ = 0;
};

// --- A memory worker ------------------------------------------------------

// Updates and reads a fixed-capacity memory through its own stream, with
// sequence copies and removals recorded between.
Outcome run_memory_worker(kvrt_context ctx, uint32_t seed, int iterations) {
    Outcome o;
    const Geometry g = shape(1, 2, 16, 16, 16, 2);
    const MemoryDesc md(g);
    Reference r(g);
    Rng rng(seed);
    kvrt_memory mem = nullptr;
    kvrt_stream s = nullptr;
    kvrt_buffer out = nullptr;
    const uint64_t max_tokens = 8;
    kvrt_buffer_desc bd = KVRT_BUFFER_DESC_INIT;
    bd.size = max_tokens * g.heads * g.d * 4;
    bd.label = "memory worker output";
    bool ok = o.check(kvrt_memory_create(ctx, &md.desc, &mem), "kvrt_memory_create") &&
              o.check(kvrt_stream_create(ctx, nullptr, &s), "kvrt_stream_create") &&
              o.check(kvrt_buffer_create(ctx, &bd, &out), "kvrt_buffer_create");
    for (int it = 0; ok && it < iterations; ++it) {
        const Batch b = random_batch(g, 1 + static_cast<uint32_t>(rng() % max_tokens), 0, rng, g.seqs);
        MemoryBatch mb(b, nullptr);
        mb.output_to(out);
        ok = o.check(kvrt_stream_begin(s), "kvrt_stream_begin") &&
             o.check(kvrt_memory_update_read(mem, s, mb.get()), "kvrt_memory_update_read");
        if (ok && it % 5 == 2) ok = o.check(kvrt_memory_seq_cp(mem, s, 0, 1), "kvrt_memory_seq_cp");
        if (ok && it % 7 == 6) ok = o.check(kvrt_memory_seq_rm(mem, s, 0), "kvrt_memory_seq_rm");
        if (ok) ok = o.check(kvrt_stream_submit(s), "kvrt_stream_submit");
        // Polls (timeout 0) while the other threads submit.
        kvrt_result w = KVRT_ERROR_TIMEOUT;
        while (ok && w == KVRT_ERROR_TIMEOUT) {
            w = kvrt_stream_wait(s, 0);
            if (w == KVRT_ERROR_TIMEOUT) std::this_thread::yield();
        }
        if (ok) ok = o.check(w, "kvrt_stream_wait");
        std::vector<float> got(size_t{b.n} * g.heads * g.d, NAN);
        if (ok) ok = o.check(kvrt_buffer_download(out, 0, got.data(), got.size() * 4), "kvrt_buffer_download");
        if (!ok) break;
        std::vector<double> want;
        r.run(Op::UpdateRead, b, &want);
        if (it % 5 == 2) r.seq_cp(0, 1);
        if (it % 7 == 6) r.seq_rm(0);
        const double e = ref::nmse(got, want);
        o.expect(e <= 1e-6, "memory iteration " + std::to_string(it) + ": NMSE " + std::to_string(e));
        o.outputs.insert(o.outputs.end(), got.begin(), got.end());
    }
    kvrt_buffer_destroy(out);
    kvrt_stream_destroy(s);
    kvrt_memory_destroy(mem);
    return o;
}

// --- Creation and destruction alongside -----------------------------------

// Until `stop`: buffers, streams and small caches created, used and
// destroyed, and the context's counters and pipeline cache read.
Outcome run_churn(kvrt_context ctx, const std::atomic<bool>& stop, uint32_t seed) {
    Outcome o;
    Rng rng(seed);
    uint64_t submissions = 0;
    for (int round = 0; o.ok() && (round < 4 || !stop.load()); ++round) {
        kvrt_context_stats st = KVRT_CONTEXT_STATS_INIT;
        if (!o.check(kvrt_context_get_stats(ctx, &st), "kvrt_context_get_stats")) break;
        o.expect(st.peak_device_bytes > 0 && st.peak_device_bytes >= st.device_bytes, "device byte counters inconsistent");
        o.expect(st.submissions >= submissions, "the submission counter went back");
        submissions = st.submissions;
        uint64_t pc = 0;
        o.check(kvrt_context_get_pipeline_cache(ctx, nullptr, &pc), "kvrt_context_get_pipeline_cache");

        // A buffer filled and copied through a stream of its own.
        const uint32_t words = 64 + static_cast<uint32_t>(rng() % 1024);
        kvrt_buffer_desc bd = KVRT_BUFFER_DESC_INIT;
        bd.size = uint64_t{words} * 8;
        bd.label = "churn buffer";
        kvrt_buffer buf = nullptr;
        kvrt_stream s = nullptr;
        std::vector<uint32_t> pattern(words);
        for (auto& w : pattern) w = static_cast<uint32_t>(rng());
        const uint32_t fill = static_cast<uint32_t>(rng());
        bool ok = o.check(kvrt_buffer_create(ctx, &bd, &buf), "kvrt_buffer_create") &&
                  o.check(kvrt_buffer_upload(buf, 0, pattern.data(), words * 4), "kvrt_buffer_upload") &&
                  o.check(kvrt_stream_create(ctx, nullptr, &s), "kvrt_stream_create") &&
                  o.check(kvrt_stream_begin(s), "kvrt_stream_begin") &&
                  o.check(kvrt_cmd_copy(s, buf, 0, buf, words * 4, words * 4), "kvrt_cmd_copy") &&
                  o.check(kvrt_cmd_fill(s, buf, 0, 16, fill), "kvrt_cmd_fill") &&
                  o.check(kvrt_stream_submit(s), "kvrt_stream_submit") &&
                  o.check(kvrt_stream_wait(s, kWaitNs), "kvrt_stream_wait");
        std::vector<uint32_t> back(size_t{words} * 2);
        if (ok) ok = o.check(kvrt_buffer_download(buf, 0, back.data(), back.size() * 4), "kvrt_buffer_download");
        if (ok) {
            bool same = true;
            for (uint32_t i = 0; i < words; ++i) {
                same = same && back[words + i] == pattern[i];
                same = same && back[i] == (i < 4 ? fill : pattern[i]);
            }
            o.expect(same, "a copied or filled buffer reads back wrong");
        }
        // Work still running when its buffer and stream are destroyed: their
        // memory goes once it completes, on whichever thread notices.
        if (ok)
            ok = o.check(kvrt_stream_begin(s), "kvrt_stream_begin") &&
                 o.check(kvrt_cmd_copy(s, buf, words * 4, buf, 0, words * 4), "kvrt_cmd_copy") &&
                 o.check(kvrt_stream_submit(s), "kvrt_stream_submit");
        if (ok) {
            // Beginning again is refused until the submission is waited
            // for, whether or not its work has completed.
            const kvrt_result again = kvrt_stream_begin(s);
            o.expect(again == KVRT_ERROR_INVALID_STATE,
                     std::string("kvrt_stream_begin on a submitted stream: ") + kvrt_result_string(again));
        }
        kvrt_buffer_destroy(buf);
        kvrt_stream_destroy(s);
        if (!ok) break;

        // A small cache: a synchronous store, read back, destroyed.
        kvrt_cache_desc cd = KVRT_CACHE_DESC_INIT;
        cd.n_layers = 1;
        cd.n_heads = 2;
        cd.n_kv_heads = 1;
        cd.head_dim_k = 32;
        cd.capacity = 16;
        cd.type_k = cd.type_v = KVRT_TYPE_F32;
        cd.label = "churn cache";
        kvrt_cache cache = nullptr;
        std::vector<float> k(32), v(32), kb(32), vb(32);
        for (size_t i = 0; i < 32; ++i) {
            k[i] = static_cast<float>(rng() % 1000);
            v[i] = -k[i];
        }
        const int32_t pos = 0, seq = 0;
        const kvrt_batch b = make_batch(1, &pos, &seq);
        const kvrt_tensor_ref kr = host_tensor(k.data()), vr = host_tensor(v.data());
        uint32_t cell = 0;
        ok = o.check(kvrt_cache_create(ctx, &cd, &cache), "kvrt_cache_create") &&
             o.check(kvrt_cache_store(cache, nullptr, &b, 0, &kr, &vr, &cell), "kvrt_cache_store") &&
             o.check(kvrt_cache_read(cache, 0, 1, &cell, kb.data(), bytes_of(kb), vb.data(), bytes_of(vb)),
                     "kvrt_cache_read");
        if (ok) o.expect(kb == k && vb == v, "a small cache reads back wrong");
        kvrt_cache_destroy(cache);
    }
    return o;
}

// The workers of the main test, with their seeds.
struct Workers {
    static constexpr int kIterations = 64;
    std::function<Outcome()> fns[3];
    const char* names[3] = {"stream cache worker", "sync cache worker", "memory worker"};
    explicit Workers(kvrt_context ctx) {
        fns[0] = [ctx]() { return CacheWorker(ctx, false, 11, kIterations).run(); };
        fns[1] = [ctx]() { return CacheWorker(ctx, true, 22, kIterations).run(); };
        fns[2] = [ctx]() { return run_memory_worker(ctx, 33, kIterations); };
    }
};

}  // namespace

TEST_CASE("threads: caches, a memory and streams of one context on several threads", "[threads]") {
    GpuContext ctx;
    Workers w(ctx);

    // Each worker alone first: the outputs every concurrent run must reproduce.
    Outcome alone[3];
    for (int i = 0; i < 3; ++i) {
        alone[i] = w.fns[i]();
        report(w.names[i], alone[i]);
    }
    REQUIRE(ctx.validation_errors() == 0);

    // Then all together, with a fourth thread creating and destroying objects.
    for (int run = 0; run < 3; ++run) {
        INFO("concurrent run " << run);
        Outcome together[3], churn;
        std::atomic<int> running{3};
        std::atomic<bool> stop{false};
        std::vector<std::function<void()>> fns;
        for (int i = 0; i < 3; ++i)
            fns.push_back([&, i]() {
                together[i] = w.fns[i]();
                if (--running == 0) stop = true;
            });
        fns.push_back([&]() { churn = run_churn(ctx, stop, 44 + static_cast<uint32_t>(run)); });
        run_threads(fns);
        for (int i = 0; i < 3; ++i) {
            report(w.names[i], together[i]);
            INFO(w.names[i]);
            CHECK(together[i].outputs.size() == alone[i].outputs.size());
            CHECK(same_bits(together[i].outputs, alone[i].outputs));
        }
        report("churn", churn);
    }
    kvrt_context_stats st = KVRT_CONTEXT_STATS_INIT;
    KVRT_REQUIRE_OK(kvrt_context_get_stats(ctx, &st));
    CHECK(st.validation_errors == 0);
}

TEST_CASE("threads: destroying what another thread's recording uses makes it unsubmittable", "[threads]") {
    GpuContext ctx;
    const uint64_t before = device_bytes(ctx);
    for (const bool destroy_cache : {false, true}) {
        INFO((destroy_cache ? "a cache" : "a buffer") << " destroyed on another thread");
        kvrt_stream s = nullptr;
        kvrt_buffer buf = nullptr;
        kvrt_cache cache = nullptr;
        KVRT_REQUIRE_OK(kvrt_stream_create(ctx, nullptr, &s));
        kvrt_buffer_desc bd = KVRT_BUFFER_DESC_INIT;
        bd.size = 4096;
        KVRT_REQUIRE_OK(kvrt_buffer_create(ctx, &bd, &buf));
        kvrt_cache_desc cd = KVRT_CACHE_DESC_INIT;
        cd.n_layers = 1;
        cd.n_heads = cd.n_kv_heads = 1;
        cd.head_dim_k = 32;
        cd.capacity = 8;
        KVRT_REQUIRE_OK(kvrt_cache_create(ctx, &cd, &cache));
        std::vector<float> k(32, 1.0f);
        const int32_t pos = 0, seq = 0;
        const kvrt_batch b = make_batch(1, &pos, &seq);
        const kvrt_tensor_ref kr = host_tensor(k.data());

        // Thread A records, hands over to B which destroys, then A submits.
        std::promise<void> recorded, destroyed;
        kvrt_result rec = KVRT_ERROR_INTERNAL, sub = KVRT_SUCCESS;
        run_threads({[&]() {
                         rec = kvrt_stream_begin(s);
                         if (rec == KVRT_SUCCESS)
                             rec = destroy_cache ? kvrt_cache_store(cache, s, &b, 0, &kr, &kr, nullptr)
                                                 : kvrt_cmd_fill(s, buf, 0, 4096, 7);
                         recorded.set_value();
                         destroyed.get_future().wait();
                         sub = kvrt_stream_submit(s);
                     },
                     [&]() {
                         recorded.get_future().wait();
                         if (destroy_cache) kvrt_cache_destroy(cache);
                         else kvrt_buffer_destroy(buf);
                         destroyed.set_value();
                     }});
        CHECK(rec == KVRT_SUCCESS);
        CHECK(sub == KVRT_ERROR_INVALID_STATE);
        // The stream is idle again and usable.
        run_stream(s, [&]() {});
        kvrt_stream_destroy(s);
        if (destroy_cache) kvrt_buffer_destroy(buf);
        else kvrt_cache_destroy(cache);
    }
    CHECK(settled_device_bytes(ctx, before) == before);
}

TEST_CASE("threads: staged uploads and downloads on several threads", "[threads]") {
    GpuContext ctx(KVRT_CONTEXT_FORCE_STAGING);
    Outcome o[3];
    std::vector<std::function<void()>> fns;
    for (int t = 0; t < 3; ++t)
        fns.push_back([&, t]() {
            Rng rng(100 + static_cast<uint32_t>(t));
            for (int it = 0; it < 12 && o[t].ok(); ++it) {
                const uint32_t words = 1 + static_cast<uint32_t>(rng() % 4096);
                kvrt_buffer_desc bd = KVRT_BUFFER_DESC_INIT;
                bd.size = uint64_t{words} * 4;
                kvrt_buffer buf = nullptr;
                std::vector<uint32_t> data(words), back(words);
                for (auto& w : data) w = static_cast<uint32_t>(rng());
                const bool ok = o[t].check(kvrt_buffer_create(ctx, &bd, &buf), "kvrt_buffer_create") &&
                                o[t].check(kvrt_buffer_upload(buf, 0, data.data(), bd.size), "kvrt_buffer_upload") &&
                                o[t].check(kvrt_buffer_download(buf, 0, back.data(), bd.size), "kvrt_buffer_download");
                if (ok) o[t].expect(back == data, "a staged buffer reads back wrong");
                kvrt_buffer_destroy(buf);
            }
        });
    run_threads(fns);
    for (const Outcome& x : o) report("staging thread", x);
}
