// moe_shard CPU reference (also the CPU backend).
#include "kernels/moe_shard/api.h"

#include <cstring>

namespace mlaserve::kernels {

absl::Status MoeLocalizeCpu(const MoeLocalizeParams& p) {
  const int end = p.expert_begin + p.local_experts;
  for (int64_t a = 0; a < p.num_assignments; ++a) {
    const int32_t id = p.topk_ids[a];
    const bool local = id >= p.expert_begin && id < end;
    p.local_ids[a] = local ? id - p.expert_begin : kNotLocal;
    p.local_weights[a] = local ? p.topk_weights[a] : 0.0f;
  }
  return absl::OkStatus();
}

// f32 only (the CPU backend's activations; the dispatcher refuses others).
absl::Status MoeGatherRowsCpu(const MoeGatherRowsParams& p) {
  const auto* x = static_cast<const float*>(p.x);
  auto* out = static_cast<float*>(p.out);
  const size_t row_bytes = static_cast<size_t>(p.hidden) * sizeof(float);
  for (int64_t i = 0; i < p.num_rows; ++i) {
    std::memcpy(out + i * p.hidden, x + static_cast<int64_t>(p.rows[i]) * p.hidden, row_bytes);
  }
  return absl::OkStatus();
}

absl::Status MoeCombineRowsCpu(const MoeCombineRowsParams& p) {
  const auto* parts = static_cast<const float*>(p.parts);
  auto* out = static_cast<float*>(p.out);
  for (int t = 0; t < p.num_tokens; ++t) {
    float* o = out + static_cast<int64_t>(t) * p.hidden;
    std::memset(o, 0, static_cast<size_t>(p.hidden) * sizeof(float));
    for (int j = 0; j < p.num_sources; ++j) {
      const int32_t slot = p.slots[static_cast<int64_t>(t) * p.num_sources + j];
      if (slot < 0) continue;
      const float* src = parts + static_cast<int64_t>(slot) * p.hidden;
      for (int h = 0; h < p.hidden; ++h) o[h] += src[h];
    }
  }
  return absl::OkStatus();
}

}  // namespace mlaserve::kernels
