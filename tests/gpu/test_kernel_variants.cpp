// Choosing kernel variants (kvrt.h: KVRT_CONTEXT_PORTABLE_KERNELS,
// KVRT_CONTEXT_SHUFFLE_KERNELS and the KVRT_KERNELS environment variable):
// a forced variant is the one that runs, a device without what it needs
// refuses it, and the shuffle kernel's lane groups fit the subgroups of any
// device for every head dim.
#include "gpu_test.hpp"

#include <cstdlib>
#include <string>
#include <vector>

#include "api/handles.hpp"
#include "attention_check.hpp"
#include "core/fault.hpp"
#include "ops/tuning.hpp"
#include "vk/context.hpp"
#include "vk/pipeline.hpp"

using namespace kvrt_test;

namespace {

kvrt::ops::Tuning tuning_of(kvrt_context ctx) {
    return kvrt::ops::Tuning::of(*kvrt::api::context_of(ctx));
}

kvrt_result create_with(kvrt_flags flags, kvrt_context* out) {
    kvrt_context_desc desc = KVRT_CONTEXT_DESC_INIT;
    desc.flags = flags;
    desc.log_level = KVRT_LOG_LEVEL_NONE;
    return kvrt_context_create(&desc, out);
}

bool pow2(uint32_t x) { return x != 0 && (x & (x - 1)) == 0; }

// The lane groups of `t` for heads of 1..64 octets (8..512 dims) are sound:
// powers of two that fit the subgroup the kernel runs with, and workgroups of
// whole subgroups within the device's limits.
void check_lanes(const kvrt::ops::Tuning& t, const std::string& device) {
    for (uint32_t octets = 1; octets <= 64; ++octets) {
        const kvrt::ops::Tuning::Lanes l = t.attn_lanes(octets);
        INFO(device << ", " << octets << " octets: lanes " << l.lanes << ", required subgroup "
                    << l.required_subgroup << ", full " << l.full_subgroups << ", workgroup " << l.workgroup);
        CHECK(pow2(l.lanes));
        CHECK(l.lanes <= octets);
        CHECK(pow2(l.workgroup));
        if (t.attn_portable) {
            CHECK(l.lanes == 1);
            CHECK(l.required_subgroup == 0);
            continue;
        }
        // The subgroup the kernel sees: the one required, else the device's
        // (and the lanes stay within the smallest it may use).
        const uint32_t subgroup = l.required_subgroup ? l.required_subgroup : t.subgroup_size;
        CHECK(l.lanes <= subgroup);
        CHECK(l.workgroup % subgroup == 0);
        CHECK(l.full_subgroups == t.subgroup_full);
        if (l.required_subgroup) {
            CHECK(t.subgroup_require);
            CHECK(pow2(l.required_subgroup));
            CHECK(l.required_subgroup >= t.subgroup_min);
            CHECK(l.required_subgroup <= t.subgroup_max);
            if (t.subgroup_max_per_workgroup) CHECK(l.workgroup <= l.required_subgroup * t.subgroup_max_per_workgroup);
        } else {
            CHECK(!t.subgroup_require);
            CHECK(l.lanes <= t.subgroup_min);
        }
        // As many lanes as the head has octets, up to what one subgroup holds.
        const uint32_t cap = t.subgroup_require ? t.subgroup_max : t.subgroup_min;
        CHECK((l.lanes * 2 > octets || l.lanes * 2 > cap));
    }
}

// Every attention option at once (a sliding window with sinks, soft-cap,
// ALiBi, learned sinks), then non-causal, through `check(case, what)`.
template <class Check>
void check_options(const Check& check) {
    AttnCase c;
    c.window = 24;
    c.params.n_keep = 4;
    c.params.softcap = 20.0f;
    c.params.max_bias = 8.0f;
    c.n_queries = 6;
    std::vector<float> sinks(c.n_heads);
    for (uint32_t h = 0; h < c.n_heads; ++h) sinks[h] = 0.5f * static_cast<float>(h) - 1.0f;
    c.params.sinks = sinks.data();
    check(c, "options");
    c.params = KVRT_ATTENTION_PARAMS_INIT;
    c.window = 0;
    c.params.flags = KVRT_ATTENTION_NON_CAUSAL;
    check(c, "non-causal");
}

std::vector<kvrt::vk::PipelineKey> pipeline_keys(kvrt_context ctx) {
    return kvrt::api::context_of(ctx)->pipelines().keys();
}

}  // namespace

