# Every compute kernel of kvrt: one kvrt_add_shader() per variant.
# NAME is the symbol the runtime looks the SPIR-V up by (src/pipelines).

kvrt_add_shader(NAME fill_u32 SOURCE shaders/fill.comp)
kvrt_add_shader(NAME copy_u32 SOURCE shaders/copy.comp)

# Store: {f32, f16} input x {F32, F16, Q8_0, Q4_0, U8_STATIC, U16_STATIC}
# cache element.
foreach(src f32 f16)
  foreach(dst f32 f16 q8_0 q4_0 u8_static u16_static)
    string(TOUPPER ${dst} dst_upper)
    set(defs DST_${dst_upper})
    if(src STREQUAL "f16")
      list(APPEND defs SRC_F16)
    endif()
    kvrt_add_shader(NAME store_${src}_${dst} SOURCE shaders/store.comp DEFINES ${defs})
  endforeach()
endforeach()
# Stored bytes copied as they are (pre-quantized rows), from any byte alignment.
kvrt_add_shader(NAME store_raw SOURCE shaders/store_raw.comp)
kvrt_add_shader(NAME copy_rows SOURCE shaders/copy_rows.comp)
kvrt_add_shader(NAME copy_rows_vec4 SOURCE shaders/copy_rows.comp DEFINES VEC4)

# Fixed-capacity memory (MV/MK): portable kernels and "_wide" ones (64-bit
# loads, 32-row tiles) for CPU implementations with shaderInt64.
kvrt_add_shader(NAME memory_pack SOURCE shaders/memory_pack.comp)
kvrt_add_shader(NAME memory_out SOURCE shaders/memory_out.comp)
foreach(kernel scores softmax intra read)
  kvrt_add_shader(NAME memory_${kernel} SOURCE shaders/memory_${kernel}.comp)
  kvrt_add_shader(NAME memory_${kernel}_wide SOURCE shaders/memory_${kernel}.comp DEFINES MEM_WIDE)
endforeach()
kvrt_add_shader(NAME memory_update SOURCE shaders/memory_update.comp)
kvrt_add_shader(NAME memory_update_wide SOURCE shaders/memory_update.comp DEFINES MEM_WIDE)
kvrt_add_shader(NAME memory_update_f16 SOURCE shaders/memory_update.comp DEFINES STATE_F16)
kvrt_add_shader(NAME memory_update_f16_wide SOURCE shaders/memory_update.comp DEFINES STATE_F16 MEM_WIDE)

# Attention: {K type} x {V type} x {f32, f16 queries} x {subgroup shuffle, portable}.
# The format numbers are those of shaders/include/kv_load.glsl.
set(kvrt_attn_types f32 f16 q8_0 q4_0 u8_static u16_static)
set(kvrt_attn_fmt_f32 1)
set(kvrt_attn_fmt_f16 2)
set(kvrt_attn_fmt_q8_0 3)
set(kvrt_attn_fmt_q4_0 4)
set(kvrt_attn_fmt_u8_static 5)
set(kvrt_attn_fmt_u16_static 6)
foreach(kt ${kvrt_attn_types})
  foreach(vt ${kvrt_attn_types})
    foreach(q f32 f16)
      # wide: the portable kernel with 32-byte row loads (CPU drivers).
      foreach(variant shuffle portable wide)
        set(defs K_FMT=${kvrt_attn_fmt_${kt}} V_FMT=${kvrt_attn_fmt_${vt}})
        if(q STREQUAL "f16")
          list(APPEND defs Q_F16)
        endif()
        if(variant STREQUAL "shuffle")
          list(APPEND defs SHUFFLE)
        elseif(variant STREQUAL "wide")
          list(APPEND defs WIDE)
        endif()
        kvrt_add_shader(NAME attn_${kt}_${vt}_q${q}_${variant} SOURCE shaders/attention.comp DEFINES ${defs})
      endforeach()
      # The shared-memory tiled kernel (batches of many query rows).
      set(defs K_FMT=${kvrt_attn_fmt_${kt}} V_FMT=${kvrt_attn_fmt_${vt}})
      if(q STREQUAL "f16")
        list(APPEND defs Q_F16)
      endif()
      kvrt_add_shader(NAME attn_${kt}_${vt}_q${q}_tiled SOURCE shaders/attention_tiled.comp DEFINES ${defs})
    endforeach()
  endforeach()
endforeach()
kvrt_add_shader(NAME attn_merge_f32 SOURCE shaders/attention_merge.comp)
kvrt_add_shader(NAME attn_merge_f16 SOURCE shaders/attention_merge.comp DEFINES OUT_F16)

# RoPE shift, in place, per K type.
kvrt_add_shader(NAME rope_shift_f32 SOURCE shaders/rope_shift.comp DEFINES K_FMT=1)
kvrt_add_shader(NAME rope_shift_f16 SOURCE shaders/rope_shift.comp DEFINES K_FMT=2)
kvrt_add_shader(NAME rope_shift_q8_0 SOURCE shaders/rope_shift.comp DEFINES K_FMT=3)
kvrt_add_shader(NAME rope_shift_q4_0 SOURCE shaders/rope_shift.comp DEFINES K_FMT=4)
kvrt_add_shader(NAME rope_shift_u8_static SOURCE shaders/rope_shift.comp DEFINES K_FMT=5)
kvrt_add_shader(NAME rope_shift_u16_static SOURCE shaders/rope_shift.comp DEFINES K_FMT=6)
kvrt_add_shader(NAME rope_shift_blocks_q8_0 SOURCE shaders/rope_shift_blocks.comp DEFINES K_FMT=3)
kvrt_add_shader(NAME rope_shift_blocks_q4_0 SOURCE shaders/rope_shift_blocks.comp DEFINES K_FMT=4)
kvrt_add_shader(NAME rope_shift_fast_f32 SOURCE shaders/rope_shift_fast.comp)
kvrt_add_shader(NAME rope_shift_fast_f16 SOURCE shaders/rope_shift_fast.comp DEFINES K_F16)
kvrt_add_shader(NAME rope_shift_fast_f16_vec4 SOURCE shaders/rope_shift_fast.comp DEFINES K_F16 VEC4)
kvrt_add_shader(NAME rope_shift_fast_u8_static SOURCE shaders/rope_shift_fast.comp DEFINES K_U8)
kvrt_add_shader(NAME rope_shift_fast_u16_static SOURCE shaders/rope_shift_fast.comp DEFINES K_U16)
kvrt_add_shader(NAME rope_cells SOURCE shaders/rope_cells.comp)

# Per-sequence lists of cells for attention over sequences stored in turns:
# count, prefix and write passes of one kernel.
kvrt_add_shader(NAME cell_lists SOURCE shaders/cell_lists.comp)
