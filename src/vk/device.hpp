// Physical devices: what they are, what they support, and which one to pick.
#pragma once

#include <string>
#include <vector>

#include "core/result.hpp"
#include "vk/dispatch.hpp"
#include "vk/loader.hpp"

namespace kvrt::vk {

// Optional device features kvrt uses, as supported by the physical device or
// as enabled on a logical device.
struct FeatureSet {
    bool shader_float16 = false;
    bool shader_int8 = false;
    bool shader_int16 = false;
    bool shader_int64 = false;
    bool storage_16bit = false;   // storageBuffer16BitAccess
    bool storage_8bit = false;    // storageBuffer8BitAccess
    bool timeline_semaphore = false;  // Vulkan 1.2 or VK_KHR_timeline_semaphore
    // Vulkan 1.3 or VK_EXT_subgroup_size_control: a pipeline may require a
    // subgroup size (subgroupSizeControl) and full subgroups in compute
    // (computeFullSubgroups).
    bool subgroup_size_control = false;
    bool compute_full_subgroups = false;

    // The features both sets have.
    FeatureSet both(const FeatureSet& o) const;
};

// Everything kvrt reads about a physical device once.
struct PhysicalDeviceInfo {
    VkPhysicalDevice handle = VK_NULL_HANDLE;
    uint32_t index = 0;
    VkPhysicalDeviceProperties props{};
    uint8_t device_uuid[VK_UUID_SIZE] = {};
    uint8_t driver_uuid[VK_UUID_SIZE] = {};
    std::string driver_name;
    std::string driver_info;
    uint32_t api_version = 0;           // min(device, instance)
    FeatureSet supported;
    VkSubgroupFeatureFlags subgroup_ops = 0;  // compute stage only
    uint32_t subgroup_size = 0;
    // Subgroup sizes a compute pipeline may require (subgroup size control),
    // both subgroup_size without it.
    uint32_t min_subgroup_size = 0;
    uint32_t max_subgroup_size = 0;
    uint32_t max_compute_workgroup_subgroups = 0;
    bool compute_subgroup_size_required = false;  // requiredSubgroupSizeStages has compute
    uint64_t max_memory_allocation_size = 0;
    uint64_t device_local_bytes = 0;
    bool unified_memory = false;        // a device-local, host-visible type exists
    uint32_t compute_family = UINT32_MAX;
    uint32_t timestamp_valid_bits = 0;
    std::vector<std::string> extensions;
    // The driver runs on the CPU (lavapipe, SwiftShader), whatever a device
    // profile makes props.deviceType say.
    bool cpu_driver = false;
    // With a device profile (vk/profile.hpp): its name, and the subgroup size
    // the profiled GPU has (subgroup_size stays what this device runs).
    std::string profile;
    uint32_t profile_subgroup_size = 0;

    bool has_extension(const char* name) const;
};

// Queries one physical device. `instance_api` caps the usable API version.
Result query_physical_device(const InstanceFns& ifn, VkPhysicalDevice pd, uint32_t index,
                             uint32_t instance_api, PhysicalDeviceInfo* out);

// Whether the device runs the subgroup-shuffle kernels: basic and shuffle
// subgroup operations in compute shaders, subgroups of two or more lanes.
bool supports_shuffle_kernels(const PhysicalDeviceInfo& info);

// Fills a public kvrt_device_info from `info`, reporting `enabled` as features
// (for a context: what is enabled on its VkDevice; for enumeration: what is
// supported). Keeps the caller's type/next.
void fill_device_info(const PhysicalDeviceInfo& info, const FeatureSet& enabled,
                      kvrt_device_info* out);

// Picks a device: `selector` NULL/"" takes the best type (discrete > integrated
// > virtual > CPU > other, first of each); a decimal number is an index; other
// text matches a case-insensitive substring of the name.
Result select_device(const std::vector<PhysicalDeviceInfo>& devices, const char* selector,
                     size_t* out_index);

}  // namespace kvrt::vk
