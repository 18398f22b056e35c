// Shared fixture of the GPU tests: a context with the Khronos validation layer
// on (core and synchronization checks). Any validation error seen during the
// context's life fails the test that owns it, with the messages printed.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "core/fault.hpp"
#include "kvrt/kvrt.h"
#include "reference/quant.hpp"

namespace kvrt_test {

class GpuContext {
public:
    explicit GpuContext(kvrt_flags flags = 0, uint64_t max_binding_bytes = 0);
    ~GpuContext();
    GpuContext(const GpuContext&) = delete;
    GpuContext& operator=(const GpuContext&) = delete;

    kvrt_context get() const { return ctx_; }
    operator kvrt_context() const { return ctx_; }

    // Validation errors so far.
    uint64_t validation_errors() const;

private:
    static void on_log(void* user, kvrt_log_level level, const char* message);
    kvrt_context ctx_ = nullptr;
    mutable std::mutex mutex_;
    std::vector<std::string> errors_;
};

// Sets an environment variable for its scope, then restores the old value.
class ScopedEnv {
public:
    ScopedEnv(const char* name, const char* value);
    ~ScopedEnv();
    ScopedEnv(const ScopedEnv&) = delete;
    ScopedEnv& operator=(const ScopedEnv&) = delete;

private:
    const char* name_;
    bool had_ = false;
    std::string old_;
};

// A kernel variant the tests run: the context flag that forces it, and its
// name for messages.
struct KernelVariant {
    kvrt_flags flags = 0;
    std::string name;
};

// The kernel variants this device runs: the portable kernels, and the
// subgroup-shuffle kernels where the device has what they need (found by
// creating a context that forces them). The shared-memory tiled attention
// kernel has tests of its own (test_kernel_variants.cpp). When KVRT_KERNELS is set, the list
// is that one choice: contexts created without a kernel flag, which the variable decides.
const std::vector<KernelVariant>& kernel_variants();

// kvrt's own pick of kernels, then each kernel forced: portable, tiled and
// shuffle where the device has it. With KVRT_KERNELS set, only the pick (which the
// variable then makes).
std::vector<KernelVariant> pick_and_forced_variants();

// Runs the enclosing test case once per kernel variant of kernel_variants()
// (Catch's GENERATE) and names the variant in every failure: declares
// `variant`, whose flags go to the test's GpuContext. Use it once, at the top
// of a TEST_CASE.
#define KVRT_EACH_KERNEL_VARIANT(variant)                                                                  \
    const ::kvrt_test::KernelVariant variant = GENERATE(from_range(::kvrt_test::kernel_variants()));      \
    INFO("kernels: " << variant.name)

// The accuracy sweeps (every type and head dim in every kernel variant) run
// their full cross product by default (make test). With KVRT_TEST_MATRIX set
// to "covering" (CI: .ci/run), case `i` of a sweep runs in one variant only,
// the (i mod n)-th of the n of kernel_variants(): every case still runs, in
// one variant, and every variant runs its share of the types and dims. Any
// other value but "full" fails the test that asks.
bool sweep_case_runs(size_t i, const KernelVariant& variant);

// A stream of `ctx` destroyed at scope exit.
// Whether the context's device has timestamps; where it has none
// (KVRT_DEVICE_PROFILE=mali-g710), checks that a stream asking for them is
// refused with KVRT_ERROR_UNSUPPORTED and says so (WARN).
bool timestamps_or_refused(kvrt_context ctx);

class Stream {
public:
    explicit Stream(kvrt_context ctx, kvrt_flags flags = 0);
    ~Stream() { kvrt_stream_destroy(s_); }
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;
    operator kvrt_stream() const { return s_; }

private:
    kvrt_stream s_ = nullptr;
};

// A buffer of `ctx` destroyed at scope exit.
class Buffer {
public:
    Buffer(kvrt_context ctx, uint64_t size);
    ~Buffer() { kvrt_buffer_destroy(b_); }
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    operator kvrt_buffer() const { return b_; }

    std::vector<uint32_t> download_words(uint64_t offset, uint64_t count) const;
    void upload_words(uint64_t offset, const std::vector<uint32_t>& words) const;

private:
    kvrt_buffer b_ = nullptr;
};

// A handle destroyed at scope exit by `Destroy` (a kvrt_*_destroy, which
// takes NULL as a no-op): movable, not copyable, converts to the handle. So a
// failing REQUIRE, which leaves the test by an exception, frees it too.
template <class H, void (*Destroy)(H)>
class Owned {
public:
    Owned() = default;
    explicit Owned(H h) : h_(h) {}
    ~Owned() { Destroy(h_); }
    Owned(Owned&& o) noexcept : h_(o.release()) {}
    Owned& operator=(Owned&& o) noexcept {
        if (this != &o) reset(o.release());
        return *this;
    }
    Owned(const Owned&) = delete;
    Owned& operator=(const Owned&) = delete;

