/* Includes the experimental header directly (abi/CMakeLists.txt: compiles
 * only with KVRT_EXPERIMENTAL; without it kvrt_memory.h stops with an
 * #error). */
#include <kvrt/kvrt_memory.h>

int main(void) { return (int)sizeof(kvrt_memory_desc) == 0; }
