// The MoE combine's per-token arithmetic (moe_cuda.h, CombineArgs), shared by the combine
// kernels of moe_rows.cu and the one-token down GEMV of moe_stream_gemv.cu, whose last block
// runs the combine itself (FoldedCombine): one definition of each step, so both give the same
// bits.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/common/cuda_util.cuh"
#include "kernels/moe/moe_cuda.h"

namespace mlaserve::kernels::moe_cuda {

inline constexpr int kCombineBatch = 4;  // expert rows in flight per thread in the combine
// The norm epilogue's block, as kernels/norm's RmsNormVecKernel: at most 1024 threads of at most
// 4 16-byte vectors (kCombineNormMaxHidden).
inline constexpr int kNormMaxThreads = 1024;
inline constexpr int kNormMaxVecsPerThread = 4;

// Threads of the norm epilogue's block for a row of `hidden` values, as norm.cu's VecThreads:
// the row's 16-byte vectors rounded up to whole warps, at most kNormMaxThreads.
__host__ __device__ inline int CombineNormThreads(int hidden) {
  const int vecs = hidden / cuda::kBf16PerChunk;
  const int threads = (vecs + cuda::kWarpSize - 1) / cuda::kWarpSize * cuda::kWarpSize;
  return threads < kNormMaxThreads ? threads : kNormMaxThreads;
}

// CombineChunk with the token's row positions and weights already in registers (pos < 0: no
// row), every term's: the same sums in the same order. kFromL2: the rows are read past L1 (other
// blocks of the running kernel wrote them).
template <int kTerms, bool kFromL2 = false>
__device__ __forceinline__ void CombineChunkPreloaded(const CombineArgs& a, int terms, int c,
                                                      const int64_t (&pos)[kTerms], const float (&w)[kTerms],
                                                      float (&sum)[cuda::kBf16PerChunk]) {
  const int chunks = a.hidden / cuda::kBf16PerChunk;
  const auto* ys = reinterpret_cast<const uint4*>(a.ys);
#pragma unroll
  for (int k = 0; k < cuda::kBf16PerChunk; ++k) sum[k] = 0.0f;
#pragma unroll
  for (int q0 = 0; q0 < kTerms; q0 += kCombineBatch) {
    if (q0 >= terms) break;
    uint4 row[kCombineBatch];
#pragma unroll
    for (int b = 0; b < kCombineBatch; ++b) {
      const bool on = q0 + b < terms && pos[q0 + b] >= 0;
      row[b] = !on ? uint4{} : kFromL2 ? __ldcg(ys + pos[q0 + b] * chunks + c) : ys[pos[q0 + b] * chunks + c];
    }
#pragma unroll
    for (int b = 0; b < kCombineBatch; ++b) {
      if (q0 + b >= terms || pos[q0 + b] < 0) continue;
      const auto* v2 = reinterpret_cast<const __nv_bfloat162*>(&row[b]);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float2 v = __bfloat1622float2(v2[k]);
        sum[2 * k] += w[q0 + b] * v.x;
        sum[2 * k + 1] += w[q0 + b] * v.y;
      }
    }
  }
}

// The most terms (routed rows + shared slices) of a token whose positions and weights the norm
// epilogue loads before its PDL wait.
constexpr int kCombinePreTerms = 16;

// The combine's 8 sums of a chunk, rounded to bf16 (the combine's output).
__device__ __forceinline__ uint4 PackSum8(const float (&sum)[cuda::kBf16PerChunk]) {
  uint4 out;
  auto* o2 = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
  for (int k = 0; k < 4; ++k) o2[k] = __floats2bfloat162_rn(sum[2 * k], sum[2 * k + 1]);
  return out;
}

// The residual's chunk `old` plus the combine's (rounded to bf16 first), rounded as HF's add;
// its squares added to ss in element order.
__device__ __forceinline__ uint4 ResidualAddVec(const float (&sum)[cuda::kBf16PerChunk], const uint4& old,
                                                float& ss) {
  uint4 val;
  const auto* o2 = reinterpret_cast<const __nv_bfloat162*>(&old);
  auto* v2 = reinterpret_cast<__nv_bfloat162*>(&val);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const __nv_bfloat162 moe = __floats2bfloat162_rn(sum[2 * k], sum[2 * k + 1]);  // the combine's output
    const float2 m = __bfloat1622float2(moe), r = __bfloat1622float2(o2[k]);
    v2[k] = __floats2bfloat162_rn(r.x + m.x, r.y + m.y);  // residual += x, rounded as HF's add
    const float2 f = __bfloat1622float2(v2[k]);
    ss += f.x * f.x;
    ss += f.y * f.y;
  }
  return val;
}

__device__ __forceinline__ float NormInv(float ss, const CombineArgs& a) { return rsqrtf(ss / a.hidden + a.norm_eps); }

// y's chunk: HF's weight * (x * rsqrt(...)).to(dtype): normalised in f32, rounded, then scaled.
__device__ __forceinline__ uint4 NormVec(const uint4& val, const uint4& wv, float inv) {
  const auto* w2 = reinterpret_cast<const __nv_bfloat162*>(&wv);
  const auto* v2 = reinterpret_cast<const __nv_bfloat162*>(&val);
  uint4 out;
  auto* y2 = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 v = __bfloat1622float2(v2[k]), wf = __bfloat1622float2(w2[k]);
    const float2 n = __bfloat1622float2(__floats2bfloat162_rn(v.x * inv, v.y * inv));
    y2[k] = __floats2bfloat162_rn(wf.x * n.x, wf.y * n.y);
  }
  return out;
}

