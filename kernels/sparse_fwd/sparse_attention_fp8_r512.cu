// Configurations of the sparse latent-attention kernel: fp8 656-byte cache, widths padded to
// 512 latent + 64 rope, 16 / 32 / 64 heads per CTA.
#include "kernels/sparse_fwd/sparse_attention_kernel.cuh"

namespace mlaserve::kernels::sparse_cuda {

template <>
absl::Status LaunchSparseTile<512, 64, 1, true>(const SparseMlaParams& p, int max_q, cudaStream_t s) {
  return LaunchSparseTileImpl<512, 64, 1, true>(p, max_q, s);
}
template <>
absl::Status LaunchSparseTile<512, 64, 2, true>(const SparseMlaParams& p, int max_q, cudaStream_t s) {
  return LaunchSparseTileImpl<512, 64, 2, true>(p, max_q, s);
}
template <>
absl::Status LaunchSparseTile<512, 64, 4, true>(const SparseMlaParams& p, int max_q, cudaStream_t s) {
  return LaunchSparseTileImpl<512, 64, 4, true>(p, max_q, s);
}

}  // namespace mlaserve::kernels::sparse_cuda
