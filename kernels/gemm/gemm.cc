// gemm dispatcher: can-implement check, then the backend.
#include "kernels/gemm/api.h"

#include "common/status.h"
#include "kernels/common/dispatch.h"
#include "kernels/common/param_check.h"

namespace mlaserve::kernels {
namespace {

absl::Status Validate(const GemmParams& p) {
  RETURN_IF_ERROR(RequireNonNegative("m", p.m));  // m = 0: nothing to do
  RETURN_IF_ERROR(RequirePositive("n", p.n));
  RETURN_IF_ERROR(RequirePositive("k", p.k));
  RETURN_IF_ERROR(RequirePositive("batch", p.batch));
  RETURN_IF_ERROR(RequireNonNull("a", p.a));
  RETURN_IF_ERROR(RequireNonNull("b", p.b));
  RETURN_IF_ERROR(RequireNonNull("c", p.c));
  RETURN_IF_ERROR(RequireAtLeast("lda", p.lda, "k", p.k));
  if (p.b_transposed) {
    RETURN_IF_ERROR(RequireAtLeast("ldb (b_transposed)", p.ldb, "k", p.k));
  } else {
    RETURN_IF_ERROR(RequireAtLeast("ldb", p.ldb, "n", p.n));
  }
  RETURN_IF_ERROR(RequireAtLeast("ldc", p.ldc, "n", p.n));
  RETURN_IF_ERROR(RequireNonNegative("stride_a", p.stride_a));
  RETURN_IF_ERROR(RequireNonNegative("stride_b", p.stride_b));
  if (p.batch > 1) {
    // Distinct outputs per batch entry; A and B may be broadcast (stride 0).
    RETURN_IF_ERROR(RequireAtLeast("stride_c", p.stride_c, "(m-1)*ldc+n",
                                   static_cast<int64_t>(p.m > 0 ? p.m - 1 : 0) * p.ldc + p.n));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Gemm(const GemmParams& p, const KernelContext& ctx) {
  RETURN_IF_ERROR(Validate(p));
  if (p.m == 0) return absl::OkStatus();
  MLASERVE_DISPATCH("gemm", ctx, GemmCpu(p), GemmCuda(p, ctx.stream));
}

}  // namespace mlaserve::kernels
