// mla_decode CUDA backend: the latent-attention kernel (kernels/mla_prefill) over pieces of the
// requests' keys, then a combine kernel that merges the pieces' partial outputs by their LSE.
// Two ways to cut: the Hopper kernel's balanced schedule (balanced_schedule.h: built here on the
// device from the lengths, every CTA the same number of pages) or, for the mma.sync kernel,
// chunks of plan.chunk_tokens keys. No host sync and no allocation: the workspace comes from the
// caller, sized by PlanMlaDecode, so a decode step can be captured in a CUDA graph.
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
#include "kernels/mla_prefill/latent_attention.h"

namespace mlaserve::kernels {
namespace {

// The combine: one CTA per (query row, request); its warps take the row's pieces in turn, each
// lane 4 float4 columns of the 512 latent dims, and add their sums in shared memory.
constexpr int kCombineWarps = 4;
constexpr int kCombineThreads = 32 * kCombineWarps;
constexpr int kCombineMaxRank = 512;
constexpr int kCombineVecsPerLane = kCombineMaxRank / 4 / 32;

struct CombineArgs {
  int num_splits, chunk_tokens, max_q, num_heads, rank, batch;
  const int32_t* cu_seqlens_q;
  const int32_t* seqlens_k;
  const float* part_out;
  const float* part_lse;
  __nv_bfloat16* out;
  float* lse;
  // Balanced schedule (pieces != null): request b has pieces[b] pieces in slots slot_base[b]...,
  // slot_rows partial rows each; a request in one piece was written directly.
  const int32_t* pieces = nullptr;
  const int32_t* slot_base = nullptr;
  int64_t slot_rows = 0;
};

// out = sum_s w_s part_s with w_s = exp(lse_s - max) / sum_s' exp(lse_s' - max) over the row's
// pieces (an empty piece has lse = -inf and weight 0, and its partial is not added: it may hold
// anything). With chunks, only the chunks that hold keys of the request (LatentChunksWithKeys):
// a decode graph plans for a longer context than it runs, and the attention kernel skips the rest.
// Each warp reads its pieces' LSEs and partials in the same pass and keeps a running max, sum and
// weighted output (online softmax), so the call waits on memory once per two pieces of a warp
// rather than first for every LSE; the warps' results are merged in shared memory, in warp
// order (the same bits every run).
__global__ void __launch_bounds__(kCombineThreads) MlaCombineKernel(const __grid_constant__ CombineArgs a) {
  __shared__ float4 partial[kCombineWarps][kCombineMaxRank / 4];
  __shared__ float warp_max[kCombineWarps], warp_sum[kCombineWarps];
  const int b = blockIdx.y;
  const int i = blockIdx.x / a.num_heads, h = blockIdx.x % a.num_heads;
  // The lengths are the step's inputs, written before the attention kernel ran; that kernel lets
  // this one in only after its own PDL wait (latent_attention_sm90.cu), so they are readable
  // before this grid's wait. The partials and the balanced schedule's pieces are read after it.
  const int q_start = a.cu_seqlens_q[b];
  const int lq = a.cu_seqlens_q[b + 1] - q_start;
  const int lk = a.pieces == nullptr ? a.seqlens_k[b] : 0;
  cuda::PdlWaitForPrerequisites();
  cuda::PdlReleaseDependents();
  if (i >= lq) return;
  // Piece s of this row: partial row first + s * stride.
  int n;
  int64_t first, stride;
  if (a.pieces != nullptr) {
    n = a.pieces[b];
    if (n <= 1) return;  // written directly by the attention kernel
    stride = a.slot_rows;
    first = a.slot_base[b] * stride + static_cast<int64_t>(i) * a.num_heads + h;
  } else {
    n = mla_internal::LatentChunksWithKeys(lk, a.chunk_tokens, a.num_splits);
    first = (static_cast<int64_t>(b) * a.max_q + i) * a.num_heads + h;
    stride = static_cast<int64_t>(a.batch) * a.max_q * a.num_heads;
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float m = -INFINITY, l = 0.0f;
  float4 acc[kCombineVecsPerLane];
#pragma unroll
  for (int j = 0; j < kCombineVecsPerLane; ++j) acc[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 2
  for (int s = warp; s < n; s += kCombineWarps) {
    const int64_t row = first + s * stride;
    const float ls = a.part_lse[row];
    const auto* src = reinterpret_cast<const float4*>(a.part_out + row * a.rank);
    float4 x[kCombineVecsPerLane];
#pragma unroll
    for (int j = 0; j < kCombineVecsPerLane; ++j) {
      x[j] = 4 * (lane + 32 * j) < a.rank ? src[lane + 32 * j] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    if (ls == -INFINITY) continue;  // empty piece (the whole warp: one row)
    const float m_new = fmaxf(m, ls);
    const float keep = expf(m - m_new), w = expf(ls - m_new);
    l = l * keep + w;
    m = m_new;
#pragma unroll
    for (int j = 0; j < kCombineVecsPerLane; ++j) {
      acc[j].x = acc[j].x * keep + w * x[j].x;
      acc[j].y = acc[j].y * keep + w * x[j].y;
      acc[j].z = acc[j].z * keep + w * x[j].z;
      acc[j].w = acc[j].w * keep + w * x[j].w;
    }
  }
#pragma unroll
  for (int j = 0; j < kCombineVecsPerLane; ++j) partial[warp][lane + 32 * j] = acc[j];
  if (lane == 0) {
    warp_max[warp] = m;
    warp_sum[warp] = l;
  }
  __syncthreads();
  float m_all = -INFINITY;
#pragma unroll
  for (int w = 0; w < kCombineWarps; ++w) m_all = fmaxf(m_all, warp_max[w]);
  float scale[kCombineWarps], total = 0.0f;
#pragma unroll
  for (int w = 0; w < kCombineWarps; ++w) {
    scale[w] = warp_max[w] == -INFINITY ? 0.0f : expf(warp_max[w] - m_all);
    total += scale[w] * warp_sum[w];
  }
  const float inv = total > 0.0f ? 1.0f / total : 0.0f;
  const int64_t out_row = static_cast<int64_t>(q_start + i) * a.num_heads + h;
  const int v = threadIdx.x;  // float4 column: latent dims 4v .. 4v + 3
  if (4 * v < a.rank) {
    float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int w = 0; w < kCombineWarps; ++w) {
      const float c = scale[w] * inv;
      sum.x += c * partial[w][v].x;
      sum.y += c * partial[w][v].y;
      sum.z += c * partial[w][v].z;
      sum.w += c * partial[w][v].w;
    }
    const uint2 packed = make_uint2(cuda::PackBf16(sum.x, sum.y), cuda::PackBf16(sum.z, sum.w));
    *reinterpret_cast<uint2*>(a.out + out_row * a.rank + 4 * v) = packed;
  }
  if (a.lse != nullptr && threadIdx.x == 0) a.lse[out_row] = total > 0.0f ? m_all + logf(total) : -INFINITY;
}

// The schedule and combine kernels run next to the attention kernel, which takes all of an SM's
// shared memory: asking for the same carveout spares an SM the L1 / shared reconfiguration
// between them (a hint; the driver may still choose).
absl::Status PreferSharedCarveout(const void* kernel, const char* name) {
  if (auto err = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                      cudaSharedmemCarveoutMaxShared);
      err != cudaSuccess) {
    return cuda::CudaStatus(err, name);
  }
  return absl::OkStatus();
}

absl::Status LaunchCombine(const CombineArgs& args, int64_t max_rows, cudaStream_t s) {
  RETURN_IF_ERROR(PreferSharedCarveout(reinterpret_cast<const void*>(MlaCombineKernel), "MlaCombineKernel carveout"));
  cuda::LaunchShape shape;
  shape.grid = dim3(static_cast<unsigned>(max_rows), static_cast<unsigned>(args.batch));
  shape.block = dim3(kCombineThreads);
  shape.stream = s;
  return cuda::LaunchPdl("MlaCombineKernel", shape, MlaCombineKernel, args);
}

struct ScheduleArgs {
  const int32_t* seqlens_k;
  const int32_t* cu_seqlens_q;
  const int32_t* block_table;
  int max_pages_per_seq;
  int batch, num_parts;
  mla_cuda::LatentSegment* segments;
  int32_t* part_segments;
  int32_t* pieces;
  int32_t* slot_base;
};

// The balanced schedule (balanced_schedule.h), by one block in parallel. Request b occupies
// [C_b, C_b + kPieceCostPages + pages_b) of a cost line (C = exclusive prefix sum); part q takes
// the line's [q T, (q + 1) T), T = ceil(total / num_parts), and of request b the pages whose
// units fall there (a part that holds only b's fixed units takes none of it). A part's cost is
// at most T plus one piece's fixed cost. Requests are walked kScheduleThreads at a time, each
// thread one request; segment and slot numbers come from block-wide prefix sums.
constexpr int kScheduleThreads = 512;
static_assert(sizeof(mla_cuda::LatentSegment) == mla_decode_internal::kSegmentRecordBytes);
constexpr int kPartsPerThread = mla_decode_internal::kMaxParts / kScheduleThreads;
static_assert(kPartsPerThread * kScheduleThreads == mla_decode_internal::kMaxParts);

__global__ void __launch_bounds__(kScheduleThreads) MlaScheduleKernel(const __grid_constant__ ScheduleArgs a) {
  using mla_decode_internal::kMinPartCost;
  using mla_decode_internal::kPieceCostPages;
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
  for (int b = threadIdx.x; b < a.batch; b += kScheduleThreads) mine += PagesFor(a.seqlens_k[b]) + kPieceCostPages;
  const int64_t total_sum = Reduce(temp.reduce).Sum(mine);
  if (threadIdx.x == 0) total_shared = total_sum;
  for (int q = threadIdx.x; q < G; q += kScheduleThreads) part_first[q] = INT32_MAX;
  __syncthreads();
  const int64_t T = max((total_shared + G - 1) / G, static_cast<int64_t>(kMinPartCost));
  // The parts request b's segments lie in, and its page range in part q.
  auto first_part = [&](int64_t c) { return static_cast<int>(min(c / T, static_cast<int64_t>(G - 1))); };
  auto last_part = [&](int64_t c, int n) {
    return static_cast<int>(min((c + kPieceCostPages + max(n, 1) - 1) / T, static_cast<int64_t>(G - 1)));
  };
  auto range = [&](int64_t c, int n, int q, int& lo, int& hi) {
    const int64_t start = c + kPieceCostPages;
    lo = static_cast<int>(min(max(q * T - start, int64_t{0}), static_cast<int64_t>(n)));
    hi = q == G - 1 ? n : static_cast<int>(min(max((q + 1) * T - start, int64_t{0}), static_cast<int64_t>(n)));
  };
  int64_t cost_carry = 0, seg_carry = 0, slot_carry = 0;
  for (int chunk = 0; chunk < a.batch; chunk += kScheduleThreads) {
    const int b = chunk + threadIdx.x;
    const bool valid = b < a.batch;
    const int k_len = valid ? a.seqlens_k[b] : 0;
    const int n = PagesFor(k_len);
    int64_t c = 0, chunk_cost = 0;
    __syncthreads();
    Scan(temp.scan).ExclusiveSum(valid ? int64_t{n} + kPieceCostPages : 0, c, chunk_cost);
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
};

__global__ void __launch_bounds__(kOrderThreads) MlaChunkOrderKernel(const __grid_constant__ OrderArgs a) {
  using Sort = cub::BlockRadixSort<uint32_t, kOrderThreads, kOrderItemsPerThread, int32_t>;
  __shared__ typename Sort::TempStorage temp;
  cuda::PdlWaitForPrerequisites();  // the lengths may come from the kernel before
  cuda::PdlReleaseDependents();
  const int n = a.batch * a.num_splits;
  uint32_t keys[kOrderItemsPerThread];
  int32_t items[kOrderItemsPerThread];
#pragma unroll
  for (int j = 0; j < kOrderItemsPerThread; ++j) {
    const int i = threadIdx.x * kOrderItemsPerThread + j;  // blocked: thread t holds t*K .. t*K+K-1
    items[j] = i;
    keys[j] = 0;
    if (i < n) {
      const int left = PagesFor(a.seqlens_k[i / a.num_splits]) - (i % a.num_splits) * a.chunk_pages;
      keys[j] = static_cast<uint32_t>(min(max(left, 0), a.chunk_pages));
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

absl::Status LaunchChunkOrder(const MlaParams& p, const MlaDecodePlan& plan, int32_t* order, cudaStream_t s) {
  const int chunk_pages = plan.num_splits > 1 ? plan.chunk_tokens / kPageSize : p.max_pages_per_seq;
  int key_bits = 1;
  while (key_bits < 31 && (1 << key_bits) <= chunk_pages) ++key_bits;
  const OrderArgs args{p.seqlens_k, p.batch, plan.num_splits, chunk_pages, key_bits, order};
  RETURN_IF_ERROR(PreferSharedCarveout(reinterpret_cast<const void*>(MlaChunkOrderKernel), "MlaChunkOrderKernel carveout"));
  cuda::LaunchShape shape;
  shape.grid = dim3(1);
  shape.block = dim3(kOrderThreads);
  shape.stream = s;
  return cuda::LaunchPdl("MlaChunkOrderKernel", shape, MlaChunkOrderKernel, args);
}

// Whether the balanced schedule's CTAs issue the next segment's loads during the current one
// (LatentSplit::prefetch_next); MLASERVE_MLA_PREFETCH=0 turns it off, for timing comparisons.
bool PrefetchNextSegment() {
  return !EnvSwitchedOff("MLASERVE_MLA_PREFETCH");  // read per call: the benches flip it
}

// The Hopper kernel over the balanced schedule: schedule, attention, combine of split requests.
absl::Status MlaDecodeBalanced(const MlaParams& p, const MlaDecodePlan& plan, void* workspace,
                               int64_t max_rows, cudaStream_t s) {
  const auto layout = mla_decode_internal::MakeBalancedLayout(p.batch, p.max_seqlen_q, p.num_heads,
                                                              p.kv_lora_rank, plan.num_parts);
  if (layout.bytes > plan.workspace_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mla_decode: the plan's workspace (", plan.workspace_bytes, " bytes) is smaller than the ",
        layout.bytes, " bytes that batch=", p.batch, ", num_heads=", p.num_heads, ", max_seqlen_q=",
        p.max_seqlen_q, ", num_parts=", plan.num_parts, " need; plan with this shape"));
  }
  RETURN_IF_ERROR(RequireNonNull("workspace", workspace));
  RETURN_IF_ERROR(cuda::RequireVectorAligned("mla_decode", "workspace", workspace));
  auto* base = static_cast<uint8_t*>(workspace);
  ScheduleArgs sched{p.seqlens_k,
                     p.cu_seqlens_q,
                     p.block_table,
                     p.max_pages_per_seq,
                     p.batch,
                     plan.num_parts,
                     reinterpret_cast<mla_cuda::LatentSegment*>(base + layout.segments),
                     reinterpret_cast<int32_t*>(base + layout.part_segments),
                     reinterpret_cast<int32_t*>(base + layout.pieces),
                     reinterpret_cast<int32_t*>(base + layout.slot_base)};
  RETURN_IF_ERROR(PreferSharedCarveout(reinterpret_cast<const void*>(MlaScheduleKernel), "MlaScheduleKernel carveout"));
  cuda::LaunchShape shape;
  shape.grid = dim3(1);
  shape.block = dim3(kScheduleThreads);
  shape.stream = s;
  RETURN_IF_ERROR(cuda::LaunchPdl("MlaScheduleKernel", shape, MlaScheduleKernel, sched));
  mla_cuda::LatentSplit split;
  split.part_out = reinterpret_cast<float*>(base + layout.part_out);
  split.part_lse = reinterpret_cast<float*>(base + layout.part_lse);
  split.max_q = p.max_seqlen_q;
  split.segments = sched.segments;
  split.part_segments = sched.part_segments;
  split.num_parts = plan.num_parts;
  split.prefetch_next = PrefetchNextSegment();
  RETURN_IF_ERROR(mla_cuda::LaunchLatentAttention(p, split, max_rows, s));
  CombineArgs args{1, 0, p.max_seqlen_q, p.num_heads, p.kv_lora_rank, p.batch, p.cu_seqlens_q, p.seqlens_k,
                   split.part_out, split.part_lse, static_cast<__nv_bfloat16*>(p.out), p.lse};
  args.pieces = sched.pieces;
  args.slot_base = sched.slot_base;
  args.slot_rows = layout.slot_rows;
  return LaunchCombine(args, max_rows, s);
}

}  // namespace

absl::Status MlaDecodeCuda(const MlaParams& p, const MlaDecodePlan& plan, void* workspace,
                           void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (p.max_seqlen_q < 1 || p.max_seqlen_q > 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mla_decode: max_seqlen_q=", p.max_seqlen_q, " must be 1 or 2 on CUDA (it sizes the grid)"));
  }
  const int64_t max_rows = static_cast<int64_t>(p.max_seqlen_q) * p.num_heads;
  if (plan.num_parts > 0 && p.kernel != LatentKernel::kMmaSync && LatentWgmmaApplies(p)) {
    return MlaDecodeBalanced(p, plan, workspace, max_rows, s);
  }
  const bool ordered = plan.longest_first && OrderChunks() &&
                       static_cast<int64_t>(p.batch) * plan.num_splits <= kMlaDecodeMaxOrderedChunks;
  if (plan.num_splits == 1 && !ordered) {
    return mla_cuda::LaunchLatentAttention(p, mla_cuda::LatentSplit{}, max_rows, s);
  }
  const size_t need = MlaDecodeChunkWorkspaceBytes(p.batch, static_cast<int>(max_rows), p.kv_lora_rank,
                                                   plan.num_splits, ordered);
  if (need > plan.workspace_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mla_decode: the plan's workspace (", plan.workspace_bytes, " bytes) is smaller than the ",
        need, " bytes that batch=", p.batch, ", num_heads=", p.num_heads, ", max_seqlen_q=",
        p.max_seqlen_q, ", num_splits=", plan.num_splits, ordered ? " in longest-first order" : "",
        " need; plan with this shape"));
  }
  RETURN_IF_ERROR(RequireNonNull("workspace", workspace));
  RETURN_IF_ERROR(cuda::RequireVectorAligned("mla_decode", "workspace", workspace));
  mla_cuda::LatentSplit split;
  if (ordered) {
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
  split.part_out = static_cast<float*>(workspace);
  split.part_lse = split.part_out + static_cast<size_t>(plan.num_splits) * cap * p.kv_lora_rank;
  split.max_q = p.max_seqlen_q;
  RETURN_IF_ERROR(mla_cuda::LaunchLatentAttention(p, split, max_rows, s));
  const CombineArgs args{plan.num_splits, plan.chunk_tokens, p.max_seqlen_q, p.num_heads, p.kv_lora_rank,
                         p.batch, p.cu_seqlens_q, p.seqlens_k, split.part_out, split.part_lse,
                         static_cast<__nv_bfloat16*>(p.out), p.lse};
  return LaunchCombine(args, max_rows, s);
}

}  // namespace mlaserve::kernels
