// Head strides: K/V given head-major (GGML's permuted [head_dim, n_tokens,
// n_heads]) or with padded heads store exactly what packed rows store, and
// attention with head-major queries and outputs gives the packed results bit
// for bit (decode with split-K merging and prefill, f32 and f16, buffers and
// host memory), never writing a byte between the output rows; bad strides
// are refused and change nothing.
#include "gpu_test.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "cache/strides.hpp"
#include "tensor_util.hpp"

using namespace kvrt_test;

namespace {

size_t elem_bytes(kvrt_type t) { return t == KVRT_TYPE_F16 ? 2 : 4; }

kvrt_batch batch_of(const std::vector<int32_t>& pos, const std::vector<int32_t>& seqs) {
    kvrt_batch b = KVRT_BATCH_INIT;
    b.n_tokens = static_cast<uint32_t>(pos.size());
    b.positions = pos.data();
    b.seq_ids = seqs.data();
    return b;
}

std::vector<int32_t> iota_positions(uint32_t n, int32_t first) {
    std::vector<int32_t> p(n);
    for (uint32_t i = 0; i < n; ++i) p[i] = first + static_cast<int32_t>(i);
    return p;
}

// A tensor in host memory or in a buffer: the region's bytes and the strides.
struct Placed {
    std::vector<uint8_t> region;
    Strided s;
    uint64_t layer_stride = 0;
    std::unique_ptr<Buffer> buffer;
};

// Places `layers` layers of packed rows (n tokens x heads x row_bytes each)
// head-major (`head_major`) or token-major with padded heads and rows,
// `layer_gap` bytes between layers (-1: layer_stride 0, the default).
Placed place(kvrt_context ctx, const std::vector<uint8_t>& packed, uint32_t layers, uint32_t n, uint32_t heads,
             size_t row_bytes, bool head_major, int64_t layer_gap, bool in_buffer) {
    Placed p;
    p.s.offset = 12;
    if (head_major) {
        p.s.row = row_bytes;
        p.s.head = n * row_bytes + (layer_gap < 0 ? 0 : 8);
    } else {
        p.s.head = row_bytes + 4;
        p.s.row = heads * p.s.head + 8;
    }
    const size_t one = strided_end(n, heads, row_bytes, Strided{0, p.s.row, p.s.head});
    // The default layer stride is max(n * row, heads * head).
    const uint64_t ls = layer_gap < 0 ? std::max<uint64_t>(n * p.s.row, heads * p.s.head) : one + layer_gap;
    p.layer_stride = layer_gap < 0 ? 0 : ls;
    p.region.assign(p.s.offset + (layers - 1) * ls + one + 4, kSentinel);
    const size_t per_layer = size_t{n} * heads * row_bytes;
    for (uint32_t l = 0; l < layers; ++l) {
        Strided s = p.s;
        s.offset += l * ls;
        const auto part = place_rows(packed.data() + l * per_layer, n, heads, row_bytes, s, p.region.size());
        for (size_t i = 0; i < part.size(); ++i)
            if (part[i] != kSentinel) p.region[i] = part[i];
        // (A row byte that happens to equal the sentinel is already there.)
    }
    if (in_buffer) {
        p.buffer = std::make_unique<Buffer>(ctx, p.region.size());
        upload(*p.buffer, p.region);
    }
    return p;
}

kvrt_tensor_ref tensor_of(const Placed& p, kvrt_type type) {
    kvrt_tensor_ref t = KVRT_TENSOR_REF_INIT;
    if (p.buffer) t.buffer = *p.buffer;
    else t.host = p.region.data();
    t.element_type = type;
    t.offset = p.s.offset;
    t.row_stride = p.s.row;
    t.head_stride = p.s.head;
    t.layer_stride = p.layer_stride;
    return t;
}

struct AttnGeo {
    uint32_t n_heads = 8, kv_heads = 2, dk = 64, dv = 32, tokens = 600;
};

}  // namespace

