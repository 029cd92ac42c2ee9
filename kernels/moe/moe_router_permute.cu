// Decode steps: the router projection, the routing and the permutation of the routed experts in
// one launch (MoeRouterProjection, api.h), instead of the small-M GEMM's logits followed by
// RoutePermuteKernel (moe_permute.cu). Both are latency chains of a few microseconds each at
// one token; fused, the logits exchange is one L2 round trip inside the kernel.
//
// Every CTA owns kRows expert rows of the router weight (blockIdx.x) and a range of tokens
// (blockIdx.y). Its 256 threads split a row into 16-byte chunks (thread i: chunks i, i + 256,
// ...); they load the CTA's weight chunks into registers before the PDL wait (the weight is
// never written while the stream runs: pdl.cuh rule 3), then the tokens' x chunks after it,
// and sum each (row, token) in f32: per thread in chunk order, then a fixed xor-shuffle tree
// per warp, then the 8 warps in order. No atomics touch the sums, so the logits have the same
// bits on every run. They go to the logits buffer (other code may read them), then every CTA
// takes a ticket (atomicAdd on the caller's word after a fence); the CTA with the last ticket
// resets the word to 0 (so graph replays find it 0), reads all logits from L2 (__ldcg) into
// shared memory and does what RoutePermuteKernel does:
//   routing   a warp per token, moe_routing.cuh's RouteToken on the shared copy: the same
//             ids and weights as the separate routing of the same logits, bit for bit; the
//             picks stay in shared memory (and go to topk_ids / topk_weights);
//   permute   with at most 32 tokens and distinct experts within a token, each expert's
//             tokens are a bit mask (one shared atomicOr per pick): its row count is the mask's
//             popcount, a pick's rank among the expert's rows the popcount of the lower
//             tokens' bits -- assignment order, as ScatterChunk's. One block scan of the
//             (rows, row tiles, used) counts gives offsets / tile_offsets / active, then every
//             pick writes sorted / position. Three barriers after the routing, no global
//             round trip between the picks and the scatter.
// Few experts over narrow rows at up to 4 tokens (V2-Lite's decode steps) take the cluster form
// (RouterClusterKernel below): eight CTAs of one thread-block cluster, the logits exchanged in
// distributed shared memory under one cluster barrier instead of the ticket.
#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/common/bf16_vec.cuh"
#include "kernels/common/cuda_util.cuh"
#include "kernels/common/device_arch.h"
#include "kernels/common/env_switch.h"
#include "kernels/common/pdl.cuh"
#include "kernels/moe/moe_block_trace.cuh"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/moe_routing.cuh"

