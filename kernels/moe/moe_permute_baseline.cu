// The baseline of the routing permutation (2026-11-24), for comparisons (MoeBaselineStages::
// permute, mlaserve-moe-bench's old column) and as a second reference in the tests: one block
// sorts all assignments (SortKernel), then a separate kernel gathers the x rows. The same
// outputs as LaunchPermute (moe_permute.cu), which replaced it.
#include <cuda_bf16.h>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/common/cuda_util.cuh"
#include "kernels/common/dense_cuda.cuh"
#include "kernels/moe/moe_cuda.h"

namespace mlaserve::kernels::moe_cuda {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;

// Expert of assignment a, or -1: past `end`, or an id outside [0, E) (no row).
__device__ __forceinline__ int ExpertOf(const int32_t* ids, int a, int end, int num_experts) {
  if (a >= end) return -1;
  const int e = ids[a];
  return (e >= 0 && e < num_experts) ? e : -1;
}

constexpr int kSortThreads = 1024;
constexpr int kSortWarps = kSortThreads / cuda::kWarpSize;
constexpr int kEltThreads = 256;

// Counting sort of the assignments by expert, stable, in one block: warp w owns the
// contiguous assignments [w * seg, (w + 1) * seg); per-(warp, expert) counts, a scan over
// warps and experts, then the same walk writes slots (as moe_permute.cu's ScatterKernel does
// per chunk).
__global__ void __launch_bounds__(kSortThreads)
    SortKernel(const int32_t* topk_ids, int num_assign, int num_experts, int32_t* sorted,
               int32_t* offsets, int32_t* tile_offsets, int32_t* position, int32_t* active) {
  extern __shared__ int32_t warp_count[];  // [kSortWarps][num_experts], then base[num_experts]
  int32_t* base = warp_count + kSortWarps * num_experts;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int seg = (num_assign + kSortWarps - 1) / kSortWarps;
  const int begin = warp * seg, end = min(num_assign, begin + seg);
  const unsigned lanes_below = (1u << lane) - 1u;
  for (int i = threadIdx.x; i < kSortWarps * num_experts; i += kSortThreads) warp_count[i] = 0;
  __syncthreads();
  int32_t* mine = warp_count + warp * num_experts;
  for (int a0 = begin; a0 < end; a0 += 32) {
    const int e = ExpertOf(topk_ids, a0 + lane, end, num_experts);
    const unsigned peers = __match_any_sync(kFullMask, e);
    if (e >= 0 && (peers & lanes_below) == 0) mine[e] += __popc(peers);
    __syncwarp();
  }
  __syncthreads();
  for (int e = threadIdx.x; e < num_experts; e += kSortThreads) {
    int32_t running = 0;
    for (int w = 0; w < kSortWarps; ++w) {
      const int32_t c = warp_count[w * num_experts + e];
      warp_count[w * num_experts + e] = running;
      running += c;
    }
    base[e] = running;
  }
  __syncthreads();
  if (threadIdx.x == 0) {  // E <= 1024: a serial scan is a few microseconds at most
    int32_t rows = 0, tiles = 0, used = 0;
    for (int e = 0; e < num_experts; ++e) {
      const int32_t count = base[e];
      offsets[e] = rows;
      tile_offsets[e] = tiles;
      base[e] = rows;
      rows += count;
      tiles += (count + kTiledRows - 1) / kTiledRows;
      if (count > 0) active[used++] = e;
    }
    offsets[num_experts] = rows;
    tile_offsets[num_experts] = tiles;
    active[num_experts] = used;
  }
  __syncthreads();
  for (int a0 = begin; a0 < end; a0 += 32) {
    const int i = a0 + lane;
    const int e = ExpertOf(topk_ids, i, end, num_experts);
    const unsigned peers = __match_any_sync(kFullMask, e);
    if (e >= 0) {
      const int pos = base[e] + mine[e] + __popc(peers & lanes_below);
      sorted[pos] = i;
      position[i] = pos;
    } else if (i < end) {
      position[i] = -1;
    }
    __syncwarp();
    if (e >= 0 && (peers & lanes_below) == 0) mine[e] += __popc(peers);
    __syncwarp();
  }
}

// xg[r] = x[sorted[r] / top_k] for the rows that exist (16-byte chunks).
__global__ void GatherRowsKernel(const uint4* x, const int32_t* sorted, const int32_t* offsets,
                                 int num_experts, int top_k, int chunks_per_row, uint4* xg) {
  const int64_t total = static_cast<int64_t>(offsets[num_experts]) * chunks_per_row;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / chunks_per_row, c = i - r * chunks_per_row;
    xg[i] = x[static_cast<int64_t>(sorted[r] / top_k) * chunks_per_row + c];
  }
}

}  // namespace

absl::Status LaunchBaselineSort(const PermuteArgs& a, cudaStream_t s) {
  if (a.num_experts > kMaxExperts) {
    return absl::InvalidArgumentError(absl::StrCat("moe_experts: num_experts=", a.num_experts,
                                                   " exceeds the CUDA backend's ", kMaxExperts));
  }
  if (a.routing != nullptr) RETURN_IF_ERROR(MoeRoutingCuda(*a.routing, s));
  // Per-(warp, expert) counts plus per-expert bases: up to 132 KiB at kMaxExperts experts.
  const size_t smem = static_cast<size_t>(kSortWarps + 1) * a.num_experts * sizeof(int32_t);
  constexpr size_t kDefaultSmem = 48 * 1024;
  if (smem > kDefaultSmem) {
    RETURN_IF_ERROR(cuda::CudaStatus(cudaFuncSetAttribute(SortKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                          static_cast<int>(smem)),
                                     "moe_experts sort: raising the shared-memory limit"));
  }
  SortKernel<<<1, kSortThreads, smem, s>>>(a.topk_ids, a.num_assign, a.num_experts, a.sorted, a.offsets,
                                           a.tile_offsets, a.position, a.active);
  return cuda::LaunchStatus("moe_experts sort");
}

absl::Status LaunchBaselineGather(const PermuteArgs& a, cudaStream_t s) {
  const int chunks = a.hidden / cuda::kBf16PerChunk;
  GatherRowsKernel<<<cuda::GridFor(static_cast<int64_t>(a.num_assign) * chunks, kEltThreads), kEltThreads, 0, s>>>(
      reinterpret_cast<const uint4*>(a.x), a.sorted, a.offsets, a.num_experts, a.top_k, chunks,
      reinterpret_cast<uint4*>(a.xg));
  return cuda::LaunchStatus("moe_experts gather");
}

}  // namespace mlaserve::kernels::moe_cuda
