// kSm90 variant 3 with SiLU * up in the gate_up epilogue: ping-pong 64 x 256 x 64 tiles.
#include "kernels/moe/moe_gemm_sm90_silu.cuh"

namespace mlaserve::kernels::moe_cuda {

MLASERVE_MOE_SM90_SILU_VARIANT(3, Sm90Pingpong64x256)

}  // namespace mlaserve::kernels::moe_cuda
