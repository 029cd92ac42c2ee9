// moe_shard dispatcher: can-implement check, then the backend.
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/common/dispatch.h"
#include "kernels/common/param_check.h"
#include "kernels/moe_shard/api.h"

namespace mlaserve::kernels {

absl::Status MoeLocalize(const MoeLocalizeParams& p, const KernelContext& ctx) {
  RETURN_IF_ERROR(RequirePositive("num_experts", p.num_experts));
  RETURN_IF_ERROR(RequirePositive("local_experts", p.local_experts));
  if (p.expert_begin < 0 || p.expert_begin + p.local_experts > p.num_experts) {
    return absl::InvalidArgumentError(absl::StrCat(
        "moe_localize: experts [", p.expert_begin, ", ", p.expert_begin + p.local_experts,
        ") are not within the model's ", p.num_experts));
  }
  if (p.num_assignments < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("moe_localize: num_assignments is ", p.num_assignments));
  }
  if (p.num_assignments == 0) return absl::OkStatus();
  RETURN_IF_ERROR(RequireNonNull("topk_ids", p.topk_ids));
  RETURN_IF_ERROR(RequireNonNull("topk_weights", p.topk_weights));
  RETURN_IF_ERROR(RequireNonNull("local_ids", p.local_ids));
  RETURN_IF_ERROR(RequireNonNull("local_weights", p.local_weights));
  MLASERVE_DISPATCH("moe_shard", ctx, MoeLocalizeCpu(p), MoeLocalizeCuda(p, ctx.stream));
}

}  // namespace mlaserve::kernels
