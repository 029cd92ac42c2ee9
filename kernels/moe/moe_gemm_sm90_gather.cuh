// kSm90 variant 12 (moe_cuda.h): our grouped GEMM for Hopper, written on CuTe for the routed
// experts' products, with what CUTLASS's grouped kernel cannot do:
//   - A rows gathered in the load: with `sorted` set, row r of expert e's A is x[sorted[row0 +
//     r] / top_k], so the permutation need not copy x into expert order first (a write and a
//     read of [A, hidden]);
//   - no TMA descriptor per expert: B is one 3-D tensor [E][N][K] (one descriptor, built on
//     the host with the weights' address; the expert is a coordinate), A rows are loaded with
//     cp.async, D is stored from registers (StoreAccumulatorTile: 16-byte stores, SiLU * up
//     fused or not), so switching expert between tiles costs nothing;
//   - the tile schedule computed in each CTA from the expert offsets (a warp scan of each
//     expert's tile count into shared memory, then a binary search per tile).
//
// Shape: persistent, one CTA of 384 threads per SM; 128 x 256 x 64 tiles, 4 stages (48 KiB
// each). Warp group 0 produces: its 128 threads copy the tile's 128 A rows (8 16-byte chunks
// each per stage) with cp.async into the 128-byte-swizzled K-major layout wgmma reads, and
// thread 0 loads B's 256 x 64 box by TMA. cp.async writes go through the generic proxy, so
// each producer thread signals a stage only after its copies of that stage landed
// (cp.async.wait_group, two stages behind) and a proxy fence; the stage's barrier expects the
// 128 producer arrivals plus the TMA's bytes. Warp groups 1 and 2 (cooperative) each compute
// 64 rows x 256 columns with m64n256k16 wgmma, release a stage one k-step later (when the
// wgmma reading it has retired) and store their half of the tile. Tiles are numbered expert by
// expert, M fastest within a column of N (as CUTLASS's grouped scheduler with AlongM), and a CTA
// takes every gridDim-th tile, so the CTAs working at one time share a few experts' weights in L2.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "cute/arch/copy_sm80.hpp"
#include "cute/tensor.hpp"
#include "cutlass/arch/barrier.h"
#include "cutlass/arch/reg_reconfig.h"
#include "cutlass/bfloat16.h"
#include "kernels/common/device_arch.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/moe_sm90_tile_store.cuh"

