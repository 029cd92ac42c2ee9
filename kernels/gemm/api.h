// gemm: C = alpha * op(A) * op(B) + beta * C (+ bias), strided-batched.
// CPU: OpenBLAS sgemm (f32). CUDA: bf16 in, f32 accumulate, through one of two paths:
//   - the small-M kernel (gemm_small_m.h) for decode-shaped products, m <= kGemmSmallMMaxRows
//     tokens against an nn.Linear weight [n, k]: the weight is streamed once at close to copy
//     bandwidth, split over K across all SMs;
//   - cuBLASLt (bias as its epilogue) for everything else.
// Two optional forms let a layer launch once where it launched twice: a second output (c2,
// for two projections of one input over their stacked weights) and the SiLU-and-mul epilogue
// (the gate/up product of a gated MLP). The second output runs on every path; the SiLU
// epilogue needs the small-M kernel on CUDA (GemmRunsSmallM says whether it applies).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/common/types.h"

namespace mlaserve::kernels {

// The most rows of A (tokens) the CUDA small-M kernel takes.
inline constexpr int kGemmSmallMMaxRows = 16;

// Which CUDA implementation runs a GEMM (ignored on the CPU).
enum class GemmPath : uint8_t {
  kAuto,      // the small-M kernel where it applies and measured faster (GemmRunsSmallM:
              // gemm_small_m.h), else cuBLASLt; MLASERVE_GEMM_SMALL_M=0 in the environment:
              // cuBLASLt (timing comparisons)
  kCublasLt,  // cuBLASLt only (benchmarks' baseline)
  kSmallM,    // the small-M kernel; INVALID_ARGUMENT where it does not apply
};

enum class GemmEpilogue : uint8_t {
  kNone,
  // Gated MLP: B's rows are gate rows [0, n/2) then up rows [n/2, n) (the stacked gate_up
  // weight), and C is [m, n/2]: C[r, j] = silu(g) * u with g, u the products of rows j and
  // n/2 + j, each first rounded to C's dtype (as a GEMM writing them out would round them),
  // silu(g) = g / (1 + exp(-g)) in f32 -- kernels/activation's ActAndMul with act = kSilu,
  // fused. SiLU only: a model with another activation runs the plain GEMM and ActAndMul. n even,
  // b_transposed, no bias, beta = 0, no c2.
  kSiluMul,
};

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
  // Optional second output: product columns [c2_begin, n) go to c2 instead of c (column j at
  // c2[row * ldc2 + j - c2_begin]), so two projections of one input run as one GEMM over their
  // weights stacked row-wise (q_proj | kv_a_proj_with_mqa). c gets columns [0, c2_begin)
  // (ldc >= c2_begin). Bias column j is still bias[j]. batch = 1 only. c2 = null: none.
  void* c2 = nullptr;
  int c2_begin = 0;
  int64_t ldc2 = 0;
  GemmEpilogue epilogue = GemmEpilogue::kNone;
  GemmPath path = GemmPath::kAuto;
};

absl::Status Gemm(const GemmParams& p, const KernelContext& ctx);

absl::Status GemmCpu(const GemmParams& p);
absl::Status GemmCuda(const GemmParams& p, void* stream);

// Whether Gemm(p) on `backend` runs on the CUDA small-M kernel: it takes the shape (bf16,
// 1 <= m <= kGemmSmallMMaxRows, b_transposed, k, lda, ldb (and batch strides) multiples of 8,
// a and b 16-byte aligned, a Hopper-class GPU) and, for kAuto, it measured faster than
// cuBLASLt there (at most 8 tokens; gemm_small_m.h). False on the CPU and in builds without
// CUDA. Callers use it to pick a fused form (kSiluMul) that only this kernel runs.
bool GemmRunsSmallM(const GemmParams& p, Backend backend);

}  // namespace mlaserve::kernels
