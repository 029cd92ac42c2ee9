// prefetch: bring read-only device memory into the GPU's L2 cache ahead of the kernel that reads
// it, from a launch that computes nothing. A decode step at batch 1 leaves DRAM nearly idle for
// tens of microseconds while its attention runs (a latency chain over a few MB); the weights
// that the layer reads after it (o_proj, the shared experts) can be in flight then, so that
// their kernels read L2 instead of DRAM. The engine launches it on a side stream of the step
// (docs/cuda_engine.md, "The weights after the attention in L2").
//
// The launch never changes memory and its result is never needed for correctness: a range
// evicted before its reader runs is read from DRAM as before.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/common/types.h"

namespace mlaserve::kernels {

inline constexpr int kL2PrefetchMaxRanges = 8;

struct L2PrefetchRange {
  const void* data = nullptr;  // 16-byte aligned
  size_t bytes = 0;            // a multiple of 16; 0 = unused
};

struct L2PrefetchParams {
  L2PrefetchRange ranges[kL2PrefetchMaxRanges];
  int num_ranges = 0;
  // The lines are marked evict-last in L2 (a streaming kernel between the prefetch and the reader
  // then evicts its own lines first); otherwise evict-normal.
  bool evict_last = false;
  int ctas = 0;  // CTAs of the launch (one warp each); 0 = one per SM
};

// CUDA: one launch (sm_90 and newer: cp.async.bulk.prefetch.L2; on older GPUs it does nothing).
// CPU: nothing to do, OK. INVALID_ARGUMENT names a bad range.
absl::Status L2Prefetch(const L2PrefetchParams& p, const KernelContext& ctx);

// Whether L2Prefetch prefetches anything on this build and the current device (a CUDA GPU of
// compute capability 9 or newer); asks the device, so callers ask once.
bool L2PrefetchLaunches(const KernelContext& ctx);

// The current device's L2 size in bytes (0 where L2PrefetchLaunches says no): what a caller's
// prefetched ranges must fit in to still be there when their reader runs. Asks the device.
size_t L2PrefetchCacheBytes(const KernelContext& ctx);

// The ranges of `p` in order, each kept while the kept ones' bytes stay within `budget`, the
// others (and empty ones) dropped: num_ranges becomes the kept ones' count, 0 when none fits,
// which WeightPrefetch takes as nothing to launch. A range larger than the cache would evict its
// own first lines before its reader runs and only take DRAM bandwidth from the kernels beside it
// (DeepSeek-V3's o_proj is 235 MB, several times an H100's or H200's L2). Returns the kept bytes.
size_t FitL2PrefetchRanges(L2PrefetchParams* p, size_t budget);

}  // namespace mlaserve::kernels
