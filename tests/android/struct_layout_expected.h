/* Public struct layouts on Android's ABIs, written by struct_layout.py
 * --write and checked by struct_layout.c and struct_layout.py.
 *
 * KVRT_LAYOUT_SIZE(struct, LP64, ILP32, i686) and
 * KVRT_LAYOUT_FIELD(struct, field, LP64, ILP32, i686): sizes and offsets
 * for arm64-v8a and x86_64 (LP64), armeabi-v7a (ILP32) and x86 (i686).
 * The i686 column differs from ILP32 only where a 64-bit field follows an
 * odd number of 32-bit words, or the struct ends on one. */

KVRT_LAYOUT_SIZE(kvrt_device_info, 864, 856, 852)  /* i686 differs */
KVRT_LAYOUT_FIELD(kvrt_device_info, type, 0, 0, 0)
KVRT_LAYOUT_FIELD(kvrt_device_info, next, 8, 4, 4)
KVRT_LAYOUT_FIELD(kvrt_device_info, index, 16, 8, 8)
KVRT_LAYOUT_FIELD(kvrt_device_info, device_type, 20, 12, 12)
KVRT_LAYOUT_FIELD(kvrt_device_info, name, 24, 16, 16)
KVRT_LAYOUT_FIELD(kvrt_device_info, driver_name, 280, 272, 272)
KVRT_LAYOUT_FIELD(kvrt_device_info, driver_info, 536, 528, 528)
KVRT_LAYOUT_FIELD(kvrt_device_info, vendor_id, 792, 784, 784)
KVRT_LAYOUT_FIELD(kvrt_device_info, device_id, 796, 788, 788)
KVRT_LAYOUT_FIELD(kvrt_device_info, api_version, 800, 792, 792)
KVRT_LAYOUT_FIELD(kvrt_device_info, driver_version, 804, 796, 796)
KVRT_LAYOUT_FIELD(kvrt_device_info, features, 808, 800, 800)
KVRT_LAYOUT_FIELD(kvrt_device_info, subgroup_ops, 812, 804, 804)
KVRT_LAYOUT_FIELD(kvrt_device_info, subgroup_size, 816, 808, 808)
KVRT_LAYOUT_FIELD(kvrt_device_info, max_shared_memory_bytes, 820, 812, 812)
KVRT_LAYOUT_FIELD(kvrt_device_info, max_workgroup_invocations, 824, 816, 816)
KVRT_LAYOUT_FIELD(kvrt_device_info, max_push_constants_bytes, 828, 820, 820)
KVRT_LAYOUT_FIELD(kvrt_device_info, max_storage_buffer_range, 832, 824, 824)
KVRT_LAYOUT_FIELD(kvrt_device_info, max_memory_allocation_size, 840, 832, 832)
KVRT_LAYOUT_FIELD(kvrt_device_info, device_local_bytes, 848, 840, 840)
KVRT_LAYOUT_FIELD(kvrt_device_info, timestamp_period_ns, 856, 848, 848)

KVRT_LAYOUT_SIZE(kvrt_context_desc, 72, 48, 44)  /* i686 differs */
KVRT_LAYOUT_FIELD(kvrt_context_desc, type, 0, 0, 0)
KVRT_LAYOUT_FIELD(kvrt_context_desc, next, 8, 4, 4)
KVRT_LAYOUT_FIELD(kvrt_context_desc, flags, 16, 8, 8)
KVRT_LAYOUT_FIELD(kvrt_context_desc, device, 24, 12, 12)
KVRT_LAYOUT_FIELD(kvrt_context_desc, log_callback, 32, 16, 16)
KVRT_LAYOUT_FIELD(kvrt_context_desc, log_user_data, 40, 20, 20)
KVRT_LAYOUT_FIELD(kvrt_context_desc, log_level, 48, 24, 24)
KVRT_LAYOUT_FIELD(kvrt_context_desc, wait_timeout_ns, 56, 32, 28)  /* i686 differs */
KVRT_LAYOUT_FIELD(kvrt_context_desc, max_binding_bytes, 64, 40, 36)  /* i686 differs */

