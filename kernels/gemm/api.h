// gemm: C = alpha * op(A) * op(B) + beta * C (+ bias), strided-batched.
// CPU: OpenBLAS sgemm (f32). CUDA: cuBLASLt (bf16 in, f32 accumulate), bias as an epilogue.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/common/types.h"

namespace mlaserve::kernels {

struct GemmParams {
  DType dtype = DType::kF32;  // of A, B, C and bias; CPU supports f32, CUDA bf16 (and f32)
  int m = 0, n = 0, k = 0;
  int batch = 1;
  const void* a = nullptr;  // [batch][m, k] row-major, row stride lda, batch stride stride_a
  int64_t lda = 0, stride_a = 0;
  // b_transposed = true : B is [n, k] row-major (nn.Linear weight, out x in): C = A * B^T.
  // b_transposed = false: B is [k, n] row-major: C = A * B.
  const void* b = nullptr;
  int64_t ldb = 0, stride_b = 0;
  bool b_transposed = true;
  void* c = nullptr;  // [batch][m, n] row-major, row stride ldc, batch stride stride_c
  int64_t ldc = 0, stride_c = 0;
  const void* bias = nullptr;  // [n] or null, added to every row of C
  float alpha = 1.0f;
  float beta = 0.0f;  // beta != 0 reads C (accumulate)
  // CUDA only: C and bias are f32 while A and B are `dtype` (bf16 in, f32 out: router logits,
  // LM-head logits). Ignored when dtype is f32.
  bool c_f32 = false;
};

absl::Status Gemm(const GemmParams& p, const KernelContext& ctx);

absl::Status GemmCpu(const GemmParams& p);
absl::Status GemmCuda(const GemmParams& p, void* stream);

}  // namespace mlaserve::kernels
