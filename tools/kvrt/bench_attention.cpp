// `kvrt bench attn`: attention over a cell cache, decode or prefill.
#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench.hpp"

namespace cli::bench {

namespace {

int run_attn(Env& env, const Args& args, std::vector<Row>* rows) {
    std::string error;
    uint64_t cells, heads, kv_heads, dim, queries, seqs, interleave, first_pos;
    if (!args.u64("cells", 4096, &cells, &error) || !args.u64("heads", 32, &heads, &error) ||
        !args.u64("kv-heads", 8, &kv_heads, &error) || !args.u64("head-dim", 128, &dim, &error) ||
        !args.u64("queries", 1, &queries, &error) || !args.u64("seqs", 1, &seqs, &error) ||
        !args.u64("interleave", 0, &interleave, &error) || !args.u64("first-pos", 0, &first_pos, &error)) {
        std::fprintf(stderr, "error: %s\n", error.c_str());
        return 2;
    }
    if (cells == 0 || seqs == 0 || seqs > 256 || cells * seqs > (1u << 24) || kv_heads == 0 || heads % kv_heads ||
        heads > 256 || dim == 0 || dim > 1024 || queries == 0 || queries > cells || queries * seqs > 65536 ||
        interleave > cells || (interleave > 0 && cells / interleave * seqs > 65536) ||
        first_pos + cells > 0x7FFFFFFFu) {
        std::fprintf(stderr,
                     "error: sizes out of range (heads a multiple of kv-heads, 0 < queries <= cells, at most 256 "
                     "sequences, 2^24 cells and 65536 queries in all, interleave <= cells and at most 65536 turns, "
                     "first-pos + cells < 2^31)\n");
        return 2;
    }
    std::string tname;
    kvrt_type type = KVRT_TYPE_F16;
    if (!type_option(args, "type", "f16", &type, &tname)) return 2;

    kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
    d.n_layers = 1;
    d.n_heads = static_cast<uint32_t>(heads);
    d.n_kv_heads = static_cast<uint32_t>(kv_heads);
    d.head_dim_k = static_cast<uint32_t>(dim);
    d.capacity = static_cast<uint32_t>(cells * seqs);
    d.max_seqs = static_cast<uint32_t>(std::max<uint64_t>(seqs, 1));
    d.type_k = d.type_v = type;
    const bool deferred = args.has("deferred");
    if (deferred) d.flags |= KVRT_CACHE_DEFERRED_ROPE;
    kvrt_static_scales_desc scales = KVRT_STATIC_SCALES_DESC_INIT;
    d.next = bench_scales(type, type, &scales);
    kvrt_cache cache = nullptr;
    kvrt_result r = kvrt_cache_create(env.ctx, &d, &cache);

    // Fill every cell of every sequence with random K/V, in chunks (a few
    // chunks of random rows, reused: large caches fill in seconds): each
    // sequence's cells in one run, or, with --interleave T, the sequences
    // taking turns of T tokens, as decoding many sequences at once leaves
    // them.
    std::mt19937 rng(1);
    std::normal_distribution<float> normal;
    const uint32_t chunk = interleave > 0 ? static_cast<uint32_t>(std::min<uint64_t>(interleave, 256)) : 256;
    const size_t row = static_cast<size_t>(kv_heads * dim);
    std::vector<std::vector<float>> kv(4, std::vector<float>(chunk * row));
    for (auto& c : kv)
        for (auto& x : c) x = normal(rng);
    uint64_t filled = 0;
    const uint64_t total = cells * seqs;
    const uint64_t per_turn = interleave > 0 ? interleave : cells;
    const uint64_t turns = (cells + per_turn - 1) / per_turn;
    for (uint64_t turn = 0; turn < turns && r == KVRT_SUCCESS; ++turn) {
        for (uint32_t sq = 0; sq < seqs && r == KVRT_SUCCESS; ++sq) {
            const uint64_t end = std::min<uint64_t>(cells, (turn + 1) * per_turn);
            for (uint64_t p = turn * per_turn; p < end && r == KVRT_SUCCESS; p += chunk) {
                const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(chunk, end - p));
                std::vector<int32_t> pos(n), seq(n, static_cast<int32_t>(sq));
                for (uint32_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(first_pos + p + i);
                kvrt_batch b = make_batch(n, pos.data(), seq.data());
                const kvrt_tensor_ref t = host_tensor(kv[(p / chunk + sq) % kv.size()].data());
                r = kvrt_cache_store(cache, nullptr, &b, 0, &t, &t, nullptr);
                filled += n;
                if (total >= (1u << 20) && filled % (1u << 20) < n)
                    std::fprintf(stderr, "bench attn: filled %llu of %llu cells\n",
                                 static_cast<unsigned long long>(filled), static_cast<unsigned long long>(total));
            }
        }
    }
    // Queries: the last positions of each sequence, in device buffers, as an
    // engine has them.
    const uint64_t nq = queries * seqs;
    kvrt_buffer qbuf = nullptr, obuf = nullptr;
    kvrt_buffer_desc bd = KVRT_BUFFER_DESC_INIT;
    bd.size = nq * heads * dim * 4;
    if (r == KVRT_SUCCESS) r = kvrt_buffer_create(env.ctx, &bd, &qbuf);
    if (r == KVRT_SUCCESS) r = kvrt_buffer_create(env.ctx, &bd, &obuf);
    std::vector<float> q(nq * heads * dim);
    for (auto& x : q) x = normal(rng);
    if (r == KVRT_SUCCESS) r = kvrt_buffer_upload(qbuf, 0, q.data(), bd.size);
    std::vector<int32_t> qpos(nq), qseq(nq);
    for (uint64_t i = 0; i < nq; ++i) {
        qpos[i] = static_cast<int32_t>(first_pos + cells - queries + i % queries);
        qseq[i] = static_cast<int32_t>(i / queries);
    }
    TimedStream s(env.ctx);
    if (r == KVRT_SUCCESS) r = s.result();
    Row out;
    out.name = "attn";
    out.params = {{"type", tname}, {"cells", std::to_string(cells)}, {"heads", std::to_string(heads)},
                  {"kv_heads", std::to_string(kv_heads)}, {"head_dim", std::to_string(dim)},
                  {"queries", std::to_string(queries)}};
    if (seqs > 1) out.params.push_back({"seqs", std::to_string(seqs)});
    if (deferred) out.params.push_back({"deferred", "1"});
    if (first_pos > 0) out.params.push_back({"first_pos", std::to_string(first_pos)});
    if (interleave > 0) out.params.push_back({"interleave", std::to_string(interleave)});
    const kvrt_tensor_ref qr = buffer_tensor(qbuf, 0);
    const kvrt_output_ref orf = buffer_output(obuf, 0);
    const kvrt_batch qbatch = make_batch(static_cast<uint32_t>(nq), qpos.data(), qseq.data());
    if (r == KVRT_SUCCESS) {
        r = measure(env, s, [&] { return kvrt_cache_attention(cache, s, 0, &qbatch, &qr, &orf, nullptr); },
                    "attention", &out.m);
    }
    if (r == KVRT_SUCCESS && seqs > 1 && interleave > 0) {
        // What the first call after a change of the cache adds: the lists of
        // cells of the sequences stored in turns, built again (once per
        // token, for every layer). Sequence 0 moves by one position and back.
        Measurement lists;
        r = measure(env, s,
                    [&] {
                        kvrt_result e = kvrt_cache_seq_add(cache, 0, -1, -1, 1);
                        if (e == KVRT_SUCCESS) e = kvrt_cache_seq_add(cache, 0, -1, -1, -1);
                        if (e == KVRT_SUCCESS) e = kvrt_cache_attention(cache, s, 0, &qbatch, &qr, &orf, nullptr);
                        return e;
                    },
                    "cell lists", &lists);
        if (r == KVRT_SUCCESS && lists.median() > 0) out.extra.push_back({"lists_ms", lists.median()});
    }
    kvrt_cache_info info = KVRT_CACHE_INFO_INIT;
    if (r == KVRT_SUCCESS) r = kvrt_cache_get_info(cache, &info);
    kvrt_buffer_destroy(qbuf);
    kvrt_buffer_destroy(obuf);
    kvrt_cache_destroy(cache);
    if (r != KVRT_SUCCESS) return report("bench attn", r);
    // Effective bandwidth: the K and V bytes of the attended cells, read once.
    out.bytes = static_cast<double>(info.bytes_per_token) * static_cast<double>(cells * seqs);
    rows->push_back(out);
    return 0;
}

const bool registered = register_case(
    {"attn",
     "[--cells N] [--heads N] [--kv-heads N] [--head-dim N] [--type f16|q8_0|q4_0|f32|u8_static|u16_static] "
     "[--queries N] [--seqs S] [--interleave T] [--deferred] [--first-pos P]: "
     "GPU time of one attention call over S sequences of N filled cells each, with the last --queries positions "
     "of each sequence as queries (GB/s = K/V bytes / time); each sequence's cells lie together, or with "
     "--interleave the sequences were stored in turns of T tokens (lists_ms: the GPU time of rebuilding their lists "
     "of cells after a change of the cache, which the first call of a step adds); --deferred: a cache with "
     "deferred RoPE (K rotated inside the kernel); --first-pos: positions start at P instead of 0",
     run_attn,
     {{"--type", "f16", "--cells", "4096"}, {"--type", "q8_0", "--cells", "4096"}, {"--type", "q4_0", "--cells", "4096"},
      {"--type", "f16", "--cells", "512"}, {"--type", "f16", "--cells", "4096", "--queries", "512"}}});

}  // namespace

}  // namespace cli::bench
