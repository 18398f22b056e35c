// kvrt_memory_reader: the other process of the exported-memory tests
// (tests/gpu/test_export_memory.cpp). It plays an application that maps the
// memory kvrt exported (kvrt_buffer_export_memory) with a Vulkan instance of
// its own: it imports the opaque file descriptor it inherited, copies a
// range of the imported memory into a host-visible buffer of its own, and
// writes those bytes to standard output.
//
//   kvrt_memory_reader --fd N --size BYTES --type INDEX --offset O --bytes B
//                      --device-uuid HEX32
//
// The validation layer is on when it is installed; any error it reports
// fails the run. Exit status: 0 with the bytes written, 2 for bad arguments,
// 3 for a Vulkan failure or a validation error (a message on stderr).
#include <dlfcn.h>
#include <vulkan/vulkan.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

int g_validation_errors = 0;

VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                          VkDebugUtilsMessageTypeFlagsEXT, const VkDebugUtilsMessengerCallbackDataEXT* d,
                                          void*) {
    if (severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) {
        ++g_validation_errors;
        std::fprintf(stderr, "kvrt_memory_reader: validation: %s\n", d && d->pMessage ? d->pMessage : "?");
    }
    return VK_FALSE;
}

int fail(const char* what, VkResult r = VK_SUCCESS) {
    std::fprintf(stderr, "kvrt_memory_reader: %s (VkResult %d)\n", what, static_cast<int>(r));
    return 3;
}

struct Args {
    int fd = -1;
    uint64_t size = 0, offset = 0, bytes = 0;
    uint32_t type = 0;
    uint8_t uuid[VK_UUID_SIZE] = {};
};

bool parse(int argc, char** argv, Args* a) {
    bool have_uuid = false;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i];
        const char* v = argv[i + 1];
        if (k == "--fd") a->fd = std::atoi(v);
        else if (k == "--size") a->size = std::strtoull(v, nullptr, 10);
        else if (k == "--type") a->type = static_cast<uint32_t>(std::strtoul(v, nullptr, 10));
        else if (k == "--offset") a->offset = std::strtoull(v, nullptr, 10);
        else if (k == "--bytes") a->bytes = std::strtoull(v, nullptr, 10);
        else if (k == "--device-uuid" && std::strlen(v) == 2 * VK_UUID_SIZE) {
            for (uint32_t j = 0; j < VK_UUID_SIZE; ++j) {
                const char byte[3] = {v[2 * j], v[2 * j + 1], 0};
                a->uuid[j] = static_cast<uint8_t>(std::strtoul(byte, nullptr, 16));
            }
            have_uuid = true;
        } else {
            return false;
        }
    }
    return a->fd >= 0 && a->size > 0 && a->bytes > 0 && a->offset + a->bytes <= a->size && have_uuid;
}

}  // namespace

int main(int argc, char** argv) {
    Args a;
    if (!parse(argc, argv, &a)) {
        std::fprintf(stderr,
                     "usage: kvrt_memory_reader --fd N --size BYTES --type INDEX --offset O --bytes B "
                     "--device-uuid HEX32\n");
        return 2;
    }
    void* lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return fail("cannot load libvulkan.so.1");
    auto gipa = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(lib, "vkGetInstanceProcAddr"));
    if (!gipa) return fail("libvulkan.so.1 has no vkGetInstanceProcAddr");
#define GLOBAL(name) auto name = reinterpret_cast<PFN_##name>(gipa(VK_NULL_HANDLE, #name))
    GLOBAL(vkCreateInstance);
    GLOBAL(vkEnumerateInstanceLayerProperties);
