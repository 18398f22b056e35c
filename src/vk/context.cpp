#include "vk/context.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "core/fault.hpp"
#include "kvrt/kvrt_vulkan.h"
#include "vk/pipeline.hpp"
#include "vk/profile.hpp"

namespace kvrt::vk {

namespace {

const char* kValidationLayer = "VK_LAYER_KHRONOS_validation";

bool env_flag(const char* name) {
    const char* v = std::getenv(name);
    return v && *v && std::strcmp(v, "0") != 0;
}

struct InstanceSetup {
    VkInstance instance = VK_NULL_HANDLE;
    uint32_t api_version = VK_API_VERSION_1_1;
    bool debug_utils = false;
};

bool has_instance_extension(const GlobalFns& g, const char* layer, const char* name) {
    uint32_t n = 0;
    if (g.vkEnumerateInstanceExtensionProperties(layer, &n, nullptr) != VK_SUCCESS) return false;
    std::vector<VkExtensionProperties> props(n);
    if (g.vkEnumerateInstanceExtensionProperties(layer, &n, props.data()) != VK_SUCCESS) return false;
    for (const auto& p : props)
        if (std::strcmp(p.extensionName, name) == 0) return true;
    return false;
}

// Creates an instance; with `validation`, enables the Khronos layer with
// synchronization validation, or GPU-assisted validation (`gpu_assisted`),
// and chains `messenger` so that instance creation itself is checked.
Result create_instance(const Loader& loader, bool validation, bool gpu_assisted,
                       const VkDebugUtilsMessengerCreateInfoEXT* messenger, InstanceSetup* out) {
    const GlobalFns& g = loader.global();
    uint32_t loader_api = VK_API_VERSION_1_0;
    if (g.vkEnumerateInstanceVersion) g.vkEnumerateInstanceVersion(&loader_api);
    if (loader_api < VK_API_VERSION_1_1)
        return fail(KVRT_ERROR_UNSUPPORTED, "the Vulkan loader is older than 1.1");
    out->api_version = std::min<uint32_t>(loader_api, VK_API_VERSION_1_3);

    std::vector<const char*> layers;
    std::vector<const char*> extensions;
    if (validation) {
        uint32_t n = 0;
        KVRT_VK_CHECK(g.vkEnumerateInstanceLayerProperties(&n, nullptr));
        std::vector<VkLayerProperties> props(n);
        KVRT_VK_CHECK(g.vkEnumerateInstanceLayerProperties(&n, props.data()));
        const bool found = std::any_of(props.begin(), props.end(), [](const VkLayerProperties& p) {
            return std::strcmp(p.layerName, kValidationLayer) == 0;
        });
        if (!found)
            return fail(KVRT_ERROR_UNSUPPORTED,
                        "validation was requested but %s is not installed (on Debian: "
                        "vulkan-validationlayers)", kValidationLayer);
        layers.push_back(kValidationLayer);
    }
    out->debug_utils = has_instance_extension(g, nullptr, VK_EXT_DEBUG_UTILS_EXTENSION_NAME) ||
                       (validation && has_instance_extension(g, kValidationLayer,
                                                             VK_EXT_DEBUG_UTILS_EXTENSION_NAME));
    if (out->debug_utils) extensions.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
    const bool validation_features =
        validation && has_instance_extension(g, kValidationLayer, VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME);
    if (validation_features) extensions.push_back(VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME);
    // Portability drivers (MoltenVK) are only listed when asked for.
    const bool portability = has_instance_extension(g, nullptr, "VK_KHR_portability_enumeration");
    if (portability) extensions.push_back("VK_KHR_portability_enumeration");

    VkApplicationInfo app{};
    app.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO;
    app.pApplicationName = "kvrt";
    app.pEngineName = "kvrt";
    app.engineVersion = KVRT_VERSION;
    app.apiVersion = out->api_version;

    // GPU-assisted validation instruments every shader to check each
    // descriptor access against its binding's range (the layer's
    // gpuav_buffer_oob, on by default) and reserves the last descriptor set
    // slot for itself; synchronization validation checks the barriers.
    const VkValidationFeatureEnableEXT sync_enables[] = {VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT};
    const VkValidationFeatureEnableEXT gpu_enables[] = {VK_VALIDATION_FEATURE_ENABLE_GPU_ASSISTED_EXT,
                                                        VK_VALIDATION_FEATURE_ENABLE_GPU_ASSISTED_RESERVE_BINDING_SLOT_EXT};
    VkValidationFeaturesEXT vfeatures{};
    vfeatures.sType = VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT;
    vfeatures.enabledValidationFeatureCount = gpu_assisted ? 2 : 1;
    vfeatures.pEnabledValidationFeatures = gpu_assisted ? gpu_enables : sync_enables;

    VkInstanceCreateInfo ci{};
    ci.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO;
    ci.pApplicationInfo = &app;
    ci.enabledLayerCount = static_cast<uint32_t>(layers.size());
    ci.ppEnabledLayerNames = layers.data();
    ci.enabledExtensionCount = static_cast<uint32_t>(extensions.size());
    ci.ppEnabledExtensionNames = extensions.data();
    if (portability) ci.flags |= 0x00000001; /* VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR */
    const void** tail = &ci.pNext;
    VkDebugUtilsMessengerCreateInfoEXT mci{};
    if (messenger && out->debug_utils) {
        mci = *messenger;
        mci.pNext = nullptr;
        *tail = &mci;
        tail = &mci.pNext;
    }
    if (gpu_assisted && !validation_features)
        return fail(KVRT_ERROR_UNSUPPORTED, "GPU-assisted validation needs %s with %s", kValidationLayer,
                    VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME);
    if (validation_features) {
        *tail = &vfeatures;
        tail = &vfeatures.pNext;
    }
    KVRT_VK_CHECK(g.vkCreateInstance(&ci, nullptr, &out->instance));
    return KVRT_SUCCESS;
}

Result list_physical_devices(const InstanceFns& ifn, VkInstance instance, uint32_t api,
                             std::vector<PhysicalDeviceInfo>* out) {
    uint32_t n = 0;
    KVRT_VK_CHECK(ifn.vkEnumeratePhysicalDevices(instance, &n, nullptr));
    std::vector<VkPhysicalDevice> pds(n);
    KVRT_VK_CHECK(ifn.vkEnumeratePhysicalDevices(instance, &n, pds.data()));
    out->clear();
    const DeviceProfile* profile = nullptr;
    KVRT_TRY(device_profile_from_env(&profile));
    for (uint32_t i = 0; i < n; ++i) {
        PhysicalDeviceInfo info;
        KVRT_TRY(query_physical_device(ifn, pds[i], i, api, &info));
        if (profile) apply_device_profile(*profile, &info);
        out->push_back(std::move(info));
    }
    return KVRT_SUCCESS;
}

}  // namespace

Result ContextOptions::from_desc(const kvrt_context_desc* desc, ContextOptions* out) {
    ContextOptions o;
    if (desc) {
        if (desc->type != KVRT_STRUCT_TYPE_CONTEXT_DESC)
            return fail(KVRT_ERROR_INVALID_ARGUMENT,
                        "kvrt_context_desc.type must be KVRT_STRUCT_TYPE_CONTEXT_DESC "
                        "(use KVRT_CONTEXT_DESC_INIT)");
        const kvrt_flags known = KVRT_CONTEXT_VALIDATION | KVRT_CONTEXT_FORCE_STAGING |
                                 KVRT_CONTEXT_PORTABLE_KERNELS | KVRT_CONTEXT_SHUFFLE_KERNELS |
                                 KVRT_CONTEXT_TILED_KERNELS;
        if (desc->flags & ~known)
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "unknown context flags 0x%x",
                        static_cast<unsigned>(desc->flags & ~known));
        const kvrt_flags choices =
            desc->flags & (KVRT_CONTEXT_PORTABLE_KERNELS | KVRT_CONTEXT_SHUFFLE_KERNELS | KVRT_CONTEXT_TILED_KERNELS);
        if (choices & (choices - 1))
            return fail(KVRT_ERROR_INVALID_ARGUMENT,
                        "KVRT_CONTEXT_PORTABLE_KERNELS, KVRT_CONTEXT_SHUFFLE_KERNELS and KVRT_CONTEXT_TILED_KERNELS "
                        "exclude each other (flags 0x%x)",
                        static_cast<unsigned>(choices));
        if (desc->log_level > KVRT_LOG_LEVEL_NONE)
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "log_level %d is not a kvrt_log_level",
                        static_cast<int>(desc->log_level));
        o.validation = desc->flags & KVRT_CONTEXT_VALIDATION;
        o.force_staging = desc->flags & KVRT_CONTEXT_FORCE_STAGING;
        if (desc->flags & KVRT_CONTEXT_PORTABLE_KERNELS) o.kernels = KernelChoice::Portable;
        if (desc->flags & KVRT_CONTEXT_SHUFFLE_KERNELS) o.kernels = KernelChoice::Shuffle;
        if (desc->flags & KVRT_CONTEXT_TILED_KERNELS) o.kernels = KernelChoice::Tiled;
        if (desc->device) o.device_selector = desc->device;
        o.logger = Logger(desc->log_callback, desc->log_user_data, desc->log_level);
        if (desc->wait_timeout_ns) o.wait_timeout_ns = desc->wait_timeout_ns;
        o.max_binding_bytes = desc->max_binding_bytes;
        if (o.max_binding_bytes != 0 && o.max_binding_bytes < 4096)
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "max_binding_bytes %llu is below 4096",
                        static_cast<unsigned long long>(o.max_binding_bytes));
    }
    if (env_flag("KVRT_VALIDATION")) o.validation = true;
    if (const char* v = std::getenv("KVRT_VALIDATION"); v && std::strcmp(v, "gpu") == 0) o.gpu_assisted = true;
    // KVRT_DEVICE and KVRT_KERNELS choose only what the application left to
    // kvrt: a device when desc->device is NULL or "", kernels when no kernel
    // flag is set. An explicit choice stands, and the variable is then not
    // read at all (a bad value included); the log says so.
    if (const char* dev = std::getenv("KVRT_DEVICE"); dev && *dev) {
        if (o.device_selector.empty())
            o.device_selector = dev;
        else
            o.logger.log(KVRT_LOG_LEVEL_INFO, "KVRT_DEVICE='%s' is ignored: the application chose the device '%s'", dev,
                         o.device_selector.c_str());
    }
    if (const char* k = std::getenv("KVRT_KERNELS")) {  // set, even to "": one of the four names
        if (o.kernels != KernelChoice::Auto) {
            o.logger.log(KVRT_LOG_LEVEL_INFO, "KVRT_KERNELS='%s' is ignored: the application chose the kernels", k);
        } else if (std::strcmp(k, "auto") == 0) {
            o.kernels = KernelChoice::Auto;
        } else if (std::strcmp(k, "portable") == 0) {
            o.kernels = KernelChoice::Portable;
        } else if (std::strcmp(k, "shuffle") == 0) {
            o.kernels = KernelChoice::Shuffle;
        } else if (std::strcmp(k, "tiled") == 0) {
            o.kernels = KernelChoice::Tiled;
        } else {
            return fail(KVRT_ERROR_INVALID_ARGUMENT,
                        "KVRT_KERNELS is '%s'; it may be portable, shuffle, tiled or auto", k);
        }
    }
    *out = std::move(o);
    return KVRT_SUCCESS;
}

