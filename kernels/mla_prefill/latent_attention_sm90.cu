// The Hopper latent-attention kernel (latent_attention_sm90.h): TMA page loads, wgmma, and two
// warpgroups that take turns ("seesaw") so that one's softmax runs under the other's products.
// DeepSeek's widths only (kv_lora_rank 512, rope 64); LaunchLatentAttention falls back to the
// mma.sync kernel (latent_attention_kernel.cuh) for anything else.
//
// A CTA owns 64 query rows (row = query token * num_heads + head, as in the mma.sync kernel) of
// one request and one KV split, and walks the split two cache pages (2 x 64 keys x 576) at a
// time: page a = 2i in buffer 0, page b = 2i + 1 in buffer 1. Warpgroup 0 owns page a's scores
// and the left half of O (latent dims 0..255), warpgroup 1 page b's scores and the right half:
//
//   wg 0: S_a = Q K_a^T (64 x 64 x 576)       |  wg 1: S_b = Q K_b^T
//   wg 0: softmax of S_a against the running row max m -> m', scale0 = 2^(m - m')
//         O_L = O_L * scale0 + P_a V_a[:, L]   (P_a from registers)
//                                            |  wg 1: softmax of S_b against m' -> m'',
//                                            |        scale1 = 2^(m' - m'')
//                                            |        O_R = O_R * scale0 * scale1 + P_b V_b[:, R]
//   wg 0: P_a * scale1 -> shared (for wg 1)  |  wg 1: P_b -> shared (for wg 0)
//   wg 0: O_L = O_L * scale1 + P_b V_b[:, L] |  wg 1: O_R += P_a V_a[:, R]
//   wg 0: S_{a+2}                            |  wg 1: S_{b+2}
//
// so each warpgroup's score product (36 k-steps of m64n64k16) and softmax overlap the other's
// value products; only the row max, the rescale factors and P pass between them (shared memory,
// mbarrier hand-offs).
//
// Loads: a page is 9 column tiles of 64 x 64 (128-byte swizzle), each with its own transaction
// barrier, so a score product starts on the first tiles of a page while the rest land (in the
// chunk kernel the warpgroup that computes a tile's scores arrives on its barrier with the tile's
// bytes as it waits, and the load's issuer only issues it: LoadTiles). There is no producer
// warp: the warpgroup that last reads a part of a buffer issues its next load, by one thread,
// once its products on it retire: tiles 0..3 (value half L) of both buffers by warpgroup 0 (of
// buffer 0 once warpgroup 1's max is in, see the loop), tiles 4..8 (half R and rope) by
// warpgroup 1. P_a is staged in buffer 0's rope tile (free once S_a is computed, reloaded only
// after warpgroup 1's P_a V_a[:, R] retires), P_b in its own 8 KiB. Shared memory: Q 72 KiB +
// 2 pages 144 KiB + P_b 8 KiB.
//
// Q (64 x 576) stays in shared memory for the whole split; a page is read from global memory
// once per CTA and serves as K (K-major operand) and V (the same bytes as an MN-major operand:
// both views of the 128-byte-swizzled [64 columns] blocks are the same addresses).
//
// With the balanced schedule a CTA walks several segments (pieces of requests); their records
// come by bulk copy one ahead, and during a segment's last page pair the next one's Q rows load
// into what that pair has finished with. A segment's output (normalised bf16 rows, or partials:
// bf16 where split.part_bf16, else f32) is staged in the two page buffers and stored a row per bulk copy (FlashMLA's
// epilogue), after which the next segment's first two pages load there; storing from the
// accumulators instead (with those pages loaded during the last pair) kept the warps issuing
// 64 scattered 8-byte stores each (MLASERVE_MLA_BULK_OUT=0; docs/kernels.md). At batch 1-8 a CTA
// runs its code about once, so the kernel is kept small (no per-element work in the epilogue;
// docs/kernels.md), but for a page's tile loads (LoadTiles).
#include "kernels/mla_prefill/latent_attention_sm90.h"

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "cute/tensor.hpp"
#include "cutlass/arch/barrier.h"
#include "kernels/common/cuda_util.cuh"
#include "kernels/common/device_arch.h"
#include "kernels/common/env_switch.h"
#include "kernels/common/pdl.cuh"
#include "kernels/mla_prefill/latent_cta_work.cuh"
#include "kernels/mla_prefill/latent_segment_trace.h"
#include "kernels/mla_prefill/latent_sm90_parts.cuh"