namespace mlaserve::kernels::moe_cuda::gather_gemm {

using namespace cute;

using Element = cutlass::bfloat16_t;
constexpr int kTileM = 128, kTileN = 256, kTileK = 64;
constexpr int kStages = 4;
constexpr int kLag = 2;  // stages a producer thread keeps in flight before signalling one (<= kStages - 2)
constexpr int kProducerThreads = 128, kConsumerThreads = 256;
constexpr int kThreads = kProducerThreads + kConsumerThreads;
constexpr int kChunkElems = 8;                              // 16-byte cp.async chunks
constexpr int kChunksPerRow = kTileK / kChunkElems;         // 8
constexpr int kRowsPerPass = kProducerThreads / kChunksPerRow;  // 16 rows per pass of the producers
constexpr int kRowsPerThread = kTileM / kRowsPerPass;       // 8 rows per producer thread
constexpr int kProducerRegisters = 40, kConsumerRegisters = 232;
static_assert(kLag <= kStages - 2, "a producer must not wait for a stage the consumers cannot release yet");

using SmemAtom = GMMA::Layout_K_SW128_Atom<Element>;
using SmemLayoutA = decltype(tile_to_shape(SmemAtom{}, make_shape(Int<kTileM>{}, Int<kTileK>{}, Int<kStages>{})));
using SmemLayoutB = decltype(tile_to_shape(SmemAtom{}, make_shape(Int<kTileN>{}, Int<kTileK>{}, Int<kStages>{})));
using TiledMma = decltype(make_tiled_mma(
    GMMA::ss_op_selector<Element, Element, float, Shape<Int<kTileM>, Int<kTileN>, Int<kTileK>>,
                         GMMA::Major::K, GMMA::Major::K>(),
    Layout<Shape<_2, _1, _1>>{}));
static_assert(size(TiledMma{}) == kConsumerThreads, "two consumer warp groups");

// B: the weights [E][N][K] as one (N, K, E) tensor.
using GmemLayoutB = Layout<Shape<int, int, int>, Stride<int64_t, _1, int64_t>>;
inline auto MakeTmaB(const Element* w, int n, int k, int e) {
  Tensor gB = make_tensor(make_gmem_ptr(w), GmemLayoutB(make_shape(n, k, e), make_stride(int64_t{k}, _1{}, int64_t{n} * k)));
  return make_tma_copy(SM90_TMA_LOAD{}, gB, SmemLayoutB{}(_, _, Int<0>{}), make_shape(Int<kTileN>{}, Int<kTileK>{}),
                       Int<1>{});
}
using TmaB = decltype(MakeTmaB(nullptr, 1, 1, 1));

struct Params {
  TmaB tma_b;
  const Element* a;          // A rows (x rows with `sorted`, else rows in sorted order)
  int64_t lda;
  const int32_t* sorted;     // non-null: gather row r through sorted[r] / top_k
  int top_k;
  const int32_t* offsets;    // [E + 1]; null: one group of `rows` rows
  int rows;
  __nv_bfloat16* d;          // [A, N] (or [A, N/2] with the SiLU), row stride ldd
  int64_t ldd;
  int n, k, num_experts;
};

struct SharedStorage {
  alignas(1024) Element a[cosize_v<SmemLayoutA>];
  alignas(1024) Element b[cosize_v<SmemLayoutB>];
  alignas(8) uint64_t full[kStages];
  alignas(8) uint64_t empty[kStages];
  int tile_prefix[kMaxExperts + 1];  // tiles before expert e
};
constexpr size_t kSmemBytes = sizeof(SharedStorage) + 1024;  // + alignment slack

__device__ __forceinline__ int RowsOf(const Params& p, int e) {
  return p.offsets != nullptr ? p.offsets[e + 1] - p.offsets[e] : p.rows;
}
__device__ __forceinline__ int FirstRowOf(const Params& p, int e) { return p.offsets != nullptr ? p.offsets[e] : 0; }

struct Tile {
  int expert, m, n, row0, rows;
};

// Tile t of the schedule: the expert whose range [prefix[e], prefix[e+1]) holds it (the
// largest e with prefix[e] <= t; an expert without rows has an empty range and is never it).
__device__ __forceinline__ Tile DecodeTile(const Params& p, const int* prefix, int t) {
  int lo = 0, hi = p.num_experts - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (prefix[mid] <= t) lo = mid; else hi = mid - 1;
  }
  Tile tile;
  tile.expert = lo;
  tile.row0 = FirstRowOf(p, lo);
  tile.rows = RowsOf(p, lo);
  const int m_tiles = (tile.rows + kTileM - 1) / kTileM;
  const int local = t - prefix[lo];
  tile.m = local % m_tiles;
  tile.n = local / m_tiles;
  return tile;
}

__device__ __forceinline__ void CpAsync16(uint32_t smem_addr, const void* src, bool valid) {
  const int bytes = valid ? 16 : 0;  // 0: the chunk is zero-filled (K past the end)
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr), "l"(src), "r"(bytes) : "memory");
}

