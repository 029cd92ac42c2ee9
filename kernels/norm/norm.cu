// norm CUDA backend: one block per row, f32 math.
//
// RMSNorm: pass 1 reads x (and the residual, writing residual += x rounded to the storage
// dtype, as Hugging Face's bf16 add does) and reduces the sum of squares of the value that is
// normalised; pass 2 re-reads that value (L1/L2-resident: a row is at most a few tens of KB)
// and writes y. y may alias x: each element is read and written by the same thread, and pass
// 2 starts after the block-wide reduction. LayerNorm: mean, then the biased variance around
// it (two reductions, numerically safer than E[x^2] - mean^2), then y.
#include <cuda_bf16.h>

#include "absl/strings/str_cat.h"
#include "kernels/common/cuda_util.cuh"
#include "kernels/common/dense_cuda.cuh"
#include "kernels/norm/api.h"

namespace mlaserve::kernels {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void __launch_bounds__(kThreads) RmsNormKernel(const __grid_constant__ RmsNormParams p) {
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x;
  const T* x = static_cast<const T*>(p.x) + r * p.x_stride;
  T* res = p.residual != nullptr ? static_cast<T*>(p.residual) + r * p.dim : nullptr;
  const T* w = static_cast<const T*>(p.weight);
  T* y = static_cast<T*>(p.y) + r * p.y_stride;
  float ss = 0.0f;
  for (int j = threadIdx.x; j < p.dim; j += kThreads) {
    float v = cuda::ToF32(x[j]);
    if (res != nullptr) {
      const T sum = cuda::FromF32<T>(cuda::ToF32(res[j]) + v);
      res[j] = sum;
      v = cuda::ToF32(sum);
    }
    ss += v * v;
  }
  ss = cuda::BlockSum(ss, scratch);
  const float inv = rsqrtf(ss / p.dim + p.eps);
  const T* src = res != nullptr ? res : x;
  for (int j = threadIdx.x; j < p.dim; j += kThreads) {
    // HF: weight * (x * rsqrt(...)).to(dtype): normalise in f32, round, then scale.
    const float n = cuda::ToF32(cuda::FromF32<T>(cuda::ToF32(src[j]) * inv));
    y[j] = cuda::FromF32<T>(cuda::ToF32(w[j]) * n);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) LayerNormKernel(const __grid_constant__ LayerNormParams p) {
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x;
  const T* x = static_cast<const T*>(p.x) + r * p.x_stride;
  const T* w = static_cast<const T*>(p.weight);
  const T* b = static_cast<const T*>(p.bias);
  T* y = static_cast<T*>(p.y) + r * p.y_stride;
  float sum = 0.0f;
  for (int j = threadIdx.x; j < p.dim; j += kThreads) sum += cuda::ToF32(x[j]);
  const float mean = cuda::BlockSum(sum, scratch) / p.dim;
  float var = 0.0f;
  for (int j = threadIdx.x; j < p.dim; j += kThreads) {
    const float d = cuda::ToF32(x[j]) - mean;
    var += d * d;
  }
  const float inv = rsqrtf(cuda::BlockSum(var, scratch) / p.dim + p.eps);
  for (int j = threadIdx.x; j < p.dim; j += kThreads) {
    float v = (cuda::ToF32(x[j]) - mean) * inv * cuda::ToF32(w[j]);
    if (b != nullptr) v += cuda::ToF32(b[j]);
    y[j] = cuda::FromF32<T>(v);
  }
}

absl::Status DtypeError(const char* op, DType t) {
  return absl::InvalidArgumentError(
      absl::StrCat(op, ": the CUDA backend supports dtype=bf16 or f32, got ", DTypeName(t)));
}

}  // namespace

absl::Status RmsNormCuda(const RmsNormParams& p, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (p.dtype == DType::kBF16) {
    RmsNormKernel<__nv_bfloat16><<<p.rows, kThreads, 0, s>>>(p);
  } else if (p.dtype == DType::kF32) {
    RmsNormKernel<float><<<p.rows, kThreads, 0, s>>>(p);
  } else {
    return DtypeError("rmsnorm", p.dtype);
  }
  return cuda::LaunchStatus("rmsnorm");
}

absl::Status LayerNormCuda(const LayerNormParams& p, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (p.dtype == DType::kBF16) {
    LayerNormKernel<__nv_bfloat16><<<p.rows, kThreads, 0, s>>>(p);
  } else if (p.dtype == DType::kF32) {
    LayerNormKernel<float><<<p.rows, kThreads, 0, s>>>(p);
  } else {
    return DtypeError("layernorm", p.dtype);
  }
  return cuda::LaunchStatus("layernorm");
}

}  // namespace mlaserve::kernels
