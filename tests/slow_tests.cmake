# Read by ctest after the GPU tests' list (TEST_INCLUDE_FILES): gives the
# slowest tests a COST, their seconds under ASan+UBSan on two cores, so that
# `ctest -j` starts them first. A fresh build has no timings of an earlier
# run, and ctest otherwise starts tests in their order, so a slow test late in
# the list ran alone at the end (the random-tree test for the last four
# minutes of the sanitized run). Names match by substring.
set(kvrt_slow_tests
  "tree attention matches the reference for random trees" 290
  "attention is accurate for every K/V type" 175
  "paged layout: random schedules keep every sequence" 150
  "static-scale K/V meets SPEC 8" 135
  "attention options: ALiBi" 105
  "head-major queries and outputs give the packed results" 95
  "wide loads match the reference" 95
  "stored bytes round-trip between caches" 65
  "attention after a context shift equals attention over the cache rebuilt" 65
  "decode: static" 50
  "decode: shift" 45
  "static layout: attention equals the cell layout" 45
  "paged layout: a token tree" 45
  "prefill chunks are causal" 40
  "decode: reevaluate" 40
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
