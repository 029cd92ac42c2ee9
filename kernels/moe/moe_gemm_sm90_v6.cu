// kSm90 variant 6: ping-pong 128 x 128 x 64 tiles, clusters of 2 along N (A tiles multicast).
#include "kernels/moe/moe_gemm_sm90.cuh"

namespace mlaserve::kernels::moe_cuda {

MLASERVE_MOE_SM90_VARIANT(6, Sm90Pingpong128x128ClusterN2)

}  // namespace mlaserve::kernels::moe_cuda
