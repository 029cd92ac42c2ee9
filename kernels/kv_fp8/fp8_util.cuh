// Device helpers for DeepSeek's fp8 cache layouts (see api.h): the power-of-two scale rule and
// e4m3 <-> float conversions, shared by the kv_fp8 writer/reader, the sparse attention kernels
// and the indexer.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace mlaserve::kernels::fp8 {

// scale = 2^ceil(log2(max(amax, 1e-4) / 448)); the IEEE division matches the CPU reference.
__device__ __forceinline__ float PowerOfTwoScale(float amax) {
  const float s = __fdiv_rn(fmaxf(amax, 1e-4f), 448.0f);
  int e;
  const float m = frexpf(s, &e);
  return m == 0.5f ? ldexpf(1.0f, e - 1) : ldexpf(1.0f, e);
}

__device__ __forceinline__ uint8_t ToE4M3(float x) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
}

// Two e4m3 bytes (low byte first) -> two floats.
__device__ __forceinline__ float2 E4M3x2ToFloat2(uint16_t v) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(v), __NV_E4M3);
  return __half22float2(*reinterpret_cast<const __half2*>(&h));
}

// Eight e4m3 values (8 bytes) times `scale` -> eight bf16 packed in a uint4.
__device__ __forceinline__ uint4 E4M3x8ToBf16x8(uint2 v, float scale) {
  uint32_t out[4];
  const uint32_t w[2] = {v.x, v.y};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = E4M3x2ToFloat2(static_cast<uint16_t>(w[i / 2] >> (16 * (i % 2))));
    const __nv_bfloat162 b = __floats2bfloat162_rn(f.x * scale, f.y * scale);
    out[i] = *reinterpret_cast<const uint32_t*>(&b);
  }
  return make_uint4(out[0], out[1], out[2], out[3]);
}

}  // namespace mlaserve::kernels::fp8
