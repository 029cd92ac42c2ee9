// The small-M GEMM kernel and its launch plan (gemm_small_m.h has the design).
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

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/common/cuda_util.cuh"
#include "kernels/common/dense_cuda.cuh"
#include "kernels/common/env_switch.h"
#include "kernels/common/pdl.cuh"
#include "kernels/gemm/gemm_small_m.h"

namespace mlaserve::kernels::gemm_cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * cuda::kWarpSize;
constexpr int kChunkK = 32;            // K values of one warp step: 4 lanes x 8
constexpr int kRowsPerTile = 16;       // weight rows of one m16 fragment
constexpr int kTokensPerTile = 8;      // tokens of one n8 fragment
constexpr int kChunksInFlight = 4;     // 16-byte weight loads per row pair in flight per lane
// K split: at most a portable cluster of CTAs per tile, each warp keeping at least
// kMinChunksPerWarp chunks (ChooseSplits).
constexpr int kMaxSplits = 8;
// At 2 chunks a warp the split CTAs are mostly launch and cluster reduction: on an H100
// (2026-11-25, dense bench) V2-Lite's W_UV per head ran 2.5 us unsplit vs 3.7 us split in two,
// kv_b 3.2 vs 4.4, kv_a_proj 3.8 us at 4 chunks a warp vs 4.1 at 2.
constexpr int kMinChunksPerWarp = 4;
// kAuto's cut (SmallMFasterThanCublasLt): outputs (n x batch) up to this are latency-bound
// launches where the small-M kernel's shorter prologue wins (routers, kv_a_proj).
constexpr int64_t kNarrowOutputs = 1024;
// Weight bytes one launch prefetches into L2 at most before its PDL wait: a share of the H100's
// 50 MB L2 (H200: the same) that leaves room for the previous kernel's working set.
constexpr int64_t kPrefetchBudgetBytes = int64_t{24} << 20;
// Only weights up to SmallMOptions::prefetch_max_weight_bytes (4 MiB) are prefetched at all.
// Measured on an H100 (2026-11-25, graphs of back-to-back calls): 0.3-0.5 us faster on 2-4 MB
// weights (kv_a_proj, W_UV, W_UK^T, kv_b), but 0.5-2 us slower on 8-25 MB ones (o_proj, shared
// gate_up, q_b: the prefetch and the loads that follow it both go to DRAM) and 10 us on the LM
// head; the V2-Lite decode step at batch 1 took 3.74 ms with every weight prefetched, 3.66 ms
// with none.
// kAuto: a grid of several waves whose CTAs own few K chunks pays a CTA launch per few loads
// (V3's W_UK^T per head, 4096 CTAs of 4 chunks: 18.6 us vs cuBLASLt's 7.8).
constexpr int kAutoMinChunksPerCtaMultiWave = 16;

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

// Per device: whether the kernels run here (sm_90+ with a binary for it), and the SM count.
struct DeviceFacts {
  bool runs = false;
  int sms = 0;
};

DeviceFacts FactsOfCurrentDevice() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cached[kMaxDevices] = {};  // 0 unknown, else 1 + sms * 2 + runs
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kMaxDevices) return {};
  int v = cached[device].load(std::memory_order_relaxed);
  if (v == 0) {
    int major = 0, sms = 0;
    cudaFuncAttributes attr{};
    const bool ok =
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) == cudaSuccess &&
        cudaFuncGetAttributes(&attr, SmallMGemmKernel<1, __nv_bfloat16, false>) == cudaSuccess;
    (void)cudaGetLastError();  // a missing binary is an answer here, not an error to keep
    const bool runs = ok && major >= 9 && attr.binaryVersion >= 90;
    v = 1 + sms * 2 + (runs ? 1 : 0);
    cached[device].store(v, std::memory_order_relaxed);
  }
  return DeviceFacts{((v - 1) & 1) != 0, (v - 1) / 2};
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % cuda::kChunkBytes == 0; }

using KernelFn = void (*)(SmallMArgs);

KernelFn KernelFor(int tiles8, bool f32_out, bool silu) {
  if (tiles8 == 1) {
    if (f32_out) return silu ? SmallMGemmKernel<1, float, true> : SmallMGemmKernel<1, float, false>;
    return silu ? SmallMGemmKernel<1, __nv_bfloat16, true> : SmallMGemmKernel<1, __nv_bfloat16, false>;
  }
  if (f32_out) return silu ? SmallMGemmKernel<2, float, true> : SmallMGemmKernel<2, float, false>;
  return silu ? SmallMGemmKernel<2, __nv_bfloat16, true> : SmallMGemmKernel<2, __nv_bfloat16, false>;
}