namespace mlaserve::kernels::moe_cuda {
namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / cuda::kWarpSize;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kExpertsPerThread = kRoutingMaxExperts / kThreads;  // the permutation's scan
constexpr int kScanValues = 3;  // rows, row tiles, used (the expert has rows)
constexpr int kMaxTokenBits = 32;  // tokens of one expert's bit mask
static_assert(kRoutingMaxExperts % kThreads == 0);
static_assert(kFusedRoutingMaxTokens <= kMaxTokenBits);

// Per CTA: kRows expert rows; kChunks 16-byte chunks of a row per thread (hidden up to
// kChunks * 2048); kTok tokens' x chunks in registers per pass (kChunks * kTok <= 16 chunks).
template <int kChunks>
struct ProjectionShape {
  static constexpr int kRows = kChunks >= 8 ? 1 : 2;
  static constexpr int kTok = kChunks >= 8 ? 2 : 4;
};

// Shared memory of the last CTA's routing and permutation, in 4-byte words: the logits [T, E],
// each warp's RouteToken scratch (the choices [E] f32), the picks' ids and weights [T * top_k],
// the experts' token masks and first rows [E], the scan's warp sums.
int RouteSmemWords(int num_tokens, int num_experts, int top_k) {
  return num_tokens * num_experts + kWarps * num_experts + 2 * num_tokens * top_k + 2 * num_experts +
         kWarps * kScanValues;
}

// The last CTA: every token's routing from the logits all CTAs wrote, then the single-chunk
// permutation of the picks. Outputs as RoutePermuteKernel's.
// kLogitsResident: the logits are already in `smem` (the cluster form's rank 0), not only in L2.
template <int kPer, bool kLogitsResident = false>
__device__ void RouteAndPermute(const MoeRoutingParams& r, const PermuteArgs& a, int32_t* smem) {
  const int T = r.num_tokens, E = r.num_experts, k = r.top_k, A = T * k;
  const int warp = threadIdx.x / cuda::kWarpSize, lane = threadIdx.x % cuda::kWarpSize;
  float* logits = reinterpret_cast<float*>(smem);                   // [T * E]
  float* scratch = logits + T * E;                                  // [kWarps][E]
  int32_t* ids = reinterpret_cast<int32_t*>(scratch + kWarps * E);  // [A]
  float* weights = reinterpret_cast<float*>(ids + A);               // [A]
  uint32_t* token_mask = reinterpret_cast<uint32_t*>(weights + A);  // [E]
  int32_t* first_row = reinterpret_cast<int32_t*>(token_mask + E);  // [E]
  int32_t* warp_sums = first_row + E;                               // [kWarps][kScanValues]

  // The other CTAs' logits are in L2 (they fenced before their tickets): read past L1.
  if constexpr (!kLogitsResident) {
    for (int i = threadIdx.x; i < T * E; i += kThreads) logits[i] = __ldcg(r.logits + i);
  }
  for (int e = threadIdx.x; e < E; e += kThreads) token_mask[e] = 0;
  __syncthreads();

  MoeRoutingParams local = r;  // RouteToken on the shared copy, its picks into shared memory
  local.logits = logits;
  local.topk_ids = ids;
  local.topk_weights = weights;
  for (int t = warp; t < T; t += kWarps) {
    RouteToken<kPer>(local, t, scratch + warp * E);
    if (lane < k) {  // the lane that wrote pick (t, lane) reads it back: no barrier needed
      const int i = t * k + lane;
      const int e = ids[i];
      r.topk_ids[i] = e;
      r.topk_weights[i] = weights[i];
      atomicOr(&token_mask[e], 1u << t);
    }
  }
  __syncthreads();

  // Per expert (kExpertsPerThread consecutive ones a thread): rows, row tiles, used; an
  // exclusive scan of the three over the block.
  int32_t mine[kScanValues] = {0, 0, 0};
  const int e_begin = threadIdx.x * kExpertsPerThread;
#pragma unroll
  for (int j = 0; j < kExpertsPerThread; ++j) {
    const int e = e_begin + j;
    const int rows = e < E ? __popc(token_mask[e]) : 0;
    mine[0] += rows;
    mine[1] += (rows + kTiledRows - 1) / kTiledRows;
    mine[2] += rows > 0 ? 1 : 0;
  }
  int32_t incl[kScanValues];
#pragma unroll
  for (int q = 0; q < kScanValues; ++q) {
    incl[q] = mine[q];
#pragma unroll
    for (int d = 1; d < cuda::kWarpSize; d <<= 1) {
      const int32_t y = __shfl_up_sync(kFullMask, incl[q], d);
      if (lane >= d) incl[q] += y;
    }
    if (lane == cuda::kWarpSize - 1) warp_sums[warp * kScanValues + q] = incl[q];
  }
  __syncthreads();
  int32_t prefix[kScanValues], total[kScanValues];
#pragma unroll
  for (int q = 0; q < kScanValues; ++q) {
    prefix[q] = incl[q] - mine[q];
    total[q] = 0;
    for (int w = 0; w < kWarps; ++w) {
      const int32_t s = warp_sums[w * kScanValues + q];
      if (w < warp) prefix[q] += s;
      total[q] += s;
    }
  }
#pragma unroll
  for (int j = 0; j < kExpertsPerThread; ++j) {
    const int e = e_begin + j;
    if (e >= E) break;
    const int rows = __popc(token_mask[e]);
    a.offsets[e] = prefix[0];
    a.tile_offsets[e] = prefix[1];
    first_row[e] = prefix[0];
    if (rows > 0) a.active[prefix[2]] = e;
    prefix[0] += rows;
    prefix[1] += (rows + kTiledRows - 1) / kTiledRows;
    prefix[2] += rows > 0 ? 1 : 0;
  }
  if (threadIdx.x == 0) {
    a.offsets[E] = total[0];
    a.tile_offsets[E] = total[1];
    a.active[E] = total[2];
  }
  __syncthreads();

  // Each pick's row: its expert's first row plus the lower tokens that picked the expert.
  for (int i = threadIdx.x; i < A; i += kThreads) {
    const int t = i / k, e = ids[i];
    const int row = first_row[e] + __popc(token_mask[e] & ((1u << t) - 1u));
    a.sorted[row] = i;
    a.position[i] = row;
  }
}

// kTraced: the launch records its blocks (moe_block_trace.cuh; a separate instantiation, so the
// untraced kernel keeps its registers: 40 against 46 at V2-Lite's width).
template <int kChunks, int kPer, bool kTraced>
__global__ void __launch_bounds__(kThreads)
    RouterRoutePermuteKernel(const __grid_constant__ MoeRoutingParams r,
                             const __grid_constant__ PermuteArgs a, int tokens_per_cta, uint64_t* trace) {
  constexpr int kRows = ProjectionShape<kChunks>::kRows;
  constexpr int kTok = ProjectionShape<kChunks>::kTok;
  constexpr int kSums = kRows * kTok;
  extern __shared__ int32_t smem[];  // RouteSmemWords: the last CTA's
  __shared__ float warp_partial[kWarps][kSums];
  __shared__ bool last_cta;
  const MoeRouterProjection& proj = r.router;
  const int E = r.num_experts;
  const int row_chunks = proj.hidden / cuda::kBf16PerChunk;
  const int e0 = blockIdx.x * kRows;
  const int warp = threadIdx.x / cuda::kWarpSize, lane = threadIdx.x % cuda::kWarpSize;
  __shared__ moe_trace::BlockClock clock;  // --moe-block-trace's record (kernels/moe/block_trace.h)
  if constexpr (kTraced) clock.Begin(trace);

  // The CTA's weight chunks, in flight while the previous kernel finishes (rule 3).
  const auto* weight = static_cast<const uint4*>(proj.weight);
  uint4 w[kRows][kChunks];
#pragma unroll
  for (int row = 0; row < kRows; ++row) {
#pragma unroll
    for (int j = 0; j < kChunks; ++j) {
      const int c = threadIdx.x + j * kThreads;
      w[row][j] = (e0 + row < E && c < row_chunks)
                      ? __ldg(weight + static_cast<int64_t>(e0 + row) * row_chunks + c)
                      : make_uint4(0, 0, 0, 0);
    }
  }
  cuda::PdlEnter();
  if constexpr (kTraced) clock.Waited(trace);

  const auto* x = static_cast<const uint4*>(proj.x);
  const int t_begin = blockIdx.y * tokens_per_cta;
  const int t_end = min(r.num_tokens, t_begin + tokens_per_cta);
  for (int t0 = t_begin; t0 < t_end; t0 += kTok) {
    uint4 xv[kTok][kChunks];  // every load of the pass issued before the first product
#pragma unroll
    for (int t = 0; t < kTok; ++t) {
#pragma unroll
      for (int j = 0; j < kChunks; ++j) {
        const int c = threadIdx.x + j * kThreads;
        xv[t][j] = (t0 + t < t_end && c < row_chunks)
                       ? x[static_cast<int64_t>(t0 + t) * row_chunks + c]
                       : make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int row = 0; row < kRows; ++row) {
#pragma unroll
      for (int t = 0; t < kTok; ++t) {
        float acc = 0.0f;
#pragma unroll
        for (int j = 0; j < kChunks; ++j) acc = cuda::Dot8(w[row][j], xv[t][j], acc);
#pragma unroll
        for (int o = cuda::kWarpSize / 2; o > 0; o >>= 1) acc += __shfl_xor_sync(kFullMask, acc, o);
        if (lane == 0) warp_partial[warp][row * kTok + t] = acc;
      }
    }
    __syncthreads();
    if (threadIdx.x < kSums) {
      const int row = threadIdx.x / kTok, t = threadIdx.x % kTok;
      float sum = 0.0f;
      for (int v = 0; v < kWarps; ++v) sum += warp_partial[v][threadIdx.x];
      if (e0 + row < E && t0 + t < t_end) {
        proj.logits[static_cast<int64_t>(t0 + t) * E + e0 + row] = sum;
      }
    }
    __syncthreads();  // warp_partial is the next pass's
  }

  // Publish the logits, then take a ticket; the CTA with the last one routes.
  if (threadIdx.x < kSums) __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned ctas = gridDim.x * gridDim.y;
    const bool last = atomicAdd(proj.ticket, 1u) == ctas - 1;
    if (last) {
      atomicExch(proj.ticket, 0u);  // every CTA has taken its ticket: ready for the next launch
      __threadfence();              // the tickets before ours, and their logits, are seen
    }
    last_cta = last;
  }
  __syncthreads();
  if (!last_cta) {
    if constexpr (kTraced) clock.Record(trace);
    return;
  }
  RouteAndPermute<kPer>(r, a, smem);
  if constexpr (kTraced) {
    __syncthreads();  // the permutation is written
    clock.Record(trace);
  }
}

// Both router forms' shared-memory carveout hint: MLASERVE_MOE_ROUTER_CARVEOUT (a percent, read
// once; A/B timing), unset the driver's choice.
absl::Status PreferRouterCarveout(const void* kernel) {
  static const int carveout = EnvIntInRange("MLASERVE_MOE_ROUTER_CARVEOUT", 0, 100, -1);
  return PreferDecodeCarveout(kernel, carveout, "MLASERVE_MOE_ROUTER_CARVEOUT");
}

// The cluster form (few experts over rows of at most 2048 columns: V2-Lite's 64 x 2048 router,
// at up to kClusterMaxTokens tokens): one thread-block cluster of kClusterCtas CTAs, CTA c owning
// expert rows [c * kClusterRows, (c + 1) * kClusterRows), which its threads load into registers
// before the PDL wait (one chunk a row a thread). Each CTA sums its logits as the ticket form
// does (the same order: the same bits) and stores them, besides the logits buffer, into rank 0's
// shared memory (distributed shared memory); one cluster barrier then stands where the ticket
// form has a fence, an atomic ticket and the last CTA's read of the logits back from L2. The
// other ranks leave; rank 0 routes and permutes as the ticket form's last CTA does. A relaxed
// barrier arrival before the PDL wait, waited on before the first remote store, is the guarantee
// that every CTA of the cluster runs before its shared memory is written.
//
// The rows stay in registers (~100 a thread), not in shared memory: a form that staged them there
// by cp.async (32 KB a CTA, 37 registers) routed as fast but made the gate_up GEMV after it ~6 us
// a layer slower (H200, V2-Lite decode b 1: 2.266 / 2.290 ms against 2.117 / 2.097; the block
// trace put its latest blocks on the router's SMs: docs/cuda_engine.md, thirty-sixth session).
constexpr int kClusterCtas = 8;
constexpr int kClusterRows = 8;
constexpr int kClusterMaxTokens = 4;
constexpr int kClusterPer = 2;  // RouteToken's experts a lane: kClusterCtas * kClusterRows <= 32 * 2
static_assert(kClusterCtas * kClusterRows <= cuda::kWarpSize * kClusterPer);

__device__ __forceinline__ void ClusterArriveRelaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void ClusterWait() { asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory"); }

__global__ void __launch_bounds__(kThreads)
    RouterClusterKernel(const __grid_constant__ MoeRoutingParams r, const __grid_constant__ PermuteArgs a,
                        uint64_t* trace) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900  // clusters: sm_90+ (ClusterFormTakes asks the device)
  __shared__ moe_trace::BlockClock clock;  // --moe-block-trace's record (kernels/moe/block_trace.h)
  clock.Begin(trace);
  extern __shared__ __align__(16) int32_t smem[];  // RouteSmemWords (the logits [T, E] first)
  __shared__ float warp_partial[kWarps][kClusterRows];
  cg::cluster_group cluster = cg::this_cluster();
  const MoeRouterProjection& proj = r.router;
  const int E = r.num_experts, T = r.num_tokens;
  const int row_chunks = proj.hidden / cuda::kBf16PerChunk;  // <= kThreads
  const int e0 = static_cast<int>(cluster.block_rank()) * kClusterRows;
  const int warp = threadIdx.x / cuda::kWarpSize, lane = threadIdx.x % cuda::kWarpSize;
  const bool has_chunk = static_cast<int>(threadIdx.x) < row_chunks;

  // The weight rows in flight while the previous kernel finishes (pdl.cuh, rule 3); rows past
  // the experts and chunks past the row are zeros.
  const auto* weight = static_cast<const uint4*>(proj.weight);
  uint4 w[kClusterRows];
#pragma unroll
  for (int row = 0; row < kClusterRows; ++row) {
    const bool valid = e0 + row < E && has_chunk;
    w[row] = valid ? __ldg(weight + static_cast<int64_t>(e0 + row) * row_chunks + threadIdx.x) : make_uint4(0, 0, 0, 0);
  }
  ClusterArriveRelaxed();  // this CTA runs (waited on before the first remote store)
  cuda::PdlEnter();
  clock.Waited(trace);
  ClusterWait();
  float* logits0 = cluster.map_shared_rank(reinterpret_cast<float*>(smem), 0);  // rank 0's [T, E]

  const auto* x = static_cast<const uint4*>(proj.x);
  for (int t = 0; t < T; ++t) {
    const uint4 xv = has_chunk ? x[static_cast<int64_t>(t) * row_chunks + threadIdx.x] : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int row = 0; row < kClusterRows; ++row) {
      float acc = cuda::Dot8(w[row], xv, 0.0f);
#pragma unroll
      for (int o = cuda::kWarpSize / 2; o > 0; o >>= 1) acc += __shfl_xor_sync(kFullMask, acc, o);
      if (lane == 0) warp_partial[warp][row] = acc;
    }
    __syncthreads();
    if (threadIdx.x < kClusterRows) {
      const int row = threadIdx.x;
      float sum = 0.0f;
      for (int v = 0; v < kWarps; ++v) sum += warp_partial[v][row];
      if (e0 + row < E) {
        const int64_t i = static_cast<int64_t>(t) * E + e0 + row;
        proj.logits[i] = sum;
        logits0[i] = sum;
      }
    }
    __syncthreads();  // warp_partial is the next token's
  }
  cluster.sync();  // every rank's logits are in rank 0's shared memory
  if (cluster.block_rank() != 0) {
    clock.Record(trace);
    return;
  }
  RouteAndPermute<kClusterPer, true>(r, a, smem);
  if (trace != nullptr) {
    __syncthreads();  // the permutation is written
    clock.Record(trace);
  }
#endif
}

