// Status helpers used across mlaserve host code.
//
// Host code returns absl::Status / absl::StatusOr<T>; exceptions never cross a library
// boundary. Codes carry retry meaning (clients see them as docs/api.md, "Errors", lists):
// peer down -> UNAVAILABLE, cache full -> RESOURCE_EXHAUSTED, bad request -> INVALID_ARGUMENT,
// incompatible peer -> FAILED_PRECONDITION, deadline -> DEADLINE_EXCEEDED.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

#define MLASERVE_CONCAT_INNER(a, b) a##b
#define MLASERVE_CONCAT(a, b) MLASERVE_CONCAT_INNER(a, b)

// RETURN_IF_ERROR(expr): evaluates an absl::Status expression and returns it on failure.
#define RETURN_IF_ERROR(expr)                          \
  do {                                                 \
    ::absl::Status _mlaserve_status = (expr);          \
    if (!_mlaserve_status.ok()) return _mlaserve_status; \
  } while (0)

// ASSIGN_OR_RETURN(lhs, expr): unwraps an absl::StatusOr<T> or returns its status.
#define ASSIGN_OR_RETURN(lhs, expr) \
  MLASERVE_ASSIGN_OR_RETURN_IMPL(MLASERVE_CONCAT(_mlaserve_statusor_, __LINE__), lhs, expr)
#define MLASERVE_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.ok()) return std::move(tmp).status();       \
  lhs = std::move(tmp).value()
