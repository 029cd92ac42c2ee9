// CUDA backend of ComputeLogprobs (api.h), one block of 512 threads a row:
//   1. one pass over the raw row: the max, and each thread's kMaxLogprobsTop best tokens in
//      registers (a sorted list of u64 keys, inserted into by a compare-select network);
//   2. a second pass: sum of exp(x - max) in double, a fixed-shape block sum (the same order on
//      every run), lse = max + log(sum) as the CPU computes it;
//   3. the top-n: each warp merges its lanes' lists (n rounds of a warp max of the heads, the
//      winner pops), then warp 0 merges the warps' lists the same way.
// With ranks (prompt logprobs; a template parameter, so the decode step's rows, which ask none,
// run the kernel they ran before): pass 2 also counts the logits >= the token's, an int block
// sum (exact, whatever the order).
// The key orders tokens as the CPU's partial sort does: the logit's IEEE bits made
// order-preserving (descending logit; -0 taken as +0, since the CPU's == ties them; a NaN below
// -infinity), then 0xFFFFFFFF - id (ties to the lower id). Keys are distinct, so every merge
// round has one winner and the ids are exactly the CPU's; the logprobs differ from the CPU's only
// by the sum's order (api.h). Non-finite rows (api.h): the max skips NaN, and SoftmaxTerm /
// TokenLogprob give the CPU's sums and logprobs, never NaN. Launched with PDL: the block waits
// before it reads anything.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/dense_cuda.cuh"
#include "kernels/common/pdl.cuh"
#include "kernels/sampling/api.h"
#include "kernels/sampling/softmax_terms.h"

namespace mlaserve::kernels {
namespace {

constexpr int kLogprobsThreads = 512;
constexpr int kLogprobsWarps = kLogprobsThreads / 32;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kQuietNanBits = 0x7fc00000;

// Larger key = earlier in the CPU's order. Never 0 for a token (the id half is at least
// 0xFFFFFFFF - (vocab - 1) > 0), so 0 marks an empty slot.
__device__ __forceinline__ uint64_t OrderKey(float x, int id) {
  const uint32_t bits = x == 0.0f ? 0u : __float_as_uint(x);
  // A NaN's bits would order above +infinity (or below -infinity by its sign): 0, below every
  // number's (-infinity's is 0x007FFFFF).
  const uint32_t ordered = x != x                        ? 0u
                           : (bits & 0x80000000u) != 0 ? ~bits
                                                       : (bits | 0x80000000u);
  return (static_cast<uint64_t>(ordered) << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(id));
}

__device__ __forceinline__ int32_t KeyId(uint64_t key) {
  return static_cast<int32_t>(0xFFFFFFFFu - static_cast<uint32_t>(key));
}

__device__ __forceinline__ uint64_t WarpMax(uint64_t v) {
  for (int o = 16; o > 0; o >>= 1) {
    const uint64_t w = __shfl_xor_sync(kFullMask, v, o);
    v = w > v ? w : v;
  }
  return v;
}

// A thread's best keys, descending, in registers (every index is a constant after unrolling).
struct TopKeys {
  uint64_t k[kMaxLogprobsTop];

