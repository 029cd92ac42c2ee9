// kSm90 variant 2: cooperative 128 x 256 x 64 tiles, clusters of 2 along M (B tiles multicast).
#include "kernels/moe/moe_gemm_sm90.cuh"

namespace mlaserve::kernels::moe_cuda {

MLASERVE_MOE_SM90_VARIANT(2, Sm90Coop128x256Cluster2)

}  // namespace mlaserve::kernels::moe_cuda
