// kSm90 variant 0: cooperative 128 x 128 x 64 tiles, no cluster; and the host helpers.
#include "kernels/moe/moe_gemm_sm90.cuh"

namespace mlaserve::kernels::moe_cuda {

bool Sm90Available() {
  return cuda::CurrentDeviceIsSm90();  // built for sm_90a: wgmma/TMA code runs on Hopper only
}

MLASERVE_MOE_SM90_VARIANT(0, Sm90Coop128x128)

}  // namespace mlaserve::kernels::moe_cuda
