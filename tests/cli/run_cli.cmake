# Runs the kvrt program once and checks its exit status and output, for tests
# that need both (PASS_REGULAR_EXPRESSION alone ignores the exit status).
#
#   cmake -DEXE=<kvrt> -DARGS=<arguments separated by |> -DRC=<expected status>
#         [-DEXPECT=<regex>]... -P run_cli.cmake
#
# EXPECT is matched against stdout and stderr together; several regexes can
# be given separated by |&| and must all match.
if(NOT DEFINED EXE OR NOT DEFINED RC)
  message(FATAL_ERROR "run_cli.cmake needs -DEXE and -DRC")
endif()
string(REPLACE "|" ";" args "${ARGS}")
execute_process(COMMAND "${EXE}" ${args} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(REPLACE "|" " " shown "${ARGS}")
set(all "${out}${err}")
if(NOT "${status}" STREQUAL "${RC}")
  message(FATAL_ERROR "kvrt ${shown}\nexited with ${status}, expected ${RC}; output:\n${all}")
endif()
if(DEFINED EXPECT)
  string(REPLACE "|&|" ";" patterns "${EXPECT}")
  foreach(pattern IN LISTS patterns)
    if(NOT all MATCHES "${pattern}")
      message(FATAL_ERROR "kvrt ${shown}\noutput does not match '${pattern}':\n${all}")
    endif()
  endforeach()
endif()
message(STATUS "kvrt ${shown}: exit ${status}, output as expected")
