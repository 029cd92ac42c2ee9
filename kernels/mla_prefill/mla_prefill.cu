// mla_prefill CUDA backend: the latent-attention kernel over the whole context (no split).
// Correctness first: every CTA streams its request's pages up to its last row's causal limit,
// so long prompts re-read the cache once per 64 query rows (mostly from L2).
#include "kernels/mla_prefill/latent_attention.h"

namespace mlaserve::kernels {

absl::Status MlaPrefillCuda(const MlaParams& p, void* stream) {
  // The grid is sized by max_seqlen_q (a host value): it must bound every request's queries.
  const int64_t max_rows = static_cast<int64_t>(p.max_seqlen_q) * p.num_heads;
  return mla_cuda::LaunchLatentAttention(p, mla_cuda::LatentSplit{}, max_rows,
                                         static_cast<cudaStream_t>(stream));
}

}  // namespace mlaserve::kernels
