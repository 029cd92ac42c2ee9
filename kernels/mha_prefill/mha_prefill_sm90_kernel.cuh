// mha_prefill's Hopper kernel (sm_90a): FlashAttention-3's forward design on TMA, wgmma and
// warp specialisation, over api.h's ragged batch. Included by the per-head-dim instantiation
// files (mha_prefill_sm90_d*.cu); mha_prefill_sm90.cu decides when it runs.
//
// A CTA computes one or two query tiles of kBlockM = 128 rows of one (sequence, head); for each
// it walks the sequence's keys in tiles of kBlockN = 128, from the last needed tile down to the
// first (so the causal diagonal's masked tiles come first and the rest run unmasked):
//
//   producer warpgroup : one thread issues TMA loads (per query tile Q, once the consumers are
//                        done with the previous Q; per key tile K, then the previous tile's V)
//                        into two-stage K and V rings guarded by mbarriers. K comes in two
//                        loads, its head dims and its last 64 (from k_rope with api.h's split
//                        K, so MLA's decompressed K needs no packing pass).
//   consumer wg w=0,1  : query rows 64w..64w+63. For key tile j (intra-warpgroup overlap):
//                          S(j) = Q K(j)^T           wgmma, A and B from shared memory (SS)
//                          O    = O * alpha(j-1)      (rescale while S(j) runs)
//                          O   += P(j-1) V(j-1)       wgmma, P from registers (RS)
//                          wait for S(j); mask; online softmax (f32, exp2) -> P(j), alpha(j)
//                          wait for the P V product; P(j) -> bf16 registers
//                        so the softmax of tile j overlaps the P V product of tile j-1.
//                        With ping-pong on, two named barriers make the warpgroups take turns
//                        issuing their products, so one warpgroup's softmax runs while the
//                        other's products hold the tensor cores.
//
// Ragged batch through TMA: rows of q (and k, v) are described as a 4-d tensor
// (row, column, head, sequence end) whose row and end modes both step by the token stride,
// based max_len rows before the buffer. Sequence b's tile at row r is then addressed as
// (max_len - len_b + r, ., head, end_b): rows r >= len_b fall past the row extent and TMA
// fills them with zeros instead of reading the next sequence or past the buffer (the trick
// CUTLASS's varlen FMHA uses). Zero K rows are masked anyway; zero V rows meet P = 0.
//
// Paired query tiles (Schedule::paired): work item x of a (sequence, head) is tiles count-1-x
// and x of its sequence, so the items of a causal sequence carry about the same number of key
// tiles, and the second tile's Q and first K/V loads run under the first tile's last products
// and output.
//
// Work items are (x, head, sequence), x fastest, numbered as a flat grid would number its CTAs.
// Persistent (Schedule::persistent): one CTA per SM walks its items round by round; its producer
// runs ahead across items as across the tiles of a pair, so an item's Q and first K/V loads land
// under the previous item's last products and output, and a CTA's start-up (its barriers,
// descriptor fetches, first loads) is paid once per SM, not once per item. With
// Schedule::longest_first (the default; 2-128 sequences) the items are ranked heaviest sequence
// first (ItemOrder below), else they keep the flat order. With a ticket word (Schedule::tickets
// and MhaPrefillParams::work_counter, the default where a caller gives one) each CTA takes its
// first item by its index and every next one by a ticket, the rank a global counter hands out,
// so the CTA that is free first takes the next heaviest item; without, round j deals rank
// j * G + c in a snake over the G CTAs (c in odd rounds G - 1 - c), or flat item
// blockIdx.x + j * gridDim.x. Otherwise one CTA per item.
//
// The output is written from the accumulators (bf16 pairs) and lse from the row statistics;
// a row that sees no key gets 0 and -inf, rows past the sequence are not written.
// Lookahead (Schedule::lookahead, qk 128 only: the shared memory of a second Q buffer): Q loads
// alternate between two buffers, so the next query tile's Q lands while the current tile runs,
// and each consumer warpgroup issues the next tile's first S product right after its last P V
// product, before it normalises and writes the current tile's output; the tensor cores run both
// products under that epilogue, where without it they idle from the last P V to the next tile's
// first S (the output's stores, then the wait for the next Q).
// Staged output (Schedule::staged_out, qk 128 only): each consumer warpgroup instead puts its
// normalised 64 rows into its own half of a shared-memory O tile (stmatrix, 128-byte swizzle)
// and one of its threads writes them with a TMA store through a view of out built like q's, so
// TMA clips the rows past the sequence; the store runs while the warpgroup starts its next
// query tile. The bytes are those of the direct stores (the same bf16 rounding).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "cute/tensor.hpp"
#include "cutlass/arch/barrier.h"
#include "cutlass/arch/reg_reconfig.h"
#include "kernels/common/cuda_util.cuh"
#include "kernels/common/device_arch.h"
#include "kernels/mha_prefill/api.h"
#include "kernels/mha_prefill/mha_prefill_sm90.h"

namespace mlaserve::kernels::mha_sm90 {

using namespace cute;  // NOLINT: CuTe's layout algebra reads best unqualified
using Bf16 = cute::bfloat16_t;

template <int kDqk_, int kDv_>
struct Sm90Tile {
  static constexpr int kDqk = kDqk_, kDv = kDv_;
  static constexpr int kBlockM = 128;  // query rows per CTA
  static constexpr int kWgRows = 64;   // per consumer warpgroup (one wgmma M)
  static constexpr int kBlockN = 128;  // keys per K/V tile
  static constexpr int kStages = 2;    // of the K ring and of the V ring
  // Q buffers: two where shared memory holds them (qk 128: 2 x 32 + 64 + 64 + 32 KB of O, the
  // barriers in static shared memory), so that the next query tile's Q loads while the current
  // one runs (Schedule::lookahead); one for qk 192.
  static constexpr int kQBuffers = kDqk == 128 ? 2 : 1;
  static constexpr int kConsumers = 256;
  static constexpr int kThreads = kConsumers + 128;  // + the producer warpgroup
  // setmaxnreg: the producer gives its registers to the consumers, which hold O (64 f32), S
  // (64 f32) and P (32 x bf16x2) per thread. The consumers can only take what the producer gave
  // back to the CTA's pool: the CTA launches with kLaunchRegs a thread (64K over its threads,
  // rounded down to whole 8-register units, as ptxas sizes a one-CTA-an-SM kernel), and a split
  // beyond that leaves the consumers' setmaxnreg.inc waiting forever (a producer at 32 with the
  // consumers at 240 hung the kernel: 2026-12-06).
  static constexpr int kProducerRegs = 24, kConsumerRegs = 240;
  static constexpr int kLaunchRegs = 65536 / kThreads / 8 * 8;
  static_assert(128 * kProducerRegs + kConsumers * kConsumerRegs <= kThreads * kLaunchRegs,
                "the consumers' registers exceed what the launch and the producer's release give the CTA");
  static constexpr uint32_t kQBytes = kBlockM * kDqk * sizeof(Bf16);
  static constexpr uint32_t kKBytes = kBlockN * kDqk * sizeof(Bf16);
  static constexpr uint32_t kVBytes = kBlockN * kDv * sizeof(Bf16);

