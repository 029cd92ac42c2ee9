// activation dispatcher: can-implement check, then the backend.
#include "kernels/activation/api.h"

#include "common/status.h"
#include "kernels/common/dispatch.h"
#include "kernels/common/param_check.h"

namespace mlaserve::kernels {

absl::Status ActAndMul(const ActAndMulParams& p, const KernelContext& ctx) {
  RETURN_IF_ERROR(RequireNonNegative("rows", p.rows));
  RETURN_IF_ERROR(RequirePositive("dim", p.dim));
  if (p.rows == 0) return absl::OkStatus();
  RETURN_IF_ERROR(RequireNonNull("x", p.x));
  RETURN_IF_ERROR(RequireNonNull("out", p.out));
  RETURN_IF_ERROR(RequireAtLeast("x_stride", p.x_stride, "2*dim", 2 * static_cast<int64_t>(p.dim)));
  RETURN_IF_ERROR(RequireAtLeast("out_stride", p.out_stride, "dim", p.dim));
  MLASERVE_DISPATCH("activation", ctx, ActAndMulCpu(p), ActAndMulCuda(p, ctx.stream));
}

}  // namespace mlaserve::kernels
