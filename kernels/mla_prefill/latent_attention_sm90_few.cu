// The Hopper latent-attention kernel for few query rows (latent_attention_sm90.h,
// LaunchLatentAttentionSm90Few): a request with at most 16 rows (row = query token * heads +
// head: 16 heads and one query, 8 heads and two, ...) in one CTA, with the products transposed
// so that the keys and the value dims are the wgmma M side and the query rows the N side:
//
//   S^T = K Q^T     (64 keys x 16 rows, K = 576: the page's 9 load tiles as the A operand,
//                    K-major; Q as the K-major B operand, 16 x 576)
//   O^T = V^T P^T   (512 value dims x 16 rows, K = 64 keys: each of the page's 8 value tiles as
//                    an MN-major A operand, the same bytes; P as the K-major B operand, 16 x 64)
//
// The 64-row kernel (latent_attention_sm90.cu) pads 16 rows to 64 and so does four times the
// tensor work a 16-row request needs, which makes it as compute-bound as memory-bound at 16
// heads. Here the work per page is what the rows need, one consumer warpgroup does all of it,
// and the page bytes are the stream that matters. (An N = 32 variant for 32 rows measured
// slower than the 64-row kernel on the H200, 2026-11-29: 16 heads x 2 queries stay there.)
//
// Warp roles (160 threads): warps 0-3 are the consumer warpgroup (S, softmax, O, output); warp 4
// is the producer, which walks the same pages and keeps a ring of 25 load tiles of 64 x 64 full
// (2.8 pages), each slot with a "full" (TMA transaction) and an "empty" mbarrier. A page's 9
// tiles take 9 consecutive ring positions; the consumer frees all 9 once the value product that
// last reads them has retired. Per page:
//
//   softmax of S_p over the keys, column by column (row max: shuffles over the warp's key rows,
//   then the 4 warps through shared memory), O *= 2^(m - m'), P_p -> shared memory (bf16);
//   issue O += V_p^T P_p^T, then S_{p+1} (each tile after its "full" barrier; its k-steps in 4
//   independent accumulator chains);
//   wait for O_p -> free page p's slots; wait for S_{p+1}.
//
// The producer reads the block table 32 pages at a time (a lane per page) and, where the caller
// says the cache and the block table were complete before the previous kernel started
// (MlaParams::inputs_before_wait, chunks in grid order), it runs without the PDL wait at all:
// only Q comes from the previous kernel, and only the consumers read it. Where only the newest
// rows of each request come from it too (MlaParams::old_rows_before_wait: the decode step's
// rope launch that also absorbs the query), the producer loads the pages before theirs first and
// waits before the first page that holds one. Chunks (grid: row block,
// split, request) and the balanced schedule's segments (grid: row block, part) both run here;
// the output and the partials have the 64-row kernel's layout, so mla_decode's combine is the
// same.
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "cute/tensor.hpp"
#include "cutlass/arch/barrier.h"
#include "kernels/common/cuda_util.cuh"
#include "kernels/common/env_switch.h"
#include "kernels/common/pdl.cuh"
#include "kernels/mla_prefill/latent_attention_sm90.h"
#include "kernels/mla_prefill/latent_cta_work.cuh"
#include "kernels/mla_prefill/latent_sm90_parts.cuh"

