// Stage 1 of the routed experts on CUDA (moe_cuda.h): the routing permutation. Every
// (token, k) assignment gets the row it occupies in expert order, and (kSm90) its x row is
// copied there, in one pass over the assignments and the rows.
//
// The assignments are cut into chunks of kChunk (2048) in index order, one block each:
//   CountChunkKernel   per chunk, how many assignments go to each expert;
//   ScanChunksKernel   one block: expert totals -> row offsets (and the tiled path's row-tile
//                      offsets, and the list of experts with rows), then per expert an
//                      exclusive scan over the chunks: the first row of (chunk, expert);
//   ScatterKernel      per chunk again: each warp owns 256 consecutive assignments, lanes with
//                      the same expert find each other with __match_any_sync, so an
//                      assignment's row is (chunk, expert) base + the counts of the warps
//                      before it + its rank among its peers. It writes `sorted`/`position` and
//                      copies the x rows to their sorted rows; a grid dimension of column
//                      slices (each block redoes the cheap ranking for its own slice of the
//                      row) keeps every SM copying even when there are few chunks.
// Rows of one expert keep assignment order, i.e. token order: the same result on every run
// and the same as the one-block SortKernel it replaces (kept as the baseline below). No
// atomics decide a position (the counts use warp-aggregated shared-memory adds, which are
// order-free). With a single chunk (decode; up to 2048 assignments) ScatterKernel does the
// counting and the scan itself: one launch.
#include <cuda_bf16.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/common/cuda_util.cuh"
#include "kernels/common/dense_cuda.cuh"
#include "kernels/common/device_arch.h"
#include "kernels/common/pdl.cuh"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/moe_routing.cuh"

namespace mlaserve::kernels::moe_cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / cuda::kWarpSize;
constexpr int kPerWarp = 256;              // assignments a warp owns in a chunk
constexpr int kChunk = kWarps * kPerWarp;  // assignments per block
constexpr int kScanThreads = 1024;
constexpr int kScanScratch = cuda::kWarpSize + 1;  // BlockExclusiveScan's shared scratch
constexpr int kSliceChunkMultiple = 4;     // gather slices are multiples of 64 bytes of a row
constexpr int kBlocksPerSm = 4;            // gather grid target
constexpr int kCopyUnroll = 4;
constexpr unsigned kFullMask = 0xffffffffu;

// Expert of assignment a, or -1: past `end`, or an id outside [0, E) (another rank's expert,
// api.h: no row, and nothing in the combine).
__device__ __forceinline__ int ExpertOf(const int32_t* ids, int a, int end, int num_experts) {
  if (a >= end) return -1;
  const int e = ids[a];
  return (e >= 0 && e < num_experts) ? e : -1;
}

// Exclusive scan of v[0, n) in shared memory by the whole block; returns the total. Call after
// a __syncthreads that follows the writes to v; v holds the prefixes, visible to every thread,
// when it returns. `scratch` is kScanScratch ints of shared memory.
__device__ int32_t BlockExclusiveScan(int32_t* v, int n, int32_t* scratch) {
  const int t = threadIdx.x, lane = t % cuda::kWarpSize, warp = t / cuda::kWarpSize;
  const int warps = blockDim.x / cuda::kWarpSize;
  const int seg = (n + blockDim.x - 1) / blockDim.x;
  const int begin = min(n, t * seg), end = min(n, begin + seg);
  int32_t local = 0;
  for (int i = begin; i < end; ++i) local += v[i];
  int32_t incl = local;
#pragma unroll
  for (int d = 1; d < cuda::kWarpSize; d <<= 1) {
    const int32_t y = __shfl_up_sync(kFullMask, incl, d);
    if (lane >= d) incl += y;
  }
  if (lane == cuda::kWarpSize - 1) scratch[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    const int32_t w = lane < warps ? scratch[lane] : 0;
    int32_t wi = w;
#pragma unroll
    for (int d = 1; d < cuda::kWarpSize; d <<= 1) {
      const int32_t y = __shfl_up_sync(kFullMask, wi, d);
      if (lane >= d) wi += y;
    }
    if (lane < warps) scratch[lane] = wi - w;
    if (lane == cuda::kWarpSize - 1) scratch[cuda::kWarpSize] = wi;
  }
  __syncthreads();
  int32_t running = scratch[warp] + incl - local;
  for (int i = begin; i < end; ++i) {
    const int32_t c = v[i];
    v[i] = running;
    running += c;
  }
  const int32_t total = scratch[cuda::kWarpSize];
  __syncthreads();
  return total;
}

