// All-or-nothing under injected failures. For each cache call that reaches the
// device (store with stream NULL for all layers and for one layer, write,
// compaction) the fault points are swept: n = 1, 2, ... with the n-th point
// armed, until the call succeeds without reaching it. Every failed attempt must
// return the injected error and leave the cache exactly as before (table,
// fragmentation, and the data of every used cell); the successful one must end
// in exactly the state of a fault-free run, which is itself checked against
// independent expectations (the CPU reference quantizer, unchanged rows).
//
// Each sweep runs twice: cold (a new context and cache for every attempt, so
// first-time allocations and pipeline creations fail too) and warm (one cache,
// the call retried after each failure). Then the stream variants: a store or a
// compaction recorded into a user stream whose submission fails, and a
// synchronous store whose wait times out.
#include "gpu_test.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <iterator>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "api/handles.hpp"
#include "core/fault.hpp"
#include "reference/half.hpp"
#include "reference/quant.hpp"

using namespace kvrt_test;
namespace ref = kvrt::ref;

namespace {

constexpr uint32_t kLayers = 2;
constexpr uint32_t kKvHeads = 2;
constexpr uint32_t kDim = 32;
constexpr uint32_t kCapacity = 48;
constexpr uint32_t kRowElems = kKvHeads * kDim;

// Arms the n-th fault point for the life of the object; disarms on exit, also
// when an assertion throws.
class FaultArm {
public:
    explicit FaultArm(uint64_t n) { kvrt::fault::arm(n); }
    ~FaultArm() { kvrt::fault::arm(0); }
    FaultArm(const FaultArm&) = delete;
    FaultArm& operator=(const FaultArm&) = delete;
};

// What one call returned with a fault point armed.
struct Attempt {
    kvrt_result result = KVRT_SUCCESS;
    uint64_t points = 0;  // fault points reached (the armed one included)
    std::string message;
};

template <class F>
Attempt with_fault(uint64_t n, F&& call) {
    FaultArm arm(n);
    Attempt a;
    a.result = call();
    a.message = kvrt_last_error_message();
    a.points = kvrt::fault::points_passed();
    return a;
}

// The fault sites (core/fault.hpp) and the error each one injects.
struct Site {
    const char* name;
    kvrt_result code;
};
constexpr Site kSites[] = {
    {"device allocation", KVRT_ERROR_OUT_OF_DEVICE_MEMORY}, {"pipeline creation", KVRT_ERROR_OUT_OF_DEVICE_MEMORY},
    {"dispatch recording", KVRT_ERROR_OUT_OF_DEVICE_MEMORY}, {"queue submit", KVRT_ERROR_DEVICE_LOST},
    {"wait", KVRT_ERROR_TIMEOUT},
};

// The site an injected failure names in its detail message, or nullptr.
const Site* site_of(const std::string& message) {
    for (const Site& s : kSites)
        if (message.find(std::string("injected failure at ") + s.name) != std::string::npos) return &s;
    return nullptr;
}

// A batch: token i at positions[i] in the sequences listed for it.
struct Batch {
    std::vector<int32_t> pos;
    std::vector<uint32_t> counts;
    std::vector<int32_t> ids;
    kvrt_batch get() const { return make_batch(static_cast<uint32_t>(pos.size()), pos.data(), ids.data(), counts.data()); }
    uint32_t size() const { return static_cast<uint32_t>(pos.size()); }
};

Batch one_seq(int32_t seq, int32_t first, uint32_t n) {
    Batch b;
    for (uint32_t i = 0; i < n; ++i) b.pos.push_back(first + static_cast<int32_t>(i));
    b.counts.assign(n, 1);
    b.ids.assign(n, seq);
    return b;
}

// The batch under test: three tokens, the first shared by sequences 1 and 3.
Batch test_batch() {
    Batch b;
    b.pos = {20, 21, 22};
    b.counts = {2, 1, 1};
    b.ids = {1, 3, 3, 3};
    return b;
}

// f32 rows (layer blocks of n rows) with a salt, so each batch differs.
std::vector<float> input_rows(uint32_t n, float salt) {
    std::vector<float> x(size_t{kLayers} * n * kRowElems);
    for (size_t i = 0; i < x.size(); ++i)
        x[i] = 2.0f * std::sin(0.731f * static_cast<float>(i) + salt) + 0.01f * static_cast<float>(i % 7);
    return x;
}

std::vector<uint16_t> to_f16(const std::vector<float>& x) {
    std::vector<uint16_t> h(x.size());
    for (size_t i = 0; i < x.size(); ++i) h[i] = ref::f32_to_f16(x[i]);
    return h;
}

// Everything a failed call must leave as it was. `head` (where the next
// placement search starts) is kept apart: undo paths that cannot roll back
// exactly restore the cells but not that hint.
struct State {
    std::vector<int32_t> pos, delta;
    std::vector<uint64_t> words;
    uint32_t used = 0, used_end = 0, head = 0;
    float fragmentation = 0;
    std::vector<uint32_t> cells;  // used cells, ascending
    std::vector<float> data;      // their K then V rows, layer by layer

