// Which GPU the calling thread's current CUDA device is, for dispatchers that take a Hopper
// kernel where one applies (latent attention, mha_prefill). They ask on every launch, so the
// answer is looked up once per device and remembered. CUDA translation units only.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <atomic>
#include <cstdint>

namespace mlaserve::kernels::cuda {

// Whether the current device is compute capability 9.0 (H100 / H200).
inline bool CurrentDeviceIsSm90() {
  static std::array<std::atomic<int8_t>, 64> known{};  // 0 = not asked yet, 1 = no, 2 = yes
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  const bool cacheable = device >= 0 && device < static_cast<int>(known.size());
  if (cacheable) {
    if (const int8_t k = known[device].load(std::memory_order_relaxed); k != 0) return k == 2;
  }
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  const bool sm90 = major == 9 && minor == 0;
  if (cacheable) known[device].store(sm90 ? 2 : 1, std::memory_order_relaxed);
  return sm90;
}

}  // namespace mlaserve::kernels::cuda