TEST_CASE("head-strided K/V stores equal packed stores", "[strides]") {
    GpuContext ctx;
    const uint32_t layers = 2, kv_heads = 3, dk = 64, dv = 32, n = 11;
    const kvrt_type cache_types[] = {KVRT_TYPE_F16, KVRT_TYPE_F32, KVRT_TYPE_Q8_0, KVRT_TYPE_Q4_0};
    for (kvrt_type ct : cache_types)
        for (kvrt_type in : {KVRT_TYPE_F32, KVRT_TYPE_F16})
            for (int variant = 0; variant < 4; ++variant) {
                const bool head_major = variant != 1, in_buffer = variant >= 2;
                const int64_t layer_gap = variant == 3 ? 20 : -1;
                {
                    INFO(kvrt_type_name(ct) << " from " << kvrt_type_name(in) << ", "
                                            << (head_major ? "head-major" : "padded heads") << ", "
                                            << (in_buffer ? "buffer" : "host") << (layer_gap >= 0 ? ", layer stride" : ""));
                    kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
                    d.n_layers = layers;
                    d.n_heads = kv_heads;
                    d.n_kv_heads = kv_heads;
                    d.head_dim_k = dk;
                    d.head_dim_v = dv;
                    d.capacity = 32;
                    d.type_k = ct;
                    d.type_v = ct;
                    CacheOwner packed(ctx, d), strided(ctx, d);
                    const auto kx = random_values(size_t{layers} * n * kv_heads * dk, 31);
                    const auto vx = random_values(size_t{layers} * n * kv_heads * dv, 32);
                    const auto kb = value_bytes(kx, in), vb = value_bytes(vx, in);
                    const auto pos = iota_positions(n, 0);
                    const std::vector<int32_t> seqs(n, 0);
                    const kvrt_batch b = batch_of(pos, seqs);
                    kvrt_tensor_ref k = KVRT_TENSOR_REF_INIT, v = KVRT_TENSOR_REF_INIT;
                    k.host = kb.data();
                    k.element_type = in;
                    v.host = vb.data();
                    v.element_type = in;
                    std::vector<uint32_t> cells(n), cells2(n);
                    KVRT_REQUIRE_OK(kvrt_cache_store(packed, nullptr, &b, -1, &k, &v, cells.data()));

                    const Placed pk = place(ctx, kb, layers, n, kv_heads, dk * elem_bytes(in), head_major, layer_gap,
                                            in_buffer);
                    const Placed pv = place(ctx, vb, layers, n, kv_heads, dv * elem_bytes(in), head_major, layer_gap,
                                            in_buffer);
                    const kvrt_tensor_ref sk = tensor_of(pk, in), sv = tensor_of(pv, in);
                    KVRT_REQUIRE_OK(kvrt_cache_store(strided, nullptr, &b, -1, &sk, &sv, cells2.data()));
                    REQUIRE(cells == cells2);
                    CHECK(read_all_raw(strided, layers, cells) == read_all_raw(packed, layers, cells));
                }
            }
}