Result enumerate_devices(std::vector<PhysicalDeviceInfo>* out) {
    Loader loader;
    KVRT_TRY(loader.open());
    InstanceSetup setup;
    KVRT_TRY(create_instance(loader, false, false, nullptr, &setup));
    InstanceFns ifn;
    Result r = load_instance_functions(loader.global().vkGetInstanceProcAddr, setup.instance, false, &ifn);
    if (r == KVRT_SUCCESS) r = list_physical_devices(ifn, setup.instance, setup.api_version, out);
    if (ifn.vkDestroyInstance) ifn.vkDestroyInstance(setup.instance, nullptr);
    return r;
}

VkBool32 VKAPI_PTR Context::debug_callback(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                           VkDebugUtilsMessageTypeFlagsEXT types,
                                           const VkDebugUtilsMessengerCallbackDataEXT* data,
                                           void* user) {
    auto* self = static_cast<Context*>(user);
    const char* text = data && data->pMessage ? data->pMessage : "";
    // Only the validation layer's findings count as validation errors and
    // warnings. General messages come from the loader and other layers (an
    // ICD of another architecture it cannot open, for instance, is an
    // "error" of the loader that concerns no device kvrt uses): logged one
    // level lower, never counted.
    if (!(types & (VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT))) {
        kvrt_log_level level = (severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT)     ? KVRT_LOG_LEVEL_WARN
                               : (severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT) ? KVRT_LOG_LEVEL_INFO
                                                                                              : KVRT_LOG_LEVEL_DEBUG;
        self->options_.logger.log(level, "vulkan (general): %s", text);
        return VK_FALSE;
    }
    kvrt_log_level level = KVRT_LOG_LEVEL_DEBUG;
    if (severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) {
        self->validation_errors_.fetch_add(1);
        level = KVRT_LOG_LEVEL_ERROR;
    } else if (severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT) {
        self->validation_warnings_.fetch_add(1);
        level = KVRT_LOG_LEVEL_WARN;
    } else if (severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_INFO_BIT_EXT) {
        level = KVRT_LOG_LEVEL_INFO;
    }
    self->options_.logger.log(level, "vulkan: %s", text);
    return VK_FALSE;
}