    bool same_table(const State& o) const {
        return pos == o.pos && delta == o.delta && words == o.words && used == o.used && used_end == o.used_end &&
               cells == o.cells;
    }
    bool same_cells(const State& o) const {
        return same_table(o) && fragmentation == o.fragmentation && data == o.data;
    }
    bool operator==(const State& o) const { return same_cells(o) && head == o.head; }
};

// A context and a cache with three sequences, shared cells and holes:
//   seq 0: positions 0..6 and 10, 11 (cells 0..6, 10, 11; 7..9 are holes),
//   seq 1: positions 0..5, shared with seq 0,
//   seq 2: positions 0, 4..9 (cells 12, 16..21; 13..15 are holes).
// It is filled through a user stream from f16 input, so the cache's own stream
// and, in a new context, the kernels for f32 input (used by the calls under
// test) start cold.
class Scenario {
public:
    explicit Scenario(std::shared_ptr<GpuContext> ctx = std::make_shared<GpuContext>()) : ctx_(std::move(ctx)) {
        kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
        d.n_layers = kLayers;
        d.n_heads = 2 * kKvHeads;
        d.n_kv_heads = kKvHeads;
        d.head_dim_k = kDim;
        d.capacity = kCapacity;
        d.max_seqs = 4;
        d.type_k = KVRT_TYPE_F16;
        d.type_v = KVRT_TYPE_Q8_0;
        KVRT_REQUIRE_OK(kvrt_cache_create(*ctx_, &d, cache_.out()));
        Stream s(*ctx_);
        run_stream(s, [&] {
            store_f16(s, one_seq(0, 0, 12), 0.0f);
            store_f16(s, one_seq(2, 0, 10), 1.0f);
        });
        KVRT_REQUIRE_OK(kvrt_cache_seq_cp(cache_, 0, 1, 0, 6));
        KVRT_REQUIRE_OK(kvrt_cache_seq_rm(cache_, 0, 7, 10));
        KVRT_REQUIRE_OK(kvrt_cache_seq_rm(cache_, 2, 1, 4));
    }
    Scenario(const Scenario&) = delete;
    Scenario& operator=(const Scenario&) = delete;

    kvrt_context ctx() const { return *ctx_; }
    const std::shared_ptr<GpuContext>& shared_ctx() const { return ctx_; }
    kvrt_cache cache() const { return cache_; }
    const kvrt::kv::CellTable& table() const { return kvrt::api::cache_of(cache_)->table(); }

    // The table alone (no device work: it leaves cold paths cold).
    State table_state() const {
        const kvrt::kv::CellTable& t = table();
        State s;
        s.pos.assign(t.positions(), t.positions() + t.capacity());
        s.delta.assign(t.deltas(), t.deltas() + t.capacity());
        s.words.assign(t.seq_words(), t.seq_words() + size_t{t.capacity()} * t.words_per_cell());
        s.used = t.used();
        s.used_end = t.used_end();
        s.head = t.head();
        s.fragmentation = static_cast<float>(t.fragmentation());
        for (uint32_t c = 0; c < t.capacity(); ++c)
            if (!t.cell_is_empty(c)) s.cells.push_back(c);
        return s;
    }

