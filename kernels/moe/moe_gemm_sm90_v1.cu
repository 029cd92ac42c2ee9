// kSm90 variant 1: cooperative 128 x 256 x 64 tiles, no cluster.
#include "kernels/moe/moe_gemm_sm90.cuh"

namespace mlaserve::kernels::moe_cuda {

MLASERVE_MOE_SM90_VARIANT(1, Sm90Coop128x256)

}  // namespace mlaserve::kernels::moe_cuda
