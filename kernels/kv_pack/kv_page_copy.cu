// kv_page_copy CUDA backend: one block per (page, plane, part) moving 16-byte words (bytes
// when a plane's size or a pointer does not allow them), coalesced on both sides. A 73,728-byte
// latent page (576 bf16 x 64 tokens) is 4,608 words: it is cut into parts so that a batch of a
// few pages still spreads over the SMs. Bandwidth-bound: every byte is read and written once.
#include <algorithm>
#include <cstdint>

#include "kernels/common/cuda_util.cuh"
#include "kernels/kv_pack/api.h"

namespace mlaserve::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxParts = 8;

template <typename Word>
__global__ void __launch_bounds__(kThreads)
    KvPageCopyKernel(const __grid_constant__ KvPageCopyParams p, int64_t staged_page_bytes,
                     int parts) {
  const int page = blockIdx.x;
  const KvPagePlane& plane = p.planes[blockIdx.y];
  const int64_t offset = blockIdx.y == 0 ? 0 : p.planes[0].page_bytes;
  const int64_t words = plane.page_bytes / static_cast<int64_t>(sizeof(Word));
  const int64_t per_part = (words + parts - 1) / parts;
  const int64_t begin = blockIdx.z * per_part;
  const int64_t end = min(words, begin + per_part);
  Word* pooled = reinterpret_cast<Word*>(static_cast<uint8_t*>(plane.base) +
                                         int64_t{p.page_ids[page]} * plane.page_bytes);
  Word* staged = reinterpret_cast<Word*>(static_cast<uint8_t*>(p.staging) +
                                         page * staged_page_bytes + offset);
  if (p.to_staging) {
    for (int64_t w = begin + threadIdx.x; w < end; w += kThreads) staged[w] = pooled[w];
  } else {
    for (int64_t w = begin + threadIdx.x; w < end; w += kThreads) pooled[w] = staged[w];
  }
}

}  // namespace

absl::Status KvPageCopyCuda(const KvPageCopyParams& p, void* stream) {
  if (p.num_pages == 0) return absl::OkStatus();
  auto aligned = [](int64_t v) { return v % cuda::kChunkBytes == 0; };
  int64_t staged_page_bytes = 0;
  bool vec = aligned(reinterpret_cast<uintptr_t>(p.staging));
  for (int k = 0; k < p.num_planes; ++k) {
    staged_page_bytes += p.planes[k].page_bytes;
    vec = vec && aligned(p.planes[k].page_bytes) &&
          aligned(static_cast<int64_t>(reinterpret_cast<uintptr_t>(p.planes[k].base)));
  }
  const int64_t word = vec ? cuda::kChunkBytes : 1;
  const int64_t words = p.planes[0].page_bytes / word;
  const int parts = static_cast<int>(
      std::clamp<int64_t>(words / (4 * kThreads), 1, kMaxParts));
  const dim3 grid(p.num_pages, p.num_planes, parts);
  auto s = static_cast<cudaStream_t>(stream);
  if (vec) {
    KvPageCopyKernel<uint4><<<grid, kThreads, 0, s>>>(p, staged_page_bytes, parts);
  } else {
    KvPageCopyKernel<uint8_t><<<grid, kThreads, 0, s>>>(p, staged_page_bytes, parts);
  }
  return cuda::LaunchStatus("KvPageCopyKernel");
}

}  // namespace mlaserve::kernels
