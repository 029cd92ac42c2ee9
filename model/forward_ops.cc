#include "model/forward_ops.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/activation/api.h"
#include "kernels/gemm/api.h"
#include "kernels/norm/api.h"
#include "model/device_memory.h"

namespace mlaserve::model::ops {

namespace {

// y[r, :] = x[r, :] W^T + b as GEMM parameters.
kernels::GemmParams LinearGemm(const OpContext& ctx, const void* x, int rows, int64_t x_stride,
                               const LinearWeight& w, void* y, int64_t y_stride, float beta,
                               bool f32_out) {
  kernels::GemmParams p;
  p.dtype = ctx.dtype;
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
  p.c_f32 = f32_out;
  return p;
}

}  // namespace

absl::Status Linear(const OpContext& ctx, const void* x, int rows, int64_t x_stride,
                    const LinearWeight& w, void* y, int64_t y_stride, float beta, bool y_f32) {
  if (rows == 0) return absl::OkStatus();
  const bool f32_out = y_f32 && ctx.dtype != kernels::DType::kF32;
  if (f32_out && !w.bias.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Linear: an f32 output with ", kernels::DTypeName(ctx.dtype),
        " activations takes no bias (weight [", w.out, ", ", w.in, "] has one)"));
  }
  return kernels::Gemm(LinearGemm(ctx, x, rows, x_stride, w, y, y_stride, beta, f32_out),
                       ctx.kernel);
}

absl::Status LinearPair(const OpContext& ctx, const void* x, int rows, int64_t x_stride,
                        const LinearWeight& stacked, int first_out, void* y1, int64_t y1_stride,
                        void* y2, int64_t y2_stride) {
  if (rows == 0) return absl::OkStatus();
  kernels::GemmParams p = LinearGemm(ctx, x, rows, x_stride, stacked, y1, y1_stride, 0.0f, false);
  p.c2 = y2;
  p.c2_begin = first_out;
  p.ldc2 = y2_stride;
  return kernels::Gemm(p, ctx.kernel);
}

absl::Status RmsNorm(const OpContext& ctx, const void* x, int rows, int dim, int64_t x_stride,
                     const WeightTensor& weight, float eps, void* y, int64_t y_stride,
                     void* residual, int real_dim) {
  if (rows == 0) return absl::OkStatus();
  kernels::RmsNormParams p;
  p.dtype = ctx.dtype;
  p.rows = rows;
  p.dim = dim;
  p.x = x;
  p.x_stride = x_stride;
  p.residual = residual;
  p.weight = weight.data();
  p.y = y;
  p.y_stride = y_stride;
  p.eps = eps;
  p.real_dim = real_dim;
  return kernels::RmsNorm(p, ctx.kernel);
}

absl::Status Copy2D(const OpContext& ctx, void* dst, int64_t dst_stride, const void* src,
                    int64_t src_stride, int width, int64_t rows) {
  return Copy2DBytes(ctx.kernel, dst, ctx.bytes(dst_stride), src, ctx.bytes(src_stride),
                     ctx.bytes(width), static_cast<size_t>(rows));
}

absl::Status GatedMlp(const OpContext& ctx, const void* x, int rows, int hidden,
                      const GatedMlpWeights& w, kernels::Activation activation, void* scratch,
                      void* out, float beta) {
  if (rows == 0) return absl::OkStatus();
  const int inter = w.inter;
  void* hidden_act = ctx.at(scratch, static_cast<int64_t>(rows) * 2 * inter);
  kernels::GemmParams fused =
      LinearGemm(ctx, x, rows, hidden, w.gate_up, hidden_act, inter, 0.0f, false);
  fused.epilogue = kernels::GemmEpilogue::kSiluMul;
  if (activation == kernels::Activation::kSilu && w.gate_up.bias.empty() &&
      kernels::GemmRunsSmallM(fused, ctx.kernel.backend)) {
    RETURN_IF_ERROR(kernels::Gemm(fused, ctx.kernel));
    return Linear(ctx, hidden_act, rows, inter, w.down, out, hidden, beta);
  }
  RETURN_IF_ERROR(Linear(ctx, x, rows, hidden, w.gate_up, scratch, 2 * inter));
  kernels::ActAndMulParams ap;
  ap.act = activation;
  ap.dtype = ctx.dtype;
  ap.rows = rows;
  ap.dim = inter;
  ap.x = scratch;
  ap.x_stride = 2 * inter;
  ap.out = hidden_act;
  ap.out_stride = inter;
  RETURN_IF_ERROR(kernels::ActAndMul(ap, ctx.kernel));
  return Linear(ctx, hidden_act, rows, inter, w.down, out, hidden, beta);
}

}  // namespace mlaserve::model::ops