    operator H() const& { return h_; }
    // A temporary owner would destroy the handle at once: no conversion.
    operator H() && = delete;
    H get() const { return h_; }
    // Where a create call writes the new handle (the old one is destroyed first).
    H* out() {
        reset();
        return &h_;
    }
    // Gives the handle up without destroying it.
    H release() {
        H h = h_;
        h_ = nullptr;
        return h;
    }
    // Destroys the handle held now and holds `h` instead.
    void reset(H h = nullptr) {
        Destroy(h_);
        h_ = h;
    }

private:
    H h_ = nullptr;
};

// The owners of the handles tests create by hand.
using Cache = Owned<kvrt_cache, kvrt_cache_destroy>;
using OwnedMemory = Owned<kvrt_memory, kvrt_memory_destroy>;

// The descriptor of a test cache, with KVRT_CACHE_DESC_INIT's defaults; the
// layout's struct (static or paged) and the window group are chained by
// create() from the fields below, so a test names only what it sets.
struct CacheSpec {
    uint32_t layers = 0, heads = 0, kv_heads = 0;
    uint32_t dk = 0, dv = 0;  // head dims of K and V; dv 0: dk
    kvrt_type type_k = KVRT_TYPE_F16, type_v = KVRT_TYPE_F16;
    uint32_t capacity = 0, max_seqs = 0;
    kvrt_layout layout = KVRT_LAYOUT_DEFAULT;
    uint32_t seq_len = 0;            // static layout: kvrt_static_layout_desc.seq_len
    double reserve = 0.0;            // static layout: kvrt_static_layout_desc.reserve
    bool smart_mask = false;         // static layout: chains a kvrt_static_style_desc of SMART_MASK
    uint32_t block_size = 0;         // paged layout: kvrt_paged_layout_desc.block_size
    kvrt_flags flags = 0;
    std::vector<uint32_t> windows;   // layer_windows; empty: NULL
    bool window_group = false;       // chains a kvrt_window_layout_desc of:
    uint32_t group_cells = 0, group_keep = 0;  // its cells and n_keep
    const char* label = nullptr;
    const void* next = nullptr;      // further chained structs (RoPE, scales), after the ones above

    // Setters, for specs written in one expression.
    // Layers, query heads, KV heads and head dims (dv 0: dk).
    CacheSpec& shape(uint32_t n_layers, uint32_t n_heads, uint32_t n_kv_heads, uint32_t head_dim_k,
                     uint32_t head_dim_v = 0) {
        layers = n_layers, heads = n_heads, kv_heads = n_kv_heads, dk = head_dim_k, dv = head_dim_v;
        return *this;
    }
    // The stored types of K and V.
    CacheSpec& types(kvrt_type k, kvrt_type v) {
        type_k = k, type_v = v;
        return *this;
    }
    // One stored type for K and V.
    CacheSpec& type(kvrt_type kv) { return types(kv, kv); }
    // Capacity and max_seqs (0: the header's default).
    CacheSpec& cells(uint32_t n_cells, uint32_t n_seqs = 0) {
        capacity = n_cells, max_seqs = n_seqs;
        return *this;
    }
    // The static layout with its seq_len and reserve.
    CacheSpec& static_layout(uint32_t rows, double reserve_factor = 0.0) {
        layout = KVRT_LAYOUT_STATIC, seq_len = rows, reserve = reserve_factor;
        return *this;
    }
    // The static layout in the smart-mask style (a ring of seq_len - 1 rows).
    CacheSpec& smart_mask_layout(uint32_t rows) {
        layout = KVRT_LAYOUT_STATIC, seq_len = rows, reserve = 0.0, smart_mask = true;
        return *this;
    }
    // The paged layout with its block size (0: 16).
    CacheSpec& paged(uint32_t block = 0) {
        layout = KVRT_LAYOUT_PAGED, block_size = block;
        return *this;
    }
    // The cache flags.
    CacheSpec& with_flags(kvrt_flags cache_flags) {
        flags = cache_flags;
        return *this;
    }
    // A window group of `cells_of_group` cells keeping positions below n_keep.
    CacheSpec& group(uint32_t cells_of_group = 0, uint32_t n_keep = 0) {
        window_group = true, group_cells = cells_of_group, group_keep = n_keep;
        return *this;
    }

