# The exported symbols, pinned: the shared library's dynamic symbol table must
# equal tests/abi/kvrt.symbols (the stable ABI) and kvrt_experimental.symbols
# (the experimental parts) together, one name per line, sorted; and each list
# must equal the KVRT_API declarations of the public headers of its kind, so
# that header, library and the committed lists cannot drift apart.
# Experimental declarations are those of kvrt_memory.h and those between
# `#ifdef KVRT_EXPERIMENTAL` and `#endif /* KVRT_EXPERIMENTAL */`.
#
#   cmake -DLIB=<libkvrt.so> -DHEADERS_DIR=include/kvrt -DSYMBOLS=tests/abi/kvrt.symbols
#         -DEXPERIMENTAL_SYMBOLS=tests/abi/kvrt_experimental.symbols [-DUPDATE=ON] -P check_symbols.cmake
#
# With UPDATE=ON it first rewrites both lists from the headers' declarations
# (what `make abi-baseline` runs), then checks as usual.
cmake_minimum_required(VERSION 3.20)

set(regen "If the change is intended, run `make abi-baseline` (it rebuilds, then rewrites "
          "tests/abi/kvrt.symbols, kvrt_experimental.symbols, kvrt.abi and kvrt_types.abi) and "
          "commit them. Removing or changing a function needs a new SONAME: bump the minor version in "
          "include/kvrt/kvrt_version.h before 1.0, the major version after (items marked "
          "Experimental excepted).")
string(JOIN "" regen ${regen})

# The names declared KVRT_API in `text`, comments and preprocessor lines
# removed first (the header defines KVRT_API itself).
function(declared_names text out)
  string(REGEX REPLACE "/\\*([^*]|\\*+[^*/])*\\*+/" " " text "${text}")
  string(REGEX REPLACE "//[^\n]*" "" text "${text}")
  string(REGEX REPLACE "\n[ \t]*#[^\n]*" "\n" text "\n${text}")
  string(REGEX MATCHALL "KVRT_API[^;{}]*;" decls "${text}")
  set(names "")
  foreach(d ${decls})
    if(d MATCHES "\\(")
      string(REGEX MATCH "[A-Za-z_][A-Za-z0-9_]*[ \t\n]*\\(" name "${d}")
      string(REGEX REPLACE "[ \t\n]*\\($" "" name "${name}")
    else()
      string(REGEX MATCH "[A-Za-z_][A-Za-z0-9_]*[ \t\n\\[\\]0-9]*;$" name "${d}")
      string(REGEX REPLACE "[^A-Za-z0-9_].*$" "" name "${name}")
    endif()
    list(APPEND names ${name})
  endforeach()
  set(${out} ${names} PARENT_SCOPE)
endfunction()

set(open_mark "#ifdef KVRT_EXPERIMENTAL")
set(close_mark "#endif /* KVRT_EXPERIMENTAL */")
file(GLOB headers ${HEADERS_DIR}/*.h)
set(declared "")
set(declared_experimental "")
foreach(h ${headers})
  file(READ ${h} text)
  get_filename_component(name ${h} NAME)
  set(experimental_text "")
  if(name STREQUAL "kvrt_memory.h")
    set(experimental_text "${text}")
    set(text "")
  endif()
  # The header's experimental blocks, taken out of its stable text.
  while(TRUE)
    string(FIND "${text}" "${open_mark}" at)
    if(at EQUAL -1)
      break()
    endif()
    string(SUBSTRING "${text}" ${at} -1 rest)
    string(FIND "${rest}" "${close_mark}" end)
    if(end EQUAL -1)
      message(FATAL_ERROR "${name}: `${open_mark}` without a closing `${close_mark}`")
    endif()
    string(SUBSTRING "${rest}" 0 ${end} block)
    string(APPEND experimental_text "${block}\n")
    string(SUBSTRING "${text}" 0 ${at} before)
    string(LENGTH "${close_mark}" n_close)
    math(EXPR after_at "${end} + ${n_close}")
    string(SUBSTRING "${rest}" ${after_at} -1 after)
    set(text "${before}${after}")
  endwhile()
  declared_names("${text}" names)
  list(APPEND declared ${names})
  declared_names("${experimental_text}" names)
  list(APPEND declared_experimental ${names})
endforeach()
set(all_declared ${declared} ${declared_experimental})
list(SORT declared)
list(SORT declared_experimental)
list(SORT all_declared)
list(LENGTH declared n_declared)
list(LENGTH declared_experimental n_experimental)
if(n_declared LESS 10 OR n_experimental LESS 1)
  message(FATAL_ERROR "found only ${n_declared} stable and ${n_experimental} experimental KVRT_API declarations "
                      "under ${HEADERS_DIR}")
endif()
set(dups ${all_declared})
list(REMOVE_DUPLICATES dups)
if(NOT dups STREQUAL all_declared)
  foreach(n ${dups})
    list(REMOVE_ITEM all_declared ${n})
  endforeach()
  message(FATAL_ERROR "declared KVRT_API more than once: ${all_declared}")
endif()
set(all_declared ${dups})

if(UPDATE)
  list(JOIN declared "\n" out)
  file(WRITE ${SYMBOLS} "${out}\n")
  list(JOIN declared_experimental "\n" out)
  file(WRITE ${EXPERIMENTAL_SYMBOLS} "${out}\n")
  message(STATUS "wrote ${n_declared} names to ${SYMBOLS} and ${n_experimental} to ${EXPERIMENTAL_SYMBOLS}")
endif()

# The committed lists.
set(pinned "")
foreach(list_file ${SYMBOLS} ${EXPERIMENTAL_SYMBOLS})
  file(STRINGS ${list_file} names)
  set(sorted ${names})
  list(SORT sorted)
  list(REMOVE_DUPLICATES sorted)
  if(NOT sorted STREQUAL names)
    message(FATAL_ERROR "${list_file} must be sorted (LC_ALL=C), one name per line, no duplicates. ${regen}")
  endif()
  list(APPEND pinned ${names})
endforeach()
file(STRINGS ${SYMBOLS} pinned_stable)
file(STRINGS ${EXPERIMENTAL_SYMBOLS} pinned_experimental)
if(NOT pinned_stable STREQUAL declared OR NOT pinned_experimental STREQUAL declared_experimental)
  message(FATAL_ERROR "${SYMBOLS} must hold exactly the stable KVRT_API declarations and "
                      "${EXPERIMENTAL_SYMBOLS} the experimental ones. ${regen}")
endif()
list(SORT pinned)
set(declared ${all_declared})

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
message(STATUS "${n} exported symbols: exactly ${SYMBOLS} (${n_declared} stable) and ${EXPERIMENTAL_SYMBOLS} "
               "(${n_experimental} experimental), as the KVRT_API declarations of ${HEADERS_DIR} say")
