// moe_shard: an expert-parallel rank's view of the routing (docs/parallel.md). The rank holds
// experts [expert_begin, expert_begin + local_experts) of the model's routed experts, stored as
// local experts 0..local_experts-1. Every assignment (token t, slot j) of the routing becomes
//   topk_ids[t, j] in the rank's range:  local_ids = topk_ids - expert_begin, weight kept;
//   otherwise:                           local_ids = kNotLocal (-1), weight 0,
// and kernels/moe's MoeExperts over the local stack skips the kNotLocal assignments (an id
// outside [0, num_experts) belongs to no expert there: no row in the permutation, the GEMMs or
// the combine), so it computes this rank's share of every token's sum over ~T*k/N rows, and
// the shares add up across ranks to the single-rank result.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/common/types.h"

namespace mlaserve::kernels {

// The local id of an assignment to another rank's expert.
inline constexpr int32_t kNotLocal = -1;

struct MoeLocalizeParams {
  int64_t num_assignments = 0;        // num_tokens * top_k
  int num_experts = 0;                // routed experts of the model
  int expert_begin = 0;
  int local_experts = 0;
  const int32_t* topk_ids = nullptr;      // [num_assignments]
  const float* topk_weights = nullptr;    // [num_assignments]
  int32_t* local_ids = nullptr;           // [num_assignments], in [0, local_experts) or kNotLocal
  float* local_weights = nullptr;         // [num_assignments]
};

absl::Status MoeLocalize(const MoeLocalizeParams& p, const KernelContext& ctx);
absl::Status MoeLocalizeCpu(const MoeLocalizeParams& p);
absl::Status MoeLocalizeCuda(const MoeLocalizeParams& p, void* stream);

}  // namespace mlaserve::kernels
