// Row passes of the routed experts on CUDA (moe_cuda.h): the permutation's x-row copy when it
// runs apart from the ranking, act(gate) * up where the product does not fuse it (the grouped
// GEMMs fuse SiLU alone), and the combine. All are bandwidth-bound: 16-byte loads and stores,
// grids sized by the shape.
#include <cuda_bf16.h>

#include <algorithm>

#include "absl/strings/str_cat.h"

#include "kernels/common/activation_math.h"
#include "kernels/common/cuda_util.cuh"
#include "kernels/common/dense_cuda.cuh"
#include "kernels/common/device_arch.h"
#include "kernels/common/env_switch.h"
#include "kernels/common/pdl.cuh"
#include "kernels/moe/moe_cuda.h"

namespace mlaserve::kernels::moe_cuda {
namespace {

constexpr int kEltThreads = 256;
constexpr int kRowWarps = kEltThreads / cuda::kWarpSize;
constexpr int kCombineBatch = 4;  // expert rows in flight per thread in the combine
// The norm epilogue's block, as kernels/norm's RmsNormVecKernel: at most 1024 threads of at most
// 4 16-byte vectors (kCombineNormMaxHidden).
constexpr int kNormMaxThreads = 1024;
constexpr int kNormMaxVecsPerThread = 4;
constexpr int kGatherUnroll = 8;       // 16-byte loads in flight per lane: 4 KiB a warp pass (hidden 2048)
constexpr int kGatherBlocksPerSm = 4;  // resident at once (__launch_bounds__): 1024 threads an SM

// xg[r] = x[sorted[r] / top_k] for the rows r in [0, offsets[E]): a warp per row, rows in
// destination order (the grid's warps write consecutive rows), each lane loading kGatherUnroll
// 16-byte vectors of the row before it stores any; the warp's next sorted[] entry is loaded
// (and used only in the next iteration) before this row's loads, so its latency hides behind
// the copy. The x rows, read top_k times each, mostly come from L2.
__global__ void __launch_bounds__(kEltThreads, kGatherBlocksPerSm)
    GatherRowsKernel(const uint4* x, const int32_t* sorted, const int32_t* offsets, int num_experts, int top_k,
                     int row_chunks, uint4* xg) {
  cuda::PdlEnter();  // sorted and offsets are the permutation's, the kernel just before
  const int rows = offsets[num_experts];
  const int lane = threadIdx.x % cuda::kWarpSize;
  const int stride = gridDim.x * kRowWarps;
  int r = blockIdx.x * kRowWarps + threadIdx.x / cuda::kWarpSize;
  int assignment = r < rows ? sorted[r] : 0;
  for (; r < rows; r += stride) {
    const int next = r + stride;
    const int next_assignment = next < rows ? sorted[next] : 0;
    const uint4* src = x + static_cast<int64_t>(assignment / top_k) * row_chunks;
    uint4* dst = xg + static_cast<int64_t>(r) * row_chunks;
    for (int c0 = 0; c0 < row_chunks; c0 += cuda::kWarpSize * kGatherUnroll) {
      uint4 v[kGatherUnroll];
#pragma unroll
      for (int u = 0; u < kGatherUnroll; ++u) {
        const int c = c0 + u * cuda::kWarpSize + lane;
        if (c < row_chunks) v[u] = src[c];
      }
#pragma unroll
      for (int u = 0; u < kGatherUnroll; ++u) {
        const int c = c0 + u * cuda::kWarpSize + lane;
        if (c < row_chunks) dst[c] = v[u];
      }
    }
    assignment = next_assignment;
  }
}

// act(g) * u of 8 bf16 pairs in f32 (activation_math.h: the CPU backend's formulas). For SiLU
// that is moe_silu.cuh's SiluMul expression, g / (1 + exp(-g)) * u: what the fused epilogues
// compute, so a fused and an unfused path give the same bits.
template <Activation A>
struct ActMul8 {
  __device__ __forceinline__ uint4 operator()(uint4 g, uint4 u) const {
    const auto* g2 = reinterpret_cast<const __nv_bfloat162*>(&g);
    const auto* u2 = reinterpret_cast<const __nv_bfloat162*>(&u);
    uint4 out;
    auto* o2 = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 gv = __bfloat1622float2(g2[k]), uv = __bfloat1622float2(u2[k]);
      o2[k] = __floats2bfloat162_rn(Activate<A>(gv.x) * uv.x, Activate<A>(gv.y) * uv.y);
    }
    return out;
  }
};

// Stacked rows [gate | up] (row stride 2*inter): gate <- Mul8(gate, up) in place, eight
// columns per thread (each thread reads and writes only its own columns).
template <class Mul8>
__global__ void __launch_bounds__(kEltThreads)
    ActMulStackedKernel(__nv_bfloat16* h, const int32_t* offsets, int num_experts, int inter) {
  cuda::PdlEnter();  // the row passes launch with PDL (kernels/common/pdl.cuh)
  const int chunks = inter / cuda::kBf16PerChunk;
  const int64_t total = static_cast<int64_t>(offsets[num_experts]) * chunks;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / chunks, j = (i - r * chunks) * cuda::kBf16PerChunk;
    uint4* gate = reinterpret_cast<uint4*>(h + r * 2 * inter + j);
    *gate = Mul8{}(*gate, *reinterpret_cast<const uint4*>(h + r * 2 * inter + inter + j));
  }
}

