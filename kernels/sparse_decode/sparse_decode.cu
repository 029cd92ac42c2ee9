// sparse_decode CUDA backend: the sparse latent-attention kernel of sparse_fwd with at most two
// query tokens per request (the grid's query dimension is 2, or max_seqlen_q when set).
// Each CTA already gathers only top_k rows, and a decode batch of b requests at 128 heads
// launches 2 * b * (1..2) CTAs, so no KV split is needed to fill the GPU at b >= 64.
#include "absl/strings/str_cat.h"
#include "kernels/sparse_decode/api.h"
#include "kernels/sparse_fwd/sparse_attention.h"

namespace mlaserve::kernels {

absl::Status SparseDecodeCuda(const SparseMlaParams& p, void* stream) {
  if (p.max_seqlen_q > 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sparse_decode: max_seqlen_q=", p.max_seqlen_q, " exceeds 2 query tokens per request"));
  }
  return sparse_cuda::LaunchSparseAttention(p, p.max_seqlen_q > 0 ? p.max_seqlen_q : 2,
                                            "sparse_decode", static_cast<cudaStream_t>(stream));
}

}  // namespace mlaserve::kernels
