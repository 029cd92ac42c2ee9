// The f32 dot product of 8 bf16 pairs (16-byte chunks), in element order: the per-lane step of the
// MoE kernels that sum weight rows against activations without tensor cores (the fused router
// projection, moe_router_permute.cu; the one-token stream GEMVs, moe_stream_gemv.cu).
#pragma once

#include <cuda_bf16.h>

namespace mlaserve::kernels::moe_cuda {

// acc + sum_i w[i] * x[i] over the 8 bf16 of each chunk, one fma at a time in element order.
__device__ __forceinline__ float Dot8(const uint4& w, const uint4& x, float acc) {
  const auto* w2 = reinterpret_cast<const __nv_bfloat162*>(&w);
  const auto* x2 = reinterpret_cast<const __nv_bfloat162*>(&x);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 wf = __bfloat1622float2(w2[i]);
    const float2 xf = __bfloat1622float2(x2[i]);
    acc = fmaf(wf.x, xf.x, acc);
    acc = fmaf(wf.y, xf.y, acc);
  }
  return acc;
}

}  // namespace mlaserve::kernels::moe_cuda
