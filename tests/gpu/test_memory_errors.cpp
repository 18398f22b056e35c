// The fixed-capacity memory's failures (SPEC.md section 6): bad input is
// reported and changes nothing, every fault point leaves every sequence's
// state as it was, creation is all or nothing and its estimate exact, and a
// dropped recording or a timed-out call rolls back.
#include "memory_check.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "core/fault.hpp"
#include "reference/metrics.hpp"

using namespace kvrt_test;
namespace ref = kvrt::ref;

TEST_CASE("memory: bad input is reported and changes nothing", "[memory]") {
    GpuContext ctx;
    const Geometry g = shape(2, 2, 64, 32, 32, 2);
    Memory m(ctx, g);
    std::mt19937 rng(17);
    Reference r(g);
    run_both(Op::Update, m, r, random_batch(g, 20, -1, rng, 2), g);
    const auto before = all_states(m, g);

    SECTION("descriptors") {
        auto expect_invalid = [&](const std::function<void(MemoryDesc&)>& edit, const char* what) {
            INFO(what);
            MemoryDesc d(g);
            edit(d);
            kvrt_memory out = reinterpret_cast<kvrt_memory>(&d);
            CHECK(kvrt_memory_create(ctx, &d.desc, &out) == KVRT_ERROR_INVALID_ARGUMENT);
            CHECK(out == nullptr);
            CHECK(std::strlen(kvrt_last_error_message()) > 0);
            kvrt_memory_estimate e = KVRT_MEMORY_ESTIMATE_INIT;
            e.device_bytes = 7;
            CHECK(kvrt_memory_estimate_size(nullptr, &d.desc, &e) == KVRT_ERROR_INVALID_ARGUMENT);
            CHECK(kvrt_memory_estimate_size(ctx, &d.desc, &e) == KVRT_ERROR_INVALID_ARGUMENT);
            CHECK(e.device_bytes == 7);  // nothing written
        };
        // Initial keys from host memory, for the element-type cases.
        const std::vector<float> host_keys(static_cast<size_t>(g.layers) * g.heads * g.m * g.e, 0.25f);
        expect_invalid([](MemoryDesc& d) { d.desc.n_slots = 0; }, "M = 0");
        expect_invalid([](MemoryDesc& d) { d.desc.key_dim = 0; }, "E = 0");
        expect_invalid([](MemoryDesc& d) { d.desc.n_layers = 0; }, "no layers");
        expect_invalid([](MemoryDesc& d) { d.desc.n_heads = 0; }, "no heads");
        expect_invalid([](MemoryDesc& d) { d.desc.chunk_tokens = 513; }, "chunk above 512");
        expect_invalid([](MemoryDesc& d) { d.desc.state_type = KVRT_TYPE_UNDEFINED; }, "undefined state type");
        expect_invalid([](MemoryDesc& d) { d.desc.state_type = KVRT_TYPE_Q8_0; }, "Q8_0 state");
        expect_invalid([](MemoryDesc& d) { d.desc.state_type = static_cast<kvrt_type>(77); }, "unknown state type");
        expect_invalid([](MemoryDesc& d) { d.keys.source = static_cast<kvrt_memory_source>(9); }, "source");
        expect_invalid([](MemoryDesc& d) { d.keys.source = KVRT_MEMORY_SOURCE_HOST; }, "host NULL");
        for (const kvrt_type t : {KVRT_TYPE_UNDEFINED, KVRT_TYPE_Q4_0, KVRT_TYPE_U8_STATIC, static_cast<kvrt_type>(77)})
            expect_invalid(
                [&](MemoryDesc& d) {
                    d.keys.source = KVRT_MEMORY_SOURCE_HOST;
                    d.keys.host = host_keys.data();
                    d.keys.element_type = t;
                },
                "host keys of a type other than F32 and F16");
        expect_invalid([](MemoryDesc& d) { d.desc.type = KVRT_STRUCT_TYPE_BUFFER_DESC; }, "struct type");
        expect_invalid([](MemoryDesc& d) { d.keys.type = KVRT_STRUCT_TYPE_TENSOR_REF; }, "keys struct type");
        expect_invalid([](MemoryDesc& d) { d.values.type = KVRT_STRUCT_TYPE_UNDEFINED; d.desc.values = &d.values; },
                       "values struct type");
        expect_invalid([](MemoryDesc& d) { d.desc.n_slots = 0x80000000u; d.desc.key_dim = 0x80000000u; }, "overflow");
        expect_invalid([](MemoryDesc& d) { d.desc.n_layers = d.desc.n_heads = d.desc.max_seqs = 0xFFFFFFFFu; },
                       "overflow of the totals");
        expect_invalid([](MemoryDesc& d) { d.desc.n_slots = 1u << 24; }, "a head larger than a binding");
        kvrt_memory out = nullptr;
        kvrt_memory_estimate e = KVRT_MEMORY_ESTIMATE_INIT;
        CHECK(kvrt_memory_create(ctx, nullptr, &out) == KVRT_ERROR_INVALID_ARGUMENT);
        CHECK(kvrt_memory_estimate_size(nullptr, nullptr, &e) == KVRT_ERROR_INVALID_ARGUMENT);
        {
            const MemoryDesc d(g);
            CHECK(kvrt_memory_estimate_size(nullptr, &d.desc, nullptr) == KVRT_ERROR_INVALID_ARGUMENT);
            e.type = KVRT_STRUCT_TYPE_CACHE_ESTIMATE;
            CHECK(kvrt_memory_estimate_size(nullptr, &d.desc, &e) == KVRT_ERROR_INVALID_ARGUMENT);
            e = kvrt_memory_estimate KVRT_MEMORY_ESTIMATE_INIT;
            CHECK(kvrt_memory_estimate_size(reinterpret_cast<kvrt_context>(&e), &d.desc, &e) ==
                  KVRT_ERROR_INVALID_HANDLE);
        }
        // Initial data in a buffer too small for it, or of another context.
        Buffer small(ctx, 64);
        MemoryDesc d(g);
        d.values.source = KVRT_MEMORY_SOURCE_BUFFER;
        d.values.buffer = small;
        d.desc.values = &d.values;
        CHECK(kvrt_memory_create(ctx, &d.desc, &out) == KVRT_ERROR_INVALID_ARGUMENT);
        GpuContext other;
        Buffer foreign(other, 1 << 20);
        d.values.buffer = foreign;
        CHECK(kvrt_memory_create(ctx, &d.desc, &out) == KVRT_ERROR_INVALID_ARGUMENT);
        d.set(g);
        CHECK(kvrt_memory_create(reinterpret_cast<kvrt_context>(&d), &d.desc, &out) == KVRT_ERROR_INVALID_HANDLE);
        CHECK(kvrt_memory_create(nullptr, &d.desc, &out) == KVRT_ERROR_INVALID_HANDLE);
        CHECK(kvrt_memory_create(ctx, &d.desc, nullptr) == KVRT_ERROR_INVALID_ARGUMENT);
    }

    SECTION("batches") {
        Batch b = random_batch(g, 10, 0, rng, 2);
        std::vector<float> out(static_cast<size_t>(2) * b.n * g.heads * g.d, 1.5f);
        const std::vector<float> out_before = out;
        auto expect = [&](kvrt_result code, const std::function<void(MemoryBatch&)>& edit, const char* what,
                          kvrt_stream s = nullptr) {
            INFO(what);
            MemoryBatch mb(b, &out);
            edit(mb);
            for (const Op op : {Op::Update, Op::Read, Op::UpdateRead}) CHECK(call(op, m, s, mb.get()) == code);
        };
        const int32_t bad_ids[10] = {0, 1, 2, 0, 0, 0, 0, 0, 0, 0};
        const int32_t negative_ids[10] = {0, -1, 0, 0, 0, 0, 0, 0, 0, 0};
        const kvrt_result A = KVRT_ERROR_INVALID_ARGUMENT;
        expect(A, [&](MemoryBatch& mb) { mb.mb.seq_ids = bad_ids; }, "unknown sequence");
        expect(A, [&](MemoryBatch& mb) { mb.mb.seq_ids = negative_ids; }, "negative id");
        expect(A, [](MemoryBatch& mb) { mb.mb.n_tokens = 0; }, "no tokens");
        expect(A, [](MemoryBatch& mb) { mb.mb.layer = 2; }, "layer past the end");
        expect(A, [](MemoryBatch& mb) { mb.mb.layer = -2; }, "layer -2");
        expect(A, [](MemoryBatch& mb) { mb.wq.host = mb.q.host = nullptr; }, "no data");
        expect(A, [](MemoryBatch& mb) { mb.mb.wq = mb.mb.q = nullptr; }, "no tensor");
        for (const kvrt_type t : {KVRT_TYPE_UNDEFINED, KVRT_TYPE_Q8_0, KVRT_TYPE_U16_STATIC, static_cast<kvrt_type>(9)})
            expect(A, [t](MemoryBatch& mb) { mb.wv.element_type = mb.q.element_type = t; }, "data type");
        expect(A, [](MemoryBatch& mb) { mb.wq.row_stride = mb.q.row_stride = 4; }, "strided data");
        expect(A, [](MemoryBatch& mb) { mb.mb.scale = INFINITY; mb.mb.wq = nullptr; }, "scale");
        expect(A, [](MemoryBatch& mb) { mb.mb.type = KVRT_STRUCT_TYPE_UNDEFINED; }, "struct type");
        expect(A, [](MemoryBatch& mb) { mb.wq.type = mb.q.type = KVRT_STRUCT_TYPE_OUTPUT_REF; }, "tensor struct type");
        // wv (read by updates) and out (written by reads) in a buffer.
        const auto place = [](kvrt_buffer buf, uint64_t offset) {
            return [buf, offset](MemoryBatch& mb) {
                mb.wv = buffer_tensor(buf, offset);
                mb.output_to(buf, offset);
            };
        };
        Buffer small(ctx, 256), big(ctx, 1 << 20);
        expect(A, place(small, 0), "data outside the buffer");
        expect(A, place(big, 2), "misaligned offset");
        expect(A, place(big, ~0ull - 3), "offset overflow");
        expect(A, [&](MemoryBatch& mb) {
            place(big, 0)(mb);
            mb.wv.host = mb.wq.host;
            mb.out.host = out.data();
        }, "buffer and host");
        GpuContext other;
        Buffer foreign(other, 1 << 20);
        expect(A, place(foreign, 0), "buffer of another context");
        kvrt_buffer dead = nullptr;
        kvrt_buffer_desc bd = KVRT_BUFFER_DESC_INIT;
        bd.size = 1 << 20;
        KVRT_REQUIRE_OK(kvrt_buffer_create(ctx, &bd, &dead));
        kvrt_buffer_destroy(dead);
        expect(KVRT_ERROR_INVALID_HANDLE, place(dead, 0), "destroyed buffer");
        // Host outputs need a NULL stream; f16 outputs need whole-word rows.
        Stream s(ctx);
        KVRT_REQUIRE_OK(kvrt_stream_begin(s));
        const MemoryBatch mb(b, &out);
        CHECK(kvrt_memory_read(m, s, mb.get()) == KVRT_ERROR_INVALID_ARGUMENT);
        KVRT_REQUIRE_OK(kvrt_stream_submit(s));
        KVRT_REQUIRE_OK(kvrt_stream_wait(s, 60ull * 1000 * 1000 * 1000));
        CHECK(kvrt_memory_update(m, s, mb.get()) == KVRT_ERROR_INVALID_STATE);  // not recording
        GpuContext other2;
        Stream foreign_stream(other2);
        CHECK(kvrt_memory_update(m, foreign_stream, mb.get()) == KVRT_ERROR_INVALID_ARGUMENT);
        CHECK(out == out_before);
    }

    SECTION("handles and sequence operations") {
        CHECK(kvrt_memory_seq_cp(m, nullptr, 0, 2) == KVRT_ERROR_INVALID_ARGUMENT);
        CHECK(kvrt_memory_seq_cp(m, nullptr, -1, 0) == KVRT_ERROR_INVALID_ARGUMENT);
        CHECK(kvrt_memory_seq_cp(m, nullptr, 0, -1) == KVRT_ERROR_INVALID_ARGUMENT);
        CHECK(kvrt_memory_seq_rm(m, nullptr, 2) == KVRT_ERROR_INVALID_ARGUMENT);
        CHECK(kvrt_memory_seq_rm(m, nullptr, 5) == KVRT_ERROR_INVALID_ARGUMENT);
        std::vector<float> st(static_cast<size_t>(g.heads) * g.m * g.d);
        CHECK(kvrt_memory_get_state(m, 2, 0, st.data(), bytes_of(st)) == KVRT_ERROR_INVALID_ARGUMENT);
        CHECK(kvrt_memory_get_state(m, 0, 2, st.data(), bytes_of(st)) == KVRT_ERROR_INVALID_ARGUMENT);
        CHECK(kvrt_memory_get_state(m, 0, 0, nullptr, 0) == KVRT_ERROR_INVALID_ARGUMENT);
        kvrt_memory_batch mb = KVRT_MEMORY_BATCH_INIT;
        CHECK(kvrt_memory_update(nullptr, nullptr, &mb) == KVRT_ERROR_INVALID_HANDLE);
        CHECK(kvrt_memory_seq_rm(nullptr, nullptr, 0) == KVRT_ERROR_INVALID_HANDLE);
        CHECK(kvrt_memory_seq_cp(nullptr, nullptr, 0, 1) == KVRT_ERROR_INVALID_HANDLE);
        CHECK(kvrt_memory_get_state(nullptr, 0, 0, st.data(), bytes_of(st)) == KVRT_ERROR_INVALID_HANDLE);
        // A destroyed memory, and handles of other kinds.
        kvrt_memory dead = nullptr;
        const MemoryDesc d(g);
        KVRT_REQUIRE_OK(kvrt_memory_create(ctx, &d.desc, &dead));
        kvrt_memory_destroy(dead);
        CHECK(kvrt_memory_update_read(dead, nullptr, &mb) == KVRT_ERROR_INVALID_HANDLE);
        CHECK(kvrt_memory_seq_cp(dead, nullptr, 0, 1) == KVRT_ERROR_INVALID_HANDLE);
        CHECK(kvrt_memory_seq_rm(dead, nullptr, 0) == KVRT_ERROR_INVALID_HANDLE);
        kvrt_memory_destroy(dead);     // a second destroy is a no-op
        kvrt_memory_destroy(nullptr);  // so is NULL
        CHECK(kvrt_memory_read(reinterpret_cast<kvrt_memory>(ctx.get()), nullptr, &mb) == KVRT_ERROR_INVALID_HANDLE);
        CHECK(kvrt_memory_update(m, nullptr, nullptr) == KVRT_ERROR_INVALID_ARGUMENT);
        // Sequence operations with a stream that is not recording, or of
        // another context.
        Stream idle(ctx);
        CHECK(kvrt_memory_seq_rm(m, idle, 0) == KVRT_ERROR_INVALID_STATE);
        CHECK(kvrt_memory_seq_cp(m, idle, 0, 1) == KVRT_ERROR_INVALID_STATE);
        GpuContext other;
        Stream foreign(other);
        KVRT_REQUIRE_OK(kvrt_stream_begin(foreign));
        CHECK(kvrt_memory_seq_rm(m, foreign, 0) == KVRT_ERROR_INVALID_ARGUMENT);
        CHECK(kvrt_memory_seq_cp(m, foreign, 0, 1) == KVRT_ERROR_INVALID_ARGUMENT);
        KVRT_REQUIRE_OK(kvrt_stream_submit(foreign));
        KVRT_REQUIRE_OK(kvrt_stream_wait(foreign, 60ull * 1000 * 1000 * 1000));
    }
    CHECK(same_bits(all_states(m, g), before));
}

