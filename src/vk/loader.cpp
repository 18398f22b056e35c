#include "vk/loader.hpp"

#include <dlfcn.h>

#include <utility>

namespace kvrt::vk {

Loader::Loader(Loader&& other) noexcept
    : library_(std::exchange(other.library_, nullptr)), global_(other.global_) {}

Loader& Loader::operator=(Loader&& other) noexcept {
    if (this != &other) {
        if (library_) dlclose(library_);
        library_ = std::exchange(other.library_, nullptr);
        global_ = other.global_;
    }
    return *this;
}

Loader::~Loader() {
    if (library_) dlclose(library_);
}

Result Loader::open() {
    static const char* const names[] = {
#if defined(__ANDROID__)
        "libvulkan.so",
#else
        "libvulkan.so.1",
        "libvulkan.so",
#endif
    };
    void* lib = nullptr;
    for (const char* name : names) {
        // RTLD_LOCAL: the loader's symbols must not leak into the process's
        // global namespace through us.
        lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
        if (lib) break;
    }
    if (!lib) {
#if defined(__ANDROID__)
        return fail(KVRT_ERROR_UNSUPPORTED, "no Vulkan loader found (libvulkan.so): the device has no Vulkan");
#else
        return fail(KVRT_ERROR_UNSUPPORTED,
                    "no Vulkan loader found (libvulkan.so.1); install the Vulkan loader "
                    "and a driver (on Debian: libvulkan1 mesa-vulkan-drivers)");
#endif
    }
    auto gipa = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(lib, "vkGetInstanceProcAddr"));
    if (!gipa) {
        dlclose(lib);
        return fail(KVRT_ERROR_UNSUPPORTED, "the Vulkan loader has no vkGetInstanceProcAddr");
    }
    const Result r = adopt(gipa);
    if (r != KVRT_SUCCESS) {
        dlclose(lib);
        return r;
    }
    if (library_) dlclose(library_);
    library_ = lib;
    return KVRT_SUCCESS;
}

