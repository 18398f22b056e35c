// Helpers for the cgo preambles of package kvrt. The KVRT_*_INIT macros are
// initialisers, not values cgo can see, so each go_*_init function returns a
// struct initialised by its macro: the Go defaults come from kvrt.h itself.
#ifndef KVRT_GO_H
#define KVRT_GO_H

#include <stdint.h>
#include <stdlib.h>

// KVRT_EXPERIMENTAL comes from cgo_flags.go: the package binds the
// experimental parts too.
#include <kvrt/kvrt.h>

#define KVRT_GO_INIT_FN(name, type, macro) \
    static inline type name(void) {        \
        type v = macro;                    \
        return v;                          \
    }

KVRT_GO_INIT_FN(go_context_desc_init, kvrt_context_desc, KVRT_CONTEXT_DESC_INIT)
KVRT_GO_INIT_FN(go_device_info_init, kvrt_device_info, KVRT_DEVICE_INFO_INIT)
KVRT_GO_INIT_FN(go_pipeline_cache_desc_init, kvrt_pipeline_cache_desc, KVRT_PIPELINE_CACHE_DESC_INIT)
KVRT_GO_INIT_FN(go_context_stats_init, kvrt_context_stats, KVRT_CONTEXT_STATS_INIT)
KVRT_GO_INIT_FN(go_buffer_desc_init, kvrt_buffer_desc, KVRT_BUFFER_DESC_INIT)
KVRT_GO_INIT_FN(go_stream_desc_init, kvrt_stream_desc, KVRT_STREAM_DESC_INIT)
KVRT_GO_INIT_FN(go_timing_init, kvrt_timing, KVRT_TIMING_INIT)
KVRT_GO_INIT_FN(go_rope_desc_init, kvrt_rope_desc, KVRT_ROPE_DESC_INIT)
KVRT_GO_INIT_FN(go_cache_desc_init, kvrt_cache_desc, KVRT_CACHE_DESC_INIT)
KVRT_GO_INIT_FN(go_static_layout_desc_init, kvrt_static_layout_desc, KVRT_STATIC_LAYOUT_DESC_INIT)
KVRT_GO_INIT_FN(go_static_style_desc_init, kvrt_static_style_desc, KVRT_STATIC_STYLE_DESC_INIT)
KVRT_GO_INIT_FN(go_exported_memory_init, kvrt_exported_memory, KVRT_EXPORTED_MEMORY_INIT)
KVRT_GO_INIT_FN(go_static_scales_desc_init, kvrt_static_scales_desc, KVRT_STATIC_SCALES_DESC_INIT)
KVRT_GO_INIT_FN(go_paged_layout_desc_init, kvrt_paged_layout_desc, KVRT_PAGED_LAYOUT_DESC_INIT)
KVRT_GO_INIT_FN(go_window_layout_desc_init, kvrt_window_layout_desc, KVRT_WINDOW_LAYOUT_DESC_INIT)
KVRT_GO_INIT_FN(go_cache_estimate_init, kvrt_cache_estimate, KVRT_CACHE_ESTIMATE_INIT)
KVRT_GO_INIT_FN(go_batch_init, kvrt_batch, KVRT_BATCH_INIT)
KVRT_GO_INIT_FN(go_batch_tree_init, kvrt_batch_tree, KVRT_BATCH_TREE_INIT)
KVRT_GO_INIT_FN(go_tensor_ref_init, kvrt_tensor_ref, KVRT_TENSOR_REF_INIT)
KVRT_GO_INIT_FN(go_output_ref_init, kvrt_output_ref, KVRT_OUTPUT_REF_INIT)
KVRT_GO_INIT_FN(go_cache_info_init, kvrt_cache_info, KVRT_CACHE_INFO_INIT)
KVRT_GO_INIT_FN(go_attention_params_init, kvrt_attention_params, KVRT_ATTENTION_PARAMS_INIT)
KVRT_GO_INIT_FN(go_static_window_init, kvrt_static_window, KVRT_STATIC_WINDOW_INIT)
KVRT_GO_INIT_FN(go_static_stats_init, kvrt_static_stats, KVRT_STATIC_STATS_INIT)
KVRT_GO_INIT_FN(go_static_mask_desc_init, kvrt_static_mask_desc, KVRT_STATIC_MASK_DESC_INIT)
KVRT_GO_INIT_FN(go_paged_stats_init, kvrt_paged_stats, KVRT_PAGED_STATS_INIT)
KVRT_GO_INIT_FN(go_memory_init_init, kvrt_memory_init, KVRT_MEMORY_INIT_INIT)
KVRT_GO_INIT_FN(go_memory_desc_init, kvrt_memory_desc, KVRT_MEMORY_DESC_INIT)
KVRT_GO_INIT_FN(go_memory_batch_init, kvrt_memory_batch, KVRT_MEMORY_BATCH_INIT)
KVRT_GO_INIT_FN(go_memory_estimate_init, kvrt_memory_estimate, KVRT_MEMORY_ESTIMATE_INIT)

// Defined in log.c.
void kvrtGoLogTrampoline(void* user_data, kvrt_log_level level, const char* message);

// Installs the Go log trampoline; `handle` is a cgo.Handle, carried as an
// integer in log_user_data (never dereferenced by kvrt).
static inline void go_set_log(kvrt_context_desc* d, uintptr_t handle) {
    d->log_callback = kvrtGoLogTrampoline;
    d->log_user_data = (void*)handle;
}

// Chaining: `next` fields are const void*; these keep the casts in C.
static inline void go_chain(const void** next, const void* item) { *next = item; }

#endif