// Whether the cluster form takes `r`; MLASERVE_MOE_ROUTER_CLUSTER=0 (read per call: tests, A/B
// timing) keeps the ticket form.
bool ClusterFormTakes(const MoeRoutingParams& r) {
  if (EnvSwitchedOff("MLASERVE_MOE_ROUTER_CLUSTER") || !cuda::CurrentDeviceIsSm90()) return false;
  return r.num_tokens <= kClusterMaxTokens && r.num_experts <= kClusterCtas * kClusterRows &&
         r.router.hidden <= kThreads * cuda::kBf16PerChunk;
}

absl::Status LaunchCluster(const MoeRoutingParams& r, const PermuteArgs& a, cudaStream_t s) {
  cuda::LaunchShape shape;
  shape.grid = dim3(kClusterCtas);
  shape.block = dim3(kThreads);
  shape.cluster = dim3(kClusterCtas);
  shape.smem_bytes = static_cast<size_t>(RouteSmemWords(r.num_tokens, r.num_experts, r.top_k)) * sizeof(int32_t);
  shape.stream = s;
  RETURN_IF_ERROR(PreferRouterCarveout(reinterpret_cast<const void*>(RouterClusterKernel)));
  return cuda::LaunchPdl("moe_experts router+route+permute (cluster)", shape, RouterClusterKernel, r, a,
                         BlockTraceRegion("router", shape.grid, 0));
}

