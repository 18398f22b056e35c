# The shared library exports the C ABI only (kvrt_*), is named and carries the
# SONAME that the SONAME policy of include/kvrt/kvrt_version.h gives for the
# header's version, and does not link libvulkan (it is opened at run time).
#
#   cmake -DLIB=<libkvrt.so.X.Y.Z> -DVERSION=X.Y.Z -P check_exports.cmake
#
# The policy: before 1.0 each minor version is its own ABI, SONAME
# libkvrt.so.0.MINOR; from 1.0 on, libkvrt.so.MAJOR. The file itself is
# libkvrt.so.MAJOR.MINOR.PATCH either way.
cmake_minimum_required(VERSION 3.20)

if(NOT VERSION MATCHES "^([0-9]+)\\.([0-9]+)\\.([0-9]+)$")
  message(FATAL_ERROR "VERSION must be MAJOR.MINOR.PATCH, got '${VERSION}'")
endif()
set(major ${CMAKE_MATCH_1})
set(minor ${CMAKE_MATCH_2})
if(major EQUAL 0)
  set(soname libkvrt.so.0.${minor})
else()
  set(soname libkvrt.so.${major})
endif()

execute_process(COMMAND nm -D --defined-only --format=posix ${LIB}
  OUTPUT_VARIABLE syms RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "nm failed on ${LIB}")
endif()
string(REPLACE "\n" ";" lines "${syms}")
set(count 0)
set(bad "")
foreach(line ${lines})
  string(REGEX MATCH "^[^ ]+" name "${line}")
  if(name STREQUAL "")
    continue()
  endif()
  if(name MATCHES "^kvrt_")
    math(EXPR count "${count} + 1")
  else()
    list(APPEND bad ${name})
  endif()
endforeach()
if(bad)
  message(FATAL_ERROR "symbols exported that are not kvrt_*: ${bad}")
endif()
if(count LESS 10)
  message(FATAL_ERROR "only ${count} kvrt_* symbols exported")
endif()
message(STATUS "${count} exported symbols, all kvrt_*")

get_filename_component(file_name ${LIB} NAME)
get_filename_component(lib_dir ${LIB} DIRECTORY)
if(NOT file_name STREQUAL "libkvrt.so.${VERSION}")
  message(FATAL_ERROR "the library file is ${file_name}, not libkvrt.so.${VERSION}")
endif()
foreach(link ${soname} libkvrt.so)
  if(NOT IS_SYMLINK ${lib_dir}/${link})
    message(FATAL_ERROR "${lib_dir}/${link} is not a symbolic link to ${file_name}")
  endif()
endforeach()

execute_process(COMMAND readelf -d ${LIB} OUTPUT_VARIABLE dyn RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "readelf failed on ${LIB}")
endif()
string(REPLACE "." "\\." soname_re "${soname}")
if(NOT dyn MATCHES "Library soname: \\[${soname_re}\\]")
  message(FATAL_ERROR "SONAME is not ${soname} (the policy of kvrt_version.h for version ${VERSION}):\n${dyn}")
endif()
if(dyn MATCHES "libvulkan")
  message(FATAL_ERROR "libkvrt links libvulkan at link time:\n${dyn}")
endif()
message(STATUS "file ${file_name}, SONAME ${soname}; no libvulkan in NEEDED")
