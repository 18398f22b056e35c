/* Uses the experimental recording into an application's command buffer
 * (abi/CMakeLists.txt: compiles only with KVRT_EXPERIMENTAL). */
#include <kvrt/kvrt_vulkan.h>

int main(void) {
    kvrt_vulkan_completion completion = KVRT_VULKAN_COMPLETION_INIT;
    return kvrt_stream_end_vulkan(NULL, &completion) == KVRT_SUCCESS;
}
