// Host interface of the CUDA sparse latent-attention kernel shared by sparse_fwd and
// sparse_decode (absorbed MLA over the positions the indexer selected; see api.h).
//
// A CTA owns up to 64 heads of ONE query token (each token has its own index list, so only
// its heads share the gathered cache rows) and streams the token's top_k entries in tiles of
// 64 gathered rows through two shared-memory stages. The fp8 656-byte cache is dequantized to
// bf16 on the way into shared memory.
#pragma once

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "kernels/sparse_fwd/api.h"

namespace mlaserve::kernels::sparse_cuda {

// Validates what the kernel adds to CheckSparseShape (dtypes, widths, alignment) and launches
// a grid of (head tiles, max_q, batch); `max_q` must bound every request's query count.
absl::Status LaunchSparseAttention(const SparseMlaParams& p, int max_q, const char* family,
                                   cudaStream_t stream);

}  // namespace mlaserve::kernels::sparse_cuda