  // Q [rows, dqk] and K [keys, dqk]: K-major, 128-byte swizzle (the SS operands of S = Q K^T).
  using QLayout = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Bf16>{},
                                         Shape<Int<kBlockM>, Int<kDqk>>{}));
  // The Q buffers together: (row, dim, buffer), each buffer laid out as QLayout.
  using QBuffersLayout = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Bf16>{},
                                                Shape<Int<kBlockM>, Int<kDqk>, Int<kQBuffers>>{}));
  using KLayout = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Bf16>{},
                                         Shape<Int<kBlockN>, Int<kDqk>>{}));
  // A K tile lands in two TMA loads: dims [0, kKHead) of the head and its last kKTail dims, each
  // from its own view (api.h's split K: the tail is MLA's k_pe, one row per token for every
  // head; unsplit, both views read the same rows of k). The layout tiles the 64-column swizzle
  // atoms keys first, so the tail's atom block starts kBlockN * kKHead elements into KLayout and
  // the two sub-layouts below address exactly KLayout's bytes.
  static constexpr int kKTail = 64, kKHead = kDqk - kKTail;
  using KHeadLayout = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Bf16>{},
                                             Shape<Int<kBlockN>, Int<kKHead>>{}));
  using KTailLayout = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Bf16>{},
                                             Shape<Int<kBlockN>, Int<kKTail>>{}));
  static constexpr int kKTailOffset = kBlockN * kKHead;  // elements
  // V as the (N = value dim, K = key) operand of P V: MN-major (dims contiguous, as in memory),
  // tiled along the keys first so one TMA box is 64 dims x 128 keys.
  using VLayout = decltype(tile_to_shape(GMMA::Layout_MN_SW128_Atom<Bf16>{},
                                         Shape<Int<kDv>, Int<kBlockN>>{}, Step<_2, _1>{}));
  using MmaS = decltype(make_tiled_mma(SM90_64x128x16_F32BF16BF16_SS<GMMA::Major::K, GMMA::Major::K>{}));
  using MmaO = decltype(make_tiled_mma(SM90_64x128x16_F32BF16BF16_RS<GMMA::Major::K, GMMA::Major::MN>{}));
  // The staged output (Schedule::staged_out): a consumer warpgroup's kWgRows x kDv rows of O,
  // K-major with the 128-byte swizzle. The stmatrix of a warp writes 8 rows x 16 bytes at a time,
  // which the swizzle spreads over 8 different 16-byte bank groups, and the layout is the one a
  // TMA store reads (two boxes of 64 rows x 64 columns).
  using OLayout = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Bf16>{}, Shape<Int<kWgRows>, Int<kDv>>{}));
  // Only qk 128 has the shared memory for it: 192 KB + 32 KB. qk 192 takes 208 KB, and no
  // buffer of it is free at the output (the next Q and K/V tiles load under it), so it keeps
  // the direct stores.
  static constexpr bool kStagedOut = kDqk == 128;
  static_assert(kBlockN == 128 && kDv == 128, "the wgmma atoms above have n = 128");
  static_assert(kDqk % 64 == 0, "q/k rows are whole 128-byte swizzle atoms");
};

// The TMA view of q or k (loads) or out (stores): (row, column, head, sequence end); see the
// note at the top.
template <int kCols, class SLayout, class CopyOp = SM90_TMA_LOAD>
auto MakeRowTma(const void* base, int64_t token_stride, int64_t head_stride, int heads, int max_len,
                int ends, SLayout slayout, CopyOp op = {}) {
  const auto shifted = reinterpret_cast<const Bf16*>(reinterpret_cast<uintptr_t>(base) -
                                                     static_cast<uintptr_t>(max_len) * token_stride * sizeof(Bf16));
  Tensor g = make_tensor(make_gmem_ptr(shifted), make_shape(max_len, Int<kCols>{}, heads, ends),
                         make_stride(token_stride, Int<1>{}, head_stride, token_stride));
  return make_tma_copy(op, g, slayout);
}

// The TMA view of v, transposed to (column, row, head, sequence end) for the MN-major layout.
template <int kCols, class SLayout>
auto MakeColTma(const void* base, int64_t token_stride, int64_t head_stride, int heads, int max_len,
                int ends, SLayout slayout) {
  const auto shifted = reinterpret_cast<const Bf16*>(reinterpret_cast<uintptr_t>(base) -
                                                     static_cast<uintptr_t>(max_len) * token_stride * sizeof(Bf16));
  Tensor g = make_tensor(make_gmem_ptr(shifted), make_shape(Int<kCols>{}, max_len, heads, ends),
                         make_stride(Int<1>{}, token_stride, head_stride, token_stride));
  return make_tma_copy(SM90_TMA_LOAD{}, g, slayout);
}

template <class Tile>
using QTma = decltype(MakeRowTma<Tile::kDqk>(nullptr, 0, 0, 1, 1, 1, typename Tile::QLayout{}));
template <class Tile>
using KHeadTma = decltype(MakeRowTma<Tile::kKHead>(nullptr, 0, 0, 1, 1, 1, typename Tile::KHeadLayout{}));
template <class Tile>
using KTailTma = decltype(MakeRowTma<Tile::kKTail>(nullptr, 0, 0, 1, 1, 1, typename Tile::KTailLayout{}));
template <class Tile>
using VTma = decltype(MakeColTma<Tile::kDv>(nullptr, 0, 0, 1, 1, 1, typename Tile::VLayout{}));
template <class Tile>
using OTma = decltype(MakeRowTma<Tile::kDv>(nullptr, 0, 0, 1, 1, 1, typename Tile::OLayout{}, SM90_TMA_STORE{}));

template <class Tile>
struct Sm90Args {
  MhaPrefillParams p;
  QTma<Tile> tma_q;
  KHeadTma<Tile> tma_k;      // dims [0, kKHead) of each K head
  KTailTma<Tile> tma_k_tail;  // its last kKTail dims: per head, or one shared row (split K)
  VTma<Tile> tma_v;
  OTma<Tile> tma_o;  // the staged output's stores (built only where schedule.staged_out)
  int q_ends, k_ends;  // extents of the sequence-end modes: max_seqlen * (batch + 1)
  int k_tail_heads;    // heads of the tail view: num_kv_heads, or 1 with a split K
  Schedule schedule;  // staged_out as the launcher resolved it (false where it cannot run)
  int q_buffers;  // Q buffers in use: 2 with Schedule::lookahead (as the launcher resolved it), else 1
  int x_extent;  // items per (sequence, head): query tiles of the longest sequence, or pairs of them
  int items;     // x_extent * heads * batch
  // Persistent CTAs deal the items longest sequence first (Schedule::longest_first, as the
  // launcher resolved it: persistent, 2..kOrderMaxBatch sequences); else the flat order.
  bool longest_first;
  // Persistent CTAs take their items after the first by ticket from this word (zero at the
  // launch; the CTA that draws the launch's last ticket puts it back to zero), or null: dealt by
  // round. Schedule::tickets with MhaPrefillParams::work_counter, as the launcher resolved it.
  uint32_t* tickets;
};

// Sequences the longest-first order sorts (one a thread, kernel start; the scan 4 a lane).
constexpr int kOrderMaxBatch = 128;

// The staged output's O tile: one half per consumer warpgroup, each written and stored by that
// warpgroup alone. Empty where the tile has no room for it (qk 192). Last in Sm90Smem, so that
// a launch with direct stores asks for no more shared memory than before it existed.
template <class Tile, bool = Tile::kStagedOut>
struct Sm90OutSmem {
  cute::array_aligned<Bf16, cosize_v<typename Tile::OLayout>, 1024> o[2];
};
template <class Tile>
struct Sm90OutSmem<Tile, false> {};

template <class Tile>
struct Sm90Smem {
  cute::array_aligned<Bf16, cosize_v<typename Tile::QBuffersLayout>, 1024> q;  // Tile::kQBuffers of them
  cute::array_aligned<Bf16, cosize_v<typename Tile::KLayout>, 1024> k[Tile::kStages];
  cute::array_aligned<Bf16, cosize_v<typename Tile::VLayout>, 1024> v[Tile::kStages];
  Sm90OutSmem<Tile> out;  // the staged output's O tile (Schedule::staged_out)
};

