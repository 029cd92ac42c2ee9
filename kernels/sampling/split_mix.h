// The counter-based generator behind SamplingUniform (api.h), one definition for the CPU backend
// (sampling.cc) and both CUDA paths (sampling.cu, sampling_cluster.cu), which must agree bit for
// bit. A constexpr function: device code calls it as one (nvcc --expt-relaxed-constexpr, as the
// CUDA build compiles).
#pragma once

#include <cstdint>

namespace mlaserve::kernels {

// splitmix64 of seed ^ (0x9E3779B97F4A7C15 * step) (Steele et al. / java.util.SplittableRandom);
// SamplingUniform takes its top 24 bits.
constexpr uint64_t SamplingSplitMix(uint64_t seed, uint64_t step) {
  constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
  uint64_t z = (seed ^ (kGolden * step)) + kGolden;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace mlaserve::kernels
