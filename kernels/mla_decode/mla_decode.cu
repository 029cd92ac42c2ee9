// mla_decode CUDA backend: the latent-attention kernel (kernels/mla_prefill) over pieces of the
// requests' keys, then a combine kernel that merges the pieces' partial outputs by their LSE.
// Two ways to cut: the Hopper kernel's balanced schedule (balanced_schedule.h: built here on the
// device from the lengths, every CTA the same number of pages) or, for the mma.sync kernel,
// chunks of plan.chunk_tokens keys. No host sync and no allocation: the workspace comes from the
// caller, sized by PlanMlaDecode, so a decode step can be captured in a CUDA graph.
//
// The combine kernel is in mla_combine.cu; with an MlaValueProjection it also applies W_UV to each
// merged row (one launch instead of the combine and a per-head GEMM).
//
// Chunk workspace layout (f32): part_out [num_splits, batch * max_q * num_heads, kv_lora_rank],
// then part_lse [num_splits, batch * max_q * num_heads]; row (b, i, h) = (b * max_q + i) * heads
// + h, where max_q = p.max_seqlen_q (1 or 2).
#include <cmath>
#include <cstdlib>
#include <cstring>

#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cuda/functional>

#include "common/status.h"
#include "kernels/common/cuda_util.cuh"
#include "kernels/common/env_switch.h"
#include "kernels/common/pdl.cuh"
#include "kernels/mla_decode/api.h"
#include "kernels/common/param_check.h"
#include "kernels/mla_decode/balanced_schedule.h"
#include "kernels/mla_decode/chunk_pick.h"
#include "kernels/mla_decode/mla_combine.cuh"
#include "kernels/mla_prefill/latent_attention.h"
#include "kernels/mla_prefill/latent_tiling.h"

