// Stage 1 of the routed experts on CUDA (moe_cuda.h): the routing permutation. Every
// (token, k) assignment gets the row it occupies in expert order, and (kSm90) its x row is
// copied there.
//
// The assignments are cut into chunks of kChunk (2048) in index order, one block each:
//   CountChunkKernel   per chunk, how many assignments go to each expert;
//   ScanChunksKernel   one block: expert totals -> row offsets (and the tiled path's row-tile
//                      offsets, and the list of experts with rows), then per expert an
//                      exclusive scan over the chunks: the first row of (chunk, expert);
//   ScatterKernel      per chunk again: each warp owns up to 256 consecutive assignments (a
//                      short chunk split evenly over the warps), its ids held in registers
//                      for both of its passes; lanes with the same expert find each other
//                      with __match_any_sync, so an assignment's row is (chunk, expert) base
//                      + the counts of the warps before it + its rank among its peers. It
//                      writes `sorted`/`position`.
// The x rows, when asked for, are copied in one of two ways (PermuteRowCopy):
//   kApart (prefill)   the scatter ranks only, one block per chunk, and does the scan's work
//                      itself (each block sums the chunk counts of every chunk: no
//                      ScanChunksKernel launch); then LaunchGatherRows (moe_rows.cu) copies
//                      whole rows in destination order over every SM, so the copy runs at copy
//                      bandwidth instead of behind a ranking that every block would redo;
//   kInScatter         the scatter copies too, with a grid dimension of column slices (each
//                      block redoes the ranking for its own slice of the rows) to keep every SM
//                      copying: the earlier form (MLASERVE_MOE_SCATTER_SPLIT=0), and the
//                      one-chunk form.
// Rows of one expert keep assignment order, i.e. token order: the same result on every run
// and the same as the one-block SortKernel it replaces (the baseline, moe_permute_baseline.cu).
// No atomics decide a position (the counts use warp-aggregated shared-memory adds, which are
// order-free). With a single chunk (decode; up to 2048 assignments) ScatterKernel does the
// counting and the scan itself, and copies the rows when asked: one launch.
#include <cuda_bf16.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/common/cuda_util.cuh"
#include "kernels/common/device_arch.h"
#include "kernels/common/env_switch.h"
#include "kernels/common/pdl.cuh"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/moe_routing.cuh"

namespace mlaserve::kernels::moe_cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / cuda::kWarpSize;
constexpr int kPerWarp = 256;              // assignments a warp owns in a full chunk
constexpr int kChunk = kWarps * kPerWarp;  // assignments per block
constexpr int kIdsPerLane = kPerWarp / cuda::kWarpSize;  // a warp's ids in a lane's registers
constexpr int kIdsPerThread = kChunk / kThreads;         // CountChunkKernel's, the same 8
constexpr int kScanThreads = 1024;
constexpr int kScanScratch = cuda::kWarpSize + 1;  // BlockExclusiveScan's shared scratch
constexpr int kSliceChunkMultiple = 4;     // gather slices are multiples of 64 bytes of a row
constexpr int kBlocksPerSm = 4;            // kInScatter gather grid target
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
  // Every id of the thread loaded before the first is counted: one memory latency, not one a
  // step (the steps' loads would otherwise wait for each other behind the match and the add).
  int expert[kIdsPerThread];
#pragma unroll
  for (int j = 0; j < kIdsPerThread; ++j) {
    expert[j] = ExpertOf(ids, begin + j * kThreads + threadIdx.x, end, num_experts);
  }
