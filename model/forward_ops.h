// Thin wrappers over kernels/*/api.h for the DeepSeek forward: the shapes the model uses,
// spelled once. Every pointer is a buffer of the engine's backend (host memory on kCpu,
// device memory on kCuda) holding activations of OpContext::dtype (f32 on kCpu, bf16 on kCuda)
// unless a parameter says f32.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/common/activation.h"
#include "kernels/common/types.h"
#include "model/deepseek_weights.h"

namespace mlaserve::model::ops {

// Where ops run and the dtype of the activations they read and write.
struct OpContext {
  kernels::KernelContext kernel;
  kernels::DType dtype = kernels::DType::kF32;

  size_t elem() const { return kernels::DTypeSize(dtype); }
  size_t bytes(int64_t elements) const { return static_cast<size_t>(elements) * elem(); }
  // base + elements, in activation elements.
  void* at(void* base, int64_t elements) const {
    return static_cast<char*>(base) + static_cast<int64_t>(elem()) * elements;
  }
  const void* at(const void* base, int64_t elements) const {
    return static_cast<const char*>(base) + static_cast<int64_t>(elem()) * elements;
  }
};

// y[r, :] = x[r, :] W^T + b for r < rows; beta = 1 accumulates into y. With y_f32, y is f32
// whatever the activation dtype (router and LM-head logits); W then must have no bias unless
// the activations are f32.
absl::Status Linear(const OpContext& ctx, const void* x, int rows, int64_t x_stride,
                    const LinearWeight& w, void* y, int64_t y_stride, float beta = 0.0f,
                    bool y_f32 = false);

// Two projections of x as one GEMM over their weights stacked row-wise (`stacked`, [first_out +
// second_out, in]): y1 = x first^T (first_out columns), y2 = x second^T (the rest). Stacked
// weights carry no bias.
absl::Status LinearPair(const OpContext& ctx, const void* x, int rows, int64_t x_stride,
                        const LinearWeight& stacked, int first_out, void* y1, int64_t y1_stride,
                        void* y2, int64_t y2_stride);

// y = RmsNorm(x) * weight; with residual: residual += x, y = RmsNorm(residual) * weight. The
// mean of squares divides by real_dim (0: dim), the model's width of rows zero-padded to dim
// (the hidden state, model/model_widths.h).
absl::Status RmsNorm(const OpContext& ctx, const void* x, int rows, int dim, int64_t x_stride,
                     const WeightTensor& weight, float eps, void* y, int64_t y_stride,
                     void* residual = nullptr, int real_dim = 0);

// dst row r [0, width) = src row r [0, width), for r < rows (a strided 2-D copy of
// activation elements within the backend).
absl::Status Copy2D(const OpContext& ctx, void* dst, int64_t dst_stride, const void* src,
                    int64_t src_stride, int width, int64_t rows);

// out = down(activation(x gate^T) * (x up^T)) (+ beta * out), with `scratch` of
// rows * 3I activation elements (gate|up, then the activated rows). Where the backend's GEMM
// runs the SiLU-and-mul epilogue in the gate/up product (CUDA, few rows, activation silu), that
// is one launch writing the activated rows directly.
absl::Status GatedMlp(const OpContext& ctx, const void* x, int rows, int hidden,
                      const GatedMlpWeights& w, kernels::Activation activation, void* scratch,
                      void* out, float beta = 0.0f);

}  // namespace mlaserve::model::ops
