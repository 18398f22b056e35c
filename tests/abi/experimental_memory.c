/* Uses the experimental fixed-capacity memory through kvrt.h
 * (abi/CMakeLists.txt: compiles only with KVRT_EXPERIMENTAL). */
#include <kvrt/kvrt.h>

int main(void) {
    kvrt_memory_desc desc = KVRT_MEMORY_DESC_INIT;
    kvrt_memory memory = NULL;
    (void)desc;
    kvrt_memory_destroy(memory);
    return 0;
}
