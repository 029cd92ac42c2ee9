// gemm CPU backend: OpenBLAS sgemm per batch entry, bias added afterwards.
#include <cblas.h>

#include "common/status.h"
#include "kernels/common/param_check.h"
#include "kernels/gemm/api.h"

namespace mlaserve::kernels {

absl::Status GemmCpu(const GemmParams& p) {
  RETURN_IF_ERROR(RequireCpuF32("gemm", "dtype", p.dtype));
  const auto* a = static_cast<const float*>(p.a);
  const auto* b = static_cast<const float*>(p.b);
  auto* c = static_cast<float*>(p.c);
  const auto* bias = static_cast<const float*>(p.bias);
  for (int i = 0; i < p.batch; ++i) {
    const float* ai = a + i * p.stride_a;
    const float* bi = b + i * p.stride_b;
    float* ci = c + i * p.stride_c;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, p.b_transposed ? CblasTrans : CblasNoTrans, p.m,
                p.n, p.k, p.alpha, ai, static_cast<blasint>(p.lda), bi,
                static_cast<blasint>(p.ldb), p.beta, ci, static_cast<blasint>(p.ldc));
    if (bias != nullptr) {
      for (int r = 0; r < p.m; ++r) {
        float* row = ci + r * p.ldc;
        for (int j = 0; j < p.n; ++j) row[j] += bias[j];
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace mlaserve::kernels