// Launches the kChunks form: grid (expert slabs, token blocks), each CTA running passes of kTok
// tokens until the grid fits the GPU's SMs (one CTA per SM keeps the weight loads parallel).
template <int kChunks, int kPer>
absl::Status LaunchFor(const MoeRoutingParams& r, const PermuteArgs& a, cudaStream_t s) {
  constexpr int kRows = ProjectionShape<kChunks>::kRows;
  constexpr int kTok = ProjectionShape<kChunks>::kTok;
  const int T = r.num_tokens;
  const int slabs = (r.num_experts + kRows - 1) / kRows;
  const int sms = std::max(1, cuda::CurrentDeviceSmCount());
  int tokens_per_cta = kTok;
  while (tokens_per_cta < T && slabs * ((T + tokens_per_cta - 1) / tokens_per_cta) > sms) {
    tokens_per_cta += kTok;
  }
  const int token_blocks = (T + tokens_per_cta - 1) / tokens_per_cta;
  const size_t smem = RouteSmemWords(T, r.num_experts, r.top_k) * sizeof(int32_t);
  const dim3 grid(slabs, token_blocks);
  uint64_t* trace = BlockTraceRegion("router", grid, 0);
  auto* kernel = trace != nullptr ? RouterRoutePermuteKernel<kChunks, kPer, true>
                                  : RouterRoutePermuteKernel<kChunks, kPer, false>;
  RETURN_IF_ERROR(PreferRouterCarveout(reinterpret_cast<const void*>(kernel)));
  constexpr size_t kDefaultSmem = 48 * 1024;
  if (smem > kDefaultSmem) {
    RETURN_IF_ERROR(cuda::CudaStatus(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
        "moe_experts router+route+permute: raising the shared-memory limit"));
  }
  cuda::LaunchShape shape;
  shape.grid = grid;
  shape.block = dim3(kThreads);
  shape.smem_bytes = smem;
  shape.stream = s;
  return cuda::LaunchPdl("moe_experts router+route+permute", shape, kernel, r, a, tokens_per_cta, trace);
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % cuda::kChunkBytes == 0; }

}  // namespace

