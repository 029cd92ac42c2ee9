// kv_page_copy CPU backend: one memcpy per (page, plane).
#include <cstdint>
#include <cstring>

#include "kernels/kv_pack/api.h"

namespace mlaserve::kernels {

absl::Status KvPageCopyCpu(const KvPageCopyParams& p) {
  int64_t staged_page_bytes = 0;
  for (int k = 0; k < p.num_planes; ++k) staged_page_bytes += p.planes[k].page_bytes;
  auto* staging = static_cast<uint8_t*>(p.staging);
  for (int i = 0; i < p.num_pages; ++i) {
    uint8_t* staged = staging + i * staged_page_bytes;
    for (int k = 0; k < p.num_planes; ++k) {
      const KvPagePlane& plane = p.planes[k];
      uint8_t* pooled = static_cast<uint8_t*>(plane.base) + p.page_ids[i] * plane.page_bytes;
      if (p.to_staging) {
        std::memcpy(staged, pooled, plane.page_bytes);
      } else {
        std::memcpy(pooled, staged, plane.page_bytes);
      }
      staged += plane.page_bytes;
    }
  }
  return absl::OkStatus();
}

}  // namespace mlaserve::kernels
