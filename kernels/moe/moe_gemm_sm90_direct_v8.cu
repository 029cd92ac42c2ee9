// kSm90 tile configuration 8 with the direct-store epilogues (moe_gemm_sm90_direct.cuh): SiLU * up
// fused into the gate_up product, and the plain product stored from registers. Cooperative
// 128 x 256 x 64 tiles whose empty 64-row halves issue no products (moe_gemm_sm90_half_skip.cuh;
// variant 14).
#include "kernels/moe/moe_gemm_sm90_direct.cuh"
#include "kernels/moe/moe_gemm_sm90_half_skip.cuh"

namespace mlaserve::kernels::moe_cuda {

MLASERVE_MOE_SM90_DIRECT_VARIANTS(8, Sm90Coop128x256SkipHalf)

}  // namespace mlaserve::kernels::moe_cuda
