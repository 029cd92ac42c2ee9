// Random bf16 fill kernel for mlaserve-tune.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "profiles/tune/fill_random.h"

namespace mlaserve::profiles::tune {
namespace {

constexpr int kThreads = 256;
constexpr int kBlocks = 1024;

__global__ void FillKernel(__nv_bfloat16* p, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint64_t x = (static_cast<uint64_t>(i) + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    const float u = static_cast<float>(x >> 40) / static_cast<float>(1ull << 24);
    p[i] = __float2bfloat16(2.0f * u - 1.0f);
  }
}

}  // namespace

int FillRandomBf16(void* p, int64_t n, uint64_t seed) {
  FillKernel<<<kBlocks, kThreads>>>(static_cast<__nv_bfloat16*>(p), n, seed);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace mlaserve::profiles::tune
