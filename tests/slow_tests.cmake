# Read by ctest after the GPU tests' list (TEST_INCLUDE_FILES): gives the
# slowest tests a COST, so that `ctest -j` starts them first. A fresh build
# has no timings of an earlier run, and ctest otherwise starts tests in their
# order, so a slow test late in the list runs alone at the end. The costs are
# seconds on two cores: of the main run with an empty Mesa shader cache
# (lavapipe compiles every pipeline; the accuracy sweeps compile the most),
# or under ASan+UBSan with the cache the main run filled (make test runs it
# first). Names match by substring.
set(kvrt_slow_tests
  "attention is accurate for every K/V type" 175
  "static-scale K/V meets SPEC 8" 135
  "wide loads match the reference" 95
  "paged layout: random schedules keep every sequence" 50
  "each tile reads its queries' runs of cells" 35
  "attention covers GQA ratios" 25
  "tiled attention kernel matches the reference" 17
  "read their own cells from lists" 13
  "decode: " 11
  "a forced kernel variant is the one attention records" 11
  "paged window group: random schedules" 11
)
foreach(kvrt_test_name IN LISTS kvrt_gpu_tests_TESTS)
  set(kvrt_rest ${kvrt_slow_tests})
  while(kvrt_rest)
    list(POP_FRONT kvrt_rest kvrt_pattern kvrt_cost)
    string(FIND "${kvrt_test_name}" "${kvrt_pattern}" kvrt_at)
    if(NOT kvrt_at EQUAL -1)
      set_tests_properties("${kvrt_test_name}" PROPERTIES COST ${kvrt_cost})
      break()
    endif()
  endwhile()
endforeach()
