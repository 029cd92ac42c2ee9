// Validation helpers for the dispatchers' can-implement checks (kernels/<family>/<family>.cc).
//
// Each returns OK or INVALID_ARGUMENT with a message that names the offending field and its
// value ("head_dim_qk=0 must be > 0"), so a caller can act on it. Use with RETURN_IF_ERROR.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/common/types.h"

namespace mlaserve::kernels {

inline absl::Status RequirePositive(const char* name, int64_t v) {
  if (v > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(name, "=", v, " must be > 0"));
}

inline absl::Status RequireNonNegative(const char* name, int64_t v) {
  if (v >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(name, "=", v, " must be >= 0"));
}

inline absl::Status RequireNonNull(const char* name, const void* ptr) {
  if (ptr != nullptr) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(name, " is null"));
}

// v >= bound, e.g. RequireAtLeast("lda", lda, "k", k): "lda=3 must be >= k=4".
inline absl::Status RequireAtLeast(const char* name, int64_t v, const char* bound_name,
                                   int64_t bound) {
  if (v >= bound) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(name, "=", v, " must be >= ", bound_name, "=", bound));
}

// The CPU backend computes in f32 only.
inline absl::Status RequireCpuF32(const char* family, const char* name, DType t) {
  if (t == DType::kF32) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(family, ": the CPU backend supports ", name,
                                                 "=f32 only, got ", name, "=", DTypeName(t)));
}

}  // namespace mlaserve::kernels