KVRT_LAYOUT_SIZE(kvrt_pipeline_cache_desc, 32, 24, 20)  /* i686 differs */
KVRT_LAYOUT_FIELD(kvrt_pipeline_cache_desc, type, 0, 0, 0)
KVRT_LAYOUT_FIELD(kvrt_pipeline_cache_desc, next, 8, 4, 4)
KVRT_LAYOUT_FIELD(kvrt_pipeline_cache_desc, data, 16, 8, 8)
KVRT_LAYOUT_FIELD(kvrt_pipeline_cache_desc, size, 24, 16, 12)  /* i686 differs */

KVRT_LAYOUT_SIZE(kvrt_context_stats, 56, 48, 48)
KVRT_LAYOUT_FIELD(kvrt_context_stats, type, 0, 0, 0)
KVRT_LAYOUT_FIELD(kvrt_context_stats, next, 8, 4, 4)
KVRT_LAYOUT_FIELD(kvrt_context_stats, validation_errors, 16, 8, 8)
KVRT_LAYOUT_FIELD(kvrt_context_stats, validation_warnings, 24, 16, 16)
KVRT_LAYOUT_FIELD(kvrt_context_stats, device_bytes, 32, 24, 24)
KVRT_LAYOUT_FIELD(kvrt_context_stats, peak_device_bytes, 40, 32, 32)
KVRT_LAYOUT_FIELD(kvrt_context_stats, submissions, 48, 40, 40)

KVRT_LAYOUT_SIZE(kvrt_buffer_desc, 40, 24, 24)
KVRT_LAYOUT_FIELD(kvrt_buffer_desc, type, 0, 0, 0)
KVRT_LAYOUT_FIELD(kvrt_buffer_desc, next, 8, 4, 4)
KVRT_LAYOUT_FIELD(kvrt_buffer_desc, size, 16, 8, 8)
KVRT_LAYOUT_FIELD(kvrt_buffer_desc, flags, 24, 16, 16)
KVRT_LAYOUT_FIELD(kvrt_buffer_desc, label, 32, 20, 20)

KVRT_LAYOUT_SIZE(kvrt_stream_desc, 32, 20, 20)
KVRT_LAYOUT_FIELD(kvrt_stream_desc, type, 0, 0, 0)
KVRT_LAYOUT_FIELD(kvrt_stream_desc, next, 8, 4, 4)
KVRT_LAYOUT_FIELD(kvrt_stream_desc, flags, 16, 8, 8)
KVRT_LAYOUT_FIELD(kvrt_stream_desc, max_timings, 20, 12, 12)
KVRT_LAYOUT_FIELD(kvrt_stream_desc, label, 24, 16, 16)

KVRT_LAYOUT_SIZE(kvrt_timing, 32, 24, 20)  /* i686 differs */
KVRT_LAYOUT_FIELD(kvrt_timing, type, 0, 0, 0)
KVRT_LAYOUT_FIELD(kvrt_timing, next, 8, 4, 4)
KVRT_LAYOUT_FIELD(kvrt_timing, label, 16, 8, 8)
KVRT_LAYOUT_FIELD(kvrt_timing, ns, 24, 16, 12)  /* i686 differs */

KVRT_LAYOUT_SIZE(kvrt_rope_desc, 56, 44, 44)
KVRT_LAYOUT_FIELD(kvrt_rope_desc, type, 0, 0, 0)
KVRT_LAYOUT_FIELD(kvrt_rope_desc, next, 8, 4, 4)
KVRT_LAYOUT_FIELD(kvrt_rope_desc, mode, 16, 8, 8)
KVRT_LAYOUT_FIELD(kvrt_rope_desc, n_rot, 20, 12, 12)
KVRT_LAYOUT_FIELD(kvrt_rope_desc, freq_base, 24, 16, 16)
KVRT_LAYOUT_FIELD(kvrt_rope_desc, freq_scale, 28, 20, 20)
KVRT_LAYOUT_FIELD(kvrt_rope_desc, ext_factor, 32, 24, 24)
KVRT_LAYOUT_FIELD(kvrt_rope_desc, attn_factor, 36, 28, 28)
KVRT_LAYOUT_FIELD(kvrt_rope_desc, beta_fast, 40, 32, 32)
KVRT_LAYOUT_FIELD(kvrt_rope_desc, beta_slow, 44, 36, 36)
KVRT_LAYOUT_FIELD(kvrt_rope_desc, n_ctx_orig, 48, 40, 40)

