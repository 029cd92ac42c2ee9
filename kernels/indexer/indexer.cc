// indexer dispatcher: can-implement check, then the backend.
#include "kernels/indexer/api.h"

#include "common/status.h"
#include "kernels/common/dispatch.h"
#include "kernels/mla_prefill/mla_check.h"

namespace mlaserve::kernels {

// The CPU backend keeps one score row per worker thread and needs no workspace. The CUDA
// backend stages f32 scores, one row of IndexerScoreStride(max_seqlen_k) per (request, query
// slot) (kernels/indexer/indexer.cu).
size_t IndexerWorkspaceBytes(const IndexerParams& p) {
  const int64_t stride = (static_cast<int64_t>(p.max_seqlen_k) + 3) / 4 * 4;
  return static_cast<size_t>(p.batch) * p.max_seqlen_q * stride * sizeof(float);
}

absl::Status Indexer(const IndexerParams& p, const KernelContext& ctx) {
  RETURN_IF_ERROR(RequirePositive("top_k", p.top_k));
  RETURN_IF_ERROR(RequirePositive("head_dim", p.head_dim));
  // The paged-batch checks are those of the latent attention with a head_dim-wide entry.
  RETURN_IF_ERROR(mla_internal::CheckMlaShape(
      {"indexer", p.batch, p.num_heads, p.head_dim, 0, p.q,
       static_cast<int64_t>(p.num_heads) * p.head_dim, p.head_dim, p.k_cache, p.num_pages,
       p.block_table, p.max_pages_per_seq, p.cu_seqlens_q, p.seqlens_k, p.topk_indices,
       p.softmax_scale}));
  if (p.batch == 0) return absl::OkStatus();
  RETURN_IF_ERROR(RequireNonNull("weights", p.weights));
  MLASERVE_DISPATCH("indexer", ctx, IndexerCpu(p), IndexerCuda(p, ctx.stream));
}

}  // namespace mlaserve::kernels
