// The small-M GEMM kernel's contract with its launch plan (internal to kernels/gemm): the CTA
// shape both sides count in, the normalised arguments, and the kernel instantiation for a
// (token tiles, output dtype, epilogue) choice. gemm_small_m_kernel.cu holds the kernel,
// gemm_small_m.cu the plan and the launch; gemm_small_m.h has the design.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/common/cuda_util.cuh"

namespace mlaserve::kernels::gemm_cuda::small_m {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * cuda::kWarpSize;
constexpr int kChunkK = 32;            // K values of one warp step: 4 lanes x 8
constexpr int kRowsPerTile = 16;       // weight rows of one m16 fragment
constexpr int kTokensPerTile = 8;      // tokens of one n8 fragment

// Normalised on the host: element pointers and strides, no second output = c2_begin n.
struct SmallMArgs {
  const __nv_bfloat16* a;
  int64_t lda, stride_a;
  const __nv_bfloat16* b;
  int64_t ldb, stride_b;
  void* c;
  int64_t ldc, stride_c;
  void* c2;
  int64_t ldc2;
  int c2_begin;
  const void* bias;
  float alpha, beta;
  int m, n, k;
  int chunks, chunks_per_cta;
  int prefetch_chunks;  // of each CTA's chunks, from its first: prefetched into L2 before the wait
  bool weights_early;   // each warp's first two groups of weight loads issued before the wait
};

using KernelFn = void (*)(SmallMArgs);

// The kernel for `tiles8` token n8 tiles (1: m <= 8, 2: m <= 16), f32 or bf16 output, with or
// without the SiLU-and-mul epilogue.
KernelFn KernelFor(int tiles8, bool f32_out, bool silu);

}  // namespace mlaserve::kernels::gemm_cuda::small_m
