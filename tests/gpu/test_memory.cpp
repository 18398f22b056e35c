// The fixed-capacity memory (kvrt_memory_*) against the double-precision
// reference of tests/reference/memory.hpp (SPEC.md sections 6 and 8): long
// runs, chunked against sequential, f16 state, several sequences, sequence
// operations, plain reads, buffers with guard bands, streams and small
// bindings. Failures are in test_memory_errors.cpp.
#include "memory_check.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/random.hpp"
#include "reference/half.hpp"
#include "reference/metrics.hpp"

using namespace kvrt_test;
namespace ref = kvrt::ref;

namespace {

constexpr uint32_t kSentinel = 0xDEADBEEFu;

// `calls` update+read calls of 2,000 host tokens each; the NMSE of all reads
// and of the final state.
void long_run(kvrt_context ctx, const Geometry& g, int calls, double* reads, double* state) {
    Memory m(ctx, g);
    Reference r(g);
    Rng rng(1);
    std::vector<float> got;
    std::vector<double> want;
    for (int i = 0; i < calls; ++i) {
        const Batch b = random_batch(g, 2000, 0, rng);
        std::vector<float> out(static_cast<size_t>(b.n) * g.heads * g.d);
        const MemoryBatch mb(b, &out);
        KVRT_REQUIRE_OK(kvrt_memory_update_read(m, nullptr, mb.get()));
        std::vector<double> w;
        r.run(Op::UpdateRead, b, &w);
        got.insert(got.end(), out.begin(), out.end());
        want.insert(want.end(), w.begin(), w.end());
    }
    *reads = ref::nmse(got, want);
    *state = state_nmse(m, r, g);
}

}  // namespace

TEST_CASE("memory: 10,000 tokens match the double-precision reference", "[memory]") {
    for (const kvrt_flags flags : {0u, static_cast<kvrt_flags>(KVRT_CONTEXT_PORTABLE_KERNELS)}) {
        GpuContext ctx(flags);
        Geometry g;  // 1 layer, 2 heads, M 64, E = D = 32; calls of 2,000 tokens = 4 chunks of 512
        double reads = 0, state = 0;
        long_run(ctx, g, 5, &reads, &state);
        WARN("memory, " << (flags ? "portable" : "default") << " kernels, f32 state, 10,000 tokens: NMSE reads "
                        << reads << ", state " << state);
        CHECK(reads <= 1e-6);
        CHECK(state <= 1e-6);
    }
}

TEST_CASE("memory: chunked processing equals token-by-token processing", "[memory]") {
    GpuContext ctx;
    std::vector<std::vector<float>> outputs;
    for (const uint32_t chunk : {1u, 7u, 64u, 512u}) {
        INFO("chunk_tokens " << chunk);
        const Geometry g = shape(2, 2, 37, 19, 23, 1, chunk);
        Memory m(ctx, g);
        Reference r(g);
        Rng rng(7);
        std::vector<float> all;
        for (const uint32_t n : {150u, 1u, 449u}) {  // 600 tokens: partial chunks, two 512-chunks
            const Batch b = random_batch(g, chunk == 1 ? n / 3 + 1 : n, -1, rng);
            std::vector<float> out(static_cast<size_t>(g.layers) * b.n * g.heads * g.d);
            const MemoryBatch mb(b, &out);
            KVRT_REQUIRE_OK(kvrt_memory_update_read(m, nullptr, mb.get()));
            std::vector<double> want;
            r.run(Op::UpdateRead, b, &want);
            CHECK(ref::nmse(out, want) <= 1e-6);
            all.insert(all.end(), out.begin(), out.end());
        }
        CHECK(state_nmse(m, r, g) <= 1e-6);
        if (chunk != 1) outputs.push_back(all);
    }
    // The chunk size changes nothing but rounding.
    for (size_t i = 1; i < outputs.size(); ++i) CHECK(ref::nmse(outputs[i], outputs[0]) <= 1e-10);
}

TEST_CASE("memory: f16 state", "[memory]") {
    for (const kvrt_flags flags : {0u, static_cast<kvrt_flags>(KVRT_CONTEXT_PORTABLE_KERNELS)}) {
        GpuContext ctx(flags);
        Geometry g;
        g.state = KVRT_TYPE_F16;
        g.init_values = true;  // the reference starts from the same f16-rounded values
        const int calls = flags ? 1 : 5;
        double reads = 0, state = 0;
        long_run(ctx, g, calls, &reads, &state);
        WARN("memory, " << (flags ? "portable" : "default") << " kernels, f16 state, " << calls * 2000
                        << " tokens in chunks of 512: NMSE reads " << reads << ", state " << state);
        CHECK(reads <= 1e-4);
        CHECK(state <= 1e-4);
    }
}

