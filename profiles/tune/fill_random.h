// Device-side random fill for the tuner's inputs (uniform [-1, 1) bf16 from a counter hash),
// so large buffers need no host copy. C++17: included by the .cu file.
#pragma once

#include <cstdint>

namespace mlaserve::profiles::tune {

// Fills n bf16 values at p on the default stream; returns the launch's cudaError_t as int.
int FillRandomBf16(void* p, int64_t n, uint64_t seed);

}  // namespace mlaserve::profiles::tune
