#include "ops/tuning.hpp"

#include <algorithm>

#include "vk/context.hpp"

namespace kvrt::ops {

Tuning Tuning::of(const vk::Context& ctx) {
    const auto& dev = ctx.info();
    const bool portable_asked = ctx.options().portable_kernels;
    Tuning t;
    t.cpu = dev.props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;

    const uint32_t need = VK_SUBGROUP_FEATURE_BASIC_BIT | VK_SUBGROUP_FEATURE_SHUFFLE_BIT;
    t.attn_portable = portable_asked || t.cpu || (dev.subgroup_ops & need) != need || dev.subgroup_size < 2;
    t.subgroup_size = dev.subgroup_size;
    t.attn_workgroup = std::max<uint32_t>(64, t.attn_portable ? 64 : dev.subgroup_size);
    t.attn_target_groups = t.cpu ? 64 : 1024;
    t.attn_min_split_cells = t.cpu ? 128 : 64;

    t.memory_wide = t.cpu && ctx.enabled().shader_int64 && !portable_asked;
    t.memory_softmax_workgroup = t.cpu ? 8 : 64;
    t.memory_rows = t.memory_wide ? 16 : 8;
    t.memory_cols = t.memory_wide ? 2 : 1;
    t.memory_intra_rows = t.memory_wide ? 16 : 8;
    t.memory_update_m = t.memory_wide ? 16 : 8;
    t.memory_update_dg = t.memory_wide ? 2 : 1;
    return t;
}

}  // namespace kvrt::ops