namespace mlaserve::kernels::mla_cuda {

namespace {

using namespace cute;  // NOLINT: CuTe's layout algebra reads best unqualified
using namespace sm90;  // NOLINT: the kernel's own pieces (latent_sm90_parts.cuh)

// How far (log2 units of the scaled scores) a page's row maximum may exceed the row's reference
// maximum before the reference moves and O is rescaled (the kernel's new_max).
constexpr float kLazyRescaleLog2 = 8.0f;

// The kernel's arguments. A segment-trace build (latent_segment_trace.h) adds the trace buffer,
// here rather than in Sm90Args, which latent_attention_sm90_few.cu sees without the define.
#if MLASERVE_MLA_SEGMENT_TRACE
struct KernelArgs : Sm90Args {
  uint64_t* trace = nullptr;  // [grid CTAs, segment_trace::kWords], or null: no trace
};
__device__ __forceinline__ uint64_t TraceNow() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// Thread `who` writes the time (STAMP) or a value (PUT) into word `word` of the CTA's trace row.
#define LATENT_TRACE_STAMP(who, word)                                \
  do {                                                               \
    if ((who) && trace_row != nullptr) trace_row[(word)] = TraceNow(); \
  } while (0)
#define LATENT_TRACE_PUT(who, word, value)                              \
  do {                                                                  \
    if ((who) && trace_row != nullptr) trace_row[(word)] = (value);     \
  } while (0)
#else
using KernelArgs = Sm90Args;
// The default build: no tokens at all, so its kernels are the same code.
#define LATENT_TRACE_STAMP(who, word) \
  do {                                \
  } while (0)
#define LATENT_TRACE_PUT(who, word, value) \
  do {                                     \
  } while (0)
#endif

// A chunk CTA's work (from its grid position or split.chunk_order) and, in thread 0, the cache
// ids of its first two pages, which do not depend on the request's lengths: read alongside (not
// after) those, within the block table's row. A chunk past the request's keys gets no rows.
__device__ __forceinline__ LatentCtaWork EarlyChunkWork(const MlaParams& p, const LatentSplit& split,
                                                        int (&first_page)[2]) {
  const LatentCtaWork::Chunk chunk = LatentCtaWork::ChunkOf(split);
  if (threadIdx.x == 0) {
    const int chunk_tokens = LatentCtaWork::ChunkTokens(split);
    const int page0 = chunk_tokens > 0 ? chunk.split_index * (chunk_tokens / kPageSize) : 0;
    const int32_t* row = p.block_table + static_cast<int64_t>(chunk.request) * p.max_pages_per_seq;
#pragma unroll
    for (int j = 0; j < 2; ++j) first_page[j] = page0 + j < p.max_pages_per_seq ? row[page0 + j] : -1;
  }
  LatentCtaWork w = LatentCtaWork::Of(p, split, kRows, chunk);
  if (w.unread) w.r0 = w.rows_total;  // past the request's keys: nothing to write
  return w;
}

// kSegments: the balanced schedule (a CTA walks its part's segments, the next one's loads issued
// during the current one); else chunks (one segment per CTA, from its grid position). Two
// instantiations so that the chunk kernel (mla_prefill, most of mla_decode) carries none of the
// segment code: the kernel is at the register limit, and code size matters at small batch.
// kNamed: the warpgroups' signals on named barriers (the default) or on mbarriers, which
// compute-sanitizer's racecheck follows (MLASERVE_MLA_NAMED_SIGNALS=0).
// kStoreMatrix: P goes to shared memory by stmatrix (store_p below), for one query token a request.
template <bool kSegments, bool kNamed, bool kStoreMatrix>
__global__ void __launch_bounds__(kThreads, 1) LatentAttentionSm90Kernel(const __grid_constant__ KernelArgs args) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#if MLASERVE_MLA_SEGMENT_TRACE
  namespace trace = segment_trace;
  uint64_t* const trace_row =
      args.trace == nullptr
          ? nullptr
          : args.trace + (blockIdx.x + static_cast<int64_t>(gridDim.x) * (blockIdx.y + gridDim.y * blockIdx.z)) *
                             trace::kWords;
  LATENT_TRACE_STAMP(threadIdx.x == 0, trace::kEntry);
#endif
  const MlaParams& p = args.p;
  const LatentSplit& split = args.split;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  auto& ss = *reinterpret_cast<SharedStorage*>(smem_raw);
  const int H = p.num_heads;
  const int tid = threadIdx.x, wg_tid = tid % 128;
  if (tid == 0) {
    for (int s = 0; s < 2; ++s) {
      for (int t = 0; t < kTiles; ++t) cutlass::arch::ClusterTransactionBarrier::init(&ss.full[s][t], 1);
    }
    for (int i = 0; i < kSignals; ++i) cutlass::arch::ClusterBarrier::init(&ss.signal[i], 128);
    cutlass::arch::ClusterBarrier::init(&ss.cta_sync, kThreads);
    for (int i = 0; i < 2; ++i) cutlass::arch::ClusterTransactionBarrier::init(&ss.seg_full[i], 1);
    cutlass::arch::fence_barrier_init();
    cute::prefetch_tma_descriptor(args.tma.get_tma_descriptor());
  }
  // The barriers' initialisation is seen by the CTA after its first barrier: here with mbarrier
  // signals (whose CTA barrier is one of them); else the first sync_cta in the body (thread 0's
  // early loads use no barrier other threads wait on before then).
  if constexpr (!kNamed) __syncthreads();
  // With chunks in grid order and p.inputs_before_wait (the block table, the lengths and the
  // cache pages were complete before the kernel just before this one started: pdl.cuh, rule 3),
  // the CTA's work and its first two pages' loads go before the PDL wait, so the pages are in
  // flight (or landed) while the previous kernel -- the one that writes Q -- finishes.
  constexpr bool chunks = !kSegments;
  // Who expects a page tile's bytes (LoadTiles): its consumer in the chunk kernel, its loader in
  // the segment kernel.
  constexpr bool kConsumerExpects = chunks;
  auto load_tiles = [&](int stage, int page, int first, int last) __attribute__((always_inline)) {
    LoadTiles<kConsumerExpects>(args.tma, ss, p.num_pages, stage, page, first, last);
  };
  const bool early =
      chunks && p.inputs_before_wait && (args.split.chunk_order == nullptr || args.split.order_before_wait);
  LatentCtaWork early_work;
  int early_pages[2] = {-1, -1};
  if (early) {
    early_work = EarlyChunkWork(p, split, early_pages);
    if (tid == 0 && !early_work.empty()) {
      for (int j = 0; j < 2 && j < early_work.n_tiles; ++j) {
        load_tiles(j, early_pages[j], 0, kTiles);
      }
    }
  }
  // Programmatic dependent launch (kernels/common/pdl.cuh): the setup above overlaps the previous
  // kernel's tail; global memory only after it completed (but for the early loads above).
  // Letting the next kernel in right after the wait lets mla_decode's combine be scheduled on the
  // SMs this grid leaves free (and that kernel may read, before its own wait, what the kernels
  // before this one wrote).
  cuda::PdlWaitForPrerequisites();
  LATENT_TRACE_STAMP(tid == 0, trace::kAfterWait);
  if (!args.release_late) cuda::PdlReleaseDependents();

