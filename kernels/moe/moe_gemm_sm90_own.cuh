// kSm90 variants 12 and 14 (moe_cuda.h): our grouped GEMM for Hopper, written on CuTe for the routed
// experts' products, without what costs CUTLASS's pointer-array kernel at every change of
// expert:
//   - one TMA descriptor per operand for the whole call: B is one 3-D tensor [E][N][K] (the
//     expert is a coordinate), A the sorted rows as one 2-D tensor [a_rows][K] (a tile starts at
//     its expert's first row), D is stored from registers (StoreAccumulatorTile: 16-byte stores,
//     SiLU * up fused or not), so switching expert between tiles rewrites no descriptor;
//   - the tile schedule computed in each CTA from the expert offsets (a warp scan of each
//     expert's tile count into shared memory, then a binary search per tile).
//
// Two shapes (moe_cuda.h: variants 12 and 14), persistent, one CTA of 384 threads per SM, 256 x
// 64 weight tiles of B, in the 128-byte-swizzled K-major layout wgmma reads. One thread of warp 0
// produces: per stage the tile's rows x 64 box of A and 256 x 64 box of B by TMA, the stage's
// barrier expecting its one arrival and the stage's bytes (rows past the expert's count come
// from the next expert's rows, or TMA's zero fill past the tensor: their products are never
// stored). Two consumer warp groups, each with m64n256k16 wgmma on 64 rows x 256 columns,
// releasing a stage one k-step later (when the wgmma reading it has retired):
//   - cooperative (variant 12): 128-row tiles, 4 stages; both groups work on every tile (64 rows
//     each) and store their halves;
//   - ping-pong (variant 14): 64-row tiles, 5 stages; the groups take the CTA's tiles in turn
//     (group 0 the CTA's even tiles, group 1 its odd ones), a named-barrier handshake letting a
//     group's products start when the other's of the tile before have been issued, so each
//     group's epilogue (the stores of its tile) runs under the other's products.
// Tiles are numbered expert by expert, M fastest within a column of N (as CUTLASS's grouped
// scheduler with AlongM), and a CTA takes every gridDim-th tile, so the CTAs working at one time
// share a few experts' weights in L2.
//
// Gathering A's rows from x inside the loads (no permuted copy of x) was this kernel's first
// purpose and was measured twice on the H200 (2026-12-04): one TMA box a row (128 bytes; TMA's
// swizzle follows the shared address, so the layout was right) ran five times slower than the
// box of a tile (TMA's cost per copy at 128 copies a stage), and cp.async by the producer warp
// group with the hardware arriving on the stage barrier (cp.async.mbarrier.arrive.noinc) and a
// proxy fence before wgmma ran 1.7-1.8x slower; an earlier cp.async form (2026-11-25) 25-40%.
// docs/BENCHMARKS.md has the numbers.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "cute/arch/copy_sm90_tma.hpp"
#include "cute/tensor.hpp"
#include "cutlass/cuda_host_adapter.hpp"
#include "cutlass/arch/barrier.h"
#include "cutlass/arch/reg_reconfig.h"
#include "cutlass/bfloat16.h"
#include "common/status.h"
#include "kernels/common/cuda_util.cuh"
#include "kernels/common/device_arch.h"
#include "kernels/moe/moe_cuda.h"
#include "kernels/moe/moe_sm90_tile_store.cuh"