namespace mlaserve::kernels {
namespace {

using mla_decode_internal::CombineArgs;
using mla_decode_internal::LaunchCombine;
using mla_decode_internal::MakeValueArgs;
using mla_decode_internal::PreferSharedCarveout;
using mla_decode_internal::ValueArgs;

struct ScheduleArgs {
  const int32_t* seqlens_k;
  const int32_t* cu_seqlens_q;
  const int32_t* block_table;
  int max_pages_per_seq;
  int batch, num_parts;
  int piece_cost;  // pages a request piece costs beyond its own (PieceCostPages)
  bool charge_cuts;  // a part pays the piece cost of the cut request it starts with (ChargesCuts)
  mla_cuda::LatentSegment* segments;
  int32_t* part_segments;
  int32_t* pieces;
  int32_t* slot_base;
};

// The balanced schedule (balanced_schedule.h), by one block in parallel. Request b occupies
// [C_b, C_b + piece_cost + pages_b) of a cost line (C = exclusive prefix sum; piece_cost from
// PieceCostPages); part q takes the line's [Bound(q), Bound(q + 1)) (BalancedCuts: every part
// the same cost, counting the piece cost of the cut request a part starts with), and of request
// b the pages whose units fall there (a part that holds only b's fixed units takes none of it).
// Requests are walked kScheduleThreads at a time, each thread one request; segment and slot
// numbers come from block-wide prefix sums.
constexpr int kScheduleThreads = 512;
static_assert(sizeof(mla_cuda::LatentSegment) == mla_decode_internal::kSegmentRecordBytes);
constexpr int kPartsPerThread = mla_decode_internal::kMaxParts / kScheduleThreads;
static_assert(kPartsPerThread * kScheduleThreads == mla_decode_internal::kMaxParts);

__global__ void __launch_bounds__(kScheduleThreads) MlaScheduleKernel(const __grid_constant__ ScheduleArgs a) {
  const int piece_cost = a.piece_cost;
  using Scan = cub::BlockScan<int64_t, kScheduleThreads>;
  using PartScan = cub::BlockScan<int32_t, kScheduleThreads>;
  using Reduce = cub::BlockReduce<int64_t, kScheduleThreads>;
  __shared__ union {
    typename Scan::TempStorage scan;
    typename PartScan::TempStorage part_scan;
    typename Reduce::TempStorage reduce;
  } temp;
  __shared__ int64_t total_shared;
  __shared__ int32_t part_first[mla_decode_internal::kMaxParts];
  cuda::PdlWaitForPrerequisites();  // the lengths may come from the kernel before
  cuda::PdlReleaseDependents();
  const int G = a.num_parts;
  int64_t mine = 0;
  for (int b = threadIdx.x; b < a.batch; b += kScheduleThreads) mine += PagesFor(a.seqlens_k[b]) + piece_cost;
  const int64_t total_sum = Reduce(temp.reduce).Sum(mine);
  if (threadIdx.x == 0) total_shared = total_sum;
  for (int q = threadIdx.x; q < G; q += kScheduleThreads) part_first[q] = INT32_MAX;
  __syncthreads();
  const mla_decode_internal::BalancedCuts cuts =
      mla_decode_internal::MakeBalancedCuts(total_shared, piece_cost, a.charge_cuts, G);
  // The parts request b's segments lie in, and its page range in part q.
  auto first_part = [&](int64_t c) { return cuts.PartOf(c); };
  auto last_part = [&](int64_t c, int n) { return cuts.PartOf(c + piece_cost + max(n, 1) - 1); };
  auto range = [&](int64_t c, int n, int q, int& lo, int& hi) {
    const int64_t start = c + piece_cost;
    lo = static_cast<int>(min(max(cuts.Bound(q) - start, int64_t{0}), static_cast<int64_t>(n)));
    hi = q == cuts.parts - 1 ? n
                             : static_cast<int>(min(max(cuts.Bound(q + 1) - start, int64_t{0}), static_cast<int64_t>(n)));
  };
  int64_t cost_carry = 0, seg_carry = 0, slot_carry = 0;
  for (int chunk = 0; chunk < a.batch; chunk += kScheduleThreads) {
    const int b = chunk + threadIdx.x;
    const bool valid = b < a.batch;
    const int k_len = valid ? a.seqlens_k[b] : 0;
    const int n = PagesFor(k_len);
    int64_t c = 0, chunk_cost = 0;
    __syncthreads();
    Scan(temp.scan).ExclusiveSum(valid ? int64_t{n} + piece_cost : 0, c, chunk_cost);
    c += cost_carry;
    int k = 0;
    if (valid) {
      for (int q = first_part(c), q1 = last_part(c, n); q <= q1; ++q) {
        int lo, hi;
        range(c, n, q, lo, hi);
        if (hi > lo || (n == 0 && k == 0)) ++k;
      }
    }
    int64_t seg = 0, chunk_segs = 0, slot = 0, chunk_slots = 0;
    __syncthreads();
    Scan(temp.scan).ExclusiveSum(int64_t{k}, seg, chunk_segs);
    __syncthreads();
    Scan(temp.scan).ExclusiveSum(k > 1 ? int64_t{k} : 0, slot, chunk_slots);
    seg += seg_carry;
    slot += slot_carry;
    if (valid) {
      const int q_start = a.cu_seqlens_q[b];
      const int q_len = a.cu_seqlens_q[b + 1] - q_start;
      const int32_t* table = a.block_table + static_cast<int64_t>(b) * a.max_pages_per_seq;
      int i = 0;
      for (int q = first_part(c), q1 = last_part(c, n); q <= q1; ++q) {
        int lo, hi;
        range(c, n, q, lo, hi);
        if (!(hi > lo || (n == 0 && i == 0))) continue;
        const int index = static_cast<int>(seg) + i;
        mla_cuda::LatentSegment rec{};
        rec.request = b;
        rec.page_begin = lo;
        rec.page_end = hi;
        rec.slot = k > 1 ? static_cast<int32_t>(slot) + i : -1;
        rec.q_start = q_start;
        rec.q_len = q_len;
        rec.k_len = k_len;
        rec.first_pages[0] = lo < hi ? table[lo] : -1;
        rec.first_pages[1] = lo + 1 < hi ? table[lo + 1] : -1;
        a.segments[index] = rec;
        atomicMin(&part_first[q], index);
        ++i;
      }
      a.pieces[b] = k;
      a.slot_base[b] = k > 1 ? static_cast<int32_t>(slot) : -1;
    }
    cost_carry += chunk_cost;
    seg_carry += chunk_segs;
    slot_carry += chunk_slots;
  }
  __syncthreads();
  // part_segments[q] = the first segment of parts q.. (an empty part: the next one's first): a
  // minimum scan over the parts in reverse order, kPartsPerThread each.
  const int32_t total_segs = static_cast<int32_t>(seg_carry);
  int32_t firsts[kPartsPerThread];
#pragma unroll
  for (int j = 0; j < kPartsPerThread; ++j) {
    const int r = threadIdx.x * kPartsPerThread + j;
    firsts[j] = r < G ? min(part_first[G - 1 - r], total_segs) : total_segs;
  }
  PartScan(temp.part_scan).InclusiveScan(firsts, firsts, ::cuda::minimum<>{});
#pragma unroll
  for (int j = 0; j < kPartsPerThread; ++j) {
    const int r = threadIdx.x * kPartsPerThread + j;
    if (r < G) a.part_segments[G - 1 - r] = firsts[j];
  }
  if (threadIdx.x == 0) a.part_segments[G] = total_segs;
}

// The chunks' longest-first order (MlaDecodePlan::longest_first): one block sorts the batch's
// chunks (request b's split s holds min(chunk pages, pages_b - s * chunk pages) pages, at least
// 0) by their pages, descending, stable (ties in request order: the same order every run), and
// writes order[i] = b * num_splits + s for the CTAs of grid column i. A radix sort over the few
// bits the largest chunk needs; chunks past a request's keys sort last (their CTAs return).
constexpr int kOrderThreads = 512;
constexpr int kOrderItemsPerThread = kMlaDecodeMaxOrderedChunks / kOrderThreads;
static_assert(kOrderThreads * kOrderItemsPerThread == kMlaDecodeMaxOrderedChunks);

struct OrderArgs {
  const int32_t* seqlens_k;
  int batch, num_splits, chunk_pages, key_bits;
  int32_t* order;
  // A picking plan (MlaDecodePlan::chunk_pick_sms): the pick's words (chunk_pick.h), whose
  // candidates' times MlaChunkPickKernel wrote; the cheapest length goes to its first word and
  // replaces chunk_pages. null: chunk_pages as it is.
  int32_t* pick = nullptr;
};

struct PickArgs {
  const int32_t* seqlens_k;
  int batch, sms, row_blocks;
  int32_t* pick;  // the pick's words
};

// The SM loads of a pick candidate, five a lane (slot = lane + 32 * i; slots past the SMs hold
// kNoSlot so that no CTA lands there).
constexpr int kPickSlotsPerLane = mla_decode_internal::kPickMaxSms / 32;
constexpr uint32_t kNoSlot = 0xffffffffu;
static_assert(kPickSlotsPerLane * 32 == mla_decode_internal::kPickMaxSms);

// One warp's time for chunks of `chunk` pages (chunk_pick.h's model). pages: each request's pages;
// sorted: the same, descending.
__device__ float PickCost(const PickArgs& a, const int* pages, const int* sorted, int chunk, int lane) {
  namespace m = mla_decode_internal;
  const int sms = a.sms, units = a.batch * a.row_blocks;
  uint32_t load[kPickSlotsPerLane];
#pragma unroll
  for (int i = 0; i < kPickSlotsPerLane; ++i) {
    const int slot = lane + 32 * i;
    load[i] = slot >= sms     ? kNoSlot
              : slot < units ? static_cast<uint32_t>(m::PickChunkCost(min(pages[slot / a.row_blocks], chunk)))
                             : 0u;
  }
  // The tails, longest first, each row block's CTA to the SM free first (ties: the lowest slot):
  // the SMs without a first chunk, in slot order, then by a warp minimum each.
  int split = 0, placed = 0;
  for (; split < a.batch && sorted[split] > chunk; ++split) {
    const uint32_t cost = m::PickChunkCost(sorted[split] - chunk);
    for (int r = 0; r < a.row_blocks; ++r, ++placed) {
      int slot = units + placed;
      if (slot >= sms) {
        uint32_t best = kNoSlot;
#pragma unroll
        for (int i = 0; i < kPickSlotsPerLane; ++i) {
          if (load[i] != kNoSlot) best = min(best, load[i] << 8 | static_cast<uint32_t>(lane + 32 * i));
        }
        slot = static_cast<int>(__reduce_min_sync(0xffffffffu, best) & 0xff);
      }
#pragma unroll
      for (int i = 0; i < kPickSlotsPerLane; ++i) {
        if (lane + 32 * i == slot) load[i] += cost;
      }
    }
  }
  // V: the floor(SMs / speedup)-th largest load, by bisection on the count of loads >= v.
  const int busy = max(1, static_cast<int>(static_cast<float>(sms) / m::kPickLoneSpeedup));
  uint32_t sum = 0, top = 0;
#pragma unroll
  for (int i = 0; i < kPickSlotsPerLane; ++i) {
    if (load[i] == kNoSlot) continue;
    sum += load[i];
    top = max(top, load[i]);
  }
  sum = __reduce_add_sync(0xffffffffu, sum);
  top = __reduce_max_sync(0xffffffffu, top);
  uint32_t lo = 0, hi = top;  // count(>= lo) >= busy holds; the largest such v
  while (lo < hi) {
    const uint32_t mid = (lo + hi + 1) / 2;
    uint32_t count = 0;
#pragma unroll
    for (int i = 0; i < kPickSlotsPerLane; ++i) count += load[i] != kNoSlot && load[i] >= mid;
    if (__reduce_add_sync(0xffffffffu, count) >= static_cast<uint32_t>(busy)) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  uint32_t excess = 0;
#pragma unroll
  for (int i = 0; i < kPickSlotsPerLane; ++i) {
    if (load[i] != kNoSlot && load[i] > lo) excess += load[i] - lo;
  }
  excess = __reduce_add_sync(0xffffffffu, excess);
  const float t = (static_cast<float>(sum) - static_cast<float>(excess)) / static_cast<float>(sms) +
                  static_cast<float>(top - lo) / m::kPickLoneSpeedup;
  return t + (split > 0 ? m::kPickCombineFixedPages + m::kPickCombinePages * static_cast<float>(split * a.row_blocks)
                        : 0.0f);
}

// The pick's candidates (chunk_pick.h), one CTA of one warp each: the time of candidate
// blockIdx.x into the pick's words (CTA 0 also the longest request's pages); CTAs past the batch's
// candidates return. MlaChunkOrderKernel, launched next, takes the cheapest.
__global__ void __launch_bounds__(32) MlaChunkPickKernel(const __grid_constant__ PickArgs a) {
  namespace m = mla_decode_internal;
  __shared__ int pages[m::kPickMaxSms], sorted[m::kPickMaxSms];
  cuda::PdlWaitForPrerequisites();  // the lengths may come from the kernel before
  cuda::PdlReleaseDependents();
  const int lane = threadIdx.x;
  for (int b = lane; b < a.batch; b += 32) pages[b] = PagesFor(a.seqlens_k[b]);
  __syncwarp();
  // Descending, ties in request order: a rank each.
  for (int b = lane; b < a.batch; b += 32) {
    int rank = 0;
    for (int j = 0; j < a.batch; ++j) rank += pages[j] > pages[b] || (pages[j] == pages[b] && j < b);
    sorted[rank] = pages[b];
  }
  __syncwarp();
  const int longest = max(sorted[0], 1);
  const m::PickCandidates c = m::PickCandidatesFor(longest);
  if (blockIdx.x == 0 && lane == 0) a.pick[m::kPickWordLongest] = longest;
  if (static_cast<int>(blockIdx.x) >= c.count) return;
  const float t = PickCost(a, pages, sorted, longest - static_cast<int>(blockIdx.x) * c.step, lane);
  if (lane == 0) reinterpret_cast<float*>(a.pick + m::kPickWordCosts)[blockIdx.x] = t;
}

__global__ void __launch_bounds__(kOrderThreads) MlaChunkOrderKernel(const __grid_constant__ OrderArgs a) {
  namespace m = mla_decode_internal;
  using Sort = cub::BlockRadixSort<uint32_t, kOrderThreads, kOrderItemsPerThread, int32_t>;
  __shared__ typename Sort::TempStorage temp;
  __shared__ int picked;
  cuda::PdlWaitForPrerequisites();  // the lengths (and the pick's times) come from the kernels before
  cuda::PdlReleaseDependents();
  const int n = a.batch * a.num_splits;
  int chunk_pages = a.chunk_pages;
  if (a.pick != nullptr) {
    if (threadIdx.x == 0) {
      // The cheapest candidate; ties to the longest chunk (the lowest index).
      const int longest = a.pick[m::kPickWordLongest];
      const m::PickCandidates c = m::PickCandidatesFor(longest);
      const float* cost = reinterpret_cast<const float*>(a.pick + m::kPickWordCosts);
      int best = 0;
      for (int k = 1; k < c.count; ++k) {
        if (cost[k] < cost[best]) best = k;
      }
      picked = longest - best * c.step;
      a.pick[m::kPickWordChunk] = picked;
    }
    __syncthreads();
    chunk_pages = picked;
  }
  uint32_t keys[kOrderItemsPerThread];
  int32_t items[kOrderItemsPerThread];
#pragma unroll
  for (int j = 0; j < kOrderItemsPerThread; ++j) {
    const int i = threadIdx.x * kOrderItemsPerThread + j;  // blocked: thread t holds t*K .. t*K+K-1
    items[j] = i;
    keys[j] = 0;
    if (i < n) {
      const int left = PagesFor(a.seqlens_k[i / a.num_splits]) - (i % a.num_splits) * chunk_pages;
      keys[j] = static_cast<uint32_t>(min(max(left, 0), chunk_pages));
    }
  }
  Sort(temp).SortDescending(keys, items, 0, a.key_bits);
#pragma unroll
  for (int j = 0; j < kOrderItemsPerThread; ++j) {
    const int i = threadIdx.x * kOrderItemsPerThread + j;
    if (i < n) a.order[i] = items[j];
  }
}

// Whether chunk plans run longest first (MlaDecodePlan::longest_first); MLASERVE_MLA_ORDER=0
// keeps grid order, for timing comparisons.
bool OrderChunks() {
  return !EnvSwitchedOff("MLASERVE_MLA_ORDER");  // read per call: the benches flip it
}

// Whether MlaDecodeCuda runs p's chunks longest first under the plan (its metadata is the order).
bool RunsChunkOrder(const MlaParams& p, const MlaDecodePlan& plan) {
  return !mla_decode_internal::RunsBalancedSchedule(p, plan) && plan.longest_first && OrderChunks() &&
         static_cast<int64_t>(p.batch) * plan.num_splits <= kMlaDecodeMaxOrderedChunks;
}

// The plan's metadata_bytes against what the call reads there: the order of p's chunks, or the
// balanced schedule of `layout`.
absl::Status CheckOrderFits(const MlaParams& p, const MlaDecodePlan& plan) {
  if (MlaDecodeChunkOrderBytes(p.batch, plan.num_splits) <= plan.metadata_bytes) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "mla_decode: the plan's metadata (", plan.metadata_bytes, " bytes) is smaller than the order of batch=",
      p.batch, " x num_splits=", plan.num_splits, " chunks; plan with this shape"));
}

absl::Status CheckScheduleFits(const MlaParams& p, const MlaDecodePlan& plan,
                               const mla_decode_internal::BalancedLayout& layout) {
  if (layout.metadata_bytes <= plan.metadata_bytes) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "mla_decode: the plan's metadata (", plan.metadata_bytes, " bytes) is smaller than the ",
      layout.metadata_bytes, " bytes of the balanced schedule for batch=", p.batch, ", max_seqlen_q=",
      p.max_seqlen_q, ", num_parts=", plan.num_parts, "; plan with this shape"));
}