namespace mlaserve::kernels::mla_cuda {

namespace {

using namespace cute;  // NOLINT: CuTe's layout algebra reads best unqualified
using sm90::Bf16;
using sm90::kKeys;
using sm90::kKStepsPerTile;
using sm90::kMaxInit;
using sm90::kRank;
using sm90::kTileCols;
using sm90::kTiles;
using sm90::kTileTxBytes;
using sm90::kWidth;
using sm90::TileLayout;
using sm90::TileTma;

constexpr int kConsumers = 128;              // one warpgroup
constexpr int kThreads = kConsumers + 32;    // + the producer warp
constexpr int kProducerWarp = kConsumers / 32;
constexpr int kValueTiles = kRank / kTileCols;  // 8: O^T's M tiles, one load tile each
constexpr int kConsumerBarrier = 1;          // named barrier of the consumer warpgroup
constexpr int kSmemLimit = 227 * 1024;

// A value tile as the (M = 64 value dims, K = 64 keys) A operand of O^T = V^T P^T: MN-major,
// 128-byte swizzle. Element (dim, key) lands on the address of (key, dim) in TileLayout.
using VtLayout = decltype(tile_to_shape(GMMA::Layout_MN_SW128_Atom<Bf16>{}, Shape<Int<kTileCols>, Int<kKeys>>{}));

constexpr int kN = 16;  // query rows per CTA: the N of the transposed products
using QLayout = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Bf16>{}, Shape<Int<kN>, Int<kWidth>>{}));
using PLayout = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Bf16>{}, Shape<Int<kN>, Int<kKeys>>{}));
using MmaS = decltype(make_tiled_mma(SM90_64x16x16_F32BF16BF16_SS<GMMA::Major::K, GMMA::Major::K>{}));
using MmaO = decltype(make_tiled_mma(SM90_64x16x16_F32BF16BF16_SS<GMMA::Major::MN, GMMA::Major::K>{}));
// A thread's accumulator of an m64 x 16 product: element i = v + 2 h + 4 g is M row
// 16 warp + lane / 4 + 8 h, N column 8 g + 2 (lane % 4) + v. Its kCols distinct columns are
// numbered c = v + 2 g; the threads with the same lane % 4 hold the same columns.
constexpr int kAcc = kN / 2;
constexpr int kCols = kN / 4;
// S^T's k-steps go round-robin into this many accumulators (summed after the product): with
// N = 16 a wgmma is short, and a chain of 36 on one accumulator would run at its latency
// rather than the tensor cores' rate.
constexpr int kSChains = 4;
constexpr int kQBytes = kN * kWidth * 2;
constexpr int kPBytes = kN * kKeys * 2;
constexpr int kReserve = 2048;  // barriers and the column reductions
constexpr int kStagePadBytes = 16;  // the chunk epilogue's staged rows (below)
// The ring of load tiles: what shared memory holds besides Q and P (25 tiles, 2.8 pages).
constexpr int kSlots = (kSmemLimit - kQBytes - kPBytes - kReserve) / (kKeys * kTileCols * 2);
static_assert(kSlots >= 2 * kTiles, "the ring holds at least two pages");
static_assert(kN * (kRank * 4 + kStagePadBytes) <= kSlots * kKeys * kTileCols * 2,
              "the chunk epilogue stages the CTA's rows (f32) in the ring");

__device__ __forceinline__ constexpr int ColOf(int i) { return (i & 1) | ((i >> 2) << 1); }
__device__ __forceinline__ constexpr int ElemOf(int c) { return (c & 1) | ((c >> 1) << 2); }

struct FewStorage {
  cute::array_aligned<Bf16, kSlots * kKeys * kTileCols, 1024> ring;
  cute::array_aligned<Bf16, kN * kWidth, 1024> q;
  cute::array_aligned<Bf16, kN * kKeys, 1024> p;  // P of the current page, [row][key]
  float col_max[2][4][kN];  // per warp, by page parity
  float col_sum[4][kN];
  uint64_t full[kSlots];
  uint64_t empty[kSlots];
};

// Where the producer waits for the previous kernel (PDL): before anything; never (it reads only
// what was complete before that kernel started: MlaParams::inputs_before_wait); or before the
// first page that holds one of a request's newest lq rows, the older pages and the block table
// loaded before it (MlaParams::old_rows_before_wait).
enum class ProducerWait { kFirst, kNever, kBeforeNewRows };

struct FewArgs {
  MlaParams p;
  LatentSplit split;
  TileTma tma;
  ProducerWait producer_wait;
  bool staged_epilogue;  // chunks only: the output staged in the ring, then 16-byte stores (below)
};

// The work of the CTA's k-th segment (chunks: the one of its grid position), the same in the
// producer and the consumers. A chunk past the request's keys gets no rows.
struct SegmentWork {
  LatentCtaWork w;
  bool direct = true;
  int64_t part_row0 = 0;
};