    // kvrt_cache_create's result; the cache goes to *out (NULL on failure).
    kvrt_result try_create(kvrt_context ctx, Cache* out) const;
    // The cache; REQUIREs its creation to succeed.
    Cache create(kvrt_context ctx) const;
    // kvrt_cache_estimate_size of the same descriptor.
    kvrt_result estimate(kvrt_context ctx, kvrt_cache_estimate* out) const;
};

// The bytes of a vector's elements: the size of an output buffer that kvrt
// writes into (kvrt_cache_read, kvrt_memory_get_state).
template <class T>
uint64_t bytes_of(const std::vector<T>& v) {
    return uint64_t{v.size()} * sizeof(T);
}

// Structs the tests pass by pointer, each started from its KVRT_*_INIT macro
// (so `type` and the defaults are the header's) with the fields a test sets.
inline kvrt_batch make_batch(uint32_t n_tokens, const int32_t* positions, const int32_t* seq_ids,
                             const uint32_t* seq_id_counts = nullptr) {
    kvrt_batch b = KVRT_BATCH_INIT;
    b.n_tokens = n_tokens;
    b.positions = positions;
    b.seq_id_counts = seq_id_counts;
    b.seq_ids = seq_ids;
    return b;
}

inline kvrt_tensor_ref host_tensor(const void* data, kvrt_type element_type = KVRT_TYPE_F32, uint64_t row_stride = 0) {
    kvrt_tensor_ref t = KVRT_TENSOR_REF_INIT;
    t.host = data;
    t.element_type = element_type;
    t.row_stride = row_stride;
    return t;
}

inline kvrt_tensor_ref buffer_tensor(kvrt_buffer buffer, uint64_t offset, kvrt_type element_type = KVRT_TYPE_F32,
                                     uint64_t row_stride = 0, uint64_t layer_stride = 0) {
    kvrt_tensor_ref t = KVRT_TENSOR_REF_INIT;
    t.buffer = buffer;
    t.element_type = element_type;
    t.offset = offset;
    t.row_stride = row_stride;
    t.layer_stride = layer_stride;
    return t;
}

inline kvrt_output_ref host_output(void* data, kvrt_type element_type = KVRT_TYPE_F32) {
    kvrt_output_ref o = KVRT_OUTPUT_REF_INIT;
    o.host = data;
    o.element_type = element_type;
    return o;
}

inline kvrt_output_ref buffer_output(kvrt_buffer buffer, uint64_t offset, kvrt_type element_type = KVRT_TYPE_F32,
                                     uint64_t row_stride = 0) {
    kvrt_output_ref o = KVRT_OUTPUT_REF_INIT;
    o.buffer = buffer;
    o.element_type = element_type;
    o.offset = offset;
    o.row_stride = row_stride;
    return o;
}

// The CPU reference's type for F32, F16, Q8_0 or Q4_0 (the static-scale
// types have reference functions of their own).
inline kvrt::ref::Type ref_type(kvrt_type t) {
    switch (t) {
        case KVRT_TYPE_F32: return kvrt::ref::Type::F32;
        case KVRT_TYPE_F16: return kvrt::ref::Type::F16;
        case KVRT_TYPE_Q8_0: return kvrt::ref::Type::Q8_0;
        default: return kvrt::ref::Type::Q4_0;
    }
}

// True for the static-scale types (KVRT_TYPE_U8_STATIC, KVRT_TYPE_U16_STATIC).
inline bool is_static_scale(kvrt_type t) { return t == KVRT_TYPE_U8_STATIC || t == KVRT_TYPE_U16_STATIC; }

// One layer's quantization of a static-scale type: value = scale * (q - zero_point).
struct QuantScale {
    float scale = 0.0f;
    int32_t zero_point = 0;
};

// The kvrt_static_scales_desc of per-layer (or shared) K and V scales: it holds
// the arrays the descriptor points at, so it must outlive every use of desc().
// An empty list gives NULL arrays; count is the longer list's length.
class StaticScales {
public:
    StaticScales(const std::vector<QuantScale>& k, const std::vector<QuantScale>& v);
    StaticScales(const StaticScales&) = delete;
    StaticScales& operator=(const StaticScales&) = delete;
    kvrt_static_scales_desc* desc() { return &desc_; }

private:
    std::vector<float> k_scales_, v_scales_;
    std::vector<int32_t> k_zero_points_, v_zero_points_;
    kvrt_static_scales_desc desc_ = KVRT_STATIC_SCALES_DESC_INIT;
};

// Device memory the context holds now (kvrt_context_stats.device_bytes).
uint64_t device_bytes(kvrt_context ctx);
// The context's device bytes once they are at most `at_most`, or after 10 s
// whatever they are: memory freed while the device still used it (a call that
// timed out with work in flight) counts until the device finished with it.
uint64_t settled_device_bytes(kvrt_context ctx, uint64_t at_most);

// One single-token query `q` (sequence `seq`, position `pos`) in layer `layer`
// of two caches: each one's result code and output.
struct AttentionPair {
    kvrt_result ra = KVRT_SUCCESS, rb = KVRT_SUCCESS;
    std::vector<float> a, b;  // out_values each; 1 and 2 before the call, so a row left unwritten differs
};
AttentionPair attend_both(kvrt_cache a, kvrt_cache b, int32_t layer, int32_t seq, int32_t pos,
                          const std::vector<float>& q, size_t out_values, const kvrt_attention_params& params);

// A grid of single-token queries for comparing two caches that hold the same
// tokens in different cells: each sequence in [0, seqs) at positions 0, step,
// 2 step, ... up to max_pos, in every layer. Query values are a fixed
// function of the sequence and the position.
struct AttentionGrid {
    uint32_t seqs = 1, heads = 1, head_dim_k = 0, head_dim_v = 0;
    std::vector<uint32_t> layer_windows;  // one per layer; 0: the layer has no window
    int32_t max_pos = 0, step = 1;
    kvrt_attention_params params = KVRT_ATTENTION_PARAMS_INIT;
};

// Runs the grid on `a` and `b`: every query gets the same result code from
// both and, where answered, the same values up to the order of the sums
// (NMSE <= 1e-12). Returns the queries answered in layers with a window.
uint32_t same_attention(kvrt_cache a, kvrt_cache b, const AttentionGrid& grid);

// The value of element (layer, head, d) of token `pos`'s K (v false) or V.
using TokenValue = float (*)(int32_t pos, uint32_t layer, uint32_t head, uint32_t d, bool v);

// Stores tokens [first, first + n) of `seq` in every layer of `c` (f32 from
// host memory, `layers` x `kv_heads` rows of `dim` values for K and V, as
// `value` gives them); REQUIREs the store to succeed.
void store_values(kvrt_cache c, int32_t seq, int32_t first, uint32_t n, uint32_t layers, uint32_t kv_heads,
                  uint32_t dim, TokenValue value);

// The state of sequence `seq` (-1: every sequence) as kvrt_cache_state_save
// writes it, sized by the query call first; REQUIREs both calls to succeed.
std::vector<uint8_t> save_state(kvrt_cache c, int32_t seq);

// Calls `call` with the n-th fault point (core/fault.hpp) armed, disarmed
// again when it returns or throws, and returns its result. *reached gets the
// fault points it passed: fewer than n means the armed one was never reached,
// so a sweep of n = 1, 2, ... has covered every point once that happens.
template <class F>
kvrt_result with_fault_point(uint64_t n, uint64_t* reached, F&& call) {
    struct Disarm {
        ~Disarm() { kvrt::fault::arm(0); }
    } disarm;
    kvrt::fault::arm(n);
    const kvrt_result r = call();
    *reached = kvrt::fault::points_passed();
    return r;
}

// Runs begin/record/submit/wait on `s` with a generous timeout.
template <class F>
void run_stream(kvrt_stream s, F&& record) {
    REQUIRE(kvrt_stream_begin(s) == KVRT_SUCCESS);
    record();
    REQUIRE(kvrt_stream_submit(s) == KVRT_SUCCESS);
    REQUIRE(kvrt_stream_wait(s, 120ull * 1000 * 1000 * 1000) == KVRT_SUCCESS);
}

}  // namespace kvrt_test

// REQUIREs a kvrt call to succeed, showing the detail message if it does not.
#define KVRT_REQUIRE_OK(call)                                   \
    do {                                                        \
        const kvrt_result kvrt_r_ = (call);                     \
        INFO(#call << ": " << kvrt_last_error_message());       \
        REQUIRE(kvrt_r_ == KVRT_SUCCESS);                       \
    } while (0)