// A picking plan's row blocks a request, as PlanMlaDecode counts them (latent_tiling.h).
int64_t PickRowBlocks(const MlaParams& p) {
  const int64_t rows = static_cast<int64_t>(p.max_seqlen_q) * p.num_heads;
  const int64_t rows_per_cta = mla_internal::LatentRowsPerCta(rows);
  return (rows + rows_per_cta - 1) / rows_per_cta;
}

// What the pick's model assumes of the call (PlanMlaDecode sets chunk_pick_sms only where it
// holds for the plan's shape): at most two chunks a request, every request's first chunks on SMs
// of their own, the SMs within what the kernel keeps loads for.
absl::Status CheckChunkPick(const MlaParams& p, const MlaDecodePlan& plan) {
  const int64_t units = p.batch * PickRowBlocks(p);
  if (plan.num_splits == 2 && plan.chunk_pick_sms <= mla_decode_internal::kPickMaxSms && units <= plan.chunk_pick_sms) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "mla_decode: plan.chunk_pick_sms=", plan.chunk_pick_sms, " needs num_splits=2 (plan.num_splits=",
      plan.num_splits, "), at most ", mla_decode_internal::kPickMaxSms, " SMs and batch=", p.batch, " x ",
      PickRowBlocks(p), " row blocks (", units, ") within them; plan with this shape"));
}

