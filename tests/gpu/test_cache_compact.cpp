// Compaction and the size estimator.
//
// Compaction: a multi-layer cache (Q8_0 K with F16 V, and all F32) on a device
// whose bindings are limited to 4 KiB, so every layer is split into pieces
// and moves cross them, is fragmented, then compacted with a bounded number of
// moves (through a user stream), with a threshold above the fragmentation (no
// move), and completely. Every sequence must read back exactly what it stored
// (the CPU reference conversion of its input), the holes must be gone and
// n_attend must shrink.
//
// Estimator: kvrt_cache_estimate_size gives the bytes that kvrt_cache_create
// allocates (the growth of the context's device_bytes), for shapes that split
// into pieces too, and the SPEC's bytes per token of known models.
#include "gpu_test.hpp"

#include <algorithm>
#include <map>
#include <random>
#include <utility>
#include <vector>

#include "api/handles.hpp"
#include "common/random.hpp"
#include "reference/quant.hpp"

using namespace kvrt_test;
namespace ref = kvrt::ref;

namespace {

constexpr uint64_t kBinding = 4096;

// What a row of `x` reads back as from a cache of type `t`.
std::vector<float> stored_as(kvrt_type t, const float* x, uint32_t n) {
    std::vector<uint8_t> enc(ref::row_bytes(ref_type(t), n));
    std::vector<float> out(n);
    ref::encode_row(ref_type(t), x, n, enc.data());
    ref::decode_row(ref_type(t), enc.data(), n, out.data());
    return out;
}

// A cache, the rows each token should hold, and which token each
// (sequence, position) has.
class FragmentedCache {
public:
    static constexpr uint32_t kLayers = 3, kKvHeads = 2, kDim = 64, kCapacity = 100;
    static constexpr int32_t kSeqs = 4;
    static constexpr uint32_t kRowElems = kKvHeads * kDim;

    FragmentedCache(kvrt_context ctx, kvrt_type tk, kvrt_type tv) : tk_(tk), tv_(tv), rng_(1234) {
        kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
        d.n_layers = kLayers;
        d.n_heads = 2 * kKvHeads;
        d.n_kv_heads = kKvHeads;
        d.head_dim_k = kDim;
        d.capacity = kCapacity;
        d.max_seqs = kSeqs;
        d.type_k = tk;
        d.type_v = tv;
        KVRT_REQUIRE_OK(kvrt_cache_create(ctx, &d, cache_.out()));
    }
    FragmentedCache(const FragmentedCache&) = delete;
    FragmentedCache& operator=(const FragmentedCache&) = delete;

    kvrt_cache get() const { return cache_; }
    const kvrt::kv::CellTable& table() const { return kvrt::api::cache_of(cache_)->table(); }

    // Stores `n` tokens of `seq` at its next positions.
    void store(int32_t seq, uint32_t n) {
        std::vector<int32_t> pos(n), ids(n, seq);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        std::vector<float> k(size_t{kLayers} * n * kRowElems), v(k.size());
        for (auto& x : k) x = normal(rng_);
        for (auto& x : v) x = normal(rng_);
        for (uint32_t i = 0; i < n; ++i) {
            pos[i] = next_pos_[seq]++;
            const uint32_t token = static_cast<uint32_t>(tokens_.size());
            Token t;
            for (uint32_t l = 0; l < kLayers; ++l) {
                const size_t at = (size_t{l} * n + i) * kRowElems;
                const auto kl = stored_as(tk_, &k[at], kRowElems), vl = stored_as(tv_, &v[at], kRowElems);
                t.k.insert(t.k.end(), kl.begin(), kl.end());
                t.v.insert(t.v.end(), vl.begin(), vl.end());
            }
            tokens_.push_back(std::move(t));
            seqs_[seq][pos[i]] = token;
        }
        const kvrt_tensor_ref kr = host_tensor(k.data());
        const kvrt_tensor_ref vr = host_tensor(v.data());
        const kvrt_batch b = make_batch(n, pos.data(), ids.data());
        KVRT_REQUIRE_OK(kvrt_cache_store(cache_, nullptr, &b, -1, &kr, &vr, nullptr));
    }

    void seq_cp(int32_t src, int32_t dst, int32_t p0, int32_t p1) {
        KVRT_REQUIRE_OK(kvrt_cache_seq_cp(cache_, src, dst, p0, p1));
        for (const auto& [p, t] : seqs_[src]) {
            if (p < p0 || (p1 >= 0 && p >= p1)) continue;
            seqs_[dst][p] = t;
            next_pos_[dst] = std::max(next_pos_[dst], p + 1);
        }
    }