  // Each warpgroup runs its own instantiation of the rest, its index a constant: its buffers,
  // value half and P tiles sit at fixed addresses, and each branch on the index is compiled out.
  // One body for both (the index a register) held ~10 more registers across the page loop and
  // spilled 64-100 bytes; this spills 0 (segments) to 20 (chunks), for ~30% more code. On the
  // H200 the 128-head rows took 2.3-4% less time (2026-12-01).
  auto run = [&](auto wg_c) __attribute__((always_inline)) {
    constexpr int wg = decltype(wg_c)::value;
    Tensor sQ = make_tensor(make_smem_ptr(ss.q.data()), QkLayout{});
    MmaS mma_s;
    MmaPvLocal mma_pl;
    MmaPvRemote mma_pr;
    auto thr_s = mma_s.get_thread_slice(wg_tid);
    auto thr_pl = mma_pl.get_thread_slice(wg_tid);
    auto thr_pr = mma_pr.get_thread_slice(wg_tid);
    // This warpgroup's page of each pair lives in buffer `wg`; its value half is `wg` too.
    Tensor sK = make_tensor(make_smem_ptr(ss.page[wg].data()), QkLayout{});
    Tensor tSrQ = thr_s.partition_fragment_A(sQ);
    Tensor tSrK = thr_s.partition_fragment_B(sK);
    Tensor tSrS = partition_fragment_C(mma_s, Shape<Int<kRows>, Int<kKeys>>{});
    Tensor tScS = thr_s.partition_C(make_identity_tensor(Shape<Int<kRows>, Int<kKeys>>{}));
    Tensor tOrO = partition_fragment_C(mma_pl, Shape<Int<kRows>, Int<kHalf>>{});
    Tensor tOcO = thr_pl.partition_C(make_identity_tensor(Shape<Int<kRows>, Int<kHalf>>{}));
    Tensor tOrP = make_tensor<Bf16>(PRegLayout{});
    static_assert(decltype(size(tOrP))::value == decltype(size(tSrS))::value);
    // The value half of each buffer this warpgroup multiplies into its O.
    auto v_half = [&](int stage) {
      Tensor sV = make_tensor(make_smem_ptr(ss.page[stage].data()), VLayout{});
      return local_tile(sV, Shape<Int<kHalf>, Int<kKeys>>{}, make_coord(wg, 0));
    };
    Tensor tOrVmine = thr_pl.partition_fragment_B(v_half(wg));
    Tensor tOrVother = thr_pr.partition_fragment_B(v_half(1 - wg));
    // P of the other warpgroup's page, in shared memory: P_a in buffer 0's rope tile, P_b in p_b.
    Tensor sPa = make_tensor(make_smem_ptr(PageTile(ss, 0, kRopeTile)), TileLayout{});
    Tensor sPb = make_tensor(make_smem_ptr(ss.p_b.data()), TileLayout{});
    Tensor sPmine = wg == 0 ? sPa : sPb;
    Tensor tOrPother = thr_pr.partition_fragment_A(wg == 0 ? sPb : sPa);
    // This thread's two rows (wgmma accumulators: row = 16 * warp + lane / 4 + 8 * half).
    const int my_row[2] = {get<0>(tScS(0)), get<0>(tScS(2))};
    const float scale_log2 = p.softmax_scale * cuda::kLog2e;
    const bool issuer = wg_tid == 0;
    // Every thread of the warpgroup arrives (an elected lane per warp after __syncwarp measured
    // the same on the H100, and racecheck does not follow that hand-off).
    // kNamed: the hand-offs on hardware named barriers 1-4 (bar.arrive by the sender's 128 threads,
    // bar.sync by the receiver's; the phase is the barrier's own), else on the mbarriers ss.signal
    // (latent_sm90_parts.cuh, Signal).
    auto signal = [&](Signal s) {
      if constexpr (kNamed) {
        NamedArrive(1 + static_cast<int>(s));
      } else {
        cutlass::arch::ClusterBarrier::arrive(&ss.signal[s]);
      }
    };
    auto await = [&](Signal s, int phase) {
      if constexpr (kNamed) {
        NamedSync(1 + static_cast<int>(s));
      } else {
        cutlass::arch::ClusterBarrier::wait(&ss.signal[s], phase);
      }
    };
    Phases ph;
    // The CTA's barrier. The two warpgroups reach it from their own instantiations of this body,
    // so from different instructions, where __syncthreads (bar.sync 0, the .aligned form) is to be
    // reached by the whole CTA at one instruction (undefined otherwise; compute-sanitizer's
    // synccheck reports it). kNamed: a split pair of named barriers, as the signals are: each
    // warpgroup arrives on its own (kCtaBarrier + wg) and waits on the other's, which completes
    // once the other warpgroup has arrived. The pair alternates with a second one, so that a
    // warpgroup that runs ahead to the next barrier cannot arrive twice on a barrier the other has
    // not yet waited on. Else an mbarrier of all 256 threads, which racecheck follows. The
    // mbarrier (and barrier.cta.sync without .aligned alike) made ptxas spill 140-160 bytes in the
    // segment kernel and cost it 3-4% (H200, 2026-12-01).
    uint32_t cta_phase = 0;
    auto sync_cta = [&] {
      if constexpr (kNamed) {
        const int pair_id = kCtaBarrier + 2 * static_cast<int>(cta_phase);
        NamedArrive(pair_id + wg);
        NamedSync(pair_id + 1 - wg);
      } else {
        cutlass::arch::ClusterBarrier::arrive(&ss.cta_sync);
        cutlass::arch::ClusterBarrier::wait(&ss.cta_sync, cta_phase);
      }
      cta_phase ^= 1;
    };

    // This CTA's segments: with chunks, the one (row block, KV chunk, request) of its grid
    // position; with the balanced schedule, part blockIdx.y's segments for row block blockIdx.x,
    // whose records come by bulk copy one segment ahead.
    const int seg_begin = chunks ? 0 : split.part_segments[blockIdx.y];
    const int n_segs = chunks ? 1 : split.part_segments[blockIdx.y + 1] - seg_begin;
    const bool prefetch_next = !chunks && split.prefetch_next;
    auto fetch_record = [&](int k) {  // one thread
      uint64_t* bar = &ss.seg_full[k & 1];
      cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(bar, sizeof(LatentSegment));
      SM90_BULK_COPY_G2S::copy(split.segments + seg_begin + k, bar, &ss.seg[k & 1], sizeof(LatentSegment));
    };
    auto record = [&](int k) -> const LatentSegment& {
      cutlass::arch::ClusterTransactionBarrier::wait(&ss.seg_full[k & 1], (k >> 1) & 1);
      return ss.seg[k & 1];
    };
    auto record_work = [&](const LatentSegment& seg) {
      return LatentCtaWork::Make(p, seg.request, seg.q_start, seg.q_len, seg.k_len, blockIdx.x * kRows,
                                 seg.page_begin * kKeys, seg.page_end * kKeys, kRows);
    };
    if constexpr (kNamed) sync_cta();  // barrier init (above)
    LATENT_TRACE_PUT(tid == 0, trace::kSegmentCount, static_cast<uint64_t>(n_segs));
#if MLASERVE_MLA_SEGMENT_TRACE
    uint32_t sm_id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm_id));
    LATENT_TRACE_PUT(tid == 0, trace::kSmId, sm_id);
#endif
    if (!chunks && tid == 0 && n_segs > 0) fetch_record(0);
    // The current segment's first two pages and its Q were issued during the previous segment's
    // last page pair (balanced schedule; see the loop).
    // With the staged output (args.staged_out) only its Q: its pages load after this segment's
    // output has left the page buffers.
    const bool staged_out = !chunks && args.staged_out != 0;
    bool issued_pages = false, issued_q = false;
    for (int k = 0; k < n_segs; ++k) {
#if MLASERVE_MLA_SEGMENT_TRACE
      // This segment's trace words (k < kMaxSegments), by warpgroup 0's or this warpgroup's first thread.
      const bool traced0 = tid == 0 && k < trace::kMaxSegments, traced = issuer && k < trace::kMaxSegments;
#endif
      LATENT_TRACE_STAMP(traced0, trace::SegmentWordAt(k, trace::kStart));
      // Rows [w.r0, w.r0 + 64) of request w.b over its keys [w.kv_begin, w.kv_end). Writes the
      // normalised output and LSE (direct) or, for a piece of a request that other segments
      // share, the partial output (bf16 where split.part_bf16, else f32) and the f32 LSE at
      // part_out / part_lse row part_row0 + token * H + head.
      LatentCtaWork w;
      bool direct;
      int64_t part_row0;
      int first_page[2];
      if constexpr (chunks) {
        if (early) {
          w = early_work;
          first_page[0] = early_pages[0];
          first_page[1] = early_pages[1];
        } else {
          w = EarlyChunkWork(p, split, first_page);  // the same, after the wait
        }
        // Without a split, or (single_chunk_direct) where the request's keys fit its first chunk:
        // the output itself (the combine leaves such a request's rows).
        direct = split.num_splits == 1 || (split.single_chunk_direct && w.chunks_with_keys == 1);
        const int64_t cap = static_cast<int64_t>(p.batch) * split.max_q * H;
        part_row0 = static_cast<int64_t>(w.split_index) * cap + static_cast<int64_t>(w.b) * split.max_q * H;
      } else {
        const LatentSegment& seg = record(k);
        w = record_work(seg);
        direct = seg.slot < 0;
        part_row0 = static_cast<int64_t>(seg.slot) * split.max_q * H;
        first_page[0] = seg.first_pages[0];
        first_page[1] = seg.first_pages[1];
        // Record k + 1 replaces record k - 1, which every thread has read: each segment ends
        // with sync_cta (an empty one too, below).
        if (tid == 0 && k + 1 < n_segs) fetch_record(k + 1);
      }
      LATENT_TRACE_PUT(traced0, trace::SegmentWordAt(k, trace::kInfo),
                       static_cast<uint64_t>(w.empty() ? 0 : w.n_tiles) | (direct ? 1ull << 31 : 0) |
                           static_cast<uint64_t>(w.b) << 32);
      if (w.empty()) {
        sync_cta();
        continue;
      }
      const int b = w.b, q_start = w.q_start, rows_total = w.rows_total, r0 = w.r0;
      const int kv_begin = w.kv_begin, kv_end = w.kv_end, n_pages = w.n_tiles;
      const int32_t* table = p.block_table + static_cast<int64_t>(b) * p.max_pages_per_seq + kv_begin / kPageSize;
      if (tid < kRows) ss.row_max[tid] = kMaxInit;
      if (!issued_pages && tid == 0 && !early) {
        for (int j = 0; j < 2 && j < n_pages; ++j) load_tiles(j, first_page[j], 0, kTiles);
      }
      if (!issued_q) {
        static_assert(kThreads == kRows * kQThreadsPerRow);
        LoadQRows(p, sQ, q_start, rows_total, r0, 0, tid);
      }
      cuda::CpAsyncWait<0>();
      cutlass::arch::fence_view_async_shared();  // generic-proxy writes -> wgmma's async proxy
      sync_cta();
      clear(tOrO);
      int row_pos[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) row_pos[h] = w.first_pos + min(r0 + my_row[h], rows_total - 1) / H;
      float l_run[2] = {0.0f, 0.0f};
      // Keys below this are within the split and every row's causal limit (the first row's is the
      // least): pages wholly below it need no mask.
      const int unmasked_end = p.causal ? min(kv_end, w.first_pos + r0 / H + 1) : kv_end;

      // Masks this warpgroup's S for page j (keys past the split, or past a row's causal limit),
      // zeroes the page's value tail if it is partial, and returns the rows' scaled maxima.
      // In a steady pair (below) neither applies.
      auto mask_and_max = [&](int j, float (&mx)[2], auto steady) {
        constexpr bool kSteady = decltype(steady)::value;
        const int key0 = kv_begin + j * kKeys;
        mx[0] = mx[1] = -INFINITY;
        if (!kSteady && key0 + kKeys > unmasked_end) {
#pragma unroll
          for (int i = 0; i < size(tSrS); ++i) {
            const int h = (i >> 1) & 1;
            const int key = key0 + get<1>(tScS(i));
            if (key >= kv_end || (p.causal && key > row_pos[h])) tSrS(i) = -INFINITY;
          }
        }
#pragma unroll
        for (int i = 0; i < size(tSrS); ++i) mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], tSrS(i));
#pragma unroll
        for (int h = 0; h < 2; ++h) mx[h] = cuda::QuadMax(mx[h]) * scale_log2;
        const int valid_keys = kv_end - key0;
        if (!kSteady && valid_keys < kKeys) {
          ZeroTail(ss, wg, valid_keys, wg_tid);
          cutlass::arch::fence_view_async_shared();  // zeroed values -> wgmma's async proxy
        }
      };
      // P = 2^(S * scale - m) into tSrS (f32) and tOrP (bf16); returns the rows' sums.
      auto exponentiate = [&](const float (&m)[2], float (&sum)[2]) {
        sum[0] = sum[1] = 0.0f;
#pragma unroll
        for (int i = 0; i < size(tSrS); ++i) {
          const int h = (i >> 1) & 1;
          tSrS(i) = cuda::FastExp2(fmaf(tSrS(i), scale_log2, -m[h]));
          sum[h] += tSrS(i);
          tOrP(i) = static_cast<Bf16>(tSrS(i));
        }
      };
      // O *= f per row, skipped where every row of the warp keeps its scale (f = 1 exactly: the
      // same bits).
      auto scale_o = [&](const float (&f)[2]) {
        if (!__any_sync(0xffffffffu, f[0] != 1.0f || f[1] != 1.0f)) return;
#pragma unroll
        for (int i = 0; i < size(tOrO); ++i) tOrO(i) *= f[(i >> 1) & 1];
      };
      // The rows' new reference maxima against this page's scaled maxima mx, and the rescale
      // factors f = 2^(old - new). Lazy: the reference moves only where some row of the warp has a
      // maximum more than kLazyRescaleLog2 above its own (then every row of the warp takes its true
      // maximum); otherwise it stays, f = 1 and P = 2^(S - m) stays below 2^kLazyRescaleLog2. Out
      // and LSE are relative to the same reference, so they change only by rounding.
      auto new_max = [&](const float (&mx)[2], float (&m_new)[2], float (&f)[2]) {
        float m_old[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) m_old[h] = ss.row_max[my_row[h]];
        const bool moved =
            __any_sync(0xffffffffu, mx[0] > m_old[0] + kLazyRescaleLog2 || mx[1] > m_old[1] + kLazyRescaleLog2);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          m_new[h] = moved ? fmaxf(m_old[h], mx[h]) : m_old[h];
          f[h] = moved ? cuda::FastExp2(m_old[h] - m_new[h]) : 1.0f;
        }
      };
      // The rows' new reference maxima and this warpgroup's rescale factors into shared memory, by
      // each quad's leader once the quad has read row_max.
      auto publish_max = [&](const float (&m_new)[2], const float (&f)[2], float* scale) {
        __syncwarp();
        if (wg_tid % 4 == 0) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            ss.row_max[my_row[h]] = m_new[h];
            scale[my_row[h]] = f[h];
          }
        }
      };
      // This warpgroup's P into shared memory for the other one, scaled per row by f: a 32-bit
      // store per value pair at its swizzled address, or (kStoreMatrix) the scaled values in bf16
      // registers, then stmatrix, eight 8 x 8 blocks per instruction. The stmatrix form holds
      // fewer registers (no spills in any instantiation, against 4-20 bytes) and took 0.3-1.7%
      // less at one query token a request, 2-5% at batch 1-4 and a skewed batch, but 0.6-1.6% more
      // at two (b 64 / 128, 8k-16k; H200, 2026-12-01): the launcher picks it for one.
      auto store_p = [&](const float (&f)[2]) {
        if constexpr (kStoreMatrix) {
          auto r2s = make_tiled_copy_C(Copy_Atom<SM90_U32x4_STSM_N, Bf16>{}, mma_s);
          auto thr_r2s = r2s.get_slice(wg_tid);
          Tensor scaled = make_fragment_like<Bf16>(tSrS);
#pragma unroll
          for (int i = 0; i < size(tSrS); ++i) scaled(i) = static_cast<Bf16>(tSrS(i) * f[(i >> 1) & 1]);
          copy(r2s, thr_r2s.retile_S(scaled), thr_r2s.partition_D(sPmine));
        } else {
#pragma unroll
          for (int i = 0; i < size(tSrS); i += 2) {
            const int h = (i >> 1) & 1;
            *reinterpret_cast<uint32_t*>(&sPmine(get<0>(tScS(i)), get<1>(tScS(i)))) =
                cuda::PackBf16(tSrS(i) * f[h], tSrS(i + 1) * f[h]);
          }
        }
        cutlass::arch::fence_view_async_shared();  // P -> wgmma's async proxy
      };
      auto pv_local = [&]() {
        warpgroup_fence_operand(tOrP);
        warpgroup_fence_operand(tOrO);
        warpgroup_arrive();
#pragma unroll
        for (int k = 0; k < size<2>(tOrP); ++k) cute::gemm(mma_pl, tOrP(_, _, k), tOrVmine(_, _, k), tOrO);
        warpgroup_commit_batch();
        warpgroup_fence_operand(tOrO);
        warpgroup_fence_operand(tOrP);
      };
      auto pv_remote = [&]() {
        warpgroup_fence_operand(tOrO);
        warpgroup_arrive();
#pragma unroll
        for (int k = 0; k < size<2>(tOrPother); ++k) cute::gemm(mma_pr, tOrPother(_, _, k), tOrVother(_, _, k), tOrO);
        warpgroup_commit_batch();
        warpgroup_fence_operand(tOrO);
      };
      // The next segment's first pages (0, 1 or 2) to load during this one's last pair, and its
      // Q rows [first, last) by this warpgroup: its S products are done and so are the other's
      // (the caller has awaited the other's signal that follows them).
      auto next_pages = [&]() {
        if (chunks || !prefetch_next || k + 1 >= n_segs) return 0;
        const LatentCtaWork nw = record_work(record(k + 1));
        return nw.empty() ? 0 : min(nw.n_tiles, 2);
      };
      auto prefetch_q = [&]() {
        const LatentSegment& seg = ss.seg[(k + 1) & 1];
        static_assert(128 == kRows / 2 * kQThreadsPerRow);
        LoadQRows(p, sQ, seg.q_start, seg.q_len * H, r0, wg * (kRows / 2), wg_tid);
      };
      auto next_first_page = [&](int j) { return ss.seg[(k + 1) & 1].first_pages[j]; };

      int prefetched = 0;  // pages of the next segment issued in this one (by the last pair)
      // Scores of the first pair.
      if (wg < n_pages) {
        ScoreTiles<0, kTiles, true, kConsumerExpects>(mma_s, tSrQ, tSrK, tSrS, ss.full[wg], ph.loads[wg] & 1);
        warpgroup_wait<0>();
        LATENT_TRACE_STAMP(traced, trace::SegmentWordAt(k, trace::kFirstScores0 + wg));
      }
      // One page pair (a, a + 1). A steady pair (kSteady) lies inside the split with a whole next
      // pair after it, and both its pages are whole and below every row's causal limit: no mask, no
      // value tail, no next-segment loads. It has an instantiation of its own without those
      // branches (most pairs at long contexts), which takes fewer instructions and registers (none
      // spilled in its loop, against a few reloaded every pair in the general one). always_inline:
      // nvcc otherwise makes the lambda a call, with the accumulators passed on the stack.
      auto pair = [&](const int a, auto steady) __attribute__((always_inline)) {
        constexpr bool kSteady = decltype(steady)::value;
        const int i = a >> 1;
        const bool has_b = kSteady || a + 1 < n_pages, next_a = kSteady || a + 2 < n_pages,
                   next_b = kSteady || a + 3 < n_pages;
        const int pair_phase = (ph.pairs + i) & 1, b_phase = (ph.pairs_with_b + i) & 1;
        const int next_phase = (ph.loads[wg] + i + 1) & 1;  // of this warpgroup's next page
        // The last pair: the next segment's loads go where this one's would (its pages only
        // without the staged output, which takes the page buffers after this pair).
        const int pf = next_a ? 0 : next_pages();  // 0 in a steady pair
        const int pl = staged_out ? 0 : pf;
        // The cache pages of the next pair's loads, read now so that the issuing thread (and with
        // it its warpgroup's next wgmma) does not wait for them where it issues the loads.
        const int page_a2 = next_a && issuer ? table[a + 2] : 0;
        const int page_b3 = next_b && issuer ? table[a + 3] : 0;
        float f[2], mx[2], sum[2];
        if (wg == 0) {
          // Softmax of S_a against the running max; O_L += P_a V_a[:, L].
          mask_and_max(a, mx, steady);
          float m_new[2];
          new_max(mx, m_new, f);
          publish_max(m_new, f, ss.scale0);
          signal(kScale0Ready);
          scale_o(f);
          exponentiate(m_new, sum);
#pragma unroll
          for (int h = 0; h < 2; ++h) l_run[h] = l_run[h] * f[h] + sum[h];
          pv_local();
          warpgroup_wait<0>();  // P_a V_a[:, L] retired: buffer 0's half L is free
          // Warpgroup 1's max update rescales P_a (for its half) and O_L.
          await(kScale1Ready, pair_phase);
          // Buffer 0's half L loads once warpgroup 1's max is in, not as soon as the half is free:
          // the issuing thread then holds up its warps (and with them warpgroup 1's signal) less.
          // The 128-head rows took 0.2-1.5% less so (H200, 2026-12-01), as FlashMLA's kernel
          // finds at the same place.
          if (issuer) {
            if (next_a) load_tiles(0, page_a2, 0, kHalfTiles);
            else if (pl > 0) load_tiles(0, next_first_page(0), 0, kHalfTiles);
          }
          if (pf > 0) prefetch_q();
#pragma unroll
          for (int h = 0; h < 2; ++h) f[h] = ss.scale1[my_row[h]];
          store_p(f);
          signal(kP0Ready);
          if (has_b) {
            await(kP1Ready, b_phase);
            scale_o(f);
#pragma unroll
            for (int h = 0; h < 2; ++h) l_run[h] *= f[h];
            pv_remote();
          }
          // S_{a+2}: its half-L tiles were loaded above; half R and rope after warpgroup 1's
          // P_a V_a[:, R] retires.
          if (next_a) {
            ScoreTiles<0, kHalfTiles, true, kConsumerExpects>(mma_s, tSrQ, tSrK, tSrS, ss.full[0], next_phase);
          }
          if (next_b) {
            warpgroup_wait<kHalfTiles>();  // P_b V_b[:, L] retired: buffer 1's half L is free
            if (issuer) load_tiles(1, page_b3, 0, kHalfTiles);
          }
          if (next_a) {
            ScoreTiles<kHalfTiles, kTiles, false, kConsumerExpects>(mma_s, tSrQ, tSrK, tSrS, ss.full[0], next_phase);
          }
          warpgroup_wait<0>();
          // Last pair: P_b V_b[:, L] retired (or there was no page b): buffer 1's half L is free.
          if (pl > 1 && issuer) load_tiles(1, next_first_page(1), 0, kHalfTiles);
        } else {
          // Softmax of S_b against warpgroup 0's max; O_R = O_R * scale0 * scale1 + P_b V_b[:, R].
          await(kScale0Ready, pair_phase);
          if (pf > 0) prefetch_q();
          if (has_b) {
            mask_and_max(a + 1, mx, steady);
          } else {
            mx[0] = mx[1] = -INFINITY;
          }
          float m_new[2], g[2];
          new_max(mx, m_new, f);
#pragma unroll
          for (int h = 0; h < 2; ++h) g[h] = f[h] * ss.scale0[my_row[h]];
          publish_max(m_new, f, ss.scale1);
          signal(kScale1Ready);
          scale_o(g);
#pragma unroll
          for (int h = 0; h < 2; ++h) l_run[h] *= g[h];
          if (has_b) {
            exponentiate(m_new, sum);
#pragma unroll
            for (int h = 0; h < 2; ++h) l_run[h] += sum[h];
            const float one[2] = {1.0f, 1.0f};
            store_p(one);
            pv_local();
          }
          await(kP0Ready, pair_phase);
          pv_remote();
          if (has_b) signal(kP1Ready);
          if (next_b || pl > 1) {
            warpgroup_wait<1>();  // P_b V_b[:, R] retired: buffer 1's half R and rope are free
            if (issuer) {
              load_tiles(1, next_b ? page_b3 : next_first_page(1), kHalfTiles, kTiles);
            }
          }
          warpgroup_wait<0>();  // P_a V_a[:, R] retired: buffer 0's half R and rope (P_a) are free
          if (issuer) {
            if (next_a) load_tiles(0, page_a2, kHalfTiles, kTiles);
            else if (pl > 0) load_tiles(0, next_first_page(0), kHalfTiles, kTiles);
          }
          if (next_b) {
            // S_{b+2}: its own loads first, then the half-L tiles warpgroup 0 issues.
            ScoreTiles<kHalfTiles, kTiles, true, kConsumerExpects>(mma_s, tSrQ, tSrK, tSrS, ss.full[1], next_phase);
            ScoreTiles<0, kHalfTiles, false, kConsumerExpects>(mma_s, tSrQ, tSrK, tSrS, ss.full[1], next_phase);
            warpgroup_wait<0>();
          }
        }
        prefetched = pf;
      };
      // Pairs [0, steady_end) are steady.
      const int steady_end = args.steady_pairs ? min(n_pages - 3, (unmasked_end - kv_begin) / kKeys - 1) : 0;
      for (int a = 0; a < n_pages; a += 2) {
        if (a < steady_end) {
          pair(a, std::true_type{});
        } else {
          pair(a, std::false_type{});
        }
      }
      LATENT_TRACE_STAMP(traced, trace::SegmentWordAt(k, trace::kPagesDone0 + wg));
      // A grid of more than one wave (args.release_late) lets the next kernel in only once this
      // CTA's last segment has walked its pages, not at its start: back-to-back calls at 128 heads,
      // b 128, 8k-16k took 3-8% less per call so (H200, 2026-11-30), one wave the same. Released at
      // the start, the next kernel's CTAs take the SMs the first wave leaves and run their prologue
      // (a next latent call: its first pages' loads) under this grid's last wave.
      if (args.release_late && k + 1 == n_segs) cuda::PdlReleaseDependents();
      ph.loads[0] += (n_pages + 1) / 2;
      ph.loads[1] += n_pages / 2;
      ph.pairs += (n_pages + 1) / 2;
      ph.pairs_with_b += n_pages / 2;
      issued_q = prefetched > 0;
      issued_pages = prefetched > 0 && !staged_out;

      // Row sums over both warpgroups' pages, then the output (normalised).
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float l = cuda::QuadSum(l_run[h]);
        if (wg_tid % 4 == 0) ss.row_sum[wg][my_row[h]] = l;
      }
      sync_cta();
      float inv[2], lse[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float l = ss.row_sum[0][my_row[h]] + ss.row_sum[1][my_row[h]];
        inv[h] = l > 0.0f ? 1.0f / l : 0.0f;
        lse[h] = l > 0.0f ? (ss.row_max[my_row[h]] + log2f(l)) * cuda::kLn2 : -INFINITY;
      }
      // This thread's part of O: for each of its two rows, column pairs c0 + 8 j (the wgmma
      // accumulator's order: element 4 j + 2 h + v is row my_row[h], column c0 + 8 j + v).
      const int c0 = wg * kHalf + get<1>(tOcO(0));
      // Row h's values of this thread, normalised, into the row at `row_dst` (its column 0):
      // bf16 (the output, or a piece's partials where split.part_bf16) or f32 (a piece's partials).
      auto write_row = [&](int h, auto* row_dst) {
        using T = std::remove_pointer_t<decltype(row_dst)>;
#pragma unroll
        for (int j = 0; j < kHalf / 8; ++j) {
          const float x = tOrO(4 * j + 2 * h) * inv[h], y = tOrO(4 * j + 2 * h + 1) * inv[h];
          if constexpr (std::is_same_v<T, float>) {
            *reinterpret_cast<float2*>(row_dst + c0 + 8 * j) = make_float2(x, y);
          } else {
            *reinterpret_cast<uint32_t*>(row_dst + c0 + 8 * j) = cuda::PackBf16(x, y);
          }
        }
      };
      auto out_row = [&](int row) {  // the output's row of query row `row` (direct)
        return static_cast<__nv_bfloat16*>(p.out) +
               (static_cast<int64_t>(q_start + row / H) * H + row % H) * p.kv_lora_rank;
      };
      // The partials' row of query row `row` (a piece): f32, or bf16 where split.part_bf16.
      auto part_index = [&](int row) {
        return (part_row0 + static_cast<int64_t>(row / H) * H + row % H) * p.kv_lora_rank;
      };
      auto part_row = [&](int row) { return split.part_out + part_index(row); };
      auto part_row_bf16 = [&](int row) { return reinterpret_cast<__nv_bfloat16*>(split.part_out) + part_index(row); };
      // Rows of bf16: the output's, and the partials' where split.part_bf16 (segments only: the
      // chunk kernels carry no code for it).
      const bool parts_bf16 = !chunks && split.part_bf16;
      const bool bf16_rows = direct || parts_bf16;
      if (staged_out) {
        // The normalised rows into the page buffers (every product on them retired before the
        // barrier above, and no load is in flight into them: the next segment's pages load after
        // this), then one bulk copy a row by warpgroup 0's threads 0..63, which wait until their
        // copies have read the rows: after the closing barrier the buffers are the next segment's.
        // The last segment waits for the writes themselves (the combine reads them next).
        uint8_t* const staged = reinterpret_cast<uint8_t*>(ss.page[0].data());
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if (bf16_rows) {
            write_row(h, reinterpret_cast<__nv_bfloat16*>(staged + my_row[h] * kStagedRowBytesBf16));
          } else {
            write_row(h, reinterpret_cast<float*>(staged + my_row[h] * kStagedRowBytesF32));
          }
        }
        cutlass::arch::fence_view_async_shared();  // staged rows -> the bulk copies' async proxy
        sync_cta();
        if (wg == 0 && wg_tid < kRows && r0 + wg_tid < rows_total) {
          const int row = r0 + wg_tid;
          if (direct) {
            SM90_BULK_COPY_S2G::copy(staged + wg_tid * kStagedRowBytesBf16, out_row(row),
                                     kRank * static_cast<int>(sizeof(__nv_bfloat16)));
          } else if (parts_bf16) {
            SM90_BULK_COPY_S2G::copy(staged + wg_tid * kStagedRowBytesBf16, part_row_bf16(row),
                                     kRank * static_cast<int>(sizeof(__nv_bfloat16)));
          } else {
            SM90_BULK_COPY_S2G::copy(staged + wg_tid * kStagedRowBytesF32, part_row(row),
                                     kRank * static_cast<int>(sizeof(float)));
          }
          tma_store_arrive();
          if (k + 1 < n_segs) {
            tma_store_wait<0>();
          } else {
            asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
          }
        }
      } else {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = r0 + my_row[h];
          if (row >= rows_total) continue;
          if (direct) {
            write_row(h, out_row(row));
          } else if (parts_bf16) {
            write_row(h, part_row_bf16(row));
          } else {
            write_row(h, part_row(row));
          }
        }
      }
      // One LSE per row: the thread holding column 0 of warpgroup 0 writes it.
      if (wg == 0 && wg_tid % 4 == 0) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = r0 + my_row[h];
          if (row >= rows_total) continue;
          const int token = row / H, head = row % H;
          if (direct) {
            if (p.lse != nullptr) p.lse[static_cast<int64_t>(q_start + token) * H + head] = lse[h];
          } else {
            split.part_lse[part_row0 + static_cast<int64_t>(token) * H + head] = lse[h];
          }
        }
      }
      LATENT_TRACE_STAMP(traced, trace::SegmentWordAt(k, trace::kStoresIssued0 + wg));
      sync_cta();  // shared memory (row state, the segment record) is the next segment's
      LATENT_TRACE_STAMP(traced0, trace::SegmentWordAt(k, trace::kEnd));
    }
  };
  if (tid < 128) {
    run(std::integral_constant<int, 0>{});
  } else {
    run(std::integral_constant<int, 1>{});
  }
  LATENT_TRACE_STAMP(wg_tid == 0, trace::kExit0 + tid / 128);
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