// A one-CTA kernel of a decode step's metadata (the chunk order, the balanced schedule): shared
// memory preferred over L1 (carveout_name labels that call's error), launched with PDL.
template <typename Args>
absl::Status LaunchOneCta(const char* name, const char* carveout_name, void (*kernel)(Args), int threads,
                          const Args& args, cudaStream_t s) {
  RETURN_IF_ERROR(PreferSharedCarveout(reinterpret_cast<const void*>(kernel), carveout_name));
  cuda::LaunchShape shape;
  shape.grid = dim3(1);
  shape.block = dim3(threads);
  shape.stream = s;
  return cuda::LaunchPdl(name, shape, kernel, args);
}

absl::Status LaunchChunkOrder(const MlaParams& p, const MlaDecodePlan& plan, int32_t* order, cudaStream_t s) {
  const int chunk_pages = plan.num_splits > 1 ? plan.chunk_tokens / kPageSize : p.max_pages_per_seq;
  OrderArgs args{p.seqlens_k, p.batch, plan.num_splits, chunk_pages, 1, order};
  if (plan.chunk_pick_sms > 0) {
    RETURN_IF_ERROR(CheckChunkPick(p, plan));
    args.pick = order + MlaDecodeChunkPickOffset(p.batch, plan.num_splits) / sizeof(int32_t);
    const PickArgs pick{p.seqlens_k, p.batch, plan.chunk_pick_sms, static_cast<int>(PickRowBlocks(p)), args.pick};
    cuda::LaunchShape shape;
    shape.grid = dim3(mla_decode_internal::kPickMaxCandidates);
    shape.block = dim3(32);
    shape.stream = s;
    RETURN_IF_ERROR(cuda::LaunchPdl("MlaChunkPickKernel", shape, MlaChunkPickKernel, pick));
  }
  // The keys' bits: a chunk's pages at most (a pick may take up to a request's whole length).
  const int key_max = plan.chunk_pick_sms > 0 ? p.max_pages_per_seq : chunk_pages;
  while (args.key_bits < 31 && (1 << args.key_bits) <= key_max) ++args.key_bits;
  return LaunchOneCta("MlaChunkOrderKernel", "MlaChunkOrderKernel carveout", MlaChunkOrderKernel, kOrderThreads,
                      args, s);
}

