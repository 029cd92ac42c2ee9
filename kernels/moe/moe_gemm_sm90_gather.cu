// kSm90 variant 12: our grouped GEMM (moe_gemm_sm90_gather.cuh), plain and with SiLU * up.
#include "kernels/moe/moe_gemm_sm90_gather.cuh"

namespace mlaserve::kernels::moe_cuda {

absl::Status LaunchSm90GroupedGatherV12(const Sm90GroupedArgs& g, cudaStream_t s) {
  return gather_gemm::Launch<false>(g, s);
}
absl::Status LaunchSm90GroupedGatherSiluMulV12(const Sm90GroupedArgs& g, cudaStream_t s) {
  return gather_gemm::Launch<true>(g, s);
}

}  // namespace mlaserve::kernels::moe_cuda
