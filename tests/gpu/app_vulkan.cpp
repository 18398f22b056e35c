#include "app_vulkan.hpp"

#include <dlfcn.h>

#include <cstring>

namespace kvrt_test {

namespace {

VkBool32 VKAPI_PTR on_message(VkDebugUtilsMessageSeverityFlagBitsEXT severity, VkDebugUtilsMessageTypeFlagsEXT,
                              const VkDebugUtilsMessengerCallbackDataEXT* data, void* user) {
    auto* app = static_cast<AppVulkan*>(user);
    if ((severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) && app->validation_errors++ == 0)
        app->first_error = data->pMessage;
    return VK_FALSE;
}

VkCommandBuffer allocate_and_begin(const AppVulkan& app, VkCommandPool pool) {
    VkCommandBufferAllocateInfo ai{};
    ai.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
    ai.commandPool = pool;
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 1;
    VkCommandBuffer cb = VK_NULL_HANDLE;
    REQUIRE(app.vkAllocateCommandBuffers(app.device, &ai, &cb) == VK_SUCCESS);
    VkCommandBufferBeginInfo bi{};
    bi.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
    bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    REQUIRE(app.vkBeginCommandBuffer(cb, &bi) == VK_SUCCESS);
    return cb;
}

VkFence create_fence(const AppVulkan& app) {
    VkFenceCreateInfo fci{};
    fci.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO;
    VkFence f = VK_NULL_HANDLE;
    REQUIRE(app.vkCreateFence(app.device, &fci, nullptr, &f) == VK_SUCCESS);
    return f;
}

}  // namespace

std::vector<float> AppBuffer::floats(VkDeviceSize offset, size_t count) const {
    std::vector<float> out(count);
    std::memcpy(out.data(), static_cast<const uint8_t*>(mapped) + offset, count * sizeof(float));
    return out;
}

AppVulkan::AppVulkan(const AppVulkanOptions& o) : options(o) {
    try {
        create();
    } catch (...) {
        destroy();  // a failed REQUIRE leaves nothing behind
        throw;
    }
}

AppVulkan::~AppVulkan() { destroy(); }

void AppVulkan::create() {
    lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
    REQUIRE(lib != nullptr);
    gipa = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(lib, "vkGetInstanceProcAddr"));
    REQUIRE(gipa != nullptr);
    VkApplicationInfo app{};
    app.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO;
    app.apiVersion = options.api_version;
    const char* layer = "VK_LAYER_KHRONOS_validation";
    const char* exts[] = {VK_EXT_DEBUG_UTILS_EXTENSION_NAME, VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME};
    const VkValidationFeatureEnableEXT sync = VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT;
    VkValidationFeaturesEXT vf{};
    vf.sType = VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT;
    vf.enabledValidationFeatureCount = 1;
    vf.pEnabledValidationFeatures = &sync;
    VkInstanceCreateInfo ci{};
    ci.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO;
    ci.pNext = options.sync_validation ? &vf : nullptr;
    ci.pApplicationInfo = &app;
    ci.enabledLayerCount = 1;
    ci.ppEnabledLayerNames = &layer;
    ci.enabledExtensionCount = options.sync_validation ? 2 : 1;
    ci.ppEnabledExtensionNames = exts;
    auto create_instance = reinterpret_cast<PFN_vkCreateInstance>(gipa(VK_NULL_HANDLE, "vkCreateInstance"));
    REQUIRE(create_instance(&ci, nullptr, &instance) == VK_SUCCESS);

    VkDebugUtilsMessengerCreateInfoEXT mci{};
    mci.sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT;
    mci.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
    mci.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT;
    mci.pfnUserCallback = &on_message;
    mci.pUserData = this;
    REQUIRE(instance_fn<PFN_vkCreateDebugUtilsMessengerEXT>("vkCreateDebugUtilsMessengerEXT")(
                instance, &mci, nullptr, &messenger) == VK_SUCCESS);

    uint32_t n = 1;
    const VkResult er = instance_fn<PFN_vkEnumeratePhysicalDevices>("vkEnumeratePhysicalDevices")(instance, &n, &pd);
    REQUIRE((er == VK_SUCCESS || er == VK_INCOMPLETE));
    REQUIRE(n >= 1);
    uint32_t nf = 0;
    auto qprops = instance_fn<PFN_vkGetPhysicalDeviceQueueFamilyProperties>("vkGetPhysicalDeviceQueueFamilyProperties");
    qprops(pd, &nf, nullptr);
    std::vector<VkQueueFamilyProperties> fams(nf);
    qprops(pd, &nf, fams.data());
    family = UINT32_MAX;
    for (uint32_t i = 0; i < nf && family == UINT32_MAX; ++i)
        if (fams[i].queueFlags & VK_QUEUE_COMPUTE_BIT) family = i;
    REQUIRE(family != UINT32_MAX);
    instance_fn<PFN_vkGetPhysicalDeviceMemoryProperties>("vkGetPhysicalDeviceMemoryProperties")(pd, &memory);