__device__ __forceinline__ SegmentWork WorkOf(const MlaParams& p, const LatentSplit& split, bool chunks,
                                              int seg_begin, int k) {
  SegmentWork s;
  const int H = p.num_heads;
  if (chunks) {
    s.w = LatentCtaWork::Of(p, split, kN);
    if (s.w.unread) s.w.r0 = s.w.rows_total;
    s.direct = split.num_splits == 1;
    const int64_t cap = static_cast<int64_t>(p.batch) * split.max_q * H;
    s.part_row0 = static_cast<int64_t>(s.w.split_index) * cap + static_cast<int64_t>(s.w.b) * split.max_q * H;
  } else {
    const LatentSegment seg = split.segments[seg_begin + k];
    s.w = LatentCtaWork::Make(p, seg.request, seg.q_start, seg.q_len, seg.k_len, blockIdx.x * kN,
                              seg.page_begin * kKeys, seg.page_end * kKeys, kN);
    s.direct = seg.slot < 0;
    s.part_row0 = static_cast<int64_t>(seg.slot) * split.max_q * H;
  }
  return s;
}

__global__ void __launch_bounds__(kThreads, 1) LatentFewRowsSm90Kernel(const __grid_constant__ FewArgs args) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  const MlaParams& p = args.p;
  const LatentSplit& split = args.split;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  auto& ss = *reinterpret_cast<FewStorage*>(smem_raw);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  if (tid == 0) {
    for (int s = 0; s < kSlots; ++s) {
      cutlass::arch::ClusterTransactionBarrier::init(&ss.full[s], 1);
      cutlass::arch::ClusterBarrier::init(&ss.empty[s], 1);
    }
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();
  auto slot_ptr = [&](int slot) { return ss.ring.data() + slot * kKeys * kTileCols; };
  const bool chunks = split.segments == nullptr;

  if (warp == kProducerWarp) {
    // The producer: every page of every segment, in order, 9 tiles each into the ring.
    if (lane == 0) cute::prefetch_tma_descriptor(args.tma.get_tma_descriptor());
    if (args.producer_wait == ProducerWait::kFirst) cuda::PdlWaitForPrerequisites();
    bool waited = args.producer_wait != ProducerWait::kBeforeNewRows;  // (done, or not needed)
    const int seg_begin = chunks ? 0 : split.part_segments[blockIdx.y];
    const int n_segs = chunks ? 1 : split.part_segments[blockIdx.y + 1] - seg_begin;
    Tensor pages = args.tma.get_tma_tensor(make_shape(Int<kKeys>{}, Int<kWidth>{}, p.num_pages));
    auto thr = args.tma.get_slice(Int<0>{});
    int g = 0;  // ring position of the next tile
    for (int k = 0; k < n_segs; ++k) {
      const SegmentWork s = WorkOf(p, split, chunks, seg_begin, k);
      if (s.w.empty()) continue;
      const int32_t* table = p.block_table + static_cast<int64_t>(s.w.b) * p.max_pages_per_seq + s.w.kv_begin / kKeys;
      for (int p0 = 0; p0 < s.w.n_tiles; p0 += 32) {
        const int mine = p0 + lane < s.w.n_tiles ? __ldcg(table + p0 + lane) : 0;
        const int count = min(32, s.w.n_tiles - p0);
        for (int j = 0; j < count; ++j) {
          const int page = __shfl_sync(0xffffffffu, mine, j);
          // The first page that holds one of the newest rows (from the kernel just before):
          // wait here (kBeforeNewRows; the pages before it are older, pdl.cuh rule 3).
          if (!waited && s.w.kv_begin + (p0 + j + 1) * kKeys > s.w.first_pos) {
            cuda::PdlWaitForPrerequisites();
            waited = true;
          }
          if (lane == 0) {
#pragma unroll 1
            for (int t = 0; t < kTiles; ++t, ++g) {
              const int slot = g % kSlots;
              cutlass::arch::ClusterBarrier::wait(&ss.empty[slot], ((g / kSlots) & 1) ^ 1);
              cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&ss.full[slot], kTileTxBytes);
              Tensor gT = local_tile(pages(_, _, page), Shape<Int<kKeys>, Int<kTileCols>>{}, make_coord(0, t));
              Tensor sT = make_tensor(make_smem_ptr(slot_ptr(slot)), TileLayout{});
              copy(args.tma.with(ss.full[slot], 0, TMA::CacheHintSm90::EVICT_FIRST), thr.partition_S(gT),
                   thr.partition_D(sT));
            }
          }
        }
      }
    }
    return;
  }

  // The consumers. Q comes from the previous kernel: everything after the wait.
  cuda::PdlWaitForPrerequisites();
  cuda::PdlReleaseDependents();
  const int H = p.num_heads;
  MmaS mma_s;
  MmaO mma_o;
  auto thr_s = mma_s.get_thread_slice(tid);
  auto thr_o = mma_o.get_thread_slice(tid);
  Tensor sQ = make_tensor(make_smem_ptr(ss.q.data()), QLayout{});
  Tensor sP = make_tensor(make_smem_ptr(ss.p.data()), PLayout{});
  Tensor tSrQ = thr_s.partition_fragment_B(sQ);  // (MMA, 1, 36)
  Tensor tOrP = thr_o.partition_fragment_B(sP);  // (MMA, 1, 4)
  using FragS = decltype(partition_fragment_C(mma_s, Shape<Int<kKeys>, Int<kN>>{}));
  FragS s_chain[kSChains];
  FragS& tSrS = s_chain[0];  // the sum of the chains, once the product retired
  Tensor tScS = thr_s.partition_C(make_identity_tensor(Shape<Int<kKeys>, Int<kN>>{}));
  Tensor tOcO = thr_o.partition_C(make_identity_tensor(Shape<Int<kTileCols>, Int<kN>>{}));
  using FragO = decltype(partition_fragment_C(mma_o, Shape<Int<kTileCols>, Int<kN>>{}));
  FragO acc[kValueTiles];
  static_assert(decltype(size(tSrS))::value == kAcc && decltype(size(acc[0]))::value == kAcc);
  mma_o.accumulate_ = GMMA::ScaleOut::One;
  // The N columns (query rows of the CTA) this thread holds, and its key rows of a page.
  int col_row[kCols];
