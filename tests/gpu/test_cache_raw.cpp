// Stored bytes: kvrt_cache_read_raw gives each cell's rows exactly as the CPU
// reference encodes them, and rows given in the stored type (pre-quantized)
// are stored bit for bit by kvrt_cache_store and kvrt_cache_write, in the
// cell and the static layouts, from host memory and from buffers at any
// allowed alignment; bad input is refused and changes nothing.
#include "gpu_test.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "tensor_util.hpp"

using namespace kvrt_test;

namespace {

struct Geo {
    uint32_t layers = 2, n_heads = 6, kv_heads = 3, dk = 96, dv = 64, capacity = 40;
    kvrt_type tk = KVRT_TYPE_Q8_0, tv = KVRT_TYPE_Q4_0;
};

// Scales of the static-scale types: different per layer and per array.
QuantScale k_scale(uint32_t layer) { return {0.02f + 0.005f * static_cast<float>(layer), 128}; }
QuantScale v_scale(uint32_t layer) { return {0.0003f * static_cast<float>(layer + 1), 30000}; }

// The cache description of `g`; `scales` must outlive the creation.
kvrt_cache_desc describe(const Geo& g, StaticScales* scales) {
    kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
    d.n_layers = g.layers;
    d.n_heads = g.n_heads;
    d.n_kv_heads = g.kv_heads;
    d.head_dim_k = g.dk;
    d.head_dim_v = g.dv;
    d.capacity = g.capacity;
    d.type_k = g.tk;
    d.type_v = g.tv;
    if (is_static_scale(g.tk) || is_static_scale(g.tv)) d.next = scales->desc();
    return d;
}

std::unique_ptr<StaticScales> scales_for(const Geo& g) {
    std::vector<QuantScale> k, v;
    for (uint32_t l = 0; l < g.layers; ++l) {
        if (is_static_scale(g.tk)) k.push_back(k_scale(l));
        if (is_static_scale(g.tv)) v.push_back(v_scale(l));
    }
    return std::make_unique<StaticScales>(k, v);
}

// Values of n tokens for all layers: [layer][token][head][dim].
struct Values {
    std::vector<float> k, v;
};

Values make_values(const Geo& g, uint32_t n, uint32_t seed) {
    return {random_values(size_t{g.layers} * n * g.kv_heads * g.dk, seed),
            random_values(size_t{g.layers} * n * g.kv_heads * g.dv, seed + 1)};
}

// The reference bytes of tokens [0, n) of one layer and array, packed.
std::vector<uint8_t> expected_bytes(const Geo& g, const Values& x, uint32_t n, uint32_t layer, kvrt_kv_array a) {
    const bool is_k = a == KVRT_KV_ARRAY_K;
    const size_t row = size_t{g.kv_heads} * (is_k ? g.dk : g.dv);
    const float* first = (is_k ? x.k : x.v).data() + size_t{layer} * n * row;
    std::vector<uint8_t> out;
    for (uint32_t t = 0; t < n; ++t) {
        const auto r = reference_encode(is_k ? g.tk : g.tv, first + t * row, row, is_k ? k_scale(layer) : v_scale(layer));
        out.insert(out.end(), r.begin(), r.end());
    }
    return out;
}

// Stores values of n tokens (all layers) of sequence `seq` at positions
// pos0..; returns their cells.
std::vector<uint32_t> store_values(kvrt_cache cache, const Values& x, uint32_t n, int32_t seq, int32_t pos0) {
    std::vector<int32_t> pos(n), seqs(n, seq);
    for (uint32_t i = 0; i < n; ++i) pos[i] = pos0 + static_cast<int32_t>(i);
    kvrt_batch b = KVRT_BATCH_INIT;
    b.n_tokens = n;
    b.positions = pos.data();
    b.seq_ids = seqs.data();
    kvrt_tensor_ref k = KVRT_TENSOR_REF_INIT, v = KVRT_TENSOR_REF_INIT;
    k.host = x.k.data();
    v.host = x.v.data();
    std::vector<uint32_t> cells(n);
    KVRT_REQUIRE_OK(kvrt_cache_store(cache, nullptr, &b, -1, &k, &v, cells.data()));
    return cells;
}

// The stored bytes of `cells` in every layer: [layer][array] packed.
struct Raw {
    std::vector<std::vector<uint8_t>> k, v;  // per layer
};

Raw read_layers(kvrt_cache cache, uint32_t layers, const std::vector<uint32_t>& cells) {
    Raw r;
    for (uint32_t l = 0; l < layers; ++l) {
        r.k.push_back(read_raw(cache, static_cast<int32_t>(l), KVRT_KV_ARRAY_K, cells));
        r.v.push_back(read_raw(cache, static_cast<int32_t>(l), KVRT_KV_ARRAY_V, cells));
    }
    return r;
}

// All layers' bytes of one array, layer after layer.
std::vector<uint8_t> concat(const std::vector<std::vector<uint8_t>>& per_layer) {
    std::vector<uint8_t> out;
    for (const auto& p : per_layer) out.insert(out.end(), p.begin(), p.end());
    return out;
}

}  // namespace

