// kSm90 variant 12: our grouped GEMM (moe_gemm_sm90_own.cuh), plain and with SiLU * up.
#include "kernels/moe/moe_gemm_sm90_own.cuh"

namespace mlaserve::kernels::moe_cuda {

absl::Status LaunchSm90GroupedOwnV12(const Sm90GroupedArgs& g, cudaStream_t s) {
  return own_gemm::Launch<false>(g, s);
}
absl::Status LaunchSm90GroupedOwnSiluMulV12(const Sm90GroupedArgs& g, cudaStream_t s) {
  return own_gemm::Launch<true>(g, s);
}

}  // namespace mlaserve::kernels::moe_cuda
