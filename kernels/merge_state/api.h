// merge_state: combine two partial attention results over disjoint key sets by their LSE.
//   m = max(lse_a, lse_b); wa = exp(lse_a - m); wb = exp(lse_b - m)
//   out = (wa*out_a + wb*out_b) / (wa + wb);  lse = m + log(wa + wb)
// A side with lse = -inf contributes nothing (both -inf: out = 0, lse = -inf).
// out may alias out_a and lse may alias lse_a (in-place accumulation over prefix chunks).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/common/types.h"

namespace mlaserve::kernels {

struct MergeStateParams {
  DType dtype = DType::kF32;  // of out_a, out_b, out
  int num_tokens = 0;
  int num_heads = 0;
  int head_dim = 0;
  // [num_tokens, num_heads, head_dim] with the given token stride (head stride = head_dim).
  const void* out_a = nullptr;
  const void* out_b = nullptr;
  void* out = nullptr;
  int64_t token_stride = 0;
  const float* lse_a = nullptr;  // [num_tokens, num_heads]
  const float* lse_b = nullptr;
  float* lse = nullptr;          // may be null
};

absl::Status MergeState(const MergeStateParams& p, const KernelContext& ctx);
absl::Status MergeStateCpu(const MergeStateParams& p);
absl::Status MergeStateCuda(const MergeStateParams& p, void* stream);

}  // namespace mlaserve::kernels
