#include "vk/profile.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>

#include "vk/profile_table.hpp"

namespace kvrt::vk {

const std::vector<DeviceProfile>& device_profiles() {
    static const std::vector<DeviceProfile> table = profile_table();
    return table;
}

const DeviceProfile* find_device_profile(const char* name) {
    if (!name) return nullptr;
    for (const DeviceProfile& p : device_profiles()) {
        if (std::strlen(p.name) != std::strlen(name)) continue;
        bool same = true;
        for (size_t i = 0; same && name[i]; ++i)
            same = std::tolower(static_cast<unsigned char>(name[i])) == p.name[i];
        if (same) return &p;
    }
    return nullptr;
}

Result device_profile_from_env(const DeviceProfile** out) {
    *out = nullptr;
    const char* v = std::getenv("KVRT_DEVICE_PROFILE");
    if (!v || !*v) return KVRT_SUCCESS;
    *out = find_device_profile(v);
    if (*out) return KVRT_SUCCESS;
    std::string names;
    for (const DeviceProfile& p : device_profiles()) {
        if (!names.empty()) names += ", ";
        names += p.name;
    }
    return fail(KVRT_ERROR_INVALID_ARGUMENT, "KVRT_DEVICE_PROFILE is '%s'; the profiles are %s", v, names.c_str());
}

namespace {

template <typename T>
void cap(T* value, T limit) {
    *value = std::min(*value, limit);
}

}  // namespace

void apply_device_profile(const DeviceProfile& p, PhysicalDeviceInfo* info) {
    VkPhysicalDeviceProperties& props = info->props;
    std::string name = std::string(p.device_name) + " (profile on " + props.deviceName + ")";
    name.resize(std::min<size_t>(name.size(), VK_MAX_PHYSICAL_DEVICE_NAME_SIZE - 1));
    std::memcpy(props.deviceName, name.c_str(), name.size() + 1);
    props.deviceType = p.type;
    cap(&props.apiVersion, p.api_version);
    cap(&info->api_version, p.api_version);

    VkPhysicalDeviceLimits& l = props.limits;
    cap(&l.maxStorageBufferRange, p.max_storage_buffer_range);
    cap(&l.maxComputeSharedMemorySize, p.max_shared_memory);
    cap(&l.maxComputeWorkGroupInvocations, p.max_invocations);
    for (int i = 0; i < 3; ++i) {
        cap(&l.maxComputeWorkGroupSize[i], p.max_workgroup_size[i]);
        cap(&l.maxComputeWorkGroupCount[i], p.max_workgroup_count[i]);
    }
    cap(&l.maxPushConstantsSize, p.max_push_constants);
    cap(&l.maxPerStageDescriptorStorageBuffers, p.max_storage_buffers_per_stage);
    cap(&l.maxDescriptorSetStorageBuffers, p.max_storage_buffers_per_set);
    l.minStorageBufferOffsetAlignment = std::max<VkDeviceSize>(l.minStorageBufferOffsetAlignment,
                                                               p.min_storage_offset_alignment);
    if (info->max_memory_allocation_size) cap(&info->max_memory_allocation_size, p.max_allocation);
    else info->max_memory_allocation_size = p.max_allocation;

    // Subgroups: the operations both have; the sizes stay the ones this
    // device runs kernels with.
    info->subgroup_ops &= p.subgroup_ops;
    info->profile_subgroup_size = p.subgroup_size;
    if (p.max_workgroup_subgroups && info->max_compute_workgroup_subgroups)
        cap(&info->max_compute_workgroup_subgroups, p.max_workgroup_subgroups);
    info->compute_subgroup_size_required = info->compute_subgroup_size_required && p.compute_size_required;

    info->supported = info->supported.both(p.features);

    if (p.timestamp_bits == 0) info->timestamp_valid_bits = 0;
    else cap(&info->timestamp_valid_bits, p.timestamp_bits);
    cap(&info->device_local_bytes, p.device_local_bytes);
    info->unified_memory = info->unified_memory && p.unified_memory;
    info->profile = p.name;
}

}  // namespace kvrt::vk
