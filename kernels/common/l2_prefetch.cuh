// Device side of kernels/common/l2_prefetch.h: issuing a hint's bulk prefetches.
#pragma once

#include <cstdint>

#include "kernels/common/l2_prefetch.h"
#include "kernels/common/pdl.cuh"

namespace mlaserve::kernels::cuda {

// Issues the prefetches of `hint` from block `rank` of `ranks` (the threads of those blocks take
// its 64 KiB pieces in turn) and returns without waiting for them. The regions are weights
// (pdl.cuh, rule 3): no kernel of the stream writes them.
__device__ inline void IssueL2Prefetch(const L2PrefetchHint& hint, int rank, int ranks) {
  constexpr uint64_t kPiece = uint64_t{64} << 10;
  const uint64_t first = static_cast<uint64_t>(rank) * blockDim.x + threadIdx.x;
  const uint64_t stride = static_cast<uint64_t>(ranks) * blockDim.x;
  for (int r = 0; r < hint.count; ++r) {
    const uintptr_t start = reinterpret_cast<uintptr_t>(hint.regions[r].data);
    const uintptr_t begin = (start + 15) & ~uintptr_t{15};
    const uintptr_t end = (start + hint.regions[r].bytes) & ~uintptr_t{15};
    if (end <= begin) continue;
    const uint64_t pieces = (end - begin + kPiece - 1) / kPiece;
    for (uint64_t i = first; i < pieces; i += stride) {
      const uintptr_t p = begin + i * kPiece;
      const uint64_t len = end - p < kPiece ? end - p : kPiece;
      PrefetchL2(reinterpret_cast<const void*>(p), static_cast<uint32_t>(len));
    }
  }
}

}  // namespace mlaserve::kernels::cuda
