// The rules of kvrt.h beyond chains (test_abi_chains.cpp): output structs
// keep the caller's `type` and `next` and no byte after them is written;
// KVRT_TYPE_UNDEFINED is refused wherever a type is required; the element
// type queries describe every type and nothing else; kvrt_cache_seq_transfer
// takes its source first; the memory's seq_rm and seq_cp.
#include "memory_check.hpp"

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "api/handles.hpp"
#include "common/random.hpp"
#include "reference/quant.hpp"

using namespace kvrt_test;
namespace ref = kvrt::ref;

namespace {

constexpr unsigned char kGuardByte = 0xA5;

// An output struct with guard bytes after it: every byte of the struct but
// `type` and `next` starts as kGuardByte, so the checks see what was written.
template <class T>
struct Guarded {
    T value;
    unsigned char tail[64];

    explicit Guarded(const T& init) {
        std::memset(static_cast<void*>(this), kGuardByte, sizeof *this);
        value.type = init.type;
        value.next = nullptr;
    }
    bool tail_untouched() const {
        for (unsigned char c : tail)
            if (c != kGuardByte) return false;
        return true;
    }
    // Whether any byte after `next` changed: the call filled the struct.
    bool filled() const {
        const auto* bytes = reinterpret_cast<const unsigned char*>(&value);
        for (size_t i = offsetof(T, next) + sizeof(void*); i < sizeof(T); ++i)
            if (bytes[i] != kGuardByte) return true;
        return false;
    }
};

template <class T>
void check_kept(const Guarded<T>& g, kvrt_struct_type type, const char* what) {
    INFO(what);
    CHECK(g.value.type == type);
    CHECK(g.value.next == nullptr);
    CHECK(g.tail_untouched());
    CHECK(g.filled());
}

constexpr uint32_t kLayers = 2, kKvHeads = 2, kDim = 32;

kvrt_cache_desc cell_desc(uint32_t capacity = 256) {
    kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
    d.n_layers = kLayers;
    d.n_heads = 2 * kKvHeads;
    d.n_kv_heads = kKvHeads;
    d.head_dim_k = kDim;
    d.capacity = capacity;
    d.max_seqs = 4;
    return d;
}

// Distinct rows for tokens [first, first + n), all layers.
std::vector<float> token_rows(int32_t first, uint32_t n) {
    std::vector<float> x(size_t{kLayers} * n * kKvHeads * kDim);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((first * 131 + static_cast<int32_t>(i)) % 512) - 256;
    return x;
}

void store(kvrt_cache c, int32_t seq, int32_t first, uint32_t n) {
    std::vector<int32_t> pos(n), seqs(n, seq);
    for (uint32_t i = 0; i < n; ++i) pos[i] = first + static_cast<int32_t>(i);
    const auto rows = token_rows(first, n);
    const kvrt_batch b = make_batch(n, pos.data(), seqs.data());
    const kvrt_tensor_ref t = host_tensor(rows.data());
    KVRT_REQUIRE_OK(kvrt_cache_store(c, nullptr, &b, -1, &t, &t, nullptr));
}

// The (position, K and V of every layer) of each token of `seq`, by
// position, read through the cache's table.
std::vector<std::pair<int32_t, std::vector<float>>> sequence(kvrt_cache c, int32_t seq) {
    const auto& table = kvrt::api::cache_of(c)->table();
    std::vector<std::pair<int32_t, std::vector<float>>> out;
    for (uint32_t cell = 0; cell < table.capacity(); ++cell) {
        if (!table.cell_has_seq(cell, seq)) continue;
        std::vector<float> rows;
        for (uint32_t l = 0; l < kLayers; ++l) {
            std::vector<float> k(kKvHeads * kDim), v(k.size());
            KVRT_REQUIRE_OK(kvrt_cache_read(c, static_cast<int32_t>(l), 1, &cell, k.data(), bytes_of(k), v.data(),
                                            bytes_of(v)));
            rows.insert(rows.end(), k.begin(), k.end());
            rows.insert(rows.end(), v.begin(), v.end());
        }
        out.emplace_back(table.cell_pos(cell), rows);
    }
    std::sort(out.begin(), out.end());
    return out;
}

}  // namespace

