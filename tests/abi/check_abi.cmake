# An ABI, pinned: libabigail's abidiff compares a freshly built binary with a
# committed baseline (abidw's XML of its exported functions and of every type
# they reach), and any change fails: a struct's layout, an enum's values, a
# function's parameters or return type, an added or removed function.
#
#   cmake -DLIB=<binary> -DBASELINE=<file.abi> -DSUPPRESSIONS=tests/abi/kvrt.abignore
#         [-DHEADERS_DIR=include/kvrt] -DSOURCE_DIR=<source tree> -DBINARY_DIR=<build tree>
#         -DABIDW=<abidw> -DABIDIFF=<abidiff> [-DUPDATE=ON] -P check_abi.cmake
#
# Two baselines use it (tests/abi/CMakeLists.txt): kvrt.abi for libkvrt
# itself, where HEADERS_DIR limits the baseline's types to those the public
# headers define, and kvrt_types.abi for every public struct and enum, reached
# through a probe library (see gen_abi_types.cmake).
#
# UPDATE=ON rewrites the baseline instead (`make abi-baseline`). A baseline
# holds no absolute path and no source location, so it does not depend on
# where the tree was cloned or built, nor on comment edits in the headers.
cmake_minimum_required(VERSION 3.20)

set(regen "If the change is intended, run `make abi-baseline` (it rebuilds, then rewrites "
          "tests/abi/kvrt.symbols, kvrt.abi and kvrt_types.abi) and commit them. An "
          "incompatible change (a struct, a removed function or enum value, a changed "
          "signature) needs a new SONAME: bump the minor version in "
          "include/kvrt/kvrt_version.h before 1.0, the major version after (items marked "
          "Experimental excepted).")
string(JOIN "" regen ${regen})

foreach(tool ABIDW ABIDIFF)
  if(NOT ${tool} OR NOT EXISTS "${${tool}}")
    message(FATAL_ERROR "${tool} not found: install libabigail's tools (Debian package "
                        "abigail-tools; tools/setup.sh does), then reconfigure.")
  endif()
endforeach()

# abidw and abidiff read the binary's DWARF.
execute_process(COMMAND readelf -S -W ${LIB} OUTPUT_VARIABLE sections RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT sections MATCHES "\\.debug_info")
  message(FATAL_ERROR "${LIB} has no debug info; the ABI check needs a build type with it "
                      "(RelWithDebInfo, the default, or Debug).")
endif()

# Options of both tools: only the exported interfaces; neither the corpus
# path nor the architecture (so a baseline also holds on other 64-bit Linux
# targets). With HEADERS_DIR, abidw keeps only the types the public headers
# define (and those reached through them). abidiff gets no headers directory:
# the baseline is filtered already, and with one abidiff would take every
# type of the baseline (which records no source locations) for a private
# type and filter out all of its changes.
set(scope --exported-interfaces-only --no-corpus-path --no-architecture --suppressions ${SUPPRESSIONS})
set(headers_for_abidw "")
if(HEADERS_DIR)
  set(headers_for_abidw --drop-private-types --headers-dir ${HEADERS_DIR})
endif()

if(UPDATE)
  set(tmp ${BASELINE}.tmp)
  execute_process(COMMAND ${ABIDW} ${scope} ${headers_for_abidw}
                          --no-show-locs --no-comp-dir-path --no-elf-needed
                          --out-file ${tmp} ${LIB}
    RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    file(REMOVE ${tmp})
    message(FATAL_ERROR "abidw failed (${rc}) on ${LIB}:\n${err}")
  endif()
  # Translation units are named by their absolute source paths: keep them
  # relative to the build tree (generated sources) or the source tree.
  file(READ ${tmp} xml)
  file(REMOVE ${tmp})
  string(REPLACE "'${BINARY_DIR}/" "'[build]/" xml "${xml}")
  string(REPLACE "'${SOURCE_DIR}/" "'" xml "${xml}")
  if(xml MATCHES "='/[^']*'")
    message(FATAL_ERROR "abidw's output still holds an absolute path (${CMAKE_MATCH_0}); "
                        "the baseline would depend on where it was built")
  endif()
  # The experimental functions (EXPERIMENTAL_SYMBOLS, one name per line) are
  # no part of the stable ABI: their symbols and declarations are taken out
  # of the baseline (abidw keeps suppressed functions when it writes; the
  # comparison below suppresses them through kvrt.abignore).
  if(EXPERIMENTAL_SYMBOLS)
    file(STRINGS ${EXPERIMENTAL_SYMBOLS} experimental)
    foreach(name ${experimental})
      string(REGEX REPLACE "\n[ ]*<elf-symbol name='${name}'[^\n]*/>" "" xml "${xml}")
      set(open_tag "<function-decl name='${name}' ")
      string(FIND "${xml}" "${open_tag}" at)
      if(NOT at EQUAL -1)
        string(SUBSTRING "${xml}" 0 ${at} before)
        string(SUBSTRING "${xml}" ${at} -1 rest)
        string(FIND "${rest}" "</function-decl>" end)
        string(LENGTH "</function-decl>" n_close)
        math(EXPR end "${end} + ${n_close}")
        string(SUBSTRING "${rest}" ${end} -1 after)
        string(REGEX REPLACE "\n[ ]*$" "" before "${before}")
        set(xml "${before}${after}")
      endif()
    endforeach()
  endif()
  file(WRITE ${BASELINE} "${xml}")
  message(STATUS "wrote ${BASELINE}")
  return()
endif()

if(NOT EXISTS ${BASELINE})
  message(FATAL_ERROR "no ABI baseline ${BASELINE}: run `make abi-baseline` and commit it.")
endif()
# --harmless also reports what abidiff calls harmless (an added enumerator, a
# renamed typedef), so a baseline follows every change of the public types.
execute_process(COMMAND ${ABIDIFF} ${scope} --harmless --leaf-changes-only
                        ${BASELINE} ${LIB}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
# abidiff reports a baseline it cannot parse on stderr, yet exits 0.
if(rc EQUAL 0 AND err STREQUAL "")
  message(STATUS "ABI of ${LIB} equals ${BASELINE}")
  return()
endif()
if(rc EQUAL 0)
  message(FATAL_ERROR "abidiff could not read ${BASELINE} or ${LIB}:\n${err}\n"
                      "Rewrite the baseline with `make abi-baseline`.")
endif()
# abidiff's exit status is a bit set: 1 tool error, 2 usage error, 4 ABI
# change, 8 incompatible ABI change.
math(EXPR tool_error "${rc} & 3")
if(NOT tool_error EQUAL 0)
  message(FATAL_ERROR "abidiff failed (${rc}):\n${out}\n${err}")
endif()
math(EXPR incompatible "${rc} & 8")
if(incompatible)
  set(kind "an INCOMPATIBLE change")
else()
  set(kind "a change")
endif()
message("abidiff ${BASELINE} ${LIB}:\n${out}${err}")
message(FATAL_ERROR "The ABI of ${LIB} differs from ${BASELINE}: ${kind} (abidiff exit ${rc}, "
                    "report above).\n${regen}")