TEST_CASE("head-major K/V store into the static layout", "[strides][static]") {
    GpuContext ctx;
    const uint32_t kv_heads = 2, dk = 32, n = 5;
    kvrt_static_layout_desc layout = KVRT_STATIC_LAYOUT_DESC_INIT;
    layout.seq_len = 16;
    kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
    d.next = &layout;
    d.layout = KVRT_LAYOUT_STATIC;
    d.n_layers = 1;
    d.n_heads = 4;
    d.n_kv_heads = kv_heads;
    d.head_dim_k = dk;
    CacheOwner packed(ctx, d), strided(ctx, d);
    const auto kx = random_values(size_t{n} * kv_heads * dk, 41), vx = random_values(size_t{n} * kv_heads * dk, 42);
    const auto kb = value_bytes(kx, KVRT_TYPE_F32), vb = value_bytes(vx, KVRT_TYPE_F32);
    const auto pos = iota_positions(n, 0);
    const std::vector<int32_t> seqs(n, 0);
    const kvrt_batch b = batch_of(pos, seqs);
    kvrt_tensor_ref k = KVRT_TENSOR_REF_INIT, v = KVRT_TENSOR_REF_INIT;
    k.host = kb.data();
    v.host = vb.data();
    KVRT_REQUIRE_OK(kvrt_cache_store(packed, nullptr, &b, 0, &k, &v, nullptr));
    const Placed pk = place(ctx, kb, 1, n, kv_heads, dk * 4, true, -1, true);
    const Placed pv = place(ctx, vb, 1, n, kv_heads, dk * 4, true, -1, false);
    const kvrt_tensor_ref sk = tensor_of(pk, KVRT_TYPE_F32), sv = tensor_of(pv, KVRT_TYPE_F32);
    KVRT_REQUIRE_OK(kvrt_cache_store(strided, nullptr, &b, 0, &sk, &sv, nullptr));
    std::vector<uint32_t> all(30);
    for (uint32_t i = 0; i < all.size(); ++i) all[i] = i;
    CHECK(read_all_raw(strided, 1, all) == read_all_raw(packed, 1, all));
}

TEST_CASE("head-major queries and outputs give the packed results bit for bit", "[strides][attention]") {
    KVRT_EACH_KERNEL_VARIANT(variant);
    GpuContext ctx(variant.flags);
    const AttnGeo g;
    kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
    d.n_layers = 1;
    d.n_heads = g.n_heads;
    d.n_kv_heads = g.kv_heads;
    d.head_dim_k = g.dk;
    d.head_dim_v = g.dv;
    d.capacity = 640;
    d.type_k = KVRT_TYPE_Q8_0;
    d.type_v = KVRT_TYPE_F16;
    CacheOwner cache(ctx, d);
    {
        const auto kx = random_values(size_t{g.tokens} * g.kv_heads * g.dk, 51);
        const auto vx = random_values(size_t{g.tokens} * g.kv_heads * g.dv, 52);
        const auto pos = iota_positions(g.tokens, 0);
        const std::vector<int32_t> seqs(g.tokens, 0);
        const kvrt_batch b = batch_of(pos, seqs);
        kvrt_tensor_ref k = KVRT_TENSOR_REF_INIT, v = KVRT_TENSOR_REF_INIT;
        k.host = kx.data();
        v.host = vx.data();
        KVRT_REQUIRE_OK(kvrt_cache_store(cache, nullptr, &b, 0, &k, &v, nullptr));
    }
    Stream stream(ctx);
    for (uint32_t nq : {1u, 2u, 40u})
        for (kvrt_type qt : {KVRT_TYPE_F32, KVRT_TYPE_F16})
            for (kvrt_type ot : {KVRT_TYPE_F32, KVRT_TYPE_F16})
                for (int where = 0; where < 3; ++where)  // host; buffers; buffers in a stream
                    for (bool head_major : {true, false}) {
                        if (nq == 2 && (where != 1 || ot != qt)) continue;  // a few only
                        {
                            INFO(nq << " queries, q " << kvrt_type_name(qt) << ", out " << kvrt_type_name(ot)
                                    << (where == 0 ? ", host" : where == 1 ? ", buffers" : ", stream")
                                    << (head_major ? ", head-major" : ", padded"));
                            const auto qx = random_values(size_t{nq} * g.n_heads * g.dk, 60 + nq);
                            const auto qb = value_bytes(qx, qt);
                            const auto pos = iota_positions(nq, static_cast<int32_t>(g.tokens - nq));
                            const std::vector<int32_t> seqs(nq, 0);
                            const kvrt_batch queries = batch_of(pos, seqs);
                            const size_t orow = g.dv * elem_bytes(ot);
                            // Packed, from and to host memory: the reference.
                            std::vector<uint8_t> want(size_t{nq} * g.n_heads * orow);
                            {
                                kvrt_tensor_ref q = KVRT_TENSOR_REF_INIT;
                                q.host = qb.data();
                                q.element_type = qt;
                                kvrt_output_ref o = KVRT_OUTPUT_REF_INIT;
                                o.host = want.data();
                                o.element_type = ot;
                                KVRT_REQUIRE_OK(kvrt_cache_attention(cache, nullptr, 0, &queries, &q, &o, nullptr));
                            }
                            const Placed pq =
                                place(ctx, qb, 1, nq, g.n_heads, g.dk * elem_bytes(qt), head_major, 0, where != 0);
                            const kvrt_tensor_ref q = tensor_of(pq, qt);
                            // The output: head-major with gaps, or padded
                            // token-major; sentinels everywhere else.
                            Placed po;
                            po.s.offset = 8;
                            po.s.row = head_major ? orow : g.n_heads * (orow + 4) + 12;
                            po.s.head = head_major ? nq * orow + 12 : orow + 4;
                            po.region.assign(strided_end(nq, g.n_heads, orow, po.s) + 16, kSentinel);
                            kvrt_output_ref o = KVRT_OUTPUT_REF_INIT;
                            o.element_type = ot;
                            o.offset = po.s.offset;
                            o.row_stride = po.s.row;
                            o.head_stride = po.s.head;
                            std::unique_ptr<Buffer> ob;
                            if (where == 0) {
                                o.host = po.region.data();
                                KVRT_REQUIRE_OK(kvrt_cache_attention(cache, nullptr, 0, &queries, &q, &o, nullptr));
                            } else {
                                ob = std::make_unique<Buffer>(ctx, po.region.size());
                                upload(*ob, po.region);
                                o.buffer = *ob;
                                if (where == 1) {
                                    KVRT_REQUIRE_OK(kvrt_cache_attention(cache, nullptr, 0, &queries, &q, &o, nullptr));
                                } else {
                                    run_stream(stream, [&]() {
                                        KVRT_REQUIRE_OK(kvrt_cache_attention(cache, stream, 0, &queries, &q, &o, nullptr));
                                    });
                                }
                                po.region = download(*ob, po.region.size());
                            }
                            CHECK(gather_rows(po.region.data(), nq, g.n_heads, orow, po.s) == want);
                            CHECK(sentinels_intact(po.region, nq, g.n_heads, orow, po.s));
                        }
                    }
}