    // The table, the reported fragmentation and the data of every used cell.
    State state() const {
        State s = table_state();
        kvrt_cache_info info = KVRT_CACHE_INFO_INIT;
        KVRT_REQUIRE_OK(kvrt_cache_get_info(cache_, &info));
        s.fragmentation = info.fragmentation;
        const uint32_t n = static_cast<uint32_t>(s.cells.size());
        std::vector<float> k(size_t{n} * kRowElems), v(k.size());
        for (uint32_t l = 0; l < kLayers && n > 0; ++l) {
            KVRT_REQUIRE_OK(kvrt_cache_read(cache_, static_cast<int32_t>(l), n, s.cells.data(), k.data(), bytes_of(k),
                                            v.data(), bytes_of(v)));
            s.data.insert(s.data.end(), k.begin(), k.end());
            s.data.insert(s.data.end(), v.begin(), v.end());
        }
        return s;
    }

private:
    void store_f16(kvrt_stream s, const Batch& b, float salt) {
        const auto k = to_f16(input_rows(b.size(), salt)), v = to_f16(input_rows(b.size(), salt + 0.5f));
        const kvrt_tensor_ref kr = host_tensor(k.data(), KVRT_TYPE_F16);
        const kvrt_tensor_ref vr = host_tensor(v.data(), KVRT_TYPE_F16);
        const kvrt_batch batch = b.get();
        KVRT_REQUIRE_OK(kvrt_cache_store(cache_, s, &batch, -1, &kr, &vr, nullptr));
    }

    std::shared_ptr<GpuContext> ctx_;
    Cache cache_;
};

// f32 input of the calls under test (refs to its own rows: not copyable).
struct Input {
    Input() = default;
    Input(const Input&) = delete;
    Input& operator=(const Input&) = delete;

