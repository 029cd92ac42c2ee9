// kSm90 variant 1 with SiLU * up in the gate_up epilogue: cooperative 128 x 256 x 64 tiles.
#include "kernels/moe/moe_gemm_sm90_silu.cuh"

namespace mlaserve::kernels::moe_cuda {

MLASERVE_MOE_SM90_SILU_VARIANT(1, Sm90Coop128x256)

}  // namespace mlaserve::kernels::moe_cuda
