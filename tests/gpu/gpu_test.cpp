#include "gpu_test.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <thread>

#include "kvrt/kvrt_paged.h"
#include "reference/metrics.hpp"

namespace kvrt_test {

ScopedEnv::ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) {
        had_ = true;
        old_ = old;
    }
    setenv(name, value, 1);
}

ScopedEnv::~ScopedEnv() {
    if (had_) setenv(name_, old_.c_str(), 1);
    else unsetenv(name_);
}


GpuContext::GpuContext(kvrt_flags flags, uint64_t max_binding_bytes) {
    kvrt_context_desc desc = KVRT_CONTEXT_DESC_INIT;
    desc.flags = flags | KVRT_CONTEXT_VALIDATION;
    desc.log_callback = &GpuContext::on_log;
    desc.log_user_data = this;
    desc.log_level = KVRT_LOG_LEVEL_WARN;
    desc.max_binding_bytes = max_binding_bytes;
    // lavapipe compiles a kernel at its first dispatch, which the wait
    // covers: seconds for the largest attention kernels, many more when the
    // two cores are shared (sanitizers, parallel test runs). The library's
    // 60 s default then fails tests that are only slow.
    desc.wait_timeout_ns = 600ull * 1000 * 1000 * 1000;
    const kvrt_result r = kvrt_context_create(&desc, &ctx_);
    INFO("kvrt_context_create: " << kvrt_last_error_message());
    REQUIRE(r == KVRT_SUCCESS);
}

GpuContext::~GpuContext() {
    const uint64_t errors = validation_errors();
    kvrt_context_destroy(ctx_);
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& e : errors_) UNSCOPED_INFO(e);
    CHECK(errors == 0);
    CHECK(errors_.empty());
}

const std::vector<KernelVariant>& kernel_variants() {
    static const std::vector<KernelVariant> variants = [] {
        if (const char* env = std::getenv("KVRT_KERNELS"); env && *env)
            return std::vector<KernelVariant>{{0, std::string("KVRT_KERNELS=") + env}};
        std::vector<KernelVariant> v{{KVRT_CONTEXT_PORTABLE_KERNELS, "portable"}};
        kvrt_context_desc desc = KVRT_CONTEXT_DESC_INIT;
        desc.flags = KVRT_CONTEXT_SHUFFLE_KERNELS;
        desc.log_level = KVRT_LOG_LEVEL_NONE;
        kvrt_context probe = nullptr;
        const kvrt_result r = kvrt_context_create(&desc, &probe);
        kvrt_context_destroy(probe);
        if (r == KVRT_SUCCESS) v.push_back({KVRT_CONTEXT_SHUFFLE_KERNELS, "shuffle"});
        else if (r != KVRT_ERROR_UNSUPPORTED)  // a device that has none at all fails every test anyway
            v.push_back({KVRT_CONTEXT_SHUFFLE_KERNELS, "shuffle (context creation failed)"});

        return v;
    }();
    return variants;
}

bool sweep_case_runs(size_t i, const KernelVariant& variant) {
    const char* env = std::getenv("KVRT_TEST_MATRIX");
    const std::string mode = env ? env : "full";
    INFO("KVRT_TEST_MATRIX=" << mode);
    REQUIRE((mode == "full" || mode == "covering"));
    const std::vector<KernelVariant>& all = kernel_variants();
    if (mode == "full" || all.size() < 2) return true;
    for (size_t v = 0; v < all.size(); ++v)
        if (all[v].flags == variant.flags && all[v].name == variant.name) return i % all.size() == v;
    FAIL("sweep_case_runs: " << variant.name << " is not one of the kernel variants");
    return true;
}

std::vector<KernelVariant> pick_and_forced_variants() {
    std::vector<KernelVariant> variants{{0, "kvrt's pick"}};
    if (std::getenv("KVRT_KERNELS")) return variants;
    variants.push_back({KVRT_CONTEXT_PORTABLE_KERNELS, "portable"});
    variants.push_back({KVRT_CONTEXT_TILED_KERNELS, "tiled"});
    if (kernel_variants().size() > 1) variants.push_back(kernel_variants()[1]);
    return variants;
}

uint64_t GpuContext::validation_errors() const {
    kvrt_context_stats stats = KVRT_CONTEXT_STATS_INIT;
    if (kvrt_context_get_stats(ctx_, &stats) != KVRT_SUCCESS) return UINT64_MAX;
    return stats.validation_errors;
}

void GpuContext::on_log(void* user, kvrt_log_level level, const char* message) {
    if (level < KVRT_LOG_LEVEL_ERROR) return;
    auto* self = static_cast<GpuContext*>(user);
    std::lock_guard<std::mutex> lock(self->mutex_);
    self->errors_.emplace_back(message);
}