#if MLASERVE_MLA_SEGMENT_TRACE
// The buffer SetTraceBuffer gave and the last launch (latent_segment_trace.h).
uint64_t* g_trace = nullptr;
int64_t g_trace_ctas = 0;
segment_trace::Launch g_last_launch;
#endif

}  // namespace

#if MLASERVE_MLA_SEGMENT_TRACE
void segment_trace::SetTraceBuffer(uint64_t* trace, int64_t max_ctas) {
  g_trace = trace;
  g_trace_ctas = max_ctas;
}
segment_trace::Launch segment_trace::LastLaunch() { return g_last_launch; }
#endif

bool LatentSm90Available() {
#if MLASERVE_HAS_SM90A
  return cuda::CurrentDeviceIsSm90();
#else
  return false;  // not built for sm_90a
#endif
}

bool LatentSm90Takes(const MlaParams& p) {
  return p.dtype == DType::kBF16 && p.kv_lora_rank == kRank && p.rope_dim == kWidth - kRank &&
         p.num_pages > 0;
}

absl::Status LaunchLatentAttentionSm90(const MlaParams& p, const LatentSplit& split,
                                       int64_t max_rows_per_request, cudaStream_t stream) {
  if (!LatentSm90Takes(p)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mla: the sm90 latent kernel takes bf16, kv_lora_rank=", kRank, ", rope_dim=", kWidth - kRank,
        " only; got ", DTypeName(p.dtype), ", ", p.kv_lora_rank, ", ", p.rope_dim));
  }
  if (max_rows_per_request <= 0 || p.batch == 0) return absl::OkStatus();
  if (LatentSm90FewRowsTakes(p, max_rows_per_request)) {
    return LaunchLatentAttentionSm90Few(p, split, max_rows_per_request, stream);
  }
  Sm90Args args{p, split, MakeTileTma(static_cast<const Bf16*>(p.kv_cache), p.num_pages)};
  // MLASERVE_MLA_EARLY_LOADS=0: the first pages' loads after the PDL wait as before (A/B timing).
  static const bool early_loads_off = EnvSwitchedOff("MLASERVE_MLA_EARLY_LOADS");
  if (early_loads_off) args.p.inputs_before_wait = false;
  // MLASERVE_MLA_STEADY_PAIRS=0: every page pair through the general step (A/B timing).
  static const bool steady_off = EnvSwitchedOff("MLASERVE_MLA_STEADY_PAIRS");
  args.steady_pairs = steady_off ? 0 : 1;
  // MLASERVE_MLA_NAMED_SIGNALS=0: the warpgroups' signals on mbarriers (racecheck follows those).
  static const bool named_signals_off = EnvSwitchedOff("MLASERVE_MLA_NAMED_SIGNALS");
  args.named_signals = named_signals_off ? 0 : 1;
  // The segment kernel's output staged in the page buffers and stored by bulk copies
  // (Sm90Args::staged_out), where the output and the partials are 16-byte aligned, as bulk copies
  // need (their rows are whole multiples of 16 bytes). MLASERVE_MLA_BULK_OUT=0 (read per call;
  // tests, A/B timing): stored from the accumulators.
  const bool bulk_aligned = reinterpret_cast<uintptr_t>(p.out) % 16 == 0 &&
                            reinterpret_cast<uintptr_t>(split.part_out) % 16 == 0;
  args.staged_out = bulk_aligned && !EnvSwitchedOff("MLASERVE_MLA_BULK_OUT") ? 1 : 0;
  constexpr int kSmem = sizeof(SharedStorage);
  static_assert(kSmem <= 227 * 1024, "the sm90 latent kernel's shared memory exceeds Hopper's limit");
  // P by stmatrix where each request has one query token (see store_p), with named signals.
  // MLASERVE_MLA_STMATRIX=0 (read per call; tests, A/B timing): never.
  const bool stmatrix_off = EnvSwitchedOff("MLASERVE_MLA_STMATRIX");
  const bool store_matrix = !stmatrix_off && args.named_signals && max_rows_per_request <= p.num_heads;
  auto kernel = split.segments != nullptr
                    ? (!args.named_signals ? LatentAttentionSm90Kernel<true, false, false>
                       : store_matrix      ? LatentAttentionSm90Kernel<true, true, true>
                                           : LatentAttentionSm90Kernel<true, true, false>)
                    : (!args.named_signals ? LatentAttentionSm90Kernel<false, false, false>
                       : store_matrix      ? LatentAttentionSm90Kernel<false, true, true>
                                           : LatentAttentionSm90Kernel<false, true, false>);
  if (auto err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
      err != cudaSuccess) {
    return cuda::CudaStatus(err, "latent attention sm90: raising the shared-memory limit");
  }
  const unsigned row_blocks = static_cast<unsigned>((max_rows_per_request + kRows - 1) / kRows);
  // Row blocks fastest: the CTAs that read the same pages run side by side (the second read of
  // a page hits L2).
  const dim3 grid = split.segments != nullptr
                        ? dim3(row_blocks, static_cast<unsigned>(split.num_parts))
                        : dim3(row_blocks, static_cast<unsigned>(split.num_splits), static_cast<unsigned>(p.batch));
  // More CTAs than SMs (one CTA per SM): the dependents are released after the pages, not at the
  // start (see the kernel). MLASERVE_MLA_RELEASE_LATE=0: always at the start (A/B timing).
  static const bool release_late_off = EnvSwitchedOff("MLASERVE_MLA_RELEASE_LATE");
  args.release_late = !release_late_off && static_cast<int64_t>(grid.x) * grid.y * grid.z > cuda::CurrentDeviceSmCount();
  cuda::LaunchShape shape;
  shape.grid = grid;
  shape.block = dim3(kThreads);
  shape.smem_bytes = kSmem;
  shape.stream = stream;
#if MLASERVE_MLA_SEGMENT_TRACE
  KernelArgs launch_args{args};
  const int64_t ctas = static_cast<int64_t>(grid.x) * grid.y * grid.z;
  launch_args.trace = ctas <= g_trace_ctas ? g_trace : nullptr;
  g_last_launch = {{grid.x, grid.y, grid.z}, split.segments != nullptr, launch_args.trace != nullptr};
#else
  const KernelArgs& launch_args = args;
#endif
  return cuda::LaunchPdl("LatentAttentionSm90Kernel", shape, kernel, launch_args);
}

}  // namespace mlaserve::kernels::mla_cuda