    void seq_rm(int32_t seq, int32_t p0, int32_t p1) {
        KVRT_REQUIRE_OK(kvrt_cache_seq_rm(cache_, seq, p0, p1));
        auto& m = seqs_[seq];
        for (auto it = m.begin(); it != m.end();)
            it = it->first >= p0 && (p1 < 0 || it->first < p1) ? m.erase(it) : ++it;
    }

    // Every sequence, found through the table, holds exactly its tokens'
    // rows in every layer.
    void require_sequences_intact() const {
        const kvrt::kv::CellTable& t = table();
        REQUIRE(t.verify() == KVRT_SUCCESS);
        std::vector<uint32_t> cells;
        for (int32_t s = 0; s < kSeqs; ++s) {
            KVRT_REQUIRE_OK(t.cells_of_seq(s, &cells));
            REQUIRE(cells.size() == seqs_[s].size());
            const uint32_t n = static_cast<uint32_t>(cells.size());
            std::vector<float> k(size_t{n} * kRowElems), v(k.size());
            for (uint32_t l = 0; l < kLayers && n > 0; ++l) {
                KVRT_REQUIRE_OK(kvrt_cache_read(cache_, static_cast<int32_t>(l), n, cells.data(), k.data(), bytes_of(k),
                                                v.data(), bytes_of(v)));
                for (uint32_t i = 0; i < n; ++i) {
                    const int32_t pos = t.cell_pos(cells[i]);
                    const auto it = seqs_[s].find(pos);
                    INFO("sequence " << s << ", position " << pos << ", cell " << cells[i] << ", layer " << l);
                    REQUIRE(it != seqs_[s].end());
                    const Token& tok = tokens_[it->second];
                    const size_t got = size_t{i} * kRowElems, want = size_t{l} * kRowElems;
                    REQUIRE(std::equal(&k[got], &k[got + kRowElems], &tok.k[want]));
                    REQUIRE(std::equal(&v[got], &v[got + kRowElems], &tok.v[want]));
                }
            }
        }
    }

    kvrt_cache_info info() const {
        kvrt_cache_info i = KVRT_CACHE_INFO_INIT;
        KVRT_REQUIRE_OK(kvrt_cache_get_info(cache_, &i));
        return i;
    }

    // Used cells at or above used(): each must move for the holes to go.
    uint32_t moves_needed() const {
        uint32_t n = 0;
        for (uint32_t c = table().used(); c < kCapacity; ++c) n += table().cell_is_empty(c) ? 0 : 1;
        return n;
    }

private:
    struct Token {
        std::vector<float> k, v;  // what each layer reads back, layer after layer
    };

    Cache cache_;
    kvrt_type tk_, tv_;
    Rng rng_;
    std::vector<Token> tokens_;
    std::map<int32_t, uint32_t> seqs_[kSeqs];  // position -> token
    int32_t next_pos_[kSeqs] = {};
};

uint32_t round_up(uint32_t x, uint32_t to) { return (x + to - 1) / to * to; }

// The device bytes of one array of a cache, from the estimator's documented
// rule: rows padded to 4 bytes, split into pieces of whole rows no larger than
// the binding, each piece padded to 16 bytes.
uint64_t array_bytes(uint64_t row_bytes, uint32_t capacity, uint64_t binding) {
    const uint64_t stride = (row_bytes + 3) / 4 * 4;
    const uint64_t per_piece = std::min<uint64_t>(binding / stride, capacity);
    const uint64_t full = capacity / per_piece, last = capacity % per_piece;
    auto pad16 = [](uint64_t x) { return (x + 15) / 16 * 16; };
    return full * pad16(per_piece * stride) + (last ? pad16(last * stride) : 0);
}

uint64_t row_bytes(kvrt_type t, uint32_t kv_heads, uint32_t dim) {
    return uint64_t{kv_heads} * dim / kvrt_type_block_size(t) * kvrt_type_block_bytes(t);
}

}  // namespace

