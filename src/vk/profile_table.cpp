// The device profiles. NVIDIA, AMD, Intel and Apple: gpuinfo.org reports of
// the vendors' own drivers (vulkan.gpuinfo.org; the exports kept as Vulkan
// profiles JSON in KhronosGroup/Vulkan-Profiles, profiles/LunarG/). Adreno and
// Mali: no report of Qualcomm's or Arm's driver was at hand, so the values
// are those Mesa's open drivers publish (turnip, panvk), and where Mesa reads
// them from the kernel at run time the profile takes the Vulkan minimum (the
// strictest a conformant device may be) and says so. The reports leave out
// memory: heaps are the boards' published memory (phones: 3/4 of 8 GB, as
// turnip and panvk size their heap), and whether device memory is mapped is
// stated for each.
#include "vk/profile_table.hpp"

namespace kvrt::vk {

namespace {

constexpr VkSubgroupFeatureFlags kAllOps =
    VK_SUBGROUP_FEATURE_BASIC_BIT | VK_SUBGROUP_FEATURE_VOTE_BIT | VK_SUBGROUP_FEATURE_ARITHMETIC_BIT |
    VK_SUBGROUP_FEATURE_BALLOT_BIT | VK_SUBGROUP_FEATURE_SHUFFLE_BIT | VK_SUBGROUP_FEATURE_SHUFFLE_RELATIVE_BIT |
    VK_SUBGROUP_FEATURE_CLUSTERED_BIT | VK_SUBGROUP_FEATURE_QUAD_BIT;

constexpr uint64_t kGiB = 1ull << 30;

// shaderFloat16, shaderInt8, shaderInt16, shaderInt64, 16-bit storage, 8-bit
// storage, timeline semaphores, subgroup size control, full subgroups.
constexpr FeatureSet features(bool storage_8bit) {
    FeatureSet f;
    f.shader_float16 = f.shader_int8 = f.shader_int16 = f.shader_int64 = true;
    f.storage_16bit = true;
    f.storage_8bit = storage_8bit;
    f.timeline_semaphore = f.subgroup_size_control = f.compute_full_subgroups = true;
    return f;
}

}  // namespace

std::vector<DeviceProfile> profile_table() {
    std::vector<DeviceProfile> t;
    {
        DeviceProfile p{};
        p.name = "nvidia-rtx-5080";
        p.device_name = "NVIDIA GeForce RTX 5080";
        p.source = "gpuinfo.org report, driver 610.62 on Windows 11 (vp_gpuinfo_nvidia_geforce_rtx_5080_610_62_0_0_"
                   "windows_11.json); 16 GB board memory, mapped only through a 256 MiB BAR (no resizable BAR)";
        p.type = VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU;
        p.api_version = VK_MAKE_API_VERSION(0, 1, 4, 341);
        p.max_storage_buffer_range = 4294967295u;
        p.max_shared_memory = 49152;
        p.max_invocations = 1024;
        p.max_workgroup_size[0] = 1024, p.max_workgroup_size[1] = 1024, p.max_workgroup_size[2] = 64;
        p.max_workgroup_count[0] = 2147483647u, p.max_workgroup_count[1] = 65535, p.max_workgroup_count[2] = 65535;
        p.max_push_constants = 256;
        p.max_storage_buffers_per_stage = p.max_storage_buffers_per_set = 1048576;
        p.min_storage_offset_alignment = 16;
        p.max_allocation = 9223372036854775807ull;
        p.subgroup_size = p.min_subgroup_size = p.max_subgroup_size = 32;
        p.max_workgroup_subgroups = 32;
        p.subgroup_ops = kAllOps;
        p.compute_size_required = true;
        p.features = features(true);
        p.timestamp_bits = 64;
        p.device_local_bytes = 16 * kGiB;
        p.unified_memory = false;
        t.push_back(p);
    }
    {
        DeviceProfile p{};
        p.name = "amd-rx-9070-xt";
        p.device_name = "AMD Radeon RX 9070 XT";
        p.source = "gpuinfo.org report, AMD driver 26.6.1 (2.0.395) on Windows 10 (vp_gpuinfo_amd_radeon_rx_9070_xt_"
                   "2_0_395_windows_10.json); 16 GB board memory, all mapped (Smart Access Memory)";
        p.type = VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU;
        p.api_version = VK_MAKE_API_VERSION(0, 1, 4, 349);
        p.max_storage_buffer_range = 4294967295u;
        p.max_shared_memory = 32768;
        p.max_invocations = 1024;
        p.max_workgroup_size[0] = p.max_workgroup_size[1] = p.max_workgroup_size[2] = 1024;
        p.max_workgroup_count[0] = 4294967295u, p.max_workgroup_count[1] = 65535, p.max_workgroup_count[2] = 65535;
        p.max_push_constants = 256;
        p.max_storage_buffers_per_stage = p.max_storage_buffers_per_set = 4294967295u;
        p.min_storage_offset_alignment = 4;
        p.max_allocation = 2 * kGiB;
        p.subgroup_size = 64;
        p.min_subgroup_size = 32, p.max_subgroup_size = 64;
        p.max_workgroup_subgroups = 4294967295u;  // as reported
        p.subgroup_ops = kAllOps;
        p.compute_size_required = true;
        p.features = features(true);
        p.timestamp_bits = 64;
        p.device_local_bytes = 16 * kGiB;
        p.unified_memory = true;
        t.push_back(p);
    }
    {
        DeviceProfile p{};
        p.name = "intel-arc-a770";
        p.device_name = "Intel(R) Arc(TM) A770 Graphics";
        p.source = "gpuinfo.org report, driver 0.405.1234 on Windows 11 (vp_gpuinfo_intel_r__arc_tm__a770_graphics_0_"
                   "405_1234_windows_11.json); 16 GB board memory, all mapped (resizable BAR, which Arc requires)";
        p.type = VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU;
        p.api_version = VK_MAKE_API_VERSION(0, 1, 3, 275);
        p.max_storage_buffer_range = 1073741820u;
        p.max_shared_memory = 32768;
        p.max_invocations = 1024;
        p.max_workgroup_size[0] = 1024, p.max_workgroup_size[1] = 1024, p.max_workgroup_size[2] = 64;
        p.max_workgroup_count[0] = p.max_workgroup_count[1] = p.max_workgroup_count[2] = 65536;
        p.max_push_constants = 256;
        p.max_storage_buffers_per_stage = p.max_storage_buffers_per_set = 33554432;
        p.min_storage_offset_alignment = 64;
        p.max_allocation = 17062901760ull;
        p.subgroup_size = 32;
        p.min_subgroup_size = 8, p.max_subgroup_size = 32;
        p.max_workgroup_subgroups = 64;
        p.subgroup_ops = kAllOps;
        p.compute_size_required = true;
        p.features = features(true);
        p.timestamp_bits = 36;
        p.device_local_bytes = 16 * kGiB;
        p.unified_memory = true;
        t.push_back(p);
    }
    {
        DeviceProfile p{};
        p.name = "apple-m1";
        p.device_name = "Apple M1";
        p.source = "gpuinfo.org report, MoltenVK 1.4.1 on macOS 26.5.1 (vp_gpuinfo_apple_m1_0_2_2209_macos_26_5_1.json);"
                   " 8 GB unified memory";
        p.type = VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU;
        p.api_version = VK_MAKE_API_VERSION(0, 1, 4, 334);
        p.max_storage_buffer_range = 4294967295u;
        p.max_shared_memory = 32768;
        p.max_invocations = 1024;
        p.max_workgroup_size[0] = p.max_workgroup_size[1] = p.max_workgroup_size[2] = 1024;
        p.max_workgroup_count[0] = p.max_workgroup_count[1] = p.max_workgroup_count[2] = 1073741824u;
        p.max_push_constants = 4096;
        p.max_storage_buffers_per_stage = p.max_storage_buffers_per_set = 31;
        p.min_storage_offset_alignment = 16;
        p.max_allocation = 4 * kGiB;
        p.subgroup_size = 32;
        p.min_subgroup_size = 4, p.max_subgroup_size = 32;
        p.max_workgroup_subgroups = 256;
        p.subgroup_ops = kAllOps;
        p.compute_size_required = false;  // requiredSubgroupSizeStages is empty
        p.features = features(true);
        p.timestamp_bits = 64;
        p.device_local_bytes = 8 * kGiB;
        p.unified_memory = true;
        t.push_back(p);
    }
    {
        DeviceProfile p{};
        p.name = "adreno-740";
        p.device_name = "Adreno (TM) 740";
        p.source = "Mesa turnip's published properties for FD740 (src/freedreno/vulkan/tu_device.cc, "
                   "freedreno_devices.py); a phone with 8 GB, 3/4 of it the device heap, all mapped";
        p.type = VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU;
        p.api_version = VK_MAKE_API_VERSION(0, 1, 4, 0);
        p.max_storage_buffer_range = 134217728u;
        p.max_shared_memory = 32768;
        p.max_invocations = 2048;
        p.max_workgroup_size[0] = p.max_workgroup_size[1] = p.max_workgroup_size[2] = 1024;
        p.max_workgroup_count[0] = p.max_workgroup_count[1] = p.max_workgroup_count[2] = 65535;
        p.max_push_constants = 256;
        p.max_storage_buffers_per_stage = p.max_storage_buffers_per_set = 16777216;
        p.min_storage_offset_alignment = 4;
        p.max_allocation = 4294967295ull;
        p.subgroup_size = 128;
        p.min_subgroup_size = 64, p.max_subgroup_size = 128;
        p.max_workgroup_subgroups = 16;
        p.subgroup_ops = kAllOps;
        p.compute_size_required = true;
        p.features = features(false);  // no storageBuffer8BitAccess on this generation
        p.timestamp_bits = 48;
        p.device_local_bytes = 6 * kGiB;
        p.unified_memory = true;
        t.push_back(p);
    }
    {
        DeviceProfile p{};
        p.name = "mali-g710";
        p.device_name = "Mali-G710";
        p.source = "Mesa panvk's published properties for Valhall v10 (src/panfrost/vulkan/panvk_vX_physical_device.c);"
                   " workgroup sizes come from the kernel at run time there, so the Vulkan minimum (128 "
                   "invocations, 128 x 128 x 64) stands in; no timestamps (older panvk); a phone with 8 GB, 3/4 of it "
                   "the device heap, all mapped";
        p.type = VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU;
        p.api_version = VK_MAKE_API_VERSION(0, 1, 4, 0);
        p.max_storage_buffer_range = 4294967295u;
        p.max_shared_memory = 32768;
        p.max_invocations = 128;
        p.max_workgroup_size[0] = 128, p.max_workgroup_size[1] = 128, p.max_workgroup_size[2] = 64;
        p.max_workgroup_count[0] = p.max_workgroup_count[1] = p.max_workgroup_count[2] = 65535;
        p.max_push_constants = 256;
        p.max_storage_buffers_per_stage = p.max_storage_buffers_per_set = 1048576;
        p.min_storage_offset_alignment = 4;
        p.max_allocation = 4294967295ull;
        p.subgroup_size = p.min_subgroup_size = p.max_subgroup_size = 16;
        p.max_workgroup_subgroups = 0;  // from the kernel at run time
        p.subgroup_ops = kAllOps;
        p.compute_size_required = true;
        p.features = features(true);
        p.timestamp_bits = 0;
        p.device_local_bytes = 6 * kGiB;
        p.unified_memory = true;
        t.push_back(p);
    }
    {
        // Not a GPU: the weakest device Vulkan 1.1 allows, for refusals.
        DeviceProfile p{};
        p.name = "vulkan-minimum";
        p.device_name = "Vulkan 1.1 minimum";
        p.source = "the Vulkan specification's required limits (Limit Requirements) and no optional feature; "
                   "1 GiB of device memory, not mapped";
        p.type = VK_PHYSICAL_DEVICE_TYPE_OTHER;
        p.api_version = VK_MAKE_API_VERSION(0, 1, 1, 0);
        p.max_storage_buffer_range = 134217728u;
        p.max_shared_memory = 16384;
        p.max_invocations = 128;
        p.max_workgroup_size[0] = 128, p.max_workgroup_size[1] = 128, p.max_workgroup_size[2] = 64;
        p.max_workgroup_count[0] = p.max_workgroup_count[1] = p.max_workgroup_count[2] = 65535;
        p.max_push_constants = 128;
        p.max_storage_buffers_per_stage = 4;
        p.max_storage_buffers_per_set = 24;
        p.min_storage_offset_alignment = 256;
        p.max_allocation = 1ull << 30;
        p.subgroup_size = p.min_subgroup_size = p.max_subgroup_size = 1;
        p.subgroup_ops = VK_SUBGROUP_FEATURE_BASIC_BIT;
        p.compute_size_required = false;
        p.features = FeatureSet{};
        p.timestamp_bits = 0;
        p.device_local_bytes = kGiB;
        p.unified_memory = false;
        t.push_back(p);
    }
    return t;
}

}  // namespace kvrt::vk
