/* The header bindgen reads to generate src/bindings.rs. kvrt_vulkan.h is left
 * out: every one of its functions takes Vulkan types. */
#include <kvrt/kvrt.h>