TEST_CASE("output structs keep the caller's type and next, and nothing after them is written", "[abi]") {
    GpuContext ctx;
    {
        Guarded<kvrt_device_info> g(kvrt_device_info KVRT_DEVICE_INFO_INIT);
        KVRT_REQUIRE_OK(kvrt_context_get_device_info(ctx, &g.value));
        check_kept(g, KVRT_STRUCT_TYPE_DEVICE_INFO, "kvrt_context_get_device_info");
        uint32_t one = 1;
        Guarded<kvrt_device_info> e(kvrt_device_info KVRT_DEVICE_INFO_INIT);
        const kvrt_result r = kvrt_enumerate_devices(&e.value, &one);  // more devices: an error that still fills
        CHECK((r == KVRT_SUCCESS || r == KVRT_ERROR_INVALID_ARGUMENT));
        check_kept(e, KVRT_STRUCT_TYPE_DEVICE_INFO, "kvrt_enumerate_devices");
    }
    {
        Guarded<kvrt_context_stats> g(kvrt_context_stats KVRT_CONTEXT_STATS_INIT);
        KVRT_REQUIRE_OK(kvrt_context_get_stats(ctx, &g.value));
        check_kept(g, KVRT_STRUCT_TYPE_CONTEXT_STATS, "kvrt_context_get_stats");
    }
    {
        const kvrt_cache_desc d = cell_desc();
        Guarded<kvrt_cache_estimate> g(kvrt_cache_estimate KVRT_CACHE_ESTIMATE_INIT);
        KVRT_REQUIRE_OK(kvrt_cache_estimate_size(ctx, &d, &g.value));
        check_kept(g, KVRT_STRUCT_TYPE_CACHE_ESTIMATE, "kvrt_cache_estimate_size");
        Cache c;
        KVRT_REQUIRE_OK(kvrt_cache_create(ctx, &d, c.out()));
        store(c, 0, 0, 3);
        Guarded<kvrt_cache_info> info(kvrt_cache_info KVRT_CACHE_INFO_INIT);
        KVRT_REQUIRE_OK(kvrt_cache_get_info(c, &info.value));
        check_kept(info, KVRT_STRUCT_TYPE_CACHE_INFO, "kvrt_cache_get_info");
        CHECK(info.value.used == 3);
    }
    {
        kvrt_static_layout_desc sl = KVRT_STATIC_LAYOUT_DESC_INIT;
        sl.seq_len = 8;
        kvrt_cache_desc d = cell_desc(0);
        d.layout = KVRT_LAYOUT_STATIC;
        d.next = &sl;
        Cache c;
        KVRT_REQUIRE_OK(kvrt_cache_create(ctx, &d, c.out()));
        store(c, 0, 0, 3);
        Guarded<kvrt_static_window> w(kvrt_static_window KVRT_STATIC_WINDOW_INIT);
        KVRT_REQUIRE_OK(kvrt_cache_static_get_window(c, 0, 1, 0, KVRT_KV_ARRAY_K, &w.value));
        check_kept(w, KVRT_STRUCT_TYPE_STATIC_WINDOW, "kvrt_cache_static_get_window");
        CHECK(w.value.n_valid == 3);
        Guarded<kvrt_static_stats> st(kvrt_static_stats KVRT_STATIC_STATS_INIT);
        KVRT_REQUIRE_OK(kvrt_cache_static_get_stats(c, 0, &st.value));
        check_kept(st, KVRT_STRUCT_TYPE_STATIC_STATS, "kvrt_cache_static_get_stats");
        CHECK(st.value.rows_appended == 3);
    }
    {
        kvrt_cache_desc d = cell_desc(64);
        d.layout = KVRT_LAYOUT_PAGED;
        Cache c;
        KVRT_REQUIRE_OK(kvrt_cache_create(ctx, &d, c.out()));
        store(c, 0, 0, 3);
        Guarded<kvrt_paged_stats> st(kvrt_paged_stats KVRT_PAGED_STATS_INIT);
        KVRT_REQUIRE_OK(kvrt_cache_paged_get_stats(c, &st.value));
        check_kept(st, KVRT_STRUCT_TYPE_PAGED_STATS, "kvrt_cache_paged_get_stats");
        CHECK(st.value.used_blocks == 1);
        CHECK(st.value.n_blocks == 4);
    }
    {
        const MemoryDesc d(shape(1, 2, 16, 8, 8, 1));
        for (const kvrt_context c : {ctx.get(), static_cast<kvrt_context>(nullptr)}) {
            Guarded<kvrt_memory_estimate> g(kvrt_memory_estimate KVRT_MEMORY_ESTIMATE_INIT);
            KVRT_REQUIRE_OK(kvrt_memory_estimate_size(c, &d.desc, &g.value));
            check_kept(g, KVRT_STRUCT_TYPE_MEMORY_ESTIMATE, "kvrt_memory_estimate_size");
        }
    }
    if (timestamps_or_refused(ctx)) {
        Buffer b(ctx, 1 << 16);
        Stream s(ctx, KVRT_STREAM_TIMESTAMPS);
        run_stream(s, [&] {
            KVRT_REQUIRE_OK(kvrt_cmd_fill(s, b, 0, 4096, 1));
            KVRT_REQUIRE_OK(kvrt_cmd_fill(s, b, 4096, 4096, 2));
        });
        // Each element of the array keeps its own type and next; nothing after
        // the array is written.
        struct {
            kvrt_timing t[2];
            unsigned char tail[64];
        } g;
        std::memset(static_cast<void*>(&g), kGuardByte, sizeof g);
        for (kvrt_timing& t : g.t) {
            t.type = KVRT_STRUCT_TYPE_TIMING;
            t.next = nullptr;
        }
        uint32_t n = 2;
        KVRT_REQUIRE_OK(kvrt_stream_get_timings(s, g.t, &n));
        CHECK(n == 2);
        for (const kvrt_timing& t : g.t) {
            CHECK(t.type == KVRT_STRUCT_TYPE_TIMING);
            CHECK(t.next == nullptr);
            CHECK(t.label != nullptr);
        }
        for (unsigned char c : g.tail) CHECK(c == kGuardByte);
    }
}

