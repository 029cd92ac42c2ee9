// 16-byte vectors of 8 bf16 in the CUDA kernels that sum weight rows against activations without
// tensor cores (the MoE stream GEMVs and fused router, the MLA combine's W_UV, the rope launch's
// absorbed query): the streaming load of a weight vector and the f32 dot product of two vectors.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace mlaserve::kernels::cuda {

// One weight vector read once by its CTA: through the read-only path, past L1. volatile: the
// load stays where the source puts it (before a PDL wait, kernels/common/pdl.cuh rule 3).
__device__ __forceinline__ uint4 LoadStreamingVec(const __nv_bfloat16* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// The same load under an L2 cache policy (a createpolicy descriptor, e.g. evict_first for weights
// read once a step; kernels/moe/moe_stream_gemv.cu).
__device__ __forceinline__ uint4 LoadStreamingVec(const __nv_bfloat16* p, uint64_t l2_policy) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p), "l"(l2_policy));
  return v;
}

// acc + sum_i w[i] * x[i] over the 8 bf16 of each vector, one fma at a time in element order.
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

}  // namespace mlaserve::kernels::cuda
