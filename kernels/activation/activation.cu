// activation CUDA backend: out = act(gate) * up in f32, one element per thread in a grid-stride
// loop (the op moves 3 values per output; it is memory-bound and the loads of a warp are
// coalesced). `out` may alias the gate half of `x` (same element, same thread). Launched with
// PDL (kernels/common/pdl.cuh).
//
// One kernel, ActAndMulKernel, the activation a template argument (kernels/common/activation_math.h:
// the CPU backend's formulas, one instantiation per activation and dtype); SiLU's is
// g / (1 + exp(-g)) * u, the expression its own kernel had before.
#include <cuda_bf16.h>

#include "absl/strings/str_cat.h"
#include "kernels/activation/api.h"
#include "kernels/common/activation_math.h"
#include "kernels/common/cuda_util.cuh"
#include "kernels/common/dense_cuda.cuh"
#include "kernels/common/pdl.cuh"

namespace mlaserve::kernels {
namespace {

constexpr int kThreads = 256;

template <typename T, Activation A>
__global__ void __launch_bounds__(kThreads) ActAndMulKernel(const __grid_constant__ ActAndMulParams p) {
  const auto* x = static_cast<const T*>(p.x);
  auto* out = static_cast<T*>(p.out);
  const int64_t total = static_cast<int64_t>(p.rows) * p.dim;
  cuda::PdlEnter();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t r = i / p.dim;
    const int64_t j = i - r * p.dim;
    const T* row = x + r * p.x_stride;
    const float g = cuda::ToF32(row[j]);
    const float u = cuda::ToF32(row[j + p.dim]);
    out[r * p.out_stride + j] = cuda::FromF32<T>(Activate<A>(g) * u);
  }
}

cuda::LaunchShape ElementwiseShape(const ActAndMulParams& p, void* stream) {
  cuda::LaunchShape shape;
  shape.grid = dim3(cuda::GridFor(static_cast<int64_t>(p.rows) * p.dim, kThreads));
  shape.block = dim3(kThreads);
  shape.stream = static_cast<cudaStream_t>(stream);
  return shape;
}

absl::Status BadDType(DType dtype) {
  return absl::InvalidArgumentError(absl::StrCat(
      "activation: the CUDA backend supports dtype=bf16 or f32, got ", DTypeName(dtype)));
}

}  // namespace

absl::Status SiluAndMulCuda(const SiluAndMulParams& p, void* stream) {
  const cuda::LaunchShape shape = ElementwiseShape(p, stream);
  if (p.dtype == DType::kBF16) {
    return cuda::LaunchPdl("silu_and_mul", shape, ActAndMulKernel<__nv_bfloat16, Activation::kSilu>, p);
  }
  if (p.dtype == DType::kF32) {
    return cuda::LaunchPdl("silu_and_mul", shape, ActAndMulKernel<float, Activation::kSilu>, p);
  }
  return BadDType(p.dtype);
}

absl::Status ActAndMulCuda(const ActAndMulParams& p, void* stream) {
  if (p.act == Activation::kSilu) return SiluAndMulCuda(p, stream);
  if (p.dtype != DType::kBF16 && p.dtype != DType::kF32) return BadDType(p.dtype);
  const cuda::LaunchShape shape = ElementwiseShape(p, stream);
  return VisitActivation("activation", p.act, [&](auto act) {
    constexpr Activation kAct = decltype(act)::value;
    if (p.dtype == DType::kBF16) {
      return cuda::LaunchPdl("act_and_mul", shape, ActAndMulKernel<__nv_bfloat16, kAct>, p);
    }
    return cuda::LaunchPdl("act_and_mul", shape, ActAndMulKernel<float, kAct>, p);
  });
}

}  // namespace mlaserve::kernels