// From per-expert row counts in `rows` (shared, [E]), with `tiles` and `used` ([E] shared
// scratch): rows becomes the row offsets; the offsets, row-tile offsets and active list go to
// global memory when `write`. Every thread of the block calls it.
__device__ void ExpertOffsets(int32_t* rows, int32_t* tiles, int32_t* used, int32_t* scratch,
                              int num_experts, bool write, int32_t* offsets, int32_t* tile_offsets,
                              int32_t* active) {
  for (int e = threadIdx.x; e < num_experts; e += blockDim.x) {
    tiles[e] = (rows[e] + kTiledRows - 1) / kTiledRows;
    used[e] = rows[e] > 0 ? 1 : 0;
  }
  __syncthreads();
  const int32_t total_rows = BlockExclusiveScan(rows, num_experts, scratch);
  const int32_t total_tiles = BlockExclusiveScan(tiles, num_experts, scratch);
  const int32_t total_used = BlockExclusiveScan(used, num_experts, scratch);
  if (!write) return;
  for (int e = threadIdx.x; e < num_experts; e += blockDim.x) {
    offsets[e] = rows[e];
    tile_offsets[e] = tiles[e];
    const int32_t next = e + 1 < num_experts ? rows[e + 1] : total_rows;
    if (next > rows[e]) active[used[e]] = e;
  }
  if (threadIdx.x == 0) {
    offsets[num_experts] = total_rows;
    tile_offsets[num_experts] = total_tiles;
    active[num_experts] = total_used;
  }
}

__global__ void __launch_bounds__(kThreads)
    CountChunkKernel(const int32_t* ids, int num_assign, int num_experts, int32_t* chunk_counts) {
  extern __shared__ int32_t count[];  // [E]
  cuda::PdlEnter();  // the stage kernels launch with PDL (kernels/common/pdl.cuh)
  for (int e = threadIdx.x; e < num_experts; e += kThreads) count[e] = 0;
  __syncthreads();
  const int begin = blockIdx.x * kChunk, end = min(num_assign, begin + kChunk);
  const unsigned lanes_below = (1u << (threadIdx.x % cuda::kWarpSize)) - 1u;
  for (int a0 = begin; a0 < end; a0 += kThreads) {  // the same trip count in every lane
    const int e = ExpertOf(ids, a0 + threadIdx.x, end, num_experts);
    const unsigned peers = __match_any_sync(kFullMask, e);
    if (e >= 0 && (peers & lanes_below) == 0) atomicAdd(&count[e], __popc(peers));
  }
  __syncthreads();
  for (int e = threadIdx.x; e < num_experts; e += kThreads) {
    chunk_counts[static_cast<int64_t>(blockIdx.x) * num_experts + e] = count[e];
  }
}

// chunk_counts[c][e] becomes the first row of chunk c's assignments to expert e.
__global__ void __launch_bounds__(kScanThreads)
    ScanChunksKernel(int32_t* chunk_counts, int chunks, int num_experts, int32_t* offsets,
                     int32_t* tile_offsets, int32_t* active) {
  extern __shared__ int32_t smem[];
  int32_t* rows = smem;                    // [E]
  int32_t* tiles = rows + num_experts;     // [E]
  int32_t* used = tiles + num_experts;     // [E]
  int32_t* scratch = used + num_experts;   // [kScanScratch]
  cuda::PdlEnter();
  for (int e = threadIdx.x; e < num_experts; e += kScanThreads) {
    int32_t total = 0;
#pragma unroll 8
    for (int c = 0; c < chunks; ++c) total += chunk_counts[static_cast<int64_t>(c) * num_experts + e];
    rows[e] = total;
  }
  __syncthreads();
  ExpertOffsets(rows, tiles, used, scratch, num_experts, true, offsets, tile_offsets, active);
  for (int e = threadIdx.x; e < num_experts; e += kScanThreads) {
    int32_t running = rows[e];
    for (int c = 0; c < chunks; ++c) {
      int32_t* at = chunk_counts + static_cast<int64_t>(c) * num_experts + e;
      const int32_t n = *at;
      *at = running;
      running += n;
    }
  }
}

// Shared memory of ScatterKernel, in ints.
__host__ __device__ int ScatterSmemInts(int num_experts, bool single, bool gather) {
  return kWarps * num_experts + (gather ? kChunk : 0) + kScanScratch + (single ? 3 * num_experts : 0);
}

