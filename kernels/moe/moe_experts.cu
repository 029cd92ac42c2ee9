// moe experts CUDA backend (bf16): routed experts without any host sync.
//
// The per-expert token counts exist only on the device, so nothing on the host may size a
// launch by them (that would need a device->host copy inside the step and would break CUDA
// graph capture). Instead:
//   1. SortKernel (one block): stable counting sort of the num_tokens*top_k assignments by
//      expert into the workspace: expert row offsets, the expert's row-tile offsets
//      (ceil(count/kBM) tiles each), and every assignment's sorted position. Stable, so the
//      workspace is identical run to run (no atomics anywhere: see docs/kernels.md,
//      "Determinism").
//   2. GroupedGemmKernel, launched over an upper bound of row tiles known on the host,
//      ceil(A/kBM) + min(E, A): each block finds its expert from the tile offsets (binary
//      search) and exits if its tile is past the last. It computes a kBM x kBN tile of
//      rows(e) x W_e^T with bf16 tensor-core MMAs (m16n8k16, f32 accumulators) on a 3-stage
//      cp.async pipeline. The gate_up GEMM gathers x rows through the sorted ids inside its
//      loads, so x is never copied.
//   3. SiLU-and-mul in place over the gate half; the down GEMM (f32 out, one row per
//      assignment); a combine kernel that sums each token's top_k rows weighted by
//      topk_weights in f32 and rounds once.
// Padding cost: at most one partial tile per active expert; blocks of empty tiles exit at once.
#include <cuda_bf16.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/common/cuda_util.cuh"
#include "kernels/common/dense_cuda.cuh"
#include "kernels/moe/api.h"

namespace mlaserve::kernels {
namespace {

using cuda::CpAsync16;
using cuda::SwizzledOffset;

constexpr int kBM = 64, kBN = 64, kBK = 64;  // block tile; BK = 8 chunks of 8 bf16
constexpr int kStages = 3;
constexpr int kThreads = 128;                // 4 warps, 2 x 2, each 32 x 32
constexpr int kChunksPerRow = kBK / cuda::kBf16PerChunk;
constexpr int kTileBytes = kBM * kBK * 2;    // == kBN * kBK * 2
constexpr int kSmemBytes = kStages * 2 * kTileBytes;
constexpr int kLoadsPerThread = kBM * kChunksPerRow / kThreads;
constexpr int kSortThreads = 1024;
constexpr int kSortWarps = kSortThreads / 32;
constexpr int kMaxExperts = 1024;

struct GroupedGemmArgs {
  const __nv_bfloat16* a;  // rows: gathered (a + (sorted[r] / top_k) * lda) or contiguous (a + r * lda)
  int64_t lda;
  const int32_t* sorted;   // non-null: gather rows through it
  int top_k;
  const __nv_bfloat16* w;  // [E][N, K] row-major
  int64_t w_expert_stride;
  int n, k;
  void* c;                 // [A, N] rows in sorted order, row stride ldc (bf16 or f32)
  int64_t ldc;
  const int32_t* offsets;       // [E + 1]
  const int32_t* tile_offsets;  // [E + 1]
  int num_experts;
};

char* Carve(char*& cursor, size_t bytes) {
  constexpr size_t kAlign = 256;
  char* at = cursor;
  cursor += (bytes + kAlign - 1) / kAlign * kAlign;
  return at;
}

// Counting sort of the assignments by expert, stable: within an expert, assignments keep
// their index order, so `sorted` and `position` are the same on every run (an atomicAdd slot
// counter made them depend on thread timing; the outputs did not change, since every row of
// the grouped GEMMs depends only on its own input row, but a workspace that varies run to run
// hides real nondeterminism when one compares runs).
// Warp w owns the contiguous assignments [w * seg, (w + 1) * seg) and walks them 32 at a
// time; lanes with the same expert find each other with __match_any_sync, so a lane's rank
// among its peers plus a per-(warp, expert) running count is its slot. Pass 1 counts per
// (warp, expert) into shared memory (each warp writes only its own row: no atomics), a scan
// over warps and experts turns the counts into first slots, and pass 2 repeats the walk and
// writes slots. Same two passes over topk_ids as the atomic version, and no shared-memory
// atomics on hot experts.
__global__ void __launch_bounds__(kSortThreads)
    SortKernel(const int32_t* topk_ids, int num_assign, int num_experts, int32_t* sorted,
               int32_t* offsets, int32_t* tile_offsets, int32_t* position) {
  extern __shared__ int32_t warp_count[];  // [kSortWarps][num_experts], then base[num_experts]
  int32_t* base = warp_count + kSortWarps * num_experts;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int seg = (num_assign + kSortWarps - 1) / kSortWarps;
  const int begin = warp * seg, end = min(num_assign, begin + seg);
  const unsigned lanes_below = (1u << lane) - 1u;
  for (int i = threadIdx.x; i < kSortWarps * num_experts; i += kSortThreads) warp_count[i] = 0;
  __syncthreads();
  int32_t* mine = warp_count + warp * num_experts;
  // Expert of assignment a, or -1 (past this warp's range, or an out-of-range id).
  auto expert_of = [&](int a) {
    if (a >= end) return -1;
    const int e = topk_ids[a];
    return (e >= 0 && e < num_experts) ? e : -1;
  };
  for (int a0 = begin; a0 < end; a0 += 32) {
    const int e = expert_of(a0 + lane);
    const unsigned peers = __match_any_sync(0xffffffffu, e);
    if (e >= 0 && (peers & lanes_below) == 0) mine[e] += __popc(peers);  // the lowest peer
    __syncwarp();
  }
  __syncthreads();
  // Per expert: exclusive prefix over warps, and the expert's total into base[e].
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
    int32_t rows = 0, tiles = 0;
    for (int e = 0; e < num_experts; ++e) {
      const int32_t count = base[e];
      offsets[e] = rows;
      tile_offsets[e] = tiles;
      base[e] = rows;
      rows += count;
      tiles += (count + kBM - 1) / kBM;
    }
    offsets[num_experts] = rows;
    tile_offsets[num_experts] = tiles;
  }
  __syncthreads();
  for (int a0 = begin; a0 < end; a0 += 32) {
    const int a = a0 + lane;
    const int e = expert_of(a);
    const unsigned peers = __match_any_sync(0xffffffffu, e);
    if (e >= 0) {
      const int pos = base[e] + mine[e] + __popc(peers & lanes_below);
      sorted[pos] = a;
      position[a] = pos;
    } else if (a < end) {
      position[a] = -1;  // out-of-range id: contributes nothing (the CPU backend refuses it)
    }
    __syncwarp();  // every peer has read mine[e] before the lowest one advances it
    if (e >= 0 && (peers & lanes_below) == 0) mine[e] += __popc(peers);
    __syncwarp();
  }
}

template <typename OutT>
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

