// The small-M GEMM kernel (gemm_small_m.h has the design; gemm_small_m.cu plans and launches it).
//
// Fragment mapping (PTX m16n8k16, bf16, row.col). Lane l has group g = l / 4 and quad position
// q = l % 4. For one 32-wide K chunk it loads, as one 16-byte vector each, K values
// [8q, 8q + 8) of weight rows g and g + 8 and of token g, and runs two k16 products s = 0, 1.
// Product s takes physical K offsets 8q + 4s + {0, 1, 2, 3}: logical column 2q + j of the
// fragment is offset 8q + 4s + j and logical column 2q + 8 + j is 8q + 4s + 2 + j (j = 0, 1).
// Over q that is a bijection of the product's 16 logical columns onto 16 physical offsets, the
// same one for the A fragment (weights: a0a1 = row g, a2a3 = row g + 8, a4a5 / a6a7 the +8
// columns) and the B fragment (tokens: b0b1, b2b3), so every product sums w[row][k] * x[tok][k]
// over matching k. In registers: product s uses the vector's words 2s and 2s + 1.
#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include "kernels/common/cuda_util.cuh"
#include "kernels/common/dense_cuda.cuh"
#include "kernels/common/pdl.cuh"
#include "kernels/gemm/gemm_small_m_kernel.cuh"

namespace mlaserve::kernels::gemm_cuda::small_m {
namespace {

namespace cg = cooperative_groups;

constexpr int kChunksInFlight = 4;     // 16-byte weight loads per row pair in flight per lane

// Weights are read once: bypass L1, and ask L2 for the whole 256-byte segment (the CTA's other
// warps read the neighbouring 64-byte pieces of the same rows).
__device__ __forceinline__ uint4 LoadWeight(const __nv_bfloat16* p) {
  uint4 v;  // volatile: never speculated past its predicate (the K tail reads past the row)
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

// Token rows are small and read by every CTA of a K slice: keep them in L1.
__device__ __forceinline__ uint4 LoadToken(const __nv_bfloat16* p) {
  return __ldg(reinterpret_cast<const uint4*>(p));
}

template <typename T>
__device__ __forceinline__ float RoundTo(float v) {
  return cuda::ToF32(cuda::FromF32<T>(v));
}

// kTiles: token n8 tiles (1: m <= 8, 2: m <= 16), also the m16 weight tiles per warp, so that
// at 16 tokens a warp reuses each token vector for 32 weight rows.
template <int kTiles, typename OutT, bool kSiluMul>
__global__ void __launch_bounds__(kThreads) SmallMGemmKernel(const __grid_constant__ SmallMArgs p) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  constexpr int kRows = kRowsPerTile * kTiles;   // weight rows of the CTA
  constexpr int kCols = kTokensPerTile * kTiles;  // token columns
  constexpr int kUnroll = kChunksInFlight / kTiles;
  __shared__ float red[kWarps][kRows][kCols];  // each warp's partial sums
  __shared__ float part[kRows][kCols];         // the CTA's (read by the cluster's rank 0)

  const int lane = threadIdx.x % cuda::kWarpSize, warp = threadIdx.x / cuda::kWarpSize;
  const int g = lane / 4, q = lane % 4;
  const int64_t entry = blockIdx.z;
  const __nv_bfloat16* a = p.a + entry * p.stride_a;
  const __nv_bfloat16* b = p.b + entry * p.stride_b;

  // Weight rows of this lane: rows g and g + 8 of each m16 tile. SiLU-and-mul: a tile is 8
  // features, its gate rows then its up rows (the stacked weight's rows f and n/2 + f).
  const __nv_bfloat16* w_row[kTiles][2];
  bool w_ok[kTiles][2];
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      int64_t row;
      if constexpr (kSiluMul) {
        const int half = p.n / 2;
        const int feature = (blockIdx.x * kTiles + j) * (kRowsPerTile / 2) + g;
        w_ok[j][h] = feature < half;
        row = h == 0 ? feature : half + feature;
      } else {
        row = (static_cast<int64_t>(blockIdx.x) * kTiles + j) * kRowsPerTile + g + 8 * h;
        w_ok[j][h] = row < p.n;
      }
      w_row[j][h] = b + (w_ok[j][h] ? row : 0) * p.ldb + q * cuda::kBf16PerChunk;
    }
  }
  const __nv_bfloat16* x_row[kTiles];
  bool x_ok[kTiles];
#pragma unroll
  for (int t = 0; t < kTiles; ++t) {
    const int token = t * kTokensPerTile + g;
    x_ok[t] = token < p.m;
    x_row[t] = a + (x_ok[t] ? token : 0) * p.lda + q * cuda::kBf16PerChunk;
  }