TEST_CASE("bad strides are refused and change nothing", "[strides]") {
    GpuContext ctx;
    const AttnGeo g;
    kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
    d.n_layers = 1;
    d.n_heads = g.n_heads;
    d.n_kv_heads = g.kv_heads;
    d.head_dim_k = g.dk;
    d.head_dim_v = g.dv;
    d.capacity = 64;
    CacheOwner cache(ctx, d);
    const uint32_t n = 4;
    const auto kx = random_values(size_t{n} * g.kv_heads * g.dk, 71);
    const auto vx = random_values(size_t{n} * g.kv_heads * g.dv, 72);
    const auto pos = iota_positions(n, 0);
    const std::vector<int32_t> seqs(n, 0);
    const kvrt_batch b = batch_of(pos, seqs);
    kvrt_tensor_ref k = KVRT_TENSOR_REF_INIT, v = KVRT_TENSOR_REF_INIT;
    k.host = kx.data();
    v.host = vx.data();
    KVRT_REQUIRE_OK(kvrt_cache_store(cache, nullptr, &b, 0, &k, &v, nullptr));
    std::vector<uint32_t> all(d.capacity);
    for (uint32_t i = 0; i < all.size(); ++i) all[i] = i;
    const auto before = read_all_raw(cache, 1, all);
    kvrt_cache_info info0 = KVRT_CACHE_INFO_INIT;
    KVRT_REQUIRE_OK(kvrt_cache_get_info(cache, &info0));

    const auto qpos = iota_positions(2, 2);
    const std::vector<int32_t> qseqs(2, 0);
    const kvrt_batch queries = batch_of(qpos, qseqs);
    const auto qx = random_values(size_t{2} * g.n_heads * g.dk, 73);
    const size_t orow = g.dv * 4, out_bytes = 2 * g.n_heads * orow;
    Buffer qbuf(ctx, qx.size() * 4);
    KVRT_REQUIRE_OK(kvrt_buffer_upload(qbuf, 0, qx.data(), qx.size() * 4));
    Buffer obuf(ctx, out_bytes + 64);
    const std::vector<uint8_t> sentinel(out_bytes + 64, kSentinel);
    upload(obuf, sentinel);
    kvrt_tensor_ref q = KVRT_TENSOR_REF_INIT;
    q.buffer = qbuf;
    kvrt_output_ref o = KVRT_OUTPUT_REF_INIT;
    o.buffer = obuf;
    const auto attend = [&](const kvrt_tensor_ref& qq, const kvrt_output_ref& oo, kvrt_stream s = nullptr) {
        return kvrt_cache_attention(cache, s, 0, &queries, &qq, &oo, nullptr);
    };
    const auto store_k = [&](const kvrt_tensor_ref& kk) {
        const auto p = iota_positions(n, 100);
        const kvrt_batch bb = batch_of(p, seqs);
        return kvrt_cache_store(cache, nullptr, &bb, 0, &kk, &v, nullptr);
    };

    SECTION("overlapping output rows") {
        kvrt_output_ref bad = o;
        bad.head_stride = 4;  // heads 4 bytes apart
        CHECK(attend(q, bad) == KVRT_ERROR_INVALID_ARGUMENT);
        bad = o;
        bad.row_stride = orow;  // token t + 1 head h is token t head h + 1
        bad.head_stride = orow;
        CHECK(attend(q, bad) == KVRT_ERROR_INVALID_ARGUMENT);
        bad = o;
        bad.row_stride = 4 * orow;  // interleaved, but token 1's head 0 is token 0's head 2
        bad.head_stride = 2 * orow;
        CHECK(attend(q, bad) == KVRT_ERROR_INVALID_ARGUMENT);
        bad = o;
        bad.row_stride = orow / 2;
        CHECK(attend(q, bad) == KVRT_ERROR_INVALID_ARGUMENT);
        std::vector<uint8_t> host(out_bytes);
        kvrt_output_ref bad_host = KVRT_OUTPUT_REF_INIT;
        bad_host.host = host.data();
        bad_host.head_stride = orow - 4;
        CHECK(attend(q, bad_host) == KVRT_ERROR_INVALID_ARGUMENT);
    }
    SECTION("interleaved rows that do not overlap are accepted (the control)") {
        kvrt_output_ref ok = o;
        ok.row_stride = orow;  // tokens 0 and 1 interleaved: rows 0, 2, 4, ... and 1, 3, 5, ...
        ok.head_stride = 2 * orow;
        KVRT_REQUIRE_OK(attend(q, ok));
        return;
    }
    SECTION("misaligned offsets and strides") {
        kvrt_tensor_ref bq = q;
        bq.offset = 2;
        CHECK(attend(bq, o) == KVRT_ERROR_INVALID_ARGUMENT);
        bq = q;
        bq.head_stride = g.dk * 4 + 2;
        CHECK(attend(bq, o) == KVRT_ERROR_INVALID_ARGUMENT);
        kvrt_output_ref bo = o;
        bo.offset = 2;
        CHECK(attend(q, bo) == KVRT_ERROR_INVALID_ARGUMENT);
        bo = o;
        bo.head_stride = orow + 2;
        CHECK(attend(q, bo) == KVRT_ERROR_INVALID_ARGUMENT);
        kvrt_tensor_ref bk = k;
        bk.head_stride = g.dk * 4 + 2;
        CHECK(store_k(bk) == KVRT_ERROR_INVALID_ARGUMENT);
        bk = k;
        bk.row_stride = 6;
        CHECK(store_k(bk) == KVRT_ERROR_INVALID_ARGUMENT);
    }
    SECTION("extents past the end of a buffer") {
        kvrt_tensor_ref bq = q;
        bq.head_stride = g.dk * 4 + 4;  // the last head ends past the end
        CHECK(attend(bq, o) == KVRT_ERROR_INVALID_ARGUMENT);
        kvrt_output_ref bo = o;
        bo.head_stride = 2 * orow;  // interleaved: the rows end 4 bytes past the end
        bo.row_stride = orow;
        bo.offset = 68;
        CHECK(attend(q, bo) == KVRT_ERROR_INVALID_ARGUMENT);
        bo = o;
        bo.head_stride = UINT64_MAX / 8 * 4;
        CHECK(attend(q, bo) == KVRT_ERROR_INVALID_ARGUMENT);
        Buffer kbuf(ctx, kx.size() * 4);
        kvrt_tensor_ref bk = KVRT_TENSOR_REF_INIT;
        bk.buffer = kbuf;
        bk.head_stride = g.dk * 4 * n;  // the last row ends 12 bytes past the end
        bk.row_stride = g.dk * 4 + 4;
        CHECK(store_k(bk) == KVRT_ERROR_INVALID_ARGUMENT);
    }
    SECTION("wrong element types and places") {
        kvrt_tensor_ref bq = q;
        bq.element_type = KVRT_TYPE_Q8_0;
        CHECK(attend(bq, o) == KVRT_ERROR_INVALID_ARGUMENT);
        kvrt_output_ref bo = o;
        bo.element_type = KVRT_TYPE_U8_STATIC;
        CHECK(attend(q, bo) == KVRT_ERROR_INVALID_ARGUMENT);
        std::vector<uint8_t> host(out_bytes);
        bo = KVRT_OUTPUT_REF_INIT;
        bo.host = host.data();
        Stream stream(ctx);
        KVRT_REQUIRE_OK(kvrt_stream_begin(stream));
        CHECK(attend(q, bo, stream) == KVRT_ERROR_INVALID_ARGUMENT);
        KVRT_REQUIRE_OK(kvrt_stream_submit(stream));
        KVRT_REQUIRE_OK(kvrt_stream_wait(stream, 60ull * 1000 * 1000 * 1000));
        kvrt_tensor_ref bk = k;
        bk.element_type = KVRT_TYPE_Q8_0;  // the cache stores F16
        CHECK(store_k(bk) == KVRT_ERROR_INVALID_ARGUMENT);
    }
    CHECK(download(obuf, sentinel.size()) == sentinel);
    kvrt_cache_info info = KVRT_CACHE_INFO_INIT;
    KVRT_REQUIRE_OK(kvrt_cache_get_info(cache, &info));
    CHECK(info.used == info0.used);
    CHECK(read_all_raw(cache, 1, all) == before);
}