Result Loader::adopt(PFN_vkGetInstanceProcAddr gipa) {
    if (!gipa) return fail(KVRT_ERROR_INVALID_ARGUMENT, "vkGetInstanceProcAddr is NULL");
    GlobalFns g;
    g.vkGetInstanceProcAddr = gipa;
#define KVRT_LOAD_GLOBAL(name)                                                         \
    g.name = reinterpret_cast<PFN_##name>(gipa(VK_NULL_HANDLE, #name));                \
    if (!g.name) return fail(KVRT_ERROR_UNSUPPORTED, "Vulkan loader lacks " #name);
    KVRT_VK_GLOBAL_FUNCTIONS(KVRT_LOAD_GLOBAL)
#undef KVRT_LOAD_GLOBAL
#define KVRT_LOAD_OPTIONAL(name) g.name = reinterpret_cast<PFN_##name>(gipa(VK_NULL_HANDLE, #name));
    KVRT_VK_GLOBAL_OPTIONAL_FUNCTIONS(KVRT_LOAD_OPTIONAL)
#undef KVRT_LOAD_OPTIONAL
    global_ = g;
    return KVRT_SUCCESS;
}

Result load_instance_functions(PFN_vkGetInstanceProcAddr gipa, VkInstance instance,
                               bool debug_utils, InstanceFns* out) {
    InstanceFns f;
#define KVRT_LOAD_INSTANCE(name)                                                      \
    f.name = reinterpret_cast<PFN_##name>(gipa(instance, #name));                     \
    if (!f.name) return fail(KVRT_ERROR_UNSUPPORTED, "Vulkan instance lacks " #name   \
                             " (Vulkan 1.1 is required)");
    KVRT_VK_INSTANCE_FUNCTIONS(KVRT_LOAD_INSTANCE)
#undef KVRT_LOAD_INSTANCE
    if (debug_utils) {
#define KVRT_LOAD_DEBUG(name) f.name = reinterpret_cast<PFN_##name>(gipa(instance, #name));
        KVRT_VK_DEBUG_FUNCTIONS(KVRT_LOAD_DEBUG)
#undef KVRT_LOAD_DEBUG
    }
    *out = f;
    return KVRT_SUCCESS;
}

Result load_device_functions(const InstanceFns& ifn, VkDevice device, bool timeline, bool external_fd,
                             DeviceFns* out) {
    DeviceFns f;
#define KVRT_LOAD_DEVICE(name)                                                        \
    f.name = reinterpret_cast<PFN_##name>(ifn.vkGetDeviceProcAddr(device, #name));    \
    if (!f.name) return fail(KVRT_ERROR_UNSUPPORTED, "Vulkan device lacks " #name);
    KVRT_VK_DEVICE_FUNCTIONS(KVRT_LOAD_DEVICE)
#undef KVRT_LOAD_DEVICE
    if (timeline) {
#define KVRT_LOAD_TIMELINE(name)                                                               \
    f.name = reinterpret_cast<PFN_##name>(ifn.vkGetDeviceProcAddr(device, #name));             \
    if (!f.name) f.name = reinterpret_cast<PFN_##name>(ifn.vkGetDeviceProcAddr(device, #name "KHR")); \
    if (!f.name) return fail(KVRT_ERROR_UNSUPPORTED, "timeline semaphores are enabled but the device lacks " #name);
        KVRT_VK_TIMELINE_FUNCTIONS(KVRT_LOAD_TIMELINE)
#undef KVRT_LOAD_TIMELINE
    }
    if (external_fd) {
#define KVRT_LOAD_EXTERNAL(name)                                                     \
    f.name = reinterpret_cast<PFN_##name>(ifn.vkGetDeviceProcAddr(device, #name));   \
    if (!f.name) return fail(KVRT_ERROR_UNSUPPORTED, "VK_KHR_external_memory_fd is enabled but the device lacks " #name);
        KVRT_VK_EXTERNAL_FD_FUNCTIONS(KVRT_LOAD_EXTERNAL)
#undef KVRT_LOAD_EXTERNAL
    }
    *out = f;
    return KVRT_SUCCESS;
}

const char* vk_result_name(VkResult r) {
    switch (r) {
#define KVRT_CASE(x) case x: return #x;
        KVRT_CASE(VK_SUCCESS)
        KVRT_CASE(VK_NOT_READY)
        KVRT_CASE(VK_TIMEOUT)
        KVRT_CASE(VK_INCOMPLETE)
        KVRT_CASE(VK_ERROR_OUT_OF_HOST_MEMORY)
        KVRT_CASE(VK_ERROR_OUT_OF_DEVICE_MEMORY)
        KVRT_CASE(VK_ERROR_INITIALIZATION_FAILED)
        KVRT_CASE(VK_ERROR_DEVICE_LOST)
        KVRT_CASE(VK_ERROR_MEMORY_MAP_FAILED)
        KVRT_CASE(VK_ERROR_LAYER_NOT_PRESENT)
        KVRT_CASE(VK_ERROR_EXTENSION_NOT_PRESENT)
        KVRT_CASE(VK_ERROR_FEATURE_NOT_PRESENT)
        KVRT_CASE(VK_ERROR_INCOMPATIBLE_DRIVER)
        KVRT_CASE(VK_ERROR_TOO_MANY_OBJECTS)
        KVRT_CASE(VK_ERROR_FORMAT_NOT_SUPPORTED)
        KVRT_CASE(VK_ERROR_FRAGMENTED_POOL)
        KVRT_CASE(VK_ERROR_OUT_OF_POOL_MEMORY)
        KVRT_CASE(VK_ERROR_INVALID_EXTERNAL_HANDLE)
        KVRT_CASE(VK_ERROR_FRAGMENTATION)
        KVRT_CASE(VK_ERROR_UNKNOWN)
#undef KVRT_CASE
        default: return "VK_ERROR_(unrecognized)";
    }
}

Result vk_fail(VkResult r, const char* what) {
    Result code;
    switch (r) {
        case VK_ERROR_OUT_OF_HOST_MEMORY: code = KVRT_ERROR_OUT_OF_HOST_MEMORY; break;
        case VK_ERROR_OUT_OF_DEVICE_MEMORY:
        case VK_ERROR_TOO_MANY_OBJECTS:
        case VK_ERROR_FRAGMENTATION:
        case VK_ERROR_OUT_OF_POOL_MEMORY: code = KVRT_ERROR_OUT_OF_DEVICE_MEMORY; break;
        case VK_ERROR_DEVICE_LOST: code = KVRT_ERROR_DEVICE_LOST; break;
        case VK_TIMEOUT: code = KVRT_ERROR_TIMEOUT; break;
        case VK_ERROR_LAYER_NOT_PRESENT:
        case VK_ERROR_EXTENSION_NOT_PRESENT:
        case VK_ERROR_FEATURE_NOT_PRESENT:
        case VK_ERROR_INCOMPATIBLE_DRIVER:
        case VK_ERROR_FORMAT_NOT_SUPPORTED: code = KVRT_ERROR_UNSUPPORTED; break;
        default: code = KVRT_ERROR_INTERNAL; break;
    }
    return fail(code, "%s failed: %s", what, vk_result_name(r));
}

}  // namespace kvrt::vk
