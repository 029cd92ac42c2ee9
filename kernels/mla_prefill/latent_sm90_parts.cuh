// Pieces of the Hopper latent-attention kernels (latent_attention_sm90.cu; the few-rows kernel,
// latent_attention_sm90_few.cu, takes the tile shapes, TileLayout and the TMA from here):
// its tile shapes and shared memory, the TMA page loads, the score product over load tiles, the
// Q loads and the bookkeeping of barrier phases. The kernel's design: latent_attention_sm90.cu.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "cute/tensor.hpp"
#include "cutlass/arch/barrier.h"
#include "kernels/common/cuda_util.cuh"
#include "kernels/mla_prefill/latent_attention.h"

namespace mlaserve::kernels::mla_cuda::sm90 {

using namespace cute;  // NOLINT: CuTe's layout algebra reads best unqualified
using Bf16 = cute::bfloat16_t;

constexpr int kRows = 64;       // query rows per CTA (one wgmma M)
constexpr int kKeys = 64;       // keys per page
constexpr int kRank = 512;      // latent (value) width
constexpr int kWidth = 576;     // key width: latent | rope
constexpr int kHalf = kRank / 2;          // value dims per warpgroup
constexpr int kTileCols = 64;             // columns per load tile (one swizzle atom wide)
constexpr int kTiles = kWidth / kTileCols;        // 9 load tiles per page
constexpr int kHalfTiles = kHalf / kTileCols;     // 4 load tiles per value half
constexpr int kRopeTile = kRank / kTileCols;      // 8: the rope columns
constexpr int kKStepsPerTile = kTileCols / 16;    // wgmma k-steps per load tile
constexpr int kThreads = 256;   // two warpgroups
constexpr uint32_t kTileTxBytes = kKeys * kTileCols * sizeof(Bf16);
// The running row max starts finite so that a fully masked tile (max -inf) leaves it as is and
// the rescale factors stay 2^0 = 1 instead of 2^(-inf + inf).
constexpr float kMaxInit = -1e30f;
static_assert(kKeys == kPageSize, "a K tile is one cache page");

// The warpgroups' signals to each other, completing once per page pair: all 128 threads of the
// sending warpgroup arrive, the other waits. Two forms of the main kernel (latent_attention_sm90.cu):
// hardware named barriers 1-4 (bar.arrive / bar.sync over the 256 threads; the default since
// 2026-11-30, ~1.3% faster at 128 heads), or one mbarrier each, whose arrive / wait are release /
// acquire, which compute-sanitizer's racecheck follows (it reported bar.arrive hand-offs as
// hazards on the H100): MLASERVE_MLA_NAMED_SIGNALS=0, for racecheck runs. A warpgroup cannot
// signal twice before the other waited: every pair of signals is ordered by an opposite one (see
// the loop), which a named barrier needs as much as an mbarrier's phase does.
enum Signal : int { kScale0Ready, kScale1Ready, kP0Ready, kP1Ready, kSignals };
// Hardware named barriers: 0 is __syncthreads; with named signals, signal s is barrier 1 + s, and
// the CTA's barrier (latent_attention_sm90.cu, sync_cta) takes two pairs from kCtaBarrier on.
constexpr int kCtaBarrier = 1 + kSignals;
static_assert(kCtaBarrier + 4 <= 16, "sm_90 has 16 named barriers");
// Named barrier `id` over the CTA's kThreads: arrive without waiting (bar.arrive), or arrive and
// wait for it to complete (bar.sync). Raw PTX: CUTLASS's NamedBarrier shifts ids past its reserved
// ones.
__device__ __forceinline__ void NamedArrive(int id) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(kThreads) : "memory");
}
__device__ __forceinline__ void NamedSync(int id) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(kThreads) : "memory");
}

// [rows, 576] tiles (Q, a page as K): K-major, 128-byte swizzle, 64-column blocks, each block a
// contiguous [64, 64] TileLayout (tile_to_shape repeats the 8 x 64 atom down the rows first).
using QkLayout = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Bf16>{}, Shape<Int<kRows>, Int<kWidth>>{}));
using TileLayout = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Bf16>{}, Shape<Int<kRows>, Int<kTileCols>>{}));
// The first 512 columns of a page as the (N = latent dim, K = key) operand of P V: MN-major,
// tiled along K first, which lands every element on its address in QkLayout.
using VLayout = decltype(tile_to_shape(GMMA::Layout_MN_SW128_Atom<Bf16>{}, Shape<Int<kRank>, Int<kKeys>>{},
                                       Step<_2, _1>{}));
// P from registers as the A operand of the RS product: the S accumulator's values in their own
// order (k-block kb of 16 keys = the accumulator's 8-column groups 2kb and 2kb + 1).
using PRegLayout = Layout<Shape<Shape<_2, _2, _2>, _1, Int<kKeys / 16>>, Stride<Stride<_1, _2, _4>, _0, _8>>;

