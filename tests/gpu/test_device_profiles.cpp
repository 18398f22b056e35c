// Device profiles (KVRT_DEVICE_PROFILE, src/vk/profile.hpp): under the profile
// of a real GPU kvrt sees that GPU's limits and features, never more than
// this device has; its tuning picks what it picks for that GPU (checked
// against choices written out here, per profile); attention still matches
// the reference; and what a profile lacks is refused with a clear error.
#include "gpu_test.hpp"

#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "attention_check.hpp"
#include "vk/profile.hpp"

using namespace kvrt_test;
using kvrt::vk::DeviceProfile;

namespace {

constexpr const char* kVar = "KVRT_DEVICE_PROFILE";

kvrt_device_info info_of(kvrt_context ctx) {
    kvrt_device_info info = KVRT_DEVICE_INFO_INIT;
    KVRT_REQUIRE_OK(kvrt_context_get_device_info(ctx, &info));
    return info;
}

// The device as it is, whatever profile the environment names.
kvrt_device_info plain_device() {
    ScopedEnv none(kVar, "");
    GpuContext ctx;
    return info_of(ctx);
}

std::map<std::string, std::string> tuning_of(kvrt_context ctx) {
    uint64_t size = 0;
    KVRT_REQUIRE_OK(kvrt_context_get_tuning(ctx, nullptr, &size));
    std::string text(size, '\0');
    KVRT_REQUIRE_OK(kvrt_context_get_tuning(ctx, text.data(), &size));
    REQUIRE(size == text.size());
    REQUIRE(text.back() == '\0');
    text.pop_back();
    std::map<std::string, std::string> out;
    size_t at = 0;
    while (at < text.size()) {
        size_t end = text.find('\n', at);
        REQUIRE(end != std::string::npos);  // every line ends with a newline
        const std::string row = text.substr(at, end - at);
        at = end + 1;
        const size_t space = row.find(' ');
        REQUIRE(space != std::string::npos);
        out[row.substr(0, space)] = row.substr(space + 1);
    }
    return out;
}

kvrt_flags feature_bits(const kvrt::vk::FeatureSet& f) {
    kvrt_flags b = 0;
    if (f.shader_float16) b |= KVRT_DEVICE_FEATURE_SHADER_FLOAT16;
    if (f.shader_int8) b |= KVRT_DEVICE_FEATURE_SHADER_INT8;
    if (f.shader_int16) b |= KVRT_DEVICE_FEATURE_SHADER_INT16;
    if (f.shader_int64) b |= KVRT_DEVICE_FEATURE_SHADER_INT64;
    if (f.storage_16bit) b |= KVRT_DEVICE_FEATURE_STORAGE_16BIT;
    if (f.storage_8bit) b |= KVRT_DEVICE_FEATURE_STORAGE_8BIT;
    return b;
}

// What kvrt must pick under each profile, written out by hand from the
// tuning rules (ops/tuning.hpp) and the profiles' values. "-" : not checked.
struct Expected {
    const char* profile;
    const char* type;  // kvrt info's words
    const char* kernel;
    const char* mapped;
    const char* timestamps;
    const char* require;  // subgroup.require, where this device can require sizes
};
const Expected kExpected[] = {
    {"nvidia-rtx-5080", "discrete", "shuffle", "no", "64 bits", "yes"},
    {"amd-rx-9070-xt", "discrete", "shuffle", "yes", "64 bits", "yes"},
    {"intel-arc-a770", "discrete", "shuffle", "yes", "36 bits", "yes"},
    {"apple-m1", "integrated", "shuffle", "yes", "64 bits", "no"},  // no compute in requiredSubgroupSizeStages
    {"adreno-740", "integrated", "shuffle", "yes", "48 bits", "yes"},
    {"mali-g710", "integrated", "shuffle", "yes", "0 bits", "yes"},
    {"vulkan-minimum", "other", "portable", "no", "0 bits", "no"},
};

kvrt_device_type device_type(const char* word) {
    if (std::strcmp(word, "discrete") == 0) return KVRT_DEVICE_TYPE_DISCRETE_GPU;
    if (std::strcmp(word, "integrated") == 0) return KVRT_DEVICE_TYPE_INTEGRATED_GPU;
    return KVRT_DEVICE_TYPE_OTHER;
}

}  // namespace