// The pipeline's barriers, in static shared memory (in the dynamic block they would take a
// 1024-byte aligned slot, which qk 128's two Q buffers leave no room for).
template <class Tile>
struct Sm90Barriers {
  uint64_t q_full[Tile::kQBuffers];                         // a Q landed (TMA transaction barrier)
  uint64_t q_empty[Tile::kQBuffers];                        // both consumer warpgroups are done with it
  uint64_t k_full[Tile::kStages], v_full[Tile::kStages];    // a K / V tile landed
  uint64_t k_empty[Tile::kStages], v_empty[Tile::kStages];  // both consumer warpgroups are done
};

// Schedule::lazy_rescale: how far (log2 units of the scaled scores) a row's tile maximum may
// exceed the reference it exponentiates against before the reference moves (FlashAttention-4's
// threshold: P stays below 2^8).
constexpr float kLazyRescaleLog2 = 8.0f;

// Named barriers of the ping-pong (CUTLASS user ids; ids 0..7 are reserved): warpgroup w waits
// on kTurn + w before issuing its products, and then lets the other one go.
constexpr uint32_t kTurnBarrier = 0;
// Named barriers of the staged output, per consumer warpgroup w (128 threads each): kOutFree + w
// says its O half has been read by its previous TMA store (warp 0 arrives once its lane 0 has
// waited for that, warps 1-3 wait), kOutFull + w that the half is written (warps 1-3 arrive,
// warp 0 waits and issues the store). Two ids, not one: warp 0 arrives on the one and then waits
// on the other while warps 1-3 may still be on their way to the first; with one id warp 0's
// second arrival would complete the first phase early.
constexpr uint32_t kOutFreeBarrier = 2, kOutFullBarrier = 4;

using FullBarrier = cutlass::arch::ClusterTransactionBarrier;
using EmptyBarrier = cutlass::arch::ClusterBarrier;

// The query tiles of work item x (of x_extent per sequence and head), heaviest first: `first`
// and then `second` (two scalars, not an array, so that nothing is indexed at run time); returns
// how many (0-2). Unpaired: one per item, x reversed when causal (most keys first). Paired:
// tiles count-1-x and x of the sequence.
template <int kBlockM>
__device__ __forceinline__ int ItemQueryTiles(int lq, bool causal, bool paired, int x, int x_extent, int& first,
                                              int& second) {
  const int count = (lq + kBlockM - 1) / kBlockM;
  second = x;
  if (!paired) {
    first = causal ? x_extent - 1 - x : x;
    return first < count ? 1 : 0;
  }
  first = count - 1 - x;
  return first < x ? 0 : (first == x ? 1 : 2);
}

// One work item: its sequence's rows and keys, its head, its query tiles.
struct WorkItem {
  int b, head, kv_head;
  int q_start, lq, k_start, lk;
  int first_tile, second_tile, n_work;
  int causal_shift;  // query i sees keys j <= i + causal_shift
};

template <int kBlockM>
__device__ __forceinline__ WorkItem DecodeItemOf(const MhaPrefillParams& p, bool paired, int b, int head, int x,
                                                 int x_extent) {
  WorkItem w;
  w.head = head;
  w.b = b;
  w.kv_head = w.head / (p.num_heads / p.num_kv_heads);
  w.q_start = p.cu_seqlens_q[w.b];
  w.lq = p.cu_seqlens_q[w.b + 1] - w.q_start;
  w.k_start = p.cu_seqlens_k[w.b];
  w.lk = p.cu_seqlens_k[w.b + 1] - w.k_start;
  w.causal_shift = w.lk - w.lq;
  w.n_work = ItemQueryTiles<kBlockM>(w.lq, p.causal, paired, x, x_extent, w.first_tile, w.second_tile);
  return w;
}

// Item `item` of the flat order: (x, head, sequence), x fastest, x_extent per (sequence, head).
template <int kBlockM>
__device__ __forceinline__ WorkItem DecodeItem(const MhaPrefillParams& p, bool paired, int item, int x_extent) {
  const int x = item % x_extent, hb = item / x_extent;
  return DecodeItemOf<kBlockM>(p, paired, hb / p.num_heads, hb % p.num_heads, x, x_extent);
}

// The longest-first order (Sm90Args::longest_first). A persistent CTA walks its items in rounds,
// and with a ragged batch the flat order deals them blindly: the items of a long sequence cost
// several times a short one's, so some CTAs end late while others idle (as a grid of one CTA an
// item, or cuDNN's, never does: the hardware hands out the next CTA). Here the sequences are
// ranked by an item's cost (its keys), heaviest first, each rank's items numbered x fastest then
// head, and round j gives CTA c the item ranked j * G + c, or j * G + G - 1 - c in odd rounds
// (G CTAs; a snake over costs that fall round by round, so every CTA gets a heavy and a light
// one in turn). Built per CTA at its start from cu_seqlens: a thread per sequence ranks it,
// warp 0 scans the ranks' item counts.
struct ItemOrder {
  int seq[kOrderMaxBatch];        // the sequence of each rank
  int per_head[kOrderMaxBatch];   // its items per head (pairs or query tiles; 0: none)
  int first[kOrderMaxBatch + 1];  // the rank's first item; first[batch] = all items
  int key[kOrderMaxBatch];        // scratch: each sequence's cost (-1: no items)
};

template <int kBlockM>
__device__ __forceinline__ void BuildItemOrder(const MhaPrefillParams& p, bool paired, ItemOrder& o) {
  const int B = p.batch, t = threadIdx.x;
  int n = 0, key = -1;
  if (t < B) {
    const int lq = p.cu_seqlens_q[t + 1] - p.cu_seqlens_q[t], lk = p.cu_seqlens_k[t + 1] - p.cu_seqlens_k[t];
    const int count = (lq + kBlockM - 1) / kBlockM;
    n = paired ? (count + 1) / 2 : count;
    // An item's keys: a causal pair (tiles count-1-x and x) sees about 2 lk - lq of them together.
    if (n > 0) key = paired ? (p.causal ? 2 * lk - lq : 2 * lk) : lk;
    o.key[t] = key;
  }
  __syncthreads();
  if (t < B) {
    int rank = 0;
    for (int j = 0; j < B; ++j) {
      const int kj = o.key[j];
      rank += (kj > key || (kj == key && j < t)) ? 1 : 0;
    }
    o.seq[rank] = t;
    o.per_head[rank] = n;
  }
  __syncthreads();
  if (t < cuda::kWarpSize) {  // exclusive scan of the ranks' items, 4 ranks a lane
    constexpr int kPerLane = kOrderMaxBatch / cuda::kWarpSize;
    int v[kPerLane], sum = 0;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int r = t * kPerLane + i;
      v[i] = r < B ? o.per_head[r] * p.num_heads : 0;
      sum += v[i];
    }
    int incl = sum;
#pragma unroll
    for (int d = 1; d < cuda::kWarpSize; d <<= 1) {
      const int up = __shfl_up_sync(0xffffffffu, incl, d);
      if (t >= d) incl += up;
    }
    int at = incl - sum;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int r = t * kPerLane + i;
      if (r < B) o.first[r] = at;
      at += v[i];
    }
    if (t == cuda::kWarpSize - 1) o.first[B] = incl;
  }
  // (the caller's __syncthreads publishes the order)
}

// The rank (an index of the longest-first order, or a flat item index) that round `round` deals
// to this CTA without tickets.
template <class Args>
__device__ __forceinline__ int StaticRank(const Args& args, int round) {
  const int G = gridDim.x, c = blockIdx.x;
  if (!args.longest_first) return c + round * G;
  return round * G + ((round & 1) ? G - 1 - c : c);
}

// The items the ranks number (those past it do not exist).
template <class Args>
__device__ __forceinline__ int RankedItems(const Args& args, const ItemOrder& o) {
  return args.longest_first ? o.first[args.p.batch] : args.items;
}

