// Bad input to every exported function (tests/abi/kvrt.symbols), table
// driven: NULL, zero, negative, huge and wrapping arguments (UINT64_MAX
// offsets, sizes and strides, offset + size that wraps, INT32_MIN/MAX ids and
// positions), values of no enumerator ((kvrt_type)12345, (kvrt_kv_array)-7),
// destroyed handles, handles of another kind cast across, handles of another
// context, and one unknown chained struct per struct argument. Each row must
// give its documented error exactly, with a detail message, or be a
// documented no-op (destroy(NULL)); never a crash, a hang or a silent
// success. The buffer, caches and memory a row calls on are read back before
// and after it and must be unchanged. The test ends with a summary table.
#include "test_bad_input.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <type_traits>

#include "api/handles.hpp"

using namespace kvrt_test;
using namespace kvrt_test::bad_input;

namespace kvrt_test::bad_input {

namespace {

constexpr uint64_t kWaitNs = 120ull * 1000 * 1000 * 1000;

// Stores `n` tokens of `seq` at positions first.. into a cache (host f32
// rows of every layer, values from `salt`).
void store_tokens(kvrt_cache cache, uint32_t layers, uint32_t kv_heads, uint32_t dim, int32_t seq, int32_t first,
                  uint32_t n, float salt) {
    std::vector<int32_t> pos(n), seqs(n, seq);
    for (uint32_t i = 0; i < n; ++i) pos[i] = first + static_cast<int32_t>(i);
    std::vector<float> k(size_t{layers} * n * kv_heads * dim), v(k.size());
    for (size_t i = 0; i < k.size(); ++i) {
        k[i] = std::sin(0.1f * static_cast<float>(i) + salt);
        v[i] = std::cos(0.07f * static_cast<float>(i) + salt);
    }
    const kvrt_batch batch = make_batch(n, pos.data(), seqs.data());
    const kvrt_tensor_ref kt = host_tensor(k.data()), vt = host_tensor(v.data());
    KVRT_REQUIRE_OK(kvrt_cache_store(cache, nullptr, &batch, -1, &kt, &vt, nullptr));
}

kvrt_buffer make_buffer(kvrt_context ctx, uint64_t size) {
    kvrt_buffer_desc d = KVRT_BUFFER_DESC_INIT;
    d.size = size;
    kvrt_buffer b = nullptr;
    KVRT_REQUIRE_OK(kvrt_buffer_create(ctx, &d, &b));
    return b;
}

kvrt_stream make_stream(kvrt_context ctx) {
    kvrt_stream s = nullptr;
    KVRT_REQUIRE_OK(kvrt_stream_create(ctx, nullptr, &s));
    return s;
}

}  // namespace

kvrt_cache_desc World::cache_desc() {
    kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
    d.n_layers = kLayers;
    d.n_heads = kHeads;
    d.n_kv_heads = kKvHeads;
    d.head_dim_k = kDim;
    d.capacity = kCapacity;
    d.max_seqs = kSeqs;
    return d;
}

kvrt_memory_desc World::memory_desc() {
    static const kvrt_memory_init keys = [] {
        kvrt_memory_init k = KVRT_MEMORY_INIT_INIT;
        k.source = KVRT_MEMORY_SOURCE_SEED;
        k.seed = 7;
        return k;
    }();
    kvrt_memory_desc d = KVRT_MEMORY_DESC_INIT;
    d.n_layers = 1;
    d.n_heads = kMemHeads;
    d.n_slots = kMemSlots;
    d.key_dim = kMemDim;
    d.max_seqs = kMemSeqs;
    d.keys = &keys;
    return d;
}

World::World() {
    buffer = make_buffer(a, kBufferBytes);
    std::vector<uint32_t> pattern(kBufferBytes / 4);
    for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = 0x9E3779B9u * static_cast<uint32_t>(i + 1);
    KVRT_REQUIRE_OK(kvrt_buffer_upload(buffer, 0, pattern.data(), kBufferBytes));
    buffer_b = make_buffer(b, kBufferBytes);
    stream = make_stream(a);
    stream_b = make_stream(b);
    const kvrt_cache_desc cd = cache_desc();
    KVRT_REQUIRE_OK(kvrt_cache_create(a, &cd, cache.out()));
    store_tokens(cache, kLayers, kKvHeads, kDim, 0, 0, 8, 0.5f);
    store_tokens(cache, kLayers, kKvHeads, kDim, 1, 0, 4, 1.5f);
    KVRT_REQUIRE_OK(kvrt_cache_create(b, &cd, cache_b.out()));
    // 1 layer, 1 head, head dim 32, seq_len 8, 2 sequences, F16.
    static_cache = CacheSpec().shape(1, 1, 1, kDim).static_layout(kStaticSeqLen).cells(0, 2).create(a);
    store_tokens(static_cache, 1, 1, kDim, 0, 0, 3, 2.5f);
    const kvrt_memory_desc md = memory_desc();
    KVRT_REQUIRE_OK(kvrt_memory_create(a, &md, &memory));
    {
        std::vector<float> wq(3 * kMemHeads * kMemDim), wv(wq.size());
        for (size_t i = 0; i < wq.size(); ++i) {
            wq[i] = std::sin(0.3f * static_cast<float>(i));
            wv[i] = std::cos(0.2f * static_cast<float>(i));
        }
        const kvrt_tensor_ref tq = host_tensor(wq.data()), tv = host_tensor(wv.data());
        kvrt_memory_batch mb = KVRT_MEMORY_BATCH_INIT;
        mb.n_tokens = 3;
        mb.wq = &tq;
        mb.wv = &tv;
        KVRT_REQUIRE_OK(kvrt_memory_update(memory, nullptr, &mb));
    }
    VkDeviceSize off = 0, contiguous = 0;
    KVRT_REQUIRE_OK(kvrt_buffer_get_vulkan(buffer, 0, &vk_buffer, &off, &contiguous));

    // Handles of every kind, destroyed: the table creates no handle, so none
    // of these addresses is registered again while it runs.
    dead_buffer = make_buffer(a, 256);
    kvrt_buffer_destroy(dead_buffer);
    dead_stream = make_stream(a);
    kvrt_stream_destroy(dead_stream);
    KVRT_REQUIRE_OK(kvrt_cache_create(a, &cd, &dead_cache));
    kvrt_cache_destroy(dead_cache);
    KVRT_REQUIRE_OK(kvrt_memory_create(a, &md, &dead_memory));
    kvrt_memory_destroy(dead_memory);
    KVRT_REQUIRE_OK(kvrt_context_create(nullptr, &dead_context));
    kvrt_context_destroy(dead_context);
    {
        kvrt_context other = nullptr;
        KVRT_REQUIRE_OK(kvrt_context_create(nullptr, &other));
        KVRT_REQUIRE_OK(kvrt_cache_create(other, &cd, &orphan_cache));
        kvrt_context_destroy(other);
    }
}

World::~World() {
    kvrt_memory_destroy(memory);
    static_cache.reset();
    cache_b.reset();
    cache.reset();
    kvrt_stream_destroy(stream_b);
    kvrt_stream_destroy(stream);
    kvrt_buffer_destroy(buffer_b);
    kvrt_buffer_destroy(buffer);
}

Outcome while_recording(kvrt_stream s, const std::function<Outcome()>& call) {
    REQUIRE(kvrt_stream_begin(s) == KVRT_SUCCESS);
    Outcome o = call();
    const kvrt_result submitted = kvrt_stream_submit(s);
    if (submitted == KVRT_SUCCESS) REQUIRE(kvrt_stream_wait(s, kWaitNs) == KVRT_SUCCESS);
    return o;
}

namespace {

// What a row must leave as it was, read back through the public API.
std::vector<uint8_t> snapshot(World& w, Target t) {
    std::vector<uint8_t> bytes;
    const auto put = [&](const void* p, size_t n) {
        const auto* b = static_cast<const uint8_t*>(p);
        bytes.insert(bytes.end(), b, b + n);
    };
    switch (t) {
        case Target::None: break;
        case Target::Buffer: {
            bytes.resize(World::kBufferBytes);
            KVRT_REQUIRE_OK(kvrt_buffer_download(w.buffer, 0, bytes.data(), bytes.size()));
            break;
        }
        case Target::Cache: {
            kvrt_cache_info info = KVRT_CACHE_INFO_INIT;
            KVRT_REQUIRE_OK(kvrt_cache_get_info(w.cache, &info));
            put(&info.used, sizeof info.used);
            put(&info.n_attend, sizeof info.n_attend);
            put(&info.pending_shifts, sizeof info.pending_shifts);
            put(&info.fragmentation, sizeof info.fragmentation);
            // The cell table itself: positions, deltas, sequence words, the
            // used count, its end and the search head.
            const kvrt::kv::CellTable& cells_table = kvrt::api::cache_of(w.cache.get())->table();
            put(cells_table.positions(), size_t{cells_table.capacity()} * sizeof(int32_t));
            put(cells_table.deltas(), size_t{cells_table.capacity()} * sizeof(int32_t));
            put(cells_table.seq_words(), size_t{cells_table.capacity()} * cells_table.words_per_cell() * sizeof(uint64_t));
            const uint32_t counters[3] = {cells_table.used(), cells_table.used_end(), cells_table.head()};
            put(counters, sizeof counters);
            for (int32_t s = 0; s < static_cast<int32_t>(World::kSeqs); ++s) {
                int32_t lo = 0, hi = 0;
                KVRT_REQUIRE_OK(kvrt_cache_seq_pos_min(w.cache, s, &lo));
                KVRT_REQUIRE_OK(kvrt_cache_seq_pos_max(w.cache, s, &hi));
                put(&lo, sizeof lo);
                put(&hi, sizeof hi);
            }
            std::vector<uint32_t> cells(World::kCapacity);
            for (uint32_t c = 0; c < World::kCapacity; ++c) cells[c] = c;
            const size_t n = size_t{World::kCapacity} * World::kKvHeads * World::kDim;
            std::vector<float> k(n), v(n);
            for (int32_t l = 0; l < static_cast<int32_t>(World::kLayers); ++l) {
                KVRT_REQUIRE_OK(kvrt_cache_read(w.cache, l, World::kCapacity, cells.data(), k.data(), bytes_of(k),
                                                v.data(), bytes_of(v)));
                put(k.data(), k.size() * 4);
                put(v.data(), v.size() * 4);
            }
            break;
        }
        case Target::StaticCache: {
            kvrt_static_stats st = KVRT_STATIC_STATS_INIT;
            KVRT_REQUIRE_OK(kvrt_cache_static_get_stats(w.static_cache, -1, &st));
            put(&st.rows_appended, sizeof st.rows_appended);
            kvrt_static_window win = KVRT_STATIC_WINDOW_INIT;
            KVRT_REQUIRE_OK(kvrt_cache_static_get_window(w.static_cache, 0, 0, 0, KVRT_KV_ARRAY_K, &win));
            put(&win.offset, sizeof win.offset);
            put(&win.n_valid, sizeof win.n_valid);
            put(&win.pos_last, sizeof win.pos_last);
            std::vector<uint8_t> rows(win.bytes);
            KVRT_REQUIRE_OK(kvrt_buffer_download(win.buffer, win.offset, rows.data(), rows.size()));
            put(rows.data(), rows.size());
            float mask[World::kStaticSeqLen];
            KVRT_REQUIRE_OK(kvrt_cache_static_get_mask(w.static_cache, 0, KVRT_TYPE_F32, mask, sizeof mask));
            put(mask, sizeof mask);
            break;
        }
        case Target::Memory: {
            std::vector<float> state(size_t{World::kMemHeads} * World::kMemSlots * World::kMemDim);
            for (int32_t s = 0; s < static_cast<int32_t>(World::kMemSeqs); ++s) {
                KVRT_REQUIRE_OK(kvrt_memory_get_state(w.memory, s, 0, state.data(), bytes_of(state)));
                put(state.data(), state.size() * 4);
            }
            break;
        }
        case Target::Device: {
            const uint64_t n = device_bytes(w.a);
            put(&n, sizeof n);
            break;
        }
    }
    return bytes;
}

const char* target_name(Target t) {
    switch (t) {
        case Target::None: return "";
        case Target::Buffer: return "buffer";
        case Target::Cache: return "cache";
        case Target::StaticCache: return "static cache";
        case Target::Memory: return "memory";
        case Target::Device: return "device memory";
    }
    return "?";
}

// The exported functions, from the committed list the ABI test checks.
std::vector<std::string> exported_functions() {
    std::string dir = __FILE__;
    dir = dir.substr(0, dir.find_last_of("/\\"));
    std::ifstream in(dir + "/../abi/kvrt.symbols");
    REQUIRE(in.good());
    std::vector<std::string> names;
    for (std::string line; std::getline(in, line);)
        if (!line.empty()) names.push_back(line);
    return names;
}

}  // namespace

// ---------------------------------------------------------------------------
// Rows of the functions that need no cache or memory.

void add_general_rows(World& w, std::vector<Row>* rows) {
    const Target N = Target::None, B = Target::Buffer;
    const auto inv = KVRT_ERROR_INVALID_ARGUMENT;
    const auto hnd = KVRT_ERROR_INVALID_HANDLE;
    auto& r = *rows;
    // Handles of other kinds, cast across.
    const auto ctx_as_buffer = reinterpret_cast<kvrt_context>(w.buffer);
    const auto buffer_as_stream = reinterpret_cast<kvrt_buffer>(w.stream);
    const auto buffer_as_cache = reinterpret_cast<kvrt_buffer>(w.cache.get());

    // Results, version and types.
    for (int32_t v : {12345, kMin32, static_cast<int32_t>(KVRT_RESULT_MAX_ENUM)})
        r.push_back(noop("kvrt_result_string", "unknown value " + std::to_string(v), N, [v] {
            const char* s = kvrt_result_string(bad_enum<kvrt_result>(v));
            return Outcome{holds(s && std::strncmp(s, "KVRT_ERROR_UNKNOWN", 18) == 0), ""};
        }));
    r.push_back(noop("kvrt_last_error_message", "after a failed call: a sentence", N, [] {
        const bool failed = kvrt_buffer_get_size(nullptr, nullptr) != KVRT_SUCCESS;
        const char* m = kvrt_last_error_message();
        return Outcome{holds(failed && m && *m), ""};
    }));
    r.push_back(noop("kvrt_version", "no arguments: the header's version", N,
                     [] { return Outcome{holds(kvrt_version() == KVRT_VERSION), ""}; }));
    r.push_back(noop("kvrt_version", "KVRT_VERSION and KVRT_MAKE_VERSION are of its type", N, [] {
        const bool same = std::is_same<decltype(KVRT_VERSION), decltype(kvrt_version())>::value &&
                          std::is_same<decltype(KVRT_MAKE_VERSION(1, 2, 3)), decltype(kvrt_version())>::value;
        return Outcome{holds(same && KVRT_MAKE_VERSION(1, 2, 3) == ((1u << 22) | (2u << 12) | 3u)), ""};
    }));
    r.push_back(noop("kvrt_version_string", "no arguments: never NULL", N, [] {
        const char* s = kvrt_version_string();
        return Outcome{holds(s && *s), ""};
    }));
    for (int32_t v : {0, 12345, -7, kMin32, static_cast<int32_t>(KVRT_TYPE_MAX_ENUM)}) {
        const std::string what = "type " + std::to_string(v);
        r.push_back(noop("kvrt_type_name", what + ": NULL", N,
                         [v] { return Outcome{holds(kvrt_type_name(bad_enum<kvrt_type>(v)) == nullptr), ""}; }));
        r.push_back(noop("kvrt_type_block_size", what + ": 0", N,
                         [v] { return Outcome{holds(kvrt_type_block_size(bad_enum<kvrt_type>(v)) == 0), ""}; }));
        r.push_back(noop("kvrt_type_block_bytes", what + ": 0", N,
                         [v] { return Outcome{holds(kvrt_type_block_bytes(bad_enum<kvrt_type>(v)) == 0), ""}; }));
    }
    static const std::string long_name(4096, 'f');
    for (const char* name : {static_cast<const char*>(nullptr), "", "f32 ", "undefined", "q8_", long_name.c_str()})
        r.push_back(err("kvrt_type_from_name", name ? "name \"" + std::string(name).substr(0, 12) + "\"" : "name NULL",
                        inv, N, [name] {
                            kvrt_type t = KVRT_TYPE_F32;
                            Outcome o = out(kvrt_type_from_name(name, &t));
                            if (t != KVRT_TYPE_UNDEFINED) o.r = KVRT_ERROR_INTERNAL;
                            return o;
                        }));
    r.push_back(err("kvrt_type_from_name", "out_type NULL", inv, N, [] { return out(kvrt_type_from_name("f32", nullptr)); }));

    // Devices and contexts.
    r.push_back(err("kvrt_enumerate_devices", "count NULL", inv, N, [] { return out(kvrt_enumerate_devices(nullptr, nullptr)); }));
    for (int32_t t : {0, -7, static_cast<int32_t>(KVRT_STRUCT_TYPE_BUFFER_DESC)})
        r.push_back(err("kvrt_enumerate_devices", "infos[0].type " + std::to_string(t), inv, N, [t] {
            kvrt_device_info info = KVRT_DEVICE_INFO_INIT;
            info.type = bad_enum<kvrt_struct_type>(t);
            uint32_t n = 1;
            return out(kvrt_enumerate_devices(&info, &n));
        }));
    r.push_back(err("kvrt_enumerate_devices", "count 0 with an array: array too small", inv, N, [] {
        kvrt_device_info info = KVRT_DEVICE_INFO_INIT;
        uint32_t n = 0;
        Outcome o = out(kvrt_enumerate_devices(&info, &n));
        if (n != 0) o.r = KVRT_ERROR_INTERNAL;
        return o;
    }));
    r.push_back(err("kvrt_enumerate_devices", "a foreign struct chained", inv, N, [] {
        Foreign f;
        kvrt_device_info info = KVRT_DEVICE_INFO_INIT;
        info.next = &f;
        uint32_t n = 1;
        return out(kvrt_enumerate_devices(&info, &n));
    }));
    // kvrt_context_create and kvrt_context_import_vulkan: `out` must stay NULL.
    const auto create = [](kvrt_context_desc d) {
        return [d]() mutable {
            kvrt_context c = reinterpret_cast<kvrt_context>(&d);
            Outcome o = out(kvrt_context_create(&d, &c));
            if (c) {
                kvrt_context_destroy(c);
                if (o.r != KVRT_SUCCESS) o.r = KVRT_ERROR_INTERNAL;  // a handle despite the error
            }
            return o;
        };
    };
    r.push_back(err("kvrt_context_create", "out_context NULL", inv, N, [] { return out(kvrt_context_create(nullptr, nullptr)); }));
    {
        kvrt_context_desc d = KVRT_CONTEXT_DESC_INIT;
        d.type = KVRT_STRUCT_TYPE_BUFFER_DESC;
        r.push_back(err("kvrt_context_create", "desc of another struct type", inv, N, create(d)));
        d.type = bad_enum<kvrt_struct_type>(-7);
        r.push_back(err("kvrt_context_create", "desc->type -7", inv, N, create(d)));
        d = kvrt_context_desc KVRT_CONTEXT_DESC_INIT;
        d.flags = 0x80000000u;
        r.push_back(err("kvrt_context_create", "unknown flag 0x80000000", inv, N, create(d)));
        d.flags = 0;
        d.log_level = bad_enum<kvrt_log_level>(-7);
        r.push_back(err("kvrt_context_create", "log_level -7", inv, N, create(d)));
        d.log_level = bad_enum<kvrt_log_level>(12345);
        r.push_back(err("kvrt_context_create", "log_level 12345", inv, N, create(d)));
        d.log_level = KVRT_LOG_LEVEL_DEFAULT;
        d.max_binding_bytes = 1;
        r.push_back(err("kvrt_context_create", "max_binding_bytes 1", inv, N, create(d)));
        d.max_binding_bytes = 0;
        static const Foreign foreign;
        d.next = &foreign;
        r.push_back(err("kvrt_context_create", "a foreign struct chained", inv, N, create(d)));
        d.next = nullptr;
        // An explicit device stands whatever KVRT_DEVICE says.
        d.device = "no device has this name";
        r.push_back(err("kvrt_context_create", "device \"no device has this name\"", KVRT_ERROR_UNSUPPORTED, N,
                        create(d)));
        d.device = "4294967295";
        r.push_back(err("kvrt_context_create", "device index 4294967295", KVRT_ERROR_UNSUPPORTED, N, create(d)));
        const auto with_env = [](const char* name, const char* value, std::function<Outcome()> call) {
            return [name, value, call] {
                ScopedEnv env(name, value);
                return call();
            };
        };
        d.device = "no device has this name";
        r.push_back(err("kvrt_context_create", "device \"no device has this name\" while KVRT_DEVICE=0: not replaced",
                        KVRT_ERROR_UNSUPPORTED, N, with_env("KVRT_DEVICE", "0", create(d))));
        d.device = nullptr;
        r.push_back(err("kvrt_context_create", "KVRT_DEVICE naming no device, desc->device NULL: the variable chooses",
                        KVRT_ERROR_UNSUPPORTED, N, with_env("KVRT_DEVICE", "no device has this name", create(d))));
        r.push_back(err("kvrt_context_create", "KVRT_KERNELS='fast' with no kernel flag: the variable is read", inv, N,
                        with_env("KVRT_KERNELS", "fast", create(d))));
        d.flags = KVRT_CONTEXT_PORTABLE_KERNELS;
        r.push_back(noop("kvrt_context_create", "KVRT_KERNELS='fast' with a kernel flag: not read, created", N,
                         with_env("KVRT_KERNELS", "fast", [create, d] {
                             const Outcome o = create(d)();
                             return Outcome{holds(o.r == KVRT_SUCCESS), o.message};
                         })));
        d.flags = 0;
    }
    const auto import = [](kvrt_vulkan_import_desc v, const kvrt_context_desc* desc) {
        return [v, desc] {
            kvrt_context c = reinterpret_cast<kvrt_context>(&c);
            Outcome o = out(kvrt_context_import_vulkan(desc, &v, &c));
            if (c) {
                if (c != reinterpret_cast<kvrt_context>(&c)) kvrt_context_destroy(c);
                if (o.r != KVRT_SUCCESS) o.r = KVRT_ERROR_INTERNAL;  // a handle despite the error
            }
            return o;
        };
    };
    {
        kvrt_vulkan_import_desc v = KVRT_VULKAN_IMPORT_DESC_INIT;
        r.push_back(err("kvrt_context_import_vulkan", "vulkan NULL", inv, N, [] {
            kvrt_context c = nullptr;
            return out(kvrt_context_import_vulkan(nullptr, nullptr, &c));
        }));
        r.push_back(err("kvrt_context_import_vulkan", "out_context NULL", inv, N, [v] { return out(kvrt_context_import_vulkan(nullptr, &v, nullptr)); }));
        r.push_back(err("kvrt_context_import_vulkan", "every Vulkan handle VK_NULL_HANDLE", inv, N, import(v, nullptr)));
        v.type = bad_enum<kvrt_struct_type>(-7);
        r.push_back(err("kvrt_context_import_vulkan", "vulkan->type -7", inv, N, import(v, nullptr)));
        v = kvrt_vulkan_import_desc KVRT_VULKAN_IMPORT_DESC_INIT;
        static const Foreign foreign;
        v.next = &foreign;
        r.push_back(err("kvrt_context_import_vulkan", "a foreign struct chained", inv, N, import(v, nullptr)));
        static kvrt_context_desc bad_desc = [] {
            kvrt_context_desc d = KVRT_CONTEXT_DESC_INIT;
            d.type = KVRT_STRUCT_TYPE_STREAM_DESC;
            return d;
        }();
        r.push_back(err("kvrt_context_import_vulkan", "desc of another struct type", inv, N,
                        import(kvrt_vulkan_import_desc KVRT_VULKAN_IMPORT_DESC_INIT, &bad_desc)));
    }
    r.push_back(noop("kvrt_context_destroy", "NULL", N, [] {
        kvrt_context_destroy(nullptr);
        return Outcome{};
    }));
    r.push_back(noop("kvrt_context_destroy", "a destroyed context", N, [&w] {
        kvrt_context_destroy(w.dead_context);
        return Outcome{};
    }));
    r.push_back(noop("kvrt_context_destroy", "a buffer cast to a context", B, [&w, ctx_as_buffer] {
        kvrt_context_destroy(ctx_as_buffer);
        uint64_t size = 0;
        return Outcome{holds(kvrt_buffer_get_size(w.buffer, &size) == KVRT_SUCCESS && size == World::kBufferBytes), ""};
    }));
    const std::pair<std::string, kvrt_context> bad_contexts[] = {
        {"context NULL", nullptr}, {"a destroyed context", w.dead_context}, {"a buffer cast to a context", ctx_as_buffer}};
    for (const auto& [what, c] : bad_contexts) {
        const kvrt_context ctx = c;
        r.push_back(err("kvrt_context_get_device_info", what, hnd, N, [ctx] {
            kvrt_device_info info = KVRT_DEVICE_INFO_INIT;
            return out(kvrt_context_get_device_info(ctx, &info));
        }));
        r.push_back(err("kvrt_context_get_stats", what, hnd, N, [ctx] {
            kvrt_context_stats s = KVRT_CONTEXT_STATS_INIT;
            return out(kvrt_context_get_stats(ctx, &s));
        }));
        r.push_back(err("kvrt_context_get_pipeline_cache", what, hnd, N, [ctx] {
            uint64_t size = 0;
            return out(kvrt_context_get_pipeline_cache(ctx, nullptr, &size));
        }));
        r.push_back(err("kvrt_context_get_tuning", what, hnd, N, [ctx] {
            uint64_t size = 0;
            return out(kvrt_context_get_tuning(ctx, nullptr, &size));
        }));
        r.push_back(err("kvrt_buffer_create", what, hnd, N, [ctx] {
            kvrt_buffer_desc d = KVRT_BUFFER_DESC_INIT;
            d.size = 256;
            kvrt_buffer b = nullptr;
            return out(kvrt_buffer_create(ctx, &d, &b));
        }));
        r.push_back(err("kvrt_buffer_import_vulkan", what, hnd, N, [ctx, &w] {
            kvrt_buffer b = nullptr;
            return out(kvrt_buffer_import_vulkan(ctx, w.vk_buffer, 0, 256, &b));
        }));
        r.push_back(err("kvrt_stream_create", what, hnd, N, [ctx] {
            kvrt_stream s = nullptr;
            return out(kvrt_stream_create(ctx, nullptr, &s));
        }));
    }
    r.push_back(err("kvrt_context_get_device_info", "info NULL", inv, N, [&w] { return out(kvrt_context_get_device_info(w.a, nullptr)); }));
    r.push_back(err("kvrt_context_get_stats", "stats NULL", inv, N, [&w] { return out(kvrt_context_get_stats(w.a, nullptr)); }));
    for (int32_t t : {-7, 12345}) {
        r.push_back(err("kvrt_context_get_device_info", "info->type " + std::to_string(t), inv, N, [&w, t] {
            kvrt_device_info info = KVRT_DEVICE_INFO_INIT;
            info.type = bad_enum<kvrt_struct_type>(t);
            return out(kvrt_context_get_device_info(w.a, &info));
        }));
        r.push_back(err("kvrt_context_get_stats", "stats->type " + std::to_string(t), inv, N, [&w, t] {
            kvrt_context_stats s = KVRT_CONTEXT_STATS_INIT;
            s.type = bad_enum<kvrt_struct_type>(t);
            return out(kvrt_context_get_stats(w.a, &s));
        }));
    }
    r.push_back(err("kvrt_context_get_stats", "a foreign struct chained", inv, N, [&w] {
        Foreign f;
        kvrt_context_stats s = KVRT_CONTEXT_STATS_INIT;
        s.next = &f;
        return out(kvrt_context_get_stats(w.a, &s));
    }));
    r.push_back(err("kvrt_context_get_pipeline_cache", "size NULL", inv, N,
                    [&w] { return out(kvrt_context_get_pipeline_cache(w.a, nullptr, nullptr)); }));
    for (uint64_t room : {uint64_t{0}, uint64_t{1}})
        r.push_back(err("kvrt_context_get_pipeline_cache", "room for " + std::to_string(room) + " bytes", inv, N, [&w, room] {
            uint8_t data[4] = {};
            uint64_t size = room;
            return out(kvrt_context_get_pipeline_cache(w.a, data, &size));
        }));
    r.push_back(err("kvrt_context_get_tuning", "size NULL", inv, N,
                    [&w] { return out(kvrt_context_get_tuning(w.a, nullptr, nullptr)); }));
    for (uint64_t room : {uint64_t{0}, uint64_t{1}})
        r.push_back(err("kvrt_context_get_tuning", "room for " + std::to_string(room) + " bytes", inv, N, [&w, room] {
            // Nothing written when the text does not fit.
            char text[4] = {'x', 'x', 'x', 'x'};
            uint64_t size = room;
            Outcome o = out(kvrt_context_get_tuning(w.a, text, &size));
            if (text[0] != 'x' || size < 2) o.r = KVRT_ERROR_INTERNAL;
            return o;
        }));

    // Buffers.
    const auto buffer_create = [&w](kvrt_buffer_desc d) {
        return [&w, d] {
            kvrt_buffer b = reinterpret_cast<kvrt_buffer>(&w);
            Outcome o = out(kvrt_buffer_create(w.a, &d, &b));
            if (b) {
                if (b != reinterpret_cast<kvrt_buffer>(&w)) kvrt_buffer_destroy(b);
                if (o.r != KVRT_SUCCESS) o.r = KVRT_ERROR_INTERNAL;  // a handle despite the error
            }
            return o;
        };
    };
    r.push_back(err("kvrt_buffer_create", "out_buffer NULL", inv, N, [&w] {
        kvrt_buffer_desc d = KVRT_BUFFER_DESC_INIT;
        d.size = 256;
        return out(kvrt_buffer_create(w.a, &d, nullptr));
    }));
    r.push_back(err("kvrt_buffer_create", "desc NULL", inv, N, [&w] {
        kvrt_buffer b = nullptr;
        return out(kvrt_buffer_create(w.a, nullptr, &b));
    }));
    {
        kvrt_buffer_desc d = KVRT_BUFFER_DESC_INIT;
        r.push_back(err("kvrt_buffer_create", "size 0", inv, N, buffer_create(d)));
        d.size = 256;
        d.flags = 2;
        r.push_back(err("kvrt_buffer_create", "flags 2 (unknown)", inv, N, buffer_create(d)));
        d.flags = 0x80000000u;
        r.push_back(err("kvrt_buffer_create", "flags 0x80000000 (unknown)", inv, N, buffer_create(d)));
        d.flags = 0;
        d.type = bad_enum<kvrt_struct_type>(-7);
        r.push_back(err("kvrt_buffer_create", "desc->type -7", inv, N, buffer_create(d)));
        d.type = KVRT_STRUCT_TYPE_BUFFER_DESC;
        static const Foreign foreign;
        d.next = &foreign;
        r.push_back(err("kvrt_buffer_create", "a foreign struct chained", inv, N, buffer_create(d)));
        d.next = nullptr;
        for (uint64_t size : {kMax64, kMax64 - 3, uint64_t{1} << 62}) {
            d.size = size;
            r.push_back(err("kvrt_buffer_create", "size " + std::to_string(size), KVRT_ERROR_OUT_OF_DEVICE_MEMORY, N,
                            buffer_create(d)));
        }
    }
    r.push_back(noop("kvrt_buffer_destroy", "NULL", N, [] {
        kvrt_buffer_destroy(nullptr);
        return Outcome{};
    }));
    r.push_back(noop("kvrt_buffer_destroy", "a destroyed buffer", N, [&w] {
        kvrt_buffer_destroy(w.dead_buffer);
        return Outcome{};
    }));
    r.push_back(noop("kvrt_buffer_destroy", "a stream cast to a buffer", N, [&w, buffer_as_stream] {
        kvrt_buffer_destroy(buffer_as_stream);
        return Outcome{holds(kvrt_stream_wait(w.stream, 0) == KVRT_SUCCESS), ""};
    }));
    r.push_back(noop("kvrt_buffer_destroy", "a static window's buffer (the cache's)", Target::StaticCache, [&w] {
        kvrt_static_window win = KVRT_STATIC_WINDOW_INIT;
        if (kvrt_cache_static_get_window(w.static_cache, 0, 0, 0, KVRT_KV_ARRAY_V, &win) != KVRT_SUCCESS)
            return Outcome{KVRT_ERROR_INTERNAL, ""};
        kvrt_buffer_destroy(win.buffer);
        uint64_t size = 0;
        return Outcome{holds(kvrt_buffer_get_size(win.buffer, &size) == KVRT_SUCCESS && size > 0), ""};
    }));
    const std::pair<std::string, kvrt_buffer> bad_buffers[] = {
        {"buffer NULL", nullptr}, {"a destroyed buffer", w.dead_buffer}, {"a stream cast to a buffer", buffer_as_stream},
        {"a cache cast to a buffer", buffer_as_cache}};
    for (const auto& [what, b] : bad_buffers) {
        const kvrt_buffer buf = b;
        r.push_back(err("kvrt_buffer_get_size", what, hnd, N, [buf] {
            uint64_t s = 0;
            return out(kvrt_buffer_get_size(buf, &s));
        }));
        r.push_back(err("kvrt_buffer_upload", what, hnd, N, [buf] {
            uint32_t x = 0;
            return out(kvrt_buffer_upload(buf, 0, &x, 4));
        }));
        r.push_back(err("kvrt_buffer_download", what, hnd, N, [buf] {
            uint32_t x = 0;
            return out(kvrt_buffer_download(buf, 0, &x, 4));
        }));
        r.push_back(err("kvrt_buffer_get_vulkan", what, hnd, N, [buf] {
            VkBuffer vb = VK_NULL_HANDLE;
            VkDeviceSize o = 0, c = 0;
            return out(kvrt_buffer_get_vulkan(buf, 0, &vb, &o, &c));
        }));
        r.push_back(err("kvrt_buffer_export_memory", what, hnd, N, [buf] {
            kvrt_exported_memory e = KVRT_EXPORTED_MEMORY_INIT;
            const Outcome o = out(kvrt_buffer_export_memory(buf, 0, KVRT_MEMORY_HANDLE_OPAQUE_FD, &e));
            return e.fd == -1 ? o : Outcome{KVRT_ERROR_INTERNAL, "a descriptor written on failure"};
        }));
        r.push_back(err("kvrt_cmd_fill", what, hnd, N, [&w, buf] {
            return while_recording(w.stream, [&] { return out(kvrt_cmd_fill(w.stream, buf, 0, 4, 0)); });
        }));
        r.push_back(err("kvrt_cmd_copy", "src: " + what, hnd, B, [&w, buf] {
            return while_recording(w.stream, [&] { return out(kvrt_cmd_copy(w.stream, buf, 0, w.buffer, 0, 4)); });
        }));
        r.push_back(err("kvrt_cmd_copy", "dst: " + what, hnd, B, [&w, buf] {
            return while_recording(w.stream, [&] { return out(kvrt_cmd_copy(w.stream, w.buffer, 0, buf, 0, 4)); });
        }));
    }
    r.push_back(err("kvrt_buffer_get_size", "out_size NULL", inv, N, [&w] { return out(kvrt_buffer_get_size(w.buffer, nullptr)); }));
    struct Range {
        const char* what;
        uint64_t offset, size;
    };
    const Range bad_ranges[] = {{"offset UINT64_MAX", kMax64, 4},
                                {"offset at the end", World::kBufferBytes, 4},
                                {"size UINT64_MAX", 0, kMax64},
                                {"size one past the end", 4, World::kBufferBytes},
                                {"offset + size wraps", kMax64 - 3, 8},
                                {"offset + size wraps to 0", 8, kMax64 - 7}};
    for (const Range& g : bad_ranges) {
        r.push_back(err("kvrt_buffer_upload", g.what, inv, B, [&w, g] {
            std::vector<uint8_t> data(16, 0xAB);
            return out(kvrt_buffer_upload(w.buffer, g.offset, data.data(), g.size));
        }));
        r.push_back(err("kvrt_buffer_download", g.what, inv, B, [&w, g] {
            std::vector<uint8_t> data(16, 0xAB);
            return out(kvrt_buffer_download(w.buffer, g.offset, data.data(), g.size));
        }));
        r.push_back(err("kvrt_cmd_fill", g.what, inv, B, [&w, g] {
            return while_recording(w.stream, [&] { return out(kvrt_cmd_fill(w.stream, w.buffer, g.offset & ~3ull, g.size & ~3ull, 7)); });
        }));
        r.push_back(err("kvrt_cmd_copy", std::string("src ") + g.what, inv, B, [&w, g] {
            return while_recording(w.stream, [&] {
                return out(kvrt_cmd_copy(w.stream, w.buffer, g.offset & ~3ull, w.buffer, 0, g.size & ~3ull));
            });
        }));
        r.push_back(err("kvrt_cmd_copy", std::string("dst ") + g.what, inv, B, [&w, g] {
            return while_recording(w.stream, [&] { return out(kvrt_cmd_copy(w.stream, w.buffer, 0, w.buffer, g.offset & ~3ull, g.size & ~3ull)); });
        }));
    }
    r.push_back(err("kvrt_buffer_upload", "data NULL", inv, B, [&w] { return out(kvrt_buffer_upload(w.buffer, 0, nullptr, 4)); }));
    r.push_back(err("kvrt_buffer_download", "data NULL", inv, B, [&w] { return out(kvrt_buffer_download(w.buffer, 0, nullptr, 4)); }));
    for (uint64_t off : {World::kBufferBytes, kMax64})
        r.push_back(err("kvrt_buffer_get_vulkan", "offset " + std::to_string(off), inv, N, [&w, off] {
            VkBuffer vb = VK_NULL_HANDLE;
            VkDeviceSize o = 0, c = 0;
            return out(kvrt_buffer_get_vulkan(w.buffer, off, &vb, &o, &c));
        }));
    r.push_back(err("kvrt_buffer_get_vulkan", "out_buffer NULL", inv, N, [&w] {
        VkDeviceSize o = 0, c = 0;
        return out(kvrt_buffer_get_vulkan(w.buffer, 0, nullptr, &o, &c));
    }));
    // Exports: bad arguments, and a buffer not allocated exportable.
    {
        auto export_row = [&](const std::string& what, kvrt_result want, uint64_t offset, int32_t type,
                              kvrt_struct_type out_type, bool null_out) {
            r.push_back(err("kvrt_buffer_export_memory", what, want, N, [&w, offset, type, out_type, null_out] {
                kvrt_exported_memory e = KVRT_EXPORTED_MEMORY_INIT;
                e.type = out_type;
                const Outcome o = out(kvrt_buffer_export_memory(
                    w.buffer, offset, bad_enum<kvrt_memory_handle_type>(type), null_out ? nullptr : &e));
                return e.fd == -1 ? o : Outcome{KVRT_ERROR_INTERNAL, "a descriptor written on failure"};
            }));
        };
        const kvrt_struct_type ok = KVRT_STRUCT_TYPE_EXPORTED_MEMORY;
        export_row("a buffer not allocated exportable", KVRT_ERROR_UNSUPPORTED, 0, KVRT_MEMORY_HANDLE_OPAQUE_FD, ok, false);
        export_row("offset at the end", inv, World::kBufferBytes, KVRT_MEMORY_HANDLE_OPAQUE_FD, ok, false);
        export_row("offset UINT64_MAX", inv, kMax64, KVRT_MEMORY_HANDLE_OPAQUE_FD, ok, false);
        export_row("handle type UNDEFINED", inv, 0, KVRT_MEMORY_HANDLE_UNDEFINED, ok, false);
        export_row("handle type 3", inv, 0, 3, ok, false);
        export_row("handle type -1", inv, 0, -1, ok, false);
        export_row("out NULL", inv, 0, KVRT_MEMORY_HANDLE_OPAQUE_FD, ok, true);
        export_row("out->type STATIC_WINDOW", inv, 0, KVRT_MEMORY_HANDLE_OPAQUE_FD, KVRT_STRUCT_TYPE_STATIC_WINDOW,
                   false);
    }
    struct Import {
        const char* what;
        bool null_buffer;
        uint64_t offset, size;
    };
    const Import bad_imports[] = {{"VkBuffer VK_NULL_HANDLE", true, 0, 256},
                                  {"size 0", false, 0, 0},
                                  {"size 6 (not a multiple of 4)", false, 0, 6},
                                  {"offset 1 (misaligned)", false, 1, 256},
                                  {"size UINT64_MAX", false, 0, kMax64},
                                  {"size UINT64_MAX - 3 (above the largest binding)", false, 0, kMax64 - 3},
                                  {"offset + size wraps", false, kMax64 - 255, 512},
                                  {"offset + size wraps to exactly 0", false, kMax64 - 255, 256}};
    for (const Import& im : bad_imports)
        r.push_back(err("kvrt_buffer_import_vulkan", im.what, inv, B, [&w, im] {
            kvrt_buffer b = reinterpret_cast<kvrt_buffer>(&w);
            Outcome o = out(kvrt_buffer_import_vulkan(w.a, im.null_buffer ? VK_NULL_HANDLE : w.vk_buffer, im.offset, im.size, &b));
            if (b) {
                if (b != reinterpret_cast<kvrt_buffer>(&w)) kvrt_buffer_destroy(b);
                if (o.r != KVRT_SUCCESS) o.r = KVRT_ERROR_INTERNAL;  // a handle despite the error
            }
            return o;
        }));
    r.push_back(err("kvrt_buffer_import_vulkan", "out_buffer NULL", inv, N,
                    [&w] { return out(kvrt_buffer_import_vulkan(w.a, w.vk_buffer, 0, 256, nullptr)); }));
}

}  // namespace kvrt_test::bad_input