TEST_CASE("compaction keeps every sequence's rows, across binding pieces", "[cache][compact]") {
    GpuContext ctx(0, kBinding);
    using Types = std::pair<kvrt_type, kvrt_type>;
    for (auto [tk, tv] : {Types{KVRT_TYPE_Q8_0, KVRT_TYPE_F16}, Types{KVRT_TYPE_F32, KVRT_TYPE_F32}}) {
        INFO("K " << tk << ", V " << tv);
        FragmentedCache c(ctx, tk, tv);
        using F = FragmentedCache;
        const auto& geo = kvrt::api::cache_of(c.get())->geometry();
        REQUIRE(geo.k.pieces > 2);
        REQUIRE(geo.v.pieces > 2);

        // Interleaved stores of four sequences (sequence 3 also shares a prefix
        // of sequence 0), then removals that leave holes low in the cache.
        for (uint32_t round = 0; round < 6; ++round)
            for (int32_t s = 0; s < 3; ++s) c.store(s, 2 + (round + static_cast<uint32_t>(s)) % 4);
        c.seq_cp(0, 3, 0, 6);
        c.store(3, 12);
        REQUIRE(c.info().used >= 70);
        c.require_sequences_intact();
        c.seq_rm(1, -1, -1);
        c.seq_rm(2, 3, 9);
        c.seq_rm(0, 4, 7);  // cells still used by sequence 3's shared prefix stay
        c.seq_rm(3, 14, 16);
        const kvrt_cache_info fragmented = c.info();
        REQUIRE(fragmented.fragmentation > 0.2f);
        const uint32_t needed = c.moves_needed();
        REQUIRE(needed > 8);
        // The lowest hole and the highest used cell are in different pieces of
        // every array, so the moves cross pieces.
        uint32_t lowest_hole = 0;
        while (!c.table().cell_is_empty(lowest_hole)) ++lowest_hole;
        const uint32_t highest = c.table().used_end() - 1;
        REQUIRE(lowest_hole / geo.k.cells_per_piece != highest / geo.k.cells_per_piece);
        REQUIRE(lowest_hole / geo.v.cells_per_piece != highest / geo.v.cells_per_piece);
        c.require_sequences_intact();

        // A bounded compaction, recorded into a user stream.
        uint32_t moved = 0;
        Stream stream(ctx);
        run_stream(stream, [&] { KVRT_REQUIRE_OK(kvrt_cache_compact(c.get(), stream, 0.0f, 5, &moved)); });
        CHECK(moved == 5);
        const kvrt_cache_info bounded = c.info();
        CHECK(bounded.used == fragmented.used);
        CHECK(bounded.fragmentation < fragmented.fragmentation);
        CHECK(bounded.fragmentation > 0.0f);
        CHECK(c.moves_needed() == needed - 5);
        c.require_sequences_intact();

        // A threshold above the fragmentation: nothing moves.
        KVRT_REQUIRE_OK(kvrt_cache_compact(c.get(), nullptr, bounded.fragmentation + 0.01f, 0, &moved));
        CHECK(moved == 0);
        CHECK(c.info().fragmentation == bounded.fragmentation);

        // A complete compaction: every used cell below used(), no holes, and
        // attention reads fewer cells.
        KVRT_REQUIRE_OK(kvrt_cache_compact(c.get(), nullptr, 0.0f, 0, &moved));
        CHECK(moved == needed - 5);
        const kvrt_cache_info done = c.info();
        CHECK(done.fragmentation == 0.0f);
        CHECK(done.used == fragmented.used);
        CHECK(c.table().used_end() == done.used);
        CHECK(done.n_attend == std::min(round_up(done.used, 32), F::kCapacity));
        CHECK(done.n_attend < fragmented.n_attend);
        c.require_sequences_intact();

        // Nothing left to do.
        KVRT_REQUIRE_OK(kvrt_cache_compact(c.get(), nullptr, 0.0f, 0, &moved));
        CHECK(moved == 0);
    }
}