// CTAs of `kernel` the GPU holds at once when a tile's K is split over `splits` CTAs of a
// cluster: for clusters, what cudaOccupancyMaxActiveClusters allows (a cluster must fit in one
// GPC, so this can be less than the SMs times CTAs per SM). Cached per (kernel, splits): one
// GPU model per process. On a failed query, one CTA per SM (a small grid, never an oversized one).
int64_t ResidentCtas(KernelFn kernel, int splits, int sms) {
  static std::mutex mu;
  static std::map<std::pair<KernelFn, int>, int64_t> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find({kernel, splits});
  if (it != cache.end()) return it->second;
  int64_t resident = sms;
  int n = 0;
  if (splits == 1) {
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kThreads, 0) == cudaSuccess && n > 0) {
      resident = static_cast<int64_t>(n) * sms;
    }
  } else {
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = 1;
    attr.val.clusterDim.y = static_cast<unsigned>(splits);
    attr.val.clusterDim.z = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(1, static_cast<unsigned>(splits), 1);
    config.blockDim = dim3(kThreads);
    config.attrs = &attr;
    config.numAttrs = 1;
    if (cudaOccupancyMaxActiveClusters(&n, kernel, &config) == cudaSuccess && n > 0) {
      resident = static_cast<int64_t>(n) * splits;
    }
  }
  (void)cudaGetLastError();  // a failed query is answered by the fallback, not kept as an error
  cache[{kernel, splits}] = resident;
  return resident;
}

// MLASERVE_WEIGHT_PREFETCH=0 turns the weight prefetch and the early weight loads off (timing
// comparisons).
bool PrefetchDisabled() {
  static const bool disabled = EnvSwitchedOff("MLASERVE_WEIGHT_PREFETCH");
  return disabled;
}

// How `p` runs on the small-M kernel: which instantiation, the row tiles and the K split.
struct SmallMPlan {
  KernelFn kernel = nullptr;
  int64_t tiles = 0;   // CTAs per batch entry along n
  int chunks = 0;      // 32-wide K chunks
  int splits = 1;      // CTAs of a cluster along K
  int64_t resident = 0;  // CTAs one wave holds at that split
  int prefetch_chunks = 0;  // per CTA (SmallMArgs)
  bool weights_early = false;
};

// The K split is the largest power of two (<= kMaxSplits) that keeps the grid within one wave
// of resident CTAs and every warp at kMinChunksPerWarp chunks or more: within one wave every
// CTA issues its loads at once (a warp's chunks are at most a few pipelined groups), so the
// whole weight is in flight; a second partial wave would add a load latency.
SmallMPlan PlanSmallM(const GemmParams& p, int sms, const SmallMOptions& o) {
  const bool silu = p.epilogue == GemmEpilogue::kSiluMul;
  const int tiles8 = p.m > kTokensPerTile ? 2 : 1;
  // Outputs per CTA: its weight rows, or half as many features with the SiLU epilogue.
  const int outputs = silu ? p.n / 2 : p.n;
  const int per_cta = kRowsPerTile * tiles8 / (silu ? 2 : 1);
  SmallMPlan plan;
  plan.kernel = KernelFor(tiles8, p.c_f32, silu);
  plan.tiles = (outputs + per_cta - 1) / per_cta;
  plan.chunks = (p.k + kChunkK - 1) / kChunkK;
  const int64_t ctas = plan.tiles * p.batch;
  plan.resident = ResidentCtas(plan.kernel, 1, sms);
  for (int s = 2; s <= std::min(kMaxSplits, o.max_splits); s *= 2) {
    if (plan.chunks < s * kWarps * kMinChunksPerWarp) break;
    const int64_t resident = ResidentCtas(plan.kernel, s, sms);
    if (ctas * s > resident) break;
    plan.splits = s;
    plan.resident = resident;
  }
  // Prefetch the CTAs' slices of small weights (kPrefetchMaxWeightBytes), within what L2 keeps
  // for the first wave (kPrefetchBudgetBytes; only the first chunks of each slice beyond).
  plan.weights_early = o.weights_before_wait && !PrefetchDisabled();
  const int64_t weight_bytes = int64_t{2} * p.n * p.k * p.batch;
  if (o.prefetch && !PrefetchDisabled() && weight_bytes <= o.prefetch_max_weight_bytes) {
    const int per_cta = (plan.chunks + plan.splits - 1) / plan.splits;
    const int64_t wave = std::min(ctas * plan.splits, std::max<int64_t>(plan.resident, 1));
    const int64_t chunk_bytes = wave * kRowsPerTile * tiles8 * kChunkK * 2;
    plan.prefetch_chunks = static_cast<int>(std::min<int64_t>(per_cta, kPrefetchBudgetBytes / chunk_bytes));
  }
  return plan;
}

}  // namespace

