// SiluMulFast (moe_silu_exact.cuh, the fused gate_up epilogues' SiLU) against SiluMul
// (moe_silu.cuh, the SiLU pass and the stream kernels) for every bf16 gate value: the GEMM
// epilogues round gate and up to bf16 before the SiLU, so this covers every input the fast
// form sees, and the fused and unfused paths can only agree bit for bit if it passes.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/moe/moe_silu_exact.cuh"
#include "kernels/testing/cuda_testing.h"

namespace mlaserve::kernels {
namespace {

constexpr int kGateValues = 1 << 16;  // every bf16 bit pattern

struct SiluCounts {
  uint32_t covered;     // gates SiluFastCovers accepts
  uint32_t mismatched;  // of those, values whose f32 bits differ from SiluMul's
  uint32_t first_bad;   // gate bits | up index << 16 of one mismatch, or ~0u
};

__global__ void CompareSiluKernel(const float* ups, int num_ups, SiluCounts* counts) {
  const int total = kGateValues * num_ups;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    const uint16_t bits = static_cast<uint16_t>(i % kGateValues);
    const float gate = __bfloat162float(__ushort_as_bfloat16(bits));
    const float up = ups[i / kGateValues];
    if (!moe_cuda::SiluFastCovers(gate, gate)) continue;
    atomicAdd(&counts->covered, 1u);
    const float exact = moe_cuda::SiluMul(gate, up);
    const float fast = moe_cuda::SiluMulFast(gate, up);
    if (__float_as_uint(exact) != __float_as_uint(fast)) {
      atomicAdd(&counts->mismatched, 1u);
      atomicMin(&counts->first_bad, static_cast<uint32_t>(i));
    }
  }
}

TEST(MoeSiluFastTest, SameBitsAsSiluMulForEveryBf16Gate) {
  // up values: 1, -1, a small and a large magnitude, and ordinary ones (bf16, as in the GEMM).
  std::vector<float> ups = {1.0f, -1.0f, 0.7578125f, -3.25f, 0x1p-100f, 0x1p100f, 1.5e-3f, -42.0f};
  auto d_ups = testing::ToDevice(ups);
  const SiluCounts init{0, 0, ~0u};
  auto d_counts = testing::ToDevice(std::vector<SiluCounts>{init});
  CompareSiluKernel<<<256, 256>>>(d_ups.as<float>(), static_cast<int>(ups.size()),
                                  d_counts.as<SiluCounts>());
  MLASERVE_CUDA_ASSERT(cudaGetLastError());
  MLASERVE_CUDA_ASSERT(cudaDeviceSynchronize());
  const SiluCounts got = testing::ToHost<SiluCounts>(d_counts, 1)[0];

  // Covered: every finite bf16 >= -64 (either sign of zero included), for each up.
  uint32_t want_covered = 0;
  for (int b = 0; b < kGateValues; ++b) {
    const uint32_t f32 = static_cast<uint32_t>(b) << 16;
    float g;
    std::memcpy(&g, &f32, sizeof g);
    if (std::isfinite(g) && g >= moe_cuda::kSiluFastMinGate) ++want_covered;
  }
  EXPECT_EQ(got.covered, want_covered * ups.size());
  EXPECT_EQ(got.mismatched, 0u) << "first mismatch: gate bits 0x" << std::hex << (got.first_bad % kGateValues)
                                << std::dec << ", up " << (got.first_bad == ~0u ? 0.0f : ups[got.first_bad / kGateValues]);
}

}  // namespace
}  // namespace mlaserve::kernels