// Interleaved rows (MoeGateUpLayout::kInterleaved8: columns [16j, 16j+8) gate, [16j+8, 16j+16)
// up of features [8j, 8j+8)), compacted in place into the row's first inter columns. One warp
// per row, 32 feature chunks per step: step s reads columns [512s, 512s+512) and writes
// [256s, 256s+256), which only this step (before the __syncwarp) or earlier steps read.
template <class Mul8>
__global__ void __launch_bounds__(kEltThreads)
    ActMulInterleavedKernel(__nv_bfloat16* h, const int32_t* offsets, int num_experts, int inter) {
  cuda::PdlEnter();
  const int rows = offsets[num_experts];
  const int chunks = inter / cuda::kBf16PerChunk;
  const int lane = threadIdx.x % cuda::kWarpSize;
  for (int r = blockIdx.x * kRowWarps + threadIdx.x / cuda::kWarpSize; r < rows; r += gridDim.x * kRowWarps) {
    __nv_bfloat16* row = h + static_cast<int64_t>(r) * 2 * inter;
    for (int j0 = 0; j0 < chunks; j0 += cuda::kWarpSize) {
      const int j = j0 + lane;
      uint4 g{}, u{};
      if (j < chunks) {
        g = *reinterpret_cast<const uint4*>(row + 2 * j * cuda::kBf16PerChunk);
        u = *reinterpret_cast<const uint4*>(row + (2 * j + 1) * cuda::kBf16PerChunk);
      }
      __syncwarp();
      if (j < chunks) *reinterpret_cast<uint4*>(row + j * cuda::kBf16PerChunk) = Mul8{}(g, u);
    }
  }
}

// One row pass (the layout's kernel) with Mul8.
template <class Mul8>
absl::Status LaunchRowMul(const char* name, __nv_bfloat16* h, const int32_t* offsets, int num_experts,
                          int inter, int max_rows, bool interleaved, cudaStream_t s) {
  if (max_rows <= 0) return absl::OkStatus();
  cuda::LaunchShape shape;
  shape.block = dim3(kEltThreads);
  shape.stream = s;
  if (interleaved) {
    shape.grid = dim3(cuda::GridFor(max_rows, kRowWarps));
    return cuda::LaunchPdl(name, shape, ActMulInterleavedKernel<Mul8>, h, offsets, num_experts, inter);
  }
  const int64_t items = static_cast<int64_t>(max_rows) * (inter / cuda::kBf16PerChunk);
  shape.grid = dim3(cuda::GridFor(items, kEltThreads));
  return cuda::LaunchPdl(name, shape, ActMulStackedKernel<Mul8>, h, offsets, num_experts, inter);
}