TEST_CASE("memory: a failure at any fault point changes nothing", "[memory]") {
    GpuContext ctx;
    const Geometry g = shape(2, 2, 64, 32, 32, 3, 32, true);  // several chunks per sequence
    Memory m(ctx, g);
    Reference r(g);
    std::mt19937 rng(19);
    run_both(Op::UpdateRead, m, r, random_batch(g, 40, -1, rng, 3), g);

    // Arms fault point n = 1, 2, ... until `attempt` succeeds; after every
    // failure every sequence's state must be exactly as before.
    auto sweep = [&](const char* what, const std::function<kvrt_result()>& attempt) {
        INFO(what);
        const auto before = all_states(m, g);
        uint64_t n = 1;
        for (;; ++n) {
            REQUIRE(n < 10000);
            kvrt::fault::arm(n);
            const kvrt_result res = attempt();
            kvrt::fault::arm(0);
            if (res == KVRT_SUCCESS) break;
            INFO("fault point " << n << ": " << kvrt_last_error_message());
            REQUIRE(same_bits(all_states(m, g), before));
        }
        INFO("fault points passed: " << n - 1);
        CHECK(n > 3);
    };

    Batch b = random_batch(g, 75, -1, rng, 2);  // 2 sequences, up to 3 chunks each, both layers
    std::vector<float> out(static_cast<size_t>(g.layers) * b.n * g.heads * g.d);
    MemoryBatch mb(b, &out);
    sweep("update_read, NULL stream", [&] {
        std::fill(out.begin(), out.end(), 7.0f);
        const kvrt_result res = kvrt_memory_update_read(m, nullptr, mb.get());
        // Host outputs are written only on success.
        if (res != KVRT_SUCCESS) REQUIRE(std::all_of(out.begin(), out.end(), [](float v) { return v == 7.0f; }));
        return res;
    });
    std::vector<double> want;
    r.run(Op::UpdateRead, b, &want);
    CHECK(ref::nmse(out, want) <= 1e-6);
    CHECK(state_nmse(m, r, g) <= 1e-6);

    sweep("seq_cp, NULL stream", [&] { return kvrt_memory_seq_cp(m, nullptr, 0, 2); });
    r.seq_cp(0, 2);

    // With a stream: failures while recording or submitting. (A wait that
    // fails after a successful submission is no failure of the calls: their
    // work is queued and completes; the wait is made without faults.)
    Buffer outbuf(ctx, out.size() * 4);
    Stream s(ctx);
    b = random_batch(g, 60, 1, rng, 3);
    mb.set(b, nullptr);
    mb.output_to(outbuf);
    auto in_stream = [&](const std::function<kvrt_result()>& record) {
        kvrt_result res = kvrt_stream_begin(s);
        if (res == KVRT_SUCCESS) res = record();
        // Submitting drops a recording whose calls failed to record a dispatch;
        // one that failed before recording anything is submitted as it is.
        const kvrt_result sub = kvrt_stream_submit(s);
        if (res == KVRT_SUCCESS) res = sub;
        kvrt::fault::arm(0);
        if (sub == KVRT_SUCCESS) REQUIRE(kvrt_stream_wait(s, 60ull * 1000 * 1000 * 1000) == KVRT_SUCCESS);
        return res;
    };
    sweep("update_read in a stream", [&] { return in_stream([&] { return kvrt_memory_update_read(m, s, mb.get()); }); });
    r.run(Op::UpdateRead, b, nullptr);
    sweep("seq_cp in a stream", [&] { return in_stream([&] { return kvrt_memory_seq_cp(m, s, 1, 0); }); });
    r.seq_cp(1, 0);
    CHECK(state_nmse(m, r, g) <= 1e-6);
}

