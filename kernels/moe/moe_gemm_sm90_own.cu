// kSm90 variants 12 (cooperative 128 x 256) and 14 (ping-pong 64 x 256): our grouped GEMM
// (moe_gemm_sm90_own.cuh), plain and with SiLU * up.
#include "kernels/moe/moe_gemm_sm90_own.cuh"

namespace mlaserve::kernels::moe_cuda {

absl::Status LaunchSm90GroupedOwnV12(const Sm90GroupedArgs& g, cudaStream_t s) {
  return own_gemm::Launch<false, false>(g, s);
}
absl::Status LaunchSm90GroupedOwnSiluMulV12(const Sm90GroupedArgs& g, cudaStream_t s) {
  return own_gemm::Launch<true, false>(g, s);
}
absl::Status LaunchSm90GroupedOwnV14(const Sm90GroupedArgs& g, cudaStream_t s) {
  return own_gemm::Launch<false, true>(g, s);
}
absl::Status LaunchSm90GroupedOwnSiluMulV14(const Sm90GroupedArgs& g, cudaStream_t s) {
  return own_gemm::Launch<true, true>(g, s);
}

}  // namespace mlaserve::kernels::moe_cuda