// sum[0..8) = sum_j w[t, j] * ys[position[t*top_k + j], 8c..8c+8) in j order, then the
// shared slices' rows (weight 1) in slice order, then (kAddend, where a.addend is set) the
// addend's row (weight 1): kCombineBatch expert rows loaded before they are summed, f32 (the
// baseline's order without shared rows: the same bytes). The addend's chunk is loaded first,
// so that its load is in flight with the rows'; kAddend false leaves its code out (the kernels
// that never get one keep their registers).
template <bool kAddend>
__device__ __forceinline__ void CombineChunk(const CombineArgs& a, int64_t t, int c,
                                             float (&sum)[cuda::kBf16PerChunk]) {
  const int chunks = a.hidden / cuda::kBf16PerChunk;
  const auto* ys = reinterpret_cast<const uint4*>(a.ys);
  const int32_t* position = a.position + t * a.top_k;
  const float* weight = a.topk_weights + t * a.top_k;
  const bool add = kAddend && a.addend != nullptr;
  const uint4 addend = add ? reinterpret_cast<const uint4*>(a.addend)[t * chunks + c] : uint4{};
#pragma unroll
  for (int k = 0; k < cuda::kBf16PerChunk; ++k) sum[k] = 0.0f;
  const int terms = a.top_k + a.shared_slots;
  for (int q0 = 0; q0 < terms; q0 += kCombineBatch) {
    uint4 row[kCombineBatch];
    float w[kCombineBatch];
    bool ok[kCombineBatch];
#pragma unroll
    for (int b = 0; b < kCombineBatch; ++b) {
      const int q = q0 + b;
      int64_t pos = -1;
      if (q < a.top_k) {
        pos = position[q];
      } else if (q < terms) {
        pos = a.shared_base + static_cast<int64_t>(q - a.top_k) * a.num_tokens + t;
      }
      ok[b] = pos >= 0;
      w[b] = !ok[b] ? 0.0f : q < a.top_k ? weight[q] : 1.0f;
      row[b] = ok[b] ? ys[pos * chunks + c] : uint4{};
    }
#pragma unroll
    for (int b = 0; b < kCombineBatch; ++b) {
      if (!ok[b]) continue;
      const auto* v2 = reinterpret_cast<const __nv_bfloat162*>(&row[b]);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float2 v = __bfloat1622float2(v2[k]);
        sum[2 * k] += w[b] * v.x;
        sum[2 * k + 1] += w[b] * v.y;
      }
    }
  }
  if (add) {  // sum += 1 * v: the bits of one more term of weight 1
    const auto* v2 = reinterpret_cast<const __nv_bfloat162*>(&addend);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 v = __bfloat1622float2(v2[k]);
      sum[2 * k] += v.x;
      sum[2 * k + 1] += v.y;
    }
  }
}

// out[t, 8c..8c+8) = the combine of token t's rows (CombineChunk), one rounding: one thread per
// 16-byte chunk of an output row.
__global__ void __launch_bounds__(kEltThreads) CombineKernel(const __grid_constant__ CombineArgs a) {
  cuda::PdlEnter();
  const int chunks = a.hidden / cuda::kBf16PerChunk;
  const int64_t total = static_cast<int64_t>(a.num_tokens) * chunks;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / chunks;
    const int c = static_cast<int>(i - t * chunks);
    float sum[cuda::kBf16PerChunk];
    CombineChunk<false>(a, t, c, sum);
    uint4 out;
    auto* o2 = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
    for (int k = 0; k < 4; ++k) o2[k] = __floats2bfloat162_rn(sum[2 * k], sum[2 * k + 1]);
    reinterpret_cast<uint4*>(a.out)[i] = out;
  }
}