    std::vector<float> k = input_rows(3, 7.0f), v = input_rows(3, 9.0f);
    kvrt_tensor_ref kref = host_tensor(k.data());
    kvrt_tensor_ref vref = host_tensor(v.data());
};

// Checks the rows of `cells` (token i in cells[i]) in cache layer `layer`
// against the CPU conversion of input layer block `block` (K to f16, V to
// Q8_0, both exact).
void require_rows_stored(Scenario& s, const Input& in, const std::vector<uint32_t>& cells, uint32_t layer,
                         uint32_t block) {
    const uint32_t n = static_cast<uint32_t>(cells.size());
    std::vector<float> k(size_t{n} * kRowElems), v(k.size());
    KVRT_REQUIRE_OK(kvrt_cache_read(s.cache(), static_cast<int32_t>(layer), n, cells.data(), k.data(), bytes_of(k),
                                    v.data(), bytes_of(v)));
    std::vector<uint8_t> q(ref::row_bytes(ref::Type::Q8_0, kRowElems));
    std::vector<float> expect_v(kRowElems);
    for (uint32_t i = 0; i < n; ++i) {
        const float* xk = &in.k[(size_t{block} * n + i) * kRowElems];
        const float* xv = &in.v[(size_t{block} * n + i) * kRowElems];
        ref::encode_row(ref::Type::Q8_0, xv, kRowElems, q.data());
        ref::decode_row(ref::Type::Q8_0, q.data(), kRowElems, expect_v.data());
        for (uint32_t e = 0; e < kRowElems; ++e) {
            INFO("cell " << cells[i] << " layer " << layer << " element " << e);
            REQUIRE(k[size_t{i} * kRowElems + e] == ref::round_to_f16(xk[e]));
            REQUIRE(v[size_t{i} * kRowElems + e] == expect_v[e]);
        }
    }
}

void require_rows_stored(Scenario& s, const Input& in, const std::vector<uint32_t>& cells) {
    for (uint32_t l = 0; l < kLayers; ++l) require_rows_stored(s, in, cells, l, l);
}

// The cells of the test batch's tokens, in token order, after checking that
// they were empty before and hold exactly their positions and sequences now.
std::vector<uint32_t> test_batch_cells(const Scenario& s, const State& before) {
    const kvrt::kv::CellTable& t = s.table();
    const Batch b = test_batch();
    std::vector<uint32_t> out, of3;
    KVRT_REQUIRE_OK(t.cells_of_seq(3, &of3));
    for (int32_t p : b.pos) {
        const auto it = std::find_if(of3.begin(), of3.end(), [&](uint32_t c) { return t.cell_pos(c) == p; });
        REQUIRE(it != of3.end());
        REQUIRE(before.pos[*it] == -1);
        REQUIRE(t.cell_has_seq(*it, 1) == (p == b.pos[0]));
        out.push_back(*it);
    }
    return out;
}

// A call under test: an optional setup on a fresh scenario (part of the state
// before), the call, and independent checks of its fault-free outcome.
struct FaultCase {
    const char* name;
    // True when the call's device work lands in used cells: after a timeout
    // ("the work may still complete later") the table is as before but the
    // data is the new one. Other calls write only cells that are free again.
    bool writes_used_cells = false;
    std::function<void(Scenario&)> setup;
    std::function<kvrt_result(Scenario&)> call;
    std::function<void(Scenario&, const State& before)> check_outcome;
};

// The states before and after a fault-free run of `fc`.
struct Expected {
    State before, after;
};

Expected fault_free_run(const FaultCase& fc) {
    Scenario s;
    if (fc.setup) fc.setup(s);
    Expected e;
    e.before = s.state();
    KVRT_REQUIRE_OK(fc.call(s));
    e.after = s.state();
    fc.check_outcome(s, e.before);
    return e;
}

// Checks a failed attempt: the injected error, from the armed point.
void require_injected(const Attempt& a, uint64_t n, std::set<std::string>* sites) {
    INFO("fault point " << n << ": " << kvrt_result_string(a.result) << " \"" << a.message << "\", " << a.points
                        << " points reached");
    REQUIRE(a.points == n);
    const Site* site = site_of(a.message);
    REQUIRE(site != nullptr);
    REQUIRE(a.result == site->code);
    sites->insert(site->name);
}

// A fresh scenario for `fc`, checked against the expected state before.
std::unique_ptr<Scenario> prepare(const FaultCase& fc, const Expected& e, std::shared_ptr<GpuContext> ctx) {
    auto s = std::make_unique<Scenario>(std::move(ctx));
    if (fc.setup) fc.setup(*s);
    const State t = s->table_state();
    REQUIRE((t.same_table(e.before) && t.head == e.before.head));  // the scenario is deterministic
    return s;
}

// A scenario for `fc` where every one-time step is done: the kernels exist
// (the call ran on another cache of the context) and so does the upload
// memory of the cache's own stream (a read used it).
std::unique_ptr<Scenario> prepare_warm(const FaultCase& fc, const Expected& e) {
    auto ctx = std::make_shared<GpuContext>();
    {
        Scenario other(ctx);
        if (fc.setup) fc.setup(other);
        KVRT_REQUIRE_OK(fc.call(other));
    }
    auto s = prepare(fc, e, ctx);
    REQUIRE(s->state() == e.before);
    return s;
}

// Sweeps the fault points of `fc`, cold (a new context and cache for every
// attempt) or warm (one prepared cache, the call retried after each failure);
// returns the sites that failed.
std::set<std::string> sweep(const FaultCase& fc, const Expected& e, bool cold) {
    std::set<std::string> sites;
    std::unique_ptr<Scenario> warm = cold ? nullptr : prepare_warm(fc, e);
    for (uint64_t n = 1;; ++n) {
        INFO(fc.name << (cold ? ", cold" : ", warm") << ", fault point " << n);
        REQUIRE(n < 100);
        std::unique_ptr<Scenario> fresh = cold ? prepare(fc, e, std::make_shared<GpuContext>()) : nullptr;
        Scenario& s = cold ? *fresh : *warm;

        const Attempt a = with_fault(n, [&] { return fc.call(s); });
        if (a.result == KVRT_SUCCESS) {
            // Done: no fault point was left to fail, and the outcome is the
            // fault-free one.
            REQUIRE(a.points < n);
            REQUIRE(s.state() == e.after);
            return sites;
        }
        require_injected(a, n, &sites);
        const State now = s.state();
        if (fc.writes_used_cells && site_of(a.message)->code == KVRT_ERROR_TIMEOUT) {
            REQUIRE((now.same_table(e.before) && now.head == e.before.head));
            REQUIRE(now.data == e.after.data);
        } else {
            REQUIRE(now == e.before);
        }
    }
}

void sweep_both(const FaultCase& fc) {
    const Expected e = fault_free_run(fc);
    const std::set<std::string> cold = sweep(fc, e, true), warm = sweep(fc, e, false);
    std::string names;
    for (const auto& set : {cold, warm}) {
        names += names.empty() ? "cold:" : "; warm:";
        for (const std::string& site : set) names += " " + site;
    }
    // Cold, every kind of step failed at least once; warm, the device work.
    INFO(fc.name << ": " << names);
    CHECK(cold.size() == std::size(kSites));
    CHECK(warm == std::set<std::string>{"dispatch recording", "queue submit", "wait"});
}

FaultCase store_case(const char* name, int32_t layer) {
    auto in = std::make_shared<Input>();
    FaultCase fc;
    fc.name = name;
    fc.call = [in, layer](Scenario& s) {
        const Batch b = test_batch();
        const kvrt_batch batch = b.get();
        return kvrt_cache_store(s.cache(), nullptr, &batch, layer, &in->kref, &in->vref, nullptr);
    };
    fc.check_outcome = [in, layer](Scenario& s, const State& before) {
        REQUIRE(s.table().used() == before.used + 3);
        const std::vector<uint32_t> cells = test_batch_cells(s, before);
        if (layer < 0) require_rows_stored(s, *in, cells);
        else require_rows_stored(s, *in, cells, static_cast<uint32_t>(layer), 0);  // layer block 0 of the input
    };
    return fc;
}

}  // namespace