  // The CTA's weight slice is the kernel's input that nothing in the step writes: ask L2 for
  // (the first prefetch_chunks chunks of) it now, so that with PDL it streams in while the
  // previous kernel finishes (kernels/common/pdl.cuh, rule 3). One bulk prefetch per weight row.
  if (p.prefetch_chunks > 0) {
    const int c0 = blockIdx.y * p.chunks_per_cta;
    const int64_t k0 = static_cast<int64_t>(c0) * kChunkK;
    const int64_t k1 = min(static_cast<int64_t>(p.k),
                           static_cast<int64_t>(min(c0 + p.prefetch_chunks, p.chunks)) * kChunkK);
    for (int r = threadIdx.x; r < kRows && k1 > k0; r += kThreads) {
      int64_t row;
      bool ok;
      if constexpr (kSiluMul) {  // tile j: its 8 features' gate rows, then their up rows
        const int j = r / kRowsPerTile, i = r % kRowsPerTile;
        const int feature = (blockIdx.x * kTiles + j) * (kRowsPerTile / 2) + i % (kRowsPerTile / 2);
        ok = feature < p.n / 2;
        row = i < kRowsPerTile / 2 ? feature : p.n / 2 + feature;
      } else {
        row = static_cast<int64_t>(blockIdx.x) * kRows + r;
        ok = row < p.n;
      }
      if (ok) cuda::PrefetchL2(b + row * p.ldb + k0, static_cast<uint32_t>((k1 - k0) * 2));
    }
  }

  // Software-pipelined: the loads of the next group of kUnroll chunks are issued before the
  // products of the current one, so a lane keeps a whole group of 16-byte weight loads in flight
  // while it multiplies (without the second buffer the compiler interleaves each load with its
  // product and a warp waits out one load latency per chunk).
  float acc[kTiles][kTiles][4] = {};  // [weight tile][token tile][fragment]
  const int c_begin = blockIdx.y * p.chunks_per_cta;
  const int c_end = min(c_begin + p.chunks_per_cta, p.chunks);
  constexpr int kStep = kWarps * kUnroll;  // chunks between a warp's groups
  uint4 w[2][kUnroll][kTiles][2];
  uint4 x[2][kUnroll][kTiles];
  auto in_range = [&](int c) {
    return c < c_end && static_cast<int64_t>(c) * kChunkK + q * cuda::kBf16PerChunk < p.k;  // k % 8 == 0
  };
  auto load_weights = [&](int buf, int c0) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * kWarps;
      const int64_t k0 = static_cast<int64_t>(c) * kChunkK;
      const bool in = in_range(c);
#pragma unroll
      for (int j = 0; j < kTiles; ++j) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          w[buf][u][j][h] =
              in && w_ok[j][h] ? LoadWeight(w_row[j][h] + k0) : make_uint4(0, 0, 0, 0);
        }
      }
    }
  };
  auto load_tokens = [&](int buf, int c0) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + u * kWarps;
      const int64_t k0 = static_cast<int64_t>(c) * kChunkK;
      const bool in = in_range(c);