// One chunk of assignments (blockIdx.x) and one column slice of the x rows (blockIdx.y,
// `slice_chunks` 16-byte chunks wide). kSingle: the only chunk, counting and scanning itself.
// The slice-0 block writes sorted/position (and, kSingle, the offsets). `smem`:
// ScatterSmemInts ints of shared memory. Runs after PdlEnter.
template <bool kSingle, bool kGather>
__device__ void ScatterChunk(const PermuteArgs& a, int slice_chunks, int32_t* smem) {
  const int E = a.num_experts;
  int32_t* warp_base = smem;                                  // [kWarps][E]
  int32_t* row_of = warp_base + kWarps * E;                   // [kChunk] (kGather)
  int32_t* scratch = row_of + (kGather ? kChunk : 0);         // [kScanScratch]
  int32_t* expert_rows = scratch + kScanScratch;              // [3][E] (kSingle)
  const int warp = threadIdx.x / cuda::kWarpSize, lane = threadIdx.x % cuda::kWarpSize;
  const unsigned lanes_below = (1u << lane) - 1u;
  const int begin = blockIdx.x * kChunk, end = min(a.num_assign, begin + kChunk);
  const int warp_begin = begin + warp * kPerWarp, warp_end = min(end, warp_begin + kPerWarp);
  const bool writer = blockIdx.y == 0;
  int32_t* mine = warp_base + warp * E;

  for (int i = threadIdx.x; i < kWarps * E; i += kThreads) warp_base[i] = 0;
  __syncthreads();
  for (int a0 = warp_begin; a0 < warp_end; a0 += cuda::kWarpSize) {  // warp-uniform bounds
    const int e = ExpertOf(a.topk_ids, a0 + lane, warp_end, E);
    const unsigned peers = __match_any_sync(kFullMask, e);
    if (e >= 0 && (peers & lanes_below) == 0) mine[e] += __popc(peers);  // the lowest peer
    __syncwarp();
  }
  __syncthreads();
  if constexpr (kSingle) {
    for (int e = threadIdx.x; e < E; e += kThreads) {
      int32_t total = 0;
      for (int w = 0; w < kWarps; ++w) total += warp_base[w * E + e];
      expert_rows[e] = total;
    }
    __syncthreads();
    ExpertOffsets(expert_rows, expert_rows + E, expert_rows + 2 * E, scratch, E, writer, a.offsets,
                  a.tile_offsets, a.active);
  }
  // Per expert: its first row in this chunk plus an exclusive prefix over the warps.
  for (int e = threadIdx.x; e < E; e += kThreads) {
    int32_t running = kSingle ? expert_rows[e] : a.chunk_counts[static_cast<int64_t>(blockIdx.x) * E + e];
    for (int w = 0; w < kWarps; ++w) {
      const int32_t c = warp_base[w * E + e];
      warp_base[w * E + e] = running;
      running += c;
    }
  }
  __syncthreads();
  for (int a0 = warp_begin; a0 < warp_end; a0 += cuda::kWarpSize) {
    const int i = a0 + lane;
    const int e = ExpertOf(a.topk_ids, i, warp_end, E);
    const unsigned peers = __match_any_sync(kFullMask, e);
    if (e >= 0) {
      const int row = mine[e] + __popc(peers & lanes_below);
      if (writer) {
        a.sorted[row] = i;
        a.position[i] = row;
      }
      if constexpr (kGather) row_of[i - begin] = row;
    } else if (i < warp_end) {
      if (writer) a.position[i] = -1;
      if constexpr (kGather) row_of[i - begin] = -1;
    }
    __syncwarp();  // every peer has read mine[e] before the lowest one advances it
    if (e >= 0 && (peers & lanes_below) == 0) mine[e] += __popc(peers);
    __syncwarp();
  }
  if constexpr (kGather) {
    __syncthreads();
    const int row_chunks = a.hidden / cuda::kBf16PerChunk;
    const int c0 = blockIdx.y * slice_chunks;
    const int width = min(slice_chunks, row_chunks - c0);
    if (width <= 0) return;
    const auto* x = reinterpret_cast<const uint4*>(a.x);
    auto* xg = reinterpret_cast<uint4*>(a.xg);
    // kCopyUnroll 16-byte loads in flight per thread before their stores.
    const int n = (end - begin) * width;
    for (int first = threadIdx.x; first < n; first += kThreads * kCopyUnroll) {
      uint4 v[kCopyUnroll];
      int64_t dst[kCopyUnroll];
#pragma unroll
      for (int u = 0; u < kCopyUnroll; ++u) {
        const int idx = first + u * kThreads;
        dst[u] = -1;
        if (idx >= n) continue;
        const int i = idx / width;
        const int c = c0 + (idx - i * width);
        const int row = row_of[i];
        if (row < 0) continue;
        v[u] = x[static_cast<int64_t>((begin + i) / a.top_k) * row_chunks + c];
        dst[u] = static_cast<int64_t>(row) * row_chunks + c;
      }
#pragma unroll
      for (int u = 0; u < kCopyUnroll; ++u) {
        if (dst[u] >= 0) xg[dst[u]] = v[u];
      }
    }
  }
}

