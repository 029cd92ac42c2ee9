// One tile configuration of the mha_prefill CUDA kernel (head dims padded to qk 256 / v 256).
#include "kernels/mha_prefill/mha_prefill_kernel.cuh"

namespace mlaserve::kernels::mha_cuda {

template <>
absl::Status LaunchMhaPrefill<256, 256>(const MhaPrefillParams& p, cudaStream_t stream) {
  return LaunchMhaPrefillImpl<256, 256>(p, stream);
}

}  // namespace mlaserve::kernels::mha_cuda
