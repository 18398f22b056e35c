/* The header bindgen reads to generate src/bindings.rs. kvrt_vulkan.h is left
 * out: every one of its functions takes Vulkan types. The experimental parts
 * are bound too (the safe crate keeps them in its `experimental` module). */
#define KVRT_EXPERIMENTAL
#include <kvrt/kvrt.h>
