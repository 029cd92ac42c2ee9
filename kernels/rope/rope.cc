// rope dispatcher: can-implement check, then the backend.
#include "kernels/rope/api.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/common/dispatch.h"
#include "kernels/common/param_check.h"

namespace mlaserve::kernels {
namespace {

// The rotated slices of a [tokens, heads, ...] tensor fit its strides.
absl::Status CheckStrides(const char* what, int tokens, int heads, int64_t token_stride,
                          int64_t head_stride, int offset, int rot_dim) {
  RETURN_IF_ERROR(RequireNonNegative(absl::StrCat(what, "offset").c_str(), offset));
  if (heads > 1) {
    RETURN_IF_ERROR(RequireAtLeast(absl::StrCat(what, "head_stride").c_str(), head_stride,
                                   "offset+rot_dim", offset + rot_dim));
  }
  if (tokens > 1) {
    RETURN_IF_ERROR(RequireAtLeast(absl::StrCat(what, "token_stride").c_str(), token_stride,
                                   "(heads-1)*head_stride+offset+rot_dim",
                                   (heads - 1) * head_stride + offset + rot_dim));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Rope(const RopeParams& p, const KernelContext& ctx) {
  RETURN_IF_ERROR(RequireNonNegative("num_tokens", p.num_tokens));
  RETURN_IF_ERROR(RequirePositive("num_heads", p.num_heads));
  RETURN_IF_ERROR(RequirePositive("rot_dim", p.rot_dim));
  if (p.rot_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("rope: rot_dim=", p.rot_dim, " must be even"));
  }
  RETURN_IF_ERROR(RequirePositive("max_position", p.max_position));
  if (p.num_tokens == 0) return absl::OkStatus();
  RETURN_IF_ERROR(RequireNonNull("x", p.x));
  RETURN_IF_ERROR(RequireNonNull("positions", p.positions));
  RETURN_IF_ERROR(RequireNonNull("cos_sin", p.cos_sin));
  RETURN_IF_ERROR(CheckStrides("", p.num_tokens, p.num_heads, p.token_stride, p.head_stride,
                               p.offset, p.rot_dim));
  if (p.k_norm_weight != nullptr) {
    if (p.k == nullptr || p.k_heads != 1 || p.k_norm_dim <= 0 || p.k_norm_dim > p.k_offset ||
        !(p.k_norm_eps >= 0.0f)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rope: the fused norm of k takes one k head, 0 < k_norm_dim <= k_offset and eps >= 0 (got "
          "k_heads=", p.k_heads, ", k_norm_dim=", p.k_norm_dim, ", k_offset=", p.k_offset,
          ", k_norm_eps=", p.k_norm_eps, ")"));
    }
  }
  if (p.cache != nullptr) {
    if (p.k_norm_weight == nullptr || p.slot_mapping == nullptr || p.cache_entry_dim <= 0 ||
        p.cache_entry_dim > p.k_token_stride || p.cache_slots < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rope: the fused cache store takes the fused norm, a slot_mapping, 0 < cache_entry_dim "
          "<= k_token_stride and cache_slots >= 0 (got k_norm_weight ",
          p.k_norm_weight == nullptr ? "null" : "set", ", slot_mapping ",
          p.slot_mapping == nullptr ? "null" : "set", ", cache_entry_dim=", p.cache_entry_dim,
          ", k_token_stride=", p.k_token_stride, ", cache_slots=", p.cache_slots, ")"));
    }
  }
  if (p.k != nullptr) {
    RETURN_IF_ERROR(RequirePositive("k_heads", p.k_heads));
    RETURN_IF_ERROR(CheckStrides("k_", p.num_tokens, p.k_heads, p.k_token_stride,
                                 p.k_head_stride, p.k_offset, p.rot_dim));
  }
  if (p.out != nullptr) {
    RETURN_IF_ERROR(CheckStrides("out_", p.num_tokens, p.num_heads, p.out_token_stride,
                                 p.out_head_stride, p.out_offset, p.rot_dim));
  }
  if (p.absorb_w != nullptr) {
    if (p.out == nullptr || p.k_norm_weight == nullptr || p.absorb_n <= 0 || p.absorb_k <= 0 ||
        p.absorb_k > p.offset || p.absorb_n > p.out_offset) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rope: the fused absorbed query takes `out`, the fused norm, 0 < absorb_k <= offset and "
          "0 < absorb_n <= out_offset (got out ", p.out == nullptr ? "null" : "set",
          ", k_norm_weight ", p.k_norm_weight == nullptr ? "null" : "set", ", absorb_k=",
          p.absorb_k, ", offset=", p.offset, ", absorb_n=", p.absorb_n, ", out_offset=",
          p.out_offset, ")"));
    }
    if (ctx.backend == Backend::kCuda && !RopeAbsorbSupported(p.dtype, p.num_tokens, p.absorb_k)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rope: the CUDA backend's fused absorbed query takes bf16, at most ",
          kRopeAbsorbMaxTokens, " tokens and absorb_k a multiple of 8 up to 256 (got dtype=",
          DTypeName(p.dtype), ", num_tokens=", p.num_tokens, ", absorb_k=", p.absorb_k, ")"));
    }
  }
  MLASERVE_DISPATCH("rope", ctx, RopeCpu(p), RopeCuda(p, ctx.stream));
}

bool RopeAbsorbSupported(DType dtype, int num_tokens, int absorb_k) {
  return dtype == DType::kBF16 && num_tokens <= kRopeAbsorbMaxTokens && absorb_k > 0 &&
         absorb_k % 8 == 0 && absorb_k <= 256;
}

}  // namespace mlaserve::kernels
