//! Rust equivalents of the header's `KVRT_*_INIT` macros, which bindgen
//! cannot translate. Each constant has the same value as its macro; the test
//! `tests/init_macros.rs` compares them with the macros compiled by a C compiler.

use crate::*;

/// The value of `KVRT_DEVICE_INFO_INIT`: `type` set and every field at its default.
pub const KVRT_DEVICE_INFO_INIT: kvrt_device_info = kvrt_device_info {
    type_: KVRT_STRUCT_TYPE_DEVICE_INFO,
    next: core::ptr::null(),
    index: 0,
    device_type: KVRT_DEVICE_TYPE_OTHER,
    name: [0; 256],
    driver_name: [0; 256],
    driver_info: [0; 256],
    vendor_id: 0,
    device_id: 0,
    api_version: 0,
    driver_version: 0,
    features: 0,
    subgroup_ops: 0,
    subgroup_size: 0,
    max_shared_memory_bytes: 0,
    max_workgroup_invocations: 0,
    max_push_constants_bytes: 0,
    max_storage_buffer_range: 0,
    max_memory_allocation_size: 0,
    device_local_bytes: 0,
    timestamp_period_ns: 0.0,
};

/// The value of `KVRT_CONTEXT_DESC_INIT`: `type` set and every field at its default.
pub const KVRT_CONTEXT_DESC_INIT: kvrt_context_desc = kvrt_context_desc {
    type_: KVRT_STRUCT_TYPE_CONTEXT_DESC,
    next: core::ptr::null(),
    flags: 0,
    device: core::ptr::null(),
    log_callback: None,
    log_user_data: core::ptr::null_mut(),
    log_level: KVRT_LOG_LEVEL_DEFAULT,
    wait_timeout_ns: 0,
    max_binding_bytes: 0,
};

/// The value of `KVRT_PIPELINE_CACHE_DESC_INIT`: `type` set and every field at its default.
pub const KVRT_PIPELINE_CACHE_DESC_INIT: kvrt_pipeline_cache_desc = kvrt_pipeline_cache_desc {
    type_: KVRT_STRUCT_TYPE_PIPELINE_CACHE_DESC,
    next: core::ptr::null(),
    data: core::ptr::null(),
    size: 0,
};

/// The value of `KVRT_CONTEXT_STATS_INIT`: `type` set and every field at its default.
pub const KVRT_CONTEXT_STATS_INIT: kvrt_context_stats = kvrt_context_stats {
    type_: KVRT_STRUCT_TYPE_CONTEXT_STATS,
    next: core::ptr::null(),
    validation_errors: 0,
    validation_warnings: 0,
    device_bytes: 0,
    peak_device_bytes: 0,
    submissions: 0,
};

/// The value of `KVRT_BUFFER_DESC_INIT`: `type` set and every field at its default.
pub const KVRT_BUFFER_DESC_INIT: kvrt_buffer_desc = kvrt_buffer_desc {
    type_: KVRT_STRUCT_TYPE_BUFFER_DESC,
    next: core::ptr::null(),
    size: 0,
    flags: 0,
    label: core::ptr::null(),
};

/// The value of `KVRT_STREAM_DESC_INIT`: `type` set and every field at its default.
pub const KVRT_STREAM_DESC_INIT: kvrt_stream_desc = kvrt_stream_desc {
    type_: KVRT_STRUCT_TYPE_STREAM_DESC,
    next: core::ptr::null(),
    flags: 0,
    max_timings: 0,
    label: core::ptr::null(),
};

/// The value of `KVRT_TIMING_INIT`: `type` set and every field at its default.
pub const KVRT_TIMING_INIT: kvrt_timing = kvrt_timing {
    type_: KVRT_STRUCT_TYPE_TIMING,
    next: core::ptr::null(),
    label: core::ptr::null(),
    ns: 0,
};

