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

namespace {

absl::Status CheckRowsDType(const char* what, DType dtype, const KernelContext& ctx) {
  if (dtype == DType::kF32 || (dtype == DType::kBF16 && ctx.backend == Backend::kCuda)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(what, ": dtype ", DTypeName(dtype),
                                                 " is not f32 (or bf16 on CUDA)"));
}

}  // namespace

absl::Status MoeGatherRows(const MoeGatherRowsParams& p, const KernelContext& ctx) {
  RETURN_IF_ERROR(CheckRowsDType("moe_gather_rows", p.dtype, ctx));
  RETURN_IF_ERROR(RequirePositive("hidden", p.hidden));
  if (p.num_rows < 0) {
    return absl::InvalidArgumentError(absl::StrCat("moe_gather_rows: num_rows is ", p.num_rows));
  }
  if (p.num_rows == 0) return absl::OkStatus();
  RETURN_IF_ERROR(RequireNonNull("x", p.x));
  RETURN_IF_ERROR(RequireNonNull("rows", p.rows));
  RETURN_IF_ERROR(RequireNonNull("out", p.out));
  MLASERVE_DISPATCH("moe_shard", ctx, MoeGatherRowsCpu(p), MoeGatherRowsCuda(p, ctx.stream));
}

absl::Status MoeCombineRows(const MoeCombineRowsParams& p, const KernelContext& ctx) {
  RETURN_IF_ERROR(CheckRowsDType("moe_combine_rows", p.dtype, ctx));
  RETURN_IF_ERROR(RequirePositive("hidden", p.hidden));
  RETURN_IF_ERROR(RequirePositive("num_sources", p.num_sources));
  if (p.num_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("moe_combine_rows: num_tokens is ", p.num_tokens));
  }
  if (p.num_tokens == 0) return absl::OkStatus();
  RETURN_IF_ERROR(RequireNonNull("slots", p.slots));
  RETURN_IF_ERROR(RequireNonNull("out", p.out));
  MLASERVE_DISPATCH("moe_shard", ctx, MoeCombineRowsCpu(p), MoeCombineRowsCuda(p, ctx.stream));
}

absl::Status MoeDispatchFixed(const MoeDispatchFixedParams& p, const KernelContext& ctx) {
  RETURN_IF_ERROR(CheckRowsDType("moe_dispatch_fixed", p.dtype, ctx));
  RETURN_IF_ERROR(RequirePositive("hidden", p.hidden));
  RETURN_IF_ERROR(RequirePositive("top_k", p.top_k));
  RETURN_IF_ERROR(RequirePositive("num_ranks", p.num_ranks));
  RETURN_IF_ERROR(RequirePositive("experts_per_rank", p.experts_per_rank));
  RETURN_IF_ERROR(RequirePositive("capacity", p.capacity));
  if (p.num_tokens < 0 || p.num_tokens > p.capacity) {
    return absl::InvalidArgumentError(absl::StrCat(
        "moe_dispatch_fixed: ", p.num_tokens, " tokens do not fit blocks of ", p.capacity,
        " rows (a token reaches a rank at most once, so capacity >= tokens)"));
  }
  RETURN_IF_ERROR(RequireNonNull("send_rows", p.send_rows));
  RETURN_IF_ERROR(RequireNonNull("send_meta", p.send_meta));
  RETURN_IF_ERROR(RequireNonNull("row_tokens", p.row_tokens));
  if (p.num_tokens > 0) {
    RETURN_IF_ERROR(RequireNonNull("x", p.x));
    RETURN_IF_ERROR(RequireNonNull("topk_ids", p.topk_ids));
    RETURN_IF_ERROR(RequireNonNull("topk_weights", p.topk_weights));
    RETURN_IF_ERROR(RequireNonNull("slots", p.slots));
  }
  MLASERVE_DISPATCH("moe_shard", ctx, MoeDispatchFixedCpu(p), MoeDispatchFixedCuda(p, ctx.stream));
}

absl::Status MoeUnpackMeta(const MoeUnpackMetaParams& p, const KernelContext& ctx) {
  RETURN_IF_ERROR(RequirePositive("top_k", p.top_k));
  if (p.num_rows < 0) {
    return absl::InvalidArgumentError(absl::StrCat("moe_unpack_meta: num_rows is ", p.num_rows));
  }
  if (p.num_rows == 0) return absl::OkStatus();
  RETURN_IF_ERROR(RequireNonNull("meta", p.meta));
  RETURN_IF_ERROR(RequireNonNull("ids", p.ids));
  RETURN_IF_ERROR(RequireNonNull("weights", p.weights));
  MLASERVE_DISPATCH("moe_shard", ctx, MoeUnpackMetaCpu(p), MoeUnpackMetaCuda(p, ctx.stream));
}

}  // namespace mlaserve::kernels