TEST_CASE("a synchronous store of all layers is all or nothing at every fault point", "[cache][faults]") {
    sweep_both(store_case("store, all layers", -1));
}

TEST_CASE("a synchronous store of one layer is all or nothing at every fault point", "[cache][faults]") {
    sweep_both(store_case("store, layer 1", 1));
}

TEST_CASE("a synchronous write is all or nothing at every fault point", "[cache][faults]") {
    auto in = std::make_shared<Input>();
    auto cells = std::make_shared<std::vector<uint32_t>>(3);
    FaultCase fc;
    fc.name = "write, all layers";
    fc.writes_used_cells = true;
    fc.setup = [cells](Scenario& s) {
        const Batch b = test_batch();
        const kvrt_batch batch = b.get();
        KVRT_REQUIRE_OK(kvrt_cache_place(s.cache(), &batch, cells->data()));
    };
    fc.call = [in, cells](Scenario& s) {
        return kvrt_cache_write(s.cache(), nullptr, 3, cells->data(), -1, &in->kref, &in->vref);
    };
    fc.check_outcome = [in, cells](Scenario& s, const State& before) {
        REQUIRE(s.table().used() == before.used);
        require_rows_stored(s, *in, *cells);
    };
    sweep_both(fc);
}

TEST_CASE("a synchronous compaction is all or nothing at every fault point", "[cache][faults]") {
    FaultCase fc;
    fc.name = "compaction";
    fc.call = [](Scenario& s) {
        uint32_t moved = 0;
        return kvrt_cache_compact(s.cache(), nullptr, 0.0f, 0, &moved);
    };
    fc.check_outcome = [](Scenario& s, const State& before) {
        // Every (sequence, position) holds the rows it held before, and the
        // holes are gone.
        const State after = s.state();
        REQUIRE(after.fragmentation == 0.0f);
        REQUIRE(before.fragmentation > 0.0f);
        REQUIRE(after.used_end == before.used);
        const size_t n_before = before.cells.size(), n_after = after.cells.size();
        REQUIRE(n_before == n_after);
        for (size_t i = 0; i < n_before; ++i) {
            const uint32_t c = before.cells[i];
            size_t j = 0;
            // One word of sequence bits per cell (max_seqs 4).
            while (j < n_after &&
                   !(after.pos[after.cells[j]] == before.pos[c] && after.words[after.cells[j]] == before.words[c]))
                ++j;
            INFO("cell " << c << " at position " << before.pos[c]);
            REQUIRE(j < n_after);
            for (uint32_t block = 0; block < 2 * kLayers; ++block)
                for (uint32_t e = 0; e < kRowElems; ++e)
                    REQUIRE(after.data[(block * n_after + j) * kRowElems + e] ==
                            before.data[(block * n_before + i) * kRowElems + e]);
        }
    };
    sweep_both(fc);
}