/// The value of `KVRT_ROPE_DESC_INIT`: `type` set and every field at its default.
pub const KVRT_ROPE_DESC_INIT: kvrt_rope_desc = kvrt_rope_desc {
    type_: KVRT_STRUCT_TYPE_ROPE_DESC,
    next: core::ptr::null(),
    mode: KVRT_ROPE_MODE_NORMAL,
    n_rot: 0,
    freq_base: 0.0,
    freq_scale: 0.0,
    ext_factor: 0.0,
    attn_factor: 0.0,
    beta_fast: 0.0,
    beta_slow: 0.0,
    n_ctx_orig: 0,
};

/// The value of `KVRT_CACHE_DESC_INIT`: `type` set and every field at its default.
pub const KVRT_CACHE_DESC_INIT: kvrt_cache_desc = kvrt_cache_desc {
    type_: KVRT_STRUCT_TYPE_CACHE_DESC,
    next: core::ptr::null(),
    n_layers: 0,
    n_heads: 0,
    n_kv_heads: 0,
    head_dim_k: 0,
    head_dim_v: 0,
    capacity: 0,
    max_seqs: 0,
    type_k: KVRT_TYPE_F16,
    type_v: KVRT_TYPE_F16,
    layout: KVRT_LAYOUT_DEFAULT,
    layer_windows: core::ptr::null(),
    label: core::ptr::null(),
    flags: 0,
};

/// The value of `KVRT_WINDOW_LAYOUT_DESC_INIT`: `type` set and every field at its default.
pub const KVRT_WINDOW_LAYOUT_DESC_INIT: kvrt_window_layout_desc = kvrt_window_layout_desc {
    type_: KVRT_STRUCT_TYPE_WINDOW_LAYOUT_DESC,
    next: core::ptr::null(),
    cells: 0,
    n_keep: 0,
};

/// The value of `KVRT_STATIC_LAYOUT_DESC_INIT`: `type` set and every field at its default.
pub const KVRT_STATIC_LAYOUT_DESC_INIT: kvrt_static_layout_desc = kvrt_static_layout_desc {
    type_: KVRT_STRUCT_TYPE_STATIC_LAYOUT_DESC,
    next: core::ptr::null(),
    seq_len: 0,
    reserve: 0.0,
};

/// The value of `KVRT_STATIC_STYLE_DESC_INIT`: `type` set and every field at its default.
pub const KVRT_STATIC_STYLE_DESC_INIT: kvrt_static_style_desc = kvrt_static_style_desc {
    type_: KVRT_STRUCT_TYPE_STATIC_STYLE_DESC,
    next: core::ptr::null(),
    style: KVRT_STATIC_STYLE_SHIFT_POINTER,
};

/// The value of `KVRT_EXPORTED_MEMORY_INIT`: `type` set, no descriptor (-1) and every other field 0.
pub const KVRT_EXPORTED_MEMORY_INIT: kvrt_exported_memory = kvrt_exported_memory {
    type_: KVRT_STRUCT_TYPE_EXPORTED_MEMORY,
    next: core::ptr::null(),
    fd: -1,
    memory_type_index: 0,
    memory_size: 0,
    offset: 0,
    contiguous_bytes: 0,
    device_uuid: [0; 16],
    driver_uuid: [0; 16],
};

/// The value of `KVRT_STATIC_SCALES_DESC_INIT`: `type` set and every field at its default.
pub const KVRT_STATIC_SCALES_DESC_INIT: kvrt_static_scales_desc = kvrt_static_scales_desc {
    type_: KVRT_STRUCT_TYPE_STATIC_SCALES_DESC,
    next: core::ptr::null(),
    count: 0,
    k_scales: core::ptr::null(),
    k_zero_points: core::ptr::null(),
    v_scales: core::ptr::null(),
    v_zero_points: core::ptr::null(),
};

/// The value of `KVRT_CACHE_ESTIMATE_INIT`: `type` set and every field at its default.
pub const KVRT_CACHE_ESTIMATE_INIT: kvrt_cache_estimate = kvrt_cache_estimate {
    type_: KVRT_STRUCT_TYPE_CACHE_ESTIMATE,
    next: core::ptr::null(),
    bytes_per_token: 0,
    data_bytes: 0,
    device_bytes: 0,
    max_binding_bytes: 0,
};