StaticScales::StaticScales(const std::vector<QuantScale>& k, const std::vector<QuantScale>& v) {
    for (const QuantScale& q : k) {
        k_scales_.push_back(q.scale);
        k_zero_points_.push_back(q.zero_point);
    }
    for (const QuantScale& q : v) {
        v_scales_.push_back(q.scale);
        v_zero_points_.push_back(q.zero_point);
    }
    desc_.count = static_cast<uint32_t>(std::max(k.size(), v.size()));
    if (!k.empty()) {
        desc_.k_scales = k_scales_.data();
        desc_.k_zero_points = k_zero_points_.data();
    }
    if (!v.empty()) {
        desc_.v_scales = v_scales_.data();
        desc_.v_zero_points = v_zero_points_.data();
    }
}

uint64_t device_bytes(kvrt_context ctx) {
    kvrt_context_stats s = KVRT_CONTEXT_STATS_INIT;
    KVRT_REQUIRE_OK(kvrt_context_get_stats(ctx, &s));
    return s.device_bytes;
}

uint64_t settled_device_bytes(kvrt_context ctx, uint64_t at_most) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (;;) {
        const uint64_t bytes = device_bytes(ctx);
        if (bytes <= at_most || std::chrono::steady_clock::now() > give_up) return bytes;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
}

namespace {

// The descriptor of `spec`, with its chained structs, handed to `use` while
// they live.
template <class F>
kvrt_result with_desc(const CacheSpec& spec, F&& use) {
    kvrt_window_layout_desc wl = KVRT_WINDOW_LAYOUT_DESC_INIT;
    wl.next = spec.next;
    wl.cells = spec.group_cells;
    wl.n_keep = spec.group_keep;
    const void* chain = spec.window_group ? static_cast<const void*>(&wl) : spec.next;
    kvrt_static_layout_desc sl = KVRT_STATIC_LAYOUT_DESC_INIT;
    sl.seq_len = spec.seq_len;
    sl.reserve = spec.reserve;
    kvrt_static_style_desc ss = KVRT_STATIC_STYLE_DESC_INIT;
    ss.style = KVRT_STATIC_STYLE_SMART_MASK;
    kvrt_paged_layout_desc pl = KVRT_PAGED_LAYOUT_DESC_INIT;
    pl.block_size = spec.block_size;
    if (spec.layout == KVRT_LAYOUT_STATIC) {
        if (spec.smart_mask) {
            ss.next = chain;
            chain = &ss;
        }
        sl.next = chain;
        chain = &sl;
    } else if (spec.layout == KVRT_LAYOUT_PAGED) {
        pl.next = chain;
        chain = &pl;
    }
    kvrt_cache_desc d = KVRT_CACHE_DESC_INIT;
    d.next = chain;
    d.n_layers = spec.layers;
    d.n_heads = spec.heads;
    d.n_kv_heads = spec.kv_heads;
    d.head_dim_k = spec.dk;
    d.head_dim_v = spec.dv;
    d.capacity = spec.capacity;
    d.max_seqs = spec.max_seqs;
    d.type_k = spec.type_k;
    d.type_v = spec.type_v;
    d.layout = spec.layout;
    d.layer_windows = spec.windows.empty() ? nullptr : spec.windows.data();
    d.label = spec.label;
    d.flags = spec.flags;
    return use(d);
}

}  // namespace

kvrt_result CacheSpec::try_create(kvrt_context ctx, Cache* out) const {
    return with_desc(*this, [&](const kvrt_cache_desc& d) { return kvrt_cache_create(ctx, &d, out->out()); });
}

Cache CacheSpec::create(kvrt_context ctx) const {
    Cache c;
    KVRT_REQUIRE_OK(try_create(ctx, &c));
    return c;
}

kvrt_result CacheSpec::estimate(kvrt_context ctx, kvrt_cache_estimate* out) const {
    return with_desc(*this, [&](const kvrt_cache_desc& d) { return kvrt_cache_estimate_size(ctx, &d, out); });
}

AttentionPair attend_both(kvrt_cache a, kvrt_cache b, int32_t layer, int32_t seq, int32_t pos,
                          const std::vector<float>& q, size_t out_values, const kvrt_attention_params& params) {
    AttentionPair r;
    r.a.assign(out_values, 1.0f);
    r.b.assign(out_values, 2.0f);
    const kvrt_batch qb = make_batch(1, &pos, &seq);
    const kvrt_tensor_ref qt = host_tensor(q.data());
    const kvrt_output_ref oa = host_output(r.a.data()), ob = host_output(r.b.data());
    r.ra = kvrt_cache_attention(a, nullptr, layer, &qb, &qt, &oa, &params);
    r.rb = kvrt_cache_attention(b, nullptr, layer, &qb, &qt, &ob, &params);
    return r;
}

