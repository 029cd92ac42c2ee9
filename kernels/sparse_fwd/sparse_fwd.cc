// sparse_fwd dispatcher and the shape checks it shares with sparse_decode.
#include "kernels/sparse_fwd/api.h"

#include "common/status.h"
#include "kernels/common/dispatch.h"
#include "kernels/mla_prefill/mla_check.h"
#include "kernels/sparse_fwd/sparse_cpu.h"

namespace mlaserve::kernels {
namespace sparse_internal {

absl::Status CheckSparseShape(const SparseMlaParams& p, const char* family) {
  RETURN_IF_ERROR(RequirePositive("top_k", p.top_k));
  RETURN_IF_ERROR(mla_internal::CheckMlaShape(
      {family, p.batch, p.num_heads, p.kv_lora_rank, p.rope_dim, p.q, p.q_token_stride,
       p.q_head_stride, p.kv_cache, p.num_pages, p.block_table, p.max_pages_per_seq,
       p.cu_seqlens_q, p.seqlens_k, p.out, p.softmax_scale}));
  if (p.batch > 0) RETURN_IF_ERROR(RequireNonNull("indices", p.indices));
  return absl::OkStatus();
}

}  // namespace sparse_internal

absl::Status SparseFwd(const SparseMlaParams& p, const KernelContext& ctx) {
  RETURN_IF_ERROR(sparse_internal::CheckSparseShape(p, "sparse_fwd"));
  if (p.batch == 0) return absl::OkStatus();
  MLASERVE_DISPATCH("sparse_fwd", ctx, SparseFwdCpu(p), SparseFwdCuda(p, ctx.stream));
}

}  // namespace mlaserve::kernels
