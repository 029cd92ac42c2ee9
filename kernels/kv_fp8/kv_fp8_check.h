// Internal to kv_fp8: the shape checks both backends and the dispatcher share.
#pragma once

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/kv_fp8/api.h"

namespace mlaserve::kernels::kv_fp8_internal {

inline absl::Status CheckFp8(Fp8CacheKind kind, int head_dim, int num_tokens, const void* cache,
                      const int64_t* slots, const void* rows, int64_t stride) {
  if (num_tokens < 0) return absl::InvalidArgumentError(absl::StrCat("kv_fp8: num_tokens=", num_tokens, " is negative"));
  if (kind == Fp8CacheKind::kIndexK && (head_dim <= 0 || head_dim % 16 != 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv_fp8: index key head_dim=", head_dim, " must be a positive multiple of 16"));
  }
  const int width = Fp8RowWidth(kind, head_dim);
  if (stride < width) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv_fp8: row stride ", stride, " is shorter than the row width ", width));
  }
  if (num_tokens > 0 && (cache == nullptr || slots == nullptr || rows == nullptr)) {
    return absl::InvalidArgumentError("kv_fp8: cache, slot_mapping and rows must be non-null");
  }
  return absl::OkStatus();
}

}  // namespace mlaserve::kernels::kv_fp8_internal