TEST_CASE("raw reads give the stored bytes the CPU reference encodes", "[raw]") {
    GpuContext ctx;
    const std::pair<kvrt_type, kvrt_type> types[] = {{KVRT_TYPE_Q8_0, KVRT_TYPE_Q4_0},
                                                     {KVRT_TYPE_Q4_0, KVRT_TYPE_Q8_0},
                                                     {KVRT_TYPE_F16, KVRT_TYPE_F32},
                                                     {KVRT_TYPE_U8_STATIC, KVRT_TYPE_U16_STATIC}};
    for (const auto& [tk, tv] : types) {
        Geo g;
        g.tk = tk;
        g.tv = tv;
        // U8 heads of 4n + 2 bytes: rows that end inside a word.
        if (tk == KVRT_TYPE_U8_STATIC) g.dk = 94;
        DYNAMIC_SECTION(kvrt_type_name(tk) << " K, " << kvrt_type_name(tv) << " V") {
            auto scales = scales_for(g);
            CacheOwner cache(ctx, describe(g, scales.get()));
            kvrt_cache_info info = KVRT_CACHE_INFO_INIT;
            KVRT_REQUIRE_OK(kvrt_cache_get_info(cache, &info));
            CHECK(info.k_row_bytes == g.kv_heads * stored_row_bytes(tk, g.dk));
            CHECK(info.v_row_bytes == g.kv_heads * stored_row_bytes(tv, g.dv));

            // A first sequence fragments the cells; the checked one goes around it.
            const uint32_t n = 13;
            const Values other = make_values(g, 9, 3);
            store_values(cache, other, 9, 1, 0);
            KVRT_REQUIRE_OK(kvrt_cache_seq_rm(cache, 1, 2, 6));
            const Values x = make_values(g, n, 7);
            const std::vector<uint32_t> cells = store_values(cache, x, n, 0, 0);
            for (uint32_t l = 0; l < g.layers; ++l)
                for (kvrt_kv_array a : {KVRT_KV_ARRAY_K, KVRT_KV_ARRAY_V}) {
                    INFO("layer " << l << (a == KVRT_KV_ARRAY_K ? " K" : " V"));
                    CHECK(read_raw(cache, static_cast<int32_t>(l), a, cells) == expected_bytes(g, x, n, l, a));
                }

            // Cells in any order, repeated; out_bytes exactly the size.
            std::vector<uint32_t> shuffled(cells.rbegin(), cells.rend());
            shuffled.push_back(cells[3]);
            const auto got = read_raw(cache, 1, KVRT_KV_ARRAY_V, shuffled);
            const auto want = expected_bytes(g, x, n, 1, KVRT_KV_ARRAY_V);
            const size_t row = info.v_row_bytes;
            for (size_t i = 0; i < shuffled.size(); ++i) {
                const size_t t = i < n ? n - 1 - i : 3;
                CHECK(std::memcmp(got.data() + i * row, want.data() + t * row, row) == 0);
            }
        }
    }
}