// Item of rank r, or false where there is none.
template <int kBlockM, class Args>
__device__ __forceinline__ bool ItemAt(const Args& args, const ItemOrder& o, bool paired, int r, WorkItem& it) {
  const MhaPrefillParams& p = args.p;
  if (r >= RankedItems(args, o)) return false;
  if (!args.longest_first) {
    it = DecodeItem<kBlockM>(p, paired, r, args.x_extent);
    return true;
  }
  int lo = 0, hi = p.batch - 1;  // the last rank whose first item is <= r (it has items)
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (o.first[mid] <= r) lo = mid; else hi = mid - 1;
  }
  const int n = o.per_head[lo], local = r - o.first[lo];
  it = DecodeItemOf<kBlockM>(p, paired, o.seq[lo], local / n, local % n, n);
  return true;
}

// The tickets' hand-off from the producer thread, which draws them, to the consumers: the rank
// of round n >= 1 in slot (n - 1) % 2, full when written (one arrival), empty once every
// consumer thread has read it (kConsumers arrivals: each thread its own, which racecheck
// follows; once an item, so their cost does not show).
struct TicketRing {
  int rank[2];
  uint64_t full[2], empty[2];
};

// The producer's ticket for round `round` >= 1: the next rank of the launch (the first G ranks
// are the CTAs' first items). Every CTA draws until it gets a rank past the items, so a launch
// draws max(items, G) tickets; the one that draws the last resets the word for the next launch.
template <class Args>
__device__ __forceinline__ int DrawTicket(const Args& args, const ItemOrder& o) {
  const int G = gridDim.x, items = RankedItems(args, o);
  const int drawn = static_cast<int>(atomicAdd(args.tickets, 1u));
  if (drawn == max(items, G) - 1) atomicExch(args.tickets, 0u);
  return G + drawn;
}

// Key tiles that the query tile at row m0 of item w needs (causal: up to its last row's diagonal).
template <int kBlockM, int kBlockN>
__device__ __forceinline__ int KeyTiles(const MhaPrefillParams& p, const WorkItem& w, int m0) {
  const int n_end = p.causal ? min(w.lk, m0 + kBlockM + w.causal_shift) : w.lk;
  return n_end > 0 ? (n_end + kBlockN - 1) / kBlockN : 0;
}