KVRT_LAYOUT_SIZE(kvrt_cache_desc, 80, 60, 60)
KVRT_LAYOUT_FIELD(kvrt_cache_desc, type, 0, 0, 0)
KVRT_LAYOUT_FIELD(kvrt_cache_desc, next, 8, 4, 4)
KVRT_LAYOUT_FIELD(kvrt_cache_desc, n_layers, 16, 8, 8)
KVRT_LAYOUT_FIELD(kvrt_cache_desc, n_heads, 20, 12, 12)
KVRT_LAYOUT_FIELD(kvrt_cache_desc, n_kv_heads, 24, 16, 16)
KVRT_LAYOUT_FIELD(kvrt_cache_desc, head_dim_k, 28, 20, 20)
KVRT_LAYOUT_FIELD(kvrt_cache_desc, head_dim_v, 32, 24, 24)
KVRT_LAYOUT_FIELD(kvrt_cache_desc, capacity, 36, 28, 28)
KVRT_LAYOUT_FIELD(kvrt_cache_desc, max_seqs, 40, 32, 32)
KVRT_LAYOUT_FIELD(kvrt_cache_desc, type_k, 44, 36, 36)
KVRT_LAYOUT_FIELD(kvrt_cache_desc, type_v, 48, 40, 40)
KVRT_LAYOUT_FIELD(kvrt_cache_desc, layout, 52, 44, 44)
KVRT_LAYOUT_FIELD(kvrt_cache_desc, layer_windows, 56, 48, 48)
KVRT_LAYOUT_FIELD(kvrt_cache_desc, label, 64, 52, 52)
KVRT_LAYOUT_FIELD(kvrt_cache_desc, flags, 72, 56, 56)

KVRT_LAYOUT_SIZE(kvrt_static_layout_desc, 32, 24, 20)  /* i686 differs */
KVRT_LAYOUT_FIELD(kvrt_static_layout_desc, type, 0, 0, 0)
KVRT_LAYOUT_FIELD(kvrt_static_layout_desc, next, 8, 4, 4)
KVRT_LAYOUT_FIELD(kvrt_static_layout_desc, seq_len, 16, 8, 8)
KVRT_LAYOUT_FIELD(kvrt_static_layout_desc, reserve, 24, 16, 12)  /* i686 differs */

KVRT_LAYOUT_SIZE(kvrt_static_scales_desc, 56, 28, 28)
KVRT_LAYOUT_FIELD(kvrt_static_scales_desc, type, 0, 0, 0)
KVRT_LAYOUT_FIELD(kvrt_static_scales_desc, next, 8, 4, 4)
KVRT_LAYOUT_FIELD(kvrt_static_scales_desc, count, 16, 8, 8)
KVRT_LAYOUT_FIELD(kvrt_static_scales_desc, k_scales, 24, 12, 12)
KVRT_LAYOUT_FIELD(kvrt_static_scales_desc, k_zero_points, 32, 16, 16)
KVRT_LAYOUT_FIELD(kvrt_static_scales_desc, v_scales, 40, 20, 20)
KVRT_LAYOUT_FIELD(kvrt_static_scales_desc, v_zero_points, 48, 24, 24)

