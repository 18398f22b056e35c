# Every struct of the public headers is covered by header_check.c: for each
# KVRT_X_INIT a header defines, and for each KVRT_STRUCT_TYPE_X it lists,
# header_check.c must hold the line
#
#     KVRT_CHECK_INIT(kvrt_x, KVRT_X_INIT, KVRT_STRUCT_TYPE_X);
#
# which compiles the macro in C and C++ and, in C++, static_asserts that it sets
# `type` to its own struct's value (see header_check.c).
#
#   cmake -DHEADERS_DIR=include/kvrt -DCHECK_FILE=tests/abi/header_check.c -P check_inits.cmake

cmake_minimum_required(VERSION 3.20)

file(GLOB headers ${HEADERS_DIR}/*.h)
list(SORT headers)
file(READ ${CHECK_FILE} check_text)

set(names "")
foreach(h ${headers})
  file(READ ${h} text)
  string(REGEX MATCHALL "#[ \t]*define[ \t]+KVRT_[A-Z0-9_]+_INIT[ \t\n\\\\({]" inits "${text}")
  foreach(m ${inits})
    string(REGEX REPLACE "^#[ \t]*define[ \t]+KVRT_([A-Z0-9_]+)_INIT.*$" "\\1" name "${m}")
    list(APPEND names ${name})
  endforeach()
  string(REGEX MATCHALL "KVRT_STRUCT_TYPE_[A-Z0-9_]+[ \t]*=" types "${text}")
  foreach(m ${types})
    string(REGEX REPLACE "^KVRT_STRUCT_TYPE_([A-Z0-9_]+).*$" "\\1" name "${m}")
    if(NOT name MATCHES "^(UNDEFINED|MAX_ENUM)$")
      list(APPEND names ${name})
    endif()
  endforeach()
endforeach()
list(REMOVE_DUPLICATES names)
list(SORT names)

set(missing "")
foreach(name ${names})
  string(TOLOWER "kvrt_${name}" struct_name)
  set(line "KVRT_CHECK_INIT(${struct_name}, KVRT_${name}_INIT, KVRT_STRUCT_TYPE_${name})")
  string(FIND "${check_text}" "${line}" at)
  if(at EQUAL -1)
    list(APPEND missing "${line}")
  endif()
endforeach()

list(LENGTH names count)
if(count LESS 20)
  message(FATAL_ERROR "found only ${count} structs in ${HEADERS_DIR}: is the path right?")
endif()
if(missing)
  list(JOIN missing ";\n    " missing_lines)
  message(FATAL_ERROR
    "The public headers define structs that ${CHECK_FILE} does not check. "
    "Each KVRT_X_INIT and each KVRT_STRUCT_TYPE_X needs the struct kvrt_x, the macro "
    "and the type value, and a line in the header's section of that file; missing:\n"
    "    ${missing_lines};\n")
endif()
message(STATUS "${count} structs, each with its KVRT_*_INIT checked in ${CHECK_FILE}")
