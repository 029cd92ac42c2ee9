// One tile configuration of the mha_prefill CUDA kernel (head dims padded to qk 192 / v 128).
#include "kernels/mha_prefill/mha_prefill_kernel.cuh"

namespace mlaserve::kernels::mha_cuda {

template <>
absl::Status LaunchMhaPrefill<192, 128>(const MhaPrefillParams& p, cudaStream_t stream) {
  return LaunchMhaPrefillImpl<192, 128>(p, stream);
}

}  // namespace mlaserve::kernels::mha_cuda