namespace mlaserve::kernels::moe_cuda::own_gemm {

using namespace cute;

using Element = cutlass::bfloat16_t;
constexpr int kTileN = 256, kTileK = 64;
constexpr int kProducerThreads = 128, kGroupThreads = 128, kConsumerThreads = 2 * kGroupThreads;
constexpr int kThreads = kProducerThreads + kConsumerThreads;
constexpr int kRowBytes = kTileK * 2;  // one row of a stage: 128 bytes, the swizzle's width
constexpr int kProducerRegisters = 40, kConsumerRegisters = 232;

using SmemAtom = GMMA::Layout_K_SW128_Atom<Element>;

// The two shapes: kPingPong false = cooperative 128 x 256 (variant 12), true = ping-pong 64 x
// 256 (variant 14).
template <bool kPingPong>
struct Config {
  static constexpr int kTileM = kPingPong ? 64 : 128;
  static constexpr int kStages = kPingPong ? 5 : 4;
  static constexpr int kTileGroups = kPingPong ? 1 : 2;  // consumer warp groups on one tile
  static constexpr int kStageBytesA = kTileM * kRowBytes, kStageBytesB = kTileN * kRowBytes;
  using SmemLayoutA = decltype(tile_to_shape(SmemAtom{}, make_shape(Int<kTileM>{}, Int<kTileK>{}, Int<kStages>{})));
  using SmemLayoutB = decltype(tile_to_shape(SmemAtom{}, make_shape(Int<kTileN>{}, Int<kTileK>{}, Int<kStages>{})));
  using TiledMma = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<Int<kTileM>, Int<kTileN>, Int<kTileK>>,
                           GMMA::Major::K, GMMA::Major::K>(),
      Layout<Shape<Int<kTileGroups>, _1, _1>>{}));
  static_assert(size(TiledMma{}) == kTileGroups * kGroupThreads, "a warp group per 64 rows of a tile");
  struct SharedStorage {
    alignas(1024) Element a[cosize_v<SmemLayoutA>];
    alignas(1024) Element b[cosize_v<SmemLayoutB>];
    alignas(8) uint64_t full[kStages];
    alignas(8) uint64_t empty[kStages];
    int tile_prefix[kMaxExperts + 1];  // tiles before expert e
  };
  static constexpr size_t kSmemBytes = sizeof(SharedStorage) + 1024;  // + alignment slack
};

// B: the weights [E][N][K] as one (N, K, E) tensor (the shapes' B stages are the same).
using GmemLayoutB = Layout<Shape<int, int, int>, Stride<int64_t, _1, int64_t>>;
inline auto MakeTmaB(const Element* w, int n, int k, int e) {
  Tensor gB = make_tensor(make_gmem_ptr(w), GmemLayoutB(make_shape(n, k, e), make_stride(int64_t{k}, _1{}, int64_t{n} * k)));
  return make_tma_copy(SM90_TMA_LOAD{}, gB, typename Config<false>::SmemLayoutB{}(_, _, Int<0>{}),
                       make_shape(Int<kTileN>{}, Int<kTileK>{}), Int<1>{});
}
using TmaB = decltype(MakeTmaB(nullptr, 1, 1, 1));

// A: `rows` x `k` bf16 with row stride lda, as a 2-D TMA tensor in boxes of kTileK columns x
// `box_rows` rows, 128-byte swizzled (the layout of the A stages). Encoded here rather than by
// CuTe's make_tma_copy (as B is) because a tile's box starts at its expert's first row, any row,
// not at a multiple of the box that CuTe's tiled TMA tensor indexes.
inline absl::StatusOr<CUtensorMap> MakeTmaA(const Element* a, int64_t lda, int rows, int k, int box_rows) {
  CUtensorMap map;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(lda) * sizeof(Element)};
  const cuuint32_t box[2] = {kTileK, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = cutlass::call_cuTensorMapEncodeTiled(
      &map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<Element*>(a), dims, strides, box, element_strides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    return absl::InternalError(absl::StrCat("moe_experts sm90 own GEMM: cuTensorMapEncodeTiled for A (rows=", rows,
                                            " k=", k, " lda=", lda, " box rows=", box_rows, ") failed: ", r));
  }
  return map;
}

struct Params {
  TmaB tma_b;
  CUtensorMap tma_a;         // A [a_rows][K] (rows in sorted order) in boxes of a tile's rows
  const int32_t* offsets;    // [E + 1]; null: one group of `rows` rows
  int rows;
  __nv_bfloat16* d;          // [A, N] (or [A, N/2] with the SiLU), row stride ldd
  int64_t ldd;
  int n, k, num_experts;
};

