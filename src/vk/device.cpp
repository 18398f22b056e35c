#include "vk/device.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>

namespace kvrt::vk {

FeatureSet FeatureSet::both(const FeatureSet& o) const {
    FeatureSet f;
    f.shader_float16 = shader_float16 && o.shader_float16;
    f.shader_int8 = shader_int8 && o.shader_int8;
    f.shader_int16 = shader_int16 && o.shader_int16;
    f.shader_int64 = shader_int64 && o.shader_int64;
    f.storage_16bit = storage_16bit && o.storage_16bit;
    f.storage_8bit = storage_8bit && o.storage_8bit;
    f.timeline_semaphore = timeline_semaphore && o.timeline_semaphore;
    f.subgroup_size_control = subgroup_size_control && o.subgroup_size_control;
    f.compute_full_subgroups = compute_full_subgroups && o.compute_full_subgroups;
    return f;
}

bool PhysicalDeviceInfo::has_extension(const char* name) const {
    return std::find(extensions.begin(), extensions.end(), name) != extensions.end();
}

Result query_physical_device(const InstanceFns& ifn, VkPhysicalDevice pd, uint32_t index,
                             uint32_t instance_api, PhysicalDeviceInfo* out) {
    PhysicalDeviceInfo info;
    info.handle = pd;
    info.index = index;
    ifn.vkGetPhysicalDeviceProperties(pd, &info.props);
    info.api_version = std::min(info.props.apiVersion, instance_api);
    info.cpu_driver = info.props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;

    uint32_t n_ext = 0;
    KVRT_VK_CHECK(ifn.vkEnumerateDeviceExtensionProperties(pd, nullptr, &n_ext, nullptr));
    std::vector<VkExtensionProperties> exts(n_ext);
    KVRT_VK_CHECK(ifn.vkEnumerateDeviceExtensionProperties(pd, nullptr, &n_ext, exts.data()));
    for (uint32_t i = 0; i < n_ext; ++i) info.extensions.emplace_back(exts[i].extensionName);

    const bool v12 = info.api_version >= VK_API_VERSION_1_2;
    const bool has_f16i8 = v12 || info.has_extension(VK_KHR_SHADER_FLOAT16_INT8_EXTENSION_NAME);
    const bool has_8bit = v12 || info.has_extension(VK_KHR_8BIT_STORAGE_EXTENSION_NAME);
    const bool has_driver = v12 || info.has_extension(VK_KHR_DRIVER_PROPERTIES_EXTENSION_NAME);
    const bool has_timeline = v12 || info.has_extension(VK_KHR_TIMELINE_SEMAPHORE_EXTENSION_NAME);
    const bool has_size_control = info.api_version >= VK_API_VERSION_1_3 ||
                                  info.has_extension(VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);

    // Properties: subgroups (1.1), their sizes (1.3 or extension) and the
    // driver's name (1.2 or extension).
    VkPhysicalDeviceSubgroupProperties subgroup{};
    subgroup.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES;
    VkPhysicalDeviceMaintenance3Properties maint3{};
    maint3.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES;
    subgroup.pNext = &maint3;
    // The device's and driver's UUIDs (1.1): an opaque-fd import needs both equal.
    VkPhysicalDeviceIDProperties ids{};
    ids.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES;
    maint3.pNext = &ids;
    void** props_tail = &ids.pNext;
    VkPhysicalDeviceDriverPropertiesKHR driver{};
    driver.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES_KHR;
    if (has_driver) { *props_tail = &driver; props_tail = &driver.pNext; }
    VkPhysicalDeviceSubgroupSizeControlPropertiesEXT sizes{};
    sizes.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES_EXT;
    if (has_size_control) { *props_tail = &sizes; props_tail = &sizes.pNext; }
    VkPhysicalDeviceProperties2 props2{};
    props2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
    props2.pNext = &subgroup;
    ifn.vkGetPhysicalDeviceProperties2(pd, &props2);
    info.subgroup_size = subgroup.subgroupSize;
    info.subgroup_ops = (subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT)
                            ? subgroup.supportedOperations : 0;
    info.min_subgroup_size = info.max_subgroup_size = info.subgroup_size;
    if (has_size_control && sizes.minSubgroupSize > 0 && sizes.maxSubgroupSize >= sizes.minSubgroupSize) {
        info.min_subgroup_size = sizes.minSubgroupSize;
        info.max_subgroup_size = sizes.maxSubgroupSize;
        info.max_compute_workgroup_subgroups = sizes.maxComputeWorkgroupSubgroups;
        info.compute_subgroup_size_required = (sizes.requiredSubgroupSizeStages & VK_SHADER_STAGE_COMPUTE_BIT) != 0;
    }
    info.max_memory_allocation_size = maint3.maxMemoryAllocationSize;
    std::memcpy(info.device_uuid, ids.deviceUUID, VK_UUID_SIZE);
    std::memcpy(info.driver_uuid, ids.driverUUID, VK_UUID_SIZE);
    if (has_driver) {
        info.driver_name = driver.driverName;
        info.driver_info = driver.driverInfo;
    }

    // Features.
    VkPhysicalDevice16BitStorageFeatures s16{};
    s16.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES;
    VkPhysicalDeviceShaderFloat16Int8FeaturesKHR f16i8{};
    f16i8.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES_KHR;
    VkPhysicalDevice8BitStorageFeaturesKHR s8{};
    s8.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_8BIT_STORAGE_FEATURES_KHR;
    void** tail = &s16.pNext;
    if (has_f16i8) { *tail = &f16i8; tail = &f16i8.pNext; }
    if (has_8bit) { *tail = &s8; tail = &s8.pNext; }
    VkPhysicalDeviceTimelineSemaphoreFeatures timeline{};
    timeline.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_TIMELINE_SEMAPHORE_FEATURES;
    if (has_timeline) { *tail = &timeline; tail = &timeline.pNext; }
    VkPhysicalDeviceSubgroupSizeControlFeaturesEXT size_control{};
    size_control.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES_EXT;
    if (has_size_control) { *tail = &size_control; tail = &size_control.pNext; }
    VkPhysicalDeviceFeatures2 feats2{};
    feats2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
    feats2.pNext = &s16;
    ifn.vkGetPhysicalDeviceFeatures2(pd, &feats2);
    info.supported.shader_int16 = feats2.features.shaderInt16;
    info.supported.shader_int64 = feats2.features.shaderInt64;
    info.supported.storage_16bit = s16.storageBuffer16BitAccess;
    info.supported.shader_float16 = has_f16i8 && f16i8.shaderFloat16;
    info.supported.shader_int8 = has_f16i8 && f16i8.shaderInt8;
    info.supported.storage_8bit = has_8bit && s8.storageBuffer8BitAccess;
    info.supported.timeline_semaphore = has_timeline && timeline.timelineSemaphore;
    info.supported.subgroup_size_control = has_size_control && size_control.subgroupSizeControl;
    info.supported.compute_full_subgroups = has_size_control && size_control.computeFullSubgroups;

    // Memory.
    VkPhysicalDeviceMemoryProperties mem{};
    ifn.vkGetPhysicalDeviceMemoryProperties(pd, &mem);
    for (uint32_t h = 0; h < mem.memoryHeapCount; ++h) {
        if (mem.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)
            info.device_local_bytes = std::max<uint64_t>(info.device_local_bytes, mem.memoryHeaps[h].size);
    }
    // Mapped device memory only where it is the device's memory: a
    // device-local, host-visible type in the largest device-local heap (a
    // discrete GPU without resizable BAR has such a type too, in a heap of
    // about 256 MiB, too small for caches).
    for (uint32_t t = 0; t < mem.memoryTypeCount; ++t) {
        const VkMemoryPropertyFlags f = mem.memoryTypes[t].propertyFlags;
        if ((f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) && (f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) &&
            mem.memoryHeaps[mem.memoryTypes[t].heapIndex].size >= info.device_local_bytes)
            info.unified_memory = true;
    }

    // Queue: a compute family, preferring one with timestamps.
    uint32_t n_fam = 0;
    ifn.vkGetPhysicalDeviceQueueFamilyProperties(pd, &n_fam, nullptr);
    std::vector<VkQueueFamilyProperties> fams(n_fam);
    ifn.vkGetPhysicalDeviceQueueFamilyProperties(pd, &n_fam, fams.data());
    for (uint32_t i = 0; i < n_fam; ++i) {
        if (!(fams[i].queueFlags & VK_QUEUE_COMPUTE_BIT) || fams[i].queueCount == 0) continue;
        if (info.compute_family == UINT32_MAX ||
            (info.timestamp_valid_bits == 0 && fams[i].timestampValidBits > 0)) {
            info.compute_family = i;
            info.timestamp_valid_bits = fams[i].timestampValidBits;
        }
    }
    *out = std::move(info);
    return KVRT_SUCCESS;
}

bool supports_shuffle_kernels(const PhysicalDeviceInfo& info) {
    const VkSubgroupFeatureFlags need = VK_SUBGROUP_FEATURE_BASIC_BIT | VK_SUBGROUP_FEATURE_SHUFFLE_BIT;
    return (info.subgroup_ops & need) == need && info.subgroup_size >= 2;
}

static kvrt_device_type to_public_type(VkPhysicalDeviceType t) {
    switch (t) {
        case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return KVRT_DEVICE_TYPE_INTEGRATED_GPU;
        case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return KVRT_DEVICE_TYPE_DISCRETE_GPU;
        case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return KVRT_DEVICE_TYPE_VIRTUAL_GPU;
        case VK_PHYSICAL_DEVICE_TYPE_CPU: return KVRT_DEVICE_TYPE_CPU;
        default: return KVRT_DEVICE_TYPE_OTHER;
    }
}

static void copy_string(char* dst, size_t cap, const std::string& src) {
    const size_t n = std::min(cap - 1, src.size());
    std::memcpy(dst, src.data(), n);
    dst[n] = '\0';
}

void fill_device_info(const PhysicalDeviceInfo& info, const FeatureSet& enabled,
                      kvrt_device_info* out) {
    const kvrt_struct_type type = out->type;
    const void* next = out->next;
    *out = kvrt_device_info{};
    out->type = type;
    out->next = next;
    out->index = info.index;
    out->device_type = to_public_type(info.props.deviceType);
    copy_string(out->name, sizeof(out->name), info.props.deviceName);
    copy_string(out->driver_name, sizeof(out->driver_name), info.driver_name);
    copy_string(out->driver_info, sizeof(out->driver_info), info.driver_info);
    out->vendor_id = info.props.vendorID;
    out->device_id = info.props.deviceID;
    out->api_version = info.props.apiVersion;
    out->driver_version = info.props.driverVersion;
    kvrt_flags f = 0;
    if (enabled.shader_float16) f |= KVRT_DEVICE_FEATURE_SHADER_FLOAT16;
    if (enabled.shader_int8) f |= KVRT_DEVICE_FEATURE_SHADER_INT8;
    if (enabled.shader_int16) f |= KVRT_DEVICE_FEATURE_SHADER_INT16;
    if (enabled.shader_int64) f |= KVRT_DEVICE_FEATURE_SHADER_INT64;
    if (enabled.storage_16bit) f |= KVRT_DEVICE_FEATURE_STORAGE_16BIT;
    if (enabled.storage_8bit) f |= KVRT_DEVICE_FEATURE_STORAGE_8BIT;
    if (info.timestamp_valid_bits > 0) f |= KVRT_DEVICE_FEATURE_TIMESTAMPS;
    if (info.unified_memory) f |= KVRT_DEVICE_FEATURE_UNIFIED_MEMORY;
    out->features = f;
    out->subgroup_ops = info.subgroup_ops;
    out->subgroup_size = info.subgroup_size;
    out->max_shared_memory_bytes = info.props.limits.maxComputeSharedMemorySize;
    out->max_workgroup_invocations = info.props.limits.maxComputeWorkGroupInvocations;
    out->max_push_constants_bytes = info.props.limits.maxPushConstantsSize;
    out->max_storage_buffer_range = info.props.limits.maxStorageBufferRange;
    out->max_memory_allocation_size = info.max_memory_allocation_size;
    out->device_local_bytes = info.device_local_bytes;
    out->timestamp_period_ns = info.props.limits.timestampPeriod;
}

static int type_rank(VkPhysicalDeviceType t) {
    switch (t) {
        case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 0;
        case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 1;
        case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
        case VK_PHYSICAL_DEVICE_TYPE_CPU: return 3;
        default: return 4;
    }
}

static std::string lower(std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

Result select_device(const std::vector<PhysicalDeviceInfo>& devices, const char* selector,
                     size_t* out_index) {
    auto usable = [](const PhysicalDeviceInfo& d) {
        return d.compute_family != UINT32_MAX && d.api_version >= VK_API_VERSION_1_1;
    };
    std::string names;
    for (const auto& d : devices) {
        if (!names.empty()) names += ", ";
        names += std::to_string(d.index) + ": " + d.props.deviceName;
    }
    if (!selector || !*selector) {
        size_t best = SIZE_MAX;
        for (size_t i = 0; i < devices.size(); ++i) {
            if (!usable(devices[i])) continue;
            if (best == SIZE_MAX ||
                type_rank(devices[i].props.deviceType) < type_rank(devices[best].props.deviceType))
                best = i;
        }
        if (best == SIZE_MAX)
            return fail(KVRT_ERROR_UNSUPPORTED,
                        "no Vulkan 1.1 device with a compute queue (devices: %s)",
                        names.empty() ? "none" : names.c_str());
        *out_index = best;
        return KVRT_SUCCESS;
    }
    const std::string sel(selector);
    const bool numeric = std::all_of(sel.begin(), sel.end(),
                                     [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    for (size_t i = 0; i < devices.size(); ++i) {
        const bool match = numeric ? std::to_string(devices[i].index) == sel
                                   : lower(devices[i].props.deviceName).find(lower(sel)) != std::string::npos;
        if (!match) continue;
        if (!usable(devices[i]))
            return fail(KVRT_ERROR_UNSUPPORTED, "device '%s' has no Vulkan 1.1 compute queue",
                        devices[i].props.deviceName);
        *out_index = i;
        return KVRT_SUCCESS;
    }
    return fail(KVRT_ERROR_UNSUPPORTED, "no device matches '%s' (devices: %s)", selector,
                names.empty() ? "none" : names.c_str());
}

}  // namespace kvrt::vk