#pragma unroll
  for (int c = 0; c < kCols; ++c) col_row[c] = get<1>(tScS(ElemOf(c)));
  const float scale_log2 = p.softmax_scale * cuda::kLog2e;
  auto consumer_sync = [] { cutlass::arch::NamedBarrier::sync(kConsumers, kConsumerBarrier); };
  // Max over the warp's 16 key rows of a column: the 8 lanes with the same lane % 4.
  auto warp_col_max = [](float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 4));
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 8));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 16));
  };
  auto warp_col_sum = [](float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 4);
    v += __shfl_xor_sync(0xffffffffu, v, 8);
    return v + __shfl_xor_sync(0xffffffffu, v, 16);
  };

  const int seg_begin = chunks ? 0 : split.part_segments[blockIdx.y];
  const int n_segs = chunks ? 1 : split.part_segments[blockIdx.y + 1] - seg_begin;
  int g_page = 0;  // ring position of the current page's first tile
  int parity = 0;  // of col_max, flips every page
  for (int k = 0; k < n_segs; ++k) {
    const SegmentWork s = WorkOf(p, split, chunks, seg_begin, k);
    const LatentCtaWork& w = s.w;
    if (w.empty()) continue;
    const int q_start = w.q_start, rows_total = w.rows_total, r0 = w.r0;
    const int n_pages = w.n_tiles;
    // Q rows r0 .. r0 + 16 (zero past rows_total), 8 threads a row.
    {
      constexpr int kPerRow = kConsumers / kN;
      constexpr int kChunks = kWidth / cuda::kBf16PerChunk;
      const auto* q = static_cast<const Bf16*>(p.q);
      const int r = tid / kPerRow, row = r0 + r;
      const bool valid = row < rows_total;
      const Bf16* src = valid ? q + static_cast<int64_t>(q_start + row / H) * p.q_token_stride +
                                    static_cast<int64_t>(row % H) * p.q_head_stride
                              : q;
#pragma unroll 2
      for (int c = tid % kPerRow; c < kChunks; c += kPerRow) {
        const int col = c * cuda::kBf16PerChunk;
        cuda::CpAsync16(cuda::SmemAddress(&sQ(r, col)), valid ? src + col : src, valid);
      }
      cuda::CpAsyncCommit();
      cuda::CpAsyncWait<0>();
      cutlass::arch::fence_view_async_shared();  // generic-proxy writes -> wgmma's async proxy
      consumer_sync();
    }
    int row_pos[kCols];
#pragma unroll
    for (int c = 0; c < kCols; ++c) row_pos[c] = w.first_pos + min(r0 + col_row[c], rows_total - 1) / H;
    // Keys below this are within the split and every row's causal limit: pages wholly below it
    // need no mask.
    const int unmasked_end = p.causal ? min(w.kv_end, w.first_pos + r0 / H + 1) : w.kv_end;
    float m_run[kCols], l_part[kCols];
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      m_run[c] = kMaxInit;
      l_part[c] = 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kValueTiles; ++j) clear(acc[j]);

    // S^T of the page whose tiles start at ring position g0: each tile's products issued as
    // soon as it landed (they run while the next tiles land), k-step i into chain i % kSChains,
    // one commit group for the page. sum_chains adds the chains into tSrS once it retired.
    auto issue_s = [&](int g0) {
#pragma unroll
      for (int c = 0; c < kSChains; ++c) warpgroup_fence_operand(s_chain[c]);
#pragma unroll
      for (int t = 0; t < kTiles; ++t) {
        const int g = g0 + t, slot = g % kSlots;
        cutlass::arch::ClusterTransactionBarrier::wait(&ss.full[slot], (g / kSlots) & 1);
        Tensor tSrK = thr_s.partition_fragment_A(make_tensor(make_smem_ptr(slot_ptr(slot)), TileLayout{}));
        warpgroup_arrive();
#pragma unroll
        for (int kk = 0; kk < kKStepsPerTile; ++kk) {
          const int step = t * kKStepsPerTile + kk;
          mma_s.accumulate_ = step < kSChains ? GMMA::ScaleOut::Zero : GMMA::ScaleOut::One;
          cute::gemm(mma_s, tSrK(_, _, kk), tSrQ(_, _, step), s_chain[step % kSChains]);
        }
      }
      warpgroup_commit_batch();
#pragma unroll
      for (int c = 0; c < kSChains; ++c) warpgroup_fence_operand(s_chain[c]);
    };
    auto sum_chains = [&] {
#pragma unroll
      for (int c = 1; c < kSChains; ++c) {
#pragma unroll
        for (int i = 0; i < kAcc; ++i) tSrS(i) += s_chain[c](i);
      }
    };
    // O^T += V^T P^T over the page's 8 value tiles (k-step outer, so that consecutive products
    // go to different accumulators): one commit group.
    auto issue_o = [&](int g0) {
#pragma unroll
      for (int j = 0; j < kValueTiles; ++j) warpgroup_fence_operand(acc[j]);
      warpgroup_arrive();
#pragma unroll
      for (int kk = 0; kk < kKeys / 16; ++kk) {
#pragma unroll
        for (int j = 0; j < kValueTiles; ++j) {
          Tensor tOrV =
              thr_o.partition_fragment_A(make_tensor(make_smem_ptr(slot_ptr((g0 + j) % kSlots)), VtLayout{}));
          cute::gemm(mma_o, tOrV(_, _, kk), tOrP(_, _, kk), acc[j]);
        }
      }
      warpgroup_commit_batch();
#pragma unroll
      for (int j = 0; j < kValueTiles; ++j) warpgroup_fence_operand(acc[j]);
    };
    auto free_page = [&](int g0) {
      if (tid == 0) {
#pragma unroll 1
        for (int t = 0; t < kTiles; ++t) cutlass::arch::ClusterBarrier::arrive(&ss.empty[(g0 + t) % kSlots]);
      }
    };

    if (n_pages > 0) {
      issue_s(g_page);
      warpgroup_wait<0>();
    }
    for (int pg = 0; pg < n_pages; ++pg, g_page += kTiles, parity ^= 1) {
      sum_chains();
      const int key0 = w.kv_begin + pg * kKeys;
      // Mask (keys past the split or a row's causal limit), then the columns' maxima.
      if (key0 + kKeys > unmasked_end) {
#pragma unroll
        for (int i = 0; i < kAcc; ++i) {
          const int key = key0 + get<0>(tScS(i));
          if (key >= w.kv_end || (p.causal && key > row_pos[ColOf(i)])) tSrS(i) = -INFINITY;
        }
      }
      float mx[kCols];
#pragma unroll
      for (int c = 0; c < kCols; ++c) mx[c] = -INFINITY;
#pragma unroll
      for (int i = 0; i < kAcc; ++i) mx[ColOf(i)] = fmaxf(mx[ColOf(i)], tSrS(i));
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        mx[c] = warp_col_max(mx[c]);
        if (lane < 4) ss.col_max[parity][warp][col_row[c]] = mx[c];
      }
      consumer_sync();
      float f[kCols], m_new[kCols];
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        const float* cm = ss.col_max[parity][0];
        const float m = fmaxf(fmaxf(cm[col_row[c]], cm[kN + col_row[c]]), fmaxf(cm[2 * kN + col_row[c]], cm[3 * kN + col_row[c]]));
        m_new[c] = fmaxf(m_run[c], m * scale_log2);
        f[c] = cuda::FastExp2(m_run[c] - m_new[c]);
        m_run[c] = m_new[c];
        l_part[c] *= f[c];
      }
      // P = 2^(S scale - m'), into shared memory as [row][key]; O rescaled by f.