template <bool kSiluMul>
__global__ void __launch_bounds__(kThreads, 1) GatherGemmKernel(const __grid_constant__ Params p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ char smem_raw[];
  auto& ss = *reinterpret_cast<SharedStorage*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) / 1024 * 1024);
  const int tid = threadIdx.x;
  const int lane = tid % 32;
  const int n_tiles = (p.n + kTileN - 1) / kTileN;
  const int k_tiles = (p.k + kTileK - 1) / kTileK;

  // Each expert's tile count, scanned by warp 0 in chunks of 32 experts.
  if (tid < 32) {
    int carry = 0;
    for (int e0 = 0; e0 < p.num_experts; e0 += 32) {
      const int e = e0 + lane;
      int tiles = 0;
      if (e < p.num_experts) tiles = (RowsOf(p, e) + kTileM - 1) / kTileM * n_tiles;
      int incl = tiles;
      for (int d = 1; d < 32; d *= 2) {
        const int v = __shfl_up_sync(0xffffffffu, incl, d);
        if (lane >= d) incl += v;
      }
      if (e < p.num_experts) ss.tile_prefix[e + 1] = carry + incl;
      carry += __shfl_sync(0xffffffffu, incl, 31);
    }
    if (lane == 0) ss.tile_prefix[0] = 0;
  }
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      cutlass::arch::ClusterTransactionBarrier::init(&ss.full[s], kProducerThreads + 1);
      cutlass::arch::ClusterBarrier::init(&ss.empty[s], kConsumerThreads);
    }
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();
  const int total_tiles = ss.tile_prefix[p.num_experts];

  Tensor sA = make_tensor(make_smem_ptr(ss.a), SmemLayoutA{});  // (M, K, stage)
  Tensor sB = make_tensor(make_smem_ptr(ss.b), SmemLayoutB{});  // (N, K, stage)

  if (tid < kProducerThreads) {
    cutlass::arch::warpgroup_reg_dealloc<kProducerRegisters>();
    Tensor mB = p.tma_b.get_tma_tensor(make_shape(p.n, p.k, p.num_experts));
    const int chunk = tid % kChunksPerRow;
    // Shared addresses of this thread's chunks: rows tid/8 + 16j keep their row mod 8, so the
    // 128-byte swizzle moves their chunk alike and they are a fixed step apart (as are stages).
    const int row0 = tid / kChunksPerRow;
    const uint32_t dst0 = cast_smem_ptr_to_uint(&sA(row0, chunk * kChunkElems, 0));
    const uint32_t row_step = cast_smem_ptr_to_uint(&sA(row0 + kRowsPerPass, chunk * kChunkElems, 0)) - dst0;
    const uint32_t stage_step = cast_smem_ptr_to_uint(&sA(row0, chunk * kChunkElems, 1)) - dst0;
    int it = 0;  // k steps issued so far, over all tiles
    for (int t = blockIdx.x; t < total_tiles; t += gridDim.x) {
      const Tile tile = DecodeTile(p, ss.tile_prefix, t);
      // This thread's rows of the tile (rows past the expert's count load its last row: their
      // results are never stored).
      int src_row[kRowsPerThread];
      for (int j = 0; j < kRowsPerThread; ++j) {
        const int r = tile.m * kTileM + row0 + kRowsPerPass * j;
        const int row = tile.row0 + min(r, tile.rows - 1);
        src_row[j] = p.sorted != nullptr ? p.sorted[row] / p.top_k : row;
      }
      Tensor gB = local_tile(mB(_, _, tile.expert), make_shape(Int<kTileN>{}, Int<kTileK>{}), make_coord(tile.n, _));
      auto [tBgB, tBsB] = tma_partition(p.tma_b, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sB), group_modes<0, 2>(gB));
      for (int kt = 0; kt < k_tiles; ++kt, ++it) {
        const int s = it % kStages;
        if (it >= kStages) cutlass::arch::ClusterBarrier::wait(&ss.empty[s], (it / kStages - 1) & 1);
        const int col = kt * kTileK + chunk * kChunkElems;
        const bool valid = col < p.k;
        const uint32_t dst = dst0 + s * stage_step;
        CUTE_UNROLL
        for (int j = 0; j < kRowsPerThread; ++j) {
          const Element* src = p.a + static_cast<int64_t>(src_row[j]) * p.lda + (valid ? col : 0);
          CpAsync16(dst + j * row_step, src, valid);
        }
        cp_async_fence();
        if (tid == 0) {
          cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&ss.full[s], kTileN * kTileK * sizeof(Element));
          copy(p.tma_b.with(ss.full[s]), tBgB(_, kt), tBsB(_, s));
        }
        if (it >= kLag) {  // the stage issued kLag steps ago has landed: make it visible to wgmma
          cp_async_wait<kLag>();
          cutlass::arch::fence_view_async_shared();
          cutlass::arch::ClusterBarrier::arrive(&ss.full[(it - kLag) % kStages]);
        }
      }
    }
    cp_async_wait<0>();
    cutlass::arch::fence_view_async_shared();
    for (int j = max(0, it - kLag); j < it; ++j) cutlass::arch::ClusterBarrier::arrive(&ss.full[j % kStages]);
  } else {
    cutlass::arch::warpgroup_reg_alloc<kConsumerRegisters>();
    const int mma_tid = tid - kProducerThreads;
    TiledMma mma;
    auto thr_mma = mma.get_slice(mma_tid);
    Tensor tCsA = thr_mma.partition_A(sA);  // (MMA, MMA_M, MMA_K, stage)
    Tensor tCsB = thr_mma.partition_B(sB);
    Tensor tCrA = thr_mma.make_fragment_A(tCsA);  // wgmma descriptors
    Tensor tCrB = thr_mma.make_fragment_B(tCsB);
    int it = 0;
    for (int t = blockIdx.x; t < total_tiles; t += gridDim.x) {
      const Tile tile = DecodeTile(p, ss.tile_prefix, t);
      Tensor accum = partition_fragment_C(mma, make_shape(Int<kTileM>{}, Int<kTileN>{}));
      for (int kt = 0; kt < k_tiles; ++kt, ++it) {
        const int s = it % kStages;
        cutlass::arch::ClusterBarrier::wait(&ss.full[s], (it / kStages) & 1);
        warpgroup_fence_operand(accum);
        warpgroup_arrive();
        mma.accumulate_ = kt == 0 ? GMMA::ScaleOut::Zero : GMMA::ScaleOut::One;
        CUTE_UNROLL
        for (int kb = 0; kb < size<2>(tCrA); ++kb) {
          cute::gemm(mma, tCrA(_, _, kb, s), tCrB(_, _, kb, s), accum);
          mma.accumulate_ = GMMA::ScaleOut::One;
        }
        warpgroup_commit_batch();
        warpgroup_wait<1>();  // the previous step's products are done with their stage
        warpgroup_fence_operand(accum);
        if (kt > 0) cutlass::arch::ClusterBarrier::arrive(&ss.empty[(it - 1) % kStages]);
      }
      warpgroup_wait<0>();
      warpgroup_fence_operand(accum);
      cutlass::arch::ClusterBarrier::arrive(&ss.empty[(it - 1) % kStages]);
      Tensor cD = local_tile(make_identity_tensor(make_shape(tile.rows, p.n)), make_shape(Int<kTileM>{}, Int<kTileN>{}),
                             make_coord(tile.m, tile.n));
      StoreAccumulatorTile<kSiluMul>(accum, thr_mma.partition_C(cD), tile.rows, p.n,
                                     p.d + static_cast<int64_t>(tile.row0) * p.ldd, p.ldd, lane % kQuadLanes);
    }
  }
