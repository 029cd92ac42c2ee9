// moe routing CUDA backend: one kernel, one warp per token (moe_routing.cuh routes a token).
#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/common/cuda_util.cuh"
#include "kernels/common/pdl.cuh"
#include "kernels/moe/api.h"
#include "kernels/moe/moe_routing.cuh"

namespace mlaserve::kernels {
namespace {

constexpr int kWarpsPerBlock = 4;

// One warp per token. kPer: RouteToken's experts a lane holds (num_experts <= 32 * kPer); the
// launch takes the least that holds the model's experts (WithRoutingForm, as the fused router
// does: the same picks and bits in every form, fewer registers and shorter top-k rounds).
template <int kPer>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    MoeRoutingKernel(const __grid_constant__ MoeRoutingParams p) {
  __shared__ float s_choice[kWarpsPerBlock][32 * kPer];
  const int warp = threadIdx.x / 32;
  const int t = blockIdx.x * kWarpsPerBlock + warp;
  cuda::PdlEnter();  // launched with PDL (kernels/common/pdl.cuh): nothing global above
  if (t >= p.num_tokens) return;
  moe_cuda::RouteToken<kPer>(p, t, s_choice[warp]);
}

}  // namespace

namespace moe_cuda {

absl::Status CheckCudaRouting(const MoeRoutingParams& p) {
  if (p.num_experts > kRoutingMaxExperts) {
    return absl::InvalidArgumentError(absl::StrCat("moe_routing: num_experts=", p.num_experts,
                                                   " exceeds the CUDA kernel's ", kRoutingMaxExperts));
  }
  if (p.top_k > 32 || p.n_group > 32) {
    return absl::InvalidArgumentError(absl::StrCat("moe_routing: the CUDA kernel supports top_k <= 32 and n_group <= 32, got top_k=",
                                                   p.top_k, " n_group=", p.n_group));
  }
  return absl::OkStatus();
}

}  // namespace moe_cuda

absl::Status MoeRoutingCuda(const MoeRoutingParams& p, void* stream) {
  RETURN_IF_ERROR(moe_cuda::CheckCudaRouting(p));
  cuda::LaunchShape shape;
  shape.grid = dim3((p.num_tokens + kWarpsPerBlock - 1) / kWarpsPerBlock);
  shape.block = dim3(kWarpsPerBlock * cuda::kWarpSize);
  shape.stream = static_cast<cudaStream_t>(stream);
  return moe_cuda::WithRoutingForm(p.num_experts, true, [&](auto per) {
    return cuda::LaunchPdl("moe_routing", shape, MoeRoutingKernel<decltype(per)::value>, p);
  });
}

}  // namespace mlaserve::kernels