KVRT_LAYOUT_SIZE(kvrt_cache_estimate, 48, 40, 40)
KVRT_LAYOUT_FIELD(kvrt_cache_estimate, type, 0, 0, 0)
KVRT_LAYOUT_FIELD(kvrt_cache_estimate, next, 8, 4, 4)
KVRT_LAYOUT_FIELD(kvrt_cache_estimate, bytes_per_token, 16, 8, 8)
KVRT_LAYOUT_FIELD(kvrt_cache_estimate, data_bytes, 24, 16, 16)
KVRT_LAYOUT_FIELD(kvrt_cache_estimate, device_bytes, 32, 24, 24)
KVRT_LAYOUT_FIELD(kvrt_cache_estimate, max_binding_bytes, 40, 32, 32)

KVRT_LAYOUT_SIZE(kvrt_batch, 48, 24, 24)
KVRT_LAYOUT_FIELD(kvrt_batch, type, 0, 0, 0)
KVRT_LAYOUT_FIELD(kvrt_batch, next, 8, 4, 4)
KVRT_LAYOUT_FIELD(kvrt_batch, n_tokens, 16, 8, 8)
KVRT_LAYOUT_FIELD(kvrt_batch, positions, 24, 12, 12)
KVRT_LAYOUT_FIELD(kvrt_batch, seq_id_counts, 32, 16, 16)
KVRT_LAYOUT_FIELD(kvrt_batch, seq_ids, 40, 20, 20)

KVRT_LAYOUT_SIZE(kvrt_tensor_ref, 72, 56, 52)  /* i686 differs */
KVRT_LAYOUT_FIELD(kvrt_tensor_ref, type, 0, 0, 0)
KVRT_LAYOUT_FIELD(kvrt_tensor_ref, next, 8, 4, 4)
KVRT_LAYOUT_FIELD(kvrt_tensor_ref, buffer, 16, 8, 8)
KVRT_LAYOUT_FIELD(kvrt_tensor_ref, host, 24, 12, 12)
KVRT_LAYOUT_FIELD(kvrt_tensor_ref, element_type, 32, 16, 16)
KVRT_LAYOUT_FIELD(kvrt_tensor_ref, offset, 40, 24, 20)  /* i686 differs */
KVRT_LAYOUT_FIELD(kvrt_tensor_ref, row_stride, 48, 32, 28)  /* i686 differs */
KVRT_LAYOUT_FIELD(kvrt_tensor_ref, head_stride, 56, 40, 36)  /* i686 differs */
KVRT_LAYOUT_FIELD(kvrt_tensor_ref, layer_stride, 64, 48, 44)  /* i686 differs */

KVRT_LAYOUT_SIZE(kvrt_output_ref, 72, 56, 52)  /* i686 differs */
KVRT_LAYOUT_FIELD(kvrt_output_ref, type, 0, 0, 0)
KVRT_LAYOUT_FIELD(kvrt_output_ref, next, 8, 4, 4)
KVRT_LAYOUT_FIELD(kvrt_output_ref, buffer, 16, 8, 8)
KVRT_LAYOUT_FIELD(kvrt_output_ref, host, 24, 12, 12)
KVRT_LAYOUT_FIELD(kvrt_output_ref, element_type, 32, 16, 16)
KVRT_LAYOUT_FIELD(kvrt_output_ref, offset, 40, 24, 20)  /* i686 differs */
KVRT_LAYOUT_FIELD(kvrt_output_ref, row_stride, 48, 32, 28)  /* i686 differs */
KVRT_LAYOUT_FIELD(kvrt_output_ref, head_stride, 56, 40, 36)  /* i686 differs */
KVRT_LAYOUT_FIELD(kvrt_output_ref, layer_stride, 64, 48, 44)  /* i686 differs */