/// The value of `KVRT_BATCH_INIT`: `type` set and every field at its default.
pub const KVRT_BATCH_INIT: kvrt_batch = kvrt_batch {
    type_: KVRT_STRUCT_TYPE_BATCH,
    next: core::ptr::null(),
    n_tokens: 0,
    positions: core::ptr::null(),
    seq_id_counts: core::ptr::null(),
    seq_ids: core::ptr::null(),
};

/// The value of `KVRT_BATCH_TREE_INIT`: `type` set and every field at its default.
pub const KVRT_BATCH_TREE_INIT: kvrt_batch_tree = kvrt_batch_tree {
    type_: KVRT_STRUCT_TYPE_BATCH_TREE,
    next: core::ptr::null(),
    parents: core::ptr::null(),
    cells: core::ptr::null(),
};

/// The value of `KVRT_TENSOR_REF_INIT`: `type` set and every field at its default.
pub const KVRT_TENSOR_REF_INIT: kvrt_tensor_ref = kvrt_tensor_ref {
    type_: KVRT_STRUCT_TYPE_TENSOR_REF,
    next: core::ptr::null(),
    buffer: core::ptr::null_mut(),
    host: core::ptr::null(),
    element_type: KVRT_TYPE_F32,
    offset: 0,
    row_stride: 0,
    head_stride: 0,
    layer_stride: 0,
};

/// The value of `KVRT_OUTPUT_REF_INIT`: `type` set and every field at its default.
pub const KVRT_OUTPUT_REF_INIT: kvrt_output_ref = kvrt_output_ref {
    type_: KVRT_STRUCT_TYPE_OUTPUT_REF,
    next: core::ptr::null(),
    buffer: core::ptr::null_mut(),
    host: core::ptr::null_mut(),
    element_type: KVRT_TYPE_F32,
    offset: 0,
    row_stride: 0,
    head_stride: 0,
    layer_stride: 0,
};

/// The value of `KVRT_CACHE_INFO_INIT`: `type` set and every field at its default.
pub const KVRT_CACHE_INFO_INIT: kvrt_cache_info = kvrt_cache_info {
    type_: KVRT_STRUCT_TYPE_CACHE_INFO,
    next: core::ptr::null(),
    capacity: 0,
    used: 0,
    n_attend: 0,
    pending_shifts: 0,
    fragmentation: 0.0,
    device_bytes: 0,
    bytes_per_token: 0,
    k_row_bytes: 0,
    v_row_bytes: 0,
};

/// The value of `KVRT_ATTENTION_PARAMS_INIT`: `type` set and every field at its default.
pub const KVRT_ATTENTION_PARAMS_INIT: kvrt_attention_params = kvrt_attention_params {
    type_: KVRT_STRUCT_TYPE_ATTENTION_PARAMS,
    next: core::ptr::null(),
    flags: 0,
    scale: 0.0,
    softcap: 0.0,
    max_bias: 0.0,
    n_keep: 0,
    sinks: core::ptr::null(),
};

/// The value of `KVRT_STATIC_WINDOW_INIT`: `type` set and every field at its default.
pub const KVRT_STATIC_WINDOW_INIT: kvrt_static_window = kvrt_static_window {
    type_: KVRT_STRUCT_TYPE_STATIC_WINDOW,
    next: core::ptr::null(),
    buffer: core::ptr::null_mut(),
    offset: 0,
    row_stride: 0,
    bytes: 0,
    rows: 0,
    n_valid: 0,
    pos_first: -1,
    pos_last: -1,
    element_type: KVRT_TYPE_UNDEFINED,
    scale: 0.0,
    zero_point: 0,
};