using MmaS = decltype(make_tiled_mma(SM90_64x64x16_F32BF16BF16_SS<GMMA::Major::K, GMMA::Major::K>{}));
using MmaPvLocal = decltype(make_tiled_mma(SM90_64x256x16_F32BF16BF16_RS<GMMA::Major::K, GMMA::Major::MN>{}));
using MmaPvRemote = decltype(make_tiled_mma(SM90_64x256x16_F32BF16BF16_SS<GMMA::Major::K, GMMA::Major::MN>{}));

struct SharedStorage {
  cute::array_aligned<Bf16, kRows * kWidth, 1024> q;
  cute::array_aligned<Bf16, kKeys * kWidth, 1024> page[2];
  cute::array_aligned<Bf16, kRows * kKeys, 1024> p_b;  // P of page b (warpgroup 1's)
  float row_max[kRows];    // running max, log2 units (scaled scores)
  float scale0[kRows];     // this pair's rescale by warpgroup 0's max update
  float scale1[kRows];     // ... and by warpgroup 1's
  float row_sum[2][kRows]; // per warpgroup, at the end
  uint64_t full[2][kTiles];  // load tile landed (TMA transaction barriers)
  uint64_t signal[kSignals];
  // Balanced schedule: the records of this CTA's segments, fetched one ahead (record k of the
  // CTA's run in seg[k & 1]), each with its own bulk-copy barrier.
  LatentSegment seg[2];  // bulk-copy destinations: 16-byte aligned, as the members before keep them
  uint64_t seg_full[2];
  uint64_t cta_sync;  // the CTA's barrier with mbarrier signals (latent_attention_sm90.cu, sync_cta)
};
static_assert(offsetof(SharedStorage, seg) % 16 == 0, "segment records are bulk-copy destinations");

__device__ __forceinline__ Bf16* PageTile(SharedStorage& ss, int stage, int tile) {
  return ss.page[stage].data() + tile * kKeys * kTileCols;
}

// The cache as [64 keys, 576, num_pages] for TMA; one box = one 64 x 64 load tile.
inline auto MakeTileTma(const Bf16* cache, int num_pages) {
  Tensor g = make_tensor(make_gmem_ptr(cache),
                         make_shape(Int<kKeys>{}, Int<kWidth>{}, num_pages),
                         make_stride(Int<kWidth>{}, Int<1>{}, kKeys * kWidth));
  return make_tma_copy(SM90_TMA_LOAD{}, g, TileLayout{});
}
using TileTma = decltype(MakeTileTma(nullptr, 1));

struct Sm90Args {
  MlaParams p;
  LatentSplit split;
  TileTma tma;
  // The main kernel walks its steady page pairs in their own instantiation of the pair step
  // (latent_attention_sm90.cu); 0 walks every pair in the general one (MLASERVE_MLA_STEADY_PAIRS=0).
  int steady_pairs = 1;
  // The PDL release after the pages instead of at the start (grids of more than one wave).
  int release_late = 0;
  // The warpgroups' signals on named barriers (1), or on mbarriers (0: MLASERVE_MLA_NAMED_SIGNALS=0).
  int named_signals = 1;
  // Segment kernel: each segment's output staged in the page buffers and stored a row per bulk
  // copy, the next segment's first pages loaded after it (1, the default); or stored from the
  // accumulators with those pages loaded during the segment's last pair (0:
  // MLASERVE_MLA_BULK_OUT=0).
  int staged_out = 1;
};

// The staged output's rows in the page buffers (both, contiguous): f32 partials or bf16 rows of
// kRank values, padded so that a warp's accumulator stores (8 rows, 4 lanes each, 8 or 4 bytes a
// lane) take the fewest wavefronts: rows 8 banks apart (f32: two wavefronts, as 256 bytes need)
// or 4 (bf16: one). Rows stay 16-byte aligned for the bulk copies.
constexpr int kStagedRowBytesF32 = kRank * 4 + 32;
constexpr int kStagedRowBytesBf16 = kRank * 2 + 16;
static_assert(kRows * kStagedRowBytesF32 <= 2 * kKeys * kWidth * static_cast<int>(sizeof(Bf16)),
              "the staged f32 output fits the two page buffers");

// Load tiles [first, last) of cache page `page` into buffer `stage` (one thread). Unrolled (the
// callers pass constant bounds): the issuing thread's warpgroup waits on it before its next
// products, and the rolled loop's per-tile address work was on that path. Unrolled, the 128-head
// mla_decode rows took 1.2-1.8% less (H200, 2026-12-01; batch 1-4 even). kConsumerExpects: the
// tiles' transaction barriers expect their bytes from the consumer (ScoreTiles), not from here,
// for the same reason (a barrier's phase completes once both the bytes and that arrival are in,
// in either order): the chunk kernel's 128-head rows took 0.5-2.6% less so, the segment kernel's
// 0-0.8% more (H200, 2026-12-01), so the segment kernel keeps the expectation here.
template <bool kConsumerExpects>
__device__ __forceinline__ void LoadTiles(const TileTma& tma, SharedStorage& ss, int num_pages, int stage,
                                          int page, int first, int last) {
  Tensor pages = tma.get_tma_tensor(make_shape(Int<kKeys>{}, Int<kWidth>{}, num_pages));
  auto thr = tma.get_slice(Int<0>{});
#pragma unroll
  for (int t = first; t < last; ++t) {
    Tensor g = local_tile(pages(_, _, page), Shape<Int<kKeys>, Int<kTileCols>>{}, make_coord(0, t));
    Tensor s = make_tensor(make_smem_ptr(PageTile(ss, stage, t)), TileLayout{});
    if constexpr (!kConsumerExpects) {
      cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&ss.full[stage][t], kTileTxBytes);
    }
    copy(tma.with(ss.full[stage][t], 0, TMA::CacheHintSm90::EVICT_FIRST), thr.partition_S(g),
         thr.partition_D(s));
  }
}