TEST_CASE("a forced kernel variant is the one attention records, and it is accurate", "[kernels][attention]") {
    KVRT_EACH_KERNEL_VARIANT(variant);
    GpuContext ctx(variant.flags);
    const kvrt::ops::Tuning t = tuning_of(ctx);
    if (variant.flags == KVRT_CONTEXT_PORTABLE_KERNELS) CHECK(t.attn_portable);
    if (variant.flags == KVRT_CONTEXT_SHUFFLE_KERNELS) CHECK(!t.attn_portable);
    check_lanes(t, "this device");
    // Head dims whose octets give lane groups of 1 to 32 lanes, as far as the
    // subgroups allow, also several groups per subgroup and heads that leave
    // lanes idle (80, 96, 112, 192).
    // (One query, as in the sweep of test_attention.cpp: the dims both run
    // share their pipelines, which lavapipe compiles for seconds each.)
    for (uint32_t dim : {16u, 32u, 48u, 64u, 80u, 96u, 112u, 128u, 192u, 256u}) {
        AttnCase c;
        c.dk = c.dv = dim;
        c.tokens_per_seq = 45;
        c.seed = dim + 7;
        const AttnOutcome o = run_attention_case(ctx, c);
        INFO("dim " << dim << " (" << t.attn_lanes(dim / 8).lanes << " lanes per group): nmse " << o.nmse);
        CHECK(o.values > 0);
        CHECK(o.nmse <= 1e-6);
        CHECK(o.guard_ok);
    }
}

// The shared-memory tiled kernel (KVRT_CONTEXT_TILED_KERNELS) against the
// reference: every K/V type (one pipeline each; it compiles slowly on
// lavapipe, so this is its own test rather than a third variant of every
// attention test), head dims whose tiles hold 32 down to 7 cells in 32 KiB,
// GQA and MQA, f16 queries and outputs, every option, holes and shared
// prefixes, windows, and cells spread over binding pieces.
TEST_CASE("the tiled attention kernel matches the reference for every type and option", "[kernels][attention]") {
    GpuContext ctx(KVRT_CONTEXT_TILED_KERNELS);  // the flag stands whatever KVRT_KERNELS says
    const kvrt::ops::Tuning t = tuning_of(ctx);
    REQUIRE(t.attn_tiled_forced);
    const auto check = [&](AttnCase c, const char* what) {
        c.capacity = 512;
        const AttnOutcome o = run_attention_case(ctx, c);
        INFO(what << ": dims " << c.dk << "/" << c.dv << ", types " << kvrt_type_name(c.k_type) << "/"
                  << kvrt_type_name(c.v_type) << ", " << t.attn_tile_cells(c.dk, c.dv) << " cells per tile, nmse "
                  << o.nmse);
        CHECK(o.values > 0);
        CHECK(o.nmse <= 1e-6);
        CHECK(o.guard_ok);
    };
    const std::pair<kvrt_type, kvrt_type> types[] = {
        {KVRT_TYPE_F32, KVRT_TYPE_F32}, {KVRT_TYPE_F16, KVRT_TYPE_F16},   {KVRT_TYPE_Q8_0, KVRT_TYPE_Q8_0},
        {KVRT_TYPE_Q4_0, KVRT_TYPE_Q4_0}, {KVRT_TYPE_Q8_0, KVRT_TYPE_F16}, {KVRT_TYPE_U8_STATIC, KVRT_TYPE_U16_STATIC}};
    for (const auto& [kt, vt] : types) {
        AttnCase c;
        c.k_type = kt;
        c.v_type = vt;
        if (kt == KVRT_TYPE_U8_STATIC) c.k_scales = {{1.0f / 32, 128}};
        if (vt == KVRT_TYPE_U16_STATIC) c.v_scales = {{1.0f / 4096, 32768}};
        c.n_seqs = 2;
        c.tokens_per_seq = 90;
        c.n_queries = 9;  // prefill-like: 9 queries per sequence
        c.seed = 11 + static_cast<uint32_t>(kt) * 7 + static_cast<uint32_t>(vt);
        check(c, "types");
    }
    for (uint32_t dim : {32u, 64u, 256u}) {
        AttnCase c;
        c.dk = c.dv = dim;
        c.tokens_per_seq = 70;
        c.n_queries = 5;
        c.seed = dim;
        check(c, "head dim");
    }
    {
        AttnCase c;  // GQA 8:1 and f16 queries and outputs, holes, a shared prefix over 3 sequences
        c.n_heads = 8;
        c.n_kv_heads = 1;
        c.q_type = c.out_type = KVRT_TYPE_F16;
        c.n_seqs = 3;
        c.shared_prefix = 20;
        c.holes = 5;
        c.n_queries = 4;
        check(c, "GQA, f16, holes, shared prefix");
    }
    check_options(check);
}