#endif
}

template <bool kSiluMul>
absl::Status Launch(const Sm90GroupedArgs& g, cudaStream_t s) {
  if (g.k % kChunkElems != 0 || g.n % (kSiluMul ? 16 : 8) != 0 || g.num_experts > kMaxExperts) {
    return absl::InvalidArgumentError(absl::StrCat("moe_experts sm90 gather GEMM: N=", g.n, " K=", g.k, " experts=",
                                                   g.num_experts, " (K must be a multiple of 8, N of ",
                                                   kSiluMul ? 16 : 8, ", experts at most ", kMaxExperts, ")"));
  }
  Params p{MakeTmaB(reinterpret_cast<const Element*>(g.w), g.n, g.k, g.num_experts),
           reinterpret_cast<const Element*>(g.a),
           g.lda,
           g.sorted,
           g.top_k,
           g.offsets,
           g.rows,
           static_cast<__nv_bfloat16*>(g.d),
           g.ldd,
           g.n,
           g.k,
           g.num_experts};
  auto kernel = GatherGemmKernel<kSiluMul>;
  const cudaError_t attr =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmemBytes));
  if (attr != cudaSuccess) {
    return absl::InternalError(absl::StrCat("moe_experts sm90 gather GEMM: shared memory attribute: ",
                                            cudaGetErrorString(attr)));
  }
  kernel<<<cuda::CurrentDeviceSmCount(), kThreads, kSmemBytes, s>>>(p);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) {
    return absl::InternalError(absl::StrCat("moe_experts sm90 gather GEMM launch failed: ", cudaGetErrorString(e)));
  }
  return absl::OkStatus();
}

}  // namespace mlaserve::kernels::moe_cuda::gather_gemm
