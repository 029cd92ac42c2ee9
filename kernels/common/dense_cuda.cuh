// Device helpers shared by the dense CUDA kernels (embedding, norm, rope, activation, moe,
// sampling): element loads/stores that compute in f32 whatever the storage dtype, block
// reductions, and the launch-size helper. The attention kernels use cuda_util.cuh.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace mlaserve::kernels::cuda {

__device__ __forceinline__ float ToF32(float v) { return v; }
__device__ __forceinline__ float ToF32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
__device__ __forceinline__ T FromF32(float v);
template <>
__device__ __forceinline__ float FromF32<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 FromF32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// Sum over the block (blockDim.x a multiple of 32, at most 1024). Every thread gets the sum.
// `scratch` holds 32 values; the call ends with a barrier, so it may be reused right after.
template <typename V>
__device__ __forceinline__ V BlockSum(V v, V* scratch) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : V(0);
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <typename V>
__device__ __forceinline__ V BlockMax(V v, V* scratch) {
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = scratch[lane < warps ? lane : 0];
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Blocks for a grid-stride loop over `items` with `threads` per block: enough to fill any GPU
// several times over, never more than the work needs.
inline unsigned GridFor(int64_t items, int threads) {
  constexpr int64_t kMaxBlocks = 65536;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(kMaxBlocks, (items + threads - 1) / threads)));
}

}  // namespace mlaserve::kernels::cuda
