// rope dispatcher: can-implement check, then the backend.
#include "kernels/rope/api.h"

#include "common/status.h"
#include "kernels/common/dispatch.h"
#include "kernels/common/param_check.h"

namespace mlaserve::kernels {

absl::Status Rope(const RopeParams& p, const KernelContext& ctx) {
  RETURN_IF_ERROR(RequireNonNegative("num_tokens", p.num_tokens));
  RETURN_IF_ERROR(RequirePositive("num_heads", p.num_heads));
  RETURN_IF_ERROR(RequirePositive("rot_dim", p.rot_dim));
  if (p.rot_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("rope: rot_dim=", p.rot_dim, " must be even"));
  }
  RETURN_IF_ERROR(RequireNonNegative("offset", p.offset));
  RETURN_IF_ERROR(RequirePositive("max_position", p.max_position));
  if (p.num_tokens == 0) return absl::OkStatus();
  RETURN_IF_ERROR(RequireNonNull("x", p.x));
  RETURN_IF_ERROR(RequireNonNull("positions", p.positions));
  RETURN_IF_ERROR(RequireNonNull("cos_sin", p.cos_sin));
  if (p.num_heads > 1) {
    RETURN_IF_ERROR(RequireAtLeast("head_stride", p.head_stride, "offset+rot_dim",
                                   p.offset + p.rot_dim));
  }
  if (p.num_tokens > 1) {
    RETURN_IF_ERROR(RequireAtLeast("token_stride", p.token_stride,
                                   "(num_heads-1)*head_stride+offset+rot_dim",
                                   (p.num_heads - 1) * p.head_stride + p.offset + p.rot_dim));
  }
  MLASERVE_DISPATCH("rope", ctx, RopeCpu(p), RopeCuda(p, ctx.stream));
}

}  // namespace mlaserve::kernels