TEST_CASE("the estimator gives the device bytes that creation allocates", "[cache][compact][estimate]") {
    struct Shape {
        uint64_t binding;  // 0: the device's
        uint32_t layers, kv_heads, dim_k, dim_v, capacity;
        kvrt_type tk, tv;
    };
    const Shape shapes[] = {
        {0, 2, 2, 32, 32, 96, KVRT_TYPE_F16, KVRT_TYPE_F16},
        {kBinding, 3, 2, 64, 64, 100, KVRT_TYPE_Q8_0, KVRT_TYPE_F16},  // pieces of 30 and 16 cells
        {kBinding, 1, 3, 96, 64, 77, KVRT_TYPE_Q4_0, KVRT_TYPE_F32},   // 54-byte rows padded to 56
        {0, 5, 1, 32, 32, 33, KVRT_TYPE_Q8_0, KVRT_TYPE_Q8_0},         // 34-byte rows padded to 36
        {kBinding, 2, 8, 128, 128, 40, KVRT_TYPE_F16, KVRT_TYPE_F16},  // one row per piece (2 KiB of 4)
    };
    for (const Shape& s : shapes) {
        INFO("binding " << s.binding << ", " << s.layers << " layers, " << s.kv_heads << " heads, dims " << s.dim_k
                        << "/" << s.dim_v << ", capacity " << s.capacity << ", types " << s.tk << "/" << s.tv);
        GpuContext ctx(0, s.binding);
        kvrt_device_info dev = KVRT_DEVICE_INFO_INIT;
        KVRT_REQUIRE_OK(kvrt_context_get_device_info(ctx, &dev));
        const uint64_t binding = s.binding ? s.binding : dev.max_storage_buffer_range;

        kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
        d.n_layers = s.layers;
        d.n_heads = s.kv_heads;
        d.n_kv_heads = s.kv_heads;
        d.head_dim_k = s.dim_k;
        d.head_dim_v = s.dim_v;
        d.capacity = s.capacity;
        d.type_k = s.tk;
        d.type_v = s.tv;
        kvrt_cache_estimate e = KVRT_CACHE_ESTIMATE_INIT;
        KVRT_REQUIRE_OK(kvrt_cache_estimate_size(ctx, &d, &e));

        // The documented formulas.
        const uint64_t rk = row_bytes(s.tk, s.kv_heads, s.dim_k), rv = row_bytes(s.tv, s.kv_heads, s.dim_v);
        CHECK(e.bytes_per_token == s.layers * (rk + rv));
        CHECK(e.data_bytes == e.bytes_per_token * s.capacity);
        CHECK(e.max_binding_bytes == binding);
        // K and V of every layer, the cell metadata the device keeps (a
        // position and 64 sequence bits per cell: the default 64 sequences),
        // and, that metadata being one piece, a word per cell for the
        // sequences' lists of cells.
        REQUIRE(12 * s.capacity <= binding);
        CHECK(e.device_bytes == s.layers * (array_bytes(rk, s.capacity, binding) + array_bytes(rv, s.capacity, binding)) +
                                    array_bytes(12, s.capacity, binding) + array_bytes(4, s.capacity, binding));

        // What creation allocates, and gives back.
        const uint64_t before = device_bytes(ctx);
        Cache cache;
        KVRT_REQUIRE_OK(kvrt_cache_create(ctx, &d, cache.out()));
        CHECK(device_bytes(ctx) - before == e.device_bytes);
        kvrt_cache_info info = KVRT_CACHE_INFO_INIT;
        KVRT_REQUIRE_OK(kvrt_cache_get_info(cache, &info));
        CHECK(info.device_bytes == e.device_bytes);
        CHECK(info.bytes_per_token == e.bytes_per_token);
        CHECK(info.capacity == s.capacity);
        cache.reset();
        // Freed once the device is done with it (a new arena's zero fill
        // may still run where device memory is not mapped).
        CHECK(settled_device_bytes(ctx, before) == before);
    }
}

TEST_CASE("the estimator gives the SPEC's bytes per token without a context", "[cache][compact][estimate]") {
    struct Model {
        const char* name;
        uint32_t layers, kv_heads, dim;
        kvrt_type type;  // KVRT_TYPE_UNDEFINED: the types KVRT_CACHE_DESC_INIT sets
        uint64_t bytes_per_token;
    };
    const Model models[] = {
        {"Llama-3.2-1B", 16, 8, 64, KVRT_TYPE_F16, 32 * 1024},
        {"Llama-3.2-3B", 28, 8, 128, KVRT_TYPE_F16, 112 * 1024},
        {"Llama-2-7B", 32, 32, 128, KVRT_TYPE_F16, 512 * 1024},
        {"Llama-2-7B, default types", 32, 32, 128, KVRT_TYPE_UNDEFINED, 512 * 1024},
        {"Llama-2-7B, Q8_0", 32, 32, 128, KVRT_TYPE_Q8_0, 32 * 32 * 2 * 4 * 34},
        {"Llama-2-7B, Q4_0", 32, 32, 128, KVRT_TYPE_Q4_0, 32 * 32 * 2 * 4 * 18},
    };
    for (const Model& m : models) {
        INFO(m.name);
        kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
        d.n_layers = m.layers;
        d.n_heads = 32;
        d.n_kv_heads = m.kv_heads;
        d.head_dim_k = m.dim;
        if (m.type != KVRT_TYPE_UNDEFINED) d.type_k = d.type_v = m.type;
        for (uint32_t capacity : {1u, 4096u, 1u << 30}) {
            d.capacity = capacity;
            kvrt_cache_estimate e = KVRT_CACHE_ESTIMATE_INIT;
            KVRT_REQUIRE_OK(kvrt_cache_estimate_size(nullptr, &d, &e));
            CHECK(e.bytes_per_token == m.bytes_per_token);
            CHECK(e.data_bytes == m.bytes_per_token * capacity);
            CHECK(e.max_binding_bytes == 128ull << 20);
            CHECK(e.device_bytes >= e.data_bytes);
        }
    }
}
