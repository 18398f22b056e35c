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