template <class Tile>
__global__ void __launch_bounds__(Tile::kThreads, 1)
    MhaPrefillSm90Kernel(const __grid_constant__ Sm90Args<Tile> args) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kBlockM = Tile::kBlockM, kBlockN = Tile::kBlockN, kWgRows = Tile::kWgRows;
  constexpr int kDqk = Tile::kDqk, kDv = Tile::kDv;
  const MhaPrefillParams& p = args.p;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  auto& ss = *reinterpret_cast<Sm90Smem<Tile>*>(smem_raw);

  const bool paired = args.schedule.paired;
  __shared__ ItemOrder order;
  if (args.longest_first) BuildItemOrder<kBlockM>(p, paired, order);
  __shared__ TicketRing ring;
  __shared__ Sm90Barriers<Tile> bar;
  const bool dynamic = args.tickets != nullptr;

  if (threadIdx.x == 0) {
    for (int b = 0; b < Tile::kQBuffers; ++b) {
      FullBarrier::init(&bar.q_full[b], 1);
      EmptyBarrier::init(&bar.q_empty[b], 2);  // one arrival per consumer warpgroup
    }
    for (int s = 0; s < Tile::kStages; ++s) {
      FullBarrier::init(&bar.k_full[s], 1);
      FullBarrier::init(&bar.v_full[s], 1);
      EmptyBarrier::init(&bar.k_empty[s], 2);
      EmptyBarrier::init(&bar.v_empty[s], 2);
    }
    for (int s = 0; s < 2; ++s) {
      EmptyBarrier::init(&ring.full[s], 1);
      EmptyBarrier::init(&ring.empty[s], Tile::kConsumers);
    }
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();

  // K/V loads are counted over the CTA's query tiles (of all its items): load g is in stage
  // g % 2, that stage's (g / 2)-th use, and waits for the release of load g - 2.
  if (threadIdx.x >= Tile::kConsumers) {  // the producer warpgroup
    cutlass::arch::warpgroup_reg_dealloc<Tile::kProducerRegs>();
    if (threadIdx.x != Tile::kConsumers) return;
    cute::prefetch_tma_descriptor(args.tma_q.get_tma_descriptor());
    cute::prefetch_tma_descriptor(args.tma_k.get_tma_descriptor());
    cute::prefetch_tma_descriptor(args.tma_k_tail.get_tma_descriptor());
    cute::prefetch_tma_descriptor(args.tma_v.get_tma_descriptor());
    const int max_q = p.max_seqlen_q, max_k = p.max_seqlen_k;
    Tensor mQ = args.tma_q.get_tma_tensor(make_shape(max_q, Int<kDqk>{}, p.num_heads, args.q_ends));
    constexpr int kKHead = Tile::kKHead, kKTail = Tile::kKTail;
    Tensor mK = args.tma_k.get_tma_tensor(make_shape(max_k, Int<kKHead>{}, p.num_kv_heads, args.k_ends));
    Tensor mKt = args.tma_k_tail.get_tma_tensor(make_shape(max_k, Int<kKTail>{}, args.k_tail_heads, args.k_ends));
    Tensor mV = args.tma_v.get_tma_tensor(make_shape(Int<kDv>{}, max_k, p.num_kv_heads, args.k_ends));
    Tensor sQ = make_tensor(make_smem_ptr(ss.q.data()), typename Tile::QBuffersLayout{});  // (row, dim, buffer)
    auto cta_q = args.tma_q.get_slice(Int<0>{});
    auto cta_k = args.tma_k.get_slice(Int<0>{});
    auto cta_kt = args.tma_k_tail.get_slice(Int<0>{});
    auto cta_v = args.tma_v.get_slice(Int<0>{});
    constexpr auto kKeep = TMA::CacheHintSm90::EVICT_LAST;  // K/V are re-read by the sequence's other items
    int loaded = 0, q_loads = 0;
    WorkItem it;
    for (int round = 0;; ++round) {
      int r = StaticRank(args, round);
      if (dynamic && round > 0) {  // draw the round's rank and hand it to the consumers
        r = DrawTicket(args, order);
        const int slot = (round - 1) & 1, use = (round - 1) >> 1;
        if (use > 0) EmptyBarrier::wait(&ring.empty[slot], (use - 1) & 1);
        ring.rank[slot] = r;
        EmptyBarrier::arrive(&ring.full[slot]);
      }
      if (!ItemAt<kBlockM>(args, order, paired, r, it)) {
        if (dynamic && round == 0) continue;  // no first item: still one ticket (it ends the CTA)
        break;
      }
      if (it.n_work == 0) continue;
      const int lq = it.lq, lk = it.lk;
      const int tail_head = args.k_tail_heads == 1 ? 0 : it.kv_head;
      // This sequence's rows, shifted so that row len is the first one past the extent.
      Tensor gQ = local_tile(domain_offset(make_coord(max_q - lq, 0), mQ(_, _, it.head, it.q_start + lq)),
                             Shape<Int<kBlockM>, Int<kDqk>>{}, make_coord(_, 0));  // (row, d, tile)
      Tensor gK = local_tile(domain_offset(make_coord(max_k - lk, 0), mK(_, _, it.kv_head, it.k_start + lk)),
                             Shape<Int<kBlockN>, Int<kKHead>>{}, make_coord(_, 0));  // (key, d, tile)
      Tensor gKt = local_tile(domain_offset(make_coord(max_k - lk, 0), mKt(_, _, tail_head, it.k_start + lk)),
                              Shape<Int<kBlockN>, Int<kKTail>>{}, make_coord(_, 0));  // (key, d, tile)
      Tensor gV = local_tile(domain_offset(make_coord(0, max_k - lk), mV(_, _, it.kv_head, it.k_start + lk)),
                             Shape<Int<kDv>, Int<kBlockN>>{}, make_coord(0, _));  // (d, key, tile)
      for (int w = 0; w < it.n_work; ++w) {
        const int m_block = w == 0 ? it.first_tile : it.second_tile;
        const int n_tiles = KeyTiles<kBlockM, kBlockN>(p, it, m_block * kBlockM);
        if (n_tiles == 0) continue;
        // Q load g goes to buffer g % q_buffers, once the consumers are done with load g - q_buffers.
        const int qb = q_loads % args.q_buffers, q_use = q_loads / args.q_buffers;
        if (q_use > 0) EmptyBarrier::wait(&bar.q_empty[qb], (q_use - 1) & 1);
        FullBarrier::arrive_and_expect_tx(&bar.q_full[qb], Tile::kQBytes);
        copy(args.tma_q.with(bar.q_full[qb], 0, TMA::CacheHintSm90::EVICT_FIRST), cta_q.partition_S(gQ(_, _, m_block)),
             cta_q.partition_D(sQ(_, _, qb)));
        ++q_loads;
        // Load i of this query tile is key tile n_tiles - 1 - i.
        auto load_v = [&](int i) {
          const int g = loaded + i, stage = g & 1;
          if (g >= Tile::kStages) EmptyBarrier::wait(&bar.v_empty[stage], ((g >> 1) - 1) & 1);
          FullBarrier::arrive_and_expect_tx(&bar.v_full[stage], Tile::kVBytes);
          copy(args.tma_v.with(bar.v_full[stage], 0, kKeep), cta_v.partition_S(gV(_, _, n_tiles - 1 - i)),
               cta_v.partition_D(make_tensor(make_smem_ptr(ss.v[stage].data()), typename Tile::VLayout{})));
        };
        // Not unrolled: four key tiles an iteration (the compiler's choice) need more than the
        // producer's 24 registers, and their spills were reloaded from local memory every tile.
#pragma unroll 1
        for (int i = 0; i < n_tiles; ++i) {
          const int g = loaded + i, stage = g & 1;
          if (g >= Tile::kStages) EmptyBarrier::wait(&bar.k_empty[stage], ((g >> 1) - 1) & 1);
          FullBarrier::arrive_and_expect_tx(&bar.k_full[stage], Tile::kKBytes);
          copy(args.tma_k.with(bar.k_full[stage], 0, kKeep), cta_k.partition_S(gK(_, _, n_tiles - 1 - i)),
               cta_k.partition_D(make_tensor(make_smem_ptr(ss.k[stage].data()), typename Tile::KHeadLayout{})));
          copy(args.tma_k_tail.with(bar.k_full[stage], 0, kKeep), cta_kt.partition_S(gKt(_, _, n_tiles - 1 - i)),
               cta_kt.partition_D(make_tensor(make_smem_ptr(ss.k[stage].data() + Tile::kKTailOffset),
                                              typename Tile::KTailLayout{})));
          // The consumers multiply V(i - 1) after S(i): load it behind K(i).
          if (i > 0) load_v(i - 1);
        }
        load_v(n_tiles - 1);
        loaded += n_tiles;
      }
    }
    return;
  }

  cutlass::arch::warpgroup_reg_alloc<Tile::kConsumerRegs>();
  const int wg = threadIdx.x / 128, wg_tid = threadIdx.x % 128;
  typename Tile::MmaS mma_s;
  typename Tile::MmaO mma_o;
  auto thr_s = mma_s.get_thread_slice(wg_tid);
  auto thr_o = mma_o.get_thread_slice(wg_tid);
  // This warpgroup's rows of every Q buffer: (row, dim, buffer); the fragment (MMA, M, K, buffer).
  Tensor sQ = local_tile(make_tensor(make_smem_ptr(ss.q.data()), typename Tile::QBuffersLayout{}),
                         Shape<Int<kWgRows>, Int<kDqk>, Int<Tile::kQBuffers>>{}, make_coord(wg, 0, 0));
  Tensor tSrQ = thr_s.make_fragment_A(thr_s.partition_A(sQ));
  Tensor tSrS = partition_fragment_C(mma_s, Shape<Int<kWgRows>, Int<kBlockN>>{});
  Tensor tOrO = partition_fragment_C(mma_o, Shape<Int<kWgRows>, Int<kDv>>{});
  // P as the A operand of P V. Its flat order is the S accumulators' flat order (both are
  // (2 columns, 2 row halves, column blocks of 8)), so P(i) = bf16(S(i)).
  Tensor tOrP = make_tensor<Bf16>(partition_shape_A(mma_o, Shape<Int<kWgRows>, Int<kBlockN>>{}));
  static_assert(decltype(size(tOrP))::value == decltype(size(tSrS))::value);
  // (row, column) within the warpgroup's tile of every accumulator element this thread holds;
  // element i is in row half (i / 2) % 2.
  Tensor tScS = thr_s.partition_C(make_identity_tensor(Shape<Int<kWgRows>, Int<kBlockN>>{}));
  Tensor tOcO = thr_o.partition_C(make_identity_tensor(Shape<Int<kWgRows>, Int<kDv>>{}));
  const int my_row[2] = {get<0>(tScS(0)), get<0>(tScS(2))};
  const float scale_log2 = p.softmax_scale * cuda::kLog2e;
  const bool lazy_rescale = args.schedule.lazy_rescale;
  // Per query tile: the keys each of this thread's rows sees (keys < key_end[half]), the fewest
  // any row of the warpgroup sees (tiles past it need the mask: a uniform test), and the
  // running row maxima (log2 domain), sums and last rescale factors.
  int key_end[2], wg_key_end;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f}, alpha[2] = {1.0f, 1.0f};
  // Per row half: whether the last softmax moved a reference maximum, so that O's rows of the
  // half need their rescale (always, unless Schedule::lazy_rescale; warp-uniform).
  bool rescale[2] = {true, true};

  auto qk_gemm = [&](int stage, int qb) {
    Tensor sK = make_tensor(make_smem_ptr(ss.k[stage].data()), typename Tile::KLayout{});
    Tensor tSrK = thr_s.make_fragment_B(thr_s.partition_B(sK));
    warpgroup_fence_operand(tSrS);
    warpgroup_arrive();
    mma_s.accumulate_ = GMMA::ScaleOut::Zero;
#pragma unroll
    for (int k = 0; k < size<2>(tSrQ); ++k) {
      cute::gemm(mma_s, tSrQ(_, _, k, qb), tSrK(_, _, k), tSrS);
      mma_s.accumulate_ = GMMA::ScaleOut::One;
    }
    warpgroup_commit_batch();
    warpgroup_fence_operand(tSrS);
  };
  // first: the query tile's first P V, which writes O instead of adding to it (O is never
  // cleared: no non-wgmma write of it can then sit where a product may be in flight).
  auto pv_gemm = [&](int stage, bool first) {
    Tensor sV = make_tensor(make_smem_ptr(ss.v[stage].data()), typename Tile::VLayout{});
    Tensor tOrV = thr_o.make_fragment_B(thr_o.partition_B(sV));
    warpgroup_fence_operand(tOrP);
    warpgroup_fence_operand(tOrO);
    warpgroup_arrive();
    mma_o.accumulate_ = first ? GMMA::ScaleOut::Zero : GMMA::ScaleOut::One;
#pragma unroll
    for (int k = 0; k < size<2>(tOrP); ++k) {
      cute::gemm(mma_o, tOrP(_, _, k), tOrV(_, _, k), tOrO);
      mma_o.accumulate_ = GMMA::ScaleOut::One;
    }
    warpgroup_commit_batch();
    warpgroup_fence_operand(tOrO);
    warpgroup_fence_operand(tOrP);
  };
  auto release = [&](uint64_t* empty) {
    if (wg_tid == 0) EmptyBarrier::arrive(empty);
  };
  // Key tile n: masks keys past the sequence and (causal) past each row's diagonal, where the
  // tile reaches them; then the online softmax in the log2 domain. Leaves P (f32) in tSrS and
  // the factor that rescales O from the previous row maxima to the new ones in alpha.
  auto softmax = [&](int n) {
    const int key0 = n * kBlockN;
    if (key0 + kBlockN > wg_key_end) {
#pragma unroll
      for (int i = 0; i < size(tSrS); ++i) {
        if (key0 + get<1>(tScS(i)) >= key_end[(i >> 1) & 1]) tSrS(i) = -INFINITY;
      }
    }
    // Each row half (element i is in half (i / 2) % 2) is reduced, voted on and exponentiated on
    // its own, with a vote of its own: nothing joins the halves, so the compiler runs one half's
    // maxima under the other's shuffles and vote, and its exponentials start without waiting for
    // both (one vote over both rows had the 64 exponentials wait for all 72 maxima, two shuffle
    // rounds and the vote's byte packing: qk 128, 128 heads, 4k, +3.5%; qk 192 +2%; H100, eight
    // alternated rounds, docs/BENCHMARKS.md, seventy-first session). Maxima and sums in kChains
    // independent chains per row (element group k = i / 4 in chain k % kChains), each started
    // from its first elements.
    constexpr int kChains = 4;
    constexpr int kGroups = decltype(size(tSrS))::value / 4;
    static_assert(kGroups >= kChains, "every chain starts from an element group");
    static_assert(kChains == 4, "the chains' final combines below are written out for four");
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float mx[kChains];
#pragma unroll
      for (int k = 0; k < kGroups; ++k) {
        const float pair = fmaxf(tSrS(4 * k + 2 * half), tSrS(4 * k + 2 * half + 1));
        mx[k % kChains] = k < kChains ? pair : fmaxf(mx[k % kChains], pair);
      }
      const float m_tile = cuda::QuadMax(fmaxf(fmaxf(mx[0], mx[1]), fmaxf(mx[2], mx[3]))) * scale_log2;
      // Lazy rescale: the half's reference maxima move only when some row of the warp's half
      // sees a tile maximum more than kLazyRescaleLog2 above its own (P then stays below 2^8);
      // O's rows of the half are rescaled only then. The vote keeps the skip warp-uniform; the
      // output and LSE are relative to the same reference, so they change only by rounding.
      rescale[half] = __any_sync(0xffffffffu, !lazy_rescale || m_tile > m_run[half] + kLazyRescaleLog2);
      const float m_new = rescale[half] ? fmaxf(m_run[half], m_tile) : m_run[half];
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // a row without keys so far: P = 0
      if (rescale[half]) {
        alpha[half] = cuda::FastExp2(m_run[half] - m_use);
        l_run[half] *= alpha[half];
      }
      m_run[half] = m_new;
      float sum[kChains];
#pragma unroll
      for (int k = 0; k < kGroups; ++k) {
        float& a = tSrS(4 * k + 2 * half);
        float& b = tSrS(4 * k + 2 * half + 1);
        a = cuda::FastExp2(fmaf(a, scale_log2, -m_use));
        b = cuda::FastExp2(fmaf(b, scale_log2, -m_use));
        sum[k % kChains] = k < kChains ? a + b : sum[k % kChains] + (a + b);
      }
      l_run[half] += (sum[0] + sum[1]) + (sum[2] + sum[3]);
    }
  };
  auto convert_p = [&] {
    Tensor p32 = recast<uint32_t>(tOrP);
#pragma unroll
    for (int i = 0; i < size(p32); ++i) p32(i) = cuda::PackBf16(tSrS(2 * i), tSrS(2 * i + 1));
  };
  // O's rows of each half whose reference maxima the last softmax moved (alpha is that half's
  // factor then, and stale otherwise).
  auto rescale_o = [&] {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      if (rescale[half]) {
#pragma unroll
        for (int i = 2 * half; i < size(tOrO); i += 4) {
          tOrO(i) *= alpha[half];
          tOrO(i + 1) *= alpha[half];
        }
      }
    }
  };
  // The staged output of this warpgroup's rows row0.. of query tile `it` (some row < lq): O * inv
  // as bf16 into the warpgroup's half of the O tile (zeros where `zero`: a tile that sees no key,
  // whose O registers hold the previous tile's), then one TMA store of it by thread 0, which
  // nobody waits for until the half is needed again (the next query tile's output).
  auto store_o_staged = [&](const auto& it, int row0, const float (&inv)[2], bool zero) {
    if constexpr (Tile::kStagedOut) {
      using Barrier = cutlass::arch::NamedBarrier;
      constexpr int kWgThreads = 128;
      Tensor sO = make_tensor(make_smem_ptr(ss.out.o[wg].data()), typename Tile::OLayout{});
      // The half is free once the previous store out of it has read it: the thread that issued
      // that store waits for the read (a no-op without one), and its warp then lets the others in.
      if (wg_tid < 32) {
        if (wg_tid == 0) tma_store_wait<0>();
        __syncwarp();
        Barrier::arrive(kWgThreads, kOutFreeBarrier + wg);
      } else {
        Barrier::sync(kWgThreads, kOutFreeBarrier + wg);
      }
      // The same rounding as the direct stores; then stmatrix (four 8x8 blocks per instruction).
      Tensor tOrOb = make_tensor_like<Bf16>(tOrO);
      Tensor o32 = recast<uint32_t>(tOrOb);
#pragma unroll
      for (int i = 0; i < size(o32); ++i) {
        const int half = i & 1;  // element 2i is in row half (2i / 2) % 2
        o32(i) = zero ? 0u : cuda::PackBf16(tOrO(2 * i) * inv[half], tOrO(2 * i + 1) * inv[half]);
      }
      auto stsm = make_tiled_copy_C(Copy_Atom<SM90_U32x4_STSM_N, Bf16>{}, mma_o);
      // The thread's stmatrix addresses are recomputed here for every tile (the empty asm hides
      // that they are loop-invariant): hoisted out of the tile loop, as the compiler does without
      // it, the eight of them stay live across it, spilled, and every output reloads them from
      // local memory. Recomputed: +2.5% at qk 128, 4k tokens a sequence, 16 and 128 heads (H100,
      // eight rounds; docs/BENCHMARKS.md, seventieth session).
      int stsm_tid = wg_tid;
      asm volatile("" : "+r"(stsm_tid));
      auto thr_stsm = stsm.get_thread_slice(stsm_tid);
      copy(stsm, thr_stsm.retile_S(tOrOb), thr_stsm.partition_D(sO));
      // Each writer makes its generic-proxy writes visible to the async proxy (TMA) before the
      // barrier that hands the half to the issuing thread.
      tma_store_fence();
      if (wg_tid < 32) {
        Barrier::sync(kWgThreads, kOutFullBarrier + wg);
        if (wg_tid == 0) {
          Tensor mO = args.tma_o.get_tma_tensor(make_shape(p.max_seqlen_q, Int<kDv>{}, p.num_heads, args.q_ends));
          // Rows row0.. of the sequence, shifted as the producer shifts Q: rows >= lq fall past
          // the row extent, and TMA does not write them.
          Tensor gO = local_tile(domain_offset(make_coord(p.max_seqlen_q - it.lq + row0, 0),
                                               mO(_, _, it.head, it.q_start + it.lq)),
                                 Shape<Int<kWgRows>, Int<kDv>>{}, make_coord(0, 0));
          auto cta_o = args.tma_o.get_slice(Int<0>{});
          copy(args.tma_o, cta_o.partition_S(sO), cta_o.partition_D(gO));
          tma_store_arrive();
        }
      } else {
        Barrier::arrive(kWgThreads, kOutFullBarrier + wg);
      }
    }
  };

  const bool pingpong = args.schedule.pingpong;
  const bool staged = Tile::kStagedOut && args.schedule.staged_out;
  // The threads that issue the output's TMA stores fetch its descriptor (not the producer: more
  // live values there spill its 24 registers).
  if (staged && wg_tid == 0) cute::prefetch_tma_descriptor(args.tma_o.get_tma_descriptor());
  const bool lookahead = Tile::kQBuffers > 1 && args.q_buffers > 1;  // compiled out for qk 192
  int loaded = 0, q_loads = 0;

  // The CTA's query tiles in the producer's order: round by round an item (by rank, or by the
  // producer's ticket), each item's tiles in turn. A tile keeps what its output needs; the
  // statistics' reset reads the item (`it`), which is the tile's own until the next item is taken.
  struct QueryTile {
    int m0, n_tiles, q_start, lq, head;
  };
  WorkItem it;
  int round = 0, w_next = 0, n_work = 0;
  const auto next_tile = [&](QueryTile& t) -> bool {
    for (;;) {
      if (w_next < n_work) {
        const int w = w_next++;
        t.m0 = (w == 0 ? it.first_tile : it.second_tile) * kBlockM;
        t.n_tiles = KeyTiles<kBlockM, kBlockN>(p, it, t.m0);
        t.q_start = it.q_start;
        t.lq = it.lq;
        t.head = it.head;
        return true;
      }
      int r = StaticRank(args, round);
      if (dynamic && round > 0) {  // the producer's ticket for this round
        const int slot = (round - 1) & 1, use = (round - 1) >> 1;
        EmptyBarrier::wait(&ring.full[slot], use & 1);
        r = ring.rank[slot];
        EmptyBarrier::arrive(&ring.empty[slot]);
      }
      const int this_round = round++;
      w_next = n_work = 0;
      if (!ItemAt<kBlockM>(args, order, paired, r, it)) {
        if (dynamic && this_round == 0) continue;  // no first item: the tickets may still give one
        return false;
      }
      n_work = it.n_work;
    }
  };
  // The keys each of this thread's rows of tile t sees and the running statistics' reset (O is
  // not cleared: the tile's first P V writes it, pv_gemm's `first`).
  const auto reset_stats = [&](const QueryTile& t) {
    const int row0 = t.m0 + wg * kWgRows;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = row0 + my_row[half];
      key_end[half] = p.causal ? max(0, min(it.lk, row + it.causal_shift + 1)) : it.lk;
      m_run[half] = -INFINITY;
      l_run[half] = 0.0f;
    }
    wg_key_end = p.causal ? min(it.lk, row0 + it.causal_shift + 1) : it.lk;
  };
  // A tile's first S product (key tile n_tiles - 1, load `loaded`), once its Q and K have landed;
  // returns the tile's Q buffer.
  const auto first_product = [&]() -> int {
    const int qb = q_loads % args.q_buffers;
    FullBarrier::wait(&bar.q_full[qb], (q_loads / args.q_buffers) & 1);
    ++q_loads;
    FullBarrier::wait(&bar.k_full[loaded & 1], (loaded >> 1) & 1);
    qk_gemm(loaded & 1, qb);
    return qb;
  };

  // The output of tile t (uniform in the warpgroup): the rows that exist, O * inv as bf16 (zeros
  // for a tile that saw no key: O was not written for it), and the LSE.
  const auto write_output = [&](const QueryTile& t, const float (&inv)[2], const float (&lse)[2]) {
    const int row0 = t.m0 + wg * kWgRows;
    const bool zero = t.n_tiles == 0;
    if (staged) {
      if (row0 < t.lq) store_o_staged(t, row0, inv, zero);
    } else {
      auto* out = static_cast<__nv_bfloat16*>(p.out) + static_cast<int64_t>(t.q_start) * p.out_token_stride +
                  static_cast<int64_t>(t.head) * p.out_head_stride;
#pragma unroll
      for (int i = 0; i < size(tOrO); i += 2) {
        const int half = (i >> 1) & 1;
        const int row = row0 + get<0>(tOcO(i));
        if (row >= t.lq) continue;
        *reinterpret_cast<uint32_t*>(out + static_cast<int64_t>(row) * p.out_token_stride + get<1>(tOcO(i))) =
            zero ? 0u : cuda::PackBf16(tOrO(i) * inv[half], tOrO(i + 1) * inv[half]);
      }
    }
    if (p.lse != nullptr && wg_tid % 4 == 0) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = row0 + my_row[half];
        if (row < t.lq) p.lse[static_cast<int64_t>(t.q_start + row) * p.num_heads + t.head] = lse[half];
      }
    }
  };

  // Every product below is waited for in the straight-line block that issued it, before any
  // branch merges: a product in flight across a merge makes ptxas wait for it there, or
  // serialize the products (C7515-C7518).
  QueryTile cur{}, next{};
  bool have = next_tile(cur);
  bool started = false;  // cur's first S product is done (issued by the previous tile's lookahead)
  int qb = 0;            // cur's Q buffer