TEST_CASE("every device profile is in the table of expected choices, with sound values", "[profiles]") {
    const auto& profiles = kvrt::vk::device_profiles();
    REQUIRE(profiles.size() == std::size(kExpected));
    for (size_t i = 0; i < profiles.size(); ++i) {
        const DeviceProfile& p = profiles[i];
        INFO(p.name);
        CHECK(std::strcmp(p.name, kExpected[i].profile) == 0);
        CHECK(kvrt::vk::find_device_profile(p.name) == &p);
        // The Vulkan minimums every conformant device meets (Limit Requirements).
        CHECK(p.max_storage_buffer_range >= (1u << 27));
        CHECK(p.max_shared_memory >= 16384);
        CHECK(p.max_invocations >= 128);
        CHECK(p.max_push_constants >= 128);
        CHECK(p.max_storage_buffers_per_stage >= 4);
        CHECK(p.min_storage_offset_alignment <= 256);
        CHECK(p.min_subgroup_size <= p.subgroup_size);
        CHECK(p.subgroup_size <= p.max_subgroup_size);
        CHECK((p.subgroup_ops & VK_SUBGROUP_FEATURE_BASIC_BIT) != 0);
        CHECK(std::strlen(p.source) > 20);
    }
    CHECK(kvrt::vk::find_device_profile("NVIDIA-RTX-5080") == &profiles[0]);
    CHECK(kvrt::vk::find_device_profile("nvidia") == nullptr);
}

TEST_CASE("under each device profile kvrt sees the GPU's limits, within this device's", "[profiles]") {
    const kvrt_device_info plain = plain_device();
    for (const DeviceProfile& p : kvrt::vk::device_profiles()) {
        INFO("profile " << p.name);
        ScopedEnv env(kVar, p.name);
        GpuContext ctx;
        const kvrt_device_info d = info_of(ctx);
        CHECK(std::strncmp(d.name, p.device_name, std::strlen(p.device_name)) == 0);
        CHECK(std::strstr(d.name, plain.name) != nullptr);
        CHECK(d.vendor_id == plain.vendor_id);  // names the driver (pipeline caches)
        CHECK(d.device_id == plain.device_id);
        CHECK(d.max_storage_buffer_range == std::min<uint64_t>(plain.max_storage_buffer_range, p.max_storage_buffer_range));
        CHECK(d.max_shared_memory_bytes == std::min(plain.max_shared_memory_bytes, p.max_shared_memory));
        CHECK(d.max_workgroup_invocations == std::min(plain.max_workgroup_invocations, p.max_invocations));
        CHECK(d.max_push_constants_bytes == std::min(plain.max_push_constants_bytes, p.max_push_constants));
        CHECK(d.max_memory_allocation_size == std::min(plain.max_memory_allocation_size, p.max_allocation));
        CHECK(d.device_local_bytes == std::min(plain.device_local_bytes, p.device_local_bytes));
        CHECK(d.subgroup_ops == (plain.subgroup_ops & p.subgroup_ops));
        CHECK(d.subgroup_size == plain.subgroup_size);  // what the device runs with
        const kvrt_flags optional = KVRT_DEVICE_FEATURE_SHADER_FLOAT16 | KVRT_DEVICE_FEATURE_SHADER_INT8 |
                                    KVRT_DEVICE_FEATURE_SHADER_INT16 | KVRT_DEVICE_FEATURE_SHADER_INT64 |
                                    KVRT_DEVICE_FEATURE_STORAGE_16BIT | KVRT_DEVICE_FEATURE_STORAGE_8BIT;
        CHECK((d.features & optional) == (plain.features & optional & feature_bits(p.features)));
        CHECK(((d.features & KVRT_DEVICE_FEATURE_TIMESTAMPS) != 0) ==
              ((plain.features & KVRT_DEVICE_FEATURE_TIMESTAMPS) != 0 && p.timestamp_bits > 0));
        CHECK(((d.features & KVRT_DEVICE_FEATURE_UNIFIED_MEMORY) != 0) ==
              ((plain.features & KVRT_DEVICE_FEATURE_UNIFIED_MEMORY) != 0 && p.unified_memory));
        // Enumeration shows the same device.
        uint32_t n = 1;
        kvrt_device_info listed = KVRT_DEVICE_INFO_INIT;
        const kvrt_result r = kvrt_enumerate_devices(&listed, &n);
        CHECK((r == KVRT_SUCCESS || r == KVRT_ERROR_INVALID_ARGUMENT));  // more devices than one: still filled
        CHECK(std::strncmp(listed.name, p.device_name, std::strlen(p.device_name)) == 0);
    }
}