// CombineChunk with the token's row positions and weights already in registers (pos < 0: no
// row), every term's: the same sums in the same order.
template <int kTerms>
__device__ __forceinline__ void CombineChunkPreloaded(const CombineArgs& a, int terms, int c,
                                                      const int32_t (&pos)[kTerms], const float (&w)[kTerms],
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
      row[b] = q0 + b < terms && pos[q0 + b] >= 0 ? ys[static_cast<int64_t>(pos[q0 + b]) * chunks + c] : uint4{};
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
// epilogue loads before its PDL wait: 16 under the 512-thread bound (V2-Lite: 6 + 2), 12 under
// the 1024-thread one, whose 64 registers hold no more without spilling (ptxas: 60 bytes a
// thread at 16 terms, none at 12; DeepSeek-V3: 8 + 1). A token with more terms loads them after
// the wait (CombineChunk).
template <int kMaxThreads>
constexpr int kCombinePreTerms = kMaxThreads > 512 ? 12 : 16;

// The combine with the MoeResidualNorm epilogue, one block per token, shaped as kernels/norm's
// one-pass RMSNorm (norm.cu, RmsNormVecKernel: the same threads per row, the same vectors per
// thread, the same block sum), so its bits equal the combine followed by that RmsNorm: the MoE
// output rounded to bf16, residual += it (rounded), y = bf16(w * bf16(residual * inv_rms)).
// Before its PDL wait it loads what earlier kernels wrote (kernels/common/pdl.cuh, rule 3): the
// token's row positions and routing weights (the routing launch's, at least three kernels back),
// its residual row (the attention's norm, further back) and the norm weight, through L2; only the
// expert rows (the down product's, the kernel just before) wait. Up to kCombinePreTerms terms;
// early_loads false (MLASERVE_MOE_COMBINE_EARLY_LOADS=0): everything after the wait.
// With release_early the kernel lets the next one launch at its start, not after its wait: at
// batch 1 that is the next layer's q | kv_a (kernels/gemm's small-M kernel, which streams its
// weights before its own wait), so those weights load under the down product's tail instead of
// after it (H200, V2-Lite decode b 1: 1.983-2.004 ms against 2.005-2.019 in the same call;
// docs/BENCHMARKS.md, fortieth session); what that asks of the kernel after it: pdl.cuh, rule 3.
// Instantiations (LaunchCombine): kEarlyLoads for the stream path (decode steps: about one wave
// of blocks, whose prologue overlaps the kernel before), with kVecs = 1 and a launch bound of the
// row's threads rounded up to 512 or 1024 where one vector a thread covers the row, so that the
// preloaded positions, weights and vectors stay in registers (the kVecs = 4 form, left for rows
// of more than 1024 vectors, spills 158 bytes a thread at the 1024-thread bound's 64 registers;
// V2-Lite ran it before: decode b 1 2.013-2.021 ms against 1.992-2.006 without the spill);
// and without the early loads, with the addend (CombineArgs::addend), for the grouped paths
// (prefill: many waves, where the early loads' registers would cost every block), kVecs = 1
// where one vector a thread covers the row (hidden <= 8192), for the registers of the other three.
template <bool kEarlyLoads, int kVecs, int kMaxThreads = kNormMaxThreads>
__global__ void __launch_bounds__(kMaxThreads) CombineNormKernel(const __grid_constant__ CombineArgs a) {
  static_assert(kVecs >= 1 && kVecs <= kNormMaxVecsPerThread);
  __shared__ float scratch[cuda::kWarpSize];
  const int64_t t = blockIdx.x;
  const int vecs = a.hidden / cuda::kBf16PerChunk;
  auto* res = reinterpret_cast<uint4*>(a.residual + t * a.hidden);
  const auto* w = reinterpret_cast<const uint4*>(a.norm_weight);
  auto* y = reinterpret_cast<uint4*>(a.norm_y + t * a.hidden);
  const int terms = a.top_k + a.shared_slots;
  if (kEarlyLoads && a.release_early) cuda::PdlReleaseDependents();
  constexpr int kPre = kCombinePreTerms<kMaxThreads>;
  const bool pre = kEarlyLoads && a.early_loads && terms <= kPre;
  int32_t pre_pos[kPre];
  float pre_w[kPre];
  uint4 pre_res[kVecs], pre_wv[kVecs];
  if (pre) {
#pragma unroll
    for (int q = 0; q < kPre; ++q) {
      pre_pos[q] = -1;
      pre_w[q] = 0.0f;
      if (q < a.top_k) {
        pre_pos[q] = __ldcg(a.position + t * a.top_k + q);
        pre_w[q] = __ldcg(a.topk_weights + t * a.top_k + q);
      } else if (q < terms) {
        pre_pos[q] = a.shared_base + (q - a.top_k) * a.num_tokens + static_cast<int32_t>(t);
        pre_w[q] = 1.0f;
      }
    }
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      const int at = threadIdx.x + i * blockDim.x;
      if (at >= vecs) break;
      pre_res[i] = __ldcg(res + at);
      pre_wv[i] = __ldg(w + at);
    }
  }
  cuda::PdlEnter();
  uint4 val[kVecs];
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const int at = threadIdx.x + i * blockDim.x;
    if (at >= vecs) break;
    // Without early loads the residual's chunk goes first, in flight with the expert rows'.
    const uint4 ahead = kEarlyLoads ? uint4{} : res[at];
    float sum[cuda::kBf16PerChunk];
    if (pre) {
      CombineChunkPreloaded(a, terms, at, pre_pos, pre_w, sum);
    } else {
      CombineChunk<!kEarlyLoads>(a, t, at, sum);
    }
    const uint4 old = pre ? pre_res[i] : kEarlyLoads ? res[at] : ahead;
    const auto* o2 = reinterpret_cast<const __nv_bfloat162*>(&old);
    auto* v2 = reinterpret_cast<__nv_bfloat162*>(&val[i]);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const __nv_bfloat162 moe = __floats2bfloat162_rn(sum[2 * k], sum[2 * k + 1]);  // the combine's output
      const float2 m = __bfloat1622float2(moe), r = __bfloat1622float2(o2[k]);
      v2[k] = __floats2bfloat162_rn(r.x + m.x, r.y + m.y);  // residual += x, rounded as HF's add
      const float2 f = __bfloat1622float2(v2[k]);
      ss += f.x * f.x;
      ss += f.y * f.y;
    }
    res[at] = val[i];
  }
  ss = cuda::BlockSum(ss, scratch);
  const float inv = rsqrtf(ss / a.norm_dim + a.norm_eps);
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const int at = threadIdx.x + i * blockDim.x;
    if (at >= vecs) break;
    const uint4 wv = pre ? pre_wv[i] : w[at];
    const auto* w2 = reinterpret_cast<const __nv_bfloat162*>(&wv);
    const auto* v2 = reinterpret_cast<const __nv_bfloat162*>(&val[i]);
    uint4 out;
    auto* y2 = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 v = __bfloat1622float2(v2[k]), wf = __bfloat1622float2(w2[k]);
      // HF: weight * (x * rsqrt(...)).to(dtype): normalise in f32, round, then scale.
      const float2 n = __bfloat1622float2(__floats2bfloat162_rn(v.x * inv, v.y * inv));
      y2[k] = __floats2bfloat162_rn(wf.x * n.x, wf.y * n.y);
    }
    y[at] = out;
  }
}

