# Build-time shader pipeline.
#
#   kvrt_add_shader(NAME <symbol> SOURCE <file.comp> [DEFINES A=1 B ...])
#
# compiles SOURCE with glslc (--target-env=vulkan1.1), validates the SPIR-V with
# spirv-val, and turns it into generated/spirv/<symbol>.cpp holding a uint32_t
# array. One .comp can give several variants (different NAMEs and DEFINES).
# kvrt_finish_shaders(<out_var>) writes the registry that maps names to arrays
# and returns every generated source in <out_var>. Editing one shader rebuilds
# only its own generated files (glslc's depfile tracks #includes); the embedding
# runs as a CMake script, with no host-compiled generator, so cross builds
# (Android NDK) need nothing extra.
#
# KVRT_SPIRV_FROM=<build dir> takes the SPIR-V another build of the same tree
# compiled (its generated/spirv/<symbol>.spv) instead of compiling it again:
# SPIR-V does not depend on the target, the compiler or the sanitizers, so the
# sanitizer and cross builds of make test share the main build's (glslc is
# most of the time a build spends on shaders). That build's shader options must
# be these (checked at configure time: generated/spirv/options.txt), and it
# is brought up to date first: the Makefile and tests/android/qemu_tests.sh
# build its kvrt_spirv target before this build. A copy older than its source
# or any file the source includes (glslc's depfile there) fails the build
# (cmake/copy_spirv.cmake): a stale module is never embedded.

set(KVRT_SPIRV_FROM "" CACHE PATH "Build directory whose compiled SPIR-V to embed instead of compiling the shaders (same tree, same shader options)")
# The options that change the SPIR-V: written beside it, compared by builds
# that take it from here.
set(kvrt_spirv_options "glslc --target-env=vulkan1.1 -O -Werror")
if(KVRT_SPEC_MIN_PRECISION)
  string(APPEND kvrt_spirv_options " -DKVRT_SPEC_MIN")
endif()
if(KVRT_SPIRV_FROM)
  get_filename_component(kvrt_spirv_from_dir "${KVRT_SPIRV_FROM}/generated/spirv" ABSOLUTE)
  if(NOT EXISTS "${kvrt_spirv_from_dir}/options.txt")
    message(FATAL_ERROR "KVRT_SPIRV_FROM: ${KVRT_SPIRV_FROM} has no compiled shaders (build its kvrt_spirv target first)")
  endif()
  file(READ "${kvrt_spirv_from_dir}/options.txt" kvrt_spirv_from_options)
  if(NOT kvrt_spirv_from_options STREQUAL kvrt_spirv_options)
    message(FATAL_ERROR "KVRT_SPIRV_FROM: ${KVRT_SPIRV_FROM} compiled its shaders with '${kvrt_spirv_from_options}', "
                        "this build needs '${kvrt_spirv_options}'")
  endif()
else()
  find_program(KVRT_GLSLC glslc REQUIRED)
  find_program(KVRT_SPIRV_VAL spirv-val REQUIRED)
endif()

set_property(GLOBAL PROPERTY KVRT_SHADER_NAMES "")
set_property(GLOBAL PROPERTY KVRT_SHADER_SOURCES "")
set(KVRT_SHADER_GEN_DIR ${CMAKE_BINARY_DIR}/generated/spirv)
set(KVRT_EMBED_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/embed_spirv.cmake)
set(KVRT_COPY_SPIRV_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/copy_spirv.cmake)