bool FusedRouterDisabled() {
  static const bool disabled = EnvSwitchedOff("MLASERVE_MOE_FUSED_ROUTER");
  return disabled;
}

bool RouterPermuteRuns(const PermuteArgs& a) {
  if (a.routing == nullptr || FusedRouterDisabled() || !PermuteFusesRouting(a)) return false;
  const MoeRoutingParams& r = *a.routing;
  const MoeRouterProjection& p = r.router;
  return p.weight != nullptr && p.x != nullptr && p.logits != nullptr && p.ticket != nullptr &&
         p.logits == r.logits && p.dtype == DType::kBF16 && Aligned16(p.weight) && Aligned16(p.x) &&
         p.hidden > 0 && p.hidden % cuda::kBf16PerChunk == 0 && p.hidden <= kMoeFusedRouterMaxHidden &&
         r.num_tokens > 0 && r.num_tokens <= kMaxTokenBits && r.num_experts == a.num_experts &&
         r.top_k == a.top_k && CheckCudaRouting(r).ok();
}

absl::Status LaunchRouterPermute(const PermuteArgs& a, cudaStream_t s) {
  if (!RouterPermuteRuns(a)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "moe_experts: the fused router projection does not take this call (num_tokens=",
        a.routing != nullptr ? a.routing->num_tokens : 0, ", num_experts=", a.num_experts,
        ", hidden=", a.routing != nullptr ? a.routing->router.hidden : 0,
        "): RouterPermuteRuns is false"));
  }
  const MoeRoutingParams& r = *a.routing;
  const int row_chunks = r.router.hidden / cuda::kBf16PerChunk;
  const int per_thread = (row_chunks + kThreads - 1) / kThreads;
  // The routing's registers by expert count (RouteToken's kPer): the launch holds them in every
  // CTA, and the GEMV blocks that launch under it share the SMs' register files (V2-Lite's CTA:
  // 40 registers a thread instead of 114). H200, V2-Lite decode b 1, alternated in one call:
  // 2.085-2.096 ms against 2.105-2.114 with the 512-expert form (docs/cuda_engine.md).
  // (A/B timing: MLASERVE_MOE_ROUTER_SMALL=0, read once, keeps the 512-expert form always.)
  static const bool small_off = EnvSwitchedOff("MLASERVE_MOE_ROUTER_SMALL");
  const int E = r.num_experts;
  if (!small_off && ClusterFormTakes(r)) return LaunchCluster(r, a, s);
  const auto by_chunks = [&](auto per) -> absl::Status {
    constexpr int kPer = decltype(per)::value;
    if (per_thread <= 1) return LaunchFor<1, kPer>(r, a, s);
    if (per_thread <= 2) return LaunchFor<2, kPer>(r, a, s);
    if (per_thread <= 4) return LaunchFor<4, kPer>(r, a, s);
    return LaunchFor<8, kPer>(r, a, s);
  };
  return WithRoutingForm(E, !small_off, by_chunks);
}

}  // namespace mlaserve::kernels::moe_cuda

namespace mlaserve::kernels {

bool MoeExpertsCudaFusesRouter(const MoeExpertsParams& p) {
  if (p.routing == nullptr || p.dtype != DType::kBF16 || p.baseline.permute || p.num_tokens <= 0 ||
      p.top_k <= 0) {
    return false;
  }
  if (moe_cuda::PlanExperts(p).path != MoeExpertsPath::kStream) return false;
  moe_cuda::PermuteArgs pa{};
  pa.topk_ids = p.topk_ids;
  pa.num_assign = p.num_tokens * p.top_k;
  pa.num_experts = p.num_experts;
  pa.top_k = p.top_k;
  pa.routing = p.routing;
  return moe_cuda::RouterPermuteRuns(pa);
}

}  // namespace mlaserve::kernels