__device__ __forceinline__ int RowsOf(const Params& p, int e) {
  return p.offsets != nullptr ? p.offsets[e + 1] - p.offsets[e] : p.rows;
}
__device__ __forceinline__ int FirstRowOf(const Params& p, int e) { return p.offsets != nullptr ? p.offsets[e] : 0; }

struct Tile {
  int expert, m, n, row0, rows;
};

// Tile t of the schedule: the expert whose range [prefix[e], prefix[e+1]) holds it (the
// largest e with prefix[e] <= t; an expert without rows has an empty range and is never it).
__device__ __forceinline__ Tile DecodeTile(const Params& p, const int* prefix, int t, int tile_m) {
  int lo = 0, hi = p.num_experts - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (prefix[mid] <= t) lo = mid; else hi = mid - 1;
  }
  Tile tile;
  tile.expert = lo;
  tile.row0 = FirstRowOf(p, lo);
  tile.rows = RowsOf(p, lo);
  const int m_tiles = (tile.rows + tile_m - 1) / tile_m;
  const int local = t - prefix[lo];
  tile.m = local % m_tiles;
  tile.n = local / m_tiles;
  return tile;
}

// Named barriers of the ping-pong order: kOrderBarrier + g is where group g waits for the other
// group's go (id 0 is __syncthreads').
constexpr int kOrderBarrier = 1;
__device__ __forceinline__ void NamedBarrierSync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void NamedBarrierArrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

