// Fault injection for tests of all-or-nothing behaviour. Every step of an
// operation that can fail for reasons outside the caller's control (device
// allocation, command recording, submission, waiting) passes a fault point.
// Tests arm the N-th point to fail and check that the operation left every
// object exactly as it was; sweeping N over all points covers every step.
// Disarmed (the default), a fault point costs one relaxed atomic load.
#pragma once

#include <cstdint>

#include "core/result.hpp"

namespace kvrt::fault {

// Makes the `n`-th fault point reached from now on fail (n >= 1); 0 disarms.
void arm(uint64_t n);

// Makes the first fault point named `site` (a string literal, compared by
// content) reached from now on fail; other points pass. arm(0) disarms.
void arm_site(const char* site);

// Fault points passed since the last arm().
uint64_t points_passed();

// A fault point: returns `code` (with a detail message naming `site`) when it
// is the armed one, KVRT_SUCCESS otherwise.
Result point(const char* site, Result code);

// A point that only arm_site() makes fail and that arm(n) does not count:
// for failures that end a context (device loss) or that counted sweeps
// should not see.
Result named_point(const char* site, Result code);

}  // namespace kvrt::fault

// Returns the injected error from the enclosing function at an armed point.
#define KVRT_FAULT_POINT(site, code) KVRT_TRY(::kvrt::fault::point(site, code))
