#include "ops/memory_kernels.hpp"

#include <algorithm>
#include <string>

#include "vk/context.hpp"

namespace kvrt::ops::memory_kernels {

namespace {

constexpr uint32_t kWorkgroup = 64;
constexpr uint64_t kMaxGroups = 65535;  // the smallest maxComputeWorkGroupCount[0]

template <class Push>
Result get(vk::Context& ctx, const std::string& name, uint32_t n_bindings, uint32_t workgroup,
           const vk::Pipeline** out) {
    return ctx.pipelines().get({name, n_bindings, uint32_t{sizeof(Push)}, {workgroup}}, out);
}

}  // namespace

bool use_wide(const vk::Context& ctx) {
    return ctx.info().props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU && ctx.enabled().shader_int64 &&
           !ctx.options().portable_kernels;
}

Result get_pipelines(vk::Context& ctx, bool state_f16, Pipelines* out) {
    const bool wide = use_wide(ctx);
    const std::string v = wide ? "_wide" : "";
    // The softmax reduces across its workgroup through shared memory: one
    // SIMD row of lanes on CPUs (no barrier cost), a wider group on GPUs.
    const uint32_t softmax_wg = ctx.info().props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU ? 8 : 64;
    Pipelines p;
    p.rows = wide ? 16 : 8;
    p.cols = wide ? 2 : 1;
    p.intra_rows = wide ? 16 : 8;
    p.update_m = wide ? 16 : 8;
    p.update_dg = wide ? 2 : 1;
    KVRT_TRY(get<PackPush>(ctx, "memory_pack", 3, kWorkgroup, &p.pack));
    KVRT_TRY(get<ScoresPush>(ctx, "memory_scores" + v, 2, kWorkgroup, &p.scores));
    KVRT_TRY(get<SoftmaxPush>(ctx, "memory_softmax" + v, 1, softmax_wg, &p.softmax));
    KVRT_TRY(get<UpdatePush>(ctx, std::string("memory_update") + (state_f16 ? "_f16" : "") + v, 3, kWorkgroup,
                             &p.update));
    KVRT_TRY(get<IntraPush>(ctx, "memory_intra" + v, 1, kWorkgroup, &p.intra));
    KVRT_TRY(get<ReadPush>(ctx, "memory_read" + v, 2, kWorkgroup, &p.read));
    KVRT_TRY(get<OutPush>(ctx, "memory_out", 3, kWorkgroup, &p.out));
    *out = p;
    return KVRT_SUCCESS;
}

Result dispatch(vk::Stream& stream, const vk::Pipeline& pipeline, const vk::BufferUse* uses, uint32_t n_uses,
                const void* push, uint64_t items, uint32_t heads) {
    const uint64_t wg = pipeline.local_size_x;
    const uint64_t groups = (items + wg - 1) / wg;
    if (groups > kMaxGroups)
        return fail(KVRT_ERROR_INTERNAL, "memory kernel '%s' needs %llu workgroups", pipeline.label,
                    static_cast<unsigned long long>(groups));
    return stream.dispatch(pipeline, uses, n_uses, push, static_cast<uint32_t>(groups), 1, heads);
}

Result dispatch_rows(vk::Stream& stream, const vk::Pipeline& pipeline, const vk::BufferUse* uses, uint32_t n_uses,
                     const void* push, uint32_t rows, uint32_t heads) {
    if (rows > kMaxGroups) return fail(KVRT_ERROR_INTERNAL, "memory softmax over %u rows", rows);
    return stream.dispatch(pipeline, uses, n_uses, push, rows, 1, heads);
}

}  // namespace kvrt::ops::memory_kernels