#pragma unroll
      for (int t = 0; t < kTiles; ++t) {
        x[buf][u][t] = in && x_ok[t] ? LoadToken(x_row[t] + k0) : make_uint4(0, 0, 0, 0);
      }
    }
  };
  // The warp's first two groups of weights go in flight before the wait (rule 3 again: into
  // registers, where nothing can evict them), so the first DRAM round trip overlaps the
  // previous kernel's tail; the tokens, which that kernel may be writing, only after it.
  const int first = c_begin + warp;
  const bool early = p.weights_early && first < c_end;
  if (early) {
    load_weights(0, first);
    if (first + kStep < c_end) load_weights(1, first + kStep);
  }

  cuda::PdlEnter();  // nothing global but the weights is touched above

  auto multiply_group = [&](int buf) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int s = 0; s < 2; ++s) {
#pragma unroll
        for (int j = 0; j < kTiles; ++j) {
          const uint4& lo = w[buf][u][j][0];
          const uint4& hi = w[buf][u][j][1];
          const uint32_t af[4] = {s ? lo.z : lo.x, s ? hi.z : hi.x, s ? lo.w : lo.y,
                                  s ? hi.w : hi.y};
#pragma unroll
          for (int t = 0; t < kTiles; ++t) {
            const uint4& xv = x[buf][u][t];
            cuda::MmaBf16(acc[j][t], af, s ? xv.z : xv.x, s ? xv.w : xv.y);
          }
        }
      }
    }
  };
  if (first < c_end) {
    if (!early) load_weights(0, first);
    load_tokens(0, first);
  }
  for (int c0 = first; c0 < c_end; c0 += 2 * kStep) {
    if (c0 + kStep < c_end) {
      if (!(early && c0 == first)) load_weights(1, c0 + kStep);
      load_tokens(1, c0 + kStep);
    }
    multiply_group(0);
    if (c0 + kStep >= c_end) break;
    if (c0 + 2 * kStep < c_end) {
      load_weights(0, c0 + 2 * kStep);
      load_tokens(0, c0 + 2 * kStep);
    }
    multiply_group(1);
  }

  // Fragment i of acc[j][t]: weight row g (+8 for i >= 2) of tile j, token 2q + (i & 1) of
  // tile t. Sum the warps in a fixed order.
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        red[warp][j * kRowsPerTile + g + (i >= 2 ? 8 : 0)][t * kTokensPerTile + 2 * q + (i & 1)] =
            acc[j][t][i];
      }
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < kRows * kCols; e += kThreads) {
    const int r = e / kCols, col = e % kCols;
    float v = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) v += red[w][r][col];
    part[r][col] = v;
  }

  // The cluster's CTAs (gridDim.y of them, one per K slice) hold the partial sums of the same
  // outputs; rank 0 adds them in rank order and writes.
  const int splits = gridDim.y;
  cg::cluster_group cluster = cg::this_cluster();
  if (splits > 1) {
    cluster.sync();
    if (cluster.block_rank() != 0) {
      cluster.sync();  // rank 0 reads this CTA's `part` until then
      return;
    }
  } else {
    __syncthreads();
  }
  auto total = [&](int r, int col) {
    if (splits == 1) return part[r][col];
    float v = 0.0f;
    for (int s = 0; s < splits; ++s) v += cluster.map_shared_rank(&part[0][0], s)[r * kCols + col];
    return v;
  };

  OutT* c = static_cast<OutT*>(p.c) + entry * p.stride_c;
  if constexpr (kSiluMul) {
    constexpr int kFeatures = kRows / 2;
    for (int e = threadIdx.x; e < kFeatures * p.m; e += kThreads) {
      const int f = e / p.m, token = e % p.m;
      const int j = f / (kRowsPerTile / 2), i = f % (kRowsPerTile / 2);
      const int feature = (blockIdx.x * kTiles + j) * (kRowsPerTile / 2) + i;
      if (feature >= p.n / 2) continue;
      // As SiluAndMul over the rounded products of an unfused GEMM.
      const float gate = RoundTo<OutT>(p.alpha * total(j * kRowsPerTile + i, token));
      const float up = RoundTo<OutT>(p.alpha * total(j * kRowsPerTile + i + 8, token));
      c[static_cast<int64_t>(token) * p.ldc + feature] =
          cuda::FromF32<OutT>(gate / (1.0f + expf(-gate)) * up);
    }
  } else {
    const auto* bias = static_cast<const OutT*>(p.bias);
    auto* c2 = static_cast<OutT*>(p.c2);
    for (int e = threadIdx.x; e < kRows * p.m; e += kThreads) {
      const int r = e / p.m, token = e % p.m;
      const int n = blockIdx.x * kRows + r;
      if (n >= p.n) continue;
      OutT* dst = n < p.c2_begin ? c + static_cast<int64_t>(token) * p.ldc + n
                                 : c2 + static_cast<int64_t>(token) * p.ldc2 + (n - p.c2_begin);
      float v = p.alpha * total(r, token);
      if (p.beta != 0.0f) v += p.beta * cuda::ToF32(*dst);
      if (bias != nullptr) v += cuda::ToF32(bias[n]);
      *dst = cuda::FromF32<OutT>(v);
    }
  }
  if (splits > 1) cluster.sync();  // the other ranks may leave once their sums are read
#endif
}

}  // namespace

KernelFn KernelFor(int tiles8, bool f32_out, bool silu) {
  if (tiles8 == 1) {
    if (f32_out) return silu ? SmallMGemmKernel<1, float, true> : SmallMGemmKernel<1, float, false>;
    return silu ? SmallMGemmKernel<1, __nv_bfloat16, true> : SmallMGemmKernel<1, __nv_bfloat16, false>;
  }
  if (f32_out) return silu ? SmallMGemmKernel<2, float, true> : SmallMGemmKernel<2, float, false>;
  return silu ? SmallMGemmKernel<2, __nv_bfloat16, true> : SmallMGemmKernel<2, __nv_bfloat16, false>;
}

}  // namespace mlaserve::kernels::gemm_cuda::small_m
