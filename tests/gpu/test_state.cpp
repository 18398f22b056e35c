// Cache state: save and load of the whole cache and of one sequence, in
// memory and in files, for every stored type and both layouts; conversion
// between types and layouts on load; loads that fail change nothing (bad
// bytes, caches that do not fit, injected device failures); files written
// atomically; host swap. Expectations come from the data the tests stored,
// encoded by the CPU reference quantizers, never from the code under test.
#include "gpu_test.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <unistd.h>
#include <vector>

#include "api/handles.hpp"
#include "core/fault.hpp"
#include "reference/half.hpp"
#include "tensor_util.hpp"

using namespace kvrt_test;

namespace {

constexpr uint32_t kLayers = 2, kHeads = 4, kKvHeads = 2, kDim = 32, kCapacity = 40, kSeqs = 4;
constexpr uint32_t kElems = kKvHeads * kDim;  // one token's K (or V) values of one layer

QuantScale scale_of(kvrt_type t, uint32_t layer) {
    return t == KVRT_TYPE_U8_STATIC ? QuantScale{0.03f + 0.01f * float(layer), 120}
                                    : QuantScale{0.0004f * float(layer + 1), 30000};
}

struct Spec {
    kvrt_type tk = KVRT_TYPE_F16, tv = KVRT_TYPE_F16;
    kvrt_layout layout = KVRT_LAYOUT_CELLS;
    uint32_t capacity = kCapacity;
    uint32_t seq_len = 9;  // static layout: windows of 8 rows
    kvrt_flags flags = 0;
};

// A cache of `spec`, destroyed at scope exit.
class TestCache {
public:
    TestCache(kvrt_context ctx, const Spec& spec) : spec_(spec) {
        std::vector<QuantScale> k, v;
        for (uint32_t l = 0; l < kLayers; ++l) {
            if (is_static_scale(spec.tk)) k.push_back(scale_of(spec.tk, l));
            if (is_static_scale(spec.tv)) v.push_back(scale_of(spec.tv, l));
        }
        scales_ = std::make_unique<StaticScales>(k, v);
        kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
        d.n_layers = kLayers;
        d.n_heads = kHeads;
        d.n_kv_heads = kKvHeads;
        d.head_dim_k = kDim;
        d.head_dim_v = kDim;
        d.capacity = spec.layout == KVRT_LAYOUT_STATIC ? 0 : spec.capacity;
        d.max_seqs = kSeqs;
        d.type_k = spec.tk;
        d.type_v = spec.tv;
        d.layout = spec.layout;
        d.flags = spec.flags;
        kvrt_static_layout_desc sl = KVRT_STATIC_LAYOUT_DESC_INIT;
        sl.seq_len = spec.seq_len;
        const void* chain = nullptr;
        if (spec.layout == KVRT_LAYOUT_STATIC) {
            sl.next = chain;
            chain = &sl;
        }
        if (!k.empty() || !v.empty()) {
            scales_->desc()->next = chain;
            chain = scales_->desc();
        }
        d.next = chain;
        KVRT_REQUIRE_OK(kvrt_cache_create(ctx, &d, c_.out()));
    }
    operator kvrt_cache() const { return c_; }
    const kvrt::kv::CellTable& table() const { return kvrt::api::cache_of(c_)->table(); }
    const Spec& spec() const { return spec_; }

private:
    Spec spec_;
    std::unique_ptr<StaticScales> scales_;
    Cache c_;
};

// A token the tests stored: position, sequences, and its f32 values
// ([layer][kv_head][dim] for K and for V).
struct Token {
    int32_t pos = 0;
    std::vector<int32_t> seqs;
    std::vector<float> k, v;
};

// Stores tokens (all layers, f32 values) in one call.
void store(kvrt_cache c, const std::vector<Token>& toks) {
    std::vector<int32_t> pos, ids;
    std::vector<uint32_t> counts;
    std::vector<float> k, v;  // [layer][token][head][dim]
    for (uint32_t l = 0; l < kLayers; ++l)
        for (const Token& t : toks) {
            k.insert(k.end(), t.k.begin() + l * kElems, t.k.begin() + (l + 1) * kElems);
            v.insert(v.end(), t.v.begin() + l * kElems, t.v.begin() + (l + 1) * kElems);
        }
    for (const Token& t : toks) {
        pos.push_back(t.pos);
        counts.push_back(static_cast<uint32_t>(t.seqs.size()));
        ids.insert(ids.end(), t.seqs.begin(), t.seqs.end());
    }
    const kvrt_batch b = make_batch(static_cast<uint32_t>(toks.size()), pos.data(), ids.data(), counts.data());
    const kvrt_tensor_ref kr = host_tensor(k.data()), vr = host_tensor(v.data());
    KVRT_REQUIRE_OK(kvrt_cache_store(c, nullptr, &b, -1, &kr, &vr, nullptr));
}

std::vector<Token> make_tokens(const std::vector<std::pair<int32_t, std::vector<int32_t>>>& list, uint32_t seed) {
    std::vector<Token> out;
    for (const auto& [pos, seqs] : list) {
        Token t;
        t.pos = pos;
        t.seqs = seqs;
        t.k = random_values(size_t{kLayers} * kElems, seed++);
        t.v = random_values(size_t{kLayers} * kElems, seed++);
        out.push_back(t);
    }
    return out;
}

// A cache's contents as an engine sees them: for every cell in use, its
// position, sequences and stored K/V bytes, plus the cells' counters.
struct Snapshot {
    std::vector<int32_t> pos, delta;
    std::vector<uint32_t> seq_bits;
    uint32_t used = 0, used_end = 0, head = 0;
    std::vector<uint8_t> rows;
    bool operator==(const Snapshot& o) const {
        return pos == o.pos && delta == o.delta && seq_bits == o.seq_bits && used == o.used &&
               used_end == o.used_end && head == o.head && rows == o.rows;
    }
};

Snapshot snapshot(const TestCache& c) {
    const auto& t = c.table();
    Snapshot s;
    std::vector<uint32_t> cells;
    for (uint32_t i = 0; i < t.capacity(); ++i) {
        s.pos.push_back(t.cell_pos(i));
        s.delta.push_back(t.cell_delta(i));
        uint32_t bits = 0;
        for (uint32_t q = 0; q < kSeqs; ++q) bits |= t.cell_has_seq(i, int32_t(q)) ? 1u << q : 0u;
        s.seq_bits.push_back(bits);
        cells.push_back(i);  // every cell, used or not: the whole arena
    }
    s.used = t.used();
    s.used_end = t.used_end();
    s.head = t.head();
    s.rows = read_all_raw(c, kLayers, cells);
    return s;
}

// The stored rows of the cells in use, in cell order.
std::vector<uint8_t> used_rows(const TestCache& c) {
    std::vector<uint32_t> cells;
    for (uint32_t i = 0; i < c.table().capacity(); ++i)
        if (!c.table().cell_is_empty(i)) cells.push_back(i);
    return read_all_raw(c, kLayers, cells);
}

// The cell of sequence `seq` at `pos`, or -1.
int64_t cell_of(const TestCache& c, int32_t seq, int32_t pos) {
    const auto& t = c.table();
    for (uint32_t i = 0; i < t.capacity(); ++i)
        if (t.cell_pos(i) == pos && t.cell_has_seq(i, seq)) return i;
    return -1;
}

// The bytes the CPU reference stores for `x` (one layer of one token) in an
// array of type `t` at `layer`.
std::vector<uint8_t> expected_row(kvrt_type t, const float* x, uint32_t layer) {
    return reference_encode(t, x, kElems, is_static_scale(t) ? scale_of(t, layer) : QuantScale{});
}

// f32 values of a stored row, decoded by the CPU reference.
std::vector<float> decode(kvrt_type t, const std::vector<uint8_t>& bytes, uint32_t layer) {
    namespace ref = kvrt::ref;
    std::vector<float> out(kElems);
    if (is_static_scale(t)) {
        const QuantScale q = scale_of(t, layer);
        ref::decode_row_static(t == KVRT_TYPE_U8_STATIC ? ref::StaticType::U8 : ref::StaticType::U16, bytes.data(),
                               kElems, q.scale, q.zero_point, out.data());
    } else {
        ref::decode_row(ref_type(t), bytes.data(), kElems, out.data());
    }
    return out;
}

// Checks that `seq` of `c` holds exactly the tokens `toks` (at their
// positions) with the rows `expect(token, layer, array)`.
template <class F>
void check_holds(const TestCache& c, int32_t seq, const std::vector<const Token*>& toks, F&& expect) {
    CHECK(c.table().seq_cell_count(seq) == toks.size());
    for (const Token* t : toks) {
        const int64_t cell = cell_of(c, seq, t->pos);
        INFO("sequence " << seq << " position " << t->pos);
        REQUIRE(cell >= 0);
        for (uint32_t l = 0; l < kLayers; ++l) {
            const std::vector<uint32_t> one{static_cast<uint32_t>(cell)};
            CHECK(read_raw(c, int32_t(l), KVRT_KV_ARRAY_K, one) == expect(*t, l, true));
            CHECK(read_raw(c, int32_t(l), KVRT_KV_ARRAY_V, one) == expect(*t, l, false));
        }
    }
}

std::vector<uint8_t> file_bytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

std::string temp_dir() {
    char tmpl[] = "/tmp/kvrt-state-XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    return tmpl;
}

std::vector<std::string> dir_entries(const std::string& dir) {
    std::vector<std::string> out;
    if (DIR* d = opendir(dir.c_str())) {
        while (dirent* e = readdir(d))
            if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") out.push_back(e->d_name);
        closedir(d);
    }
    std::sort(out.begin(), out.end());
    return out;
}

void remove_dir(const std::string& dir) {
    for (const std::string& e : dir_entries(dir)) std::remove((dir + "/" + e).c_str());
    rmdir(dir.c_str());
}

// The tokens of the round-trip tests: sequence 0 (with a hole), sequence 1,
// and a prefix shared by sequences 2 and 3.
std::vector<Token> mixed_tokens(uint32_t seed) {
    return make_tokens({{0, {0}}, {1, {0}}, {2, {0}}, {3, {0}}, {4, {0}}, {0, {1}}, {1, {1}}, {2, {1}},
                        {0, {2, 3}}, {1, {2, 3}}, {2, {2}}, {2, {3}}, {3, {3}}},
                       seed);
}

// The tokens of `toks` that belong to `seq`, after `removed` positions of
// sequence 0 were dropped.
std::vector<const Token*> of_seq(const std::vector<Token>& toks, int32_t seq, int32_t removed = -1) {
    std::vector<const Token*> out;
    for (const Token& t : toks)
        if (std::find(t.seqs.begin(), t.seqs.end(), seq) != t.seqs.end() && !(seq == 0 && t.pos == removed))
            out.push_back(&t);
    return out;
}

// Rows stored from a token's values in a cache of (tk, tv).
auto stored_as(kvrt_type tk, kvrt_type tv) {
    return [tk, tv](const Token& t, uint32_t l, bool k) {
        return expected_row(k ? tk : tv, (k ? t.k : t.v).data() + l * kElems, l);
    };
}

}  // namespace

