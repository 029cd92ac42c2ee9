// norm CUDA backend: one block per row, f32 math, launched with PDL (kernels/common/pdl.cuh).
//
// RMSNorm, vectorized (rows of 16-byte vectors, at most kMaxVecsPerThread per thread): one pass
// holds the row in registers (x, residual += x), one block reduction, then y; the block has
// as many threads as the row needs (a decode step's rows of 512-7168 values are one block of
// 32-256 threads reading each value once). Otherwise (odd widths, unaligned rows) the generic
// kernel: pass 1 reads x (and the residual, writing residual += x rounded to the storage
// dtype, as Hugging Face's bf16 add does) and reduces the sum of squares of the value that is
// normalised; pass 2 re-reads that value (L1/L2-resident: a row is at most a few tens of KB)
// and writes y. y may alias x: each element is read and written by the same thread, and pass
// 2 starts after the block-wide reduction. Both divide the sum of squares over all dim values
// by real_dim (a zero-padded row's real width, api.h), so a padded row keeps the vector path.
// LayerNorm: mean, then the biased variance around it (two reductions, numerically safer than
// E[x^2] - mean^2), then y.
#include <cuda_bf16.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/common/cuda_util.cuh"
#include "kernels/common/dense_cuda.cuh"
#include "kernels/common/pdl.cuh"
#include "kernels/norm/api.h"

namespace mlaserve::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxVecsPerThread = 4;
constexpr int kMaxVecThreads = 1024;

// 16 bytes of T, converted to and from f32 element by element.
template <typename T>
struct Vec16 {
  static constexpr int kElems = cuda::kChunkBytes / sizeof(T);
  union {
    uint4 raw;
    T v[kElems];
  };
};

template <typename T>
__global__ void __launch_bounds__(kMaxVecThreads) RmsNormVecKernel(const __grid_constant__ RmsNormParams p) {
  using V = Vec16<T>;
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x;
  const int vecs = p.dim / V::kElems;
  const auto* x = reinterpret_cast<const uint4*>(static_cast<const T*>(p.x) + r * p.x_stride);
  auto* res = p.residual != nullptr
                  ? reinterpret_cast<uint4*>(static_cast<T*>(p.residual) + r * p.dim)
                  : nullptr;
  const auto* w = static_cast<const uint4*>(p.weight);
  auto* y = reinterpret_cast<uint4*>(static_cast<T*>(p.y) + r * p.y_stride);
  cuda::PdlEnter();
  V val[kMaxVecsPerThread];
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < kMaxVecsPerThread; ++i) {
    const int at = threadIdx.x + i * blockDim.x;
    if (at >= vecs) break;
    val[i].raw = x[at];
    if (res != nullptr) {  // residual += x, rounded to T as HF's add is
      V old;
      old.raw = res[at];
#pragma unroll
      for (int e = 0; e < V::kElems; ++e) {
        val[i].v[e] = cuda::FromF32<T>(cuda::ToF32(old.v[e]) + cuda::ToF32(val[i].v[e]));
      }
      res[at] = val[i].raw;
    }
#pragma unroll
    for (int e = 0; e < V::kElems; ++e) {
      const float f = cuda::ToF32(val[i].v[e]);
      ss += f * f;
    }
  }
  ss = cuda::BlockSum(ss, scratch);
  const float inv = rsqrtf(ss / p.real_dim + p.eps);
#pragma unroll
  for (int i = 0; i < kMaxVecsPerThread; ++i) {
    const int at = threadIdx.x + i * blockDim.x;
    if (at >= vecs) break;
    V wv, out;
    wv.raw = w[at];
#pragma unroll
    for (int e = 0; e < V::kElems; ++e) {
      // HF: weight * (x * rsqrt(...)).to(dtype): normalise in f32, round, then scale.
      const float n = cuda::ToF32(cuda::FromF32<T>(cuda::ToF32(val[i].v[e]) * inv));
      out.v[e] = cuda::FromF32<T>(cuda::ToF32(wv.v[e]) * n);
    }
    y[at] = out.raw;
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) RmsNormKernel(const __grid_constant__ RmsNormParams p) {
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x;
  const T* x = static_cast<const T*>(p.x) + r * p.x_stride;
  T* res = p.residual != nullptr ? static_cast<T*>(p.residual) + r * p.dim : nullptr;
  const T* w = static_cast<const T*>(p.weight);
  T* y = static_cast<T*>(p.y) + r * p.y_stride;
  cuda::PdlEnter();
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
  const float inv = rsqrtf(ss / p.real_dim + p.eps);
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
  cuda::PdlEnter();
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

// Threads of the vectorized kernel for `p`, or 0 when it does not apply.
template <typename T>
int VecThreads(const RmsNormParams& p) {
  constexpr int kElems = Vec16<T>::kElems;
  const auto aligned = [](const void* q) {
    return reinterpret_cast<uintptr_t>(q) % cuda::kChunkBytes == 0;
  };
  if (p.dim % kElems != 0 || p.x_stride % kElems != 0 || p.y_stride % kElems != 0 ||
      !aligned(p.x) || !aligned(p.y) || !aligned(p.weight) ||
      (p.residual != nullptr && !aligned(p.residual))) {
    return 0;
  }
  const int vecs = p.dim / kElems;
  const int per_thread = (vecs + kMaxVecThreads - 1) / kMaxVecThreads;
  if (per_thread > kMaxVecsPerThread) return 0;
  // As few vectors per thread as fill whole warps: 2048 bf16 -> 256 threads of one vector.
  const int threads = (vecs + cuda::kWarpSize - 1) / cuda::kWarpSize * cuda::kWarpSize;
  return std::min(threads, kMaxVecThreads);
}

template <typename T>
absl::Status LaunchRmsNorm(const RmsNormParams& p, cudaStream_t s) {
  cuda::LaunchShape shape;
  shape.grid = dim3(static_cast<unsigned>(p.rows));
  shape.stream = s;
  if (const int threads = VecThreads<T>(p); threads > 0) {
    shape.block = dim3(static_cast<unsigned>(threads));
    return cuda::LaunchPdl("rmsnorm", shape, RmsNormVecKernel<T>, p);
  }
  shape.block = dim3(kThreads);
  return cuda::LaunchPdl("rmsnorm", shape, RmsNormKernel<T>, p);
}

template <typename T>
absl::Status LaunchLayerNorm(const LayerNormParams& p, cudaStream_t s) {
  cuda::LaunchShape shape;
  shape.grid = dim3(static_cast<unsigned>(p.rows));
  shape.block = dim3(kThreads);
  shape.stream = s;
  return cuda::LaunchPdl("layernorm", shape, LayerNormKernel<T>, p);
}

}  // namespace

absl::Status RmsNormCuda(const RmsNormParams& params, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  // Normalised once: the kernels divide by real_dim (0 in the params means dim).
  RmsNormParams p = params;
  if (p.real_dim <= 0) p.real_dim = p.dim;
  if (p.dtype == DType::kBF16) return LaunchRmsNorm<__nv_bfloat16>(p, s);
  if (p.dtype == DType::kF32) return LaunchRmsNorm<float>(p, s);
  return DtypeError("rmsnorm", p.dtype);
}

absl::Status LayerNormCuda(const LayerNormParams& p, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (p.dtype == DType::kBF16) return LaunchLayerNorm<__nv_bfloat16>(p, s);
  if (p.dtype == DType::kF32) return LaunchLayerNorm<float>(p, s);
  return DtypeError("layernorm", p.dtype);
}

}  // namespace mlaserve::kernels
