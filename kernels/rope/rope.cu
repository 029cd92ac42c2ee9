// rope CUDA backend: one thread per rotated pair (token, head, i), f32 math on the f32
// cos/sin table, in place. A position outside [0, max_position) cannot be reported without a
// host sync: that token is left unrotated (callers validate; the CPU backend refuses it).
#include <cuda_bf16.h>

#include "absl/strings/str_cat.h"
#include "kernels/common/cuda_util.cuh"
#include "kernels/common/dense_cuda.cuh"
#include "kernels/rope/api.h"

namespace mlaserve::kernels {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void __launch_bounds__(kThreads) RopeKernel(const __grid_constant__ RopeParams p) {
  const int half = p.rot_dim / 2;
  const int64_t total = static_cast<int64_t>(p.num_tokens) * p.num_heads * half;
  // Pair i is (x[2i], x[2i+1]) when interleaved, (x[i], x[i+half]) otherwise.
  const int first_step = p.interleaved ? 2 : 1;
  const int second_offset = p.interleaved ? 1 : half;
  auto* x = static_cast<T*>(p.x);
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int i = static_cast<int>(idx % half);
    const int64_t th = idx / half;
    const int h = static_cast<int>(th % p.num_heads);
    const int64_t t = th / p.num_heads;
    const int pos = p.positions[t];
    if (pos < 0 || pos >= p.max_position) continue;
    const float* cs = p.cos_sin + static_cast<int64_t>(pos) * p.rot_dim;
    const float c = cs[i], s = cs[half + i];
    T* v = x + t * p.token_stride + h * p.head_stride + p.offset;
    T& a = v[i * first_step];
    T& b = v[i * first_step + second_offset];
    const float x0 = cuda::ToF32(a), x1 = cuda::ToF32(b);
    a = cuda::FromF32<T>(x0 * c - x1 * s);
    b = cuda::FromF32<T>(x1 * c + x0 * s);
  }
}

}  // namespace

absl::Status RopeCuda(const RopeParams& p, void* stream) {
  const unsigned grid =
      cuda::GridFor(static_cast<int64_t>(p.num_tokens) * p.num_heads * (p.rot_dim / 2), kThreads);
  auto s = static_cast<cudaStream_t>(stream);
  if (p.dtype == DType::kBF16) {
    RopeKernel<__nv_bfloat16><<<grid, kThreads, 0, s>>>(p);
  } else if (p.dtype == DType::kF32) {
    RopeKernel<float><<<grid, kThreads, 0, s>>>(p);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("rope: the CUDA backend supports dtype=bf16 or f32, got ", DTypeName(p.dtype)));
  }
  return cuda::LaunchStatus("rope");
}

}  // namespace mlaserve::kernels