TEST_CASE("state: round trips of the whole cache and of one sequence, in memory and in files", "[state]") {
    GpuContext ctx;
    const std::string dir = temp_dir();
    const std::pair<kvrt_type, kvrt_type> types[] = {
        {KVRT_TYPE_F32, KVRT_TYPE_F32},        {KVRT_TYPE_F16, KVRT_TYPE_F16},
        {KVRT_TYPE_Q8_0, KVRT_TYPE_Q8_0},      {KVRT_TYPE_Q4_0, KVRT_TYPE_Q4_0},
        {KVRT_TYPE_U8_STATIC, KVRT_TYPE_U16_STATIC}, {KVRT_TYPE_Q8_0, KVRT_TYPE_F16},
    };
    for (const auto& [tk, tv] : types) {
        INFO("K " << kvrt_type_name(tk) << ", V " << kvrt_type_name(tv));
        Spec spec;
        spec.tk = tk;
        spec.tv = tv;
        TestCache a(ctx, spec);
        const std::vector<Token> toks = mixed_tokens(11);
        store(a, toks);
        KVRT_REQUIRE_OK(kvrt_cache_seq_rm(a, 0, 2, 3));  // a hole
        const auto expect = stored_as(tk, tv);
        for (int32_t s = 0; s < int32_t(kSeqs); ++s) check_holds(a, s, of_seq(toks, s, 2), expect);

        // The whole cache, in memory: the same cells, sequences and bytes.
        const std::vector<uint8_t> whole = save_state(a, -1);
        TestCache b(ctx, spec);
        store(b, make_tokens({{7, {1}}}, 99));  // replaced by the load
        KVRT_REQUIRE_OK(kvrt_cache_state_load(b, -1, whole.data(), whole.size()));
        const Snapshot sa = snapshot(a), sb = snapshot(b);
        CHECK(sa.pos == sb.pos);
        CHECK(sa.seq_bits == sb.seq_bits);
        CHECK(sa.used == sb.used);
        for (int32_t s = 0; s < int32_t(kSeqs); ++s) check_holds(b, s, of_seq(toks, s, 2), expect);
        CHECK(b.table().verify() == KVRT_SUCCESS);
        // Saving the loaded cache gives the same bytes.
        CHECK(save_state(b, -1) == whole);

        // One sequence (shared cells included) into another sequence id.
        const std::vector<uint8_t> seq2 = save_state(a, 2);
        TestCache c(ctx, spec);
        store(c, make_tokens({{0, {1}}, {5, {3}}}, 98));
        KVRT_REQUIRE_OK(kvrt_cache_state_load(c, 3, seq2.data(), seq2.size()));
        check_holds(c, 3, of_seq(toks, 2), expect);
        CHECK(c.table().seq_cell_count(1) == 1);  // other sequences untouched
        CHECK(c.table().verify() == KVRT_SUCCESS);

        // Files.
        const std::string path = dir + "/whole.kvrt";
        KVRT_REQUIRE_OK(kvrt_cache_state_save_file(a, -1, path.c_str()));
        CHECK(file_bytes(path) == whole);
        TestCache d(ctx, spec);
        KVRT_REQUIRE_OK(kvrt_cache_state_load_file(d, -1, path.c_str()));
        CHECK(used_rows(d) == used_rows(a));
        const std::string spath = dir + "/seq0.kvrt";
        KVRT_REQUIRE_OK(kvrt_cache_state_save_file(a, 0, spath.c_str()));
        KVRT_REQUIRE_OK(kvrt_cache_state_load_file(d, 1, spath.c_str()));
        check_holds(d, 1, of_seq(toks, 0, 2), expect);
        CHECK(dir_entries(dir) == std::vector<std::string>{"seq0.kvrt", "whole.kvrt"});
    }
    CHECK(ctx.validation_errors() == 0);
    remove_dir(dir);
}

