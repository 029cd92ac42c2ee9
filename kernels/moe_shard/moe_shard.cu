// moe_shard CUDA backend: one thread per assignment.
#include "absl/strings/str_cat.h"
#include "kernels/common/cuda_util.cuh"
#include "kernels/common/dense_cuda.cuh"
#include "kernels/moe_shard/api.h"

namespace mlaserve::kernels {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    MoeLocalizeKernel(const int32_t* ids, const float* weights, int32_t* local_ids,
                      float* local_weights, int64_t n, int begin, int local_experts) {
  for (int64_t a = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; a < n;
       a += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int32_t id = ids[a];
    const bool local = id >= begin && id < begin + local_experts;
    local_ids[a] = local ? id - begin : kNotLocal;
    local_weights[a] = local ? weights[a] : 0.0f;
  }
}

// One block per row, threads over the hidden elements.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    MoeGatherRowsKernel(const T* x, const int32_t* rows, T* out, int hidden) {
  const int64_t i = blockIdx.x;
  const T* src = x + static_cast<int64_t>(rows[i]) * hidden;
  T* dst = out + i * hidden;
  for (int h = threadIdx.x; h < hidden; h += kThreads) dst[h] = src[h];
}

// One block per token; each element sums its sources in slot order (deterministic).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    MoeCombineRowsKernel(const T* parts, const int32_t* slots, T* out, int sources, int hidden) {
  const int64_t t = blockIdx.x;
  const int32_t* s = slots + t * sources;
  for (int h = threadIdx.x; h < hidden; h += kThreads) {
    float acc = 0.0f;
    for (int j = 0; j < sources; ++j) {
      if (s[j] >= 0) acc += cuda::ToF32(parts[static_cast<int64_t>(s[j]) * hidden + h]);
    }
    out[t * hidden + h] = cuda::FromF32<T>(acc);
  }
}

}  // namespace

absl::Status MoeGatherRowsCuda(const MoeGatherRowsParams& p, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  const auto blocks = static_cast<unsigned>(p.num_rows);
  if (p.dtype == DType::kBF16) {
    MoeGatherRowsKernel<<<blocks, kThreads, 0, s>>>(static_cast<const __nv_bfloat16*>(p.x),
                                                   p.rows, static_cast<__nv_bfloat16*>(p.out),
                                                   p.hidden);
  } else {
    MoeGatherRowsKernel<<<blocks, kThreads, 0, s>>>(static_cast<const float*>(p.x), p.rows,
                                                   static_cast<float*>(p.out), p.hidden);
  }
  return cuda::LaunchStatus("moe_gather_rows");
}

absl::Status MoeCombineRowsCuda(const MoeCombineRowsParams& p, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  const auto blocks = static_cast<unsigned>(p.num_tokens);
  if (p.dtype == DType::kBF16) {
    MoeCombineRowsKernel<<<blocks, kThreads, 0, s>>>(
        static_cast<const __nv_bfloat16*>(p.parts), p.slots, static_cast<__nv_bfloat16*>(p.out),
        p.num_sources, p.hidden);
  } else {
    MoeCombineRowsKernel<<<blocks, kThreads, 0, s>>>(static_cast<const float*>(p.parts),
                                                    p.slots, static_cast<float*>(p.out),
                                                    p.num_sources, p.hidden);
  }
  return cuda::LaunchStatus("moe_combine_rows");
}

absl::Status MoeLocalizeCuda(const MoeLocalizeParams& p, void* stream) {
  MoeLocalizeKernel<<<cuda::GridFor(p.num_assignments, kThreads), kThreads, 0,
                      static_cast<cudaStream_t>(stream)>>>(
      p.topk_ids, p.topk_weights, p.local_ids, p.local_weights, p.num_assignments,
      p.expert_begin, p.local_experts);
  return cuda::LaunchStatus("moe_localize");
}

}  // namespace mlaserve::kernels
