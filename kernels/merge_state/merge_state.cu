// merge_state CUDA backend (bf16 partial outputs, f32 LSEs).
//
// One warp per (token, head) row: every lane reads the row's two LSEs, the lanes stride over
// the row in 16-byte vectors (8 bf16) when the layout allows it, else element by element, and
// lane 0 writes the merged LSE after a __syncwarp. Keeping a row inside one warp makes the
// in-place form (lse aliasing lse_a) race-free: no lane reads lse_a after it is overwritten.
#include <cmath>

#include "kernels/common/cuda_util.cuh"
#include "kernels/merge_state/api.h"

namespace mlaserve::kernels {
namespace {

constexpr int kRowsPerBlock = 8;  // warps per block

template <int kVec>
__global__ void __launch_bounds__(kRowsPerBlock* cuda::kWarpSize)
    MergeStateKernel(const __grid_constant__ MergeStateParams p) {
  const int lane = threadIdx.x % cuda::kWarpSize;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / cuda::kWarpSize;
  if (row >= static_cast<int64_t>(p.num_tokens) * p.num_heads) return;
  const int64_t t = row / p.num_heads;
  const int h = static_cast<int>(row % p.num_heads);
  const float la = p.lse_a[row], lb = p.lse_b[row];
  const float m = fmaxf(la, lb);
  float wa = 0.0f, wb = 0.0f, lse = -INFINITY;
  if (m != -INFINITY) {
    wa = expf(la - m);
    wb = expf(lb - m);
    const float sum = wa + wb;
    lse = m + logf(sum);
    wa /= sum;
    wb /= sum;
  }
  const int64_t base = t * p.token_stride + static_cast<int64_t>(h) * p.head_dim;
  const auto* a = static_cast<const __nv_bfloat16*>(p.out_a) + base;
  const auto* b = static_cast<const __nv_bfloat16*>(p.out_b) + base;
  auto* o = static_cast<__nv_bfloat16*>(p.out) + base;
  for (int d = lane * kVec; d < p.head_dim; d += cuda::kWarpSize * kVec) {
    if constexpr (kVec == 8) {
      const uint4 va = *reinterpret_cast<const uint4*>(a + d);
      const uint4 vb = *reinterpret_cast<const uint4*>(b + d);
      const auto* ea = reinterpret_cast<const __nv_bfloat162*>(&va);
      const auto* eb = reinterpret_cast<const __nv_bfloat162*>(&vb);
      uint4 vo;
      auto* eo = reinterpret_cast<uint32_t*>(&vo);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 fa = __bfloat1622float2(ea[i]), fb = __bfloat1622float2(eb[i]);
        eo[i] = cuda::PackBf16(wa * fa.x + wb * fb.x, wa * fa.y + wb * fb.y);
      }
      *reinterpret_cast<uint4*>(o + d) = vo;
    } else {
      o[d] = __float2bfloat16(wa * __bfloat162float(a[d]) + wb * __bfloat162float(b[d]));
    }
  }
  __syncwarp();
  if (lane == 0 && p.lse != nullptr) p.lse[row] = lse;
}

}  // namespace

absl::Status MergeStateCuda(const MergeStateParams& p, void* stream) {
  if (p.dtype != DType::kBF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("merge_state: the CUDA backend supports dtype=bf16 only, got ", DTypeName(p.dtype)));
  }
  const int64_t rows = static_cast<int64_t>(p.num_tokens) * p.num_heads;
  const dim3 grid(static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock));
  const dim3 block(kRowsPerBlock * cuda::kWarpSize);
  auto s = static_cast<cudaStream_t>(stream);
  const bool vec = p.head_dim % cuda::kBf16PerChunk == 0 && p.token_stride % cuda::kBf16PerChunk == 0 &&
                   reinterpret_cast<uintptr_t>(p.out_a) % cuda::kChunkBytes == 0 &&
                   reinterpret_cast<uintptr_t>(p.out_b) % cuda::kChunkBytes == 0 &&
                   reinterpret_cast<uintptr_t>(p.out) % cuda::kChunkBytes == 0;
  if (vec) {
    MergeStateKernel<8><<<grid, block, 0, s>>>(p);
  } else {
    MergeStateKernel<1><<<grid, block, 0, s>>>(p);
  }
  return cuda::LaunchStatus("MergeStateKernel");
}

}  // namespace mlaserve::kernels