function(kvrt_add_shader)
  cmake_parse_arguments(S "" "NAME;SOURCE" "DEFINES" ${ARGN})
  if(NOT S_NAME OR NOT S_SOURCE)
    message(FATAL_ERROR "kvrt_add_shader needs NAME and SOURCE")
  endif()
  if(NOT S_NAME MATCHES "^[a-z0-9_]+$")
    message(FATAL_ERROR "shader name '${S_NAME}' must be [a-z0-9_]+")
  endif()
  get_property(names GLOBAL PROPERTY KVRT_SHADER_NAMES)
  if(S_NAME IN_LIST names)
    message(FATAL_ERROR "shader name '${S_NAME}' used twice")
  endif()

  set(src ${CMAKE_SOURCE_DIR}/${S_SOURCE})
  set(spv ${KVRT_SHADER_GEN_DIR}/${S_NAME}.spv)
  set(cpp ${KVRT_SHADER_GEN_DIR}/${S_NAME}.cpp)
  set(dep ${KVRT_SHADER_GEN_DIR}/${S_NAME}.d)
  set(defs "")
  # The spec-minimum build (shaders/include/common.glsl).
  if(KVRT_SPEC_MIN_PRECISION)
    list(APPEND defs "-DKVRT_SPEC_MIN")
  endif()
  foreach(d ${S_DEFINES})
    list(APPEND defs "-D${d}")
  endforeach()

  if(KVRT_SPIRV_FROM)
    add_custom_command(
      OUTPUT ${spv}
      COMMAND ${CMAKE_COMMAND} -DFROM=${kvrt_spirv_from_dir}/${S_NAME} -DTO=${KVRT_SHADER_GEN_DIR}/${S_NAME}
              -P ${KVRT_COPY_SPIRV_SCRIPT}
      DEPENDS ${src} ${kvrt_spirv_from_dir}/${S_NAME}.spv ${KVRT_COPY_SPIRV_SCRIPT}
      DEPFILE ${dep}
      COMMENT "SPIR-V ${S_NAME} from ${KVRT_SPIRV_FROM}"
      VERBATIM)
  else()
  add_custom_command(
    OUTPUT ${spv}
    COMMAND ${KVRT_GLSLC} --target-env=vulkan1.1 -O -Werror
            -I ${CMAKE_SOURCE_DIR}/shaders/include ${defs}
            -MD -MF ${dep} -o ${spv} ${src}
    COMMAND ${KVRT_SPIRV_VAL} --target-env vulkan1.1 ${spv}
    DEPENDS ${src}
    DEPFILE ${dep}
    COMMENT "glslc ${S_NAME}"
    VERBATIM)
  endif()
  add_custom_command(
    OUTPUT ${cpp}
    COMMAND ${CMAKE_COMMAND} -DNAME=${S_NAME} -DINPUT=${spv} -DOUTPUT=${cpp} -P ${KVRT_EMBED_SCRIPT}
    DEPENDS ${spv} ${KVRT_EMBED_SCRIPT}
    COMMENT "embed ${S_NAME}"
    VERBATIM)

  set_property(GLOBAL APPEND PROPERTY KVRT_SHADER_NAMES ${S_NAME})
  set_property(GLOBAL APPEND PROPERTY KVRT_SHADER_SPIRV ${spv})
  set_property(GLOBAL APPEND PROPERTY KVRT_SHADER_SOURCES ${cpp})
endfunction()

function(kvrt_finish_shaders out_var)
  get_property(names GLOBAL PROPERTY KVRT_SHADER_NAMES)
  get_property(sources GLOBAL PROPERTY KVRT_SHADER_SOURCES)
  list(SORT names)
  set(decls "")
  set(entries "")
  foreach(n ${names})
    string(APPEND decls "extern const uint32_t ${n}_words[];\nextern const size_t ${n}_count;\n")
    string(APPEND entries "    {\"${n}\", ${n}_words, ${n}_count},\n")
  endforeach()
  list(LENGTH names n_names)
  set(reg ${KVRT_SHADER_GEN_DIR}/registry_table.cpp)
  set(content "// Generated by cmake/KvrtShaders.cmake. Do not edit.
#include <cstddef>
#include <cstdint>

#include \"pipelines/registry.hpp\"

namespace kvrt::spirv {
${decls}
const ShaderBlob kShaders[] = {
${entries}};
const size_t kShaderCount = ${n_names};
}  // namespace kvrt::spirv
")
  # Rewrite only on change so that adding nothing rebuilds nothing.
  if(EXISTS ${reg})
    file(READ ${reg} old)
  else()
    set(old "")
  endif()
  if(NOT old STREQUAL content)
    file(WRITE ${reg} "${content}")
  endif()
  # kvrt_spirv: every module compiled (or copied), and the options they were
  # compiled with, for builds that take them from here (KVRT_SPIRV_FROM).
  get_property(spirv GLOBAL PROPERTY KVRT_SHADER_SPIRV)
  set(opts ${KVRT_SHADER_GEN_DIR}/options.txt)
  if(NOT EXISTS ${opts})
    set(old_opts "")
  else()
    file(READ ${opts} old_opts)
  endif()
  if(NOT old_opts STREQUAL kvrt_spirv_options)
    file(WRITE ${opts} "${kvrt_spirv_options}")
  endif()
  add_custom_target(kvrt_spirv DEPENDS ${spirv})
  set(${out_var} ${sources} ${reg} PARENT_SCOPE)
endfunction()