TEST_CASE("head-major sources whose tokens cross binding pieces", "[strides]") {
    // With 16 KiB bindings, each token's heads lie in different pieces of the
    // source buffer: they are gathered before the store kernels bind them.
    GpuContext ctx(0, 16384);
    const uint32_t kv_heads = 4, dk = 64, n = 48;
    for (kvrt_type ct : {KVRT_TYPE_F16, KVRT_TYPE_Q8_0}) {
        INFO(kvrt_type_name(ct));
        kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
        d.n_layers = 1;
        d.n_heads = kv_heads;
        d.n_kv_heads = kv_heads;
        d.head_dim_k = dk;
        d.capacity = 64;
        d.type_k = ct;
        d.type_v = ct;
        CacheOwner packed(ctx, d), from_values(ctx, d), from_bytes(ctx, d);
        const auto kx = random_values(size_t{n} * kv_heads * dk, 81), vx = random_values(size_t{n} * kv_heads * dk, 82);
        const auto kb = value_bytes(kx, KVRT_TYPE_F32), vb = value_bytes(vx, KVRT_TYPE_F32);
        const auto pos = iota_positions(n, 0);
        const std::vector<int32_t> seqs(n, 0);
        const kvrt_batch b = batch_of(pos, seqs);
        kvrt_tensor_ref k = KVRT_TENSOR_REF_INIT, v = KVRT_TENSOR_REF_INIT;
        k.host = kb.data();
        v.host = vb.data();
        std::vector<uint32_t> cells(n);
        KVRT_REQUIRE_OK(kvrt_cache_store(packed, nullptr, &b, 0, &k, &v, cells.data()));
        const auto want = read_all_raw(packed, 1, cells);

        const Placed pk = place(ctx, kb, 1, n, kv_heads, dk * 4, true, 0, true);
        const Placed pv = place(ctx, vb, 1, n, kv_heads, dk * 4, true, 0, true);
        REQUIRE(pk.region.size() > 2 * 16384);
        const kvrt_tensor_ref sk = tensor_of(pk, KVRT_TYPE_F32), sv = tensor_of(pv, KVRT_TYPE_F32);
        KVRT_REQUIRE_OK(kvrt_cache_store(from_values, nullptr, &b, 0, &sk, &sv, nullptr));
        CHECK(read_all_raw(from_values, 1, cells) == want);

        // The stored bytes, head-major with 4000-byte gaps, at an offset of 2
        // (4: F16 rows are values, whose offsets are multiples of 4).
        const auto rk = read_raw(packed, 0, KVRT_KV_ARRAY_K, cells), rv = read_raw(packed, 0, KVRT_KV_ARRAY_V, cells);
        const size_t head = rk.size() / n / kv_heads;
        const Strided s{ct == KVRT_TYPE_F16 ? 4u : 2u, head, n * head + 4000};
        std::unique_ptr<Buffer> bufs[2];
        kvrt_tensor_ref refs[2];
        for (int which = 0; which < 2; ++which) {
            const auto region = place_rows((which == 0 ? rk : rv).data(), n, kv_heads, head, s,
                                           strided_end(n, kv_heads, head, s) + 2);
            bufs[which] = std::make_unique<Buffer>(ctx, region.size());
            upload(*bufs[which], region);
            kvrt_tensor_ref r = KVRT_TENSOR_REF_INIT;
            r.buffer = *bufs[which];
            r.element_type = ct;
            r.offset = s.offset;
            r.row_stride = s.row;
            r.head_stride = s.head;
            refs[which] = r;
        }
        KVRT_REQUIRE_OK(kvrt_cache_store(from_bytes, nullptr, &b, 0, &refs[0], &refs[1], nullptr));
        CHECK(read_all_raw(from_bytes, 1, cells) == want);
    }
}

