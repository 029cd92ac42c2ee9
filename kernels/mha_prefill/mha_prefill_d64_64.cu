// One tile configuration of the mha_prefill CUDA kernel (head dims padded to qk 64 / v 64).
#include "kernels/mha_prefill/mha_prefill_kernel.cuh"

namespace mlaserve::kernels::mha_cuda {

template <>
absl::Status LaunchMhaPrefill<64, 64>(const MhaPrefillParams& p, cudaStream_t stream) {
  return LaunchMhaPrefillImpl<64, 64>(p, stream);
}

}  // namespace mlaserve::kernels::mha_cuda
