// Configurations of the sparse latent-attention kernel: bf16 cache, widths padded to
// 64 latent + 64 rope, 16 / 32 / 64 heads per CTA.
#include "kernels/sparse_fwd/sparse_attention_kernel.cuh"

namespace mlaserve::kernels::sparse_cuda {

template <>
absl::Status LaunchSparseTile<64, 64, 1, false>(const SparseMlaParams& p, int max_q, cudaStream_t s) {
  return LaunchSparseTileImpl<64, 64, 1, false>(p, max_q, s);
}
template <>
absl::Status LaunchSparseTile<64, 64, 2, false>(const SparseMlaParams& p, int max_q, cudaStream_t s) {
  return LaunchSparseTileImpl<64, 64, 2, false>(p, max_q, s);
}
template <>
absl::Status LaunchSparseTile<64, 64, 4, false>(const SparseMlaParams& p, int max_q, cudaStream_t s) {
  return LaunchSparseTileImpl<64, 64, 4, false>(p, max_q, s);
}

}  // namespace mlaserve::kernels::sparse_cuda