// Baseline (2026-11-24): four columns per thread, 8-byte loads, one expert row at a time.
__global__ void BaselineCombineKernel(const __grid_constant__ CombineArgs a) {
  const int quads = a.hidden / 4;
  const int64_t total = static_cast<int64_t>(a.num_tokens) * quads;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / quads, j = (i - t * quads) * 4;
    float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int q = 0; q < a.top_k; ++q) {
      const int pos = a.position[t * a.top_k + q];
      if (pos < 0) continue;
      const float w = a.topk_weights[t * a.top_k + q];
      const uint2 raw = *reinterpret_cast<const uint2*>(a.ys + static_cast<int64_t>(pos) * a.hidden + j);
      const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
      const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
      sum.x += w * lo.x; sum.y += w * lo.y; sum.z += w * hi.x; sum.w += w * hi.y;
    }
    __nv_bfloat162* o = reinterpret_cast<__nv_bfloat162*>(a.out + t * a.hidden + j);
    o[0] = __floats2bfloat162_rn(sum.x, sum.y);
    o[1] = __floats2bfloat162_rn(sum.z, sum.w);
  }
}

}  // namespace

absl::Status LaunchSiluMul(__nv_bfloat16* h, const int32_t* offsets, int num_experts, int inter,
                           int max_rows, bool interleaved, cudaStream_t s) {
  return LaunchRowMul<ActMul8<Activation::kSilu>>("moe_experts silu_and_mul", h, offsets, num_experts, inter,
                                                  max_rows, interleaved, s);
}

absl::Status LaunchActMul(Activation act, __nv_bfloat16* h, const int32_t* offsets, int num_experts,
                          int inter, int max_rows, bool interleaved, cudaStream_t s) {
  if (act == Activation::kSilu) return LaunchSiluMul(h, offsets, num_experts, inter, max_rows, interleaved, s);
  return VisitActivation("moe_experts", act, [&](auto a) {
    constexpr Activation kAct = decltype(a)::value;
    return LaunchRowMul<ActMul8<kAct>>("moe_experts act_and_mul", h, offsets, num_experts, inter, max_rows,
                                       interleaved, s);
  });
}

