// kv_pack CPU backend: per (token, head) two row copies into K and one into V.
#include <cstring>

#include "common/status.h"
#include "kernels/common/param_check.h"
#include "kernels/kv_pack/api.h"

namespace mlaserve::kernels {

absl::Status KvPackCpu(const KvPackParams& p) {
  RETURN_IF_ERROR(RequireCpuF32("kv_pack", "dtype", p.dtype));
  const auto* kv = static_cast<const float*>(p.kv);
  const auto* k_pe = static_cast<const float*>(p.k_pe);
  auto* k = static_cast<float*>(p.k);
  auto* v = static_cast<float*>(p.v);
  const int kv_width = p.nope_dim + p.v_dim;
  const int k_width = p.nope_dim + p.rope_dim;
  for (int64_t t = 0; t < p.num_tokens; ++t) {
    const float* pe = k_pe + t * p.k_pe_stride;
    for (int64_t h = 0; h < p.num_heads; ++h) {
      const float* src = kv + (t * p.num_heads + h) * kv_width;
      float* kd = k + (t * p.num_heads + h) * k_width;
      std::memcpy(kd, src, sizeof(float) * p.nope_dim);
      std::memcpy(kd + p.nope_dim, pe, sizeof(float) * p.rope_dim);
      if (v != nullptr) {
        std::memcpy(v + (t * p.num_heads + h) * p.v_dim, src + p.nope_dim,
                    sizeof(float) * p.v_dim);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace mlaserve::kernels
