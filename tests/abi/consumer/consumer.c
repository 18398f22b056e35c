/* A minimal application built against an installed kvrt. */
#include <stdio.h>
#include <string.h>

#include <kvrt/kvrt.h>

int main(void) {
    if (kvrt_version() != KVRT_VERSION) {
        fprintf(stderr, "header version %lu, library %u\n", (unsigned long)KVRT_VERSION, kvrt_version());
        return 1;
    }
    if (strncmp(kvrt_result_string(KVRT_ERROR_TIMEOUT), "KVRT_ERROR_TIMEOUT", 18) != 0) return 1;
    /* The element types are described by the library itself. */
    if (strcmp(kvrt_type_name(KVRT_TYPE_Q8_0), "q8_0") != 0) return 1;
    if (kvrt_type_block_size(KVRT_TYPE_Q8_0) != 32 || kvrt_type_block_bytes(KVRT_TYPE_Q8_0) != 34) return 1;
    if (kvrt_type_name(KVRT_TYPE_UNDEFINED) != NULL) return 1;
    {
        kvrt_type t = KVRT_TYPE_UNDEFINED;
        if (kvrt_type_from_name("u16_static", &t) != KVRT_SUCCESS || t != KVRT_TYPE_U16_STATIC) return 1;
    }
    {
        kvrt_context ctx = NULL;
        /* A NULL out-pointer is an error, not a crash. */
        if (kvrt_context_create(NULL, NULL) != KVRT_ERROR_INVALID_ARGUMENT) return 1;
        (void)ctx;
    }
    printf("kvrt %s\n", kvrt_version_string());
    return 0;
}