TEST_CASE("state: saving applies pending shifts first", "[state]") {
    GpuContext ctx;
    Spec spec;
    spec.tk = spec.tv = KVRT_TYPE_F32;
    TestCache a(ctx, spec), b(ctx, spec);
    const std::vector<Token> toks = make_tokens({{0, {0}}, {1, {0}}, {2, {0}}}, 5);
    store(a, toks);
    store(b, toks);
    KVRT_REQUIRE_OK(kvrt_cache_seq_add(a, 0, 1, -1, 4));
    KVRT_REQUIRE_OK(kvrt_cache_seq_add(b, 0, 1, -1, 4));
    KVRT_REQUIRE_OK(kvrt_cache_apply_shifts(b, nullptr));
    const std::vector<uint8_t> sa = save_state(a, 0);
    CHECK(a.table().shifted_cell_count() == 0);
    CHECK(sa == save_state(b, 0));
    // The shifted K is not the stored K: the rotation happened.
    const std::vector<uint32_t> cell{static_cast<uint32_t>(cell_of(a, 0, 5))};
    CHECK(read_raw(a, 0, KVRT_KV_ARRAY_K, cell) != expected_row(KVRT_TYPE_F32, toks[1].k.data(), 0));
    CHECK(ctx.validation_errors() == 0);
}