TEST_CASE("the portable kernel's wide loads match the reference wherever rows allow them", "[kernels][attention]") {
    if (std::getenv("KVRT_KERNELS")) {
        WARN("KVRT_KERNELS is set: it decides the kernels of every context");
        return;
    }
    {
        // kvrt's own pick on CPU drivers with shaderInt64, never when the
        // context asks for portable kernels.
        GpuContext probe;
        const kvrt::vk::Context& vc = *kvrt::api::context_of(static_cast<kvrt_context>(probe));
        const bool expected =
            vc.info().props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU && vc.enabled().shader_int64;
        CHECK(tuning_of(probe).attn_wide == expected);
        GpuContext portable(KVRT_CONTEXT_PORTABLE_KERNELS);
        CHECK_FALSE(tuning_of(portable).attn_wide);
        if (!expected) {
            WARN("this device gets no wide kernel (kvrt picks it on CPU drivers with shaderInt64)");
            return;
        }
    }
    // A context per case, so that its pipelines tell which loads ran: `wide`
    // is the expected VEC4 bits 2 (K) and 3 (V) of the wide pipeline (0: the
    // plain portable one runs).
    const auto check = [](const AttnCase& c, const char* what, uint32_t wide = 12, uint64_t binding = 0) {
        GpuContext ctx(0, binding);
        const AttnOutcome o = run_attention_case(ctx, c);
        uint32_t seen = 0;
        for (const kvrt::vk::PipelineKey& k : pipeline_keys(ctx))
            if (k.shader.rfind("attn_", 0) == 0 && k.shader.size() > 5 &&
                k.shader.compare(k.shader.size() - 5, 5, "_wide") == 0)
                seen |= k.spec.at(8) & 12u;
        INFO(what << ": types " << kvrt_type_name(c.k_type) << "/" << kvrt_type_name(c.v_type) << ", dims " << c.dk
                  << "/" << c.dv << ", " << c.n_queries << " queries, nmse " << o.nmse << ", wide bits " << seen);
        CHECK(o.values > 0);
        CHECK(o.nmse <= 1e-6);
        CHECK(o.guard_ok);
        CHECK(seen == wide);
    };
    {
        // F16 32 bytes at a time: prefill (a tile of 8 rows and one of 1),
        // 3 sequences sharing a prefix, holes.
        AttnCase c;
        c.n_heads = 8;
        c.n_kv_heads = 4;
        c.n_seqs = 3;
        c.shared_prefix = 20;
        c.holes = 6;
        c.tokens_per_seq = 50;
        c.n_queries = 9;
        check(c, "f16 prefill");
        check_options(check);
    }
    {
        AttnCase c;  // F32 heads of 160 bytes, decode
        c.k_type = c.v_type = KVRT_TYPE_F32;
        c.dk = c.dv = 40;
        c.tokens_per_seq = 70;
        check(c, "f32 decode");
    }
    {
        // F16 K heads of 144 bytes (16-byte aligned, not 32) keep 16-byte
        // loads; the Q8_0 V beside them is wide.
        AttnCase c;
        c.dk = 72;
        c.v_type = KVRT_TYPE_Q8_0;
        c.n_queries = 3;
        check(c, "f16 K not 32-byte aligned", 8);
    }
    {
        // Q8_0 and Q4_0 blocks at every even offset of their 16-byte units:
        // heads of 68 and 36 bytes, 4 KV heads.
        AttnCase c;
        c.k_type = KVRT_TYPE_Q8_0;
        c.v_type = KVRT_TYPE_Q4_0;
        c.n_heads = 8;
        c.n_kv_heads = 4;
        c.n_seqs = 2;
        c.holes = 5;
        c.n_queries = 9;
        check(c, "q8_0 K, q4_0 V");
        std::swap(c.k_type, c.v_type);
        c.dk = c.dv = 128;  // four blocks per head
        c.n_kv_heads = 1;   // GQA 8:1
        c.q_type = c.out_type = KVRT_TYPE_F16;
        check(c, "q4_0 K, q8_0 V, GQA 8:1, f16 queries and outputs");
    }
    {
        AttnCase c;  // rows over many 64 KiB binding pieces
        c.capacity = 320;
        c.tokens_per_seq = 150;
        c.holes = 5;
        c.n_seqs = 2;
        c.k_type = KVRT_TYPE_Q8_0;
        c.v_type = KVRT_TYPE_F32;
        check(c, "pieces", 12, 64 << 10);
    }
}

