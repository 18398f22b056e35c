# The exported symbols, pinned: the shared library's dynamic symbol table must
# equal tests/abi/kvrt.symbols (one name per line, sorted), and both must
# equal the KVRT_API declarations of the public headers, so that header,
# library and the committed list cannot drift apart.
#
#   cmake -DLIB=<libkvrt.so> -DHEADERS_DIR=include/kvrt -DSYMBOLS=tests/abi/kvrt.symbols
#         [-DUPDATE=ON] -P check_symbols.cmake
#
# With UPDATE=ON it first rewrites SYMBOLS from the headers' declarations (what
# `make abi-baseline` runs), then checks as usual.
cmake_minimum_required(VERSION 3.20)

set(regen "If the change is intended, run `make abi-baseline` (it rebuilds, then rewrites "
          "tests/abi/kvrt.symbols, kvrt.abi and kvrt_types.abi) and commit them. Removing "
          "or changing a function needs a new SONAME: bump the minor version in "
          "include/kvrt/kvrt_version.h before 1.0, the major version after (items marked "
          "Experimental excepted).")
string(JOIN "" regen ${regen})

# KVRT_API declarations of every public header, comments and preprocessor
# lines removed first (the header defines KVRT_API itself).
file(GLOB headers ${HEADERS_DIR}/*.h)
set(declared "")
foreach(h ${headers})
  file(READ ${h} text)
  string(REGEX REPLACE "/\\*([^*]|\\*+[^*/])*\\*+/" " " text "${text}")
  string(REGEX REPLACE "//[^\n]*" "" text "${text}")
  string(REGEX REPLACE "\n[ \t]*#[^\n]*" "\n" text "\n${text}")
  string(REGEX MATCHALL "KVRT_API[^;{}]*;" decls "${text}")
  foreach(d ${decls})
    if(d MATCHES "\\(")
      string(REGEX MATCH "[A-Za-z_][A-Za-z0-9_]*[ \t\n]*\\(" name "${d}")
      string(REGEX REPLACE "[ \t\n]*\\($" "" name "${name}")
    else()
      string(REGEX MATCH "[A-Za-z_][A-Za-z0-9_]*[ \t\n\\[\\]0-9]*;$" name "${d}")
      string(REGEX REPLACE "[^A-Za-z0-9_].*$" "" name "${name}")
    endif()
    list(APPEND declared ${name})
  endforeach()
endforeach()
list(SORT declared)
list(LENGTH declared n_declared)
if(n_declared LESS 10)
  message(FATAL_ERROR "found only ${n_declared} KVRT_API declarations under ${HEADERS_DIR}")
endif()
set(dups ${declared})
list(REMOVE_DUPLICATES dups)
if(NOT dups STREQUAL declared)
  foreach(n ${dups})
    list(REMOVE_ITEM declared ${n})
  endforeach()
  message(FATAL_ERROR "declared KVRT_API more than once: ${declared}")
endif()

if(UPDATE)
  list(JOIN declared "\n" out)
  file(WRITE ${SYMBOLS} "${out}\n")
  message(STATUS "wrote ${n_declared} names to ${SYMBOLS}")
endif()

# The committed list.
file(STRINGS ${SYMBOLS} pinned)
set(sorted ${pinned})
list(SORT sorted)
list(REMOVE_DUPLICATES sorted)
if(NOT sorted STREQUAL pinned)
  message(FATAL_ERROR "${SYMBOLS} must be sorted (LC_ALL=C), one name per line, no duplicates. ${regen}")
endif()

# What the library exports.
execute_process(COMMAND nm -D --defined-only --format=posix ${LIB}
  OUTPUT_VARIABLE nm_out RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "nm failed on ${LIB}")
endif()
string(REGEX MATCHALL "(^|\n)[^ \n]+" exported "${nm_out}")
string(REGEX REPLACE "\n" "" exported "${exported}")
list(SORT exported)

function(diff_lists out a b)   # the items of a that are not in b
  set(d ${a})
  if(b)
    list(REMOVE_ITEM d ${b})
  endif()
  set(${out} ${d} PARENT_SCOPE)
endfunction()

set(problems "")
diff_lists(added "${exported}" "${pinned}")
diff_lists(removed "${pinned}" "${exported}")
diff_lists(undeclared "${exported}" "${declared}")
diff_lists(unexported "${declared}" "${exported}")
if(added)
  list(JOIN added "\n    + " s)
  string(APPEND problems "\nexported by the library but not in ${SYMBOLS} (added):\n    + ${s}\n")
endif()
if(removed)
  list(JOIN removed "\n    - " s)
  string(APPEND problems "\nin ${SYMBOLS} but not exported by the library (removed):\n    - ${s}\n")
endif()
if(unexported)
  list(JOIN unexported "\n    " s)
  string(APPEND problems "\ndeclared KVRT_API in ${HEADERS_DIR} but not exported (no definition, or "
                         "defined without the header's declaration in scope):\n    ${s}\n")
endif()
if(undeclared)
  list(JOIN undeclared "\n    " s)
  string(APPEND problems "\nexported but declared KVRT_API in no public header (src/kvrt.map "
                         "exports every kvrt_* name: keep internal functions out of that namespace "
                         "or static):\n    ${s}\n")
endif()
if(problems)
  message("${problems}")
  message(FATAL_ERROR "The exported symbols of ${LIB} changed (list above).\n${regen}")
endif()
list(LENGTH exported n)
message(STATUS "${n} exported symbols: exactly ${SYMBOLS} and the KVRT_API declarations of ${HEADERS_DIR}")