TEST_CASE("state: conversion between types and layouts on load", "[state]") {
    GpuContext ctx;
    const std::vector<Token> toks = make_tokens({{0, {0}}, {1, {0}}, {2, {0}}, {3, {0}}, {4, {0}}, {5, {0}},
                                                 {6, {0}}, {7, {0}}, {8, {0}}, {9, {0}}, {0, {1, 2}}, {1, {1, 2}}},
                                                21);
    struct Conv {
        Spec from, to;
    };
    Spec f16, q8, q4, u8, st_f16;
    q8.tk = q8.tv = KVRT_TYPE_Q8_0;
    q4.tk = KVRT_TYPE_Q4_0;
    q4.tv = KVRT_TYPE_F32;
    u8.tk = u8.tv = KVRT_TYPE_U8_STATIC;
    st_f16.layout = KVRT_LAYOUT_STATIC;
    Spec small = f16;
    small.capacity = 14;  // fewer cells than the saved indices reach
    const Conv convs[] = {{f16, q8}, {q8, f16}, {f16, q4}, {q8, u8}, {f16, st_f16}, {st_f16, f16}, {f16, small}};
    for (const Conv& cv : convs) {
        INFO("from K " << kvrt_type_name(cv.from.tk) << " layout " << cv.from.layout << " to K "
                       << kvrt_type_name(cv.to.tk) << "/" << kvrt_type_name(cv.to.tv) << " layout " << cv.to.layout);
        TestCache a(ctx, cv.from);
        if (cv.from.layout == KVRT_LAYOUT_STATIC) {
            std::vector<Token> one_seq;  // the static layout: one sequence per token, newest 8 of each
            for (const Token& t : toks)
                for (int32_t s : t.seqs) {
                    Token u = t;
                    u.seqs = {s};
                    one_seq.push_back(u);
                }
            std::vector<Token> part(one_seq.begin() + 2, one_seq.end());  // 8 of sequence 0, and the others
            store(a, part);
        } else {
            store(a, toks);
        }
        // What the target must hold: the source's stored rows, decoded by
        // the reference and encoded again in the target's type.
        const auto expect = [&](const Token& t, uint32_t l, bool k) {
            const kvrt_type from = k ? cv.from.tk : cv.from.tv, to = k ? cv.to.tk : cv.to.tv;
            const std::vector<uint8_t> src = expected_row(from, (k ? t.k : t.v).data() + l * kElems, l);
            if (from == to) return src;
            const std::vector<float> x = decode(from, src, l);
            return expected_row(to, x.data(), l);
        };
        std::vector<const Token*> want0;
        for (const Token* t : of_seq(toks, 0))
            if (cv.to.layout != KVRT_LAYOUT_STATIC && cv.from.layout != KVRT_LAYOUT_STATIC ? true : t->pos >= 2)
                want0.push_back(t);
        // One sequence.
        const std::vector<uint8_t> s0 = save_state(a, 0);
        TestCache b(ctx, cv.to);
        KVRT_REQUIRE_OK(kvrt_cache_state_load(b, 3, s0.data(), s0.size()));
        check_holds(b, 3, want0, expect);
        // The whole cache.
        const std::vector<uint8_t> all = save_state(a, -1);
        TestCache c(ctx, cv.to);
        KVRT_REQUIRE_OK(kvrt_cache_state_load(c, -1, all.data(), all.size()));
        check_holds(c, 0, want0, expect);
        check_holds(c, 1, of_seq(toks, 1), expect);
        check_holds(c, 2, of_seq(toks, 2), expect);
        CHECK(c.table().verify() == KVRT_SUCCESS);
    }
    CHECK(ctx.validation_errors() == 0);
}

