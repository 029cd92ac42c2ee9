// The stream kernels' routed slot -> expert map, computed from the assignments themselves.
//
// The permutation lists the touched experts in `active` (moe_permute.cu, ExpertOffsets):
// active[s] is the s-th smallest expert id in [0, num_experts) that at least one assignment
// picks (ids outside the range belong to another expert-parallel rank and are skipped). The
// stream kernels' gate_up launch follows the permutation, so it may not read `active` before
// its PDL wait (kernels/common/pdl.cuh, rule 1). But where the ids' writer is at least two
// kernels back (the call was handed its ids: no routing inside it), it may read the ids (rule 3)
// and derive the same list, so that its first weights go in flight under the permutation
// instead of after it. The kernels still read `active` after the wait and reload where the two
// differ, so the map is an early guess that never decides a result.
#pragma once

#include <cstdint>

#include "kernels/common/cuda_util.cuh"

namespace mlaserve::kernels::moe_cuda {

// Assignments up to which a warp derives the map (four ids a lane); past it the kernels wait.
inline constexpr int kActiveSlotMaxAssign = 128;

// active[slot] as the permutation will write it, or -1 where slot is past the touched experts.
// ids: [num_assign] (num_assign <= kActiveSlotMaxAssign), readable before the wait. Every lane of
// a full warp calls it (with the same arguments) and gets the same value: each lane holds up to
// four ids, and the touched set is OR-reduced over the warp 32 experts at a time.
__device__ __forceinline__ int ActiveExpertOfSlot(const int32_t* ids, int num_assign, int num_experts, int slot) {
  constexpr int kPerLane = kActiveSlotMaxAssign / cuda::kWarpSize;
  const int lane = static_cast<int>(threadIdx.x) % cuda::kWarpSize;
  int32_t v[kPerLane];
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int i = lane + j * cuda::kWarpSize;
    v[j] = i < num_assign ? __ldcg(ids + i) : -1;  // past L1: written by an earlier kernel
  }
  int below = 0;  // touched experts under word w
  for (int w = 0; w * cuda::kWarpSize < num_experts; ++w) {
    uint32_t bits = 0;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      if (v[j] >= 0 && v[j] < num_experts && v[j] / cuda::kWarpSize == w) bits |= 1u << (v[j] % cuda::kWarpSize);
    }
#pragma unroll
    for (int o = cuda::kWarpSize / 2; o > 0; o >>= 1) bits |= __shfl_xor_sync(0xffffffffu, bits, o);
    const int n = __popc(bits);
    if (slot < below + n) {
      for (int q = below; q < slot; ++q) bits &= bits - 1;  // drop the lower set bits
      return w * cuda::kWarpSize + __ffs(static_cast<int>(bits)) - 1;
    }
    below += n;
  }
  return -1;
}

}  // namespace mlaserve::kernels::moe_cuda
