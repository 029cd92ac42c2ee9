// kTiled path of the routed experts (moe_cuda.h): a grouped GEMM on warp-level tensor-core
// products (mma.sync m16n8k16 bf16, f32 accumulators) for any sm_80+ GPU; the fallback where
// the Hopper kernels do not apply.
//
// Launched over an upper bound of row tiles known on the host, ceil(A/kBM) + min(E, A): each
// block finds its expert from the tile offsets (binary search) and exits if its tile is past
// the last. It computes a kBM x kBN tile of rows(e) x W_e^T on a 3-stage cp.async pipeline.
// The gate_up GEMM gathers x rows through the sorted ids inside its loads, so x is never
// copied. Padding cost: at most one partial tile per active expert.
#include <cuda_bf16.h>

#include "kernels/common/cuda_util.cuh"
#include "kernels/common/dense_cuda.cuh"
#include "kernels/moe/moe_cuda.h"

namespace mlaserve::kernels::moe_cuda {
namespace {

using cuda::CpAsync16;
using cuda::SwizzledOffset;

constexpr int kBM = kTiledRows, kBN = 64, kBK = 64;  // block tile; BK = 8 chunks of 8 bf16
constexpr int kStages = 3;
constexpr int kThreads = 128;                // 4 warps, 2 x 2, each 32 x 32
constexpr int kChunksPerRow = kBK / cuda::kBf16PerChunk;
constexpr int kTileBytes = kBM * kBK * 2;    // == kBN * kBK * 2
constexpr int kSmemBytes = kStages * 2 * kTileBytes;
constexpr int kLoadsPerThread = kBM * kChunksPerRow / kThreads;

__global__ void __launch_bounds__(kThreads) GroupedGemmKernel(const __grid_constant__ GroupedGemmArgs g) {
  const int tile = blockIdx.y;
  if (tile >= g.tile_offsets[g.num_experts]) return;
  int lo = 0, hi = g.num_experts - 1;  // the expert e with tile_offsets[e] <= tile < tile_offsets[e+1]
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (g.tile_offsets[mid] <= tile) lo = mid; else hi = mid - 1;
  }
  const int e = lo;
  const int row0 = g.offsets[e] + (tile - g.tile_offsets[e]) * kBM;
  const int row_end = g.offsets[e + 1];
  const int n0 = blockIdx.x * kBN;

  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t smem_base = cuda::SmemAddress(smem);
  const int tid = threadIdx.x;

  // Each thread loads kLoadsPerThread chunks of A and of B per stage, at fixed (row, chunk).
  const __nv_bfloat16* a_src[kLoadsPerThread];
  const __nv_bfloat16* b_src[kLoadsPerThread];
  bool a_ok[kLoadsPerThread], b_ok[kLoadsPerThread];
  const __nv_bfloat16* w_e = g.w + static_cast<int64_t>(e) * g.w_expert_stride;
#pragma unroll
  for (int q = 0; q < kLoadsPerThread; ++q) {
    const int c = tid + q * kThreads;
    const int row = c / kChunksPerRow, chunk = c % kChunksPerRow;
    const int r = row0 + row;
    a_ok[q] = r < row_end;
    const int64_t src_row = !a_ok[q] ? 0 : (g.sorted != nullptr ? g.sorted[r] / g.top_k : r);
    a_src[q] = g.a + src_row * g.lda + chunk * cuda::kBf16PerChunk;
    const int n = n0 + row;
    b_ok[q] = n < g.n;
    b_src[q] = w_e + static_cast<int64_t>(b_ok[q] ? n : 0) * g.k + chunk * cuda::kBf16PerChunk;
  }
  const int k_tiles = (g.k + kBK - 1) / kBK;
  auto load_stage = [&](int stage, int kt) {
    const uint32_t a_base = smem_base + stage * 2 * kTileBytes;
    const uint32_t b_base = a_base + kTileBytes;
#pragma unroll
    for (int q = 0; q < kLoadsPerThread; ++q) {
      const int c = tid + q * kThreads;
      const int row = c / kChunksPerRow, chunk = c % kChunksPerRow;
      const int col = kt * kBK + chunk * cuda::kBf16PerChunk;
      const bool in_k = col < g.k;  // k % 8 == 0, so a chunk is all in or all out
      CpAsync16(a_base + SwizzledOffset(row, chunk, kChunksPerRow), a_src[q] + kt * kBK, a_ok[q] && in_k);
      CpAsync16(b_base + SwizzledOffset(row, chunk, kChunksPerRow), b_src[q] + kt * kBK, b_ok[q] && in_k);
    }
  };

  const int warp = tid / 32, lane = tid % 32;
  const int wm = warp / 2, wn = warp % 2;
  float acc[2][4][4] = {};
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) load_stage(s, s);
    cuda::CpAsyncCommit();
  }
  for (int kt = 0; kt < k_tiles; ++kt) {
    cuda::CpAsyncWait<kStages - 2>();
    __syncthreads();
    const int next = kt + kStages - 1;
    if (next < k_tiles) load_stage(next % kStages, next);
    cuda::CpAsyncCommit();
    const uint32_t a_base = smem_base + (kt % kStages) * 2 * kTileBytes;
    const uint32_t b_base = a_base + kTileBytes;
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      uint32_t af[2][4];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        const int row = wm * 32 + mi * 16 + (lane % 16);
        cuda::LdMatrixX4(a_base + SwizzledOffset(row, kk * 2 + lane / 16, kChunksPerRow), af[mi]);
      }
      uint32_t bf[4][2];
#pragma unroll
      for (int nj = 0; nj < 2; ++nj) {
        const int row = wn * 32 + nj * 16 + (lane % 8) + 8 * (lane / 16);
        uint32_t r[4];
        cuda::LdMatrixX4(b_base + SwizzledOffset(row, kk * 2 + (lane / 8) % 2, kChunksPerRow), r);
        bf[2 * nj][0] = r[0];
        bf[2 * nj][1] = r[1];
        bf[2 * nj + 1][0] = r[2];
        bf[2 * nj + 1][1] = r[3];
      }
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) cuda::MmaBf16(acc[mi][ni], af[mi], bf[ni][0], bf[ni][1]);
      }
    }
  }
  cuda::CpAsyncWait<0>();

  __nv_bfloat16* c = g.c;
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = row0 + wm * 32 + mi * 16 + lane / 4 + half * 8;
      if (r >= row_end) continue;
      __nv_bfloat16* out_row = c + static_cast<int64_t>(r) * g.ldc;
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
        const int col = n0 + wn * 32 + ni * 8 + 2 * (lane % 4);
        if (col < g.n) out_row[col] = __float2bfloat16_rn(acc[mi][ni][2 * half]);
        if (col + 1 < g.n) out_row[col + 1] = __float2bfloat16_rn(acc[mi][ni][2 * half + 1]);
      }
    }
  }
}

}  // namespace

absl::Status LaunchTiledGemm(const GroupedGemmArgs& g, int max_tiles, cudaStream_t s) {
  const dim3 grid((g.n + kBN - 1) / kBN, max_tiles);
  GroupedGemmKernel<<<grid, kThreads, kSmemBytes, s>>>(g);
  return cuda::LaunchStatus("moe_experts tiled grouped gemm");
}

}  // namespace mlaserve::kernels::moe_cuda