template <bool kSiluMul, bool kPingPong>
__global__ void __launch_bounds__(kThreads, 1) OwnGemmKernel(const __grid_constant__ Params p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using C = Config<kPingPong>;
  constexpr int kTileM = C::kTileM, kStages = C::kStages;
  extern __shared__ char smem_raw[];
  auto& ss = *reinterpret_cast<typename C::SharedStorage*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) / 1024 * 1024);
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
      cutlass::arch::ClusterTransactionBarrier::init(&ss.full[s], 1);  // the producer's arrival + the bytes
      cutlass::arch::ClusterBarrier::init(&ss.empty[s], C::kTileGroups * kGroupThreads);  // the tile's groups
    }
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();
  const int total_tiles = ss.tile_prefix[p.num_experts];

  Tensor sA = make_tensor(make_smem_ptr(ss.a), typename C::SmemLayoutA{});  // (M, K, stage)
  Tensor sB = make_tensor(make_smem_ptr(ss.b), typename C::SmemLayoutB{});  // (N, K, stage)

  if (tid < kProducerThreads) {
    cutlass::arch::warpgroup_reg_dealloc<kProducerRegisters>();
    if (tid != 0) return;  // one thread issues every copy
    Tensor mB = p.tma_b.get_tma_tensor(make_shape(p.n, p.k, p.num_experts));
    const uint64_t hint = static_cast<uint64_t>(TMA::CacheHintSm90::EVICT_NORMAL);
    int it = 0;  // k steps issued so far, over all tiles
    for (int t = blockIdx.x; t < total_tiles; t += gridDim.x) {
      const Tile tile = DecodeTile(p, ss.tile_prefix, t, kTileM);
      const int first = tile.row0 + tile.m * kTileM;  // the tile's first row in sorted order
      Tensor gB = local_tile(mB(_, _, tile.expert), make_shape(Int<kTileN>{}, Int<kTileK>{}), make_coord(tile.n, _));
      auto [tBgB, tBsB] = tma_partition(p.tma_b, Int<0>{}, Layout<_1>{}, group_modes<0, 2>(sB), group_modes<0, 2>(gB));
      for (int kt = 0; kt < k_tiles; ++kt, ++it) {
        const int s = it % kStages;
        if (it >= kStages) cutlass::arch::ClusterBarrier::wait(&ss.empty[s], (it / kStages - 1) & 1);
        cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&ss.full[s], C::kStageBytesA + C::kStageBytesB);
        copy(p.tma_b.with(ss.full[s]), tBgB(_, kt), tBsB(_, s));
        SM90_TMA_LOAD_2D::copy(&p.tma_a, &ss.full[s], hint, &sA(0, 0, s), kt * kTileK, first);
      }
    }
  } else {
    cutlass::arch::warpgroup_reg_alloc<kConsumerRegisters>();
    // Ping-pong: group g takes the CTA's tiles j with j % 2 == g, each with the group's threads
    // alone; cooperative: both groups take every tile, 64 rows each.
    const int group = (tid - kProducerThreads) / kGroupThreads;
    const int mma_tid = kPingPong ? (tid - kProducerThreads) % kGroupThreads : tid - kProducerThreads;
    typename C::TiledMma mma;
    auto thr_mma = mma.get_slice(mma_tid);
    Tensor tCsA = thr_mma.partition_A(sA);  // (MMA, MMA_M, MMA_K, stage)
    Tensor tCsB = thr_mma.partition_B(sB);
    Tensor tCrA = thr_mma.make_fragment_A(tCsA);  // wgmma descriptors
    Tensor tCrB = thr_mma.make_fragment_B(tCsB);
    int j = 0;  // the CTA's tiles so far
    for (int t = blockIdx.x; t < total_tiles; t += gridDim.x, ++j) {
      if (kPingPong && (j & 1) != group) continue;
      int it = j * k_tiles;  // the ring's k steps before this tile's (every tile has k_tiles)
      const Tile tile = DecodeTile(p, ss.tile_prefix, t, kTileM);
      Tensor accum = partition_fragment_C(mma, make_shape(Int<kTileM>{}, Int<kTileN>{}));
      // Ping-pong: this tile's products start after the other group's of the tile before have
      // been issued. Besides giving the tensor cores to one group at a time, the order keeps a
      // group's first wait on a stage barrier at most one phase ahead of the barrier: the
      // stage's previous use (the other group's tile) has completed, and a wait two phases
      // ahead would match that older phase's parity and pass early.
      if (kPingPong && j > 0) NamedBarrierSync(kOrderBarrier + group, 2 * kGroupThreads);
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
      // The other group may start its products of the CTA's next tile (its wait above), if
      // there is one: no arrival is left pending when the CTA ends.
      if (kPingPong && t + static_cast<int>(gridDim.x) < total_tiles) {
        NamedBarrierArrive(kOrderBarrier + (group ^ 1), 2 * kGroupThreads);
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

template <bool kSiluMul, bool kPingPong>
absl::Status Launch(const Sm90GroupedArgs& g, cudaStream_t s) {
  using C = Config<kPingPong>;
  const int a_rows = g.offsets != nullptr ? g.a_rows : g.rows;
  if (g.k % 8 != 0 || g.lda % 8 != 0 || g.n % (kSiluMul ? 16 : 8) != 0 || g.num_experts > kMaxExperts ||
      a_rows <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("moe_experts sm90 own GEMM: N=", g.n, " K=", g.k, " lda=", g.lda,
                                                   " experts=", g.num_experts, " rows of A=", a_rows,
                                                   " (K and lda must be multiples of 8, N of ", kSiluMul ? 16 : 8,
                                                   ", experts at most ", kMaxExperts, ", A's rows given)"));
  }
  absl::StatusOr<CUtensorMap> tma_a = MakeTmaA(reinterpret_cast<const Element*>(g.a), g.lda, a_rows, g.k, C::kTileM);
  if (!tma_a.ok()) return tma_a.status();
  Params p{MakeTmaB(reinterpret_cast<const Element*>(g.w), g.n, g.k, g.num_experts),
           *tma_a,
           g.offsets,
           g.rows,
           static_cast<__nv_bfloat16*>(g.d),
           g.ldd,
           g.n,
           g.k,
           g.num_experts};
  auto kernel = OwnGemmKernel<kSiluMul, kPingPong>;
  RETURN_IF_ERROR(cuda::CudaStatus(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(C::kSmemBytes)),
      "moe_experts sm90 own GEMM: shared memory attribute"));
  kernel<<<cuda::CurrentDeviceSmCount(), kThreads, C::kSmemBytes, s>>>(p);
  return cuda::LaunchStatus("moe_experts sm90 own GEMM");
}

}  // namespace mlaserve::kernels::moe_cuda::own_gemm