TEST_CASE("state: failed loads change nothing", "[state]") {
    GpuContext ctx;
    Spec spec;
    spec.tk = KVRT_TYPE_Q8_0;
    TestCache a(ctx, spec);
    const std::vector<Token> toks = mixed_tokens(31);
    store(a, toks);
    const std::vector<uint8_t> whole = save_state(a, -1), seq0 = save_state(a, 0);

    TestCache c(ctx, spec);
    store(c, make_tokens({{0, {0}}, {1, {0}}, {4, {1}}, {0, {2}}}, 41));
    KVRT_REQUIRE_OK(kvrt_cache_seq_add(c, 1, 0, -1, 3));  // a pending shift, which must stay pending
    Snapshot before = snapshot(c);
    REQUIRE(before.used == 4);
    REQUIRE(snapshot(c) == before);
    auto unchanged = [&]() {
        const Snapshot now = snapshot(c);
        CHECK(now.pos == before.pos);
        CHECK(now.delta == before.delta);
        CHECK(now.seq_bits == before.seq_bits);
        CHECK(now.head == before.head);
        CHECK(now.used_end == before.used_end);
        CHECK(now.used == before.used);
        CHECK(now.rows == before.rows);
        CHECK(c.table().verify() == KVRT_SUCCESS);
    };

    // Malformed bytes.
    for (size_t n : {size_t(0), size_t(10), size_t(71), whole.size() / 2, whole.size() - 1}) {
        INFO("truncated to " << n);
        CHECK(kvrt_cache_state_load(c, -1, whole.data(), n) == KVRT_ERROR_CORRUPT_STATE);
        unchanged();
    }
    for (size_t at : {size_t(3), size_t(30), size_t(70), whole.size() / 2, whole.size() - 3}) {
        std::vector<uint8_t> m = whole;
        m[at] ^= 0x10;
        INFO("flipped byte " << at);
        const kvrt_result r = kvrt_cache_state_load(c, -1, m.data(), m.size());
        CHECK((r == KVRT_ERROR_CORRUPT_STATE || r == KVRT_ERROR_UNSUPPORTED));
        unchanged();
    }
    std::vector<uint8_t> newer = whole;
    newer[8] = 2;
    CHECK(kvrt_cache_state_load(c, -1, newer.data(), newer.size()) != KVRT_SUCCESS);
    unchanged();
    // States that do not fit the call or the cache.
    CHECK(kvrt_cache_state_load(c, 0, whole.data(), whole.size()) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(kvrt_cache_state_load(c, -1, seq0.data(), seq0.size()) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(kvrt_cache_state_load(c, 4, seq0.data(), seq0.size()) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(kvrt_cache_state_load(c, -2, seq0.data(), seq0.size()) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(kvrt_cache_state_load(c, 0, nullptr, 10) == KVRT_ERROR_INVALID_ARGUMENT);
    unchanged();
    {
        Spec deferred = spec;
        deferred.flags = KVRT_CACHE_DEFERRED_ROPE;
        TestCache d(ctx, deferred);
        store(d, make_tokens({{0, {0}}}, 3));
        const std::vector<uint8_t> ds = save_state(d, 0);
        CHECK(kvrt_cache_state_load(c, 0, ds.data(), ds.size()) == KVRT_ERROR_INVALID_ARGUMENT);
        unchanged();
    }
    {
        Spec small = spec;
        small.capacity = 12;
        TestCache s(ctx, small);
        store(s, make_tokens({{0, {0}}, {1, {0}}, {2, {0}}, {3, {0}}, {4, {0}}, {5, {0}}, {6, {0}}, {7, {0}}, {8, {0}},
                              {9, {0}}}, 61));
        const std::vector<uint8_t> big = save_state(s, 0);
        CHECK(kvrt_cache_state_load(s, 1, big.data(), big.size()) == KVRT_ERROR_CACHE_FULL);
        std::vector<uint8_t> fits = save_state(a, -1);
        CHECK(kvrt_cache_state_load(s, -1, fits.data(), fits.size()) == KVRT_ERROR_CACHE_FULL);
    }
    // Device failures at every fault point of a load, for both kinds of state.
    for (int32_t seq : {-1, 0}) {
        const std::vector<uint8_t>& b = seq < 0 ? whole : seq0;
        const int32_t into = seq < 0 ? -1 : 0;
        bool done = false;
        for (uint64_t n = 1; n < 64 && !done; ++n) {
            kvrt::fault::arm(n);
            const kvrt_result r = kvrt_cache_state_load(c, into, b.data(), b.size());
            const std::string message = kvrt_last_error_message();
            kvrt::fault::arm(0);
            INFO("fault point " << n << ": " << message);
            if (r == KVRT_SUCCESS) {
                done = true;
                break;
            }
            if (r == KVRT_ERROR_TIMEOUT) {
                // A timed-out wait keeps the load (its work completes later).
                KVRT_REQUIRE_OK(kvrt_cache_state_load(c, -1, whole.data(), whole.size()));
                done = true;
                break;
            }
            CHECK(message.find("injected") != std::string::npos);
            unchanged();
        }
        CHECK(done);
        if (seq < 0) {
            check_holds(c, 1, of_seq(toks, 1), stored_as(spec.tk, spec.tv));
        } else {
            check_holds(c, 0, of_seq(toks, 0), stored_as(spec.tk, spec.tv));
        }
        // Back to the state before, for the next sweep: rebuild it.
        kvrt_cache_clear(c);
        store(c, make_tokens({{0, {0}}, {1, {0}}, {4, {1}}, {0, {2}}}, 41));
        KVRT_REQUIRE_OK(kvrt_cache_seq_add(c, 1, 0, -1, 3));
        REQUIRE(snapshot(c).pos == before.pos);
        before = snapshot(c);  // rows of free cells keep what the load wrote
    }
    CHECK(ctx.validation_errors() == 0);
}

TEST_CASE("state: failed loads into the static layout change nothing", "[state][static]") {
    GpuContext ctx;
    Spec cells;
    TestCache a(ctx, cells);
    std::vector<std::pair<int32_t, std::vector<int32_t>>> list;
    for (int32_t p = 0; p < 6; ++p) list.push_back({p, {0}});
    list.push_back({0, {1, 2}});
    const std::vector<Token> toks = make_tokens(list, 51);
    store(a, toks);
    const std::vector<uint8_t> whole = save_state(a, -1), seq0 = save_state(a, 0);

    Spec st;
    st.layout = KVRT_LAYOUT_STATIC;
    TestCache c(ctx, st);
    std::vector<std::pair<int32_t, std::vector<int32_t>>> own;
    for (int32_t p = 0; p < 7; ++p) own.push_back({10 + p, {0}});
    for (int32_t p = 0; p < 3; ++p) own.push_back({p, {1}});
    store(c, make_tokens(own, 61));
    // The windows as a static graph sees them, and every row of the arena.
    auto windows = [&]() {
        std::vector<uint64_t> w;
        for (int32_t s = 0; s < int32_t(kSeqs); ++s)
            for (uint32_t l = 0; l < kLayers; ++l)
                for (kvrt_kv_array arr : {KVRT_KV_ARRAY_K, KVRT_KV_ARRAY_V}) {
                    kvrt_static_window win = KVRT_STATIC_WINDOW_INIT;
                    KVRT_REQUIRE_OK(kvrt_cache_static_get_window(c, s, int32_t(l), 1, arr, &win));
                    w.insert(w.end(), {win.offset, win.n_valid, uint64_t(uint32_t(win.pos_first)),
                                       uint64_t(uint32_t(win.pos_last))});
                }
        return w;
    };
    Snapshot before = snapshot(c);
    const std::vector<uint64_t> win_before = windows();
    for (int32_t into : {-1, 0}) {
        const std::vector<uint8_t>& b = into < 0 ? whole : seq0;
        std::vector<uint8_t> bad = b;
        bad[bad.size() / 2] ^= 1;
        CHECK(kvrt_cache_state_load(c, into, bad.data(), bad.size()) == KVRT_ERROR_CORRUPT_STATE);
        CHECK(snapshot(c) == before);
        for (uint64_t n = 1; n < 64; ++n) {
            kvrt::fault::arm(n);
            const kvrt_result r = kvrt_cache_state_load(c, into, b.data(), b.size());
            const std::string message = kvrt_last_error_message();
            kvrt::fault::arm(0);
            INFO("load into " << into << ", fault point " << n << ": " << message);
            if (r == KVRT_SUCCESS || r == KVRT_ERROR_TIMEOUT) break;  // a timed-out wait keeps the load
            CHECK(message.find("injected") != std::string::npos);
            CHECK(snapshot(c) == before);
            CHECK(windows() == win_before);
        }
        // The successful load holds what was saved; then the original again.
        if (into < 0) {
            check_holds(c, 1, of_seq(toks, 1), stored_as(st.tk, st.tv));
        } else {
            check_holds(c, 0, of_seq(toks, 0), stored_as(st.tk, st.tv));
        }
        kvrt_cache_clear(c);
        store(c, make_tokens(own, 61));
        CHECK(snapshot(c).pos == before.pos);
        CHECK(windows() == win_before);
        before = snapshot(c);  // rows outside the windows keep what the load wrote
    }
    CHECK(ctx.validation_errors() == 0);
}

TEST_CASE("state: files are replaced atomically", "[state]") {
    GpuContext ctx;
    const std::string dir = temp_dir();
    const std::string path = dir + "/cache.kvrt";
    TestCache a(ctx, Spec{});
    store(a, make_tokens({{0, {0}}, {1, {0}}}, 71));
    KVRT_REQUIRE_OK(kvrt_cache_state_save_file(a, -1, path.c_str()));
    const std::vector<uint8_t> old_bytes = file_bytes(path);
    CHECK(old_bytes == save_state(a, -1));
    store(a, make_tokens({{2, {0}}, {0, {1}}}, 72));
    // A failure just before the rename: the old file stays, whole, and the
    // temporary file is gone.
    kvrt::fault::arm_site("state file rename");
    CHECK(kvrt_cache_state_save_file(a, -1, path.c_str()) == KVRT_ERROR_IO);
    kvrt::fault::arm(0);
    CHECK(file_bytes(path) == old_bytes);
    CHECK(dir_entries(dir) == std::vector<std::string>{"cache.kvrt"});
    // Then it succeeds and the file holds the new state.
    KVRT_REQUIRE_OK(kvrt_cache_state_save_file(a, -1, path.c_str()));
    CHECK(file_bytes(path) == save_state(a, -1));
    CHECK(dir_entries(dir) == std::vector<std::string>{"cache.kvrt"});
    // Files that cannot be written or read.
    CHECK(kvrt_cache_state_save_file(a, -1, (dir + "/missing/x.kvrt").c_str()) == KVRT_ERROR_IO);
    CHECK(kvrt_cache_state_load_file(a, -1, (dir + "/none.kvrt").c_str()) == KVRT_ERROR_IO);
    CHECK(kvrt_cache_state_load_file(a, -1, dir.c_str()) == KVRT_ERROR_IO);
    CHECK(kvrt_cache_state_save_file(a, -1, nullptr) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(kvrt_cache_state_load_file(a, -1, "") == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(ctx.validation_errors() == 0);
    remove_dir(dir);
}

TEST_CASE("state: host swap gives back the same attention, bit for bit", "[state]") {
    GpuContext ctx;
    const std::string dir = temp_dir();
    for (kvrt_type t : {KVRT_TYPE_F16, KVRT_TYPE_Q4_0}) {
        INFO("type " << kvrt_type_name(t));
        Spec spec;
        spec.tk = spec.tv = t;
        TestCache c(ctx, spec);
        std::vector<std::pair<int32_t, std::vector<int32_t>>> list;
        for (int32_t p = 0; p < 9; ++p) list.push_back({p, {0}});
        for (int32_t p = 0; p < 5; ++p) list.push_back({p, {1}});
        store(c, make_tokens(list, 81));
        const std::vector<float> q = random_values(2 * kHeads * kDim, 91);
        const int32_t qpos[2] = {8, 4}, qseq[2] = {0, 1};
        auto attend = [&]() {
            std::vector<float> out(2 * kHeads * kDim, -1.0f);
            const kvrt_batch b = make_batch(2, qpos, qseq);
            const kvrt_tensor_ref qr = host_tensor(q.data());
            const kvrt_output_ref o = host_output(out.data());
            for (uint32_t l = 0; l < kLayers; ++l) {
                std::vector<float> part(out.size());
                const kvrt_output_ref po = host_output(part.data());
                KVRT_REQUIRE_OK(kvrt_cache_attention(c, nullptr, int32_t(l), &b, &qr, &po, nullptr));
                if (l == kLayers - 1) out = part;
            }
            (void)o;
            return out;
        };
        const std::vector<float> before = attend();
        const Snapshot snap = snapshot(c);
        // Out to host memory: the cells are free, the sequence is empty.
        uint64_t size = 0;
        KVRT_REQUIRE_OK(kvrt_cache_seq_swap_out(c, 0, nullptr, &size));
        CHECK(c.table().seq_cell_count(0) == 9);  // a size query changes nothing
        std::vector<uint8_t> blob(size);
        KVRT_REQUIRE_OK(kvrt_cache_seq_swap_out(c, 0, blob.data(), &size));
        CHECK(c.table().seq_cell_count(0) == 0);
        CHECK(c.table().used() == 5);
        // A sequence that holds tokens takes no swap-in.
        CHECK(kvrt_cache_seq_swap_in(c, 1, blob.data(), blob.size()) == KVRT_ERROR_INVALID_ARGUMENT);
        KVRT_REQUIRE_OK(kvrt_cache_seq_swap_in(c, 0, blob.data(), blob.size()));
        CHECK(snapshot(c) .pos == snap.pos);
        const std::vector<float> after = attend();
        CHECK(std::memcmp(before.data(), after.data(), before.size() * 4) == 0);
        // Through a file.
        const std::string path = dir + "/swap.kvrt";
        KVRT_REQUIRE_OK(kvrt_cache_seq_swap_out_file(c, 0, path.c_str()));
        CHECK(c.table().seq_cell_count(0) == 0);
        KVRT_REQUIRE_OK(kvrt_cache_seq_swap_in_file(c, 0, path.c_str()));
        const std::vector<float> again = attend();
        CHECK(std::memcmp(before.data(), again.data(), before.size() * 4) == 0);
        CHECK(snapshot(c).rows == snap.rows);
    }
    CHECK(ctx.validation_errors() == 0);
    remove_dir(dir);
}

TEST_CASE("state: argument checks", "[state]") {
    GpuContext ctx;
    TestCache c(ctx, Spec{});
    store(c, make_tokens({{0, {0}}, {1, {0}}}, 3));
    uint64_t size = 0;
    CHECK(kvrt_cache_state_save(nullptr, -1, nullptr, &size) == KVRT_ERROR_INVALID_HANDLE);
    CHECK(kvrt_cache_state_save(c, -1, nullptr, nullptr) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(kvrt_cache_state_save(c, -2, nullptr, &size) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(kvrt_cache_state_save(c, int32_t(kSeqs), nullptr, &size) == KVRT_ERROR_INVALID_ARGUMENT);
    KVRT_REQUIRE_OK(kvrt_cache_state_save(c, -1, nullptr, &size));
    std::vector<uint8_t> b(size - 1);
    uint64_t small = b.size();
    CHECK(kvrt_cache_state_save(c, -1, b.data(), &small) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(small == b.size());
    CHECK(std::string(kvrt_last_error_message()).find("too small") != std::string::npos);
    CHECK(kvrt_cache_state_load(nullptr, -1, b.data(), b.size()) == KVRT_ERROR_INVALID_HANDLE);
    CHECK(kvrt_cache_seq_swap_out(c, -1, nullptr, &size) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(kvrt_cache_seq_swap_in(c, -1, b.data(), b.size()) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(kvrt_cache_seq_swap_out_file(c, 0, nullptr) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(c.table().seq_cell_count(0) == 2);
}