TEST_CASE("kvrt_context_get_tuning gives each profile's choices", "[profiles]") {
    const kvrt_device_info plain = plain_device();
    std::string plain_require;
    {
        ScopedEnv none(kVar, "");
        GpuContext ctx;
        const auto t = tuning_of(ctx);
        CHECK(t.at("profile") == "none");
        CHECK(t.at("device") == plain.name);
        plain_require = t.at("subgroup.require");
    }
    for (const Expected& e : kExpected) {
        INFO("profile " << e.profile);
        ScopedEnv env(kVar, e.profile);
        GpuContext ctx;
        const kvrt_device_info d = info_of(ctx);
        CHECK(d.device_type == device_type(e.type));
        const auto t = tuning_of(ctx);
        CHECK(t.at("profile") == e.profile);
        CHECK(t.at("device") == d.name);
        CHECK(t.at("cpu") == "no");
        const bool shuffles = (plain.subgroup_ops & KVRT_SUBGROUP_OP_SHUFFLE) && plain.subgroup_size >= 2;
        CHECK(t.at("attention.kernel") == (shuffles ? e.kernel : "portable"));
        CHECK(t.at("memory.kernel") == "portable");
        CHECK(t.at("attention.workgroup") == "64");
        CHECK(t.at("memory.softmax_workgroup") == "64");
        CHECK(t.at("mapped_memory") == ((plain.features & KVRT_DEVICE_FEATURE_UNIFIED_MEMORY) ? e.mapped : "no"));
        if (plain.features & KVRT_DEVICE_FEATURE_TIMESTAMPS) CHECK(t.at("timestamps") == e.timestamps);
        CHECK(t.at("subgroup.require") == (plain_require == "yes" ? e.require : "no"));
        CHECK(t.at("shared_memory") == std::to_string(d.max_shared_memory_bytes));
        // The shuffle kernel's lane groups: 16 lanes (128 values) where the
        // subgroups hold them; a size is required only where the profile can.
        const std::string lanes = t.at("attention.lanes.d128");
        if (t.at("attention.kernel") == "shuffle") {
            const uint32_t want = std::min<uint32_t>(16, plain.subgroup_size);
            CHECK(lanes.rfind(std::to_string(want) + " (workgroup 64", 0) == 0);
            CHECK((lanes.find("required subgroup 0") != std::string::npos) == (t.at("subgroup.require") == "no"));
        } else {
            CHECK(lanes.rfind("1 (workgroup 64, required subgroup 0", 0) == 0);
        }
        // Tiles of the shared-memory kernel fit the profile's shared memory:
        // f32 K and V, a position and a cell index per cell.
        const uint32_t tile = static_cast<uint32_t>(std::stoul(t.at("attention.tile_cells.d128")));
        CHECK(tile == std::min<uint32_t>(32, d.max_shared_memory_bytes / (256 * 4 + 8)));
    }
}

TEST_CASE("attention matches the reference under every GPU profile", "[profiles][attention]") {
    for (const DeviceProfile& p : kvrt::vk::device_profiles()) {
        if (std::strcmp(p.name, "vulkan-minimum") == 0) continue;  // refuses attention (below)
        INFO("profile " << p.name);
        ScopedEnv env(kVar, p.name);
        GpuContext ctx;
        for (const kvrt_type t : {KVRT_TYPE_F16, KVRT_TYPE_Q4_0}) {
            AttnCase c;
            c.k_type = c.v_type = t;
            c.n_heads = 8;
            c.n_kv_heads = 2;
            c.dk = c.dv = 128;
            c.n_seqs = 2;
            c.shared_prefix = 20;
            c.holes = 7;
            c.n_queries = 3;
            const AttnOutcome o = run_attention_case(ctx, c);
            INFO(kvrt_type_name(t) << ": nmse " << o.nmse);
            CHECK(o.values > 0);
            CHECK(o.nmse <= 1e-6);
            CHECK(o.guard_ok);
        }
        CHECK(ctx.validation_errors() == 0);
    }
}

