// Attention kernels against the double-precision reference (SPEC 4 and 8):
// NMSE <= 1e-6 on the same dequantized K/V for every type, head dim, GQA
// ratio, mask and option, in every kernel variant the device runs (portable,
// and subgroup shuffle where the device has it: kernel_variants()); guard
// bands around every output.
#include "attention_check.hpp"

#include <cstdio>
#include <vector>

#include "api/handles.hpp"
#include "vk/context.hpp"
#include "vk/pipeline.hpp"

using namespace kvrt_test;

namespace {

// Whether `ctx` built an attention pipeline for K of type `k` that reads
// lists of cells (attention.comp OPTS bit 3, specialization constant 9).
bool lists_ran(kvrt_context ctx, kvrt_type k) {
    const std::string prefix = std::string("attn_") + kvrt_type_name(k) + "_";
    for (const kvrt::vk::PipelineKey& key : kvrt::api::context_of(ctx)->pipelines().keys())
        if (key.shader.rfind(prefix, 0) == 0 && key.spec.size() > 9 && (key.spec[9] & 8u) != 0u) return true;
    return false;
}

AttnOutcome expect_accurate(kvrt_context ctx, const AttnCase& c, const std::string& what) {
    const AttnOutcome o = run_attention_case(ctx, c);
    INFO(what << ": nmse " << o.nmse << " (vs f32 inputs " << o.nmse_vs_f32 << "), max abs " << o.max_abs);
    CHECK(o.values > 0);
    CHECK(o.nmse <= 1e-6);
    CHECK(o.guard_ok);
    return o;
}

const kvrt_type kTypes[] = {KVRT_TYPE_F32, KVRT_TYPE_F16, KVRT_TYPE_Q8_0, KVRT_TYPE_Q4_0};

}  // namespace

TEST_CASE("attention is accurate for every K/V type, head dim and kernel variant", "[attention]") {
    KVRT_EACH_KERNEL_VARIANT(variant);
    GpuContext ctx(variant.flags);
    size_t case_index = 0;
    for (kvrt_type t : kTypes) {
        // Lane groups of the shuffle kernel from 4 lanes (32 dims) to 32
        // (256), as far as the device's subgroups allow; 80, 96 and 192
        // leave lanes of a group idle.
        for (uint32_t dim : {32u, 64u, 80u, 96u, 128u, 192u, 256u}) {
            if ((t == KVRT_TYPE_Q8_0 || t == KVRT_TYPE_Q4_0) && dim % 32) continue;  // not storable
            if (!sweep_case_runs(case_index++, variant)) continue;
            AttnCase c;
            c.k_type = c.v_type = t;
            c.dk = c.dv = dim;
            c.tokens_per_seq = 90;
            c.seed = dim;
            const AttnOutcome o =
                expect_accurate(ctx, c, std::string(kvrt_type_name(t)) + " dim " + std::to_string(dim));
            if (dim == 128 || dim == 96)
                std::printf("attention %s, dim %u, %s kernels: nmse %.3g on the same dequantized K/V, %.3g against f32 inputs\n",
                            kvrt_type_name(t), dim, variant.name.c_str(), o.nmse, o.nmse_vs_f32);
        }
    }
}

TEST_CASE("attention handles mixed K/V types, head dims and query/output types", "[attention]") {
    KVRT_EACH_KERNEL_VARIANT(variant);
    GpuContext ctx(variant.flags);
    AttnCase c;
    c.k_type = KVRT_TYPE_Q8_0;
    c.v_type = KVRT_TYPE_Q4_0;
    c.dk = 128;
    c.dv = 64;
    expect_accurate(ctx, c, "q8_0 K 128, q4_0 V 64");
    c.k_type = KVRT_TYPE_F16;
    c.v_type = KVRT_TYPE_F32;
    c.q_type = KVRT_TYPE_F16;
    c.out_type = KVRT_TYPE_F16;
    expect_accurate(ctx, c, "f16 queries and output");
}