#undef GLOBAL

    // The instance, with the validation layer when it is installed.
    uint32_t n_layers = 0;
    vkEnumerateInstanceLayerProperties(&n_layers, nullptr);
    std::vector<VkLayerProperties> layers(n_layers);
    vkEnumerateInstanceLayerProperties(&n_layers, layers.data());
    bool validation = false;
    for (const VkLayerProperties& l : layers) validation |= std::strcmp(l.layerName, "VK_LAYER_KHRONOS_validation") == 0;
    const char* layer = "VK_LAYER_KHRONOS_validation";
    const char* debug_ext = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
    VkApplicationInfo app{};
    app.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO;
    app.pApplicationName = "kvrt_memory_reader";
    app.apiVersion = VK_API_VERSION_1_1;
    VkInstanceCreateInfo ici{};
    ici.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO;
    ici.pApplicationInfo = &app;
    ici.enabledLayerCount = validation ? 1 : 0;
    ici.ppEnabledLayerNames = &layer;
    ici.enabledExtensionCount = validation ? 1 : 0;
    ici.ppEnabledExtensionNames = &debug_ext;
    VkInstance instance = VK_NULL_HANDLE;
    VkResult r = vkCreateInstance(&ici, nullptr, &instance);
    if (r != VK_SUCCESS) return fail("vkCreateInstance", r);
#define INSTANCE(name) auto name = reinterpret_cast<PFN_##name>(gipa(instance, #name))
    INSTANCE(vkDestroyInstance);
    INSTANCE(vkEnumeratePhysicalDevices);
    INSTANCE(vkGetPhysicalDeviceProperties2);
    INSTANCE(vkGetPhysicalDeviceQueueFamilyProperties);
    INSTANCE(vkGetPhysicalDeviceMemoryProperties);
    INSTANCE(vkGetPhysicalDeviceExternalBufferProperties);
    INSTANCE(vkCreateDevice);
    INSTANCE(vkGetDeviceProcAddr);
    INSTANCE(vkCreateDebugUtilsMessengerEXT);
    INSTANCE(vkDestroyDebugUtilsMessengerEXT);
#undef INSTANCE
    VkDebugUtilsMessengerEXT messenger = VK_NULL_HANDLE;
    if (validation && vkCreateDebugUtilsMessengerEXT) {
        VkDebugUtilsMessengerCreateInfoEXT mci{};
        mci.sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT;
        mci.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT;
        mci.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT;
        mci.pfnUserCallback = on_message;
        vkCreateDebugUtilsMessengerEXT(instance, &mci, nullptr, &messenger);
    }

    // The device whose UUID kvrt reported: an opaque fd imports only there.
    uint32_t n_devices = 0;
    vkEnumeratePhysicalDevices(instance, &n_devices, nullptr);
    std::vector<VkPhysicalDevice> devices(n_devices);
    vkEnumeratePhysicalDevices(instance, &n_devices, devices.data());
    VkPhysicalDevice pd = VK_NULL_HANDLE;
    for (VkPhysicalDevice d : devices) {
        VkPhysicalDeviceIDProperties ids{};
        ids.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES;
        VkPhysicalDeviceProperties2 p2{};
        p2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
        p2.pNext = &ids;
        vkGetPhysicalDeviceProperties2(d, &p2);
        if (std::memcmp(ids.deviceUUID, a.uuid, VK_UUID_SIZE) == 0) pd = d;
    }
    if (!pd) return fail("no device has the exporting device's UUID");
    uint32_t n_fam = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(pd, &n_fam, nullptr);
    std::vector<VkQueueFamilyProperties> fams(n_fam);
    vkGetPhysicalDeviceQueueFamilyProperties(pd, &n_fam, fams.data());
    uint32_t family = n_fam;
    for (uint32_t i = 0; i < n_fam && family == n_fam; ++i)
        if (fams[i].queueFlags & (VK_QUEUE_COMPUTE_BIT | VK_QUEUE_GRAPHICS_BIT | VK_QUEUE_TRANSFER_BIT)) family = i;
    if (family == n_fam) return fail("no queue family can copy");
    const float priority = 1.0f;
    VkDeviceQueueCreateInfo qci{};
    qci.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO;
    qci.queueFamilyIndex = family;
    qci.queueCount = 1;
    qci.pQueuePriorities = &priority;
    const char* fd_ext = VK_KHR_EXTERNAL_MEMORY_FD_EXTENSION_NAME;
    VkDeviceCreateInfo dci{};
    dci.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO;
    dci.queueCreateInfoCount = 1;
    dci.pQueueCreateInfos = &qci;
    dci.enabledExtensionCount = 1;
    dci.ppEnabledExtensionNames = &fd_ext;
    VkDevice dev = VK_NULL_HANDLE;
    r = vkCreateDevice(pd, &dci, nullptr, &dev);
    if (r != VK_SUCCESS) return fail("vkCreateDevice", r);