TEST_CASE("lane groups fit the subgroups of every kind of device", "[kernels]") {
    // Tables as devices report them: fixed subgroups with size control,
    // ranges that may be required, and no size control at all.
    struct Device {
        const char* name;
        uint32_t size, min, max, per_workgroup;
        bool require, full;
    };
    const Device devices[] = {
        {"32 lanes, size control", 32, 32, 32, 32, true, true},
        {"32 or 64 lanes, size control", 64, 32, 64, 16, true, true},
        {"8 to 32 lanes, size control", 32, 8, 32, 64, true, true},
        {"8 lanes, size control (lavapipe)", 8, 8, 8, 32, true, true},
        {"64 to 128 lanes, size control", 64, 64, 128, 16, true, true},
        {"32 lanes, no size control", 32, 32, 32, 0, false, false},
        {"16 to 64 lanes, full subgroups only", 64, 16, 64, 0, false, true},
        {"4 lanes, no size control", 4, 4, 4, 0, false, false},
    };
    for (const Device& d : devices) {
        kvrt::ops::Tuning t;
        t.attn_portable = false;
        t.subgroup_size = d.size;
        t.subgroup_min = d.min;
        t.subgroup_max = d.max;
        t.subgroup_max_per_workgroup = d.per_workgroup;
        t.subgroup_require = d.require;
        t.subgroup_full = d.full;
        check_lanes(t, d.name);
    }
    kvrt::ops::Tuning portable;
    check_lanes(portable, "portable");
}

TEST_CASE("forcing kernels: conflicting flags, a device without subgroup shuffles, KVRT_KERNELS", "[kernels]") {
    if (std::getenv("KVRT_KERNELS")) {
        WARN("KVRT_KERNELS is set: it decides the kernels of the contexts this test creates without a flag");
        return;
    }
    kvrt_context ctx = reinterpret_cast<kvrt_context>(0x1);
    CHECK(create_with(KVRT_CONTEXT_PORTABLE_KERNELS | KVRT_CONTEXT_SHUFFLE_KERNELS, &ctx) ==
          KVRT_ERROR_INVALID_ARGUMENT);
    CHECK(ctx == nullptr);
    CHECK(std::string(kvrt_last_error_message()).find("exclude each other") != std::string::npos);
    for (kvrt_flags other : {KVRT_CONTEXT_PORTABLE_KERNELS, KVRT_CONTEXT_SHUFFLE_KERNELS}) {
        CHECK(create_with(KVRT_CONTEXT_TILED_KERNELS | other, &ctx) == KVRT_ERROR_INVALID_ARGUMENT);
        CHECK(ctx == nullptr);
    }
    // The tiled kernel is kvrt's own pick nowhere yet; forced, it serves
    // every call, with the portable variants of the other kernels.
    REQUIRE(create_with(0, &ctx) == KVRT_SUCCESS);
    CHECK(!tuning_of(ctx).attn_tiled_forced);
    kvrt_context_destroy(ctx);
    REQUIRE(create_with(KVRT_CONTEXT_TILED_KERNELS, &ctx) == KVRT_SUCCESS);
    CHECK(tuning_of(ctx).attn_tiled_forced);
    CHECK(tuning_of(ctx).attn_portable);
    CHECK(!tuning_of(ctx).memory_wide);
    kvrt_context_destroy(ctx);
    {
        ScopedEnv env("KVRT_KERNELS", "tiled");
        REQUIRE(create_with(0, &ctx) == KVRT_SUCCESS);
        CHECK(tuning_of(ctx).attn_tiled_forced);
        kvrt_context_destroy(ctx);
    }

    // A device that lacks subgroup shuffles refuses them: no silent fallback.
    kvrt::fault::arm_site("device without subgroup shuffles");
    const kvrt_result refused = create_with(KVRT_CONTEXT_SHUFFLE_KERNELS, &ctx);
    const std::string message = kvrt_last_error_message();
    kvrt::fault::arm(0);
    CHECK(refused == KVRT_ERROR_UNSUPPORTED);
    CHECK(ctx == nullptr);
    CHECK(message.find("subgroup-shuffle kernels were asked for") != std::string::npos);
    // Without the flag the same device is fine (portable kernels).
    kvrt::fault::arm_site("device without subgroup shuffles");
    const kvrt_result plain = create_with(0, &ctx);
    kvrt::fault::arm(0);
    CHECK(plain == KVRT_SUCCESS);
    kvrt_context_destroy(ctx);

    for (const char* bad : {"fast", ""}) {  // set but empty is no name either
        INFO("KVRT_KERNELS='" << bad << "'");
        ScopedEnv env("KVRT_KERNELS", bad);
        CHECK(create_with(0, &ctx) == KVRT_ERROR_INVALID_ARGUMENT);
        CHECK(ctx == nullptr);
        CHECK(std::string(kvrt_last_error_message()).find("KVRT_KERNELS") != std::string::npos);
    }
    {
        // Without a kernel flag the variable chooses.
        ScopedEnv env("KVRT_KERNELS", "portable");
        REQUIRE(create_with(0, &ctx) == KVRT_SUCCESS);
        CHECK(tuning_of(ctx).attn_portable);
        kvrt_context_destroy(ctx);
    }
    kvrt_device_info info = KVRT_DEVICE_INFO_INIT;
    {
        ScopedEnv env("KVRT_KERNELS", "auto");
        REQUIRE(create_with(0, &ctx) == KVRT_SUCCESS);
        KVRT_REQUIRE_OK(kvrt_context_get_device_info(ctx, &info));
        const bool shuffle_ok = (info.subgroup_ops & KVRT_SUBGROUP_OP_BASIC) &&
                                (info.subgroup_ops & KVRT_SUBGROUP_OP_SHUFFLE) && info.subgroup_size >= 2;
        // kvrt's own pick: shuffles on GPUs that have them.
        CHECK(tuning_of(ctx).attn_portable == (!shuffle_ok || info.device_type == KVRT_DEVICE_TYPE_CPU));
        kvrt_context_destroy(ctx);
    }
    {
        ScopedEnv env("KVRT_KERNELS", "shuffle");
        const kvrt_result r = create_with(0, &ctx);
        if (r == KVRT_SUCCESS) {
            CHECK(!tuning_of(ctx).attn_portable);
            kvrt_context_destroy(ctx);
        } else {
            CHECK(r == KVRT_ERROR_UNSUPPORTED);
        }
    }
}