KVRT_LAYOUT_SIZE(kvrt_cache_info, 72, 64, 60)  /* i686 differs */
KVRT_LAYOUT_FIELD(kvrt_cache_info, type, 0, 0, 0)
KVRT_LAYOUT_FIELD(kvrt_cache_info, next, 8, 4, 4)
KVRT_LAYOUT_FIELD(kvrt_cache_info, capacity, 16, 8, 8)
KVRT_LAYOUT_FIELD(kvrt_cache_info, used, 20, 12, 12)
KVRT_LAYOUT_FIELD(kvrt_cache_info, n_attend, 24, 16, 16)
KVRT_LAYOUT_FIELD(kvrt_cache_info, pending_shifts, 28, 20, 20)
KVRT_LAYOUT_FIELD(kvrt_cache_info, fragmentation, 32, 24, 24)
KVRT_LAYOUT_FIELD(kvrt_cache_info, device_bytes, 40, 32, 28)  /* i686 differs */
KVRT_LAYOUT_FIELD(kvrt_cache_info, bytes_per_token, 48, 40, 36)  /* i686 differs */
KVRT_LAYOUT_FIELD(kvrt_cache_info, k_row_bytes, 56, 48, 44)  /* i686 differs */
KVRT_LAYOUT_FIELD(kvrt_cache_info, v_row_bytes, 64, 56, 52)  /* i686 differs */

KVRT_LAYOUT_SIZE(kvrt_attention_params, 48, 32, 32)
KVRT_LAYOUT_FIELD(kvrt_attention_params, type, 0, 0, 0)
KVRT_LAYOUT_FIELD(kvrt_attention_params, next, 8, 4, 4)
KVRT_LAYOUT_FIELD(kvrt_attention_params, flags, 16, 8, 8)
KVRT_LAYOUT_FIELD(kvrt_attention_params, scale, 20, 12, 12)
KVRT_LAYOUT_FIELD(kvrt_attention_params, softcap, 24, 16, 16)
KVRT_LAYOUT_FIELD(kvrt_attention_params, max_bias, 28, 20, 20)
KVRT_LAYOUT_FIELD(kvrt_attention_params, n_keep, 32, 24, 24)
KVRT_LAYOUT_FIELD(kvrt_attention_params, sinks, 40, 28, 28)

KVRT_LAYOUT_SIZE(kvrt_static_window, 80, 72, 64)  /* i686 differs */
KVRT_LAYOUT_FIELD(kvrt_static_window, type, 0, 0, 0)
KVRT_LAYOUT_FIELD(kvrt_static_window, next, 8, 4, 4)
KVRT_LAYOUT_FIELD(kvrt_static_window, buffer, 16, 8, 8)
KVRT_LAYOUT_FIELD(kvrt_static_window, offset, 24, 16, 12)  /* i686 differs */
KVRT_LAYOUT_FIELD(kvrt_static_window, row_stride, 32, 24, 20)  /* i686 differs */
KVRT_LAYOUT_FIELD(kvrt_static_window, bytes, 40, 32, 28)  /* i686 differs */
KVRT_LAYOUT_FIELD(kvrt_static_window, rows, 48, 40, 36)  /* i686 differs */
KVRT_LAYOUT_FIELD(kvrt_static_window, n_valid, 52, 44, 40)  /* i686 differs */
KVRT_LAYOUT_FIELD(kvrt_static_window, pos_first, 56, 48, 44)  /* i686 differs */
KVRT_LAYOUT_FIELD(kvrt_static_window, pos_last, 60, 52, 48)  /* i686 differs */
KVRT_LAYOUT_FIELD(kvrt_static_window, element_type, 64, 56, 52)  /* i686 differs */
KVRT_LAYOUT_FIELD(kvrt_static_window, scale, 68, 60, 56)  /* i686 differs */
KVRT_LAYOUT_FIELD(kvrt_static_window, zero_point, 72, 64, 60)  /* i686 differs */

KVRT_LAYOUT_SIZE(kvrt_static_stats, 48, 40, 40)
KVRT_LAYOUT_FIELD(kvrt_static_stats, type, 0, 0, 0)
KVRT_LAYOUT_FIELD(kvrt_static_stats, next, 8, 4, 4)
KVRT_LAYOUT_FIELD(kvrt_static_stats, rows_appended, 16, 8, 8)
KVRT_LAYOUT_FIELD(kvrt_static_stats, slides, 24, 16, 16)
KVRT_LAYOUT_FIELD(kvrt_static_stats, rows_moved, 32, 24, 24)
KVRT_LAYOUT_FIELD(kvrt_static_stats, bytes_moved, 40, 32, 32)