/// The value of `KVRT_STATIC_STATS_INIT`: `type` set and every field at its default.
pub const KVRT_STATIC_STATS_INIT: kvrt_static_stats = kvrt_static_stats {
    type_: KVRT_STRUCT_TYPE_STATIC_STATS,
    next: core::ptr::null(),
    rows_appended: 0,
    slides: 0,
    rows_moved: 0,
    bytes_moved: 0,
};

/// The value of `KVRT_STATIC_MASK_DESC_INIT`: `type` set and every field at its default.
pub const KVRT_STATIC_MASK_DESC_INIT: kvrt_static_mask_desc = kvrt_static_mask_desc {
    type_: KVRT_STRUCT_TYPE_STATIC_MASK_DESC,
    next: core::ptr::null(),
    format: KVRT_MASK_F32,
    flags: 0,
    masked_value: 0.0,
    n_new: 1,
};

/// The value of `KVRT_PAGED_LAYOUT_DESC_INIT`: `type` set and every field at its default.
pub const KVRT_PAGED_LAYOUT_DESC_INIT: kvrt_paged_layout_desc = kvrt_paged_layout_desc {
    type_: KVRT_STRUCT_TYPE_PAGED_LAYOUT_DESC,
    next: core::ptr::null(),
    block_size: 0,
};

/// The value of `KVRT_PAGED_STATS_INIT`: `type` set and every field at its default.
pub const KVRT_PAGED_STATS_INIT: kvrt_paged_stats = kvrt_paged_stats {
    type_: KVRT_STRUCT_TYPE_PAGED_STATS,
    next: core::ptr::null(),
    block_size: 0,
    n_blocks: 0,
    free_blocks: 0,
    cached_blocks: 0,
    used_blocks: 0,
    registered_blocks: 0,
    shared_blocks: 0,
};

/// The value of `KVRT_MEMORY_INIT_INIT`: `type` set and every field at its default.
pub const KVRT_MEMORY_INIT_INIT: kvrt_memory_init = kvrt_memory_init {
    type_: KVRT_STRUCT_TYPE_MEMORY_INIT,
    next: core::ptr::null(),
    source: KVRT_MEMORY_SOURCE_ZERO,
    element_type: KVRT_TYPE_F32,
    host: core::ptr::null(),
    buffer: core::ptr::null_mut(),
    offset: 0,
    seed: 0,
};

/// The value of `KVRT_MEMORY_DESC_INIT`: `type` set and every field at its default.
pub const KVRT_MEMORY_DESC_INIT: kvrt_memory_desc = kvrt_memory_desc {
    type_: KVRT_STRUCT_TYPE_MEMORY_DESC,
    next: core::ptr::null(),
    n_layers: 0,
    n_heads: 0,
    n_slots: 0,
    key_dim: 0,
    value_dim: 0,
    max_seqs: 0,
    state_type: KVRT_TYPE_F32,
    chunk_tokens: 0,
    keys: core::ptr::null(),
    values: core::ptr::null(),
    label: core::ptr::null(),
};

/// The value of `KVRT_MEMORY_BATCH_INIT`: `type` set and every field at its default.
pub const KVRT_MEMORY_BATCH_INIT: kvrt_memory_batch = kvrt_memory_batch {
    type_: KVRT_STRUCT_TYPE_MEMORY_BATCH,
    next: core::ptr::null(),
    n_tokens: 0,
    seq_ids: core::ptr::null(),
    layer: 0,
    wq: core::ptr::null(),
    wv: core::ptr::null(),
    q: core::ptr::null(),
    out: core::ptr::null(),
    scale: 0.0,
};

/// The value of `KVRT_MEMORY_ESTIMATE_INIT`: `type` set and every field at its default.
pub const KVRT_MEMORY_ESTIMATE_INIT: kvrt_memory_estimate = kvrt_memory_estimate {
    type_: KVRT_STRUCT_TYPE_MEMORY_ESTIMATE,
    next: core::ptr::null(),
    device_bytes: 0,
    state_bytes_per_seq: 0,
    max_binding_bytes: 0,
};
