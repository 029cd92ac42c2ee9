// embedding dispatcher: can-implement check, then the backend.
#include "kernels/embedding/api.h"

#include "common/status.h"
#include "kernels/common/dispatch.h"
#include "kernels/common/param_check.h"

namespace mlaserve::kernels {

absl::Status Embedding(const EmbeddingParams& p, const KernelContext& ctx) {
  RETURN_IF_ERROR(RequireNonNegative("num_tokens", p.num_tokens));
  RETURN_IF_ERROR(RequirePositive("dim", p.dim));
  RETURN_IF_ERROR(RequirePositive("vocab", p.vocab));
  if (p.num_tokens == 0) return absl::OkStatus();
  RETURN_IF_ERROR(RequireNonNull("ids", p.ids));
  RETURN_IF_ERROR(RequireNonNull("table", p.table));
  RETURN_IF_ERROR(RequireNonNull("out", p.out));
  MLASERVE_DISPATCH("embedding", ctx, EmbeddingCpu(p), EmbeddingCuda(p, ctx.stream));
}

}  // namespace mlaserve::kernels
