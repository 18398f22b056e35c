// Device profiles: the limits and features of real GPUs, imposed on the device
// kvrt runs on (KVRT_DEVICE_PROFILE=<name>), so that lavapipe can stand in for
// a phone or a datacenter card in tests.
//
// A profile can only take away. Every limit kvrt sees is the smaller of the
// profile's and the device's (the larger, for alignments), every feature and
// subgroup operation must be in both, and the device type becomes the
// profile's, so the tuning table picks what it would pick on that GPU. What
// the device really is and does stays its own: its vendor and device IDs
// (they name the driver whose pipeline cache kvrt keeps), the subgroup size
// it runs kernels with and the period of its timestamps (a profile with a wider
// subgroup than the device can give is run at the device's; the test targets
// pick lavapipe's widest, 16 lanes, for those). kvrt's own checks then hold
// every pipeline and dispatch to the profile's limits (workgroup size, push
// constants, storage buffers per stage, shared memory, workgroup counts,
// binding ranges and offsets), and the device is created with only the
// profile's features, so the validation layer reports any use of one it lacks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/result.hpp"
#include "vk/device.hpp"

namespace kvrt::vk {

struct DeviceProfile {
    const char* name;         // what KVRT_DEVICE_PROFILE takes
    const char* device_name;  // deviceName as the device reports it
    const char* source;       // where the values come from
    VkPhysicalDeviceType type;
    uint32_t api_version;
    // Limits.
    uint32_t max_storage_buffer_range;
    uint32_t max_shared_memory;
    uint32_t max_invocations;
    uint32_t max_workgroup_size[3];
    uint32_t max_workgroup_count[3];
    uint32_t max_push_constants;
    uint32_t max_storage_buffers_per_stage;
    uint32_t max_storage_buffers_per_set;
    uint32_t min_storage_offset_alignment;
    uint64_t max_allocation;
    // Subgroups (compute stage).
    uint32_t subgroup_size;
    uint32_t min_subgroup_size, max_subgroup_size;  // with size control; else both subgroup_size
    uint32_t max_workgroup_subgroups;               // 0: not reported
    VkSubgroupFeatureFlags subgroup_ops;
    bool compute_size_required;  // requiredSubgroupSizeStages has compute
    FeatureSet features;
    uint32_t timestamp_bits;  // of the compute queue; 0: no timestamps
    uint64_t device_local_bytes;
    bool unified_memory;  // a device-local, host-visible memory type
};

// Every profile, in a fixed order.
const std::vector<DeviceProfile>& device_profiles();

// The profile named `name` (exact, case-insensitive), or NULL.
const DeviceProfile* find_device_profile(const char* name);

// The profile KVRT_DEVICE_PROFILE names: *out NULL when the variable is unset
// or empty; fails with KVRT_ERROR_INVALID_ARGUMENT, listing the names, when it
// names none.
Result device_profile_from_env(const DeviceProfile** out);

// Imposes `p` on `info` (see above). The device type becomes the profile's;
// info->cpu_driver keeps whether the driver really runs on the CPU.
void apply_device_profile(const DeviceProfile& p, PhysicalDeviceInfo* info);

}  // namespace kvrt::vk