KVRT_LAYOUT_SIZE(kvrt_memory_init, 56, 40, 40)
KVRT_LAYOUT_FIELD(kvrt_memory_init, type, 0, 0, 0)
KVRT_LAYOUT_FIELD(kvrt_memory_init, next, 8, 4, 4)
KVRT_LAYOUT_FIELD(kvrt_memory_init, source, 16, 8, 8)
KVRT_LAYOUT_FIELD(kvrt_memory_init, element_type, 20, 12, 12)
KVRT_LAYOUT_FIELD(kvrt_memory_init, host, 24, 16, 16)
KVRT_LAYOUT_FIELD(kvrt_memory_init, buffer, 32, 20, 20)
KVRT_LAYOUT_FIELD(kvrt_memory_init, offset, 40, 24, 24)
KVRT_LAYOUT_FIELD(kvrt_memory_init, seed, 48, 32, 32)

KVRT_LAYOUT_SIZE(kvrt_memory_desc, 72, 52, 52)
KVRT_LAYOUT_FIELD(kvrt_memory_desc, type, 0, 0, 0)
KVRT_LAYOUT_FIELD(kvrt_memory_desc, next, 8, 4, 4)
KVRT_LAYOUT_FIELD(kvrt_memory_desc, n_layers, 16, 8, 8)
KVRT_LAYOUT_FIELD(kvrt_memory_desc, n_heads, 20, 12, 12)
KVRT_LAYOUT_FIELD(kvrt_memory_desc, n_slots, 24, 16, 16)
KVRT_LAYOUT_FIELD(kvrt_memory_desc, key_dim, 28, 20, 20)
KVRT_LAYOUT_FIELD(kvrt_memory_desc, value_dim, 32, 24, 24)
KVRT_LAYOUT_FIELD(kvrt_memory_desc, max_seqs, 36, 28, 28)
KVRT_LAYOUT_FIELD(kvrt_memory_desc, state_type, 40, 32, 32)
KVRT_LAYOUT_FIELD(kvrt_memory_desc, chunk_tokens, 44, 36, 36)
KVRT_LAYOUT_FIELD(kvrt_memory_desc, keys, 48, 40, 40)
KVRT_LAYOUT_FIELD(kvrt_memory_desc, values, 56, 44, 44)
KVRT_LAYOUT_FIELD(kvrt_memory_desc, label, 64, 48, 48)

KVRT_LAYOUT_SIZE(kvrt_memory_batch, 80, 40, 40)
KVRT_LAYOUT_FIELD(kvrt_memory_batch, type, 0, 0, 0)
KVRT_LAYOUT_FIELD(kvrt_memory_batch, next, 8, 4, 4)
KVRT_LAYOUT_FIELD(kvrt_memory_batch, n_tokens, 16, 8, 8)
KVRT_LAYOUT_FIELD(kvrt_memory_batch, seq_ids, 24, 12, 12)
KVRT_LAYOUT_FIELD(kvrt_memory_batch, layer, 32, 16, 16)
KVRT_LAYOUT_FIELD(kvrt_memory_batch, wq, 40, 20, 20)
KVRT_LAYOUT_FIELD(kvrt_memory_batch, wv, 48, 24, 24)
KVRT_LAYOUT_FIELD(kvrt_memory_batch, q, 56, 28, 28)
KVRT_LAYOUT_FIELD(kvrt_memory_batch, out, 64, 32, 32)
KVRT_LAYOUT_FIELD(kvrt_memory_batch, scale, 72, 36, 36)