// Whether the balanced schedule's CTAs issue the next segment's loads during the current one
// (LatentSplit::prefetch_next); MLASERVE_MLA_PREFETCH=0 turns it off, for timing comparisons.
bool PrefetchNextSegment() {
  return !EnvSwitchedOff("MLASERVE_MLA_PREFETCH");  // read per call: the benches flip it
}

// Whether the balanced schedule's segments write their partial outputs as bf16
// (LatentSplit::part_bf16): half the bytes that the 64-row Hopper kernel stores and the combine
// reads back, at one more bf16 rounding of each piece before the merge (the output is bf16
// anyway). H100, 128 heads: the balanced rows 1-8% faster; chunk plans at batch 1-4 (20 and 9
// splits) 8-15% slower with them, so chunks keep f32 (docs/kernels.md).
// MLASERVE_MLA_BF16_PARTIALS=0 keeps them f32 (read per call: tests, A/B timing).
bool Bf16Partials(const MlaParams& p, int64_t max_rows) {
  return mla_cuda::LatentRunsSm90WideKernel(p, max_rows) && !EnvSwitchedOff("MLASERVE_MLA_BF16_PARTIALS");
}

// Whether a chunk plan's requests of one chunk are written directly by the attention kernel
// (LatentSplit::single_chunk_direct) rather than as f32 partials that the combine merges alone:
// the 64-row Hopper kernel. MLASERVE_MLA_CHUNK_DIRECT=0 keeps the partials (read per call: tests,
// A/B timing).
bool SingleChunkDirect(const MlaParams& p, int64_t max_rows) {
  return mla_cuda::LatentRunsSm90WideKernel(p, max_rows) && !EnvSwitchedOff("MLASERVE_MLA_CHUNK_DIRECT");
}