absl::Status LaunchGatherRows(const PermuteArgs& a, cudaStream_t s) {
  if (a.num_assign <= 0) return absl::OkStatus();
  // No more warps than there can be rows (offsets[E] <= num_assign), and at most
  // kGatherBlocksPerSm blocks an SM: one wave, each warp looping over its rows.
  const unsigned resident = static_cast<unsigned>(kGatherBlocksPerSm * cuda::CurrentDeviceSmCount());
  cuda::LaunchShape shape;
  shape.grid = dim3(std::min(cuda::GridFor(a.num_assign, kRowWarps), resident));
  shape.block = dim3(kEltThreads);
  shape.stream = s;
  return cuda::LaunchPdl("moe_experts gather rows", shape, GatherRowsKernel, reinterpret_cast<const uint4*>(a.x),
                         a.sorted, a.offsets, a.num_experts, a.top_k, a.hidden / cuda::kBf16PerChunk,
                         reinterpret_cast<uint4*>(a.xg));
}

absl::Status LaunchCombine(const CombineArgs& a, cudaStream_t s) {
  if (a.num_tokens == 0) return absl::OkStatus();
  if (a.residual != nullptr) {
    if (a.hidden % cuda::kBf16PerChunk != 0 || a.hidden > kCombineNormMaxHidden) {
      return absl::InvalidArgumentError(absl::StrCat("moe_experts combine: the norm epilogue takes hidden % 8 == 0 and <= ",
                                                     kCombineNormMaxHidden, ", got hidden=", a.hidden));
    }
    // Threads as norm.cu's VecThreads: the row's vectors rounded up to whole warps.
    const int vecs = a.hidden / cuda::kBf16PerChunk;
    cuda::LaunchShape shape;
    shape.grid = dim3(static_cast<unsigned>(a.num_tokens));
    shape.block = dim3(std::min((vecs + cuda::kWarpSize - 1) / cuda::kWarpSize * cuda::kWarpSize, kNormMaxThreads));
    shape.stream = s;
    static const bool early_loads_off = EnvSwitchedOff("MLASERVE_MOE_COMBINE_EARLY_LOADS");
    CombineArgs args = a;
    args.early_loads = a.early_loads_kernel && !early_loads_off;
    static const bool early_release_off = EnvSwitchedOff("MLASERVE_MOE_COMBINE_EARLY_RELEASE");
    args.release_early = a.early_loads_kernel && !early_release_off;
    constexpr const char* kName = "moe_experts combine + residual + rmsnorm";
    if (a.early_loads_kernel) {
      if (a.addend != nullptr) {
        return absl::InvalidArgumentError("moe_experts combine: the early-loads norm kernel takes no addend");
      }
      if (vecs <= kNormMaxThreads / 2) {
        return cuda::LaunchPdl(kName, shape, CombineNormKernel<true, 1, kNormMaxThreads / 2>, args);
      }
      if (vecs <= kNormMaxThreads) return cuda::LaunchPdl(kName, shape, CombineNormKernel<true, 1>, args);
      return cuda::LaunchPdl(kName, shape, CombineNormKernel<true, kNormMaxVecsPerThread>, args);
    }
    if (vecs <= kNormMaxThreads) return cuda::LaunchPdl(kName, shape, CombineNormKernel<false, 1>, args);
    return cuda::LaunchPdl(kName, shape, CombineNormKernel<false, kNormMaxVecsPerThread>, args);
  }
  if (a.addend != nullptr) {
    return absl::InvalidArgumentError("moe_experts combine: an addend is taken with the norm epilogue only");
  }
  const int64_t items = static_cast<int64_t>(a.num_tokens) * (a.hidden / cuda::kBf16PerChunk);
  cuda::LaunchShape shape;
  shape.grid = dim3(cuda::GridFor(items, kEltThreads));
  shape.block = dim3(kEltThreads);
  shape.stream = s;
  return cuda::LaunchPdl("moe_experts combine", shape, CombineKernel, a);
}

absl::Status LaunchBaselineCombine(const CombineArgs& a, cudaStream_t s) {
  if (a.shared_slots > 0 || a.residual != nullptr || a.addend != nullptr) {
    return absl::InvalidArgumentError("moe_experts: the baseline combine takes no shared rows, addend or norm epilogue");
  }
  const int64_t items = static_cast<int64_t>(a.num_tokens) * (a.hidden / 4);
  BaselineCombineKernel<<<cuda::GridFor(items, kEltThreads), kEltThreads, 0, s>>>(a);
  return cuda::LaunchStatus("moe_experts combine (baseline)");
}

}  // namespace mlaserve::kernels::moe_cuda