Result Context::create(const ContextOptions& options, std::unique_ptr<Context>* out,
                       const kvrt_pipeline_cache_desc* pipeline_cache) {
    std::unique_ptr<Context> ctx(new Context());
    ctx->options_ = options;
    KVRT_TRY(ctx->loader_.open());

    VkDebugUtilsMessengerCreateInfoEXT mci{};
    mci.sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT;
    mci.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT |
                          VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                          VK_DEBUG_UTILS_MESSAGE_SEVERITY_INFO_BIT_EXT;
    mci.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                      VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                      VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
    mci.pfnUserCallback = &Context::debug_callback;
    mci.pUserData = ctx.get();

    InstanceSetup setup;
    KVRT_TRY(create_instance(ctx->loader_, options.validation, options.validation && options.gpu_assisted,
                             options.validation ? &mci : nullptr, &setup));
    ctx->instance_ = setup.instance;
    ctx->debug_utils_ = setup.debug_utils;
    KVRT_TRY(load_instance_functions(ctx->loader_.global().vkGetInstanceProcAddr, ctx->instance_,
                                     ctx->debug_utils_, &ctx->ifn_));
    if (options.validation && ctx->debug_utils_ && ctx->ifn_.vkCreateDebugUtilsMessengerEXT)
        KVRT_VK_CHECK(ctx->ifn_.vkCreateDebugUtilsMessengerEXT(ctx->instance_, &mci, nullptr, &ctx->messenger_));

    std::vector<PhysicalDeviceInfo> devices;
    KVRT_TRY(list_physical_devices(ctx->ifn_, ctx->instance_, setup.api_version, &devices));
    size_t index = 0;
    KVRT_TRY(select_device(devices, options.device_selector.c_str(), &index));
    KVRT_TRY(ctx->create_device(index, devices));
    KVRT_TRY(ctx->init_common(pipeline_cache));
    ctx->log().log(KVRT_LOG_LEVEL_INFO, "context on %s (validation %s)", ctx->info_.props.deviceName,
                   !options.validation ? "off" : options.gpu_assisted ? "on, GPU-assisted" : "on");
    *out = std::move(ctx);
    return KVRT_SUCCESS;
}

