#include "model/forward_ops.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/activation/api.h"
#include "kernels/gemm/api.h"
#include "kernels/norm/api.h"

namespace mlaserve::model::ops {

absl::Status Linear(const kernels::KernelContext& ctx, const float* x, int rows, int64_t x_stride,
                    const LinearWeight& w, float* y, int64_t y_stride, float beta) {
  if (rows == 0) return absl::OkStatus();
  kernels::GemmParams p;
  p.m = rows;
  p.n = w.out;
  p.k = w.in;
  p.a = x;
  p.lda = x_stride;
  p.b = w.weight.data();
  p.ldb = w.in;
  p.b_transposed = true;
  p.c = y;
  p.ldc = y_stride;
  p.bias = w.bias.empty() ? nullptr : w.bias.data();
  p.beta = beta;
  return kernels::Gemm(p, ctx);
}

absl::Status RmsNorm(const kernels::KernelContext& ctx, const float* x, int rows, int dim,
                     int64_t x_stride, const float* weight, float eps, float* y, int64_t y_stride,
                     float* residual) {
  if (rows == 0) return absl::OkStatus();
  kernels::RmsNormParams p;
  p.rows = rows;
  p.dim = dim;
  p.x = x;
  p.x_stride = x_stride;
  p.residual = residual;
  p.weight = weight;
  p.y = y;
  p.y_stride = y_stride;
  p.eps = eps;
  return kernels::RmsNorm(p, ctx);
}

absl::Status Copy2D(const kernels::KernelContext& ctx, float* dst, int64_t dst_stride,
                    const float* src, int64_t src_stride, int width, int64_t rows) {
  if (ctx.backend != kernels::Backend::kCpu) {
    return absl::FailedPreconditionError(
        absl::StrCat("Copy2D: backend ", kernels::BackendName(ctx.backend),
                     " is not supported by the model runtime yet"));
  }
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(dst + r * dst_stride, src + r * src_stride, sizeof(float) * width);
  }
  return absl::OkStatus();
}

absl::Status GatedMlp(const kernels::KernelContext& ctx, const float* x, int rows, int hidden,
                      const GatedMlpWeights& w, float* act, float* out, float beta) {
  if (rows == 0) return absl::OkStatus();
  const int inter = w.inter;
  RETURN_IF_ERROR(Linear(ctx, x, rows, hidden, w.gate_up, act, 2 * inter));
  float* hidden_act = act + static_cast<int64_t>(rows) * 2 * inter;
  kernels::SiluAndMulParams sp;
  sp.rows = rows;
  sp.dim = inter;
  sp.x = act;
  sp.x_stride = 2 * inter;
  sp.out = hidden_act;
  sp.out_stride = inter;
  RETURN_IF_ERROR(kernels::SiluAndMul(sp, ctx));
  return Linear(ctx, hidden_act, rows, inter, w.down, out, hidden, beta);
}

}  // namespace mlaserve::model::ops