TEST_CASE("bad input: every exported function, table driven", "[bad_input]") {
    World w;
    std::vector<Row> rows;
    add_general_rows(w, &rows);
    add_stream_rows(w, &rows);
    add_cache_rows(w, &rows);
    add_memory_rows(w, &rows);
    add_state_rows(w, &rows);

    struct Tally {
        int rows = 0, errors = 0, noops = 0, failures = 0;
    };
    std::map<std::string, Tally> per_fn;
    Tally total;
    std::vector<std::string> failures;
    for (const Row& row : rows) {
        const std::vector<uint8_t> before = snapshot(w, row.target);
        const Outcome o = row.call();
        const std::vector<uint8_t> after = snapshot(w, row.target);
        const bool unchanged = before == after;
        Tally& t = per_fn[row.fn];
        ++t.rows;
        ++total.rows;
        std::string why;
        if (!unchanged) why = std::string("the ") + target_name(row.target) + " changed";
        else if (row.noop && o.r != KVRT_SUCCESS) why = "the documented no-op or value did not hold";
        else if (!row.noop && o.r == KVRT_SUCCESS) why = "silent success";
        else if (!row.noop && o.r != row.want) why = std::string("got ") + kvrt_result_string(o.r);
        else if (!row.noop && o.message.empty()) why = "no detail message";
        if (why.empty()) {
            ++(row.noop ? t.noops : t.errors);
            ++(row.noop ? total.noops : total.errors);
        } else {
            ++t.failures;
            ++total.failures;
            failures.push_back(row.fn + " (" + row.what + "): " + why + " \"" + o.message + "\"");
        }
    }

    // Every exported function has rows.
    std::vector<std::string> missing;
    for (const std::string& fn : exported_functions())
        if (!per_fn.count(fn)) missing.push_back(fn);
    for (const auto& [fn, t] : per_fn) {
        (void)t;
        INFO("a row names " << fn);
        CHECK(std::count(missing.begin(), missing.end(), fn) == 0);
    }

    std::ostringstream table;
    table << "bad input, " << per_fn.size() << " functions:\n";
    char line[160];
    std::snprintf(line, sizeof line, "  %-38s %5s %7s %7s %8s\n", "function", "rows", "errors", "no-ops", "failures");
    table << line;
    for (const auto& [fn, t] : per_fn) {
        std::snprintf(line, sizeof line, "  %-38s %5d %7d %7d %8d\n", fn.c_str(), t.rows, t.errors, t.noops, t.failures);
        table << line;
    }
    std::snprintf(line, sizeof line, "  %-38s %5d %7d %7d %8d\n", "total", total.rows, total.errors, total.noops,
                  total.failures);
    table << line;
    table << "  crashes, hangs, silent successes, wrong results or changed objects: " << total.failures << "\n";
    WARN(table.str());
    for (const std::string& f : failures) UNSCOPED_INFO(f);
    CHECK(failures.empty());
    for (const std::string& fn : missing) UNSCOPED_INFO("no row for " << fn);
    CHECK(missing.empty());
}