#pragma unroll 1
  while (have) {
    const int n_tiles = cur.n_tiles;
    if (!started) reset_stats(cur);
    // Tile i of this query tile: key tile n_tiles - 1 - i, load loaded + i.
    const auto stage = [&](int i) { return (loaded + i) & 1; };
    const auto phase = [&](int i) { return ((loaded + i) >> 1) & 1; };
    float inv[2], lse[2];
    if (n_tiles > 0) {
      if (!started) {
        qb = first_product();
        warpgroup_wait<0>();
      }
      release(&bar.k_empty[stage(0)]);
      if (n_tiles == 1) release(&bar.q_empty[qb]);  // this warpgroup's last use of Q
      softmax(n_tiles - 1);
#pragma unroll 1
      for (int i = 1; i < n_tiles; ++i) {
        // P(i - 1), from the softmax that ended the previous iteration, once P V(i - 2) is
        // done. The wait sits here rather than at the end of the previous iteration because
        // ptxas would hoist it above that softmax there, and the two would no longer overlap.
        warpgroup_wait<0>();
        if (i >= 2) release(&bar.v_empty[stage(i - 2)]);
        convert_p();
        FullBarrier::wait(&bar.k_full[stage(i)], phase(i));
        // Warpgroup 0 goes first; afterwards each waits until the other has issued.
        if (pingpong && !(wg == 0 && i == 1)) cutlass::arch::NamedBarrier::sync(Tile::kConsumers, kTurnBarrier + wg);
        qk_gemm(stage(i), qb);
        rescale_o();
        FullBarrier::wait(&bar.v_full[stage(i - 1)], phase(i - 1));
        pv_gemm(stage(i - 1), i == 1);
        // Warpgroup 1's last turn has nobody left to wake.
        if (pingpong && !(wg == 1 && i == n_tiles - 1)) {
          cutlass::arch::NamedBarrier::arrive(Tile::kConsumers, kTurnBarrier + (1 - wg));
        }
        warpgroup_wait<1>();  // S(i) done, P V(i - 1) may still run
        release(&bar.k_empty[stage(i)]);
        if (i == n_tiles - 1) release(&bar.q_empty[qb]);
        softmax(n_tiles - 1 - i);
      }
      const int last = n_tiles - 1;
      warpgroup_wait<0>();
      if (last >= 1) release(&bar.v_empty[stage(last - 1)]);
      convert_p();
      rescale_o();
    }
    // The statistics are final: the row's normaliser and LSE (a row that saw no key: 0, -inf).
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float l = cuda::QuadSum(l_run[half]);
      inv[half] = l > 0.0f ? 1.0f / l : 0.0f;
      lse[half] = l > 0.0f ? (m_run[half] + log2f(l)) * cuda::kLn2 : -INFINITY;
    }
    const int last_stage = stage(n_tiles - 1);  // used where n_tiles > 0
    loaded += n_tiles;
    have = next_tile(next);
    // Schedule::lookahead: the next tile's first S product goes out right after this tile's last
    // P V (its Q is in the other buffer, loaded while this tile ran), so the tensor cores run
    // both while the warpgroup normalises and writes this tile's output.
    started = lookahead && have && next.n_tiles > 0 && n_tiles > 0;
    int next_qb = 0;
    if (started) {
      FullBarrier::wait(&bar.v_full[last_stage], ((loaded - 1) >> 1) & 1);
      pv_gemm(last_stage, n_tiles == 1);
      reset_stats(next);
      next_qb = first_product();
      warpgroup_wait<1>();  // this tile's last P V done; the next tile's S may still run
      release(&bar.v_empty[last_stage]);
      write_output(cur, inv, lse);
      warpgroup_wait<0>();
    } else {
      if (n_tiles > 0) {
        FullBarrier::wait(&bar.v_full[last_stage], ((loaded - 1) >> 1) & 1);
        pv_gemm(last_stage, n_tiles == 1);
        warpgroup_wait<0>();
        release(&bar.v_empty[last_stage]);
      }
      write_output(cur, inv, lse);
    }
    cur = next;
    qb = next_qb;
  }
  // The CTA's shared memory must outlive the reads of its last TMA stores.
  if (staged && wg_tid == 0) tma_store_wait<0>();
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

