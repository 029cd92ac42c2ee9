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

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "common/status.h"
#include "kernels/common/cuda_util.cuh"
#include "kernels/mla_decode/api.h"
#include "kernels/common/param_check.h"
#include "kernels/mla_decode/balanced_schedule.h"
#include "kernels/mla_prefill/latent_attention.h"

namespace mlaserve::kernels {
namespace {

constexpr int kCombineThreads = 128;
constexpr int kCombineVec = 4;  // f32 per thread per step

struct CombineArgs {
  int num_splits, max_q, num_heads, rank, batch;
  const int32_t* cu_seqlens_q;
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

// One CTA per (request, query token, head) row: weights exp(lse_s - max) over the pieces
// (an empty piece has lse = -inf and weight 0), out = sum_s w_s part_s / sum_s w_s.
__global__ void __launch_bounds__(kCombineThreads) MlaCombineKernel(const __grid_constant__ CombineArgs a) {
  const int b = blockIdx.y;
  const int i = blockIdx.x / a.num_heads, h = blockIdx.x % a.num_heads;
  const int q_start = a.cu_seqlens_q[b];
  if (i >= a.cu_seqlens_q[b + 1] - q_start) return;
  // Row of piece s: first + s * stride.
  int n = a.num_splits;
  int64_t first = (static_cast<int64_t>(b) * a.max_q + i) * a.num_heads + h;
  int64_t stride = static_cast<int64_t>(a.batch) * a.max_q * a.num_heads;
  if (a.pieces != nullptr) {
    n = a.pieces[b];
    if (n <= 1) return;  // written directly by the attention kernel
    stride = a.slot_rows;
    first = a.slot_base[b] * stride + static_cast<int64_t>(i) * a.num_heads + h;
  }
  float m = -INFINITY;
  for (int s = 0; s < n; ++s) m = fmaxf(m, a.part_lse[first + s * stride]);
  float total = 0.0f;
  if (m != -INFINITY)
    for (int s = 0; s < n; ++s) total += expf(a.part_lse[first + s * stride] - m);
  const float inv = total > 0.0f ? 1.0f / total : 0.0f;
  const int64_t out_row = static_cast<int64_t>(q_start + i) * a.num_heads + h;
  for (int d = threadIdx.x * kCombineVec; d < a.rank; d += kCombineThreads * kCombineVec) {
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int s = 0; s < n; ++s) {
      const float ls = a.part_lse[first + s * stride];
      if (ls == -INFINITY) continue;
      const float w = expf(ls - m) * inv;
      const float4 v = *reinterpret_cast<const float4*>(a.part_out + (first + s * stride) * a.rank + d);
      acc.x += w * v.x;
      acc.y += w * v.y;
      acc.z += w * v.z;
      acc.w += w * v.w;
    }
    const uint2 packed = make_uint2(cuda::PackBf16(acc.x, acc.y), cuda::PackBf16(acc.z, acc.w));
    *reinterpret_cast<uint2*>(a.out + out_row * a.rank + d) = packed;
  }
  if (a.lse != nullptr && threadIdx.x == 0) a.lse[out_row] = total > 0.0f ? m + logf(total) : -INFINITY;
}

struct ScheduleArgs {
  const int32_t* seqlens_k;
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

__global__ void __launch_bounds__(kScheduleThreads) MlaScheduleKernel(const __grid_constant__ ScheduleArgs a) {
  using mla_decode_internal::kMinPartCost;
  using mla_decode_internal::kPieceCostPages;
  using Scan = cub::BlockScan<int64_t, kScheduleThreads>;
  using Reduce = cub::BlockReduce<int64_t, kScheduleThreads>;
  __shared__ union {
    typename Scan::TempStorage scan;
    typename Reduce::TempStorage reduce;
  } temp;
  __shared__ int64_t total_shared;
  __shared__ int32_t part_first[mla_decode_internal::kMaxParts];
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
    const int n = valid ? PagesFor(a.seqlens_k[b]) : 0;
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
      int i = 0;
      for (int q = first_part(c), q1 = last_part(c, n); q <= q1; ++q) {
        int lo, hi;
        range(c, n, q, lo, hi);
        if (!(hi > lo || (n == 0 && i == 0))) continue;
        const int index = static_cast<int>(seg) + i;
        a.segments[index] = {b, lo, hi, k > 1 ? static_cast<int32_t>(slot) + i : -1};
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
  // part_segments[q] = the first segment of parts q.. (an empty part: the next one's first).
  if (threadIdx.x == 0) {
    int32_t next = static_cast<int32_t>(seg_carry);
    a.part_segments[G] = next;
    for (int q = G - 1; q >= 0; --q) {
      next = min(next, part_first[q]);
      a.part_segments[q] = next;
    }
  }
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
  const ScheduleArgs sched{p.seqlens_k,
                           p.batch,
                           plan.num_parts,
                           reinterpret_cast<mla_cuda::LatentSegment*>(base + layout.segments),
                           reinterpret_cast<int32_t*>(base + layout.part_segments),
                           reinterpret_cast<int32_t*>(base + layout.pieces),
                           reinterpret_cast<int32_t*>(base + layout.slot_base)};
  MlaScheduleKernel<<<1, kScheduleThreads, 0, s>>>(sched);
  RETURN_IF_ERROR(cuda::LaunchStatus("MlaScheduleKernel"));
  mla_cuda::LatentSplit split;
  split.part_out = reinterpret_cast<float*>(base + layout.part_out);
  split.part_lse = reinterpret_cast<float*>(base + layout.part_lse);
  split.max_q = p.max_seqlen_q;
  split.segments = sched.segments;
  split.part_segments = sched.part_segments;
  split.num_parts = plan.num_parts;
  RETURN_IF_ERROR(mla_cuda::LaunchLatentAttention(p, split, max_rows, s));
  CombineArgs args{1, p.max_seqlen_q, p.num_heads, p.kv_lora_rank, p.batch, p.cu_seqlens_q,
                   split.part_out, split.part_lse, static_cast<__nv_bfloat16*>(p.out), p.lse};
  args.pieces = sched.pieces;
  args.slot_base = sched.slot_base;
  args.slot_rows = layout.slot_rows;
  const dim3 grid(static_cast<unsigned>(max_rows), static_cast<unsigned>(p.batch));
  MlaCombineKernel<<<grid, kCombineThreads, 0, s>>>(args);
  return cuda::LaunchStatus("MlaCombineKernel");
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
  if (plan.num_splits == 1) return mla_cuda::LaunchLatentAttention(p, mla_cuda::LatentSplit{}, max_rows, s);

  const int64_t cap = static_cast<int64_t>(p.batch) * p.max_seqlen_q * p.num_heads;
  const size_t need = static_cast<size_t>(plan.num_splits) * cap * (p.kv_lora_rank + 1) * sizeof(float);
  if (need > plan.workspace_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mla_decode: the plan's workspace (", plan.workspace_bytes, " bytes) is smaller than the ",
        need, " bytes that batch=", p.batch, ", num_heads=", p.num_heads, ", max_seqlen_q=",
        p.max_seqlen_q, ", num_splits=", plan.num_splits, " need; plan with this shape"));
  }
  RETURN_IF_ERROR(cuda::RequireVectorAligned("mla_decode", "workspace", workspace));
  mla_cuda::LatentSplit split;
  split.num_splits = plan.num_splits;
  split.chunk_tokens = plan.chunk_tokens;
  split.part_out = static_cast<float*>(workspace);
  split.part_lse = split.part_out + static_cast<size_t>(plan.num_splits) * cap * p.kv_lora_rank;
  split.max_q = p.max_seqlen_q;
  RETURN_IF_ERROR(mla_cuda::LaunchLatentAttention(p, split, max_rows, s));
  const CombineArgs args{plan.num_splits, p.max_seqlen_q, p.num_heads, p.kv_lora_rank, p.batch,
                         p.cu_seqlens_q, split.part_out, split.part_lse,
                         static_cast<__nv_bfloat16*>(p.out), p.lse};
  const dim3 grid(static_cast<unsigned>(max_rows), static_cast<unsigned>(p.batch));
  MlaCombineKernel<<<grid, kCombineThreads, 0, s>>>(args);
  return cuda::LaunchStatus("MlaCombineKernel");
}

}  // namespace mlaserve::kernels
