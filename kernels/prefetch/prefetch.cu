// L2Prefetch on CUDA (api.h): a warp per CTA, each lane issuing cp.async.bulk.prefetch.L2 over
// 16 KiB chunks of the ranges, the chunks dealt round-robin over the grid's lanes so every SM's
// TMA unit carries a share (issued from a few blocks they are slow: the third session's try from
// extra blocks of the rope launch held it 69 us a layer for 23 MB, ~0.3 TB/s). Nothing waits for
// the prefetches: the warp exits once they are issued.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/common/cuda_util.cuh"
#include "kernels/common/device_arch.h"
#include "kernels/prefetch/api.h"

namespace mlaserve::kernels {
namespace {

constexpr uint32_t kChunkBytes = 16 * 1024;

struct PrefetchArgs {
  const char* data[kL2PrefetchMaxRanges];
  uint64_t bytes[kL2PrefetchMaxRanges];
  uint64_t first_chunk[kL2PrefetchMaxRanges + 1];  // chunk index where range i starts; [n] = total
  int num_ranges;
  bool evict_last;
};

__global__ void __launch_bounds__(32) L2PrefetchKernel(const __grid_constant__ PrefetchArgs a) {
#if __CUDA_ARCH__ >= 900
  uint64_t policy = 0;
  if (a.evict_last) asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  const uint64_t total = a.first_chunk[a.num_ranges];
  const uint64_t step = static_cast<uint64_t>(gridDim.x) * 32;
  int range = 0;
  for (uint64_t c = static_cast<uint64_t>(blockIdx.x) * 32 + threadIdx.x; c < total; c += step) {
    while (c >= a.first_chunk[range + 1]) ++range;  // chunks only grow: the range never goes back
    const uint64_t offset = (c - a.first_chunk[range]) * kChunkBytes;
    const uint32_t size = static_cast<uint32_t>(std::min<uint64_t>(kChunkBytes, a.bytes[range] - offset));
    const char* ptr = a.data[range] + offset;
    if (a.evict_last) {
      asm volatile("cp.async.bulk.prefetch.L2.global.L2::cache_hint [%0], %1, %2;" ::"l"(ptr), "r"(size), "l"(policy)
                   : "memory");
    } else {
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(ptr), "r"(size) : "memory");
    }
  }
#endif
}

}  // namespace

bool L2PrefetchCudaLaunches() {
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) return false;
  return major >= 9;
}

size_t L2PrefetchCudaCacheBytes() {
  int device = 0, bytes = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 0;
  if (cudaDeviceGetAttribute(&bytes, cudaDevAttrL2CacheSize, device) != cudaSuccess) return 0;
  return bytes > 0 ? static_cast<size_t>(bytes) : 0;
}

// No device query per call: before sm_90 the kernel's body is empty, and callers that launch it
// often ask L2PrefetchLaunches once (WeightPrefetch::Create).
absl::Status L2PrefetchCuda(const L2PrefetchParams& p, void* stream) {
  PrefetchArgs a{};
  a.evict_last = p.evict_last;
  uint64_t chunks = 0;
  for (int i = 0; i < p.num_ranges; ++i) {
    if (p.ranges[i].bytes == 0) continue;
    a.data[a.num_ranges] = static_cast<const char*>(p.ranges[i].data);
    a.bytes[a.num_ranges] = p.ranges[i].bytes;
    a.first_chunk[a.num_ranges] = chunks;
    chunks += (p.ranges[i].bytes + kChunkBytes - 1) / kChunkBytes;
    ++a.num_ranges;
  }
  a.first_chunk[a.num_ranges] = chunks;
  if (chunks == 0) return absl::OkStatus();
  const int sms = std::max(1, cuda::CurrentDeviceSmCount());
  const uint64_t lanes_needed = (chunks + 31) / 32;
  const int ctas = static_cast<int>(std::min<uint64_t>(p.ctas > 0 ? p.ctas : sms, lanes_needed));
  L2PrefetchKernel<<<ctas, 32, 0, static_cast<cudaStream_t>(stream)>>>(a);
  return cuda::LaunchStatus("L2PrefetchKernel");
}

}  // namespace mlaserve::kernels
