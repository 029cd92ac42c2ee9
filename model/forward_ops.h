// Thin wrappers over kernels/*/api.h for the DeepSeek forward: the shapes the model uses,
// spelled once. Every pointer is a buffer of the engine's backend (host memory on kCpu);
// f32 activations and weights throughout.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/common/types.h"
#include "model/deepseek_weights.h"

namespace mlaserve::model::ops {

// y[r, :] = x[r, :] W^T + b for r < rows; beta = 1 accumulates into y.
absl::Status Linear(const kernels::KernelContext& ctx, const float* x, int rows, int64_t x_stride,
                    const LinearWeight& w, float* y, int64_t y_stride, float beta = 0.0f);

// y = RmsNorm(x) * weight; with residual: residual += x, y = RmsNorm(residual) * weight.
absl::Status RmsNorm(const kernels::KernelContext& ctx, const float* x, int rows, int dim,
                     int64_t x_stride, const float* weight, float eps, float* y, int64_t y_stride,
                     float* residual = nullptr);

// dst row r [0, width) = src row r [0, width), for r < rows (a strided 2-D copy).
absl::Status Copy2D(const kernels::KernelContext& ctx, float* dst, int64_t dst_stride,
                    const float* src, int64_t src_stride, int width, int64_t rows);

// out = down(silu(x gate^T) * (x up^T)) (+ beta * out), with `act` scratch of
// rows * 3I floats (gate|up, then the activated rows).
absl::Status GatedMlp(const kernels::KernelContext& ctx, const float* x, int rows, int hidden,
                      const GatedMlpWeights& w, float* act, float* out, float beta = 0.0f);

}  // namespace mlaserve::model::ops
