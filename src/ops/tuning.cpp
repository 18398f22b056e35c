#include "ops/tuning.hpp"

#include <algorithm>
#include <cstdio>

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
    // f32 K and V values, a position and a cell index per cell
    // (attention_tiled.comp's tile).
    const uint64_t per_cell = (uint64_t{dk} + dv) * 4 + 8;
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

std::string Tuning::describe(const vk::Context& ctx) const {
    const vk::PhysicalDeviceInfo& dev = ctx.info();
    std::string out;
    const auto line = [&out](const char* name, const char* fmt, auto... values) {
        char value[320];
        std::snprintf(value, sizeof value, fmt, values...);
        out += name;
        out += ' ';
        out += value;
        out += '\n';
    };
    line("device", "%s", dev.props.deviceName);
    line("profile", "%s", dev.profile.empty() ? "none" : dev.profile.c_str());
    if (dev.profile_subgroup_size)
        line("profile.subgroup_size", "%u (runs with %u)", dev.profile_subgroup_size, dev.subgroup_size);
    line("cpu", "%s", cpu ? "yes" : "no");
    line("subgroup.size", "%u", subgroup_size);
    line("subgroup.range", "%u-%u", subgroup_min, subgroup_max);
    line("subgroup.require", "%s", subgroup_require ? "yes" : "no");
    line("subgroup.full", "%s", subgroup_full ? "yes" : "no");
    const char* kernel = attn_tiled_forced ? "tiled" : attn_wide ? "wide" : attn_portable ? "portable" : "shuffle";
    line("attention.kernel", "%s", kernel);
    line("attention.workgroup", "%u", attn_workgroup);
    for (const uint32_t d : {64u, 128u}) {
        const Lanes l = attn_lanes(d / 8);
        char name[48];
        std::snprintf(name, sizeof name, "attention.lanes.d%u", d);
        line(name, "%u (workgroup %u, required subgroup %u, full %s)", l.lanes, l.workgroup, l.required_subgroup,
             l.full_subgroups ? "yes" : "no");
        std::snprintf(name, sizeof name, "attention.tile_cells.d%u", d);
        line(name, "%u", attn_tile_cells(d, d));
    }
    line("attention.target_groups", "%u", attn_target_groups);
    line("attention.split_cells", "%u-%u", attn_min_split_cells, attn_max_split_cells);
    line("attention.tiled.min_rows", "%s",
         attn_tiled_min_rows == UINT32_MAX ? "never" : std::to_string(attn_tiled_min_rows).c_str());
    line("attention.tiled.target_groups", "%u", attn_tiled_target_groups);
    line("memory.kernel", "%s", memory_wide ? "wide" : "portable");
    line("memory.softmax_workgroup", "%u", memory_softmax_workgroup);
    line("rows.workgroup", "%u", rows_workgroup);
    line("shift.cells_per_group", "%u", shift_cells_per_group);
    line("transfer.workgroup", "%u", transfer_workgroup);
    line("shared_memory", "%u", shared_memory_bytes);
    line("max_binding", "%llu", static_cast<unsigned long long>(ctx.max_binding_bytes()));
    line("mapped_memory", "%s", !ctx.options().force_staging && dev.unified_memory ? "yes" : "no");
    line("timestamps", "%u bits", dev.timestamp_valid_bits);
    return out;
}

}  // namespace kvrt::ops