TEST_CASE("a store recorded into a stream gives its cells back when the submission fails", "[cache][faults]") {
    Scenario s;
    Stream stream(s.ctx());
    Input in;
    const Batch b = test_batch();
    const kvrt_batch batch = b.get();
    const State before = s.state();

    // Sweep the points of the submission; the recording is redone each time.
    for (uint64_t n = 1;; ++n) {
        INFO("fault point " << n << " of kvrt_stream_submit");
        REQUIRE(n < 20);
        KVRT_REQUIRE_OK(kvrt_stream_begin(stream));
        std::vector<uint32_t> cells(3);
        KVRT_REQUIRE_OK(kvrt_cache_store(s.cache(), stream, &batch, -1, &in.kref, &in.vref, cells.data()));
        REQUIRE(s.table().used() == before.used + 3);  // taken at once
        const Attempt a = with_fault(n, [&] { return kvrt_stream_submit(stream); });
        if (a.result == KVRT_SUCCESS) {
            REQUIRE(a.points < n);
            KVRT_REQUIRE_OK(kvrt_stream_wait(stream, UINT64_MAX));
            require_rows_stored(s, in, cells);
            break;
        }
        std::set<std::string> sites;
        require_injected(a, n, &sites);
        REQUIRE(s.state() == before);
    }
}

TEST_CASE("a store recorded into a stream gives its cells back when the recording is dropped", "[cache][faults]") {
    Scenario s;
    Input in;
    const Batch b = test_batch();
    const kvrt_batch batch = b.get();
    const State before = s.state();
    {
        Stream stream(s.ctx());
        KVRT_REQUIRE_OK(kvrt_stream_begin(stream));
        KVRT_REQUIRE_OK(kvrt_cache_store(s.cache(), stream, &batch, -1, &in.kref, &in.vref, nullptr));
        REQUIRE(s.table().used() == before.used + 3);
    }  // destroyed without a submission
    REQUIRE(s.state() == before);
}

TEST_CASE("a failed stream store gives back exactly its cells after later table changes", "[cache][faults]") {
    // A table change after the store makes an exact rollback impossible. The
    // batch's cells must still all become free (their rows were never
    // written), and nothing else may be undone.
    Scenario s;
    Stream stream(s.ctx());
    Input in;
    const Batch b = test_batch();
    const kvrt_batch batch = b.get();
    const State before = s.state();
    KVRT_REQUIRE_OK(kvrt_stream_begin(stream));
    KVRT_REQUIRE_OK(kvrt_cache_store(s.cache(), stream, &batch, -1, &in.kref, &in.vref, nullptr));
    auto fail_submit = [&] {
        const Attempt a = with_fault(1, [&] { return kvrt_stream_submit(stream); });
        std::set<std::string> sites;
        require_injected(a, 1, &sites);
        REQUIRE(sites.count("queue submit") == 1);
    };

    SECTION("an older token removed") {
        KVRT_REQUIRE_OK(kvrt_cache_seq_rm(s.cache(), 0, 11, 12));
        fail_submit();
        Scenario r;  // the removal alone
        KVRT_REQUIRE_OK(kvrt_cache_seq_rm(r.cache(), 0, 11, 12));
        REQUIRE(s.state().same_cells(r.state()));
    }
    SECTION("the new tokens shared with another sequence") {
        KVRT_REQUIRE_OK(kvrt_cache_seq_cp(s.cache(), 3, 2, 20, 23));
        fail_submit();
        const State now = s.state();
        INFO("cells used: " << now.used << ", expected " << before.used);
        REQUIRE(now.same_cells(before));
    }
    SECTION("a new token's position removed and stored again, synchronously") {
        // Position 21 of sequence 3 now belongs to a token that was written.
        KVRT_REQUIRE_OK(kvrt_cache_seq_rm(s.cache(), 3, 21, 22));
        Input again;
        const Batch one = one_seq(3, 21, 1);
        const kvrt_batch one_batch = one.get();
        again.k.resize(kLayers * kRowElems);  // layer blocks of one row
        again.v.resize(kLayers * kRowElems);
        for (uint32_t l = 0; l < kLayers; ++l)
            for (uint32_t e = 0; e < kRowElems; ++e) {
                again.k[l * kRowElems + e] = in.k[(l * 3 + 1) * kRowElems + e];
                again.v[l * kRowElems + e] = in.v[(l * 3 + 1) * kRowElems + e];
            }
        again.kref.host = again.k.data();
        again.vref.host = again.v.data();
        uint32_t cell = UINT32_MAX;
        KVRT_REQUIRE_OK(kvrt_cache_store(s.cache(), nullptr, &one_batch, -1, &again.kref, &again.vref, &cell));
        fail_submit();
        const State now = s.state();
        INFO("cells used: " << now.used << ", expected " << before.used + 1);
        REQUIRE(now.used == before.used + 1);
        REQUIRE(s.table().cell_pos(cell) == 21);
        REQUIRE(s.table().cell_has_seq(cell, 3));
        require_rows_stored(s, again, {cell});
    }
}

