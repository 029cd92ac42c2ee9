// What the non-finite sampling tests share (nonfinite_ref_test.cc on the CPU,
// nonfinite_cuda_test.cu against it on the GPU): the special values and the filter sets every
// row is drawn under -- greedy, plain temperature, and each filter alone and together.
#pragma once

#include <limits>

namespace mlaserve::kernels::nonfinite_testing {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct Filters {
  float temperature;
  int top_k;
  float top_p, min_p;
};

constexpr Filters kFilters[] = {{0.0f, 0, 1.0f, 0.0f},  {1.0f, 0, 1.0f, 0.0f}, {0.6f, 0, 1.0f, 0.0f},
                                {1.7f, 0, 0.9f, 0.0f},  {1.0f, 1, 1.0f, 0.0f}, {1.0f, 2, 1.0f, 0.0f},
                                {1.0f, 50, 0.5f, 0.0f}, {1.0f, 0, 1.0f, 0.5f}, {0.8f, 3, 0.95f, 0.1f}};
constexpr int kNumFilters = sizeof(kFilters) / sizeof(kFilters[0]);

}  // namespace mlaserve::kernels::nonfinite_testing
