# Takes a shader module another build compiled (KVRT_SPIRV_FROM):
#   cmake -DFROM=<dir>/<symbol> -DTO=<dir>/<symbol> -P copy_spirv.cmake
# copies FROM.spv to TO.spv and writes TO.d, the dependencies of FROM.d (glslc's
# depfile: the source and every file it includes) under the new name, so that
# this build reruns the copy when any of them changes. Fails if FROM.spv is
# older than any of them: that build was not brought up to date first.
foreach(ext spv d)
  if(NOT EXISTS "${FROM}.${ext}")
    message(FATAL_ERROR "${FROM}.${ext}: missing (build the kvrt_spirv target of that build first)")
  endif()
endforeach()
file(READ "${FROM}.d" dep)
# "target: dep dep \<newline> dep ..." with spaces in names escaped as "\ ".
string(REPLACE "\\\n" " " dep "${dep}")
string(REPLACE "\n" " " dep "${dep}")
string(REPLACE "\\ " "\x01" dep "${dep}")
string(FIND "${dep}" ": " colon)
if(colon EQUAL -1)
  message(FATAL_ERROR "${FROM}.d: not a depfile")
endif()
math(EXPR colon "${colon} + 2")
string(SUBSTRING "${dep}" ${colon} -1 inputs)
separate_arguments(inputs UNIX_COMMAND "${inputs}")
set(escaped "")
foreach(input IN LISTS inputs)
  string(REPLACE "\x01" " " path "${input}")
  if(NOT EXISTS "${path}")
    message(FATAL_ERROR "${FROM}.spv: its input ${path} no longer exists (build the kvrt_spirv target of that build first)")
  endif()
  if("${path}" IS_NEWER_THAN "${FROM}.spv" AND NOT "${FROM}.spv" IS_NEWER_THAN "${path}")
    message(FATAL_ERROR "${FROM}.spv: older than ${path} (build the kvrt_spirv target of that build first)")
  endif()
  string(REPLACE "\x01" "\\ " input "${input}")
  string(APPEND escaped " ${input}")
endforeach()
file(COPY_FILE "${FROM}.spv" "${TO}.spv")
file(WRITE "${TO}.d" "${TO}.spv:${escaped}\n")