#define DEVICE(name) auto name = reinterpret_cast<PFN_##name>(vkGetDeviceProcAddr(dev, #name))
    DEVICE(vkDestroyDevice);
    DEVICE(vkGetDeviceQueue);
    DEVICE(vkCreateBuffer);
    DEVICE(vkDestroyBuffer);
    DEVICE(vkGetBufferMemoryRequirements);
    DEVICE(vkAllocateMemory);
    DEVICE(vkFreeMemory);
    DEVICE(vkBindBufferMemory);
    DEVICE(vkMapMemory);
    DEVICE(vkCreateCommandPool);
    DEVICE(vkDestroyCommandPool);
    DEVICE(vkAllocateCommandBuffers);
    DEVICE(vkBeginCommandBuffer);
    DEVICE(vkEndCommandBuffer);
    DEVICE(vkCmdCopyBuffer);
    DEVICE(vkQueueSubmit);
    DEVICE(vkQueueWaitIdle);
#undef DEVICE
    VkQueue queue = VK_NULL_HANDLE;
    vkGetDeviceQueue(dev, family, 0, &queue);
    VkPhysicalDeviceMemoryProperties mem{};
    vkGetPhysicalDeviceMemoryProperties(pd, &mem);
    if (a.type >= mem.memoryTypeCount) return fail("the memory type index is not one of this device's");

    // The imported memory, bound to a buffer of its whole size.
    VkPhysicalDeviceExternalBufferInfo ebi{};
    ebi.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_BUFFER_INFO;
    ebi.usage = VK_BUFFER_USAGE_TRANSFER_SRC_BIT;
    ebi.handleType = VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT;
    VkExternalBufferProperties ebp{};
    ebp.sType = VK_STRUCTURE_TYPE_EXTERNAL_BUFFER_PROPERTIES;
    vkGetPhysicalDeviceExternalBufferProperties(pd, &ebi, &ebp);
    if (!(ebp.externalMemoryProperties.externalMemoryFeatures & VK_EXTERNAL_MEMORY_FEATURE_IMPORTABLE_BIT))
        return fail("this device cannot import opaque file descriptors");
    VkExternalMemoryBufferCreateInfo ebci{};
    ebci.sType = VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO;
    ebci.handleTypes = VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT;
    VkBufferCreateInfo bci{};
    bci.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
    bci.pNext = &ebci;
    bci.size = a.size;
    bci.usage = VK_BUFFER_USAGE_TRANSFER_SRC_BIT;
    VkBuffer imported = VK_NULL_HANDLE;
    r = vkCreateBuffer(dev, &bci, nullptr, &imported);
    if (r != VK_SUCCESS) return fail("vkCreateBuffer (imported)", r);
    VkMemoryRequirements req{};
    vkGetBufferMemoryRequirements(dev, imported, &req);
    if (req.size > a.size || !(req.memoryTypeBits & (1u << a.type)))
        return fail("the imported memory cannot back a buffer of its size");
    VkImportMemoryFdInfoKHR import{};
    import.sType = VK_STRUCTURE_TYPE_IMPORT_MEMORY_FD_INFO_KHR;
    import.handleType = VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT;
    import.fd = a.fd;  // owned by the driver once the import succeeded
    VkMemoryDedicatedAllocateInfo dedicated{};
    dedicated.sType = VK_STRUCTURE_TYPE_MEMORY_DEDICATED_ALLOCATE_INFO;
    dedicated.buffer = imported;
    if (ebp.externalMemoryProperties.externalMemoryFeatures & VK_EXTERNAL_MEMORY_FEATURE_DEDICATED_ONLY_BIT)
        import.pNext = &dedicated;
    VkMemoryAllocateInfo mai{};
    mai.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO;
    mai.pNext = &import;
    mai.allocationSize = a.size;
    mai.memoryTypeIndex = a.type;
    VkDeviceMemory imported_memory = VK_NULL_HANDLE;
    r = vkAllocateMemory(dev, &mai, nullptr, &imported_memory);
    if (r != VK_SUCCESS) return fail("vkAllocateMemory (import)", r);
    r = vkBindBufferMemory(dev, imported, imported_memory, 0);
    if (r != VK_SUCCESS) return fail("vkBindBufferMemory (imported)", r);

    // A host-visible buffer of its own, and the copy into it.
    VkBufferCreateInfo sci{};
    sci.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
    sci.size = a.bytes;
    sci.usage = VK_BUFFER_USAGE_TRANSFER_DST_BIT;
    VkBuffer staging = VK_NULL_HANDLE;
    r = vkCreateBuffer(dev, &sci, nullptr, &staging);
    if (r != VK_SUCCESS) return fail("vkCreateBuffer (staging)", r);
    VkMemoryRequirements sreq{};
    vkGetBufferMemoryRequirements(dev, staging, &sreq);
    uint32_t host_type = mem.memoryTypeCount;
    const VkMemoryPropertyFlags want = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    for (uint32_t i = 0; i < mem.memoryTypeCount && host_type == mem.memoryTypeCount; ++i)
        if ((sreq.memoryTypeBits & (1u << i)) && (mem.memoryTypes[i].propertyFlags & want) == want) host_type = i;
    if (host_type == mem.memoryTypeCount) return fail("no host-visible, coherent memory type");
    VkMemoryAllocateInfo smai{};
    smai.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO;
    smai.allocationSize = sreq.size;
    smai.memoryTypeIndex = host_type;
    VkDeviceMemory staging_memory = VK_NULL_HANDLE;
    r = vkAllocateMemory(dev, &smai, nullptr, &staging_memory);
    if (r != VK_SUCCESS) return fail("vkAllocateMemory (staging)", r);
    r = vkBindBufferMemory(dev, staging, staging_memory, 0);
    if (r != VK_SUCCESS) return fail("vkBindBufferMemory (staging)", r);
    VkCommandPoolCreateInfo pci{};
    pci.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO;
    pci.queueFamilyIndex = family;
    VkCommandPool pool = VK_NULL_HANDLE;
    r = vkCreateCommandPool(dev, &pci, nullptr, &pool);
    if (r != VK_SUCCESS) return fail("vkCreateCommandPool", r);
    VkCommandBufferAllocateInfo cai{};
    cai.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
    cai.commandPool = pool;
    cai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    cai.commandBufferCount = 1;
    VkCommandBuffer cb = VK_NULL_HANDLE;
    r = vkAllocateCommandBuffers(dev, &cai, &cb);
    if (r != VK_SUCCESS) return fail("vkAllocateCommandBuffers", r);
    VkCommandBufferBeginInfo begin{};
    begin.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
    begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    vkBeginCommandBuffer(cb, &begin);
    VkBufferCopy region{a.offset, 0, a.bytes};
    vkCmdCopyBuffer(cb, imported, staging, 1, &region);
    vkEndCommandBuffer(cb);
    VkSubmitInfo si{};
    si.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO;
    si.commandBufferCount = 1;
    si.pCommandBuffers = &cb;
    r = vkQueueSubmit(queue, 1, &si, VK_NULL_HANDLE);
    if (r != VK_SUCCESS) return fail("vkQueueSubmit", r);
    r = vkQueueWaitIdle(queue);
    if (r != VK_SUCCESS) return fail("vkQueueWaitIdle", r);
    void* mapped = nullptr;
    r = vkMapMemory(dev, staging_memory, 0, VK_WHOLE_SIZE, 0, &mapped);
    if (r != VK_SUCCESS) return fail("vkMapMemory", r);
    const size_t written = std::fwrite(mapped, 1, static_cast<size_t>(a.bytes), stdout);
    std::fflush(stdout);

    vkDestroyCommandPool(dev, pool, nullptr);
    vkDestroyBuffer(dev, staging, nullptr);
    vkFreeMemory(dev, staging_memory, nullptr);
    vkDestroyBuffer(dev, imported, nullptr);
    vkFreeMemory(dev, imported_memory, nullptr);
    vkDestroyDevice(dev, nullptr);
    if (messenger) vkDestroyDebugUtilsMessengerEXT(instance, messenger, nullptr);
    vkDestroyInstance(instance, nullptr);
    if (written != a.bytes) return fail("short write to standard output");
    if (g_validation_errors) return fail("the validation layer reported errors");
    return 0;
}