TEST_CASE("the overlap check of output rows is exact", "[strides]") {
    // Against brute force over small grids: every pair of rows compared.
    uint32_t refused = 0, accepted = 0;
    for (uint32_t tokens = 1; tokens <= 4; ++tokens)
        for (uint32_t heads = 1; heads <= 5; ++heads)
            for (uint64_t bytes : {4u, 8u, 12u})
                for (uint64_t row = 4; row <= 64; row += 4)
                    for (uint64_t head = 4; head <= 64; head += 4) {
                        kvrt::cache::StridedRows r;
                        REQUIRE(kvrt::cache::resolve_strided("out", 0, row, head, 0, 1, tokens, heads, bytes, 4, &r) ==
                                KVRT_SUCCESS);
                        bool disjoint = true;
                        for (uint32_t a = 0; a < tokens * heads && disjoint; ++a)
                            for (uint32_t b = a + 1; b < tokens * heads && disjoint; ++b) {
                                const uint64_t x = r.at(0, a / heads, a % heads), y = r.at(0, b / heads, b % heads);
                                disjoint = (x > y ? x - y : y - x) >= bytes;
                            }
                        INFO(tokens << " tokens, " << heads << " heads of " << bytes << " bytes, row " << row
                                    << ", head " << head);
                        REQUIRE(kvrt::cache::strided_rows_disjoint(r) == disjoint);
                        (disjoint ? accepted : refused) += 1;
                    }
    CHECK(refused > 1000);
    CHECK(accepted > 1000);
}