template <bool kSingle, bool kGather>
__global__ void __launch_bounds__(kThreads)
    ScatterKernel(const __grid_constant__ PermuteArgs a, int slice_chunks) {
  extern __shared__ int32_t smem[];
  cuda::PdlEnter();  // the stage kernels launch with PDL (kernels/common/pdl.cuh)
  ScatterChunk<kSingle, kGather>(a, slice_chunks, smem);
}

// Shared memory of RoutePermuteKernel beyond the scatter's, in ints: each warp's routing
// scratch (moe_routing.cuh), scores and choice [E] f32 then taken [E].
int RouteScratchInts(int num_experts) {
  return kWarps * 2 * num_experts + (kWarps * num_experts + 3) / 4;
}

// Decode steps: the routing of every token (a warp per token, moe_routing.cuh) and the
// single-chunk permutation of its assignments in one block, one launch instead of two. The
// topk ids the routing writes are read back by the same block after a barrier.
__global__ void __launch_bounds__(kThreads)
    RoutePermuteKernel(const __grid_constant__ MoeRoutingParams r, const __grid_constant__ PermuteArgs a) {
  extern __shared__ int32_t smem[];
  const int E = a.num_experts;
  int32_t* route = smem + ScatterSmemInts(E, true, false);
  const int warp = threadIdx.x / cuda::kWarpSize;
  float* scores = reinterpret_cast<float*>(route) + warp * 2 * E;
  bool* taken = reinterpret_cast<bool*>(route + kWarps * 2 * E) + warp * E;
  cuda::PdlEnter();
  for (int t = warp; t < r.num_tokens; t += kWarps) {
    moe_cuda::RouteToken(r, t, {scores, scores + E, taken});
  }
  __syncthreads();  // the block's topk_ids writes are visible to all its threads after it
  ScatterChunk<true, false>(a, 0, smem);
}

template <typename Kernel>
absl::Status AllowSmem(Kernel kernel, size_t bytes, const char* what) {
  constexpr size_t kDefaultSmem = 48 * 1024;
  if (bytes <= kDefaultSmem) return absl::OkStatus();
  return cuda::CudaStatus(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(bytes)),
                          what);
}

cuda::LaunchShape Shape(dim3 grid, int threads, size_t smem, cudaStream_t s) {
  cuda::LaunchShape shape;
  shape.grid = grid;
  shape.block = dim3(threads);
  shape.smem_bytes = smem;
  shape.stream = s;
  return shape;
}

template <bool kSingle, bool kGather>
absl::Status LaunchScatter(const PermuteArgs& a, int chunks, int slices, int slice_chunks, cudaStream_t s) {
  const size_t smem = ScatterSmemInts(a.num_experts, kSingle, kGather) * sizeof(int32_t);
  RETURN_IF_ERROR(AllowSmem(ScatterKernel<kSingle, kGather>, smem, "moe_experts permute: raising the shared-memory limit"));
  return cuda::LaunchPdl("moe_experts permute scatter", Shape(dim3(chunks, slices), kThreads, smem, s),
                         ScatterKernel<kSingle, kGather>, a, slice_chunks);
}

// --- Baseline (2026-11-24): one block sorts all assignments, then the rows are gathered.

constexpr int kSortThreads = 1024;
constexpr int kSortWarps = kSortThreads / cuda::kWarpSize;
constexpr int kEltThreads = 256;

// Counting sort of the assignments by expert, stable, in one block: warp w owns the
// contiguous assignments [w * seg, (w + 1) * seg); per-(warp, expert) counts, a scan over
// warps and experts, then the same walk writes slots (as ScatterKernel does per chunk).
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

int Chunks(int num_assign) { return (num_assign + kChunk - 1) / kChunk; }

}  // namespace