    // Ask only for the structs of the features wanted (the timeline one is
    // not known below Vulkan 1.2), then enable only what the device has of
    // them; kvrt must not use more.
    s16.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES;
    timeline_features.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_TIMELINE_SEMAPHORE_FEATURES;
    features.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
    void** tail = &features.pNext;
    if (options.storage_16bit) {
        *tail = &s16;
        tail = &s16.pNext;
    }
    if (options.timeline) *tail = &timeline_features;
    instance_fn<PFN_vkGetPhysicalDeviceFeatures2>("vkGetPhysicalDeviceFeatures2")(pd, &features);
    features.features = VkPhysicalDeviceFeatures{};
    s16.uniformAndStorageBuffer16BitAccess = VK_FALSE;
    s16.storagePushConstant16 = VK_FALSE;
    s16.storageInputOutput16 = VK_FALSE;
    timeline = options.timeline && timeline_features.timelineSemaphore;
    timeline_features.timelineSemaphore = timeline;

    const float prio = 1.0f;
    VkDeviceQueueCreateInfo qci{};
    qci.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO;
    qci.queueFamilyIndex = family;
    qci.queueCount = 1;
    qci.pQueuePriorities = &prio;
    VkDeviceCreateInfo dci{};
    dci.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO;
    dci.pNext = &features;
    dci.queueCreateInfoCount = 1;
    dci.pQueueCreateInfos = &qci;
    REQUIRE(instance_fn<PFN_vkCreateDevice>("vkCreateDevice")(pd, &dci, nullptr, &device) == VK_SUCCESS);
    auto gdpa = instance_fn<PFN_vkGetDeviceProcAddr>("vkGetDeviceProcAddr");
#define KVRT_APP_LOAD(name)                                   \
    name = reinterpret_cast<PFN_##name>(gdpa(device, #name)); \
    REQUIRE(name != nullptr);
    KVRT_APP_DEVICE_FUNCTIONS(KVRT_APP_LOAD)
    if (timeline) {
        KVRT_APP_TIMELINE_FUNCTIONS(KVRT_APP_LOAD)
    }
#undef KVRT_APP_LOAD
    vkGetDeviceQueue(device, family, 0, &queue);
}

void AppVulkan::destroy() {
    if (device) {
        if (vkDeviceWaitIdle) vkDeviceWaitIdle(device);
        for (VkSemaphore s : semaphores_) vkDestroySemaphore(device, s, nullptr);
        for (VkFence f : fences_) vkDestroyFence(device, f, nullptr);
        for (const AppBuffer& b : buffers_) {
            vkDestroyBuffer(device, b.buffer, nullptr);
            vkFreeMemory(device, b.memory, nullptr);
        }
        if (pool) vkDestroyCommandPool(device, pool, nullptr);
        // Loaded here too: a failed load above leaves vkDestroyDevice unset.
        auto gdpa = instance_fn<PFN_vkGetDeviceProcAddr>("vkGetDeviceProcAddr");
        reinterpret_cast<PFN_vkDestroyDevice>(gdpa(device, "vkDestroyDevice"))(device, nullptr);
        device = VK_NULL_HANDLE;
    }
    if (messenger)
        instance_fn<PFN_vkDestroyDebugUtilsMessengerEXT>("vkDestroyDebugUtilsMessengerEXT")(instance, messenger, nullptr);
    messenger = VK_NULL_HANDLE;
    if (instance) instance_fn<PFN_vkDestroyInstance>("vkDestroyInstance")(instance, nullptr);
    instance = VK_NULL_HANDLE;
    if (lib) dlclose(lib);
    lib = nullptr;
}

kvrt_vulkan_import_desc AppVulkan::import_desc(bool with_timeline) {
    kvrt_vulkan_import_desc vk = KVRT_VULKAN_IMPORT_DESC_INIT;
    vk.instance = instance;
    vk.physical_device = pd;
    vk.device = device;
    vk.queue = queue;
    vk.queue_family_index = family;
    vk.get_instance_proc_addr = gipa;
    vk.instance_api_version = options.api_version;
    timeline_features.timelineSemaphore = with_timeline && timeline;
    vk.enabled_features = &features;
    return vk;
}