// S += Q K^T over load tiles [kFirst, kLast) of a buffer, one commit group per tile, each after
// its tile landed. kConsumerExpects (LoadTiles): the warpgroup's first thread arrives on each
// tile's barrier with the tile's bytes (the one arrival a load's phase takes: every load into a
// buffer is scored once, by the warpgroup that owns the buffer) before its warps wait for the
// phase. kZero: the first tile starts the accumulation.
template <int kFirst, int kLast, bool kZero, bool kConsumerExpects, class TQ, class TK, class TS>
__device__ __forceinline__ void ScoreTiles(MmaS& mma, const TQ& tSrQ, const TK& tSrK, TS& tSrS,
                                           uint64_t* full, int phase) {
  mma.accumulate_ = kZero ? GMMA::ScaleOut::Zero : GMMA::ScaleOut::One;
  const bool expects = kConsumerExpects && threadIdx.x % 128 == 0;
#pragma unroll
  for (int t = kFirst; t < kLast; ++t) {
    if (expects) cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&full[t], kTileTxBytes);
    cutlass::arch::ClusterTransactionBarrier::wait(&full[t], phase);
    warpgroup_fence_operand(tSrS);
    warpgroup_arrive();
#pragma unroll
    for (int k = 0; k < kKStepsPerTile; ++k) {
      cute::gemm(mma, tSrQ(_, _, t * kKStepsPerTile + k), tSrK(_, _, t * kKStepsPerTile + k), tSrS);
      mma.accumulate_ = GMMA::ScaleOut::One;
    }
    warpgroup_commit_batch();
    warpgroup_fence_operand(tSrS);
  }
}

// A partial last page: keys past kv_end may hold anything (NaN included); zero their value
// columns so that P = 0 times V stays 0. One warpgroup; the caller fences and publishes.
__device__ __forceinline__ void ZeroTail(SharedStorage& ss, int stage, int valid_keys, int wg_tid) {
  Tensor sPage = make_tensor(make_smem_ptr(ss.page[stage].data()), QkLayout{});
  constexpr int kChunks = kRank / cuda::kBf16PerChunk;
  for (int i = wg_tid; i < (kKeys - valid_keys) * kChunks; i += 128) {
    const int r = valid_keys + i / kChunks, col = (i % kChunks) * cuda::kBf16PerChunk;
    *reinterpret_cast<uint4*>(&sPage(r, col)) = make_uint4(0, 0, 0, 0);
  }
}

// Q rows [first, first + count / 4) of a 64-row tile: row r -> (token (r0 + r) / H, head
// (r0 + r) % H) of the request whose query rows start at q_start; rows past rows_total are zero.
// cp.async by the `count` threads numbered `index`, 4 per row (each row's head and token found
// once), one commit group; the caller waits (CpAsyncWait) and fences before the score products
// read it.
constexpr int kQThreadsPerRow = 4;
template <class TQ>
__device__ __forceinline__ void LoadQRows(const MlaParams& p, TQ& sQ, int q_start, int rows_total, int r0,
                                          int first, int index) {
  constexpr int kChunks = kWidth / cuda::kBf16PerChunk;
  const auto* q = static_cast<const Bf16*>(p.q);
  const int r = first + index / kQThreadsPerRow;
  const int row = r0 + r;
  const bool valid = row < rows_total;
  const int H = p.num_heads;
  const Bf16* src = valid ? q + static_cast<int64_t>(q_start + row / H) * p.q_token_stride +
                                static_cast<int64_t>(row % H) * p.q_head_stride
                          : q;
#pragma unroll 2
  for (int c = index % kQThreadsPerRow; c < kChunks; c += kQThreadsPerRow) {
    const int col = c * cuda::kBf16PerChunk;
    cuda::CpAsync16(cuda::SmemAddress(&sQ(r, col)), valid ? src + col : src, valid);
  }
  cuda::CpAsyncCommit();
}

// Where a CTA is in its barriers' phases: how many times each buffer was loaded and how many
// page pairs (and pairs with a page b) it walked, over the segments it attended so far.
struct Phases {
  int loads[2] = {0, 0};
  int pairs = 0;
  int pairs_with_b = 0;
};

}  // namespace mlaserve::kernels::mla_cuda::sm90
