// Under AddressSanitizer only: keeps the Vulkan loader, lavapipe and the
// Khronos validation layer loaded until the process exits. The loader opens
// and closes the driver and the layer with every instance; allocations they
// keep past vkDestroyInstance then belong to an unmapped module, which
// LeakSanitizer can neither symbolize nor match against tests/lsan.supp, and
// the pointers in their unmapped globals no longer count as roots. With the
// libraries resident, their leftovers are reachable or named, and a leak in
// kvrt itself is still reported. Normal builds compile nothing here.
#if defined(__SANITIZE_ADDRESS__)
#define KVRT_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KVRT_TEST_ASAN 1
#endif
#endif

#if defined(KVRT_TEST_ASAN) && defined(__linux__)
#include <dlfcn.h>

#include <initializer_list>

namespace {

struct KeepVulkanLibrariesLoaded {
    KeepVulkanLibrariesLoaded() {
        // A library that is not installed is skipped; the handles are never closed.
        for (const char* lib : {"libvulkan.so.1", "libvulkan_lvp.so", "libVkLayer_khronos_validation.so"})
            (void)dlopen(lib, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    }
} keep_vulkan_libraries_loaded;

}  // namespace
#endif
