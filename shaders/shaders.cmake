# Every compute kernel of kvrt: one kvrt_add_shader() per variant.
# NAME is the symbol the runtime looks the SPIR-V up by (src/pipelines).

kvrt_add_shader(NAME fill_u32 SOURCE shaders/fill.comp)
kvrt_add_shader(NAME copy_u32 SOURCE shaders/copy.comp)
