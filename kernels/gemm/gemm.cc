// gemm dispatcher: can-implement check, then the backend.
#include "kernels/gemm/api.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/common/dispatch.h"
#include "kernels/common/param_check.h"

namespace mlaserve::kernels {
namespace {

// The second output's and the SiLU epilogue's own rules.
absl::Status ValidateForms(const GemmParams& p) {
  if (p.c2 != nullptr) {
    if (p.c2_begin <= 0 || p.c2_begin >= p.n) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gemm: c2_begin=", p.c2_begin, " must be in (0, n=", p.n, ") when c2 is set"));
    }
    RETURN_IF_ERROR(RequireAtLeast("ldc2", p.ldc2, "n - c2_begin", p.n - p.c2_begin));
    if (p.batch != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("gemm: a second output (c2) takes batch=1, got batch=", p.batch));
    }
  }
  if (p.epilogue == GemmEpilogue::kSiluMul) {
    if (p.n % 2 != 0 || !p.b_transposed || p.bias != nullptr || p.beta != 0.0f ||
        p.c2 != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "gemm: the SiLU-and-mul epilogue takes an even n (got ", p.n,
          "), b_transposed, no bias, beta=0 (got ", p.beta, ") and no c2"));
    }
  }
  return absl::OkStatus();
}

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
  RETURN_IF_ERROR(ValidateForms(p));
  // The columns C holds: all n, those before c2, or the SiLU epilogue's n/2.
  const int c_cols = p.c2 != nullptr                         ? p.c2_begin
                     : p.epilogue == GemmEpilogue::kSiluMul ? p.n / 2
                                                             : p.n;
  RETURN_IF_ERROR(RequireAtLeast("ldc", p.ldc, "the columns of C", c_cols));
  RETURN_IF_ERROR(RequireNonNegative("stride_a", p.stride_a));
  RETURN_IF_ERROR(RequireNonNegative("stride_b", p.stride_b));
  if (p.batch > 1) {
    // Batch entries must write disjoint elements of C; A and B may be broadcast (stride 0).
    // Two layouts are disjoint: one block per entry (stride_c >= (m-1)*ldc + cols), or entries
    // side by side within each row, e.g. per-head outputs [m, batch*cols] (cols <= stride_c
    // and (batch-1)*stride_c + cols <= ldc).
    const int64_t block = static_cast<int64_t>(p.m > 0 ? p.m - 1 : 0) * p.ldc + c_cols;
    const bool blocks = p.stride_c >= block;
    const bool side_by_side = p.stride_c >= c_cols &&
                              static_cast<int64_t>(p.batch - 1) * p.stride_c + c_cols <= p.ldc;
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

#if !defined(MLASERVE_KERNEL_HAS_CUDA)
bool GemmRunsSmallM(const GemmParams&, Backend) { return false; }
#endif

}  // namespace mlaserve::kernels
