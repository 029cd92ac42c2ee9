// kv_pack dispatcher: can-implement check, then the backend.
#include "kernels/kv_pack/api.h"

#include "common/status.h"
#include "kernels/common/dispatch.h"
#include "kernels/common/param_check.h"

namespace mlaserve::kernels {

absl::Status KvPack(const KvPackParams& p, const KernelContext& ctx) {
  RETURN_IF_ERROR(RequireNonNegative("num_tokens", p.num_tokens));
  RETURN_IF_ERROR(RequirePositive("num_heads", p.num_heads));
  RETURN_IF_ERROR(RequirePositive("nope_dim", p.nope_dim));
  RETURN_IF_ERROR(RequirePositive("rope_dim", p.rope_dim));
  RETURN_IF_ERROR(RequirePositive("v_dim", p.v_dim));
  if (p.num_tokens == 0) return absl::OkStatus();
  RETURN_IF_ERROR(RequireNonNull("kv", p.kv));
  RETURN_IF_ERROR(RequireNonNull("k_pe", p.k_pe));
  RETURN_IF_ERROR(RequireNonNull("k", p.k));
  RETURN_IF_ERROR(RequireAtLeast("k_pe_stride", p.k_pe_stride, "rope_dim", p.rope_dim));
  MLASERVE_DISPATCH("kv_pack", ctx, KvPackCpu(p), KvPackCuda(p, ctx.stream));
}

}  // namespace mlaserve::kernels