TEST_CASE("stored bytes round-trip between caches bit for bit", "[raw]") {
    GpuContext ctx;
    const std::pair<kvrt_type, kvrt_type> types[] = {{KVRT_TYPE_Q4_0, KVRT_TYPE_Q8_0},
                                                     {KVRT_TYPE_U8_STATIC, KVRT_TYPE_U16_STATIC}};
    for (const auto& [tk, tv] : types) {
        Geo g;
        g.tk = tk;
        g.tv = tv;
        g.n_heads = 6;
        g.dk = 64;
        g.dv = 32;
        DYNAMIC_SECTION(kvrt_type_name(tk) << " K, " << kvrt_type_name(tv) << " V") {
            auto scales = scales_for(g);
            const kvrt_cache_desc desc = describe(g, scales.get());
            CacheOwner a(ctx, desc);
            const uint32_t n = 21;
            const Values x = make_values(g, n, 21);
            const std::vector<uint32_t> cells = store_values(a, x, n, 0, 0);
            const Raw raw = read_layers(a, g.layers, cells);
            const std::vector<uint8_t> all_k = concat(raw.k), all_v = concat(raw.v);

            std::vector<int32_t> pos(n), seqs(n, 0);
            for (uint32_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(i);
            kvrt_batch batch = KVRT_BATCH_INIT;
            batch.n_tokens = n;
            batch.positions = pos.data();
            batch.seq_ids = seqs.data();

            // b: kvrt_cache_store of all layers from host memory, packed.
            CacheOwner b(ctx, desc);
            {
                kvrt_tensor_ref k = KVRT_TENSOR_REF_INIT, v = KVRT_TENSOR_REF_INIT;
                k.host = all_k.data();
                k.element_type = tk;
                v.host = all_v.data();
                v.element_type = tv;
                std::vector<uint32_t> got(n);
                KVRT_REQUIRE_OK(kvrt_cache_store(b, nullptr, &batch, -1, &k, &v, got.data()));
                REQUIRE(got == cells);
            }
            // c: placed, then kvrt_cache_write layer by layer from buffers,
            // at offsets and strides that are not multiples of 4 (2, or 1 for
            // U8 codes): heads and rows padded apart, in a caller's stream.
            CacheOwner c(ctx, desc);
            {
                std::vector<uint32_t> placed(n);
                KVRT_REQUIRE_OK(kvrt_cache_place(c, &batch, placed.data()));
                REQUIRE(placed == cells);
                Stream stream(ctx);
                std::vector<std::unique_ptr<Buffer>> keep;
                run_stream(stream, [&]() {
                    for (uint32_t l = 0; l < g.layers; ++l) {
                        kvrt_tensor_ref refs[2];
                        for (int which = 0; which < 2; ++which) {
                            const auto& bytes = which == 0 ? raw.k[l] : raw.v[l];
                            const kvrt_type t = which == 0 ? tk : tv;
                            const size_t head = bytes.size() / n / g.kv_heads;
                            const uint64_t unit = t == KVRT_TYPE_U8_STATIC ? 1 : 2;
                            const Strided s{unit, g.kv_heads * (head + unit) + 3 * unit, head + unit};
                            const auto region =
                                place_rows(bytes.data(), n, g.kv_heads, head, s, strided_end(n, g.kv_heads, head, s) + 3);
                            keep.push_back(std::make_unique<Buffer>(ctx, region.size()));
                            upload(*keep.back(), region);
                            kvrt_tensor_ref r = KVRT_TENSOR_REF_INIT;
                            r.buffer = *keep.back();
                            r.element_type = t;
                            r.offset = s.offset;
                            r.row_stride = s.row;
                            r.head_stride = s.head;
                            refs[which] = r;
                        }
                        KVRT_REQUIRE_OK(
                            kvrt_cache_write(c, stream, n, cells.data(), static_cast<int32_t>(l), &refs[0], &refs[1]));
                    }
                });
            }
            const Raw rb = read_layers(b, g.layers, cells), rc = read_layers(c, g.layers, cells);
            for (uint32_t l = 0; l < g.layers; ++l) {
                INFO("layer " << l);
                CHECK(rb.k[l] == raw.k[l]);
                CHECK(rb.v[l] == raw.v[l]);
                CHECK(rc.k[l] == raw.k[l]);
                CHECK(rc.v[l] == raw.v[l]);
            }

            // Attention over the original and the copies: the same bits.
            const uint32_t nq = 3;
            const std::vector<float> q = random_values(size_t{nq} * g.n_heads * g.dk, 99);
            std::vector<int32_t> qpos = {5, 13, 20}, qseq(nq, 0);
            kvrt_batch queries = KVRT_BATCH_INIT;
            queries.n_tokens = nq;
            queries.positions = qpos.data();
            queries.seq_ids = qseq.data();
            kvrt_tensor_ref qr = KVRT_TENSOR_REF_INIT;
            qr.host = q.data();
            std::vector<std::vector<float>> outs;
            const size_t per_layer = size_t{nq} * g.n_heads * g.dv;
            for (kvrt_cache cache : {static_cast<kvrt_cache>(a), static_cast<kvrt_cache>(b), static_cast<kvrt_cache>(c)}) {
                outs.emplace_back(per_layer * g.layers);
                for (int32_t l = 0; l < static_cast<int32_t>(g.layers); ++l) {
                    kvrt_output_ref o = KVRT_OUTPUT_REF_INIT;
                    o.host = outs.back().data() + l * per_layer;
                    KVRT_REQUIRE_OK(kvrt_cache_attention(cache, nullptr, l, &queries, &qr, &o, nullptr));
                }
            }
            CHECK(std::memcmp(outs[0].data(), outs[1].data(), outs[0].size() * 4) == 0);
            CHECK(std::memcmp(outs[0].data(), outs[2].data(), outs[0].size() * 4) == 0);
            CHECK(std::any_of(outs[0].begin(), outs[0].end(), [](float f) { return f != 0.0f; }));
        }
    }
}

TEST_CASE("pre-quantized rows store into the static layout bit for bit", "[raw][static]") {
    GpuContext ctx;
    Geo g;
    g.layers = 2;
    g.n_heads = 4;
    g.kv_heads = 2;
    g.dk = 64;
    g.dv = 32;
    g.tk = KVRT_TYPE_U8_STATIC;
    g.tv = KVRT_TYPE_U16_STATIC;
    auto scales = scales_for(g);
    kvrt_static_layout_desc layout = KVRT_STATIC_LAYOUT_DESC_INIT;
    layout.seq_len = 8;
    layout.reserve = 2.0;
    layout.next = scales->desc();
    kvrt_cache_desc sdesc = describe(g, scales.get());
    sdesc.layout = KVRT_LAYOUT_STATIC;
    sdesc.capacity = 0;
    sdesc.next = &layout;
    // The same tokens stored as values into one static cache and as their
    // stored bytes (from a cell-layout cache) into another, in steps that
    // make the windows slide: every row of both caches stays identical.
    CacheOwner by_value(ctx, sdesc), by_bytes(ctx, sdesc), cells_cache(ctx, describe(g, scales.get()));
    const uint32_t steps = 6, per_step = 3;
    int32_t pos = 0;
    Stream stream(ctx);
    for (uint32_t step = 0; step < steps; ++step) {
        const Values x = make_values(g, per_step, 100 + step);
        const std::vector<uint32_t> vcells = store_values(by_value, x, per_step, 0, pos);
        const std::vector<uint32_t> src_cells = store_values(cells_cache, x, per_step, 0, pos);
        const Raw raw = read_layers(cells_cache, g.layers, src_cells);
        for (uint32_t l = 0; l < g.layers; ++l) {
            CHECK(raw.k[l] == expected_bytes(g, x, per_step, l, KVRT_KV_ARRAY_K));
            CHECK(raw.v[l] == expected_bytes(g, x, per_step, l, KVRT_KV_ARRAY_V));
        }
        std::vector<int32_t> positions(per_step), seqs(per_step, 0);
        for (uint32_t i = 0; i < per_step; ++i) positions[i] = pos + static_cast<int32_t>(i);
        kvrt_batch batch = KVRT_BATCH_INIT;
        batch.n_tokens = per_step;
        batch.positions = positions.data();
        batch.seq_ids = seqs.data();
        std::vector<uint32_t> bcells(per_step);
        if (step % 2 == 0) {
            // kvrt_cache_store, all layers, from host memory.
            const auto all_k = concat(raw.k), all_v = concat(raw.v);
            kvrt_tensor_ref k = KVRT_TENSOR_REF_INIT, v = KVRT_TENSOR_REF_INIT;
            k.host = all_k.data();
            k.element_type = g.tk;
            v.host = all_v.data();
            v.element_type = g.tv;
            KVRT_REQUIRE_OK(kvrt_cache_store(by_bytes, nullptr, &batch, -1, &k, &v, bcells.data()));
        } else {
            // kvrt_cache_place, then kvrt_cache_write per layer from a buffer
            // at an odd offset (K: U8 codes) in a caller's stream.
            KVRT_REQUIRE_OK(kvrt_cache_place(by_bytes, &batch, bcells.data()));
            std::vector<std::unique_ptr<Buffer>> keep;
            run_stream(stream, [&]() {
                for (uint32_t l = 0; l < g.layers; ++l) {
                    kvrt_tensor_ref refs[2];
                    for (int which = 0; which < 2; ++which) {
                        const auto& bytes = which == 0 ? raw.k[l] : raw.v[l];
                        const uint64_t offset = which == 0 ? 5 : 6;
                        std::vector<uint8_t> region(offset + bytes.size() + 1, kSentinel);
                        std::memcpy(region.data() + offset, bytes.data(), bytes.size());
                        keep.push_back(std::make_unique<Buffer>(ctx, region.size()));
                        upload(*keep.back(), region);
                        kvrt_tensor_ref r = KVRT_TENSOR_REF_INIT;
                        r.buffer = *keep.back();
                        r.element_type = which == 0 ? g.tk : g.tv;
                        r.offset = offset;
                        refs[which] = r;
                    }
                    KVRT_REQUIRE_OK(kvrt_cache_write(by_bytes, stream, per_step, bcells.data(), static_cast<int32_t>(l),
                                                     &refs[0], &refs[1]));
                }
            });
        }
        REQUIRE(bcells == vcells);
        pos += static_cast<int32_t>(per_step);
    }
    kvrt_static_stats stats = KVRT_STATIC_STATS_INIT;
    KVRT_REQUIRE_OK(kvrt_cache_static_get_stats(by_bytes, 0, &stats));
    CHECK(stats.slides > 0);
    // Every row of every region, valid or not.
    const uint32_t rows = 2 * 7;  // ceil(reserve * (seq_len - 1)), one sequence
    std::vector<uint32_t> all(rows);
    for (uint32_t i = 0; i < rows; ++i) all[i] = i;
    CHECK(read_all_raw(by_value, g.layers, all) == read_all_raw(by_bytes, g.layers, all));
}

TEST_CASE("bad stored-byte inputs are refused and change nothing", "[raw]") {
    GpuContext ctx;
    Geo g;
    g.tk = KVRT_TYPE_Q8_0;
    g.tv = KVRT_TYPE_Q4_0;
    CacheOwner cache(ctx, describe(g, nullptr));
    const uint32_t n = 4;
    const Values x = make_values(g, n, 5);
    const std::vector<uint32_t> cells = store_values(cache, x, n, 0, 0);
    std::vector<uint32_t> all(g.capacity);
    for (uint32_t i = 0; i < g.capacity; ++i) all[i] = i;
    const auto before = read_all_raw(cache, g.layers, all);
    kvrt_cache_info info0 = KVRT_CACHE_INFO_INIT;
    KVRT_REQUIRE_OK(kvrt_cache_get_info(cache, &info0));
    const Raw raw = read_layers(cache, g.layers, cells);

    std::vector<int32_t> pos = {10, 11, 12, 13}, seqs(n, 0);
    kvrt_batch batch = KVRT_BATCH_INIT;
    batch.n_tokens = n;
    batch.positions = pos.data();
    batch.seq_ids = seqs.data();
    // Room for the rows at an offset of 2 and a little more.
    std::vector<uint8_t> region(raw.k[0].size() + 64, 0);
    Buffer buf(ctx, region.size());
    upload(buf, region);
    const auto store = [&](kvrt_tensor_ref k, kvrt_tensor_ref v) {
        return kvrt_cache_store(cache, nullptr, &batch, 0, &k, &v, nullptr);
    };
    kvrt_tensor_ref k = KVRT_TENSOR_REF_INIT, v = KVRT_TENSOR_REF_INIT;
    k.buffer = buf;
    k.element_type = KVRT_TYPE_Q8_0;
    k.offset = 2;
    v.host = raw.v[0].data();
    v.element_type = KVRT_TYPE_Q4_0;

    SECTION("a well-formed call succeeds (the control)") {
        KVRT_REQUIRE_OK(store(k, v));
        return;
    }
    SECTION("stored bytes of another type") {
        kvrt_tensor_ref bad = v;
        bad.element_type = KVRT_TYPE_Q8_0;  // V is Q4_0
        CHECK(store(k, bad) == KVRT_ERROR_INVALID_ARGUMENT);
        bad.element_type = KVRT_TYPE_U8_STATIC;
        CHECK(store(k, bad) == KVRT_ERROR_INVALID_ARGUMENT);
        bad.element_type = KVRT_TYPE_UNDEFINED;
        CHECK(store(k, bad) == KVRT_ERROR_INVALID_ARGUMENT);
        bad.element_type = static_cast<kvrt_type>(77);
        CHECK(store(k, bad) == KVRT_ERROR_INVALID_ARGUMENT);
    }
    SECTION("offsets and strides that are not multiples of 2") {
        kvrt_tensor_ref bad = k;
        bad.offset = 1;
        CHECK(store(bad, v) == KVRT_ERROR_INVALID_ARGUMENT);
        bad = k;
        bad.row_stride = raw.k[0].size() / n + 1;
        CHECK(store(bad, v) == KVRT_ERROR_INVALID_ARGUMENT);
        bad = k;
        bad.head_stride = 103;
        CHECK(store(bad, v) == KVRT_ERROR_INVALID_ARGUMENT);
        bad = v;
        bad.offset = 3;
        CHECK(store(k, bad) == KVRT_ERROR_INVALID_ARGUMENT);
    }
    SECTION("rows past the end of the buffer") {
        kvrt_tensor_ref bad = k;
        bad.offset = 66;  // the last row ends 2 bytes past the end
        CHECK(store(bad, v) == KVRT_ERROR_INVALID_ARGUMENT);
        bad = k;
        bad.row_stride = raw.k[0].size() / n + 2;
        bad.offset = 60;
        CHECK(store(bad, v) == KVRT_ERROR_INVALID_ARGUMENT);
        bad = k;
        bad.head_stride = UINT64_MAX / 4 * 2;
        CHECK(store(bad, v) == KVRT_ERROR_INVALID_ARGUMENT);
    }
    SECTION("kvrt_cache_write refuses stored bytes of another type") {
        std::vector<uint32_t> target(cells.begin(), cells.end());
        kvrt_tensor_ref bad = k;
        bad.element_type = KVRT_TYPE_Q4_0;
        CHECK(kvrt_cache_write(cache, nullptr, n, target.data(), 0, &bad, &v) == KVRT_ERROR_INVALID_ARGUMENT);
    }
    SECTION("bad raw reads") {
        std::vector<uint8_t> out(info0.k_row_bytes * n);
        CHECK(kvrt_cache_read_raw(cache, 0, KVRT_KV_ARRAY_K, n, cells.data(), out.data(), out.size() - 1) ==
              KVRT_ERROR_INVALID_ARGUMENT);
        CHECK(kvrt_cache_read_raw(cache, 0, KVRT_KV_ARRAY_UNDEFINED, n, cells.data(), out.data(), out.size()) ==
              KVRT_ERROR_INVALID_ARGUMENT);
        CHECK(kvrt_cache_read_raw(cache, 2, KVRT_KV_ARRAY_K, n, cells.data(), out.data(), out.size()) ==
              KVRT_ERROR_INVALID_ARGUMENT);
        CHECK(kvrt_cache_read_raw(cache, -1, KVRT_KV_ARRAY_K, n, cells.data(), out.data(), out.size()) ==
              KVRT_ERROR_INVALID_ARGUMENT);
        CHECK(kvrt_cache_read_raw(cache, 0, KVRT_KV_ARRAY_K, n, nullptr, out.data(), out.size()) ==
              KVRT_ERROR_INVALID_ARGUMENT);
        CHECK(kvrt_cache_read_raw(cache, 0, KVRT_KV_ARRAY_K, n, cells.data(), nullptr, out.size()) ==
              KVRT_ERROR_INVALID_ARGUMENT);
        const uint32_t far[1] = {g.capacity};
        CHECK(kvrt_cache_read_raw(cache, 0, KVRT_KV_ARRAY_K, 1, far, out.data(), out.size()) ==
              KVRT_ERROR_INVALID_ARGUMENT);
        CHECK(kvrt_cache_read_raw(nullptr, 0, KVRT_KV_ARRAY_K, n, cells.data(), out.data(), out.size()) ==
              KVRT_ERROR_INVALID_HANDLE);
        CHECK(kvrt_cache_read_raw(cache, 0, KVRT_KV_ARRAY_K, 0, nullptr, nullptr, 0) == KVRT_SUCCESS);
    }
    kvrt_cache_info info = KVRT_CACHE_INFO_INIT;
    KVRT_REQUIRE_OK(kvrt_cache_get_info(cache, &info));
    CHECK(info.used == info0.used);
    CHECK(read_all_raw(cache, g.layers, all) == before);
}

namespace {
#include "reference/gguf_vectors.inc"
}  // namespace

TEST_CASE("Q8_0 and Q4_0 stores match the gguf package's quantizer byte for byte", "[raw]") {
    // Blocks made by the gguf Python package (GGML's authors' own quantizer,
    // independent of kvrt): the store kernels and the CPU reference must give
    // the same bytes.
    const uint32_t n = kGgufRows, d = kGgufRowElems;
    std::vector<float> x(size_t{n} * d);
    std::memcpy(x.data(), kGgufInput, x.size() * 4);
    const std::vector<uint8_t> q8(std::begin(kGgufQ8_0), std::end(kGgufQ8_0));
    const std::vector<uint8_t> q4(std::begin(kGgufQ4_0), std::end(kGgufQ4_0));
    std::vector<uint8_t> ref8, ref4;
    for (uint32_t t = 0; t < n; ++t) {
        const auto a = reference_encode(KVRT_TYPE_Q8_0, x.data() + size_t{t} * d, d);
        const auto b = reference_encode(KVRT_TYPE_Q4_0, x.data() + size_t{t} * d, d);
        ref8.insert(ref8.end(), a.begin(), a.end());
        ref4.insert(ref4.end(), b.begin(), b.end());
    }
    CHECK(ref8 == q8);
    CHECK(ref4 == q4);

    GpuContext ctx;
    // Rows of two heads of d/2 values, stored as f32 values, K as Q8_0 and V
    // as Q4_0.
    kvrt_cache_desc desc = KVRT_CACHE_DESC_INIT;
    desc.n_layers = 1;
    desc.n_heads = 2;
    desc.n_kv_heads = 2;
    desc.head_dim_k = d / 2;
    desc.capacity = 2 * n;
    desc.type_k = KVRT_TYPE_Q8_0;
    desc.type_v = KVRT_TYPE_Q4_0;
    CacheOwner cache(ctx, desc);
    Values values{x, x};
    const std::vector<uint32_t> cells = store_values(cache, values, n, 0, 0);
    CHECK(read_raw(cache, 0, KVRT_KV_ARRAY_K, cells) == q8);
    CHECK(read_raw(cache, 0, KVRT_KV_ARRAY_V, cells) == q4);
}
