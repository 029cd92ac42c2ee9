// sparse_fwd CUDA backend: the shared sparse latent-attention kernel over every query token.
#include "kernels/sparse_fwd/api.h"
#include "kernels/sparse_fwd/sparse_attention.h"

namespace mlaserve::kernels {

absl::Status SparseFwdCuda(const SparseMlaParams& p, void* stream) {
  return sparse_cuda::LaunchSparseAttention(p, p.max_seqlen_q, "sparse_fwd",
                                            static_cast<cudaStream_t>(stream));
}

}  // namespace mlaserve::kernels