// Launches one configuration (defined in its instantiation file).
template <int kDqk, int kDv>
absl::Status LaunchMhaPrefillSm90(const MhaPrefillParams& p, Schedule schedule, cudaStream_t stream);

template <int kDqk, int kDv>
absl::Status LaunchMhaPrefillSm90Impl(const MhaPrefillParams& p, Schedule schedule, cudaStream_t stream) {
  using Tile = Sm90Tile<kDqk, kDv>;
  // One head: its stride is never stepped; give TMA a valid (non-zero) one.
  const auto head_stride = [](int heads, int64_t stride, int64_t token_stride) {
    return heads > 1 ? stride : token_stride;
  };
  const int q_ends = p.max_seqlen_q * (p.batch + 1), k_ends = p.max_seqlen_k * (p.batch + 1);
  const int query_tiles = (p.max_seqlen_q + Tile::kBlockM - 1) / Tile::kBlockM;
  const int x_extent = schedule.paired ? (query_tiles + 1) / 2 : query_tiles;
  const int64_t items64 = static_cast<int64_t>(x_extent) * p.num_heads * p.batch;
  if (items64 > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("mha_prefill sm90: ", items64, " work items (query tiles x heads x batch) exceed 2^31 - 1"));
  }
  const int items = static_cast<int>(items64);
  const int64_t k_head_stride = head_stride(p.num_kv_heads, p.k_head_stride, p.k_token_stride);
  // K's last kKTail dims: a view of its own over k_rope (one row per token, one "head" whose
  // stride is never stepped) or the same rows of k, kKHead columns in.
  const bool split = p.k_rope != nullptr;
  const auto* k_tail = split ? p.k_rope : static_cast<const Bf16*>(p.k) + Tile::kKHead;
  const int64_t k_tail_stride = split ? p.k_rope_token_stride : p.k_token_stride;
  const int k_tail_heads = split ? 1 : p.num_kv_heads;
  // The staged output needs the room of qk 128's tile and a TMA view of out, which starts
  // max_seqlen_q rows before it (as q's does). Refusal does not ask that of out: where the view
  // cannot be built the call writes directly instead, so the output is never why a call fails.
  const bool out_view = reinterpret_cast<uintptr_t>(p.out) >=
                        static_cast<uintptr_t>(p.max_seqlen_q) * p.out_token_stride * sizeof(Bf16);
  schedule.staged_out = schedule.staged_out && Tile::kStagedOut && out_view;
  // The second Q buffer exists for qk 128 only.
  schedule.lookahead = schedule.lookahead && Tile::kQBuffers > 1;
  const Sm90Args<Tile> args{
      p,
      MakeRowTma<kDqk>(p.q, p.q_token_stride, head_stride(p.num_heads, p.q_head_stride, p.q_token_stride),
                       p.num_heads, p.max_seqlen_q, q_ends, typename Tile::QLayout{}),
      MakeRowTma<Tile::kKHead>(p.k, p.k_token_stride, k_head_stride, p.num_kv_heads, p.max_seqlen_k, k_ends,
                               typename Tile::KHeadLayout{}),
      MakeRowTma<Tile::kKTail>(k_tail, k_tail_stride, split ? k_tail_stride : k_head_stride, k_tail_heads,
                               p.max_seqlen_k, k_ends, typename Tile::KTailLayout{}),
      MakeColTma<kDv>(p.v, p.v_token_stride, head_stride(p.num_kv_heads, p.v_head_stride, p.v_token_stride),
                      p.num_kv_heads, p.max_seqlen_k, k_ends, typename Tile::VLayout{}),
      schedule.staged_out
          ? MakeRowTma<kDv>(p.out, p.out_token_stride, head_stride(p.num_heads, p.out_head_stride, p.out_token_stride),
                            p.num_heads, p.max_seqlen_q, q_ends, typename Tile::OLayout{}, SM90_TMA_STORE{})
          : OTma<Tile>{},
      q_ends,
      k_ends,
      k_tail_heads,
      schedule,
      schedule.lookahead ? 2 : 1,
      x_extent,
      items,
      schedule.persistent && schedule.longest_first && p.batch > 1 && p.batch <= kOrderMaxBatch,
      schedule.persistent && schedule.tickets ? p.work_counter : nullptr};
  using Smem = Sm90Smem<Tile>;
  constexpr int kSmem = sizeof(Smem);
  static_assert(kSmem <= 227 * 1024, "the sm90 mha_prefill tile exceeds Hopper's shared memory");
  // With the static shared memory too (the kernel's __shared__ objects, padded to the dynamic
  // block's 1024-byte alignment): qk 128's 224 KB leave 3 KB, which they fill.
  constexpr size_t kStatic = sizeof(ItemOrder) + sizeof(TicketRing) + sizeof(Sm90Barriers<Tile>);
  static_assert(kSmem + (kStatic + 1023) / 1024 * 1024 <= 227 * 1024,
                "the sm90 mha_prefill tile and its static shared memory exceed a block's 227 KB");
  // Direct stores leave the O tile (the last member) out of the launch's shared memory, so the
  // A/B of staged_out compares epilogues, not L1 sizes as well. (Both Q buffers always count:
  // the A/B of lookahead compares schedules at the same shared-memory size.)
  static_assert(std::is_standard_layout_v<Smem>);
  const int smem = schedule.staged_out ? kSmem : static_cast<int>(offsetof(Smem, out));
  auto kernel = MhaPrefillSm90Kernel<Tile>;
  if (auto err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
      err != cudaSuccess) {
    return cuda::CudaStatus(err, "mha_prefill sm90: raising the shared-memory limit");
  }
  // One CTA an SM holds (smem is over half of it): persistent, one a multiprocessor (or the
  // schedule's fewer).
  const int sms = cuda::CurrentDeviceSmCount();
  const int grid = schedule.persistent ? std::min(items, schedule.ctas > 0 ? std::min(schedule.ctas, sms) : sms) : items;
  kernel<<<grid, Tile::kThreads, smem, stream>>>(args);
  return cuda::LaunchStatus("MhaPrefillSm90Kernel");
}

}  // namespace mlaserve::kernels::mha_sm90