  OutT* c = static_cast<OutT*>(g.c);
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = row0 + wm * 32 + mi * 16 + lane / 4 + half * 8;
      if (r >= row_end) continue;
      OutT* out_row = c + static_cast<int64_t>(r) * g.ldc;
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
        const int col = n0 + wn * 32 + ni * 8 + 2 * (lane % 4);
        if (col < g.n) out_row[col] = cuda::FromF32<OutT>(acc[mi][ni][2 * half]);
        if (col + 1 < g.n) out_row[col + 1] = cuda::FromF32<OutT>(acc[mi][ni][2 * half + 1]);
      }
    }
  }
}

// In place over rows of [gate | up] (row stride 2*inter): gate <- silu(gate) * up.
__global__ void SiluMulInPlaceKernel(__nv_bfloat16* h, const int32_t* offsets, int num_experts,
                                     int inter) {
  const int64_t total = static_cast<int64_t>(offsets[num_experts]) * inter;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / inter, j = i - r * inter;
    __nv_bfloat16* row = h + r * 2 * inter;
    const float gv = __bfloat162float(row[j]), uv = __bfloat162float(row[j + inter]);
    row[j] = __float2bfloat16_rn(gv / (1.0f + expf(-gv)) * uv);
  }
}

// out[t, :] = sum_j topk_weights[t, j] * ys[position[t*top_k + j], :], f32 sums, one rounding.
__global__ void CombineKernel(const float* ys, const int32_t* position, const float* topk_weights,
                              __nv_bfloat16* out, int num_tokens, int top_k, int hidden) {
  const int64_t total = static_cast<int64_t>(num_tokens) * hidden;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / hidden, j = i - t * hidden;
    float sum = 0.0f;
    for (int q = 0; q < top_k; ++q) {
      const int pos = position[t * top_k + q];
      if (pos >= 0) sum += topk_weights[t * top_k + q] * ys[static_cast<int64_t>(pos) * hidden + j];
    }
    out[i] = __float2bfloat16_rn(sum);
  }
}