KVRT_LAYOUT_SIZE(kvrt_memory_estimate, 40, 32, 32)
KVRT_LAYOUT_FIELD(kvrt_memory_estimate, type, 0, 0, 0)
KVRT_LAYOUT_FIELD(kvrt_memory_estimate, next, 8, 4, 4)
KVRT_LAYOUT_FIELD(kvrt_memory_estimate, device_bytes, 16, 8, 8)
KVRT_LAYOUT_FIELD(kvrt_memory_estimate, state_bytes_per_seq, 24, 16, 16)
KVRT_LAYOUT_FIELD(kvrt_memory_estimate, max_binding_bytes, 32, 24, 24)

KVRT_LAYOUT_SIZE(kvrt_vulkan_import_desc, 104, 52, 52)
KVRT_LAYOUT_FIELD(kvrt_vulkan_import_desc, type, 0, 0, 0)
KVRT_LAYOUT_FIELD(kvrt_vulkan_import_desc, next, 8, 4, 4)
KVRT_LAYOUT_FIELD(kvrt_vulkan_import_desc, instance, 16, 8, 8)
KVRT_LAYOUT_FIELD(kvrt_vulkan_import_desc, physical_device, 24, 12, 12)
KVRT_LAYOUT_FIELD(kvrt_vulkan_import_desc, device, 32, 16, 16)
KVRT_LAYOUT_FIELD(kvrt_vulkan_import_desc, queue, 40, 20, 20)
KVRT_LAYOUT_FIELD(kvrt_vulkan_import_desc, queue_family_index, 48, 24, 24)
KVRT_LAYOUT_FIELD(kvrt_vulkan_import_desc, get_instance_proc_addr, 56, 28, 28)
KVRT_LAYOUT_FIELD(kvrt_vulkan_import_desc, instance_api_version, 64, 32, 32)
KVRT_LAYOUT_FIELD(kvrt_vulkan_import_desc, enabled_features, 72, 36, 36)
KVRT_LAYOUT_FIELD(kvrt_vulkan_import_desc, lock_queue, 80, 40, 40)
KVRT_LAYOUT_FIELD(kvrt_vulkan_import_desc, unlock_queue, 88, 44, 44)
KVRT_LAYOUT_FIELD(kvrt_vulkan_import_desc, queue_user_data, 96, 48, 48)

KVRT_LAYOUT_SIZE(kvrt_vulkan_submit_desc, 72, 36, 36)
KVRT_LAYOUT_FIELD(kvrt_vulkan_submit_desc, type, 0, 0, 0)
KVRT_LAYOUT_FIELD(kvrt_vulkan_submit_desc, next, 8, 4, 4)
KVRT_LAYOUT_FIELD(kvrt_vulkan_submit_desc, wait_count, 16, 8, 8)
KVRT_LAYOUT_FIELD(kvrt_vulkan_submit_desc, wait_semaphores, 24, 12, 12)
KVRT_LAYOUT_FIELD(kvrt_vulkan_submit_desc, wait_values, 32, 16, 16)
KVRT_LAYOUT_FIELD(kvrt_vulkan_submit_desc, wait_stages, 40, 20, 20)
KVRT_LAYOUT_FIELD(kvrt_vulkan_submit_desc, signal_count, 48, 24, 24)
KVRT_LAYOUT_FIELD(kvrt_vulkan_submit_desc, signal_semaphores, 56, 28, 28)
KVRT_LAYOUT_FIELD(kvrt_vulkan_submit_desc, signal_values, 64, 32, 32)

KVRT_LAYOUT_SIZE(kvrt_vulkan_completion, 40, 32, 32)
KVRT_LAYOUT_FIELD(kvrt_vulkan_completion, type, 0, 0, 0)
KVRT_LAYOUT_FIELD(kvrt_vulkan_completion, next, 8, 4, 4)
KVRT_LAYOUT_FIELD(kvrt_vulkan_completion, semaphore, 16, 8, 8)
KVRT_LAYOUT_FIELD(kvrt_vulkan_completion, value, 24, 16, 16)
KVRT_LAYOUT_FIELD(kvrt_vulkan_completion, fence, 32, 24, 24)