// The balanced schedule's arrays in a metadata block that starts at `meta` (the workspace's
// metadata part, or the caller's copy of it: the same offsets from its start).
ScheduleArgs ScheduleIn(const MlaParams& p, const MlaDecodePlan& plan, const mla_decode_internal::BalancedLayout& layout,
                        uint8_t* meta) {
  const bool few_rows = static_cast<int64_t>(p.num_heads) * p.max_seqlen_q <= mla_internal::kLatentFewRowsMax;
  return ScheduleArgs{p.seqlens_k,
                      p.cu_seqlens_q,
                      p.block_table,
                      p.max_pages_per_seq,
                      p.batch,
                      plan.num_parts,
                      mla_decode_internal::PieceCostPages(few_rows),
                      mla_decode_internal::ChargesCuts(few_rows),
                      reinterpret_cast<mla_cuda::LatentSegment*>(meta + (layout.segments - layout.metadata)),
                      reinterpret_cast<int32_t*>(meta + (layout.part_segments - layout.metadata)),
                      reinterpret_cast<int32_t*>(meta + (layout.pieces - layout.metadata)),
                      reinterpret_cast<int32_t*>(meta + (layout.slot_base - layout.metadata))};
}

absl::Status LaunchSchedule(const ScheduleArgs& sched, cudaStream_t s) {
  return LaunchOneCta("MlaScheduleKernel", "MlaScheduleKernel carveout", MlaScheduleKernel, kScheduleThreads,
                      sched, s);
}

