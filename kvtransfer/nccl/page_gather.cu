#include "kvtransfer/nccl/page_gather.h"

#include <algorithm>

namespace mlaserve::kvtransfer::nccl {
namespace {

constexpr int kThreads = 256;

// One block per (page, plane, part): 16-byte vector copies, coalesced on both sides.
__global__ void PageCopyKernel(PageCopyParams p, int parts) {
  const int page = blockIdx.x;
  const PagePlane& plane = p.planes[blockIdx.y];
  const int64_t words = plane.page_bytes / 16;
  const int64_t per_part = (words + parts - 1) / parts;
  const int64_t begin = blockIdx.z * per_part;
  const int64_t end = min(words, begin + per_part);
  uint4* pool = reinterpret_cast<uint4*>(plane.base + int64_t{p.page_ids[page]} * plane.page_bytes);
  uint4* staged = reinterpret_cast<uint4*>(p.staging + page * p.staging_page_bytes + plane.offset);
  if (p.to_staging) {
    for (int64_t w = begin + threadIdx.x; w < end; w += kThreads) staged[w] = pool[w];
  } else {
    for (int64_t w = begin + threadIdx.x; w < end; w += kThreads) pool[w] = staged[w];
  }
}

}  // namespace

cudaError_t LaunchPageCopy(const PageCopyParams& p, cudaStream_t stream) {
  if (p.num_pages <= 0) return cudaSuccess;
  if (p.num_planes < 1 || p.num_planes > 2) return cudaErrorInvalidValue;
  for (int i = 0; i < p.num_planes; ++i) {
    const PagePlane& pl = p.planes[i];
    if (pl.page_bytes % 16 != 0 || pl.offset % 16 != 0 ||
        reinterpret_cast<uintptr_t>(pl.base) % 16 != 0) {
      return cudaErrorMisalignedAddress;
    }
  }
  if (p.staging_page_bytes % 16 != 0 || reinterpret_cast<uintptr_t>(p.staging) % 16 != 0) {
    return cudaErrorMisalignedAddress;
  }
  // A 73,728-byte page is 4,608 words: split it so a few pages still fill the GPU.
  const int64_t words = p.planes[0].page_bytes / 16;
  const int parts =
      static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(8, words / (4 * kThreads))));
  dim3 grid(p.num_pages, p.num_planes, parts);
  PageCopyKernel<<<grid, kThreads, 0, stream>>>(p, parts);
  return cudaGetLastError();
}

}  // namespace mlaserve::kvtransfer::nccl