const char* SmallMRefusal(const GemmParams& p) {
  if (p.dtype != DType::kBF16) return "dtype is not bf16";
  if (p.m < 1 || p.m > kGemmSmallMMaxRows) return "m is outside [1, kGemmSmallMMaxRows]";
  if (!p.b_transposed) return "B is not [n, k] (b_transposed = false)";
  if (p.k % cuda::kBf16PerChunk != 0 || p.lda % cuda::kBf16PerChunk != 0 ||
      p.ldb % cuda::kBf16PerChunk != 0) {
    return "k, lda or ldb is not a multiple of 8";
  }
  if (p.batch > 1 &&
      (p.stride_a % cuda::kBf16PerChunk != 0 || p.stride_b % cuda::kBf16PerChunk != 0)) {
    return "stride_a or stride_b is not a multiple of 8";
  }
  if (!Aligned16(p.a) || !Aligned16(p.b)) return "a or b is not 16-byte aligned";
  if (p.batch > 65535) return "batch exceeds the grid's 65535";
  if (!FactsOfCurrentDevice().runs) return "the GPU is not sm_90 or newer (thread-block clusters)";
  return nullptr;
}

SmallMShape SmallMLaunchShape(const GemmParams& p, const SmallMOptions& o) {
  const SmallMPlan plan = PlanSmallM(p, FactsOfCurrentDevice().sms, o);
  return SmallMShape{plan.splits, plan.tiles * p.batch * plan.splits, plan.resident,
                     plan.prefetch_chunks};
}

bool SmallMFasterThanCublasLt(const GemmParams& p) {
  if (p.m > kGemmSmallMAutoMaxRows) return false;
  if (p.c2 != nullptr || p.epilogue != GemmEpilogue::kNone) return true;
  if (static_cast<int64_t>(p.n) * p.batch <= kNarrowOutputs) return true;
  const SmallMPlan plan = PlanSmallM(p, FactsOfCurrentDevice().sms, SmallMOptions{});
  const int64_t ctas = plan.tiles * p.batch * plan.splits;
  const int chunks_per_cta = (plan.chunks + plan.splits - 1) / plan.splits;
  return ctas <= plan.resident || chunks_per_cta >= kAutoMinChunksPerCtaMultiWave;
}

absl::Status LaunchSmallM(const GemmParams& p, cudaStream_t stream, const SmallMOptions& o) {
  const SmallMPlan plan = PlanSmallM(p, FactsOfCurrentDevice().sms, o);
  if (plan.tiles > 0x7fffffff) {
    return absl::InvalidArgumentError(absl::StrCat("gemm small-m: n=", p.n, " needs ", plan.tiles,
                                                   " row tiles, more than a grid holds"));
  }
  SmallMArgs args{};
  args.a = static_cast<const __nv_bfloat16*>(p.a);
  args.lda = p.lda;
  args.stride_a = p.stride_a;
  args.b = static_cast<const __nv_bfloat16*>(p.b);
  args.ldb = p.ldb;
  args.stride_b = p.stride_b;
  args.c = p.c;
  args.ldc = p.ldc;
  args.stride_c = p.stride_c;
  args.c2 = p.c2;
  args.ldc2 = p.ldc2;
  args.c2_begin = p.c2 != nullptr ? p.c2_begin : p.n;
  args.bias = p.bias;
  args.alpha = p.alpha;
  args.beta = p.beta;
  args.m = p.m;
  args.n = p.n;
  args.k = p.k;
  args.chunks = plan.chunks;
  args.chunks_per_cta = (plan.chunks + plan.splits - 1) / plan.splits;
  args.prefetch_chunks = plan.prefetch_chunks;
  args.weights_early = plan.weights_early;
  cuda::LaunchShape shape;
  shape.grid = dim3(static_cast<unsigned>(plan.tiles), static_cast<unsigned>(plan.splits),
                    static_cast<unsigned>(p.batch));
  shape.block = dim3(kThreads);
  shape.stream = stream;
  shape.cluster = dim3(1, static_cast<unsigned>(plan.splits), 1);
  return cuda::LaunchPdl("gemm small-m", shape, plan.kernel, args);
}

}  // namespace mlaserve::kernels::gemm_cuda
