/* Compiles one public header alone (KVRT_TEST_HEADER) and uses every
 * initializer macro it defines, so that missing-field and pedantic warnings in
 * them fail the build. Built as C99, C11 and C++17 with -Werror. */
#include KVRT_TEST_HEADER

#if defined(KVRT_VERSION) && !defined(KVRT_H)
/* kvrt_version.h alone: the macros must be usable in #if. */
#  if KVRT_VERSION_MAJOR < 0
#    error bad version
#  endif
#endif

int main(void) {
#ifdef KVRT_H
    kvrt_context_desc context_desc = KVRT_CONTEXT_DESC_INIT;
    kvrt_device_info device_info = KVRT_DEVICE_INFO_INIT;
    kvrt_context_stats stats = KVRT_CONTEXT_STATS_INIT;
    kvrt_buffer_desc buffer_desc = KVRT_BUFFER_DESC_INIT;
    kvrt_stream_desc stream_desc = KVRT_STREAM_DESC_INIT;
    (void)context_desc;
    (void)device_info;
    (void)stats;
    (void)buffer_desc;
    (void)stream_desc;
    {
        kvrt_cache_desc cache_desc = KVRT_CACHE_DESC_INIT;
        kvrt_cache_estimate estimate = KVRT_CACHE_ESTIMATE_INIT;
        kvrt_cache_info cache_info = KVRT_CACHE_INFO_INIT;
        (void)cache_desc;
        (void)estimate;
        (void)cache_info;
    }
    {
        kvrt_attention_params attention = KVRT_ATTENTION_PARAMS_INIT;
        (void)attention;
    }
    {
        kvrt_memory_desc memory_desc = KVRT_MEMORY_DESC_INIT;
        kvrt_memory_batch memory_batch = KVRT_MEMORY_BATCH_INIT;
        (void)memory_desc;
        (void)memory_batch;
    }
#endif
#ifdef KVRT_VULKAN_H
    kvrt_vulkan_import_desc import_desc = KVRT_VULKAN_IMPORT_DESC_INIT;
    (void)import_desc;
#endif
    return (int)(KVRT_VERSION & 0);
}