TEST_CASE("memory: creation is all or nothing, and the estimate is exact", "[memory]") {
    GpuContext ctx;
    for (const bool f16 : {false, true}) {
        Geometry g = shape(3, 5, 100, 40, 24, 3, 0, true);
        g.state = f16 ? KVRT_TYPE_F16 : KVRT_TYPE_F32;
        const MemoryDesc md(g);
        const kvrt_memory_desc& d = md.desc;
        kvrt_memory_estimate est = KVRT_MEMORY_ESTIMATE_INIT, est_alone = KVRT_MEMORY_ESTIMATE_INIT;
        KVRT_REQUIRE_OK(kvrt_memory_estimate_size(ctx, &d, &est));
        KVRT_REQUIRE_OK(kvrt_memory_estimate_size(nullptr, &d, &est_alone));
        const uint64_t estimate = est.device_bytes;
        // Without a context the estimate assumes 128 MiB bindings; with one,
        // the context's (as the cache estimator reports it).
        CHECK(est_alone.max_binding_bytes == 128ull << 20);
        kvrt_cache_desc cd = KVRT_CACHE_DESC_INIT;
        cd.n_layers = cd.n_heads = cd.n_kv_heads = cd.capacity = 1;
        cd.head_dim_k = 8;
        kvrt_cache_estimate ce = KVRT_CACHE_ESTIMATE_INIT;
        KVRT_REQUIRE_OK(kvrt_cache_estimate_size(ctx, &cd, &ce));
        CHECK(est.max_binding_bytes == ce.max_binding_bytes);
        // One sequence's state (one slot, as the device holds it: alignment
        // included): at least every layer and head's n_slots rows of
        // value_dim, and two slots per sequence within the total.
        CHECK(est.state_bytes_per_seq >= uint64_t{g.layers} * g.heads * g.m * g.d * (f16 ? 2 : 4));
        CHECK(2 * g.seqs * est.state_bytes_per_seq <= est.device_bytes);
        CHECK(est_alone.state_bytes_per_seq == est.state_bytes_per_seq);
        if (!f16) {
            // Where device memory is not mapped, the first upload keeps a
            // staging buffer for the context's later transfers: take it
            // before counting.
            kvrt_memory warm = nullptr;
            KVRT_REQUIRE_OK(kvrt_memory_create(ctx, &d, &warm));
            kvrt_memory_destroy(warm);
        }
        kvrt_context_stats before = KVRT_CONTEXT_STATS_INIT, after = KVRT_CONTEXT_STATS_INIT;
        KVRT_REQUIRE_OK(kvrt_context_get_stats(ctx, &before));
        uint64_t n = 1;
        kvrt_memory mem = nullptr;
        for (;; ++n) {
            REQUIRE(n < 1000);
            kvrt::fault::arm(n);
            const kvrt_result res = kvrt_memory_create(ctx, &d, &mem);
            kvrt::fault::arm(0);
            if (res == KVRT_SUCCESS) break;
            CHECK(mem == nullptr);
            // Nothing stays allocated (a timed-out upload's buffers go once
            // the device finished with them; a staging buffer it used is
            // not kept).
            CHECK(settled_device_bytes(ctx, before.device_bytes) <= before.device_bytes);
        }
        KVRT_REQUIRE_OK(kvrt_context_get_stats(ctx, &after));
        INFO("estimate " << estimate << ", allocated " << after.device_bytes - before.device_bytes);
        // The driver may round allocations up; lavapipe does not.
        CHECK(after.device_bytes - before.device_bytes >= estimate);
        CHECK(after.device_bytes - before.device_bytes <= estimate + 5 * 4096);
        Reference r(g);
        CHECK(state_nmse(mem, r, g) == 0.0);  // initial values, exactly
        kvrt_memory_destroy(mem);
    }
}

