// Storing K/V into cache cells: every cache type from f32 and f16 input, from
// host memory, kvrt buffers and wrapped VkBuffers, one layer or all layers,
// against the CPU reference quantizer (bit-identical for F32/F16, GGML-exact
// or within one quantization step for Q8_0/Q4_0).
#include "gpu_test.hpp"

#include <cmath>
#include <cstring>
#include <random>

#include "common/random.hpp"
#include "kvrt/kvrt_vulkan.h"
#include "reference/half.hpp"
#include "reference/quant.hpp"

using namespace kvrt_test;
namespace ref = kvrt::ref;

namespace {

// Input rows with the cases that trip quantizers: zero blocks, a negative
// maximum, exact halves, ties between +m and -m, tiny and large magnitudes.
std::vector<float> make_rows(uint32_t rows, uint32_t row_elems, uint32_t seed) {
    std::vector<float> x = Rng(seed).normal(size_t{rows} * row_elems);
    for (uint32_t r = 0; r < rows; ++r) {
        float* row = &x[size_t{r} * row_elems];
        switch (r % 6) {
            case 0: std::fill(row, row + std::min(32u, row_elems), 0.0f); break;
            case 1: row[5] = -9.0f; break;
            case 2:
                for (uint32_t j = 0; j < std::min(32u, row_elems); ++j) row[j] = 0.5f * static_cast<float>(j) - 8.0f;
                row[31 % row_elems] = 127.0f;
                break;
            case 3: row[0] = 4.0f, row[1] = -4.0f; break;
            case 4:
                for (uint32_t j = 0; j < row_elems; ++j) row[j] *= 1e-3f;
                break;
            default:
                for (uint32_t j = 0; j < row_elems; ++j) row[j] *= 300.0f;
        }
    }
    return x;
}

std::vector<uint8_t> to_bytes(const std::vector<float>& x, kvrt_type t) {
    return ref::encode_values(x, t == KVRT_TYPE_F16);
}

enum class SourceKind { Host, Buffer, Wrapped };

struct Shape {
    uint32_t layers = 2, kv_heads = 3, dk = 96, dv = 64, capacity = 40;
};

struct Outcome {
    uint64_t values = 0, exact = 0;
};

// Compares one read-back row with the reference conversion of its input.
void check_row(kvrt_type type, const float* input, const float* got, uint32_t n, Outcome* o) {
    const ref::Type rt = ref_type(type);
    std::vector<uint8_t> enc(ref::row_bytes(rt, n));
    ref::encode_row(rt, input, n, enc.data());
    std::vector<float> expect(n);
    ref::decode_row(rt, enc.data(), n, expect.data());
    for (uint32_t j = 0; j < n; ++j) {
        ++o->values;
        if (std::memcmp(&expect[j], &got[j], 4) == 0) {
            ++o->exact;
            continue;
        }
        if (type == KVRT_TYPE_F32 || type == KVRT_TYPE_F16)
            FAIL("value " << j << ": got " << got[j] << ", expected exactly " << expect[j]);
        const double step = ref::quant_step(rt, enc.data(), j);
        INFO("value " << j << " got " << got[j] << " expected " << expect[j] << " step " << step);
        REQUIRE(std::abs(double(got[j]) - double(expect[j])) <= step * 1.0000001);
    }
}

void run_store_case(kvrt_context ctx, kvrt_type cache_type, kvrt_type input_type, SourceKind kind, const Shape& s,
                    Outcome* outcome) {
    kvrt_cache_desc desc = KVRT_CACHE_DESC_INIT;
    desc.n_layers = s.layers;
    desc.n_heads = s.kv_heads * 2;
    desc.n_kv_heads = s.kv_heads;
    desc.head_dim_k = s.dk;
    desc.head_dim_v = s.dv;
    desc.capacity = s.capacity;
    desc.type_k = cache_type;
    desc.type_v = cache_type;
    Cache cache;
    KVRT_REQUIRE_OK(kvrt_cache_create(ctx, &desc, cache.out()));

    // Fragment the cache first so the stored tokens land in scattered cells.
    {
        std::vector<int32_t> pos(s.capacity / 2), seq(s.capacity / 2, 7);
        for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(i);
        const kvrt_batch b = make_batch(static_cast<uint32_t>(pos.size()), pos.data(), seq.data());
        KVRT_REQUIRE_OK(kvrt_cache_place(cache, &b, nullptr));
        for (int32_t p = 0; p < static_cast<int32_t>(pos.size()); p += 3) KVRT_REQUIRE_OK(kvrt_cache_seq_rm(cache, 7, p, p + 1));
    }

    const uint32_t n = 13;
    const uint32_t ke = s.kv_heads * s.dk, ve = s.kv_heads * s.dv;
    const auto kx = make_rows(n * s.layers, ke, 11), vx = make_rows(n * s.layers, ve, 12);
    // What the kernel sees: f16 input is rounded to f16 first.
    auto effective = [&](std::vector<float> x) {
        if (input_type == KVRT_TYPE_F16)
            for (auto& v : x) v = ref::round_to_f16(v);
        return x;
    };
    const auto k_in = effective(kx), v_in = effective(vx);
    const auto kb = to_bytes(kx, input_type), vb = to_bytes(vx, input_type);

    // Sources, laid out as layer blocks of n rows. For buffers, put them at an
    // offset to exercise it.
    const uint64_t off = 64;
    kvrt_buffer kbuf = nullptr, vbuf = nullptr, kwrap = nullptr, vwrap = nullptr;
    kvrt_tensor_ref k = KVRT_TENSOR_REF_INIT;
    k.element_type = input_type;
    kvrt_tensor_ref v = k;
    if (kind == SourceKind::Host) {
        k.host = kb.data();
        v.host = vb.data();
    } else {
        kvrt_buffer_desc bd = KVRT_BUFFER_DESC_INIT;
        bd.size = off + kb.size();
        KVRT_REQUIRE_OK(kvrt_buffer_create(ctx, &bd, &kbuf));
        bd.size = off + vb.size();
        KVRT_REQUIRE_OK(kvrt_buffer_create(ctx, &bd, &vbuf));
        KVRT_REQUIRE_OK(kvrt_buffer_upload(kbuf, off, kb.data(), kb.size()));
        KVRT_REQUIRE_OK(kvrt_buffer_upload(vbuf, off, vb.data(), vb.size()));
        k.buffer = kbuf, v.buffer = vbuf;
        k.offset = v.offset = off;
        if (kind == SourceKind::Wrapped) {
            // Wrap the VkBuffers behind the kvrt buffers as an app would its own.
            VkBuffer vkb;
            VkDeviceSize vko, vkn;
            KVRT_REQUIRE_OK(kvrt_buffer_get_vulkan(kbuf, 0, &vkb, &vko, &vkn));
            KVRT_REQUIRE_OK(kvrt_buffer_import_vulkan(ctx, vkb, vko, (off + kb.size() + 3) / 4 * 4, &kwrap));
            KVRT_REQUIRE_OK(kvrt_buffer_get_vulkan(vbuf, 0, &vkb, &vko, &vkn));
            KVRT_REQUIRE_OK(kvrt_buffer_import_vulkan(ctx, vkb, vko, (off + vb.size() + 3) / 4 * 4, &vwrap));
            k.buffer = kwrap, v.buffer = vwrap;
        }
    }

    // All layers in one call.
    std::vector<int32_t> pos(n), seq(n, 1);
    for (uint32_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(100 + i);
    const kvrt_batch batch = make_batch(n, pos.data(), seq.data());
    std::vector<uint32_t> cells(n, UINT32_MAX);
    KVRT_REQUIRE_OK(kvrt_cache_store(cache, nullptr, &batch, -1, &k, &v, cells.data()));

    for (uint32_t l = 0; l < s.layers; ++l) {
        std::vector<float> kg(size_t{n} * ke), vg(size_t{n} * ve);
        KVRT_REQUIRE_OK(kvrt_cache_read(cache, static_cast<int32_t>(l), n, cells.data(), kg.data(), bytes_of(kg),
                                        vg.data(), bytes_of(vg)));
        for (uint32_t i = 0; i < n; ++i) {
            check_row(cache_type, &k_in[(size_t{l} * n + i) * ke], &kg[size_t{i} * ke], ke, outcome);
            check_row(cache_type, &v_in[(size_t{l} * n + i) * ve], &vg[size_t{i} * ve], ve, outcome);
        }
    }

    // One layer, packed rows of the second layer block, into new tokens: the
    // other layer of those cells is left alone.
    for (uint32_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(200 + i);
    const uint64_t kblock = kb.size() / s.layers, vblock = vb.size() / s.layers;
    kvrt_tensor_ref k1 = k, v1 = v;
    if (s.layers > 1) {
        k1.offset += kblock;  // layer block 1
        v1.offset += vblock;
    }
    if (kind == SourceKind::Host) {
        k1.host = kb.data();
        v1.host = vb.data();
    }
    std::vector<uint32_t> cells2(n);
    const int32_t last = static_cast<int32_t>(s.layers - 1);
    KVRT_REQUIRE_OK(kvrt_cache_store(cache, nullptr, &batch, last, &k1, &v1, cells2.data()));
    std::vector<float> kg(size_t{n} * ke), vg(size_t{n} * ve);
    KVRT_REQUIRE_OK(kvrt_cache_read(cache, last, n, cells2.data(), kg.data(), bytes_of(kg), vg.data(), bytes_of(vg)));
    const size_t block = s.layers > 1 ? n : 0;  // the rows read were layer block 1 (or 0 with one layer)
    for (uint32_t i = 0; i < n; ++i) {
        check_row(cache_type, &k_in[(block + i) * ke], &kg[size_t{i} * ke], ke, outcome);
        check_row(cache_type, &v_in[(block + i) * ve], &vg[size_t{i} * ve], ve, outcome);
    }
    // The first tokens still read back what they stored.
    KVRT_REQUIRE_OK(kvrt_cache_read(cache, 0, n, cells.data(), kg.data(), bytes_of(kg), nullptr, 0));
    for (uint32_t i = 0; i < n; ++i) check_row(cache_type, &k_in[size_t{i} * ke], &kg[size_t{i} * ke], ke, outcome);

    kvrt_buffer_destroy(kwrap);
    kvrt_buffer_destroy(vwrap);
    kvrt_buffer_destroy(kbuf);
    kvrt_buffer_destroy(vbuf);
}

}  // namespace

TEST_CASE("store converts and quantizes exactly like the CPU reference", "[cache][store]") {
    KVRT_EACH_KERNEL_VARIANT(variant);
    // A small binding limit splits every layer into many pieces.
    for (uint64_t binding : {uint64_t{0}, uint64_t{4096}}) {
        GpuContext ctx(variant.flags, binding);
        for (kvrt_type type : {KVRT_TYPE_F32, KVRT_TYPE_F16, KVRT_TYPE_Q8_0, KVRT_TYPE_Q4_0}) {
            Outcome o;
            for (kvrt_type input : {KVRT_TYPE_F32, KVRT_TYPE_F16}) {
                for (SourceKind kind : {SourceKind::Host, SourceKind::Buffer, SourceKind::Wrapped}) {
                    // A wrapped VkBuffer range must fit one binding.
                    if (kind == SourceKind::Wrapped && binding != 0) continue;
                    INFO("type " << kvrt_type_name(type) << " input " << kvrt_type_name(input) << " source " << int(kind) << " binding " << binding);
                    run_store_case(ctx, type, input, kind, Shape{}, &o);
                }
            }
            INFO("type " << kvrt_type_name(type));
            CHECK(o.values > 0);
            // GGML-identical codes are the goal; one step is what SPEC allows.
            CHECK(o.exact == o.values);
        }
    }
}

TEST_CASE("store works through staging memory and with one head of odd block count", "[cache][store]") {
    KVRT_EACH_KERNEL_VARIANT(variant);
    GpuContext ctx(variant.flags | KVRT_CONTEXT_FORCE_STAGING);
    Shape s;
    s.layers = 1;
    s.kv_heads = 1;  // Q8_0 rows of 3 blocks: 102 bytes, padded to 104
    s.dk = 96;
    s.dv = 32;
    s.capacity = 48;
    for (kvrt_type type : {KVRT_TYPE_F16, KVRT_TYPE_Q8_0, KVRT_TYPE_Q4_0}) {
        Outcome o;
        run_store_case(ctx, type, KVRT_TYPE_F32, SourceKind::Buffer, s, &o);
        CHECK(o.exact == o.values);
    }
}
