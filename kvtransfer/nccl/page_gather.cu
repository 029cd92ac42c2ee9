#include "kvtransfer/nccl/page_gather.h"

#include <algorithm>

namespace mlaserve::kvtransfer::nccl {
namespace {

constexpr int kThreads = 256;
constexpr int kCopyBytes = 16;  // one uint4 a thread a step
constexpr int kMaxPartsPerPage = 8;

// One block per (layer page, plane, part): blockIdx.x = k * num_pages + page names layer
// first_layer + k and the staged page at that index; 16-byte vector copies, coalesced on both
// sides.
__global__ void PageCopyKernel(const __grid_constant__ PageCopyParams p, int parts) {
  const int64_t staged_index = blockIdx.x;
  const int k = static_cast<int>(staged_index / p.num_pages);
  const int page = static_cast<int>(staged_index % p.num_pages);
  const PagePlane& plane = p.planes[blockIdx.y];
  const int64_t words = plane.page_bytes / kCopyBytes;
  const int64_t per_part = (words + parts - 1) / parts;
  const int64_t begin = blockIdx.z * per_part;
  const int64_t end = min(words, begin + per_part);
  uint8_t* base = plane.layer_bases[p.first_layer + k];
  uint4* pool = reinterpret_cast<uint4*>(base + int64_t{p.page_ids[page]} * plane.page_bytes);
  uint4* staged =
      reinterpret_cast<uint4*>(p.staging + staged_index * p.staging_page_bytes + plane.offset);
  if (p.to_staging) {
    for (int64_t w = begin + threadIdx.x; w < end; w += kThreads) staged[w] = pool[w];
  } else {
    for (int64_t w = begin + threadIdx.x; w < end; w += kThreads) pool[w] = staged[w];
  }
}

}  // namespace

cudaError_t LaunchPageCopy(const PageCopyParams& p, cudaStream_t stream) {
  if (p.num_pages <= 0) return cudaSuccess;
  if (p.num_planes < 1 || p.num_planes > 2 || p.num_layers < 1 || p.first_layer < 0) {
    return cudaErrorInvalidValue;
  }
  for (int i = 0; i < p.num_planes; ++i) {
    const PagePlane& pl = p.planes[i];
    if (pl.layer_bases == nullptr) return cudaErrorInvalidValue;
    if (pl.page_bytes % kCopyBytes != 0 || pl.offset % kCopyBytes != 0) {
      return cudaErrorMisalignedAddress;
    }
  }
  if (p.staging_page_bytes % kCopyBytes != 0 ||
      reinterpret_cast<uintptr_t>(p.staging) % kCopyBytes != 0) {
    return cudaErrorMisalignedAddress;
  }
  const int64_t staged_pages = int64_t{p.num_layers} * p.num_pages;
  if (staged_pages > 0x7fffffff) return cudaErrorInvalidValue;  // gridDim.x
  // A 73,728-byte page is 4,608 words: split it so a few pages still fill the GPU.
  const int64_t words = p.planes[0].page_bytes / kCopyBytes;
  const int parts = static_cast<int>(
      std::max<int64_t>(1, std::min<int64_t>(kMaxPartsPerPage, words / (4 * kThreads))));
  dim3 grid(static_cast<unsigned>(staged_pages), p.num_planes, parts);
  PageCopyKernel<<<grid, kThreads, 0, stream>>>(p, parts);
  return cudaGetLastError();
}

}  // namespace mlaserve::kvtransfer::nccl