TEST_CASE("attention covers GQA ratios 1 to 8 and MQA, with several queries", "[attention]") {
    KVRT_EACH_KERNEL_VARIANT(variant);
    GpuContext ctx(variant.flags);
    for (uint32_t kv : {8u, 4u, 2u, 1u}) {
        for (uint32_t nq : {1u, 3u, 8u}) {
            AttnCase c;
            c.n_heads = 8;
            c.n_kv_heads = kv;
            c.n_queries = nq;
            c.k_type = KVRT_TYPE_Q8_0;
            c.tokens_per_seq = 70;
            expect_accurate(ctx, c, "kv heads " + std::to_string(kv) + ", queries " + std::to_string(nq));
        }
    }
    AttnCase mqa;  // 32 query heads on one KV head
    mqa.n_heads = 32;
    mqa.n_kv_heads = 1;
    mqa.n_queries = 2;
    expect_accurate(ctx, mqa, "MQA 32:1");
}

TEST_CASE("attention masks sequences, shared cells, holes and sliding windows", "[attention]") {
    KVRT_EACH_KERNEL_VARIANT(variant);
    GpuContext ctx(variant.flags);
    AttnCase c;
    c.n_seqs = 4;
    c.shared_prefix = 20;
    c.tokens_per_seq = 60;
    c.holes = 7;
    c.n_queries = 2;
    c.capacity = 256;
    expect_accurate(ctx, c, "4 sequences sharing a prefix, with holes");
    c.window = 16;
    expect_accurate(ctx, c, "sliding window 16");
    c.params.n_keep = 4;
    expect_accurate(ctx, c, "window 16 with 4 StreamingLLM sinks");
}

TEST_CASE("attention options: ALiBi, soft-capping, learned sinks, scale, non-causal", "[attention]") {
    KVRT_EACH_KERNEL_VARIANT(variant);
    GpuContext ctx(variant.flags);
    AttnCase c;
    c.n_heads = 8;
    c.n_kv_heads = 2;
    c.n_queries = 4;
    c.params.max_bias = 8.0f;
    expect_accurate(ctx, c, "ALiBi");
    c.params = kvrt_attention_params KVRT_ATTENTION_PARAMS_INIT;
    c.params.softcap = 5.0f;
    c.params.scale = 0.3f;  // large logits, so the cap bites
    expect_accurate(ctx, c, "soft-cap 5 with scale 0.3");
    c.params = kvrt_attention_params KVRT_ATTENTION_PARAMS_INIT;
    const float sinks[8] = {0.5f, -1.0f, 2.0f, 3.0f, -4.0f, 0.0f, 1.5f, 10.0f};
    c.params.sinks = sinks;
    expect_accurate(ctx, c, "learned sinks");
    c.params = kvrt_attention_params KVRT_ATTENTION_PARAMS_INIT;
    c.params.flags = KVRT_ATTENTION_NON_CAUSAL;
    c.n_queries = 1;
    expect_accurate(ctx, c, "non-causal");
}

TEST_CASE("over many sequences, each tile reads its queries' runs of cells and misses none", "[attention]") {
    // Twelve sequences, each in its own run of cells, so that a tile's rows
    // (two or eight queries of different sequences) read only the union of
    // their runs. The runs must follow every way a sequence takes cells:
    // a sequence that empties and starts again elsewhere, one that shares
    // another's cells far from its own (seq_cp), cells moved by compaction,
    // and tokens placed after it.
    for (const KernelVariant& variant : pick_and_forced_variants()) {
        INFO("kernels: " << variant.name);
        GpuContext ctx(variant.flags);
        AttnCase c;
        c.n_seqs = 12;
        c.tokens_per_seq = 40;
        c.capacity = 1024;
        c.holes = 9;
        c.edit = [](kvrt_cache cache, const AttnCase::Store& store) {
            std::vector<int32_t> pos(40);
            for (int32_t p = 0; p < 40; ++p) pos[size_t(p)] = p;
            KVRT_REQUIRE_OK(kvrt_cache_seq_rm(cache, 3, -1, -1));  // empties: its run starts again
            KVRT_REQUIRE_OK(kvrt_cache_compact(cache, nullptr, 0.0f, 1u << 20, nullptr));
            store(pos, 3);  // after every other sequence
            KVRT_REQUIRE_OK(kvrt_cache_seq_rm(cache, 2, 0, 12));
            KVRT_REQUIRE_OK(kvrt_cache_seq_cp(cache, 9, 2, 0, 12));  // 2 joins cells of 9, far above its own
            KVRT_REQUIRE_OK(kvrt_cache_seq_rm(cache, 0, 30, -1));
            store(std::vector<int32_t>(pos.begin() + 30, pos.end()), 0);  // 0's tail after 3's cells
        };
        for (const uint32_t queries : {1u, 5u}) {
            c.n_queries = queries;
            c.n_heads = 8;
            c.n_kv_heads = 2;  // 4 rows per query: tiles of 2 queries
            expect_accurate(ctx, c, std::to_string(queries) + " queries per sequence, GQA 4:1");
            c.n_heads = c.n_kv_heads = 4;  // 1 row per query: tiles of 8
            c.k_type = KVRT_TYPE_Q8_0;
            expect_accurate(ctx, c, std::to_string(queries) + " queries per sequence, MHA, q8_0 K");
            c.k_type = KVRT_TYPE_F16;
        }
    }
}

