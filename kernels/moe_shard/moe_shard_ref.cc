// moe_shard CPU reference (also the CPU backend).
#include "kernels/moe_shard/api.h"

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

}  // namespace mlaserve::kernels
