// kSm90 tile configuration 7 with the direct-store epilogues (moe_gemm_sm90_direct.cuh):
// SiLU * up fused into the gate_up product, and the plain product stored from registers.
// ping-pong 64 x 128 x 64 tiles (variant 13).
#include "kernels/moe/moe_gemm_sm90_direct.cuh"

namespace mlaserve::kernels::moe_cuda {

MLASERVE_MOE_SM90_DIRECT_VARIANTS(7, Sm90Pingpong64x128)

}  // namespace mlaserve::kernels::moe_cuda
