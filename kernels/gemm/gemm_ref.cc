// gemm CPU backend: OpenBLAS sgemm per batch entry, bias added afterwards. A second output is
// two sgemm calls over the two row blocks of B (the very calls two separate GEMMs would make);
// the SiLU-and-mul epilogue runs sgemm on blocks of rows into a bounded buffer.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/status.h"
#include "kernels/common/param_check.h"
#include "kernels/gemm/api.h"

namespace mlaserve::kernels {
namespace {

// Rows of A per sgemm call of the SiLU epilogue: bounds its buffer to kSiluRowBlock x n.
constexpr int kSiluRowBlock = 64;

// C[m, n] (+)= alpha * A B^T or A B for one batch entry, plus bias.
void Product(const GemmParams& p, const float* a, const float* b, int n, float* c, int64_t ldc,
             const float* bias) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, p.b_transposed ? CblasTrans : CblasNoTrans, p.m, n,
              p.k, p.alpha, a, static_cast<blasint>(p.lda), b, static_cast<blasint>(p.ldb),
              p.beta, c, static_cast<blasint>(ldc));
  if (bias != nullptr) {
    for (int r = 0; r < p.m; ++r) {
      float* row = c + r * ldc;
      for (int j = 0; j < n; ++j) row[j] += bias[j];
    }
  }
}

// C[r, j] = silu(g) * u over the stacked gate|up rows of B (api.h, GemmEpilogue::kSiluMul).
void SiluMulProduct(const GemmParams& p, const float* a, const float* b, float* c) {
  const int inter = p.n / 2;
  std::vector<float> gate_up(static_cast<size_t>(std::min(p.m, kSiluRowBlock)) * p.n);
  for (int r0 = 0; r0 < p.m; r0 += kSiluRowBlock) {
    const int rows = std::min(kSiluRowBlock, p.m - r0);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, p.n, p.k, p.alpha,
                a + r0 * p.lda, static_cast<blasint>(p.lda), b, static_cast<blasint>(p.ldb), 0.0f,
                gate_up.data(), static_cast<blasint>(p.n));
    for (int r = 0; r < rows; ++r) {
      const float* g = gate_up.data() + static_cast<size_t>(r) * p.n;
      float* out = c + (r0 + r) * p.ldc;
      for (int j = 0; j < inter; ++j) out[j] = g[j] / (1.0f + std::exp(-g[j])) * g[inter + j];
    }
  }
}

}  // namespace

absl::Status GemmCpu(const GemmParams& p) {
  RETURN_IF_ERROR(RequireCpuF32("gemm", "dtype", p.dtype));
  const auto* a = static_cast<const float*>(p.a);
  const auto* b = static_cast<const float*>(p.b);
  auto* c = static_cast<float*>(p.c);
  const auto* bias = static_cast<const float*>(p.bias);
  if (p.epilogue == GemmEpilogue::kSiluMul) {
    for (int i = 0; i < p.batch; ++i) {
      SiluMulProduct(p, a + i * p.stride_a, b + i * p.stride_b, c + i * p.stride_c);
    }
    return absl::OkStatus();
  }
  if (p.c2 != nullptr) {  // batch = 1 (validated)
    const int n1 = p.c2_begin;
    // B's columns [n1, n): rows n1.. of [n, k], or columns n1.. of [k, n].
    const int64_t b2 = p.b_transposed ? n1 * p.ldb : n1;
    Product(p, a, b, n1, c, p.ldc, bias);
    Product(p, a, b + b2, p.n - n1, static_cast<float*>(p.c2), p.ldc2,
            bias != nullptr ? bias + n1 : nullptr);
    return absl::OkStatus();
  }
  for (int i = 0; i < p.batch; ++i) {
    Product(p, a + i * p.stride_a, b + i * p.stride_b, p.n, c + i * p.stride_c, p.ldc, bias);
  }
  return absl::OkStatus();
}

}  // namespace mlaserve::kernels