TEST_CASE("memory: several sequences in one batch, all layers", "[memory]") {
    GpuContext ctx;
    const Geometry g = shape(3, 3, 40, 24, 16, 4, 32, true);
    Memory m(ctx, g);
    Reference r(g);
    Rng rng(5);
    for (const uint32_t n : {1u, 97u, 200u}) {
        const Batch b = random_batch(g, n, -1, rng, 3);  // sequences 0..2, interleaved; 3 stays initial
        CHECK(run_both(Op::UpdateRead, m, r, b, g) <= 1e-6);
        const Batch u = random_batch(g, n, 1, rng, 3);  // one layer, update only
        run_both(Op::Update, m, r, u, g);
    }
    CHECK(state_nmse(m, r, g) <= 1e-6);
}

TEST_CASE("memory: plain reads see the state before the call", "[memory]") {
    GpuContext ctx;
    const Geometry g = shape(1, 2, 64, 32, 32, 2, 0, true);
    Memory m(ctx, g);
    Reference r(g);
    Rng rng(9);
    Batch b = random_batch(g, 70, 0, rng, 2);
    b.scale = 0.3f;
    CHECK(run_both(Op::Read, m, r, b, g) <= 1e-6);  // initial state
    run_both(Op::Update, m, r, random_batch(g, 90, 0, rng, 2), g);
    const auto before = all_states(m, g);
    CHECK(run_both(Op::Read, m, r, b, g) <= 1e-6);
    CHECK(same_bits(all_states(m, g), before));  // a read changes nothing
}

TEST_CASE("memory: seq_cp and seq_rm", "[memory]") {
    GpuContext ctx;
    const Geometry g = shape(2, 2, 64, 32, 32, 3, 0, true);
    Memory m(ctx, g);
    Reference r(g);
    Rng rng(11);
    auto batch = [&](int32_t seq) {
        Batch b = random_batch(g, 50, -1, rng);
        std::fill(b.ids.begin(), b.ids.end(), seq);
        return b;
    };
    run_both(Op::Update, m, r, batch(0), g);
    KVRT_REQUIRE_OK(kvrt_memory_seq_cp(m, nullptr, 0, 1));
    r.seq_cp(0, 1);
    CHECK(state_nmse(m, r, g) <= 1e-6);
    // Diverging after the copy: each sequence only sees its own updates.
    CHECK(run_both(Op::UpdateRead, m, r, batch(0), g) <= 1e-6);
    CHECK(run_both(Op::UpdateRead, m, r, batch(1), g) <= 1e-6);
    CHECK(state_nmse(m, r, g) <= 1e-6);
    // Copy from a sequence in the initial state, into a used one.
    KVRT_REQUIRE_OK(kvrt_memory_seq_cp(m, nullptr, 2, 0));
    r.seq_cp(2, 0);
    CHECK(state_nmse(m, r, g) <= 1e-6);
    // Removing one sequence, then another that diverged, then every sequence.
    run_both(Op::Update, m, r, batch(0), g);
    KVRT_REQUIRE_OK(kvrt_memory_seq_rm(m, nullptr, 0));
    r.seq_rm(0);
    KVRT_REQUIRE_OK(kvrt_memory_seq_rm(m, nullptr, 1));
    r.seq_rm(1);
    CHECK(state_nmse(m, r, g) <= 1e-6);
    CHECK(run_both(Op::UpdateRead, m, r, batch(1), g) <= 1e-6);
    KVRT_REQUIRE_OK(kvrt_memory_seq_cp(m, nullptr, 1, 2));
    r.seq_cp(1, 2);
    KVRT_REQUIRE_OK(kvrt_memory_seq_rm(m, nullptr, -1));
    for (uint32_t s = 0; s < g.seqs; ++s) r.seq_rm(s);
    CHECK(state_nmse(m, r, g) <= 1e-6);
    KVRT_REQUIRE_OK(kvrt_memory_seq_cp(m, nullptr, 1, 1));  // onto itself: nothing
}