template <typename OutT>
absl::Status LaunchGroupedGemm(const GroupedGemmArgs& g, int max_tiles, cudaStream_t s) {
  const dim3 grid((g.n + kBN - 1) / kBN, max_tiles);
  GroupedGemmKernel<OutT><<<grid, kThreads, kSmemBytes, s>>>(g);
  return cuda::LaunchStatus("moe_experts grouped gemm");
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

absl::Status MoeExpertsCuda(const MoeExpertsParams& p, void* stream) {
  if (p.dtype != DType::kBF16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "moe_experts: the CUDA backend supports dtype=bf16 only, got ", DTypeName(p.dtype)));
  }
  if (p.hidden % 8 != 0 || p.inter % 8 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("moe_experts: hidden=", p.hidden, " and inter=",
                                                   p.inter, " must be multiples of 8 on CUDA (16-byte rows)"));
  }
  if (p.num_experts > kMaxExperts) {
    return absl::InvalidArgumentError(absl::StrCat("moe_experts: num_experts=", p.num_experts,
                                                   " exceeds the CUDA backend's ", kMaxExperts));
  }
  if (!Aligned16(p.x) || !Aligned16(p.gate_up) || !Aligned16(p.down) || !Aligned16(p.workspace)) {
    return absl::InvalidArgumentError("moe_experts: x, gate_up, down and workspace must be 16-byte aligned on CUDA");
  }
  const int num_assign = p.num_tokens * p.top_k;
  const int64_t H = p.hidden, I = p.inter;
  char* cursor = static_cast<char*>(p.workspace);  // same carving order as MoeExpertsWorkspaceBytes
  auto* sorted = reinterpret_cast<int32_t*>(Carve(cursor, num_assign * sizeof(int32_t)));
  auto* offsets = reinterpret_cast<int32_t*>(Carve(cursor, (p.num_experts + 1) * sizeof(int32_t)));
  Carve(cursor, static_cast<size_t>(num_assign) * H * 2);  // x gathered: unused (gathered in the GEMM)
  auto* hs = reinterpret_cast<__nv_bfloat16*>(Carve(cursor, static_cast<size_t>(num_assign) * 2 * I * 2));
  auto* ys = reinterpret_cast<float*>(Carve(cursor, static_cast<size_t>(num_assign) * H * sizeof(float)));
  auto* tile_offsets = reinterpret_cast<int32_t*>(Carve(cursor, (p.num_experts + 1) * sizeof(int32_t)));
  auto* position = reinterpret_cast<int32_t*>(Carve(cursor, num_assign * sizeof(int32_t)));

  auto s = static_cast<cudaStream_t>(stream);
  // Per-(warp, expert) counts plus per-expert bases: up to 132 KiB at kMaxExperts experts.
  const size_t sort_smem = static_cast<size_t>(kSortWarps + 1) * p.num_experts * sizeof(int32_t);
  if (sort_smem > 48 * 1024) {
    RETURN_IF_ERROR(cuda::CudaStatus(
        cudaFuncSetAttribute(SortKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(sort_smem)),
        "moe_experts sort: raising the shared-memory limit"));
  }
  SortKernel<<<1, kSortThreads, sort_smem, s>>>(p.topk_ids, num_assign, p.num_experts, sorted,
                                                offsets, tile_offsets, position);
  RETURN_IF_ERROR(cuda::LaunchStatus("moe_experts sort"));
  const int max_tiles = (num_assign + kBM - 1) / kBM + std::min(p.num_experts, num_assign);

  GroupedGemmArgs up{};
  up.a = static_cast<const __nv_bfloat16*>(p.x);
  up.lda = H;
  up.sorted = sorted;
  up.top_k = p.top_k;
  up.w = static_cast<const __nv_bfloat16*>(p.gate_up);
  up.w_expert_stride = 2 * I * H;
  up.n = static_cast<int>(2 * I);
  up.k = static_cast<int>(H);
  up.c = hs;
  up.ldc = 2 * I;
  up.offsets = offsets;
  up.tile_offsets = tile_offsets;
  up.num_experts = p.num_experts;
  RETURN_IF_ERROR(LaunchGroupedGemm<__nv_bfloat16>(up, max_tiles, s));

  constexpr int kEltThreads = 256;
  SiluMulInPlaceKernel<<<cuda::GridFor(static_cast<int64_t>(num_assign) * I, kEltThreads), kEltThreads, 0, s>>>(
      hs, offsets, p.num_experts, static_cast<int>(I));
  RETURN_IF_ERROR(cuda::LaunchStatus("moe_experts silu_and_mul"));

  GroupedGemmArgs dn = up;
  dn.a = hs;
  dn.lda = 2 * I;
  dn.sorted = nullptr;
  dn.w = static_cast<const __nv_bfloat16*>(p.down);
  dn.w_expert_stride = H * I;
  dn.n = static_cast<int>(H);
  dn.k = static_cast<int>(I);
  dn.c = ys;
  dn.ldc = H;
  RETURN_IF_ERROR(LaunchGroupedGemm<float>(dn, max_tiles, s));

  CombineKernel<<<cuda::GridFor(static_cast<int64_t>(p.num_tokens) * H, kEltThreads), kEltThreads, 0, s>>>(
      ys, position, p.topk_weights, static_cast<__nv_bfloat16*>(p.out), p.num_tokens, p.top_k,
      static_cast<int>(H));
  return cuda::LaunchStatus("moe_experts combine");
}

}  // namespace mlaserve::kernels