#pragma unroll
  for (int j = 0; j < kIdsPerThread; ++j) {  // the same trip count in every lane
    const int e = expert[j];
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

// Where a scatter block finds the first row of each (its chunk, expert).
enum class ChunkBase : uint8_t {
  kOwn,      // the only chunk: its own counts, scanned in the block (decode: one launch)
  kScanned,  // chunk_counts as ScanChunksKernel leaves them: those first rows
  kCounts,   // chunk_counts as CountChunkKernel leaves them: every block sums and scans them
};

// Shared memory of ScatterKernel, in ints.
__host__ __device__ int ScatterSmemInts(int num_experts, ChunkBase base, bool gather) {
  const int per_expert = base == ChunkBase::kOwn ? 3 : base == ChunkBase::kCounts ? 4 : 0;
  return (kWarps + per_expert) * num_experts + (gather ? kChunk : 0) + kScanScratch;
}

// One chunk of assignments (blockIdx.x of gridDim.x) and one column slice of the x rows
// (blockIdx.y, `slice_chunks` 16-byte chunks wide). The slice-0 blocks write sorted/position;
// the offsets are written by the only block (kOwn) or by chunk 0 (kCounts). `smem`:
// ScatterSmemInts ints of shared memory. Runs after PdlEnter.
template <ChunkBase kBase, bool kGather>
__device__ void ScatterChunk(const PermuteArgs& a, int slice_chunks, int32_t* smem) {
  const int E = a.num_experts;
  int32_t* warp_base = smem;                                  // [kWarps][E]
  int32_t* row_of = warp_base + kWarps * E;                   // [kChunk] (kGather)
  int32_t* scratch = row_of + (kGather ? kChunk : 0);         // [kScanScratch]
  int32_t* expert_rows = scratch + kScanScratch;              // [3][E] (kOwn, kCounts)
  int32_t* chunks_before = expert_rows + 3 * E;               // [E] (kCounts)
  const int warp = threadIdx.x / cuda::kWarpSize, lane = threadIdx.x % cuda::kWarpSize;
  const unsigned lanes_below = (1u << lane) - 1u;
  const int begin = blockIdx.x * kChunk, end = min(a.num_assign, begin + kChunk);
  // The chunk split over the warps in whole warp steps, warp w's assignments before w + 1's: a
  // short chunk (a decode step's few hundred assignments) keeps every warp ranking, not the
  // first few with 256 each. Any contiguous split gives the same rows.
  const int per_warp = min(kPerWarp, ((end - begin + kWarps - 1) / kWarps + cuda::kWarpSize - 1) /
                                         cuda::kWarpSize * cuda::kWarpSize);
  const int warp_begin = begin + warp * per_warp, warp_end = min(end, warp_begin + per_warp);
  const bool writer = blockIdx.y == 0;
  int32_t* mine = warp_base + warp * E;
  // The warp's ids, all loaded before the first is ranked (one memory latency for both passes
  // instead of one a step): lane l holds assignments warp_begin + 32 j + l, -1 past warp_end.
  int ids[kIdsPerLane];
#pragma unroll
  for (int j = 0; j < kIdsPerLane; ++j) ids[j] = ExpertOf(a.topk_ids, warp_begin + j * cuda::kWarpSize + lane, warp_end, E);

  for (int i = threadIdx.x; i < kWarps * E; i += kThreads) warp_base[i] = 0;
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kIdsPerLane; ++j) {  // warp-uniform trip count
    const int e = ids[j];
    const unsigned peers = __match_any_sync(kFullMask, e);
    if (e >= 0 && (peers & lanes_below) == 0) mine[e] += __popc(peers);  // the lowest peer
    __syncwarp();
  }
  __syncthreads();
  if constexpr (kBase != ChunkBase::kScanned) {
    // Expert totals (and, kCounts, each expert's rows in the chunks before this one), then the
    // offsets, as ScanChunksKernel computes them.
    for (int e = threadIdx.x; e < E; e += kThreads) {
      int32_t total = 0;
      if constexpr (kBase == ChunkBase::kOwn) {
        for (int w = 0; w < kWarps; ++w) total += warp_base[w * E + e];
      } else {
        int32_t before = 0;
#pragma unroll 8
        for (int c = 0; c < static_cast<int>(gridDim.x); ++c) {
          if (c == static_cast<int>(blockIdx.x)) before = total;
          total += a.chunk_counts[static_cast<int64_t>(c) * E + e];
        }
        chunks_before[e] = before;
      }
      expert_rows[e] = total;
    }
    __syncthreads();
    const bool offsets_writer = writer && blockIdx.x == 0;
    ExpertOffsets(expert_rows, expert_rows + E, expert_rows + 2 * E, scratch, E, offsets_writer, a.offsets,
                  a.tile_offsets, a.active);
  }
  // Per expert: its first row in this chunk plus an exclusive prefix over the warps.
  for (int e = threadIdx.x; e < E; e += kThreads) {
    int32_t running;
    if constexpr (kBase == ChunkBase::kOwn) {
      running = expert_rows[e];
    } else if constexpr (kBase == ChunkBase::kCounts) {
      running = expert_rows[e] + chunks_before[e];
    } else {
      running = a.chunk_counts[static_cast<int64_t>(blockIdx.x) * E + e];
    }
    for (int w = 0; w < kWarps; ++w) {
      const int32_t c = warp_base[w * E + e];
      warp_base[w * E + e] = running;
      running += c;
    }
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kIdsPerLane; ++j) {
    const int i = warp_begin + j * cuda::kWarpSize + lane;
    const int e = ids[j];
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

template <ChunkBase kBase, bool kGather>
__global__ void __launch_bounds__(kThreads)
    ScatterKernel(const __grid_constant__ PermuteArgs a, int slice_chunks) {
  extern __shared__ int32_t smem[];
  cuda::PdlEnter();  // the stage kernels launch with PDL (kernels/common/pdl.cuh)
  ScatterChunk<kBase, kGather>(a, slice_chunks, smem);
}

// Shared memory of RoutePermuteKernel beyond the scatter's, in ints: each warp's routing
// scratch (moe_routing.cuh), the choices [E] f32.
int RouteScratchInts(int num_experts) { return kWarps * num_experts; }

// Decode steps: the routing of every token (a warp per token, moe_routing.cuh) and the
// single-chunk permutation of its assignments in one block, one launch instead of two. The
// topk ids the routing writes are read back by the same block after a barrier.
__global__ void __launch_bounds__(kThreads)
    RoutePermuteKernel(const __grid_constant__ MoeRoutingParams r, const __grid_constant__ PermuteArgs a) {
  extern __shared__ int32_t smem[];
  const int E = a.num_experts;
  int32_t* route = smem + ScatterSmemInts(E, ChunkBase::kOwn, false);
  const int warp = threadIdx.x / cuda::kWarpSize;
  float* choice = reinterpret_cast<float*>(route) + warp * E;
  cuda::PdlEnter();
  for (int t = warp; t < r.num_tokens; t += kWarps) moe_cuda::RouteToken(r, t, choice);
  __syncthreads();  // the block's topk_ids writes are visible to all its threads after it
  ScatterChunk<ChunkBase::kOwn, false>(a, 0, smem);
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

template <ChunkBase kBase, bool kGather>
absl::Status LaunchScatter(const PermuteArgs& a, int chunks, int slices, int slice_chunks, cudaStream_t s) {
  const size_t smem = ScatterSmemInts(a.num_experts, kBase, kGather) * sizeof(int32_t);
  RETURN_IF_ERROR(AllowSmem(ScatterKernel<kBase, kGather>, smem, "moe_experts permute: raising the shared-memory limit"));
  return cuda::LaunchPdl("moe_experts permute scatter", Shape(dim3(chunks, slices), kThreads, smem, s),
                         ScatterKernel<kBase, kGather>, a, slice_chunks);
}

int Chunks(int num_assign) { return (num_assign + kChunk - 1) / kChunk; }

// MLASERVE_MOE_SCATTER_SPLIT=0 in the environment: PermuteRowCopy::kAuto is kInScatter (timing
// comparisons). Read once.
bool RowCopyApartDisabled() {
  static const bool disabled = EnvSwitchedOff("MLASERVE_MOE_SCATTER_SPLIT");
  return disabled;
}

// LaunchPermute's launches up to the kApart row copy (`rows_apart`: PermuteCopiesRowsApart).
absl::Status LaunchRanking(const PermuteArgs& a, bool rows_apart, cudaStream_t s) {
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
      const size_t smem = (ScatterSmemInts(a.num_experts, ChunkBase::kOwn, false) + RouteScratchInts(a.num_experts)) *
                          sizeof(int32_t);
      RETURN_IF_ERROR(AllowSmem(RoutePermuteKernel, smem, "moe_experts route+permute: raising the shared-memory limit"));
      return cuda::LaunchPdl("moe_experts route+permute", Shape(dim3(1), kThreads, smem, s),
                             RoutePermuteKernel, *a.routing, a);
    }
    RETURN_IF_ERROR(MoeRoutingCuda(*a.routing, s));
  }
  int slices = 1, slice_chunks = 0;
  if (gather && !rows_apart) {
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
    return gather ? LaunchScatter<ChunkBase::kOwn, true>(a, 1, slices, slice_chunks, s)
                  : LaunchScatter<ChunkBase::kOwn, false>(a, 1, 1, 0, s);
  }
  const size_t count_smem = a.num_experts * sizeof(int32_t);
  RETURN_IF_ERROR(cuda::LaunchPdl("moe_experts permute count", Shape(dim3(chunks), kThreads, count_smem, s),
                                  CountChunkKernel, a.topk_ids, a.num_assign, a.num_experts, a.chunk_counts));
  // kApart: no ScanChunksKernel, each chunk's ranking block scans the counts itself, so count,
  // rank and copy are three launches, as count, scan and scatter are.
  if (rows_apart) return LaunchScatter<ChunkBase::kCounts, false>(a, chunks, 1, 0, s);
  const size_t scan_smem = (3 * a.num_experts + kScanScratch) * sizeof(int32_t);
  RETURN_IF_ERROR(cuda::LaunchPdl("moe_experts permute scan", Shape(dim3(1), kScanThreads, scan_smem, s),
                                  ScanChunksKernel, a.chunk_counts, chunks, a.num_experts, a.offsets,
                                  a.tile_offsets, a.active));
  return gather ? LaunchScatter<ChunkBase::kScanned, true>(a, chunks, slices, slice_chunks, s)
                : LaunchScatter<ChunkBase::kScanned, false>(a, chunks, 1, 0, s);
}

}  // namespace

