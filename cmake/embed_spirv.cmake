# Turns a SPIR-V binary into a C++ source with its words:
#   cmake -DNAME=<symbol> -DINPUT=<file.spv> -DOUTPUT=<file.cpp> -P embed_spirv.cmake
file(READ "${INPUT}" hex HEX)
string(LENGTH "${hex}" n_hex)
math(EXPR rem "${n_hex} % 8")
if(n_hex EQUAL 0 OR NOT rem EQUAL 0)
  message(FATAL_ERROR "${INPUT}: not a whole number of 32-bit words")
endif()
math(EXPR n_words "${n_hex} / 8")
# SPIR-V is little-endian on disk: bytes b0 b1 b2 b3 form the word 0xb3b2b1b0.
string(REGEX REPLACE "([0-9a-f][0-9a-f])([0-9a-f][0-9a-f])([0-9a-f][0-9a-f])([0-9a-f][0-9a-f])"
       "0x\\4\\3\\2\\1u," words "${hex}")
string(REGEX REPLACE "((0x[0-9a-f]+u,){8})" "\\1\n    " words "${words}")
file(WRITE "${OUTPUT}.tmp" "// Generated from ${NAME}.spv by cmake/embed_spirv.cmake. Do not edit.
#include <cstddef>
#include <cstdint>

namespace kvrt::spirv {
extern const uint32_t ${NAME}_words[];
extern const size_t ${NAME}_count;
const uint32_t ${NAME}_words[] = {
    ${words}
};
const size_t ${NAME}_count = ${n_words};
}  // namespace kvrt::spirv
")
file(RENAME "${OUTPUT}.tmp" "${OUTPUT}")