TEST_CASE("KVRT_KERNELS never overrides a kernel flag the application set", "[kernels]") {
    // Each flag against each other value of the variable, and a value that
    // is no name at all: the flag stands, the variable is not read, and the
    // log says it was ignored.
    struct Forced {
        kvrt_flags flag;
        const char* name;
    };
    const bool shuffle_ok = kernel_variants().size() > 1;
    std::vector<Forced> forced{{KVRT_CONTEXT_PORTABLE_KERNELS, "portable"}, {KVRT_CONTEXT_TILED_KERNELS, "tiled"}};
    if (shuffle_ok) forced.push_back({KVRT_CONTEXT_SHUFFLE_KERNELS, "shuffle"});
    for (const Forced& f : forced) {
        for (const char* env_value : {"portable", "shuffle", "tiled", "auto", "fast", ""}) {
            if (std::string(env_value) == f.name) continue;
            INFO("flag " << f.name << ", KVRT_KERNELS='" << env_value << "'");
            ScopedEnv env("KVRT_KERNELS", env_value);
            struct Log {
                bool ignored = false;
            } log;
            kvrt_context_desc desc = KVRT_CONTEXT_DESC_INIT;
            desc.flags = f.flag;
            desc.log_level = KVRT_LOG_LEVEL_INFO;
            desc.log_user_data = &log;
            desc.log_callback = [](void* user, kvrt_log_level, const char* message) {
                if (std::string(message).find("KVRT_KERNELS") != std::string::npos &&
                    std::string(message).find("ignored") != std::string::npos)
                    static_cast<Log*>(user)->ignored = true;
            };
            kvrt_context ctx = nullptr;
            REQUIRE(kvrt_context_create(&desc, &ctx) == KVRT_SUCCESS);
            const kvrt::ops::Tuning t = tuning_of(ctx);
            CHECK(t.attn_tiled_forced == (f.flag == KVRT_CONTEXT_TILED_KERNELS));
            CHECK(t.attn_portable == (f.flag != KVRT_CONTEXT_SHUFFLE_KERNELS));
            CHECK(log.ignored);
            kvrt_context_destroy(ctx);
        }
    }
}
