/* Compiles one public header alone (KVRT_TEST_HEADER) and uses every
 * initializer macro it defines, so that missing-field and pedantic warnings in
 * them fail the build. Built as C99, C11 and C++17 with -Werror.
 *
 * Built as C++17, each KVRT_*_INIT also initializes a constexpr object, and a
 * static_assert checks that the macro sets `type` to its own struct's
 * KVRT_STRUCT_TYPE_* value (a macro copied from a neighbour and left with the
 * neighbour's type would make the library refuse the struct).
 *
 * check_inits.cmake fails when a header defines a KVRT_*_INIT (or a
 * KVRT_STRUCT_TYPE_*) that has no KVRT_CHECK_INIT line below, so new structs
 * cannot skip this file. The line for KVRT_X_INIT must read
 * KVRT_CHECK_INIT(kvrt_x, KVRT_X_INIT, KVRT_STRUCT_TYPE_X). */
#include KVRT_TEST_HEADER

#if defined(KVRT_VERSION) && !defined(KVRT_H)
/* kvrt_version.h alone: the macros must be usable in #if. */
#  if KVRT_VERSION_MAJOR < 0
#    error bad version
#  endif
#endif

#ifdef __cplusplus
#  define KVRT_CHECK_INIT(s, init, struct_type)              \
    constexpr s s##_value = init;                            \
    static_assert(s##_value.type == struct_type, #init " does not set " #struct_type)
#else
#  define KVRT_CHECK_INIT(s, init, struct_type) \
    s s##_value = init;                         \
    (void)s##_value
#endif

int main(void) {
#ifdef KVRT_H
    /* Devices and contexts */
    KVRT_CHECK_INIT(kvrt_device_info, KVRT_DEVICE_INFO_INIT, KVRT_STRUCT_TYPE_DEVICE_INFO);
    KVRT_CHECK_INIT(kvrt_context_desc, KVRT_CONTEXT_DESC_INIT, KVRT_STRUCT_TYPE_CONTEXT_DESC);
    KVRT_CHECK_INIT(kvrt_pipeline_cache_desc, KVRT_PIPELINE_CACHE_DESC_INIT, KVRT_STRUCT_TYPE_PIPELINE_CACHE_DESC);
    KVRT_CHECK_INIT(kvrt_context_stats, KVRT_CONTEXT_STATS_INIT, KVRT_STRUCT_TYPE_CONTEXT_STATS);
    /* Buffers and streams */
    KVRT_CHECK_INIT(kvrt_buffer_desc, KVRT_BUFFER_DESC_INIT, KVRT_STRUCT_TYPE_BUFFER_DESC);
    KVRT_CHECK_INIT(kvrt_stream_desc, KVRT_STREAM_DESC_INIT, KVRT_STRUCT_TYPE_STREAM_DESC);
    KVRT_CHECK_INIT(kvrt_timing, KVRT_TIMING_INIT, KVRT_STRUCT_TYPE_TIMING);
    /* KV cache */
    KVRT_CHECK_INIT(kvrt_rope_desc, KVRT_ROPE_DESC_INIT, KVRT_STRUCT_TYPE_ROPE_DESC);
    KVRT_CHECK_INIT(kvrt_cache_desc, KVRT_CACHE_DESC_INIT, KVRT_STRUCT_TYPE_CACHE_DESC);
    KVRT_CHECK_INIT(kvrt_static_layout_desc, KVRT_STATIC_LAYOUT_DESC_INIT, KVRT_STRUCT_TYPE_STATIC_LAYOUT_DESC);
    KVRT_CHECK_INIT(kvrt_static_scales_desc, KVRT_STATIC_SCALES_DESC_INIT, KVRT_STRUCT_TYPE_STATIC_SCALES_DESC);
    KVRT_CHECK_INIT(kvrt_cache_estimate, KVRT_CACHE_ESTIMATE_INIT, KVRT_STRUCT_TYPE_CACHE_ESTIMATE);
    KVRT_CHECK_INIT(kvrt_batch, KVRT_BATCH_INIT, KVRT_STRUCT_TYPE_BATCH);
    KVRT_CHECK_INIT(kvrt_batch_tree, KVRT_BATCH_TREE_INIT, KVRT_STRUCT_TYPE_BATCH_TREE);
    KVRT_CHECK_INIT(kvrt_tensor_ref, KVRT_TENSOR_REF_INIT, KVRT_STRUCT_TYPE_TENSOR_REF);
    KVRT_CHECK_INIT(kvrt_output_ref, KVRT_OUTPUT_REF_INIT, KVRT_STRUCT_TYPE_OUTPUT_REF);
    KVRT_CHECK_INIT(kvrt_cache_info, KVRT_CACHE_INFO_INIT, KVRT_STRUCT_TYPE_CACHE_INFO);
    /* Attention */
    KVRT_CHECK_INIT(kvrt_attention_params, KVRT_ATTENTION_PARAMS_INIT, KVRT_STRUCT_TYPE_ATTENTION_PARAMS);
    /* Static padded layout */
    KVRT_CHECK_INIT(kvrt_static_window, KVRT_STATIC_WINDOW_INIT, KVRT_STRUCT_TYPE_STATIC_WINDOW);
    KVRT_CHECK_INIT(kvrt_static_stats, KVRT_STATIC_STATS_INIT, KVRT_STRUCT_TYPE_STATIC_STATS);
    /* Paged layout */
    KVRT_CHECK_INIT(kvrt_paged_layout_desc, KVRT_PAGED_LAYOUT_DESC_INIT, KVRT_STRUCT_TYPE_PAGED_LAYOUT_DESC);
    KVRT_CHECK_INIT(kvrt_paged_stats, KVRT_PAGED_STATS_INIT, KVRT_STRUCT_TYPE_PAGED_STATS);
    KVRT_CHECK_INIT(kvrt_window_layout_desc, KVRT_WINDOW_LAYOUT_DESC_INIT, KVRT_STRUCT_TYPE_WINDOW_LAYOUT_DESC);
    KVRT_CHECK_INIT(kvrt_static_mask_desc, KVRT_STATIC_MASK_DESC_INIT, KVRT_STRUCT_TYPE_STATIC_MASK_DESC);
    KVRT_CHECK_INIT(kvrt_static_style_desc, KVRT_STATIC_STYLE_DESC_INIT, KVRT_STRUCT_TYPE_STATIC_STYLE_DESC);
    KVRT_CHECK_INIT(kvrt_exported_memory, KVRT_EXPORTED_MEMORY_INIT, KVRT_STRUCT_TYPE_EXPORTED_MEMORY);
#endif
#ifdef KVRT_MEMORY_H
    /* Fixed-capacity memory (experimental) */
    KVRT_CHECK_INIT(kvrt_memory_init, KVRT_MEMORY_INIT_INIT, KVRT_STRUCT_TYPE_MEMORY_INIT);
    KVRT_CHECK_INIT(kvrt_memory_desc, KVRT_MEMORY_DESC_INIT, KVRT_STRUCT_TYPE_MEMORY_DESC);
    KVRT_CHECK_INIT(kvrt_memory_batch, KVRT_MEMORY_BATCH_INIT, KVRT_STRUCT_TYPE_MEMORY_BATCH);
    KVRT_CHECK_INIT(kvrt_memory_estimate, KVRT_MEMORY_ESTIMATE_INIT, KVRT_STRUCT_TYPE_MEMORY_ESTIMATE);
#endif
#ifdef KVRT_VULKAN_H
    KVRT_CHECK_INIT(kvrt_vulkan_import_desc, KVRT_VULKAN_IMPORT_DESC_INIT, KVRT_STRUCT_TYPE_VULKAN_IMPORT_DESC);
    KVRT_CHECK_INIT(kvrt_vulkan_submit_desc, KVRT_VULKAN_SUBMIT_DESC_INIT, KVRT_STRUCT_TYPE_VULKAN_SUBMIT_DESC);
#ifdef KVRT_EXPERIMENTAL
    KVRT_CHECK_INIT(kvrt_vulkan_completion, KVRT_VULKAN_COMPLETION_INIT, KVRT_STRUCT_TYPE_VULKAN_COMPLETION);
#endif
#endif
    return (int)(KVRT_VERSION & 0);
}
