/* Prints the bytes of every KVRT_*_INIT macro, one line per struct: NAME HEX. */
#include <stdio.h>
#define KVRT_EXPERIMENTAL /* the experimental structs' macros are checked too */
#include <kvrt/kvrt.h>

static void dump(const char* name, const void* p, size_t n) {
    const unsigned char* b = (const unsigned char*)p;
    printf("%s ", name);
    for (size_t i = 0; i < n; ++i) printf("%02x", b[i]);
    printf("\n");
}

int main(void) {
    { static const kvrt_device_info v = KVRT_DEVICE_INFO_INIT; dump("KVRT_DEVICE_INFO_INIT", &v, sizeof v); }
    { static const kvrt_context_desc v = KVRT_CONTEXT_DESC_INIT; dump("KVRT_CONTEXT_DESC_INIT", &v, sizeof v); }
    { static const kvrt_pipeline_cache_desc v = KVRT_PIPELINE_CACHE_DESC_INIT; dump("KVRT_PIPELINE_CACHE_DESC_INIT", &v, sizeof v); }
    { static const kvrt_context_stats v = KVRT_CONTEXT_STATS_INIT; dump("KVRT_CONTEXT_STATS_INIT", &v, sizeof v); }
    { static const kvrt_buffer_desc v = KVRT_BUFFER_DESC_INIT; dump("KVRT_BUFFER_DESC_INIT", &v, sizeof v); }
    { static const kvrt_stream_desc v = KVRT_STREAM_DESC_INIT; dump("KVRT_STREAM_DESC_INIT", &v, sizeof v); }
    { static const kvrt_timing v = KVRT_TIMING_INIT; dump("KVRT_TIMING_INIT", &v, sizeof v); }
    { static const kvrt_rope_desc v = KVRT_ROPE_DESC_INIT; dump("KVRT_ROPE_DESC_INIT", &v, sizeof v); }
    { static const kvrt_cache_desc v = KVRT_CACHE_DESC_INIT; dump("KVRT_CACHE_DESC_INIT", &v, sizeof v); }
    { static const kvrt_window_layout_desc v = KVRT_WINDOW_LAYOUT_DESC_INIT; dump("KVRT_WINDOW_LAYOUT_DESC_INIT", &v, sizeof v); }
    { static const kvrt_static_layout_desc v = KVRT_STATIC_LAYOUT_DESC_INIT; dump("KVRT_STATIC_LAYOUT_DESC_INIT", &v, sizeof v); }
    { static const kvrt_static_scales_desc v = KVRT_STATIC_SCALES_DESC_INIT; dump("KVRT_STATIC_SCALES_DESC_INIT", &v, sizeof v); }
    { static const kvrt_cache_estimate v = KVRT_CACHE_ESTIMATE_INIT; dump("KVRT_CACHE_ESTIMATE_INIT", &v, sizeof v); }
    { static const kvrt_batch v = KVRT_BATCH_INIT; dump("KVRT_BATCH_INIT", &v, sizeof v); }
    { static const kvrt_batch_tree v = KVRT_BATCH_TREE_INIT; dump("KVRT_BATCH_TREE_INIT", &v, sizeof v); }
    { static const kvrt_tensor_ref v = KVRT_TENSOR_REF_INIT; dump("KVRT_TENSOR_REF_INIT", &v, sizeof v); }
    { static const kvrt_output_ref v = KVRT_OUTPUT_REF_INIT; dump("KVRT_OUTPUT_REF_INIT", &v, sizeof v); }
    { static const kvrt_cache_info v = KVRT_CACHE_INFO_INIT; dump("KVRT_CACHE_INFO_INIT", &v, sizeof v); }
    { static const kvrt_attention_params v = KVRT_ATTENTION_PARAMS_INIT; dump("KVRT_ATTENTION_PARAMS_INIT", &v, sizeof v); }
    { static const kvrt_static_window v = KVRT_STATIC_WINDOW_INIT; dump("KVRT_STATIC_WINDOW_INIT", &v, sizeof v); }
    { static const kvrt_static_stats v = KVRT_STATIC_STATS_INIT; dump("KVRT_STATIC_STATS_INIT", &v, sizeof v); }
    { static const kvrt_static_mask_desc v = KVRT_STATIC_MASK_DESC_INIT; dump("KVRT_STATIC_MASK_DESC_INIT", &v, sizeof v); }
    { static const kvrt_static_style_desc v = KVRT_STATIC_STYLE_DESC_INIT; dump("KVRT_STATIC_STYLE_DESC_INIT", &v, sizeof v); }
    { static const kvrt_exported_memory v = KVRT_EXPORTED_MEMORY_INIT; dump("KVRT_EXPORTED_MEMORY_INIT", &v, sizeof v); }
    { static const kvrt_paged_layout_desc v = KVRT_PAGED_LAYOUT_DESC_INIT; dump("KVRT_PAGED_LAYOUT_DESC_INIT", &v, sizeof v); }
    { static const kvrt_paged_stats v = KVRT_PAGED_STATS_INIT; dump("KVRT_PAGED_STATS_INIT", &v, sizeof v); }
    { static const kvrt_memory_init v = KVRT_MEMORY_INIT_INIT; dump("KVRT_MEMORY_INIT_INIT", &v, sizeof v); }
    { static const kvrt_memory_desc v = KVRT_MEMORY_DESC_INIT; dump("KVRT_MEMORY_DESC_INIT", &v, sizeof v); }
    { static const kvrt_memory_batch v = KVRT_MEMORY_BATCH_INIT; dump("KVRT_MEMORY_BATCH_INIT", &v, sizeof v); }
    { static const kvrt_memory_estimate v = KVRT_MEMORY_ESTIMATE_INIT; dump("KVRT_MEMORY_ESTIMATE_INIT", &v, sizeof v); }
    return 0;
}
