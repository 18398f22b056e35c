# Installs the built library into a scratch prefix, checks the installed names
# and the package's version rule (both follow the SONAME policy of
# include/kvrt/kvrt_version.h), then builds and runs two tiny consumers against
# it: one with find_package(kvrt), one with pkg-config.
#
#   cmake -DBUILD_DIR=... -DWORK_DIR=... -DCONSUMER_DIR=... -DGENERATOR=... -DCC=...
#         -DVERSION=X.Y.Z -P check_install.cmake
cmake_minimum_required(VERSION 3.20)
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed: ${ARGN}\n${out}\n${err}")
  endif()
  set(run_output "${out}" PARENT_SCOPE)
endfunction()

# The policy: before 1.0 each minor version is its own ABI (SONAME
# libkvrt.so.0.MINOR, find_package needs the same MAJOR.MINOR); from 1.0 on
# each major version (libkvrt.so.MAJOR, the same MAJOR).
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

run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})

file(GLOB_RECURSE installed_libs LIST_DIRECTORIES false RELATIVE ${prefix} ${prefix}/lib*/libkvrt.so*)
list(SORT installed_libs)
list(GET installed_libs 0 first)
get_filename_component(libdir_rel ${first} DIRECTORY)
set(expected ${libdir_rel}/libkvrt.so ${libdir_rel}/${soname} ${libdir_rel}/libkvrt.so.${VERSION})
list(REMOVE_DUPLICATES expected)
list(SORT expected)
if(NOT installed_libs STREQUAL expected)
  message(FATAL_ERROR "installed ${installed_libs}, expected ${expected}")
endif()
foreach(link libkvrt.so ${soname})
  if(NOT IS_SYMLINK ${prefix}/${libdir_rel}/${link})
    message(FATAL_ERROR "${libdir_rel}/${link} is not a symbolic link")
  endif()
endforeach()
message(STATUS "installed ${installed_libs}")

# The installed headers stand alone: every document they name is installed
# with them, in share/doc/kvrt.
file(GLOB headers ${prefix}/include/kvrt/*.h)
set(named)
foreach(h ${headers})
  file(STRINGS ${h} lines REGEX "[A-Za-z0-9_-]+\\.md")
  foreach(line ${lines})
    string(REGEX MATCHALL "[A-Za-z0-9_-]+\\.md" docs "${line}")
    list(APPEND named ${docs})
  endforeach()
endforeach()
list(REMOVE_DUPLICATES named)
if(NOT named)
  message(FATAL_ERROR "the installed headers name no document; the check would pass for nothing")
endif()
foreach(doc ${named})
  if(NOT EXISTS ${prefix}/share/doc/kvrt/${doc})
    message(FATAL_ERROR "a public header names ${doc}, which is not installed in share/doc/kvrt")
  endif()
endforeach()
message(STATUS "installed the documents the headers name: ${named}")

# kvrt-config-version.cmake, asked the way find_package asks it.
file(GLOB_RECURSE version_file ${prefix}/*/kvrt-config-version.cmake)
function(expect_compatible requested want)
  string(REPLACE "." ";" parts ${requested})
  list(GET parts 0 PACKAGE_FIND_VERSION_MAJOR)
  list(GET parts 1 PACKAGE_FIND_VERSION_MINOR)
  list(GET parts 2 PACKAGE_FIND_VERSION_PATCH)
  set(PACKAGE_FIND_VERSION ${requested})
  set(PACKAGE_FIND_VERSION_COUNT 3)
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
  include(${version_file})
  if((want AND NOT PACKAGE_VERSION_COMPATIBLE) OR (NOT want AND PACKAGE_VERSION_COMPATIBLE))
    message(FATAL_ERROR "kvrt ${VERSION}'s package answers compatible=${PACKAGE_VERSION_COMPATIBLE} "
                        "to a request for ${requested}; the SONAME policy says ${want}")
  endif()
endfunction()
math(EXPR next_minor "${minor} + 1")
math(EXPR next_major "${major} + 1")
expect_compatible(${major}.${minor}.0 TRUE)
expect_compatible(${major}.${next_minor}.0 FALSE)
expect_compatible(${next_major}.0.0 FALSE)
if(major EQUAL 0 AND minor GREATER 0)
  math(EXPR prev_minor "${minor} - 1")
  expect_compatible(0.${prev_minor}.0 FALSE)  # another ABI before 1.0
elseif(major GREATER 0 AND minor GREATER 0)
  expect_compatible(${major}.0.0 TRUE)        # minor releases only add
endif()
if(major GREATER 0)
  math(EXPR prev_major "${major} - 1")
  expect_compatible(${prev_major}.0.0 FALSE)
endif()
message(STATUS "kvrt-config-version.cmake follows the SONAME policy")

# CMake package.
run(${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${WORK_DIR}/cmake-consumer -G ${GENERATOR}
    -DCMAKE_PREFIX_PATH=${prefix} -DKVRT_REQUIRED_VERSION=${major}.${minor})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/cmake-consumer)
run(${WORK_DIR}/cmake-consumer/consumer)
message(STATUS "find_package consumer: ${run_output}")
run(readelf -d ${WORK_DIR}/cmake-consumer/consumer)
string(REPLACE "." "\\." soname_re "${soname}")
if(NOT run_output MATCHES "Shared library: \\[${soname_re}\\]")
  message(FATAL_ERROR "the consumer does not record ${soname} as NEEDED:\n${run_output}")
endif()

# pkg-config.
file(GLOB pc_dirs ${prefix}/lib*/pkgconfig ${prefix}/lib/*/pkgconfig)
string(REPLACE ";" ":" pc_path "${pc_dirs}")
set(ENV{PKG_CONFIG_PATH} "${pc_path}")
run(pkg-config --modversion kvrt)
string(STRIP "${run_output}" pc_version)
if(NOT pc_version STREQUAL VERSION)
  message(FATAL_ERROR "kvrt.pc says version ${pc_version}, not ${VERSION}")
endif()
run(pkg-config --cflags --libs kvrt)
string(STRIP "${run_output}" flags)
separate_arguments(flags UNIX_COMMAND "${flags}")
run(${CC} -std=c99 -Wall -Wextra -Werror ${CONSUMER_DIR}/consumer.c ${flags} -o ${WORK_DIR}/pc-consumer)
string(REGEX MATCH "-L[^ ;]+" libflag "${flags}")
string(SUBSTRING "${libflag}" 2 -1 libdir)
set(ENV{LD_LIBRARY_PATH} "${libdir}")
run(${WORK_DIR}/pc-consumer)
message(STATUS "pkg-config consumer: ${run_output}")