Result Context::create_device(size_t device_index, const std::vector<PhysicalDeviceInfo>& devices) {
    info_ = devices[device_index];
    const bool v12 = info_.api_version >= VK_API_VERSION_1_2;
    std::vector<const char*> exts;
    if (!v12 && info_.has_extension(VK_KHR_SHADER_FLOAT16_INT8_EXTENSION_NAME))
        exts.push_back(VK_KHR_SHADER_FLOAT16_INT8_EXTENSION_NAME);
    if (!v12 && info_.has_extension(VK_KHR_8BIT_STORAGE_EXTENSION_NAME))
        exts.push_back(VK_KHR_8BIT_STORAGE_EXTENSION_NAME);
    if (!v12 && info_.supported.timeline_semaphore)
        exts.push_back(VK_KHR_TIMELINE_SEMAPHORE_EXTENSION_NAME);
    // A portability driver requires its subset extension to be enabled.
    if (info_.has_extension("VK_KHR_portability_subset")) exts.push_back("VK_KHR_portability_subset");
    const FeatureSet& s = info_.supported;
    const bool size_control = s.subgroup_size_control || s.compute_full_subgroups;
    if (size_control && info_.api_version < VK_API_VERSION_1_3)
        exts.push_back(VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
    // Memory another process or processor maps by a file descriptor
    // (kvrt_buffer_export_memory): the handle types the device can export
    // from storage buffers.
    const bool external_fd = info_.has_extension(VK_KHR_EXTERNAL_MEMORY_FD_EXTENSION_NAME);
    if (external_fd) {
        exts.push_back(VK_KHR_EXTERNAL_MEMORY_FD_EXTENSION_NAME);
        if (info_.has_extension(VK_EXT_EXTERNAL_MEMORY_DMA_BUF_EXTENSION_NAME))
            exts.push_back(VK_EXT_EXTERNAL_MEMORY_DMA_BUF_EXTENSION_NAME);
        for (const VkExternalMemoryHandleTypeFlagBits type :
             {VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT, VK_EXTERNAL_MEMORY_HANDLE_TYPE_DMA_BUF_BIT_EXT}) {
            if (type == VK_EXTERNAL_MEMORY_HANDLE_TYPE_DMA_BUF_BIT_EXT &&
                !info_.has_extension(VK_EXT_EXTERNAL_MEMORY_DMA_BUF_EXTENSION_NAME))
                continue;
            VkPhysicalDeviceExternalBufferInfo ebi{};
            ebi.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_BUFFER_INFO;
            ebi.usage = kBufferUsage;
            ebi.handleType = type;
            VkExternalBufferProperties ebp{};
            ebp.sType = VK_STRUCTURE_TYPE_EXTERNAL_BUFFER_PROPERTIES;
            ifn_.vkGetPhysicalDeviceExternalBufferProperties(info_.handle, &ebi, &ebp);
            const VkExternalMemoryFeatureFlags f = ebp.externalMemoryProperties.externalMemoryFeatures;
            if (!(f & VK_EXTERNAL_MEMORY_FEATURE_EXPORTABLE_BIT)) continue;
            // One allocation exports every type kvrt asks for: a type joins
            // only those it is compatible with (a dma-buf, the one a DSP
            // maps, wins over an opaque fd it cannot share an allocation with).
            if (export_types_ && !(ebp.externalMemoryProperties.compatibleHandleTypes & export_types_))
                export_types_ = export_dedicated_ = 0;
            export_types_ |= type;
            if (f & VK_EXTERNAL_MEMORY_FEATURE_DEDICATED_ONLY_BIT) export_dedicated_ |= type;
        }
    }

    VkPhysicalDevice16BitStorageFeatures s16{};
    s16.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES;
    s16.storageBuffer16BitAccess = s.storage_16bit;
    VkPhysicalDeviceShaderFloat16Int8FeaturesKHR f16i8{};
    f16i8.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES_KHR;
    f16i8.shaderFloat16 = s.shader_float16;
    f16i8.shaderInt8 = s.shader_int8;
    VkPhysicalDevice8BitStorageFeaturesKHR s8{};
    s8.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_8BIT_STORAGE_FEATURES_KHR;
    s8.storageBuffer8BitAccess = s.storage_8bit;
    // For ordering with the application's work (kvrt_stream_submit_vulkan,
    // kvrt_stream_end_vulkan).
    VkPhysicalDeviceTimelineSemaphoreFeatures timeline{};
    timeline.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_TIMELINE_SEMAPHORE_FEATURES;
    timeline.timelineSemaphore = VK_TRUE;
    void** tail = &s16.pNext;
    if (s.shader_float16 || s.shader_int8) { *tail = &f16i8; tail = &f16i8.pNext; }
    if (s.storage_8bit) { *tail = &s8; tail = &s8.pNext; }
    if (s.timeline_semaphore) { *tail = &timeline; tail = &timeline.pNext; }
    // For the subgroup-shuffle kernels: their subgroup size, full subgroups.
    VkPhysicalDeviceSubgroupSizeControlFeaturesEXT sizes{};
    sizes.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES_EXT;
    sizes.subgroupSizeControl = s.subgroup_size_control;
    sizes.computeFullSubgroups = s.compute_full_subgroups;
    if (size_control) { *tail = &sizes; tail = &sizes.pNext; }
    VkPhysicalDeviceFeatures2 feats{};
    feats.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
    feats.pNext = &s16;
    feats.features.shaderInt16 = s.shader_int16;
    feats.features.shaderInt64 = s.shader_int64;

    const float priority = 1.0f;
    VkDeviceQueueCreateInfo qci{};
    qci.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO;
    qci.queueFamilyIndex = info_.compute_family;
    qci.queueCount = 1;
    qci.pQueuePriorities = &priority;

    VkDeviceCreateInfo dci{};
    dci.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO;
    dci.pNext = &feats;
    dci.queueCreateInfoCount = 1;
    dci.pQueueCreateInfos = &qci;
    dci.enabledExtensionCount = static_cast<uint32_t>(exts.size());
    dci.ppEnabledExtensionNames = exts.data();
    KVRT_VK_CHECK(ifn_.vkCreateDevice(info_.handle, &dci, nullptr, &device_));
    KVRT_TRY(load_device_functions(ifn_, device_, s.timeline_semaphore, external_fd, &dfn_));
    if (!external_fd) export_types_ = export_dedicated_ = 0;
    queue_family_ = info_.compute_family;
    dfn_.vkGetDeviceQueue(device_, queue_family_, 0, &queue_);
    enabled_ = s;
    return KVRT_SUCCESS;
}

Result Context::import(const ContextOptions& options, const kvrt_vulkan_import_desc& d,
                       std::unique_ptr<Context>* out, const kvrt_pipeline_cache_desc* pipeline_cache) {
    if (d.type != KVRT_STRUCT_TYPE_VULKAN_IMPORT_DESC)
        return fail(KVRT_ERROR_INVALID_ARGUMENT,
                    "kvrt_vulkan_import_desc.type must be KVRT_STRUCT_TYPE_VULKAN_IMPORT_DESC");
    if (!d.instance || !d.physical_device || !d.device || !d.queue || !d.get_instance_proc_addr)
        return fail(KVRT_ERROR_INVALID_ARGUMENT,
                    "kvrt_vulkan_import_desc needs instance, physical_device, device, queue and "
                    "get_instance_proc_addr");
    if (!d.lock_queue != !d.unlock_queue)
        return fail(KVRT_ERROR_INVALID_ARGUMENT, "give both lock_queue and unlock_queue, or neither");

    std::unique_ptr<Context> ctx(new Context());
    ctx->options_ = options;
    ctx->options_.validation = false;
    ctx->imported_ = true;
    KVRT_TRY(ctx->loader_.adopt(d.get_instance_proc_addr));
    ctx->instance_ = d.instance;
    KVRT_TRY(load_instance_functions(d.get_instance_proc_addr, d.instance, false, &ctx->ifn_));
    const uint32_t api = d.instance_api_version ? d.instance_api_version : VK_API_VERSION_1_1;
    KVRT_TRY(query_physical_device(ctx->ifn_, d.physical_device, 0, api, &ctx->info_));
    if (ctx->info_.api_version < VK_API_VERSION_1_1)
        return fail(KVRT_ERROR_UNSUPPORTED, "kvrt needs Vulkan 1.1 (instance and device)");
    uint32_t n_fam = 0;
    ctx->ifn_.vkGetPhysicalDeviceQueueFamilyProperties(d.physical_device, &n_fam, nullptr);
    std::vector<VkQueueFamilyProperties> fams(n_fam);
    ctx->ifn_.vkGetPhysicalDeviceQueueFamilyProperties(d.physical_device, &n_fam, fams.data());
    if (d.queue_family_index >= n_fam || !(fams[d.queue_family_index].queueFlags & VK_QUEUE_COMPUTE_BIT))
        return fail(KVRT_ERROR_UNSUPPORTED, "queue family %u does not support compute",
                    d.queue_family_index);
    ctx->info_.compute_family = d.queue_family_index;
    ctx->info_.timestamp_valid_bits = fams[d.queue_family_index].timestampValidBits;
    const DeviceProfile* profile = nullptr;
    KVRT_TRY(device_profile_from_env(&profile));
    if (profile) apply_device_profile(*profile, &ctx->info_);

    // Only what the app says it enabled may be used.
    FeatureSet en;
    if (d.enabled_features) {
        if (d.enabled_features->sType != VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2)
            return fail(KVRT_ERROR_INVALID_ARGUMENT, "enabled_features must be a VkPhysicalDeviceFeatures2");
        en.shader_int16 = d.enabled_features->features.shaderInt16;
        en.shader_int64 = d.enabled_features->features.shaderInt64;
        // Subgroup size control: its own struct or Vulkan 1.3's.
        const auto take_sizes = [&en](const auto& f) {
            en.subgroup_size_control |= f.subgroupSizeControl;
            en.compute_full_subgroups |= f.computeFullSubgroups;
        };
        for (auto* p = static_cast<const VkBaseInStructure*>(d.enabled_features->pNext); p; p = p->pNext) {
            switch (p->sType) {
                case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES:
                    en.storage_16bit |= reinterpret_cast<const VkPhysicalDevice16BitStorageFeatures*>(p)->storageBuffer16BitAccess;
                    break;
                case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES: {
                    auto* f = reinterpret_cast<const VkPhysicalDeviceShaderFloat16Int8Features*>(p);
                    en.shader_float16 |= f->shaderFloat16;
                    en.shader_int8 |= f->shaderInt8;
                    break;
                }
                case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_8BIT_STORAGE_FEATURES:
                    en.storage_8bit |= reinterpret_cast<const VkPhysicalDevice8BitStorageFeatures*>(p)->storageBuffer8BitAccess;
                    break;
                case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES:
                    en.storage_16bit |= reinterpret_cast<const VkPhysicalDeviceVulkan11Features*>(p)->storageBuffer16BitAccess;
                    break;
                case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES: {
                    auto* f = reinterpret_cast<const VkPhysicalDeviceVulkan12Features*>(p);
                    en.shader_float16 |= f->shaderFloat16;
                    en.shader_int8 |= f->shaderInt8;
                    en.storage_8bit |= f->storageBuffer8BitAccess;
                    en.timeline_semaphore |= f->timelineSemaphore;
                    break;
                }
                case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_TIMELINE_SEMAPHORE_FEATURES:
                    en.timeline_semaphore |=
                        reinterpret_cast<const VkPhysicalDeviceTimelineSemaphoreFeatures*>(p)->timelineSemaphore;
                    break;
                case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES_EXT:
                    take_sizes(*reinterpret_cast<const VkPhysicalDeviceSubgroupSizeControlFeaturesEXT*>(p));
                    break;
                case VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES:
                    take_sizes(*reinterpret_cast<const VkPhysicalDeviceVulkan13Features*>(p));
                    break;
                default: break;
            }
        }
    }
    // Under a device profile, only what it has too.
    en = en.both(ctx->info_.supported);
    ctx->enabled_ = en;
    ctx->device_ = d.device;
    ctx->queue_ = d.queue;
    ctx->queue_family_ = d.queue_family_index;
    ctx->app_lock_queue_ = d.lock_queue;
    ctx->app_unlock_queue_ = d.unlock_queue;
    ctx->app_queue_user_ = d.queue_user_data;
    const Result loaded = load_device_functions(ctx->ifn_, d.device, en.timeline_semaphore, false, &ctx->dfn_);
    if (loaded != KVRT_SUCCESS) {
        if (!en.timeline_semaphore) return loaded;
        // Said to be enabled, but its entry points are missing: do without.
        ctx->log().log(KVRT_LOG_LEVEL_WARN, "timeline semaphores are unusable: %s", last_error_message());
        ctx->enabled_.timeline_semaphore = false;
        KVRT_TRY(load_device_functions(ctx->ifn_, d.device, false, false, &ctx->dfn_));
    }
    KVRT_TRY(ctx->init_common(pipeline_cache));
    *out = std::move(ctx);
    return KVRT_SUCCESS;
}

Result Context::init_common(const kvrt_pipeline_cache_desc* pipeline_cache) {
    // A forced variant the device cannot run is an error, never a fallback.
    // (The fault point stands for such a device in tests.)
    if (options_.kernels == KernelChoice::Shuffle &&
        (!supports_shuffle_kernels(info_) ||
         fault::named_point("device without subgroup shuffles", KVRT_ERROR_UNSUPPORTED) != KVRT_SUCCESS))
        return fail(KVRT_ERROR_UNSUPPORTED,
                    "the subgroup-shuffle kernels were asked for (KVRT_CONTEXT_SHUFFLE_KERNELS or "
                    "KVRT_KERNELS=shuffle), but %s lacks them: compute subgroup operations 0x%x (basic 0x1 "
                    "and shuffle 0x10 needed), subgroup size %u (2 or more needed)",
                    info_.props.deviceName, static_cast<unsigned>(info_.subgroup_ops), info_.subgroup_size);
    ifn_.vkGetPhysicalDeviceMemoryProperties(info_.handle, &memory_);
    uint64_t limit = info_.props.limits.maxStorageBufferRange;
    if (info_.max_memory_allocation_size) limit = std::min(limit, info_.max_memory_allocation_size);
    if (options_.max_binding_bytes) limit = std::min(limit, options_.max_binding_bytes);
    max_binding_ = limit & ~uint64_t(255);
    if (max_binding_ < 4096)
        return fail(KVRT_ERROR_UNSUPPORTED, "maxStorageBufferRange %llu is too small",
                    static_cast<unsigned long long>(limit));

    VkCommandPoolCreateInfo pci{};
    pci.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO;
    pci.flags = VK_COMMAND_POOL_CREATE_TRANSIENT_BIT;
    pci.queueFamilyIndex = queue_family_;
    KVRT_VK_CHECK(dfn_.vkCreateCommandPool(device_, &pci, nullptr, &oneoff_pool_));
    pipelines_ = std::make_unique<PipelineCache>(*this);
    const void* cache_data = pipeline_cache ? pipeline_cache->data : nullptr;
    const uint64_t cache_size = cache_data ? pipeline_cache->size : 0;
    KVRT_TRY(pipelines_->init(cache_data, cache_size));
    return KVRT_SUCCESS;
}

Context::~Context() {
    if (device_) {
        // Destroying objects the GPU still uses is undefined: everything
        // waits until the device finished what kvrt submitted.
        Result r = fault::named_point("wait at context destruction", KVRT_ERROR_TIMEOUT);
        if (r == KVRT_SUCCESS) r = wait_all(options_.wait_timeout_ns);
        bool idle = r == KVRT_SUCCESS || lost();
        if (!idle) {
            log().log(KVRT_LOG_LEVEL_WARN,
                      "context destroyed while GPU work is still running (%s); waiting for the device to "
                      "finish before its objects are freed",
                      last_error_message());
            idle = wait_idle_for_destruction();
        }
        std::vector<std::function<void()>> ready;
        {
            std::lock_guard<std::mutex> lock(timeline_mutex_);
            if (idle) {
                // Done (or the device is lost, when freeing is allowed too):
                // every deferred release runs now, before the device goes.
                retire_locked(&ready);
                for (Pending& p : releases_) ready.push_back(std::move(p.release));
                releases_.clear();
            } else {
                // Never run: the memory they free may still be in use.
                new std::deque<Pending>(std::move(releases_));
            }
        }
        if (!idle) {
            log().log(KVRT_LOG_LEVEL_ERROR,
                      "context destroyed while an application's submission of kvrt's commands has not "
                      "completed; its Vulkan objects are leaked");
            (void)pipelines_.release();
            return;
        }
        for (auto& f : ready) f();
        pipelines_.reset();
        for (const Staging& st : staging_pool_) destroy_staging(st);
        for (const Fence& f : fences_)
            if (f.handle) dfn_.vkDestroyFence(device_, f.handle, nullptr);
        if (oneoff_pool_) dfn_.vkDestroyCommandPool(device_, oneoff_pool_, nullptr);
        if (!imported_) dfn_.vkDestroyDevice(device_, nullptr);
    }
    if (!imported_ && instance_) {
        if (messenger_) ifn_.vkDestroyDebugUtilsMessengerEXT(instance_, messenger_, nullptr);
        ifn_.vkDestroyInstance(instance_, nullptr);
    }
}

bool Context::wait_idle_for_destruction() {
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    std::lock_guard<std::mutex> lock(timeline_mutex_);
    // No timeout: the work kvrt submitted finishes or the device is lost.
    // An own device is kvrt's alone (every queue: vkDeviceWaitIdle); on an
    // imported one kvrt waits for its own newest fence.
    VkResult vr = VK_SUCCESS;
    if (!imported_) {
        vr = dfn_.vkDeviceWaitIdle(device_);
    } else {
        // The newest own fence settles every own submission before it.
        for (auto it = in_flight_.rbegin(); it != in_flight_.rend(); ++it) {
            if (it->external || it->done || !it->fence) continue;
            vr = dfn_.vkWaitForFences(device_, 1, &it->fence->handle, VK_TRUE, UINT64_MAX);
            break;
        }
    }
    if (vr != VK_SUCCESS && check(vr, "waiting for the device at context destruction") != KVRT_SUCCESS && !lost())
        return false;
    // kvrt's own submissions are done; an application's submission of a
    // command buffer kvrt recorded is done only if it says so.
    for (InFlight& f : in_flight_) {
        if (f.done) continue;
        if (!f.external || lost()) {
            mark_done_locked(f);
            continue;
        }
        poll_locked(f);
        if (!f.done && !lost()) return false;
    }
    const double ms = std::chrono::duration<double, std::milli>(clock::now() - start).count();
    log().log(KVRT_LOG_LEVEL_WARN, "waited %.3f ms more for the device before freeing the context's objects", ms);
    return true;
}

Result Context::device_memory_type(uint32_t type_bits, uint32_t* out_index, bool* out_mappable,
                                   bool* out_coherent) const {
    // Preference: device-local and host-visible (mapped, no staging) unless
    // staging is forced or the device (or its profile) has no such type;
    // then device-local; then anything.
    const bool map_device = !options_.force_staging && info_.unified_memory;
    int best = -1, best_score = -1;
    for (uint32_t t = 0; t < memory_.memoryTypeCount; ++t) {
        if (!(type_bits & (1u << t))) continue;
        const VkMemoryPropertyFlags f = memory_.memoryTypes[t].propertyFlags;
        int score = 0;
        if (f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) score += 4;
        if (map_device) {
            if (f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) score += 2;
            if (f & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT) score += 1;
        } else if (!(f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT)) {
            score += 1;  // plain device memory, not a small BAR heap
        }
        if (score > best_score) { best = static_cast<int>(t); best_score = score; }
    }
    if (best < 0) return fail(KVRT_ERROR_UNSUPPORTED, "no memory type for a storage buffer");
    const VkMemoryPropertyFlags f = memory_.memoryTypes[best].propertyFlags;
    *out_index = static_cast<uint32_t>(best);
    *out_mappable = map_device && (f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT);
    *out_coherent = f & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    return KVRT_SUCCESS;
}

Result Context::staging_memory_type(uint32_t type_bits, uint32_t* out_index, bool* out_coherent) const {
    int best = -1, best_score = -1;
    for (uint32_t t = 0; t < memory_.memoryTypeCount; ++t) {
        if (!(type_bits & (1u << t))) continue;
        const VkMemoryPropertyFlags f = memory_.memoryTypes[t].propertyFlags;
        if (!(f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT)) continue;
        int score = 0;
        if (f & VK_MEMORY_PROPERTY_HOST_CACHED_BIT) score += 2;  // fast host reads
        if (f & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT) score += 1;
        if (score > best_score) { best = static_cast<int>(t); best_score = score; }
    }
    if (best < 0) return fail(KVRT_ERROR_UNSUPPORTED, "no host-visible memory type for staging");
    *out_index = static_cast<uint32_t>(best);
    *out_coherent = memory_.memoryTypes[best].propertyFlags & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    return KVRT_SUCCESS;
}

void Context::set_name(VkObjectType type, uint64_t handle, const char* name) const {
    if (!debug_utils_ || !ifn_.vkSetDebugUtilsObjectNameEXT || !name || !*name) return;
    VkDebugUtilsObjectNameInfoEXT ni{};
    ni.sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_OBJECT_NAME_INFO_EXT;
    ni.objectType = type;
    ni.objectHandle = handle;
    ni.pObjectName = name;
    ifn_.vkSetDebugUtilsObjectNameEXT(device_, &ni);
}

Result Context::check(VkResult r, const char* what) {
    if (r == VK_SUCCESS) return KVRT_SUCCESS;
    if (r == VK_ERROR_DEVICE_LOST) {
        lost_.store(true, std::memory_order_release);
        log().log(KVRT_LOG_LEVEL_ERROR, "device lost in %s", what);
    }
    return vk_fail(r, what);
}

void Context::add_stream(Stream* s) {
    std::lock_guard<std::mutex> lock(streams_mutex_);
    streams_.push_back(s);
}

void Context::remove_stream(Stream* s) {
    std::lock_guard<std::mutex> lock(streams_mutex_);
    streams_.erase(std::remove(streams_.begin(), streams_.end(), s), streams_.end());
}

void Context::track_device_bytes(int64_t delta) {
    const int64_t now = device_bytes_.fetch_add(delta, std::memory_order_relaxed) + delta;
    int64_t peak = peak_device_bytes_.load(std::memory_order_relaxed);
    while (now > peak && !peak_device_bytes_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
}

void Context::fill_stats(kvrt_context_stats* out) const {
    // Each counter is read on its own: consistent one by one, not as a set
    // while other threads allocate.
    out->validation_errors = validation_errors_.load();
    out->validation_warnings = validation_warnings_.load();
    const int64_t bytes = device_bytes_.load(std::memory_order_relaxed);
    out->device_bytes = static_cast<uint64_t>(bytes);
    out->peak_device_bytes = static_cast<uint64_t>(std::max(bytes, peak_device_bytes_.load(std::memory_order_relaxed)));
    out->submissions = submissions_.load(std::memory_order_relaxed);
}

}  // namespace kvrt::vk
