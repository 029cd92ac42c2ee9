// merge_state CPU backend. Weights are computed once per (token, head) before any element
// is written, which is what makes out == out_a and lse == lse_a aliasing safe.
#include <cmath>
#include <limits>

#include "common/status.h"
#include "kernels/common/param_check.h"
#include "kernels/merge_state/api.h"

namespace mlaserve::kernels {

absl::Status MergeStateCpu(const MergeStateParams& p) {
  RETURN_IF_ERROR(RequireCpuF32("merge_state", "dtype", p.dtype));
  const auto* a = static_cast<const float*>(p.out_a);
  const auto* b = static_cast<const float*>(p.out_b);
  auto* out = static_cast<float*>(p.out);
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t t = 0; t < p.num_tokens; ++t) {
    for (int64_t h = 0; h < p.num_heads; ++h) {
      const int64_t li = t * p.num_heads + h;
      const float la = p.lse_a[li], lb = p.lse_b[li];
      const int64_t off = t * p.token_stride + h * p.head_dim;
      float* o = out + off;
      if (la == kNegInf && lb == kNegInf) {
        for (int d = 0; d < p.head_dim; ++d) o[d] = 0.0f;
        if (p.lse != nullptr) p.lse[li] = kNegInf;
        continue;
      }
      const float m = std::max(la, lb);
      const float wa = std::exp(la - m), wb = std::exp(lb - m);  // exp(-inf) = 0
      const float inv = 1.0f / (wa + wb);
      const float ca = wa * inv, cb = wb * inv;
      const float* ra = a + off;
      const float* rb = b + off;
      // A side with zero weight is not read at all: its output may be uninitialised.
      if (cb == 0.0f) {
        for (int d = 0; d < p.head_dim; ++d) o[d] = ra[d];
      } else if (ca == 0.0f) {
        for (int d = 0; d < p.head_dim; ++d) o[d] = rb[d];
      } else {
        for (int d = 0; d < p.head_dim; ++d) o[d] = ca * ra[d] + cb * rb[d];
      }
      if (p.lse != nullptr) p.lse[li] = m + std::log(wa + wb);
    }
  }
  return absl::OkStatus();
}

}  // namespace mlaserve::kernels