#pragma unroll
      for (int i = 0; i < kAcc; ++i) {
        const float e = cuda::FastExp2(fmaf(tSrS(i), scale_log2, -m_new[ColOf(i)]));
        l_part[ColOf(i)] += e;
        sP(get<1>(tScS(i)), get<0>(tScS(i))) = static_cast<Bf16>(e);
      }
#pragma unroll
      for (int j = 0; j < kValueTiles; ++j) {
#pragma unroll
        for (int i = 0; i < kAcc; ++i) acc[j](i) *= f[ColOf(i)];
      }
      // A partial last page: keys past kv_end may hold anything (NaN included); zero their value
      // columns so that P = 0 times V stays 0.
      const int valid_keys = w.kv_end - key0;
      if (valid_keys < kKeys) {
        constexpr int kChunksPerRow = kTileCols / cuda::kBf16PerChunk;
        for (int i = tid; i < (kKeys - valid_keys) * kChunksPerRow * kValueTiles; i += kConsumers) {
          const int tile = i / ((kKeys - valid_keys) * kChunksPerRow);
          const int rest = i % ((kKeys - valid_keys) * kChunksPerRow);
          Tensor sT = make_tensor(make_smem_ptr(slot_ptr((g_page + tile) % kSlots)), TileLayout{});
          *reinterpret_cast<uint4*>(&sT(valid_keys + rest / kChunksPerRow, (rest % kChunksPerRow) * cuda::kBf16PerChunk)) =
              make_uint4(0, 0, 0, 0);
        }
      }
      cutlass::arch::fence_view_async_shared();  // P and the zeroed values -> wgmma's async proxy
      consumer_sync();
      issue_o(g_page);
      if (pg + 1 < n_pages) {
        issue_s(g_page + kTiles);
        warpgroup_wait<1>();  // O_p retired: page p's slots are free
        free_page(g_page);
        warpgroup_wait<0>();
      } else {
        warpgroup_wait<0>();
        free_page(g_page);
      }
    }

    // Column sums over the keys (the thread's partials, then the warp's, then the 4 warps').
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      const float l = warp_col_sum(l_part[c]);
      if (lane < 4) ss.col_sum[warp][col_row[c]] = l;
    }
    consumer_sync();
    float inv[kCols], lse[kCols];
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      const int n = col_row[c];
      const float l = ss.col_sum[0][n] + ss.col_sum[1][n] + ss.col_sum[2][n] + ss.col_sum[3][n];
      inv[c] = l > 0.0f ? 1.0f / l : 0.0f;
      lse[c] = l > 0.0f ? (m_run[c] + log2f(l)) * cuda::kLn2 : -INFINITY;
    }
    // O (normalised): element i of tile j is value dim 64 j + get<0>(tOcO(i)) of CTA row
    // get<1>(tOcO(i)). The 8 lanes of a column write 8 consecutive dims.
    const int d0 = get<0>(tOcO(0));
    // store(dim, value) for each of the thread's normalised values of column c (16 of its row).
    auto for_each_value = [&](int c, auto&& store) {
#pragma unroll
      for (int j = 0; j < kValueTiles; ++j) {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          store(j * kTileCols + d0 + 8 * hh, acc[j](ElemOf(c) + 2 * hh) * inv[c]);
        }
      }
    };
    const bool staged = args.staged_epilogue;
    if (staged) {
      // A chunk CTA's rows are consecutive rows of out (q_start x H + row) and of the partials
      // (part_row0 + row). They are staged in the ring, which is free: every page is consumed, and
      // a chunk CTA loads nothing more. Then each thread stores 16 bytes at a time, coalesced.
      // Stored straight from the accumulators instead (64 stores of 2 or 4 bytes a thread, each
      // with its own address), the epilogue took ~4.4 us of a batch-1 decode CTA's ~9 us after
      // its PDL wait (H200, 2026-11-30). A row is padded by 16 bytes: the 4 rows a store
      // instruction writes (2 apart) then fall in different banks.
      auto* stage = reinterpret_cast<unsigned char*>(ss.ring.data());
      const int elem = s.direct ? 2 : 4;
      const int stage_row = kRank * elem + kStagePadBytes;
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        unsigned char* srow = stage + col_row[c] * stage_row;
        for_each_value(c, [&](int dim, float v) {
          if (s.direct) {
            *reinterpret_cast<Bf16*>(srow + dim * 2) = static_cast<Bf16>(v);
          } else {
            *reinterpret_cast<float*>(srow + dim * 4) = v;
          }
        });
      }
      consumer_sync();
      const int n_rows = min(kN, rows_total - r0);
      const int row_chunks = kRank * elem / cuda::kChunkBytes;
      auto* dst = s.direct ? reinterpret_cast<unsigned char*>(static_cast<Bf16*>(p.out) +
                                                             (static_cast<int64_t>(q_start) * H + r0) * kRank)
                           : reinterpret_cast<unsigned char*>(split.part_out + (s.part_row0 + r0) * kRank);
      for (int idx = tid; idx < n_rows * row_chunks; idx += kConsumers) {
        const int r = idx / row_chunks, k = idx % row_chunks;
        *reinterpret_cast<uint4*>(dst + static_cast<int64_t>(r) * kRank * elem + k * cuda::kChunkBytes) =
            *reinterpret_cast<const uint4*>(stage + r * stage_row + k * cuda::kChunkBytes);
      }
    }
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      const int row = r0 + col_row[c];
      if (row >= rows_total) continue;
      const int token = row / H, head = row % H;
      const int64_t out_row = static_cast<int64_t>(q_start + token) * H + head;
      const int64_t part_row = s.part_row0 + static_cast<int64_t>(token) * H + head;
      if (!staged) {  // the balanced schedule's segments (the ring may hold the next one's pages)
        for_each_value(c, [&](int dim, float v) {
          if (s.direct) {
            static_cast<Bf16*>(p.out)[out_row * p.kv_lora_rank + dim] = static_cast<Bf16>(v);
          } else {
            split.part_out[part_row * p.kv_lora_rank + dim] = v;
          }
        });
      }
      if (warp == 0 && lane < 4) {
        if (s.direct) {
          if (p.lse != nullptr) p.lse[out_row] = lse[c];
        } else {
          split.part_lse[part_row] = lse[c];
        }
      }
    }
    consumer_sync();  // col_sum and Q are the next segment's
  }
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