bool PermuteFusesRouting(const PermuteArgs& a) {
  return a.routing != nullptr && !DecodeFoldsDisabled() && a.xg == nullptr && Chunks(a.num_assign) == 1 &&
         a.routing->num_tokens <= kFusedRoutingMaxTokens && a.num_experts <= kRoutingMaxExperts;
}

size_t PermuteScratchBytes(int num_assign, int num_experts) {
  return static_cast<size_t>(Chunks(num_assign)) * num_experts * sizeof(int32_t);
}

bool PermuteCopiesRowsApart(const PermuteArgs& a) {
  if (a.xg == nullptr || Chunks(a.num_assign) <= 1) return false;
  switch (a.row_copy) {
    case PermuteRowCopy::kApart: return true;
    case PermuteRowCopy::kInScatter: return false;
    case PermuteRowCopy::kAuto: break;
  }
  return !RowCopyApartDisabled();
}

absl::Status LaunchPermute(const PermuteArgs& a, cudaStream_t s, ExpertsStageObserver* observer) {
  const bool rows_apart = PermuteCopiesRowsApart(a);
  RETURN_IF_ERROR(LaunchRanking(a, rows_apart, s));
  if (observer != nullptr) observer->AfterStage(ExpertsStage::kPermute, s);
  if (!rows_apart) return absl::OkStatus();
  RETURN_IF_ERROR(LaunchGatherRows(a, s));
  if (observer != nullptr) observer->AfterStage(ExpertsStage::kGather, s);
  return absl::OkStatus();
}

}  // namespace mlaserve::kernels::moe_cuda