// Whether a block of kThreads threads can run the combine of a one-token call itself
// (FoldedCombine): a token's terms fit the preloaded arrays, and with the norm epilogue its row
// is at most one vector per thread of CombineNormThreads, at most kNormMaxThreads / kThreads
// such threads per block thread.
template <int kThreads>
__host__ __device__ inline bool FoldedCombineTakes(const CombineArgs& a) {
  static_assert(kNormMaxThreads % kThreads == 0 && kThreads % cuda::kWarpSize == 0);
  return a.num_tokens == 1 && a.top_k + a.shared_slots <= kCombinePreTerms && a.addend == nullptr &&
         a.hidden % cuda::kBf16PerChunk == 0 &&
         (a.residual == nullptr || a.hidden / cuda::kBf16PerChunk <= kNormMaxThreads);
}

// The combine of token 0 (FoldedCombineTakes) by one block of kThreads threads, with the bits of
// CombineKernel (out) or of CombineNormKernel (residual and y): the norm's block of
// CombineNormThreads(hidden) threads is played by "virtual" threads v = threadIdx.x + kThreads * j,
// each with the one vector v that real thread would have, and its block sum (dense_cuda.cuh,
// BlockSum: a xor tree per warp of 32 consecutive threads, then the same tree over the warps'
// sums) is played warp by warp: real warp w holds virtual warps w + (kThreads / 32) * j, whose
// trees involve only its own lanes. The expert rows (ys) are other blocks' writes: read from L2.
// `scratch` holds kNormMaxThreads / 32 floats; the block must not be inside other work using it.
template <int kThreads>
__device__ __forceinline__ void FoldedCombine(const CombineArgs& a, float* scratch) {
  constexpr int kVirtual = kNormMaxThreads / kThreads;  // virtual threads per thread, at most
  constexpr int kWarps = kThreads / cuda::kWarpSize;
  const int vecs = a.hidden / cuda::kBf16PerChunk;
  const int terms = a.top_k + a.shared_slots;
  int64_t pos[kCombinePreTerms];
  float w[kCombinePreTerms];
#pragma unroll
  for (int q = 0; q < kCombinePreTerms; ++q) {
    pos[q] = -1;
    w[q] = 0.0f;
    if (q < a.top_k) {
      pos[q] = __ldcg(a.position + q);
      w[q] = __ldcg(a.topk_weights + q);
    } else if (q < terms) {
      pos[q] = a.shared_base + static_cast<int64_t>(q - a.top_k) * a.num_tokens;
      w[q] = 1.0f;
    }
  }
  float sum[cuda::kBf16PerChunk];
  if (a.residual == nullptr) {
    for (int c = threadIdx.x; c < vecs; c += kThreads) {
      CombineChunkPreloaded<kCombinePreTerms, true>(a, terms, c, pos, w, sum);
      reinterpret_cast<uint4*>(a.out)[c] = PackSum8(sum);
    }
    return;
  }
  auto* res = reinterpret_cast<uint4*>(a.residual);
  const auto* wn = reinterpret_cast<const uint4*>(a.norm_weight);
  auto* y = reinterpret_cast<uint4*>(a.norm_y);
  const int threads = CombineNormThreads(a.hidden);  // the virtual block
  const int warp = threadIdx.x / cuda::kWarpSize, lane = threadIdx.x % cuda::kWarpSize;
  uint4 val[kVirtual];
  float ss[kVirtual];
#pragma unroll
  for (int j = 0; j < kVirtual; ++j) {
    const int v = threadIdx.x + kThreads * j;
    ss[j] = 0.0f;
    val[j] = uint4{};
    if (v < vecs) {
      CombineChunkPreloaded<kCombinePreTerms, true>(a, terms, v, pos, w, sum);
      val[j] = ResidualAddVec(sum, __ldcg(res + v), ss[j]);
      res[v] = val[j];
    }
  }
  // The block sum of the virtual block: each virtual warp's tree, then the tree of their sums.
#pragma unroll
  for (int j = 0; j < kVirtual; ++j) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss[j] += __shfl_xor_sync(0xffffffffu, ss[j], o);
    const int vwarp = warp + kWarps * j;
    if (lane == 0 && vwarp * cuda::kWarpSize < threads) scratch[vwarp] = ss[j];
  }
  __syncthreads();
  const int vwarps = threads / cuda::kWarpSize;
  float total = lane < vwarps ? scratch[lane] : 0.0f;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) total += __shfl_xor_sync(0xffffffffu, total, o);
  const float inv = NormInv(total, a);
#pragma unroll
  for (int j = 0; j < kVirtual; ++j) {
    const int v = threadIdx.x + kThreads * j;
    if (v < vecs) y[v] = NormVec(val[j], __ldg(wn + v), inv);
  }
}

}  // namespace mlaserve::kernels::moe_cuda