const AppBuffer& AppVulkan::buffer(VkDeviceSize size) {
    AppBuffer b;
    b.size = size;
    VkBufferCreateInfo bci{};
    bci.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
    bci.size = size;
    bci.usage =
        VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
    REQUIRE(vkCreateBuffer(device, &bci, nullptr, &b.buffer) == VK_SUCCESS);
    buffers_.push_back(b);  // owned from here, even if a check below fails
    AppBuffer& kept = buffers_.back();
    VkMemoryRequirements req{};
    vkGetBufferMemoryRequirements(device, kept.buffer, &req);
    const VkMemoryPropertyFlags want = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    uint32_t type = UINT32_MAX;
    for (uint32_t t = 0; t < memory.memoryTypeCount && type == UINT32_MAX; ++t)
        if ((req.memoryTypeBits & (1u << t)) && (memory.memoryTypes[t].propertyFlags & want) == want) type = t;
    REQUIRE(type != UINT32_MAX);
    VkMemoryAllocateInfo mai{};
    mai.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO;
    mai.allocationSize = req.size;
    mai.memoryTypeIndex = type;
    REQUIRE(vkAllocateMemory(device, &mai, nullptr, &kept.memory) == VK_SUCCESS);
    REQUIRE(vkBindBufferMemory(device, kept.buffer, kept.memory, 0) == VK_SUCCESS);
    REQUIRE(vkMapMemory(device, kept.memory, 0, VK_WHOLE_SIZE, 0, &kept.mapped) == VK_SUCCESS);
    std::memset(kept.mapped, 0, static_cast<size_t>(size));
    return kept;
}

VkSemaphore AppVulkan::semaphore(bool timeline_type) {
    VkSemaphoreTypeCreateInfo tci{};
    tci.sType = VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO;
    tci.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE;
    VkSemaphoreCreateInfo sci{};
    sci.sType = VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO;
    if (timeline_type) sci.pNext = &tci;
    VkSemaphore s = VK_NULL_HANDLE;
    REQUIRE(vkCreateSemaphore(device, &sci, nullptr, &s) == VK_SUCCESS);
    semaphores_.push_back(s);
    return s;
}

VkFence AppVulkan::fence() {
    fences_.push_back(create_fence(*this));
    return fences_.back();
}

VkCommandBuffer AppVulkan::begin() {
    if (!pool) {
        VkCommandPoolCreateInfo pci{};
        pci.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO;
        pci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
        pci.queueFamilyIndex = family;
        REQUIRE(vkCreateCommandPool(device, &pci, nullptr, &pool) == VK_SUCCESS);
    }
    return allocate_and_begin(*this, pool);
}

void AppVulkan::submit(VkCommandBuffer cb, VkSemaphore wait, uint64_t wait_value, VkSemaphore signal,
                       uint64_t signal_value, VkFence signal_fence) {
    REQUIRE(vkEndCommandBuffer(cb) == VK_SUCCESS);
    const VkPipelineStageFlags stage = VK_PIPELINE_STAGE_TRANSFER_BIT;
    VkTimelineSemaphoreSubmitInfo tsi{};
    tsi.sType = VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO;
    tsi.waitSemaphoreValueCount = wait ? 1 : 0;
    tsi.pWaitSemaphoreValues = &wait_value;
    tsi.signalSemaphoreValueCount = signal ? 1 : 0;
    tsi.pSignalSemaphoreValues = &signal_value;
    VkSubmitInfo si{};
    si.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO;
    if (wait_value || signal_value) si.pNext = &tsi;
    si.waitSemaphoreCount = wait ? 1 : 0;
    si.pWaitSemaphores = &wait;
    si.pWaitDstStageMask = &stage;
    si.commandBufferCount = 1;
    si.pCommandBuffers = &cb;
    si.signalSemaphoreCount = signal ? 1 : 0;
    si.pSignalSemaphores = &signal;
    REQUIRE(vkQueueSubmit(queue, 1, &si, signal_fence) == VK_SUCCESS);
}

void AppVulkan::fill_f32(VkCommandBuffer cb, const AppBuffer& b, VkDeviceSize offset, VkDeviceSize bytes,
                         float value) const {
    uint32_t bits;
    std::memcpy(&bits, &value, 4);
    vkCmdFillBuffer(cb, b.buffer, offset, bytes, bits);
}

AppCommands::AppCommands(const AppVulkan& app) : app_(app) {
    VkCommandPoolCreateInfo pci{};
    pci.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO;
    pci.queueFamilyIndex = app.family;
    REQUIRE(app.vkCreateCommandPool(app.device, &pci, nullptr, &pool_) == VK_SUCCESS);
    fence_ = create_fence(app);
    cmd_ = allocate_and_begin(app, pool_);
}

AppCommands::~AppCommands() {
    // Whatever was submitted completes first.
    app_.vkDeviceWaitIdle(app_.device);
    if (fence_) app_.vkDestroyFence(app_.device, fence_, nullptr);
    app_.vkDestroyCommandPool(app_.device, pool_, nullptr);
}

VkResult AppCommands::end_and_submit() {
    const VkResult r = app_.vkEndCommandBuffer(cmd_);
    if (r != VK_SUCCESS) return r;
    VkSubmitInfo si{};
    si.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO;
    si.commandBufferCount = 1;
    si.pCommandBuffers = &cmd_;
    return app_.vkQueueSubmit(app_.queue, 1, &si, fence_);
}

}  // namespace kvrt_test
