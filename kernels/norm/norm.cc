// norm dispatchers (RmsNorm, LayerNorm): can-implement checks, then the backend.
#include "kernels/norm/api.h"

#include "common/status.h"
#include "kernels/common/dispatch.h"
#include "kernels/common/param_check.h"

namespace mlaserve::kernels {
namespace {

absl::Status ValidateRows(int rows, int dim, const void* x, int64_t x_stride,
                          const void* weight, const void* y, int64_t y_stride) {
  RETURN_IF_ERROR(RequireNonNegative("rows", rows));
  RETURN_IF_ERROR(RequirePositive("dim", dim));
  if (rows == 0) return absl::OkStatus();
  RETURN_IF_ERROR(RequireNonNull("x", x));
  RETURN_IF_ERROR(RequireNonNull("weight", weight));
  RETURN_IF_ERROR(RequireNonNull("y", y));
  RETURN_IF_ERROR(RequireAtLeast("x_stride", x_stride, "dim", dim));
  RETURN_IF_ERROR(RequireAtLeast("y_stride", y_stride, "dim", dim));
  return absl::OkStatus();
}

}  // namespace

absl::Status RmsNorm(const RmsNormParams& p, const KernelContext& ctx) {
  RETURN_IF_ERROR(ValidateRows(p.rows, p.dim, p.x, p.x_stride, p.weight, p.y, p.y_stride));
  if (!(p.eps >= 0.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("rmsnorm: eps=", p.eps, " must be >= 0"));
  }
  if (p.real_dim < 0 || p.real_dim > p.dim) {
    return absl::InvalidArgumentError(absl::StrCat("rmsnorm: real_dim=", p.real_dim,
                                                   " must be in [0, dim=", p.dim, "]"));
  }
  if (p.rows == 0) return absl::OkStatus();
  MLASERVE_DISPATCH("norm", ctx, RmsNormCpu(p), RmsNormCuda(p, ctx.stream));
}

absl::Status LayerNorm(const LayerNormParams& p, const KernelContext& ctx) {
  RETURN_IF_ERROR(ValidateRows(p.rows, p.dim, p.x, p.x_stride, p.weight, p.y, p.y_stride));
  if (!(p.eps >= 0.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("layernorm: eps=", p.eps, " must be >= 0"));
  }
  if (p.rows == 0) return absl::OkStatus();
  MLASERVE_DISPATCH("norm", ctx, LayerNormCpu(p), LayerNormCuda(p, ctx.stream));
}

}  // namespace mlaserve::kernels