TEST_CASE("what a profile lacks is refused with a clear error, and the cache stays usable", "[profiles]") {
    SECTION("an unknown profile") {
        ScopedEnv env(kVar, "no-such-gpu");
        kvrt_context ctx = nullptr;
        CHECK(kvrt_context_create(nullptr, &ctx) == KVRT_ERROR_INVALID_ARGUMENT);
        CHECK(ctx == nullptr);
        CHECK(std::strstr(kvrt_last_error_message(), "nvidia-rtx-5080") != nullptr);
        uint32_t n = 0;
        CHECK(kvrt_enumerate_devices(nullptr, &n) == KVRT_ERROR_INVALID_ARGUMENT);
    }
    SECTION("no timestamps") {
        ScopedEnv env(kVar, "mali-g710");
        GpuContext ctx;
        kvrt_stream_desc sd = KVRT_STREAM_DESC_INIT;
        sd.flags = KVRT_STREAM_TIMESTAMPS;
        kvrt_stream s = nullptr;
        CHECK(kvrt_stream_create(ctx, &sd, &s) == KVRT_ERROR_UNSUPPORTED);
        CHECK(std::strstr(kvrt_last_error_message(), "timestamps") != nullptr);
        CHECK(s == nullptr);
        sd.flags = 0;
        KVRT_REQUIRE_OK(kvrt_stream_create(ctx, &sd, &s));
        kvrt_stream_destroy(s);
    }
    SECTION("the Vulkan minimum: 4 storage buffers per stage, no subgroup shuffles") {
        ScopedEnv env(kVar, "vulkan-minimum");
        {
            ScopedEnv kernels("KVRT_KERNELS", "shuffle");
            kvrt_context c = nullptr;
            CHECK(kvrt_context_create(nullptr, &c) == KVRT_ERROR_UNSUPPORTED);
            CHECK(std::strstr(kvrt_last_error_message(), "subgroup") != nullptr);
        }
        GpuContext ctx;
        const Cache cache = CacheSpec().shape(1, 2, 1, 64).cells(32, 1).create(ctx);
        const int32_t pos[2] = {0, 1}, seq[2] = {0, 0};
        const kvrt_batch batch = make_batch(2, pos, seq);
        std::vector<float> k(2 * 64), v(2 * 64), q(2 * 64), out(2 * 64, 7.0f);
        for (size_t i = 0; i < k.size(); ++i) {
            k[i] = 0.01f * static_cast<float>(i % 13);
            v[i] = 0.02f * static_cast<float>(i % 7);
            q[i] = 0.03f * static_cast<float>(i % 5);
        }
        const kvrt_tensor_ref kr = host_tensor(k.data()), vr = host_tensor(v.data()), qr = host_tensor(q.data());
        const kvrt_result stored = kvrt_cache_store(cache, nullptr, &batch, 0, &kr, &vr, nullptr);
        INFO("store: " << kvrt_last_error_message());
        CHECK((stored == KVRT_SUCCESS || stored == KVRT_ERROR_UNSUPPORTED));
        const kvrt_batch query = make_batch(1, pos + 1, seq);
        const kvrt_output_ref o = host_output(out.data());
        kvrt_attention_params params = KVRT_ATTENTION_PARAMS_INIT;
        CHECK(kvrt_cache_attention(cache, nullptr, 0, &query, &qr, &o, &params) == KVRT_ERROR_UNSUPPORTED);
        const std::string why = kvrt_last_error_message();
        INFO(why);
        CHECK(why.find("storage buffers") != std::string::npos);
        CHECK(out[0] == 7.0f);  // nothing written
        // The cache is as it was: its cells, and (where they were stored)
        // the rows it holds.
        kvrt_cache_info ci = KVRT_CACHE_INFO_INIT;
        KVRT_REQUIRE_OK(kvrt_cache_get_info(cache, &ci));
        CHECK(ci.used == (stored == KVRT_SUCCESS ? 2u : 0u));
        CHECK(ctx.validation_errors() == 0);
    }
}