TEST_CASE("memory: a dropped recording or a timed-out call leaves the state as it was", "[memory]") {
    Geometry g;
    g.seqs = 2;
    SECTION("dropped recording") {
        GpuContext ctx;
        Memory m(ctx, g);
        std::mt19937 rng(29);
        Reference r(g);
        run_both(Op::Update, m, r, random_batch(g, 30, 0, rng, 2), g);
        const auto before = all_states(m, g);
        Batch b = random_batch(g, 30, 0, rng, 2);
        kvrt_buffer tmp = nullptr;
        kvrt_buffer_desc bd = KVRT_BUFFER_DESC_INIT;
        bd.size = static_cast<uint64_t>(b.n) * g.heads * g.d * 4;
        KVRT_REQUIRE_OK(kvrt_buffer_create(ctx, &bd, &tmp));
        MemoryBatch mb(b, nullptr);
        mb.output_to(tmp);
        Stream s(ctx);
        KVRT_REQUIRE_OK(kvrt_stream_begin(s));
        KVRT_REQUIRE_OK(kvrt_memory_update_read(m, s, mb.get()));
        KVRT_REQUIRE_OK(kvrt_memory_seq_cp(m, s, 0, 1));
        kvrt_buffer_destroy(tmp);  // the recording can no longer be submitted
        CHECK(kvrt_stream_submit(s) == KVRT_ERROR_INVALID_STATE);
        CHECK(same_bits(all_states(m, g), before));
        // Destroying the memory while a recording names it.
        {
            Memory m2(ctx, g);
            KVRT_REQUIRE_OK(kvrt_stream_begin(s));
            KVRT_REQUIRE_OK(kvrt_memory_update(m2, s, mb.get()));
        }
        CHECK(kvrt_stream_submit(s) == KVRT_ERROR_INVALID_STATE);
    }
    SECTION("timeout") {
        kvrt_context ctx = nullptr;
        kvrt_context_desc cd = KVRT_CONTEXT_DESC_INIT;
        cd.wait_timeout_ns = 1000;  // 1 us: a large call cannot finish in time
        KVRT_REQUIRE_OK(kvrt_context_create(&cd, &ctx));
        const Geometry big = shape(1, 4, 512, 64, 64, 2);
        kvrt_memory m = nullptr;
        const MemoryDesc d(big);
        const uint64_t bytes_before = device_bytes(ctx);
        const kvrt_result created = kvrt_memory_create(ctx, &d.desc, &m);
        if (created == KVRT_ERROR_TIMEOUT) {
            // Device memory that is not mapped (KVRT_DEVICE_PROFILE=nvidia-rtx-5080):
            // creation waits for its staged upload, longer than 1 us, and
            // fails whole.
            CHECK(m == nullptr);
            CHECK(settled_device_bytes(ctx, bytes_before) <= bytes_before);
            WARN("creation needs a wait on this device; the timed-out update was not exercised");
            kvrt_context_destroy(ctx);
            return;
        }
        KVRT_REQUIRE_OK(created);
        // Waits that take longer than 1 us are retried until the work is done.
        auto state = [&] {
            std::vector<float> st(static_cast<size_t>(big.heads) * big.m * big.d);
            kvrt_result got = KVRT_ERROR_TIMEOUT;
            const auto t0 = std::chrono::steady_clock::now();
            while (got == KVRT_ERROR_TIMEOUT && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(120)) {
                got = kvrt_memory_get_state(m, 0, 0, st.data(), bytes_of(st));
                if (got == KVRT_ERROR_TIMEOUT) std::this_thread::sleep_for(std::chrono::milliseconds(1));
            }
            REQUIRE(got == KVRT_SUCCESS);
            return st;
        };
        std::mt19937 rng(31);
        Batch b = random_batch(big, 512, 0, rng, 1);
        MemoryBatch mb(b, nullptr);
        Stream s(ctx);  // the first update through a stream: no internal wait
        run_stream(s, [&] { KVRT_REQUIRE_OK(kvrt_memory_update(m, s, mb.get())); });
        const auto before = state();
        b = random_batch(big, 512, 0, rng, 1);
        std::vector<float> out(static_cast<size_t>(b.n) * big.heads * big.d, 2.0f);
        mb.set(b, &out);
        const kvrt_result res = kvrt_memory_update_read(m, nullptr, mb.get());
        if (res == KVRT_ERROR_TIMEOUT) {
            // The GPU work completes later, into the slot that is not current.
            CHECK(same_bits(state(), before));
            CHECK(std::all_of(out.begin(), out.end(), [](float v) { return v == 2.0f; }));  // written on success only
        } else {
            WARN("the call finished within 1 us; the timeout path was not exercised");
            CHECK(res == KVRT_SUCCESS);
        }
        kvrt_memory_destroy(m);
        kvrt_context_destroy(ctx);
    }
}
