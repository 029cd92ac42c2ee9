// rope CPU backend: rotates pairs in place with the precomputed cos/sin table.
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/common/param_check.h"
#include "kernels/rope/api.h"

namespace mlaserve::kernels {

absl::Status RopeCpu(const RopeParams& p) {
  RETURN_IF_ERROR(RequireCpuF32("rope", "dtype", p.dtype));
  for (int t = 0; t < p.num_tokens; ++t) {
    if (p.positions[t] < 0 || p.positions[t] >= p.max_position) {
      return absl::InvalidArgumentError(absl::StrCat("rope: positions[", t, "]=", p.positions[t],
                                                     " is outside [0, max_position=",
                                                     p.max_position, ")"));
    }
  }
  auto* x = static_cast<float*>(p.x);
  const int half = p.rot_dim / 2;
  // Pair i is (x[2i], x[2i+1]) when interleaved, (x[i], x[i+half]) otherwise.
  const int first_step = p.interleaved ? 2 : 1;
  const int second_offset = p.interleaved ? 1 : half;
  for (int t = 0; t < p.num_tokens; ++t) {
    const float* cos = p.cos_sin + static_cast<int64_t>(p.positions[t]) * p.rot_dim;
    const float* sin = cos + half;
    for (int h = 0; h < p.num_heads; ++h) {
      float* v = x + t * p.token_stride + h * p.head_stride + p.offset;
      for (int i = 0; i < half; ++i) {
        float& a = v[i * first_step];
        float& b = v[i * first_step + second_offset];
        const float x0 = a, x1 = b;
        a = x0 * cos[i] - x1 * sin[i];
        b = x1 * cos[i] + x0 * sin[i];
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace mlaserve::kernels