TEST_CASE("KVRT_TYPE_UNDEFINED is refused wherever a type is required", "[abi]") {
    GpuContext ctx;
    const kvrt_result A = KVRT_ERROR_INVALID_ARGUMENT;
    const kvrt_type U = KVRT_TYPE_UNDEFINED;
    kvrt_cache_estimate e = KVRT_CACHE_ESTIMATE_INIT;
    Cache out;
    for (int which = 0; which < 2; ++which) {
        kvrt_cache_desc d = cell_desc();
        (which ? d.type_v : d.type_k) = U;
        INFO((which ? "type_v" : "type_k"));
        CHECK(kvrt_cache_create(ctx, &d, out.out()) == A);
        CHECK(out == nullptr);
        CHECK(kvrt_cache_estimate_size(nullptr, &d, &e) == A);
    }

    const kvrt_cache_desc d = cell_desc();
    Cache c;
    KVRT_REQUIRE_OK(kvrt_cache_create(ctx, &d, c.out()));
    store(c, 0, 0, 4);
    const auto rows = token_rows(0, 4);
    std::vector<float> o(4 * 2 * kKvHeads * kDim);
    const int32_t pos = 10, seq = 0;
    const kvrt_batch b = make_batch(1, &pos, &seq);
    kvrt_tensor_ref good = host_tensor(rows.data()), bad = host_tensor(rows.data(), U);
    CHECK(kvrt_cache_store(c, nullptr, &b, -1, &bad, &good, nullptr) == A);
    CHECK(kvrt_cache_store(c, nullptr, &b, -1, &good, &bad, nullptr) == A);
    uint32_t cell = 0;
    CHECK(kvrt_cache_write(c, nullptr, 1, &cell, -1, &bad, &good) == A);
    const int32_t qpos = 3;
    const kvrt_batch q = make_batch(1, &qpos, &seq);
    kvrt_output_ref out_good = host_output(o.data()), out_bad = host_output(o.data(), U);
    CHECK(kvrt_cache_attention(c, nullptr, 0, &q, &bad, &out_good, nullptr) == A);
    CHECK(kvrt_cache_attention(c, nullptr, 0, &q, &good, &out_bad, nullptr) == A);
    KVRT_REQUIRE_OK(kvrt_cache_attention(c, nullptr, 0, &q, &good, &out_good, nullptr));
    kvrt_cache_info info = KVRT_CACHE_INFO_INIT;
    KVRT_REQUIRE_OK(kvrt_cache_get_info(c, &info));
    CHECK(info.used == 4);  // none of the refused stores placed a token

    {
        kvrt_static_layout_desc sl = KVRT_STATIC_LAYOUT_DESC_INIT;
        sl.seq_len = 8;
        kvrt_cache_desc sd = cell_desc(0);
        sd.layout = KVRT_LAYOUT_STATIC;
        sd.next = &sl;
        KVRT_REQUIRE_OK(kvrt_cache_create(ctx, &sd, c.out()));
        float mask[8];
        CHECK(kvrt_cache_static_get_mask(c, 0, U, mask, sizeof mask) == A);
        KVRT_REQUIRE_OK(kvrt_cache_static_get_mask(c, 0, KVRT_TYPE_F32, mask, sizeof mask));
    }

    const Geometry g = shape(1, 2, 16, 8, 8, 1);
    {
        MemoryDesc md(g);
        md.desc.state_type = U;
        kvrt_memory m = nullptr;
        kvrt_memory_estimate me = KVRT_MEMORY_ESTIMATE_INIT;
        CHECK(kvrt_memory_create(ctx, &md.desc, &m) == A);
        CHECK(kvrt_memory_estimate_size(nullptr, &md.desc, &me) == A);
        md.set(g);
        const std::vector<float> keys(size_t{g.heads} * g.m * g.e, 0.5f);
        md.keys.source = KVRT_MEMORY_SOURCE_HOST;
        md.keys.host = keys.data();
        md.keys.element_type = U;
        CHECK(kvrt_memory_create(ctx, &md.desc, &m) == A);
        md.keys.element_type = KVRT_TYPE_F32;
        KVRT_REQUIRE_OK(kvrt_memory_create(ctx, &md.desc, &m));
        kvrt_memory_destroy(m);
    }
    {
        Memory m(ctx, g);
        Rng rng(1);
        const Batch tokens = random_batch(g, 2, 0, rng);
        std::vector<float> reads(size_t{tokens.n} * g.heads * g.d);
        MemoryBatch mb(tokens, &reads);
        mb.wq.element_type = U;
        CHECK(kvrt_memory_update(m, nullptr, mb.get()) == A);
        mb.set(tokens, &reads);
        mb.q.element_type = U;
        CHECK(kvrt_memory_read(m, nullptr, mb.get()) == A);
        mb.set(tokens, &reads);
        mb.out.element_type = U;
        CHECK(kvrt_memory_read(m, nullptr, mb.get()) == A);
        mb.set(tokens, &reads);
        KVRT_REQUIRE_OK(kvrt_memory_update_read(m, nullptr, mb.get()));
    }
}

