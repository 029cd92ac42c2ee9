// rope CUDA backend: one thread per rotated pair (token, head, i) over x's heads and then k's
// (one launch for MLA's q and k_pe), f32 math on the f32 cos/sin table, in place or into `out`;
// launched with PDL (kernels/common/pdl.cuh). A position outside [0, max_position) cannot be
// reported without a host sync: that token is left unrotated (with `out`: its slice there is
// not written); callers validate, and the CPU backend refuses it.
#include <cuda_bf16.h>

#include "absl/strings/str_cat.h"
#include "kernels/common/cuda_util.cuh"
#include "kernels/common/dense_cuda.cuh"
#include "kernels/common/pdl.cuh"
#include "kernels/rope/api.h"

namespace mlaserve::kernels {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void __launch_bounds__(kThreads) RopeKernel(const __grid_constant__ RopeParams p) {
  const int half = p.rot_dim / 2;
  const int k_heads = p.k != nullptr ? p.k_heads : 0;
  const int heads = p.num_heads + k_heads;
  const int64_t total = static_cast<int64_t>(p.num_tokens) * heads * half;
  // Pair i is (x[2i], x[2i+1]) when interleaved, (x[i], x[i+half]) otherwise.
  const int first_step = p.interleaved ? 2 : 1;
  const int second_offset = p.interleaved ? 1 : half;
  cuda::PdlEnter();
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int i = static_cast<int>(idx % half);
    const int64_t th = idx / half;
    const int h = static_cast<int>(th % heads);
    const int64_t t = th / heads;
    const int pos = p.positions[t];
    if (pos < 0 || pos >= p.max_position) continue;
    const float* cs = p.cos_sin + static_cast<int64_t>(pos) * p.rot_dim;
    const float c = cs[i], s = cs[half + i];
    const T* src;
    T* dst;
    if (h < p.num_heads) {
      src = static_cast<const T*>(p.x) + t * p.token_stride + h * p.head_stride + p.offset;
      dst = p.out != nullptr ? static_cast<T*>(p.out) + t * p.out_token_stride +
                                   h * p.out_head_stride + p.out_offset
                             : static_cast<T*>(p.x) + t * p.token_stride + h * p.head_stride +
                                   p.offset;
    } else {
      dst = static_cast<T*>(p.k) + t * p.k_token_stride + (h - p.num_heads) * p.k_head_stride +
            p.k_offset;
      src = dst;
    }
    const int a = i * first_step, b = a + second_offset;
    const float x0 = cuda::ToF32(src[a]), x1 = cuda::ToF32(src[b]);
    dst[a] = cuda::FromF32<T>(x0 * c - x1 * s);
    dst[b] = cuda::FromF32<T>(x1 * c + x0 * s);
  }
}

}  // namespace

absl::Status RopeCuda(const RopeParams& p, void* stream) {
  const int heads = p.num_heads + (p.k != nullptr ? p.k_heads : 0);
  cuda::LaunchShape shape;
  shape.grid = dim3(cuda::GridFor(static_cast<int64_t>(p.num_tokens) * heads * (p.rot_dim / 2), kThreads));
  shape.block = dim3(kThreads);
  shape.stream = static_cast<cudaStream_t>(stream);
  if (p.dtype == DType::kBF16) return cuda::LaunchPdl("rope", shape, RopeKernel<__nv_bfloat16>, p);
  if (p.dtype == DType::kF32) return cuda::LaunchPdl("rope", shape, RopeKernel<float>, p);
  return absl::InvalidArgumentError(
      absl::StrCat("rope: the CUDA backend supports dtype=bf16 or f32, got ", DTypeName(p.dtype)));
}

}  // namespace mlaserve::kernels
