// mla_decode CUDA backend: the latent-attention kernel (kernels/mla_prefill) run per KV split,
// then a combine kernel that merges the splits' partial outputs by their LSE. No host sync and
// no allocation: the workspace comes from the caller, sized by PlanMlaDecode, so a decode step
// can be captured in a CUDA graph.
//
// Workspace layout (f32): part_out [num_splits, batch * max_q * num_heads, kv_lora_rank], then
// part_lse [num_splits, batch * max_q * num_heads]; row (b, i, h) = (b * max_q + i) * heads + h,
// where max_q = p.max_seqlen_q (1 or 2).
#include <cmath>

#include "common/status.h"
#include "kernels/common/cuda_util.cuh"
#include "kernels/mla_decode/api.h"
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
};

// One CTA per (request, query token, head) row: weights exp(lse_s - max) over the splits
// (an empty split has lse = -inf and weight 0), out = sum_s w_s part_s / sum_s w_s.
__global__ void __launch_bounds__(kCombineThreads) MlaCombineKernel(const __grid_constant__ CombineArgs a) {
  const int b = blockIdx.y;
  const int i = blockIdx.x / a.num_heads, h = blockIdx.x % a.num_heads;
  const int q_start = a.cu_seqlens_q[b];
  if (i >= a.cu_seqlens_q[b + 1] - q_start) return;
  const int64_t cap = static_cast<int64_t>(a.batch) * a.max_q * a.num_heads;
  const int64_t part_row = (static_cast<int64_t>(b) * a.max_q + i) * a.num_heads + h;
  float m = -INFINITY;
  for (int s = 0; s < a.num_splits; ++s) m = fmaxf(m, a.part_lse[s * cap + part_row]);
  float total = 0.0f;
  if (m != -INFINITY)
    for (int s = 0; s < a.num_splits; ++s) total += expf(a.part_lse[s * cap + part_row] - m);
  const float inv = total > 0.0f ? 1.0f / total : 0.0f;
  const int64_t out_row = static_cast<int64_t>(q_start + i) * a.num_heads + h;
  for (int d = threadIdx.x * kCombineVec; d < a.rank; d += kCombineThreads * kCombineVec) {
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int s = 0; s < a.num_splits; ++s) {
      const float ls = a.part_lse[s * cap + part_row];
      if (ls == -INFINITY) continue;
      const float w = expf(ls - m) * inv;
      const float4 v = *reinterpret_cast<const float4*>(a.part_out + (s * cap + part_row) * a.rank + d);
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

}  // namespace

absl::Status MlaDecodeCuda(const MlaParams& p, const MlaDecodePlan& plan, void* workspace,
                           void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (p.max_seqlen_q < 1 || p.max_seqlen_q > 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mla_decode: max_seqlen_q=", p.max_seqlen_q, " must be 1 or 2 on CUDA (it sizes the grid)"));
  }
  const int64_t max_rows = static_cast<int64_t>(p.max_seqlen_q) * p.num_heads;
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
