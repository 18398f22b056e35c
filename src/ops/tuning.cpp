#include "ops/tuning.hpp"

#include <algorithm>

#include "vk/context.hpp"
#include "vk/device.hpp"

namespace kvrt::ops {

Tuning Tuning::of(const vk::Context& ctx) {
    const auto& dev = ctx.info();
    const vk::KernelChoice choice = ctx.options().kernels;
    Tuning t;
    t.cpu = dev.props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;

    const bool shuffle_ok = vk::supports_shuffle_kernels(dev);
    t.attn_portable = choice == vk::KernelChoice::Portable || choice == vk::KernelChoice::Tiled || !shuffle_ok ||
                      (t.cpu && choice != vk::KernelChoice::Shuffle);
    t.attn_wide = t.cpu && t.attn_portable && ctx.enabled().shader_int64 && choice == vk::KernelChoice::Auto;
    t.attn_tiled_forced = choice == vk::KernelChoice::Tiled;
    t.attn_tiled_target_groups = t.cpu ? 16 : 512;
    t.shared_memory_bytes = dev.props.limits.maxComputeSharedMemorySize;
    t.subgroup_size = dev.subgroup_size;
    t.subgroup_min = std::min(dev.min_subgroup_size, dev.subgroup_size);
    t.subgroup_max = std::max(dev.max_subgroup_size, dev.subgroup_size);
    t.subgroup_require = ctx.enabled().subgroup_size_control && dev.compute_subgroup_size_required;
    t.subgroup_full = ctx.enabled().compute_full_subgroups;
    t.subgroup_max_per_workgroup = dev.max_compute_workgroup_subgroups;
    t.attn_workgroup = t.cpu ? 8 : 64;
    t.attn_target_groups = t.cpu ? 64 : 1024;
    t.attn_min_split_cells = t.cpu ? 128 : 64;

    t.memory_wide = t.cpu && ctx.enabled().shader_int64 && choice != vk::KernelChoice::Portable &&
                    choice != vk::KernelChoice::Tiled;
    t.memory_softmax_workgroup = t.cpu ? 8 : 64;
    t.memory_rows = t.memory_wide ? 16 : 8;
    t.memory_cols = t.memory_wide ? 2 : 1;
    t.memory_intra_rows = t.memory_wide ? 16 : 8;
    t.memory_update_m = t.memory_wide ? 16 : 8;
    t.memory_update_dg = t.memory_wide ? 2 : 1;
    return t;
}

uint32_t Tuning::attn_tile_cells(uint32_t dk, uint32_t dv) const {
    // K and V values and one position per cell.
    const uint64_t per_cell = (uint64_t{dk} + dv) * 4 + 4;
    return static_cast<uint32_t>(std::min<uint64_t>(attn_tiled_max_cells, shared_memory_bytes / per_cell));
}

Tuning::Lanes Tuning::attn_lanes(uint32_t octets) const {
    Lanes l;
    if (attn_portable) {
        l.workgroup = attn_workgroup;
        return l;
    }
    // Enough lanes to cover the head's octets, at most what one subgroup
    // surely holds: any size the device may require, or else the smallest
    // it may run the kernel with.
    const uint32_t cap = std::min(octets, subgroup_require ? subgroup_max : subgroup_min);
    while (l.lanes * 2 <= cap) l.lanes *= 2;
    // The smallest subgroup that holds a lane group: more groups per
    // subgroup would only share its registers.
    uint32_t subgroup = subgroup_size;
    if (subgroup_require) {
        l.required_subgroup = std::max(l.lanes, subgroup_min);
        subgroup = l.required_subgroup;
    }
    // Every lane of every group active: full subgroups where the device can
    // promise them, with a workgroup of whole subgroups in any case.
    l.full_subgroups = subgroup_full;
    l.workgroup = std::max<uint32_t>(attn_workgroup, subgroup);
    if (subgroup_require && subgroup_max_per_workgroup > 0)
        l.workgroup = std::min(l.workgroup, subgroup * subgroup_max_per_workgroup);
    return l;
}

}  // namespace kvrt::ops
