# Every compute kernel of kvrt: one kvrt_add_shader() per variant.
# NAME is the symbol the runtime looks the SPIR-V up by (src/pipelines).

kvrt_add_shader(NAME fill_u32 SOURCE shaders/fill.comp)
kvrt_add_shader(NAME copy_u32 SOURCE shaders/copy.comp)

# Store: {f32, f16} input x {F32, F16, Q8_0, Q4_0} cache element.
foreach(src f32 f16)
  foreach(dst f32 f16 q8_0 q4_0)
    string(TOUPPER ${dst} dst_upper)
    set(defs DST_${dst_upper})
    if(src STREQUAL "f16")
      list(APPEND defs SRC_F16)
    endif()
    kvrt_add_shader(NAME store_${src}_${dst} SOURCE shaders/store.comp DEFINES ${defs})
  endforeach()
endforeach()
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
set(kvrt_attn_types f32 f16 q8_0 q4_0)
set(kvrt_attn_fmt_f32 1)
set(kvrt_attn_fmt_f16 2)
set(kvrt_attn_fmt_q8_0 3)
set(kvrt_attn_fmt_q4_0 4)
foreach(kt ${kvrt_attn_types})
  foreach(vt ${kvrt_attn_types})
    foreach(q f32 f16)
      foreach(variant shuffle portable)
        set(defs K_FMT=${kvrt_attn_fmt_${kt}} V_FMT=${kvrt_attn_fmt_${vt}})
        if(q STREQUAL "f16")
          list(APPEND defs Q_F16)
        endif()
        if(variant STREQUAL "shuffle")
          list(APPEND defs SHUFFLE)
        endif()
        kvrt_add_shader(NAME attn_${kt}_${vt}_q${q}_${variant} SOURCE shaders/attention.comp DEFINES ${defs})
      endforeach()
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
