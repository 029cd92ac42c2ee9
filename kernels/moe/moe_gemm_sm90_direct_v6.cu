// kSm90 tile configuration 6 with the direct-store epilogues (moe_gemm_sm90_direct.cuh):
// SiLU * up fused into the gate_up product, and the plain product stored from registers.
// ping-pong 128 x 128 x 64 tiles, clusters of 2 along N (A tiles multicast).
#include "kernels/moe/moe_gemm_sm90_direct.cuh"

namespace mlaserve::kernels::moe_cuda {

MLASERVE_MOE_SM90_DIRECT_VARIANTS(6, Sm90Pingpong128x128ClusterN2)

}  // namespace mlaserve::kernels::moe_cuda
