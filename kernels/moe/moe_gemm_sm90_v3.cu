// kSm90 variant 3: ping-pong 64 x 256 x 64 tiles (two consumer warpgroups alternate tiles, one's epilogue under the other's products).
#include "kernels/moe/moe_gemm_sm90.cuh"

namespace mlaserve::kernels::moe_cuda {

MLASERVE_MOE_SM90_VARIANT(3, Sm90Pingpong64x256)

}  // namespace mlaserve::kernels::moe_cuda
