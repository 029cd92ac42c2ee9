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
    // Batch entries must write disjoint elements of C; A and B may be broadcast (stride 0).
    // Two layouts are disjoint: one block per entry (stride_c >= (m-1)*ldc + n), or entries
    // side by side within each row, e.g. per-head outputs [m, batch*n] (n <= stride_c and
    // (batch-1)*stride_c + n <= ldc).
    const int64_t block = static_cast<int64_t>(p.m > 0 ? p.m - 1 : 0) * p.ldc + p.n;
    const bool blocks = p.stride_c >= block;
    const bool side_by_side =
        p.stride_c >= p.n && static_cast<int64_t>(p.batch - 1) * p.stride_c + p.n <= p.ldc;
    if (!blocks && !side_by_side) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gemm: stride_c=", p.stride_c, " makes batch entries overlap in C (m=", p.m,
          ", n=", p.n, ", ldc=", p.ldc, ", batch=", p.batch, ")"));
    }
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