TEST_CASE("a compaction recorded into a stream is undone when the submission fails", "[cache][faults]") {
    Scenario s;
    Stream stream(s.ctx());
    const State before = s.state();
    KVRT_REQUIRE_OK(kvrt_stream_begin(stream));
    uint32_t moved = 0;
    KVRT_REQUIRE_OK(kvrt_cache_compact(s.cache(), stream, 0.0f, 0, &moved));
    REQUIRE(moved == 6);
    REQUIRE(s.table().fragmentation() == 0.0);  // metadata moved at once
    const Attempt a = with_fault(1, [&] { return kvrt_stream_submit(stream); });
    std::set<std::string> sites;
    require_injected(a, 1, &sites);
    REQUIRE(s.state().same_cells(before));

    // The next compaction, submitted, completes the same moves.
    run_stream(stream, [&] { KVRT_REQUIRE_OK(kvrt_cache_compact(s.cache(), stream, 0.0f, 0, &moved)); });
    REQUIRE(moved == 6);
    REQUIRE(s.table().fragmentation() == 0.0);
}

TEST_CASE("a synchronous store whose wait times out is rolled back and the next call works", "[cache][faults]") {
    Scenario s;
    Input in;
    const Batch b = test_batch();
    const kvrt_batch batch = b.get();
    auto store = [&] { return kvrt_cache_store(s.cache(), nullptr, &batch, -1, &in.kref, &in.vref, nullptr); };

    // Warm every path, then count the fault points of the store: its last one
    // is the wait.
    KVRT_REQUIRE_OK(store());
    KVRT_REQUIRE_OK(kvrt_cache_seq_rm(s.cache(), 3, 20, 23));
    KVRT_REQUIRE_OK(kvrt_cache_seq_rm(s.cache(), 1, 20, 21));
    const State before = s.state();
    const Attempt counted = with_fault(UINT64_MAX, store);
    KVRT_REQUIRE_OK(counted.result);
    const State after = s.state();
    KVRT_REQUIRE_OK(kvrt_cache_seq_rm(s.cache(), 3, 20, 23));
    KVRT_REQUIRE_OK(kvrt_cache_seq_rm(s.cache(), 1, 20, 21));
    REQUIRE(s.state().same_cells(before));

    const Attempt a = with_fault(counted.points, store);
    INFO(a.message);
    REQUIRE(a.result == KVRT_ERROR_TIMEOUT);
    REQUIRE(a.message.find("injected failure at wait") != std::string::npos);
    REQUIRE(s.state().same_cells(before));

    // The next call waits for the work that timed out, then stores.
    KVRT_REQUIRE_OK(store());
    REQUIRE(s.state().same_cells(after));
    require_rows_stored(s, in, test_batch_cells(s, before));
}
