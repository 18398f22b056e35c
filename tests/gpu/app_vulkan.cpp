#include "app_vulkan.hpp"

#include <dlfcn.h>

#include <vector>

namespace kvrt_test {

void AppVulkan::create() {
    lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
    REQUIRE(lib != nullptr);
    gipa = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(lib, "vkGetInstanceProcAddr"));
    REQUIRE(gipa != nullptr);
    auto create_instance = reinterpret_cast<PFN_vkCreateInstance>(gipa(VK_NULL_HANDLE, "vkCreateInstance"));
    VkApplicationInfo app{};
    app.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO;
    app.apiVersion = VK_API_VERSION_1_1;
    const char* layer = "VK_LAYER_KHRONOS_validation";
    const char* ext = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
    VkInstanceCreateInfo ci{};
    ci.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO;
    ci.pApplicationInfo = &app;
    ci.enabledLayerCount = 1;
    ci.ppEnabledLayerNames = &layer;
    ci.enabledExtensionCount = 1;
    ci.ppEnabledExtensionNames = &ext;
    REQUIRE(create_instance(&ci, nullptr, &instance) == VK_SUCCESS);

    VkDebugUtilsMessengerCreateInfoEXT mci{};
    mci.sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT;
    mci.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
    mci.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT;
    mci.pfnUserCallback = &AppVulkan::on_message;
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

    s16.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES;
    features.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
    features.pNext = &s16;
    instance_fn<PFN_vkGetPhysicalDeviceFeatures2>("vkGetPhysicalDeviceFeatures2")(pd, &features);
    const float prio = 1.0f;
    VkDeviceQueueCreateInfo qci{};
    qci.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO;
    qci.queueFamilyIndex = family;
    qci.queueCount = 1;
    qci.pQueuePriorities = &prio;
    // Enable only 16-bit storage (if present); kvrt must not use more.
    VkPhysicalDeviceFeatures2 enable{};
    enable.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
    VkPhysicalDevice16BitStorageFeatures s16_enable{};
    s16_enable.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES;
    s16_enable.storageBuffer16BitAccess = s16.storageBuffer16BitAccess;
    enable.pNext = &s16_enable;
    VkDeviceCreateInfo dci{};
    dci.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO;
    dci.pNext = &enable;
    dci.queueCreateInfoCount = 1;
    dci.pQueueCreateInfos = &qci;
    REQUIRE(instance_fn<PFN_vkCreateDevice>("vkCreateDevice")(pd, &dci, nullptr, &device) == VK_SUCCESS);
    auto gdpa = instance_fn<PFN_vkGetDeviceProcAddr>("vkGetDeviceProcAddr");
    reinterpret_cast<PFN_vkGetDeviceQueue>(gdpa(device, "vkGetDeviceQueue"))(device, family, 0, &queue);
    // What the app enabled, as it will tell kvrt.
    s16 = s16_enable;
    s16.pNext = nullptr;
    features = enable;
    features.pNext = &s16;
}

AppVulkan::~AppVulkan() {
    if (device) {
        auto gdpa = instance_fn<PFN_vkGetDeviceProcAddr>("vkGetDeviceProcAddr");
        reinterpret_cast<PFN_vkDestroyDevice>(gdpa(device, "vkDestroyDevice"))(device, nullptr);
    }
    if (messenger)
        instance_fn<PFN_vkDestroyDebugUtilsMessengerEXT>("vkDestroyDebugUtilsMessengerEXT")(instance, messenger, nullptr);
    if (instance) instance_fn<PFN_vkDestroyInstance>("vkDestroyInstance")(instance, nullptr);
    if (lib) dlclose(lib);
}

kvrt_vulkan_import_desc AppVulkan::import_desc() const {
    kvrt_vulkan_import_desc vk = KVRT_VULKAN_IMPORT_DESC_INIT;
    vk.instance = instance;
    vk.physical_device = pd;
    vk.device = device;
    vk.queue = queue;
    vk.queue_family_index = family;
    vk.get_instance_proc_addr = gipa;
    vk.instance_api_version = VK_API_VERSION_1_1;
    vk.enabled_features = &features;
    return vk;
}

AppCommands::AppCommands(const AppVulkan& app) : app_(app) {
    VkCommandPoolCreateInfo pci{};
    pci.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO;
    pci.queueFamilyIndex = app.family;
    REQUIRE(app.device_fn<PFN_vkCreateCommandPool>("vkCreateCommandPool")(app.device, &pci, nullptr, &pool_) ==
            VK_SUCCESS);
    VkCommandBufferAllocateInfo ai{};
    ai.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
    ai.commandPool = pool_;
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 1;
    REQUIRE(app.device_fn<PFN_vkAllocateCommandBuffers>("vkAllocateCommandBuffers")(app.device, &ai, &cmd_) ==
            VK_SUCCESS);
    VkFenceCreateInfo fci{};
    fci.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO;
    REQUIRE(app.device_fn<PFN_vkCreateFence>("vkCreateFence")(app.device, &fci, nullptr, &fence_) == VK_SUCCESS);
    VkCommandBufferBeginInfo bi{};
    bi.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
    bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    REQUIRE(app.device_fn<PFN_vkBeginCommandBuffer>("vkBeginCommandBuffer")(cmd_, &bi) == VK_SUCCESS);
}

AppCommands::~AppCommands() {
    // Whatever was submitted completes first.
    app_.device_fn<PFN_vkDeviceWaitIdle>("vkDeviceWaitIdle")(app_.device);
    app_.device_fn<PFN_vkDestroyFence>("vkDestroyFence")(app_.device, fence_, nullptr);
    app_.device_fn<PFN_vkDestroyCommandPool>("vkDestroyCommandPool")(app_.device, pool_, nullptr);
}

VkResult AppCommands::end_and_submit() {
    const VkResult r = app_.device_fn<PFN_vkEndCommandBuffer>("vkEndCommandBuffer")(cmd_);
    if (r != VK_SUCCESS) return r;
    VkSubmitInfo si{};
    si.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO;
    si.commandBufferCount = 1;
    si.pCommandBuffers = &cmd_;
    return app_.device_fn<PFN_vkQueueSubmit>("vkQueueSubmit")(app_.queue, 1, &si, fence_);
}

}  // namespace kvrt_test
