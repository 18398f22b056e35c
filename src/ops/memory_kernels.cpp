#include "ops/memory_kernels.hpp"

#include <algorithm>
#include <string>

#include "ops/tuning.hpp"
#include "vk/context.hpp"

namespace kvrt::ops::memory_kernels {

namespace {

template <class Push>
Result get(vk::Context& ctx, const std::string& name, uint32_t n_bindings, uint32_t workgroup,
           const vk::Pipeline** out, uint32_t shared_bytes = 0) {
    vk::PipelineKey key{name, n_bindings, uint32_t{sizeof(Push)}, {workgroup}};
    key.shared_bytes = shared_bytes;
    return ctx.pipelines().get(key, out);
}

}  // namespace

Result get_pipelines(vk::Context& ctx, bool state_f16, Pipelines* out) {
    const Tuning t = Tuning::of(ctx);
    const std::string v = t.memory_wide ? "_wide" : "";
    const uint32_t wg = t.memory_workgroup, softmax_wg = t.memory_softmax_workgroup;
    Pipelines p;
    p.rows = t.memory_rows;
    p.cols = t.memory_cols;
    p.intra_rows = t.memory_intra_rows;
    p.update_m = t.memory_update_m;
    p.update_dg = t.memory_update_dg;
    p.max_groups = t.memory_max_groups;
    KVRT_TRY(get<PackPush>(ctx, "memory_pack", 3, wg, &p.pack));
    KVRT_TRY(get<ScoresPush>(ctx, "memory_scores" + v, 2, wg, &p.scores));
    // memory_softmax.comp: a float maximum and a float sum per invocation.
    KVRT_TRY(get<SoftmaxPush>(ctx, "memory_softmax" + v, 1, softmax_wg, &p.softmax, softmax_wg * 8));
    KVRT_TRY(get<UpdatePush>(ctx, std::string("memory_update") + (state_f16 ? "_f16" : "") + v, 3, wg, &p.update));
    KVRT_TRY(get<IntraPush>(ctx, "memory_intra" + v, 1, wg, &p.intra));
    KVRT_TRY(get<ReadPush>(ctx, "memory_read" + v, 2, wg, &p.read));
    KVRT_TRY(get<OutPush>(ctx, "memory_out", 3, wg, &p.out));
    *out = p;
    return KVRT_SUCCESS;
}

Result dispatch(vk::Stream& stream, const Pipelines& pipes, const vk::Pipeline& pipeline, const vk::BufferUse* uses,
                uint32_t n_uses, const void* push, uint64_t items, uint32_t heads) {
    const uint64_t wg = pipeline.local_size_x;
    const uint64_t groups = (items + wg - 1) / wg;
    if (groups > pipes.max_groups)
        return fail(KVRT_ERROR_INTERNAL, "memory kernel '%s' needs %llu workgroups", pipeline.label,
                    static_cast<unsigned long long>(groups));
    return stream.dispatch(pipeline, uses, n_uses, push, static_cast<uint32_t>(groups), 1, heads);
}

Result dispatch_rows(vk::Stream& stream, const Pipelines& pipes, const vk::Pipeline& pipeline,
                     const vk::BufferUse* uses, uint32_t n_uses, const void* push, uint32_t rows, uint32_t heads) {
    if (rows > pipes.max_groups) return fail(KVRT_ERROR_INTERNAL, "memory softmax over %u rows", rows);
    return stream.dispatch(pipeline, uses, n_uses, push, rows, 1, heads);
}

}  // namespace kvrt::ops::memory_kernels