  __device__ __forceinline__ void Clear() {
#pragma unroll
    for (int j = 0; j < kMaxLogprobsTop; ++j) k[j] = 0;
  }
  __device__ __forceinline__ void Insert(uint64_t key) {
    if (key <= k[kMaxLogprobsTop - 1]) return;
    // From the back: slot j takes slot j-1's key if the new key ranks above that one, else the
    // new key if it ranks above slot j's, else keeps its own.
#pragma unroll
    for (int j = kMaxLogprobsTop - 1; j > 0; --j) {
      k[j] = key > k[j - 1] ? k[j - 1] : (key > k[j] ? key : k[j]);
    }
    k[0] = key > k[0] ? key : k[0];
  }
  __device__ __forceinline__ void Pop() {
#pragma unroll
    for (int j = 0; j + 1 < kMaxLogprobsTop; ++j) k[j] = k[j + 1];
    k[kMaxLogprobsTop - 1] = 0;
  }
};

// Row r's token: its drawn id, or its own where row_ids is null (api.h).
__device__ __forceinline__ int32_t RowToken(const LogprobsParams& p, int r) {
  return p.row_ids != nullptr ? p.token_ids[p.row_ids[r]] : p.token_ids[r];
}

template <bool kRanks>
__global__ void __launch_bounds__(kLogprobsThreads)
    LogprobsKernel(const __grid_constant__ LogprobsParams p) {
  __shared__ float fscratch[32];
  __shared__ double dscratch[32];
  __shared__ int iscratch[32];
  __shared__ uint64_t warp_top[kLogprobsWarps][kMaxLogprobsTop];
  cuda::PdlEnter();
  const int r = blockIdx.x, tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int V = p.vocab;
  const float* x = p.logits + static_cast<int64_t>(r) * V;
  LogprobEntry* out = p.out + static_cast<int64_t>(r) * p.out_stride;
  // The CPU refuses a top_n outside [0, out_stride - 1]; here it is clamped, so writes stay in
  // the row.
  const int n = min(max(p.top_n[r], 0), min(min(kMaxLogprobsTop, p.out_stride - 1), V));

  TopKeys top;
  top.Clear();
  float m = -INFINITY;
  for (int i = tid; i < V; i += kLogprobsThreads) {
    const float v = x[i];
    m = fmaxf(m, v);
    if (n > 0) top.Insert(OrderKey(v, i));
  }
  m = cuda::BlockMax(m, fscratch);
  const double md = m;
  // The rank compares with the token's logit; a token outside the vocabulary (the CPU refuses
  // it) compares as NaN, so it counts nothing: rank 0.
  float own = 0.0f;
  if constexpr (kRanks) {
    const int32_t t = RowToken(p, r);
    own = t >= 0 && t < V ? x[t] : __int_as_float(kQuietNanBits);
  }
  double part = 0.0;
  int at_least = 0;
  for (int i = tid; i < V; i += kLogprobsThreads) {
    const float v = x[i];
    part += SoftmaxTerm(v, md, 1.0);  // a max of -infinity: 0s, and TokenLogprob gives -inf
    if constexpr (kRanks) at_least += v >= own ? 1 : 0;
  }
  const double lse = RowLogSumExp(md, cuda::BlockSum(part, dscratch));
  if constexpr (kRanks) {
    const int rank = cuda::BlockSum(at_least, iscratch);
    if (tid == 0) p.ranks[r] = rank;
  }

  if (tid == 0) {
    const int32_t t = RowToken(p, r);
    const bool in_vocab = t >= 0 && t < V;
    const float nan = __int_as_float(kQuietNanBits);
    out[0] = {t, in_vocab ? TokenLogprob(x[t], md, lse) : nan};
  }
  if (n == 0) return;
  // Each warp's n best: the union of its lanes' lists holds them (each list holds a lane's
  // kMaxLogprobsTop >= n best).
  for (int k = 0; k < n; ++k) {
    const uint64_t best = WarpMax(top.k[0]);
    if (top.k[0] == best) top.Pop();
    if (lane == 0) warp_top[warp][k] = best;
  }
  __syncthreads();
  if (warp != 0) return;
  // Lane w < kLogprobsWarps walks warp w's list; the vocabulary holds at least n tokens, so
  // every round's winner is a token (never the empty key 0) and only its lane moves on.
  int next = 0;
  for (int k = 0; k < n; ++k) {
    const uint64_t head = lane < kLogprobsWarps && next < n ? warp_top[lane][next] : 0;
    const uint64_t best = WarpMax(head);
    if (head == best && best != 0) ++next;
    if (lane == 0 && best != 0) {
      const int32_t id = KeyId(best);
      out[1 + k] = {id, TokenLogprob(x[id], md, lse)};
    }
  }
}

}  // namespace

absl::Status ComputeLogprobsCuda(const LogprobsParams& p, void* stream) {
  const cuda::LaunchShape shape{dim3(p.rows), dim3(kLogprobsThreads), 0,
                                static_cast<cudaStream_t>(stream)};
  if (p.ranks != nullptr) return cuda::LaunchPdl("logprobs", shape, LogprobsKernel<true>, p);
  return cuda::LaunchPdl("logprobs", shape, LogprobsKernel<false>, p);
}

}  // namespace mlaserve::kernels