TEST_CASE("the element type queries describe every type, and nothing else", "[abi]") {
    struct Expected {
        kvrt_type type;
        const char* name;
        uint32_t block_size, block_bytes;
    };
    // As kvrt.h documents them.
    const Expected types[] = {
        {KVRT_TYPE_F32, "f32", 1, 4},        {KVRT_TYPE_F16, "f16", 1, 2},
        {KVRT_TYPE_Q8_0, "q8_0", 32, 34},    {KVRT_TYPE_Q4_0, "q4_0", 32, 18},
        {KVRT_TYPE_U8_STATIC, "u8_static", 1, 1}, {KVRT_TYPE_U16_STATIC, "u16_static", 1, 2},
    };
    for (const Expected& x : types) {
        INFO("type " << x.type);
        REQUIRE(kvrt_type_name(x.type) != nullptr);
        CHECK(std::string(kvrt_type_name(x.type)) == x.name);
        CHECK(kvrt_type_block_size(x.type) == x.block_size);
        CHECK(kvrt_type_block_bytes(x.type) == x.block_bytes);
        kvrt_type back = KVRT_TYPE_UNDEFINED;
        KVRT_REQUIRE_OK(kvrt_type_from_name(x.name, &back));
        CHECK(back == x.type);
        std::string upper = x.name;
        for (char& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
        back = KVRT_TYPE_UNDEFINED;
        KVRT_REQUIRE_OK(kvrt_type_from_name(upper.c_str(), &back));  // case-insensitive
        CHECK(back == x.type);
    }
    // And as the CPU reference encodes them.
    const std::pair<kvrt_type, ref::Type> block_types[] = {{KVRT_TYPE_F32, ref::Type::F32},
                                                           {KVRT_TYPE_F16, ref::Type::F16},
                                                           {KVRT_TYPE_Q8_0, ref::Type::Q8_0},
                                                           {KVRT_TYPE_Q4_0, ref::Type::Q4_0}};
    for (const auto& [t, rt] : block_types) {
        CHECK(kvrt_type_block_size(t) == static_cast<uint32_t>(ref::type_block_elems(rt)));
        CHECK(kvrt_type_block_bytes(t) == ref::type_block_bytes(rt));
    }
    CHECK(kvrt_type_block_bytes(KVRT_TYPE_U8_STATIC) == ref::static_code_bytes(ref::StaticType::U8));
    CHECK(kvrt_type_block_bytes(KVRT_TYPE_U16_STATIC) == ref::static_code_bytes(ref::StaticType::U16));

    // Undefined and unknown values: no name, no size.
    for (const int64_t v : {int64_t{0}, int64_t{7}, int64_t{99}, int64_t{-1}, int64_t{0x7FFFFFFF}}) {
        const auto t = static_cast<kvrt_type>(v);
        INFO("value " << v);
        CHECK(kvrt_type_name(t) == nullptr);
        CHECK(kvrt_type_block_size(t) == 0);
        CHECK(kvrt_type_block_bytes(t) == 0);
    }
    // Unknown names, and names of no type.
    for (const char* name : {"", "q5_1", "f16 ", " f16", "f", "f160", "undefined", "default", "u8"}) {
        INFO("name '" << name << "'");
        kvrt_type t = KVRT_TYPE_F32;
        CHECK(kvrt_type_from_name(name, &t) == KVRT_ERROR_INVALID_ARGUMENT);
        CHECK(t == KVRT_TYPE_UNDEFINED);
        CHECK(kvrt_last_error_message()[0] != '\0');
    }
    kvrt_type t = KVRT_TYPE_F32;
    CHECK(kvrt_type_from_name(nullptr, &t) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(kvrt_type_from_name("f16", nullptr) == KVRT_ERROR_INVALID_ARGUMENT);
}

TEST_CASE("kvrt_cache_seq_transfer takes its source first", "[abi][static]") {
    GpuContext ctx;
    Cache a, b;
    const kvrt_cache_desc d = cell_desc();
    KVRT_REQUIRE_OK(kvrt_cache_create(ctx, &d, a.out()));
    KVRT_REQUIRE_OK(kvrt_cache_create(ctx, &d, b.out()));
    store(a, 0, 0, 10);    // a: sequence 0, positions 0..9
    store(b, 0, 100, 5);   // b: sequence 0, positions 100..104
    const auto a0 = sequence(a, 0), b0 = sequence(b, 0);
    REQUIRE(a0.size() == 10);
    REQUIRE(b0.size() == 5);

    // a's sequence 0 into b's sequence 1: b gets a's tokens, a keeps them.
    uint32_t n = 0;
    KVRT_REQUIRE_OK(kvrt_cache_seq_transfer(a, 0, b, 1, &n));
    CHECK(n == 10);
    CHECK(sequence(b, 1) == a0);
    CHECK(sequence(b, 0) == b0);
    CHECK(sequence(a, 0) == a0);
    CHECK(sequence(a, 1).empty());

    // And back the other way, into a sequence of a.
    KVRT_REQUIRE_OK(kvrt_cache_seq_transfer(b, 0, a, 2, &n));
    CHECK(n == 5);
    CHECK(sequence(a, 2) == b0);
    CHECK(sequence(b, 0) == b0);

    // A destination in use is refused, whichever cache it is in, and nothing
    // moves.
    CHECK(kvrt_cache_seq_transfer(a, 0, b, 0, &n) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(kvrt_cache_seq_transfer(b, 1, a, 0, &n) == KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(sequence(a, 0) == a0);
    CHECK(sequence(b, 0) == b0);
    CHECK(sequence(b, 1) == a0);
}

TEST_CASE("the memory's seq_cp copies from its first sequence, seq_rm restores the initial state", "[abi][memory]") {
    GpuContext ctx;
    const Geometry g = shape(2, 2, 16, 8, 8, 3, 0, true);
    Memory m(ctx, g);
    const auto initial = all_states(m, g);
    const auto init1 = get_state(m, g, 2, 1);  // layer 1 of any sequence, initially
    Rng rng(5);
    const Batch b = random_batch(g, 6, -1, rng);  // sequence 0
    const MemoryBatch mb(b, nullptr);
    KVRT_REQUIRE_OK(kvrt_memory_update(m, nullptr, mb.get()));
    const auto s0 = get_state(m, g, 0, 1);
    CHECK(!same_bits(s0, get_state(m, g, 1, 1)));
    // seq_cp(src, dst): sequence 1 becomes sequence 0; 0 is unchanged.
    KVRT_REQUIRE_OK(kvrt_memory_seq_cp(m, nullptr, 0, 1));
    CHECK(same_bits(get_state(m, g, 1, 1), s0));
    CHECK(same_bits(get_state(m, g, 0, 1), s0));
    CHECK(same_bits(get_state(m, g, 2, 1), init1));
    // seq_cp from a sequence in the initial state restores that state.
    KVRT_REQUIRE_OK(kvrt_memory_seq_cp(m, nullptr, 2, 0));
    CHECK(same_bits(get_state(m, g, 0, 1), init1));
    CHECK(same_bits(get_state(m, g, 1, 1), s0));
    // seq_rm of one sequence, then of all.
    KVRT_REQUIRE_OK(kvrt_memory_seq_rm(m, nullptr, 1));
    CHECK(same_bits(all_states(m, g), initial));
    KVRT_REQUIRE_OK(kvrt_memory_update(m, nullptr, mb.get()));
    KVRT_REQUIRE_OK(kvrt_memory_seq_cp(m, nullptr, 0, 2));
    KVRT_REQUIRE_OK(kvrt_memory_seq_rm(m, nullptr, -1));
    CHECK(same_bits(all_states(m, g), initial));
    // Through a stream as well.
    Stream s(ctx);
    run_stream(s, [&] {
        KVRT_REQUIRE_OK(kvrt_memory_update(m, s, mb.get()));
        KVRT_REQUIRE_OK(kvrt_memory_seq_cp(m, s, 0, 2));
        KVRT_REQUIRE_OK(kvrt_memory_seq_rm(m, s, 0));
    });
    CHECK(same_bits(get_state(m, g, 2, 1), s0));
    CHECK(same_bits(get_state(m, g, 0, 1), init1));
}