bool PermuteFusesRouting(const PermuteArgs& a) {
  return a.routing != nullptr && !DecodeFoldsDisabled() && a.xg == nullptr && Chunks(a.num_assign) == 1 &&
         a.routing->num_tokens <= kFusedRoutingMaxTokens && a.num_experts <= kRoutingMaxExperts;
}

size_t PermuteScratchBytes(int num_assign, int num_experts) {
  return static_cast<size_t>(Chunks(num_assign)) * num_experts * sizeof(int32_t);
}

absl::Status LaunchPermute(const PermuteArgs& a, cudaStream_t s) {
  if (a.num_experts > kMaxExperts) {
    return absl::InvalidArgumentError(absl::StrCat("moe_experts: num_experts=", a.num_experts,
                                                   " exceeds the CUDA backend's ", kMaxExperts));
  }
  if (a.num_assign <= 0) return absl::OkStatus();
  const int chunks = Chunks(a.num_assign);
  const bool gather = a.xg != nullptr;
  if (a.routing != nullptr) {
    if (a.routing->router.weight != nullptr) return LaunchRouterPermute(a, s);
    RETURN_IF_ERROR(CheckCudaRouting(*a.routing));
    if (PermuteFusesRouting(a)) {
      const size_t smem =
          (ScatterSmemInts(a.num_experts, true, false) + RouteScratchInts(a.num_experts)) * sizeof(int32_t);
      RETURN_IF_ERROR(AllowSmem(RoutePermuteKernel, smem, "moe_experts route+permute: raising the shared-memory limit"));
      return cuda::LaunchPdl("moe_experts route+permute", Shape(dim3(1), kThreads, smem, s),
                             RoutePermuteKernel, *a.routing, a);
    }
    RETURN_IF_ERROR(MoeRoutingCuda(*a.routing, s));
  }
  int slices = 1, slice_chunks = 0;
  if (gather) {
    // Enough (chunk, slice) blocks to keep every SM copying; slices of >= 64 bytes.
    const int row_chunks = a.hidden / cuda::kBf16PerChunk;
    const int want = (kBlocksPerSm * cuda::CurrentDeviceSmCount() + chunks - 1) / chunks;
    const int most = std::max(1, row_chunks / kSliceChunkMultiple);
    slices = std::clamp(want, 1, most);
    slice_chunks = (row_chunks + slices - 1) / slices;
    slice_chunks = (slice_chunks + kSliceChunkMultiple - 1) / kSliceChunkMultiple * kSliceChunkMultiple;
    slices = (row_chunks + slice_chunks - 1) / slice_chunks;
  }
  if (chunks == 1) {
    return gather ? LaunchScatter<true, true>(a, 1, slices, slice_chunks, s)
                  : LaunchScatter<true, false>(a, 1, 1, 0, s);
  }
  const size_t count_smem = a.num_experts * sizeof(int32_t);
  RETURN_IF_ERROR(cuda::LaunchPdl("moe_experts permute count", Shape(dim3(chunks), kThreads, count_smem, s),
                                  CountChunkKernel, a.topk_ids, a.num_assign, a.num_experts, a.chunk_counts));
  const size_t scan_smem = (3 * a.num_experts + kScanScratch) * sizeof(int32_t);
  RETURN_IF_ERROR(cuda::LaunchPdl("moe_experts permute scan", Shape(dim3(1), kScanThreads, scan_smem, s),
                                  ScanChunksKernel, a.chunk_counts, chunks, a.num_experts, a.offsets,
                                  a.tile_offsets, a.active));
  return gather ? LaunchScatter<false, true>(a, chunks, slices, slice_chunks, s)
                : LaunchScatter<false, false>(a, chunks, 1, 0, s);
}

absl::Status LaunchBaselineSort(const PermuteArgs& a, cudaStream_t s) {
  if (a.num_experts > kMaxExperts) {
    return absl::InvalidArgumentError(absl::StrCat("moe_experts: num_experts=", a.num_experts,
                                                   " exceeds the CUDA backend's ", kMaxExperts));
  }
  if (a.routing != nullptr) RETURN_IF_ERROR(MoeRoutingCuda(*a.routing, s));
  // Per-(warp, expert) counts plus per-expert bases: up to 132 KiB at kMaxExperts experts.
  const size_t smem = static_cast<size_t>(kSortWarps + 1) * a.num_experts * sizeof(int32_t);
  RETURN_IF_ERROR(AllowSmem(SortKernel, smem, "moe_experts sort: raising the shared-memory limit"));
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
