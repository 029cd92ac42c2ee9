// kSm90 variant 5 with SiLU * up in the gate_up epilogue: cooperative 128 x 256 x 64 tiles, clusters of 2 along N (A tiles multicast).
#include "kernels/moe/moe_gemm_sm90_silu.cuh"

namespace mlaserve::kernels::moe_cuda {

MLASERVE_MOE_SM90_SILU_VARIANT(5, Sm90Coop128x256ClusterN2)

}  // namespace mlaserve::kernels::moe_cuda