TEST_CASE("sequences stored in turns read their own cells from lists that follow every change", "[attention]") {
    // Continuous batching stores one token per sequence per step, so every
    // sequence's run of cells spans the others' cells too; the kernel then
    // walks each sequence's list of cells, built on the device once per
    // change of the table. The lists must hold every cell of their sequence
    // (shared prefix cells included) and be rebuilt after anything changes:
    // here attention runs between the edits, and the last edit's lists are
    // first recorded into a stream that is dropped unsubmitted.
    for (const KernelVariant& variant : pick_and_forced_variants()) {
        INFO("kernels: " << variant.name);
        GpuContext ctx(variant.flags);
        AttnCase c;
        c.n_seqs = 8;
        c.tokens_per_seq = 48;
        c.capacity = 512;
        c.holes = 7;
        c.interleave = 1;
        c.n_heads = 8;
        c.n_kv_heads = 2;
        for (const uint32_t queries : {1u, 3u}) {
            c.n_queries = queries;
            expect_accurate(ctx, c, std::to_string(queries) + " queries per sequence, turns of 1, GQA 4:1");
        }
        {
            // Prefill chunks of sequences stored in turns: 24 queries of one
            // sequence fill whole workgroups of the tiled kernel (64 rows),
            // which then walk that sequence's list, and some workgroups hold
            // two sequences' queries, which read the union of their runs.
            AttnCase chunks = c;
            chunks.n_seqs = 3;
            chunks.tokens_per_seq = 120;
            chunks.n_queries = 24;
            expect_accurate(ctx, chunks, "3 sequences of 120 cells, turns of 1, 24 queries each");
        }
        {
            // Lists over more than one block of the prefix sums (64 chunks
            // of 64 cells), the last block partial.
            AttnCase big = c;
            big.n_seqs = 3;
            big.tokens_per_seq = 3000;
            big.capacity = 9216;
            big.n_queries = 1;
            expect_accurate(ctx, big, "3 sequences of 3,000 cells, turns of 1");
        }
        c.n_queries = 2;
        c.interleave = 5;
        c.shared_prefix = 8;
        c.n_heads = c.n_kv_heads = 4;
        c.k_type = KVRT_TYPE_Q8_0;
        // One query per sequence at its last position, layer 0, its output
        // unused: it builds lists for the table as it is.
        const auto attend = [&ctx, c](kvrt_cache cache, kvrt_stream stream) {
            std::vector<int32_t> pos(c.n_seqs, static_cast<int32_t>(c.tokens_per_seq - 1)), seqs(c.n_seqs);
            for (uint32_t s = 0; s < c.n_seqs; ++s) seqs[s] = static_cast<int32_t>(s);
            std::vector<float> q(size_t{c.n_seqs} * c.n_heads * c.dk, 0.5f);
            const kvrt_batch b = make_batch(c.n_seqs, pos.data(), seqs.data());
            const kvrt_tensor_ref qr = host_tensor(q.data());
            kvrt_buffer out = nullptr;
            kvrt_buffer_desc bd = KVRT_BUFFER_DESC_INIT;
            bd.size = size_t{c.n_seqs} * c.n_heads * c.dv * 4;
            KVRT_REQUIRE_OK(kvrt_buffer_create(ctx, &bd, &out));
            const kvrt_output_ref o = buffer_output(out, 0);
            KVRT_REQUIRE_OK(kvrt_cache_attention(cache, stream, 0, &b, &qr, &o, nullptr));
            if (!stream) kvrt_buffer_destroy(out);
            return out;
        };
        c.edit = [&ctx, attend](kvrt_cache cache, const AttnCase::Store& store) {
            std::vector<int32_t> pos(48);
            for (int32_t p = 0; p < 48; ++p) pos[size_t(p)] = p;
            attend(cache, nullptr);
            KVRT_REQUIRE_OK(kvrt_cache_seq_rm(cache, 3, -1, -1));
            KVRT_REQUIRE_OK(kvrt_cache_compact(cache, nullptr, 0.0f, 1u << 20, nullptr));
            store(pos, 3);  // whole, after the others: its run needs no list
            attend(cache, nullptr);
            KVRT_REQUIRE_OK(kvrt_cache_seq_rm(cache, 2, 8, 30));
            KVRT_REQUIRE_OK(kvrt_cache_seq_cp(cache, 5, 2, 8, 30));  // 2 joins cells of 5
            kvrt_stream s = nullptr;
            kvrt_stream_desc sd = KVRT_STREAM_DESC_INIT;
            KVRT_REQUIRE_OK(kvrt_stream_create(ctx, &sd, &s));
            KVRT_REQUIRE_OK(kvrt_stream_begin(s));
            const kvrt_buffer out = attend(cache, s);
            kvrt_stream_destroy(s);  // dropped: its lists were never built
            kvrt_buffer_destroy(out);
        };
        expect_accurate(ctx, c, "turns of 5 after edits, a shared prefix, MHA, q8_0 K");
        // Every kernel reads the lists.
        CHECK(lists_ran(ctx, KVRT_TYPE_F16));
        CHECK(lists_ran(ctx, KVRT_TYPE_Q8_0));
    }
}