uint32_t same_attention(kvrt_cache a, kvrt_cache b, const AttentionGrid& grid) {
    uint32_t answered = 0;
    for (int32_t s = 0; s < static_cast<int32_t>(grid.seqs); ++s)
        for (int32_t pos = 0; pos <= grid.max_pos; pos += grid.step) {
            std::vector<float> q(size_t{grid.heads} * grid.head_dim_k);
            for (size_t e = 0; e < q.size(); ++e) q[e] = std::cos(0.31f * static_cast<float>(e + 5 * s + pos));
            for (size_t l = 0; l < grid.layer_windows.size(); ++l) {
                const AttentionPair r = attend_both(a, b, static_cast<int32_t>(l), s, pos, q,
                                                    size_t{grid.heads} * grid.head_dim_v, grid.params);
                INFO("sequence " << s << ", position " << pos << ", layer " << l);
                REQUIRE(r.ra == r.rb);
                if (r.ra != KVRT_SUCCESS) continue;
                REQUIRE(kvrt::ref::nmse(r.a, r.b) <= 1e-12);
                if (grid.layer_windows[l] != 0) ++answered;
            }
        }
    return answered;
}

void store_values(kvrt_cache c, int32_t seq, int32_t first, uint32_t n, uint32_t layers, uint32_t kv_heads,
                  uint32_t dim, TokenValue value) {
    std::vector<int32_t> pos(n), seqs(n, seq);
    const size_t row = size_t{kv_heads} * dim;
    std::vector<float> k(row * n * layers), v(row * n * layers);
    for (uint32_t i = 0; i < n; ++i) {
        pos[i] = first + static_cast<int32_t>(i);
        for (uint32_t l = 0; l < layers; ++l)
            for (uint32_t h = 0; h < kv_heads; ++h)
                for (uint32_t d = 0; d < dim; ++d) {
                    const size_t at = (size_t{l} * n + i) * row + size_t{h} * dim + d;
                    k[at] = value(pos[i], l, h, d, false);
                    v[at] = value(pos[i], l, h, d, true);
                }
    }
    kvrt_batch b = make_batch(n, pos.data(), seqs.data());
    kvrt_tensor_ref kr = host_tensor(k.data()), vr = host_tensor(v.data());
    KVRT_REQUIRE_OK(kvrt_cache_store(c, nullptr, &b, -1, &kr, &vr, nullptr));
}

std::vector<uint8_t> save_state(kvrt_cache c, int32_t seq) {
    uint64_t size = 0;
    KVRT_REQUIRE_OK(kvrt_cache_state_save(c, seq, nullptr, &size));
    std::vector<uint8_t> bytes(size);
    KVRT_REQUIRE_OK(kvrt_cache_state_save(c, seq, bytes.data(), &size));
    REQUIRE(size == bytes.size());
    return bytes;
}

bool timestamps_or_refused(kvrt_context ctx) {
    kvrt_device_info info = KVRT_DEVICE_INFO_INIT;
    KVRT_REQUIRE_OK(kvrt_context_get_device_info(ctx, &info));
    if (info.features & KVRT_DEVICE_FEATURE_TIMESTAMPS) return true;
    kvrt_stream_desc desc = KVRT_STREAM_DESC_INIT;
    desc.flags = KVRT_STREAM_TIMESTAMPS;
    kvrt_stream s = nullptr;
    CHECK(kvrt_stream_create(ctx, &desc, &s) == KVRT_ERROR_UNSUPPORTED);
    CHECK(s == nullptr);
    WARN("the device has no timestamps: only their refusal was checked here");
    return false;
}

Stream::Stream(kvrt_context ctx, kvrt_flags flags) {
    kvrt_stream_desc desc = KVRT_STREAM_DESC_INIT;
    desc.flags = flags;
    KVRT_REQUIRE_OK(kvrt_stream_create(ctx, &desc, &s_));
}

Buffer::Buffer(kvrt_context ctx, uint64_t size) {
    kvrt_buffer_desc desc = KVRT_BUFFER_DESC_INIT;
    desc.size = size;
    desc.label = "test buffer";
    KVRT_REQUIRE_OK(kvrt_buffer_create(ctx, &desc, &b_));
}

std::vector<uint32_t> Buffer::download_words(uint64_t offset, uint64_t count) const {
    std::vector<uint32_t> out(count);
    KVRT_REQUIRE_OK(kvrt_buffer_download(b_, offset, out.data(), count * 4));
    return out;
}

void Buffer::upload_words(uint64_t offset, const std::vector<uint32_t>& words) const {
    KVRT_REQUIRE_OK(kvrt_buffer_upload(b_, offset, words.data(), words.size() * 4));
}

}  // namespace kvrt_test