TEST_CASE("memory: buffers, f16 data, streams and guard bands", "[memory]") {
    GpuContext ctx;
    const Geometry g = shape(2, 3, 33, 13, 10, 2);  // heads * d even: f16 output rows are whole words
    Memory m(ctx, g);
    Reference r(g);
    Rng rng(13);
    const uint32_t n = 45;
    for (const bool f16 : {false, true}) {
        INFO((f16 ? "f16 data" : "f32 data"));
        Batch b = random_batch(g, n, 0, rng, 2);
        // One buffer: guard, wq, guard, wv, guard, q, guard, out, guard. F16
        // inputs: the reference sees the rounded values.
        const uint64_t guard = 16;
        std::vector<uint32_t> image(guard, kSentinel);
        auto append = [&](std::vector<float>& v) {
            const uint64_t at = image.size();
            image.resize(at + (v.size() * (f16 ? 2 : 4) + 3) / 4, 0);
            auto* bytes = reinterpret_cast<uint8_t*>(image.data() + at);
            for (size_t i = 0; i < v.size(); ++i) {
                const uint16_t h = ref::f32_to_f16(v[i]);
                if (f16) v[i] = ref::f16_to_f32(h);
                std::memcpy(bytes + i * (f16 ? 2 : 4), f16 ? static_cast<const void*>(&h) : &v[i], f16 ? 2 : 4);
            }
            image.resize(image.size() + guard, kSentinel);
            return at * 4;
        };
        const uint64_t at[3] = {append(b.wq), append(b.wv), append(b.q)};
        const uint64_t out_words = static_cast<uint64_t>(n) * g.heads * g.d / (f16 ? 2 : 1);
        const uint64_t out_at = image.size(), words = out_at + out_words + guard;
        image.resize(words, kSentinel);
        Buffer buf(ctx, words * 4);
        buf.upload_words(0, image);

        const kvrt_type type = f16 ? KVRT_TYPE_F16 : KVRT_TYPE_F32;
        const kvrt_tensor_ref wq = buffer_tensor(buf, at[0], type), wv = buffer_tensor(buf, at[1], type),
                              q = buffer_tensor(buf, at[2], type);
        const kvrt_output_ref out = buffer_output(buf, out_at * 4, type);
        kvrt_memory_batch mb = KVRT_MEMORY_BATCH_INIT;
        mb.n_tokens = n;
        mb.seq_ids = b.ids.data();
        mb.layer = 0;
        mb.wq = &wq;
        mb.wv = &wv;
        mb.q = &q;
        mb.out = &out;
        // Recorded into a stream, twice (layer 0, then layer 1 with the same data).
        Stream s(ctx);
        run_stream(s, [&] {
            KVRT_REQUIRE_OK(kvrt_memory_update_read(m, s, &mb));
            mb.layer = 1;
            KVRT_REQUIRE_OK(kvrt_memory_update_read(m, s, &mb));
        });
        std::vector<double> want0, want1;
        b.layer = 0;
        r.run(Op::UpdateRead, b, &want0);
        b.layer = 1;
        r.run(Op::UpdateRead, b, &want1);
        const auto back = buf.download_words(0, words);
        std::vector<float> got(want1.size());
        const auto* out_bytes = reinterpret_cast<const uint8_t*>(back.data() + out_at);
        for (size_t i = 0; i < got.size(); ++i) {
            uint16_t h = 0;
            std::memcpy(f16 ? static_cast<void*>(&h) : &got[i], out_bytes + i * (f16 ? 2 : 4), f16 ? 2 : 4);
            if (f16) got[i] = ref::f16_to_f32(h);
        }
        CHECK(ref::nmse(got, want1) <= (f16 ? 1e-6 : 1e-10));
        // Nothing outside the output changed.
        for (uint64_t i = 0; i < words; ++i) {
            if (i >= out_at && i < out_at + out_words) continue;
            if (back[i] != image[i]) FAIL("word " << i << " changed");
        }
    }
    CHECK(state_nmse(m, r, g) <= 1e-6);
}

TEST_CASE("memory: small bindings and unmapped memory", "[memory]") {
    // 64 KiB bindings: one head per group, blocks over many pieces; all
    // transfers through staging buffers.
    GpuContext ctx(KVRT_CONTEXT_FORCE_STAGING, 64 << 10);
    const Geometry g = shape(2, 3, 37, 19, 23, 4, 32, true);
    Memory m(ctx, g);
    Reference r(g);
    Rng rng(23);
    for (int i = 0; i < 2; ++i) CHECK(run_both(Op::UpdateRead, m, r, random_batch(g, 70, -1, rng, 4), g) <= 1e-6);
    KVRT_REQUIRE_OK(kvrt_memory_seq_cp(m, nullptr, 3, 1));
    r.seq_cp(3, 1);
    CHECK(state_nmse(m, r, g) <= 1e-6);
}
