// kSm90 variant 4: ping-pong 128 x 128 x 64 tiles (each consumer warp group owns a tile).
#include "kernels/moe/moe_gemm_sm90.cuh"

namespace mlaserve::kernels::moe_cuda {

MLASERVE_MOE_SM90_VARIANT(4, Sm90Pingpong128x128)

}  // namespace mlaserve::kernels::moe_cuda