// The Hopper kernel over the balanced schedule: schedule (unless the caller built it: metadata),
// attention, combine of split requests.
absl::Status MlaDecodeBalanced(const MlaParams& p, const MlaDecodePlan& plan, void* workspace, const void* metadata,
                               int64_t max_rows, const ValueArgs& value, cudaStream_t s) {
  const auto layout = mla_decode_internal::MakeBalancedLayout(p.batch, p.max_seqlen_q, p.num_heads,
                                                              p.kv_lora_rank, plan.num_parts);
  if (layout.bytes > plan.workspace_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mla_decode: the plan's workspace (", plan.workspace_bytes, " bytes) is smaller than the ",
        layout.bytes, " bytes that batch=", p.batch, ", num_heads=", p.num_heads, ", max_seqlen_q=",
        p.max_seqlen_q, ", num_parts=", plan.num_parts, " need; plan with this shape"));
  }
  if (metadata != nullptr) RETURN_IF_ERROR(CheckScheduleFits(p, plan, layout));
  RETURN_IF_ERROR(RequireNonNull("workspace", workspace));
  RETURN_IF_ERROR(cuda::RequireVectorAligned("mla_decode", "workspace", workspace));
  auto* base = static_cast<uint8_t*>(workspace);
  auto* meta = metadata != nullptr ? static_cast<uint8_t*>(const_cast<void*>(metadata)) : base + layout.metadata;
  const ScheduleArgs sched = ScheduleIn(p, plan, layout, meta);
  if (metadata == nullptr) RETURN_IF_ERROR(LaunchSchedule(sched, s));
  mla_cuda::LatentSplit split;
  split.part_out = reinterpret_cast<float*>(base + layout.part_out);
  split.part_lse = reinterpret_cast<float*>(base + layout.part_lse);
  split.max_q = p.max_seqlen_q;
  split.segments = sched.segments;
  split.part_segments = sched.part_segments;
  split.num_parts = plan.num_parts;
  split.prefetch_next = PrefetchNextSegment();
  split.part_bf16 = Bf16Partials(p, max_rows);
  RETURN_IF_ERROR(mla_cuda::LaunchLatentAttention(p, split, max_rows, s));
  CombineArgs args{1, 0, p.max_seqlen_q, p.num_heads, p.kv_lora_rank, p.batch, p.cu_seqlens_q, p.seqlens_k,
                   split.part_out, split.part_lse, static_cast<__nv_bfloat16*>(p.out), p.lse};
  args.part_bf16 = split.part_bf16;
  args.pieces = sched.pieces;
  args.slot_base = sched.slot_base;
  args.slot_rows = layout.slot_rows;
  args.value = value;
  // A long request among short ones is cut into many pieces: its rows would take many rounds of
  // one warp each, so the warp-per-row combine runs only where the plan expects a few.
  const bool few_pieces = plan.max_pieces > 0 && plan.max_pieces <= mla_decode_internal::kCombineFewPieces;
  return LaunchCombine(args, max_rows, few_pieces, plan.max_pieces, s);
}

}  // namespace

absl::Status MlaDecodeBuildMetadataCuda(const MlaParams& p, const MlaDecodePlan& plan, void* metadata,
                                        void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (mla_decode_internal::RunsBalancedSchedule(p, plan)) {
    const auto layout = mla_decode_internal::MakeBalancedLayout(p.batch, p.max_seqlen_q, p.num_heads,
                                                                p.kv_lora_rank, plan.num_parts);
    RETURN_IF_ERROR(CheckScheduleFits(p, plan, layout));
    return LaunchSchedule(ScheduleIn(p, plan, layout, static_cast<uint8_t*>(metadata)), s);
  }
  if (!RunsChunkOrder(p, plan)) return absl::OkStatus();  // nothing this plan would read
  RETURN_IF_ERROR(CheckOrderFits(p, plan));
  return LaunchChunkOrder(p, plan, static_cast<int32_t*>(metadata), s);
}

