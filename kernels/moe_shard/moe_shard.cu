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

}  // namespace

absl::Status MoeLocalizeCuda(const MoeLocalizeParams& p, void* stream) {
  MoeLocalizeKernel<<<cuda::GridFor(p.num_assignments, kThreads), kThreads, 0,
                      static_cast<cudaStream_t>(stream)>>>(
      p.topk_ids, p.topk_weights, p.local_ids, p.local_weights, p.num_assignments,
      p.expert_begin, p.local_experts);
  return cuda::LaunchStatus("moe_localize");
}

}  // namespace mlaserve::kernels
