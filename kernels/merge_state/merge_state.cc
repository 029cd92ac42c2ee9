// merge_state dispatcher: can-implement check, then the backend.
#include "kernels/merge_state/api.h"

#include "common/status.h"
#include "kernels/common/dispatch.h"
#include "kernels/common/param_check.h"

namespace mlaserve::kernels {

absl::Status MergeState(const MergeStateParams& p, const KernelContext& ctx) {
  RETURN_IF_ERROR(RequireNonNegative("num_tokens", p.num_tokens));
  RETURN_IF_ERROR(RequirePositive("num_heads", p.num_heads));
  RETURN_IF_ERROR(RequirePositive("head_dim", p.head_dim));
  if (p.num_tokens == 0) return absl::OkStatus();
  RETURN_IF_ERROR(RequireNonNull("out_a", p.out_a));
  RETURN_IF_ERROR(RequireNonNull("out_b", p.out_b));
  RETURN_IF_ERROR(RequireNonNull("out", p.out));
  RETURN_IF_ERROR(RequireNonNull("lse_a", p.lse_a));
  RETURN_IF_ERROR(RequireNonNull("lse_b", p.lse_b));
  RETURN_IF_ERROR(RequireAtLeast("token_stride", p.token_stride, "num_heads*head_dim",
                                 static_cast<int64_t>(p.num_heads) * p.head_dim));
  MLASERVE_DISPATCH("merge_state", ctx, MergeStateCpu(p), MergeStateCuda(p, ctx.stream));
}

}  // namespace mlaserve::kernels