absl::Status MlaDecodeCuda(const MlaParams& p, const MlaDecodePlan& plan, void* workspace,
                           void* stream, const MlaValueProjection* value_proj, const void* metadata) {
  auto s = static_cast<cudaStream_t>(stream);
  if (p.max_seqlen_q < 1 || p.max_seqlen_q > 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mla_decode: max_seqlen_q=", p.max_seqlen_q, " must be 1 or 2 on CUDA (it sizes the grid)"));
  }
  if (value_proj != nullptr && !mla_decode_internal::CombinesEveryRow(p, plan)) {
    return absl::InvalidArgumentError(absl::StrCat("mla_decode: value_proj needs a plan with a combine; plan.num_splits=",
                                                   plan.num_splits, " and no balanced schedule has none"));
  }
  const ValueArgs value = MakeValueArgs(value_proj);
  const int64_t max_rows = static_cast<int64_t>(p.max_seqlen_q) * p.num_heads;
  if (mla_decode_internal::RunsBalancedSchedule(p, plan)) {
    return MlaDecodeBalanced(p, plan, workspace, metadata, max_rows, value, s);
  }
  const bool ordered = RunsChunkOrder(p, plan);
  if (plan.num_splits == 1 && !ordered) {
    return mla_cuda::LaunchLatentAttention(p, mla_cuda::LatentSplit{}, max_rows, s);
  }
  // The order in the workspace only where this call builds it.
  const size_t need = MlaDecodeChunkWorkspaceBytes(p.batch, static_cast<int>(max_rows), p.kv_lora_rank,
                                                   plan.num_splits, ordered && metadata == nullptr);
  if (need > plan.workspace_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mla_decode: the plan's workspace (", plan.workspace_bytes, " bytes) is smaller than the ",
        need, " bytes that batch=", p.batch, ", num_heads=", p.num_heads, ", max_seqlen_q=",
        p.max_seqlen_q, ", num_splits=", plan.num_splits, ordered ? " in longest-first order" : "",
        " need; plan with this shape"));
  }
  if (need > 0) {
    RETURN_IF_ERROR(RequireNonNull("workspace", workspace));
    RETURN_IF_ERROR(cuda::RequireVectorAligned("mla_decode", "workspace", workspace));
  }
  mla_cuda::LatentSplit split;
  if (ordered && metadata != nullptr) {
    RETURN_IF_ERROR(CheckOrderFits(p, plan));
    // Built by MlaDecodeBuildMetadata; with p.inputs_before_wait (or old_rows_before_wait) also
    // complete before the kernel just before this one started (api.h), so the chunk kernels may
    // read it before their wait.
    split.chunk_order = static_cast<const int32_t*>(metadata);
    split.order_before_wait = p.inputs_before_wait || p.old_rows_before_wait;
  } else if (ordered) {
    auto* order = reinterpret_cast<int32_t*>(
        static_cast<uint8_t*>(workspace) +
        MlaDecodeChunkOrderOffset(p.batch, static_cast<int>(max_rows), p.kv_lora_rank, plan.num_splits));
    RETURN_IF_ERROR(LaunchChunkOrder(p, plan, order, s));
    split.chunk_order = order;
  }
  if (plan.num_splits == 1) return mla_cuda::LaunchLatentAttention(p, split, max_rows, s);
  const int64_t cap = static_cast<int64_t>(p.batch) * p.max_seqlen_q * p.num_heads;
  split.num_splits = plan.num_splits;
  split.chunk_tokens = plan.chunk_tokens;
  // A picking plan's chunk length sits beside the order (the order kernel wrote it); without an
  // order, the plan's own cut.
  if (ordered && plan.chunk_pick_sms > 0) {
    RETURN_IF_ERROR(CheckChunkPick(p, plan));
    split.chunk_pages_at = split.chunk_order + MlaDecodeChunkPickOffset(p.batch, plan.num_splits) / sizeof(int32_t);
  }
  split.part_out = static_cast<float*>(workspace);
  split.part_lse = split.part_out + static_cast<size_t>(plan.num_splits) * cap * p.kv_lora_rank;
  split.max_q = p.max_seqlen_q;
  split.single_chunk_direct = SingleChunkDirect(p, max_rows);
  RETURN_IF_ERROR(mla_cuda::LaunchLatentAttention(p, split, max_rows, s));
  CombineArgs args{plan.num_splits, plan.chunk_tokens, p.max_seqlen_q, p.num_heads, p.kv_lora_rank,
                   p.batch, p.cu_seqlens_q, p.seqlens_k, split.part_out, split.part_lse,
                   static_cast<__nv_bfloat16*>(p.out), p.lse};
  args.single_chunk_direct = split.single_chunk_direct;
  args.chunk_pages_at = split.chunk_pages_at;
  args.value = value;
  return LaunchCombine(args, max_rows, plan.num_splits <= 2 * mla_decode_internal::kCombineFewPieces, plan.num_splits,
                       s);
}

}  // namespace mlaserve::kernels
