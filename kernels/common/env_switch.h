// The MLASERVE_* environment switches that turn one optimisation off for timing comparisons
// (MLASERVE_PDL=0, MLASERVE_MOE_FOLD=0, ...): off exactly when the variable is "0".
#pragma once

#include <cstdlib>
#include <cstring>

namespace mlaserve::kernels {

// Whether the switch `name` is set to "0". Call sites that never change it within a process
// keep the answer in a function-local static.
inline bool EnvSwitchedOff(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && std::strcmp(v, "0") == 0;
}

}  // namespace mlaserve::kernels
