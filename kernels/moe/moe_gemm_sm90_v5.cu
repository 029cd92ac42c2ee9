// kSm90 variant 5: cooperative 128 x 256 x 64 tiles, clusters of 2 along N (A tiles multicast).
#include "kernels/moe/moe_gemm_sm90.cuh"

namespace mlaserve::kernels::moe_cuda {

MLASERVE_MOE_SM90_VARIANT(5, Sm90Coop128x256ClusterN2)

}  // namespace mlaserve::kernels::moe_cuda
