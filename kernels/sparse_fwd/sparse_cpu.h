// Internal to the sparse families: shape checks shared by sparse_fwd and sparse_decode, and
// the CPU implementation both call (sparse_fwd_ref.cc).
#pragma once

#include "absl/status/status.h"
#include "kernels/sparse_fwd/api.h"

namespace mlaserve::kernels::sparse_internal {

// Dispatcher checks (shapes, pointers); family names the caller in messages.
absl::Status CheckSparseShape(const SparseMlaParams& p, const char* family);

// CPU backend; max_lq bounds the queries per request (sparse_decode: 2).
absl::Status SparseMlaCpu(const SparseMlaParams& p, const char* family, int max_lq);

}  // namespace mlaserve::kernels::sparse_internal