absl::Status LaunchFew(const MlaParams& p, const LatentSplit& split, int64_t max_rows_per_request,
                       cudaStream_t stream) {
  const bool chunks = split.segments == nullptr;
  // The CTAs' work (chunks in grid order, or an order built before the kernel just before) may
  // be read before the wait. MLASERVE_MLA_EARLY_LOADS=0: the producer waits first anyway;
  // MLASERVE_MLA_OLD_PAGES_EARLY=0 (read per call; A/B timing): so with old_rows_before_wait alone.
  static const bool early_loads_off = EnvSwitchedOff("MLASERVE_MLA_EARLY_LOADS");
  const bool work_early = chunks && (split.chunk_order == nullptr || split.order_before_wait) && !early_loads_off;
  ProducerWait wait = ProducerWait::kFirst;
  if (work_early && p.inputs_before_wait) {
    wait = ProducerWait::kNever;
  } else if (work_early && p.old_rows_before_wait && !EnvSwitchedOff("MLASERVE_MLA_OLD_PAGES_EARLY")) {
    wait = ProducerWait::kBeforeNewRows;
  }
  // MLASERVE_MLA_STAGED_EPILOGUE=0 (read per call; A/B timing): chunk CTAs store from the
  // accumulators as the balanced schedule's do.
  const bool staged = chunks && !EnvSwitchedOff("MLASERVE_MLA_STAGED_EPILOGUE");
  const FewArgs args{p, split, sm90::MakeTileTma(static_cast<const Bf16*>(p.kv_cache), p.num_pages), wait, staged};
  constexpr int kSmem = sizeof(FewStorage);
  static_assert(kSmem <= kSmemLimit, "the few-rows latent kernel's shared memory exceeds Hopper's limit");
  auto kernel = LatentFewRowsSm90Kernel;
  if (auto err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
      err != cudaSuccess) {
    return cuda::CudaStatus(err, "latent attention sm90 (few rows): raising the shared-memory limit");
  }
  const unsigned row_blocks = static_cast<unsigned>((max_rows_per_request + kN - 1) / kN);
  cuda::LaunchShape shape;
  shape.grid = chunks ? dim3(row_blocks, static_cast<unsigned>(split.num_splits), static_cast<unsigned>(p.batch))
                      : dim3(row_blocks, static_cast<unsigned>(split.num_parts));
  shape.block = dim3(kThreads);
  shape.smem_bytes = kSmem;
  shape.stream = stream;
  // Chunk CTAs launched as clusters of two along the splits where the count is even. The kernel
  // shares nothing between them; the cluster launch only changes where and when the CTAs start.
  // Measured on the H200 (docs/BENCHMARKS.md, thirty-ninth session): decode batch 1 faster in 5 of
  // 6 rounds over two machines (mean -12 us a step, -0.6%), batch 4 even; clusters of 4, 8 or 16
  // even or slower.
  // MLASERVE_MLA_FEW_PAIRS=0 (read per call; A/B timing): no clusters.
  if (chunks && split.num_splits % 2 == 0 && !EnvSwitchedOff("MLASERVE_MLA_FEW_PAIRS")) shape.cluster = dim3(1, 2, 1);
  return cuda::LaunchPdl("LatentFewRowsSm90Kernel", shape, kernel, args);
}

}  // namespace

bool LatentSm90FewRowsTakes(const MlaParams& p, int64_t max_rows_per_request) {
  return p.kernel != LatentKernel::kWgmma64 && max_rows_per_request <= kLatentFewRowsMax &&
         !EnvSwitchedOff("MLASERVE_MLA_FEW_ROWS");  // read per call: the benches flip it
}

absl::Status LaunchLatentAttentionSm90Few(const MlaParams& p, const LatentSplit& split,
                                          int64_t max_rows_per_request, cudaStream_t stream) {
  if (max_rows_per_request <= 0 || p.batch == 0) return absl::OkStatus();
  return LaunchFew(p, split, max_rows_per_request, stream);
}

}  // namespace mlaserve::kernels::mla_cuda
