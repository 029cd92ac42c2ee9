// norm: RMSNorm (optionally fused with the residual add) and LayerNorm (indexer k_norm).
//
// RMSNorm, as Hugging Face's DeepseekV*RMSNorm: y = weight * (x / sqrt(mean(x^2) + eps)),
// computed in f32. With residual != null the op is fused:  residual += x;  y = norm(residual)
// (residual is read and written; x is not modified).
//
// Zero-padded rows (model/model_widths.h stores the hidden state rounded up to a multiple of 8,
// zeros past hidden_size): the mean of squares divides by real_dim, the model's width, while the
// kernels run over all dim values (the padding adds 0 to the sum, and its zero weights keep y
// zero there), so the 16-byte vector paths still apply.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/common/types.h"

namespace mlaserve::kernels {

struct RmsNormParams {
  DType dtype = DType::kF32;  // of x, residual, weight and y
  int rows = 0;
  int dim = 0;
  const void* x = nullptr;   // [rows, dim], row stride x_stride (elements)
  int64_t x_stride = 0;
  void* residual = nullptr;  // [rows, dim] contiguous, or null
  const void* weight = nullptr;  // [dim]
  void* y = nullptr;         // [rows, dim], row stride y_stride; may alias x
  int64_t y_stride = 0;
  float eps = 1e-6f;
  // The width mean(x^2) divides by, in [1, dim]; 0 means dim. Below dim, x (and the residual)
  // must hold zeros past real_dim, and weight too if y must (the caller's contract; not read).
  int real_dim = 0;
};

// LayerNorm: y = (x - mean) / sqrt(var + eps) * weight + bias (biased variance, f32 math).
struct LayerNormParams {
  DType dtype = DType::kF32;
  int rows = 0;
  int dim = 0;
  const void* x = nullptr;  // [rows, dim], row stride x_stride
  int64_t x_stride = 0;
  const void* weight = nullptr;  // [dim]
  const void* bias = nullptr;    // [dim] or null
  void* y = nullptr;             // [rows, dim], row stride y_stride; may alias x
  int64_t y_stride = 0;
  float eps = 1e-6f;
};

absl::Status RmsNorm(const RmsNormParams& p, const KernelContext& ctx);
absl::Status RmsNormCpu(const RmsNormParams& p);
absl::Status RmsNormCuda(const RmsNormParams& p, void* stream);

absl::Status LayerNorm(const LayerNormParams& p, const KernelContext& ctx);
absl::Status LayerNormCpu(const LayerNormParams& p);
absl::Status LayerNormCuda(const LayerNormParams& p, void* stream);

}  // namespace mlaserve::kernels
