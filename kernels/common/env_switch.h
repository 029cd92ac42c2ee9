// The MLASERVE_* environment switches that turn one optimisation off for timing comparisons
// (MLASERVE_PDL=0, MLASERVE_MOE_FOLD=0, ...): off exactly when the variable is "0"; and the
// integer settings that move a cut or a count for the same kind of comparison.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace mlaserve::kernels {

// Whether the switch `name` is set to "0". Call sites that never change it within a process
// keep the answer in a function-local static.
inline bool EnvSwitchedOff(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && std::strcmp(v, "0") == 0;
}

// The integer setting `name` where it is set and reads as one in [lo, hi] (leading digits, as
// atoi reads them), else `fallback`.
inline int EnvIntInRange(const char* name, int lo, int hi, int fallback) {
  const char* v = std::getenv(name);
  int n = 0;
  return v != nullptr && std::sscanf(v, "%d", &n) == 1 && n >= lo && n <= hi ? n : fallback;
}

}  // namespace mlaserve::kernels