TEST_CASE("prefill chunks are causal inside the chunk", "[attention]") {
    // 512 queries: every token of the last 512 positions attends to the cells
    // at or before its own position, including earlier tokens of the chunk.
    KVRT_EACH_KERNEL_VARIANT(variant);
    GpuContext ctx(variant.flags);
    AttnCase c;
    c.capacity = 768;
    c.tokens_per_seq = 700;
    c.n_queries = 512;
    c.n_heads = 4;
    c.n_kv_heads = 1;
    c.dk = c.dv = 64;
    c.k_type = KVRT_TYPE_Q4_0;
    expect_accurate(ctx, c, "512-query chunk");
}

TEST_CASE("attention reads cells spread over many binding pieces", "[attention]") {
    KVRT_EACH_KERNEL_VARIANT(variant);
    GpuContext ctx(variant.flags, 64 << 10);  // 64 KiB bindings: K and V rows split into pieces at different cells
    AttnCase c;
    c.capacity = 320;
    c.tokens_per_seq = 150;
    c.holes = 5;
    c.n_seqs = 2;
    c.shared_prefix = 10;
    for (kvrt_type t : {KVRT_TYPE_F16, KVRT_TYPE_Q8_0}) {
        c.k_type = t;
        c.v_type = KVRT_TYPE_F32;
        expect_accurate(ctx, c, std::string("pieces, K ") + kvrt_type_name(t));
    }
    // Sequences stored in turns: each tile walks its sequence's list of
    // cells, cut at every piece boundary.
    c.interleave = 3;
    c.n_queries = 2;
    expect_accurate(ctx, c, "pieces, sequences in turns of 3");
}

TEST_CASE("a query that sees no cell gets zeros", "[attention]") {
    KVRT_EACH_KERNEL_VARIANT(variant);
    GpuContext ctx(variant.flags);
    AttnCase c;
    c.window = 4;            // the queries are far past every cell: nothing in the window
    c.query_pos_shift = 50;
    c.n_queries = 2;
    const AttnOutcome o = run_attention_case(ctx, c);
    CHECK(o.guard_ok);
    CHECK(o.nmse == 0.0);  // the reference is all zeros too: nmse is the output's energy
    const float sinks[4] = {1.0f, 2.0f, 3.0f, 4.0f};
    c.params.sinks = sinks;  // a sink alone does not make a row non-zero
    CHECK(run_attention_case(ctx, c).nmse == 0.0);
}
