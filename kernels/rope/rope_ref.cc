// rope CPU backend: rotates pairs in place with the precomputed cos/sin table.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/common/param_check.h"
#include "kernels/common/rms_norm_row.h"
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
  const int half = p.rot_dim / 2;
  // Pair i is (x[2i], x[2i+1]) when interleaved, (x[i], x[i+half]) otherwise.
  const int first_step = p.interleaved ? 2 : 1;
  const int second_offset = p.interleaved ? 1 : half;
  // Rotates the slice at src into dst (the same place, or another tensor's).
  auto rotate = [&](const float* cos, const float* src, float* dst) {
    const float* sin = cos + half;
    for (int i = 0; i < half; ++i) {
      const float x0 = src[i * first_step], x1 = src[i * first_step + second_offset];
      dst[i * first_step] = x0 * cos[i] - x1 * sin[i];
      dst[i * first_step + second_offset] = x1 * cos[i] + x0 * sin[i];
    }
  };
  auto* x = static_cast<float*>(p.x);
  auto* out = static_cast<float*>(p.out);
  auto* k = static_cast<float*>(p.k);
  for (int t = 0; t < p.num_tokens; ++t) {
    const float* cos = p.cos_sin + static_cast<int64_t>(p.positions[t]) * p.rot_dim;
    for (int h = 0; h < p.num_heads; ++h) {
      const float* src = x + t * p.token_stride + h * p.head_stride + p.offset;
      float* dst = out != nullptr ? out + t * p.out_token_stride + h * p.out_head_stride + p.out_offset
                                  : x + t * p.token_stride + h * p.head_stride + p.offset;
      rotate(cos, src, dst);
      if (p.absorb_w != nullptr) {  // the absorbed query's latent part (out is set)
        const float* xn = x + t * p.token_stride + h * p.head_stride;
        const float* wh = static_cast<const float*>(p.absorb_w) + static_cast<int64_t>(h) * p.absorb_n * p.absorb_k;
        float* o = out + t * p.out_token_stride + h * p.out_head_stride;
        for (int j = 0; j < p.absorb_n; ++j) {
          float sum = 0.0f;
          for (int i = 0; i < p.absorb_k; ++i) sum += xn[i] * wh[static_cast<int64_t>(j) * p.absorb_k + i];
          o[j] = sum;
        }
      }
    }
    if (p.k_norm_weight != nullptr) {
      float* row = k + t * p.k_token_stride;
      RmsNormRowCpu(row, static_cast<const float*>(p.k_norm_weight), p.k_norm_dim, p.k_norm_eps, row);
    }
    for (int h = 0; k != nullptr && h < p.k_heads; ++h) {
      float* v = k + t * p.k_token_stride + h * p.k_head_stride + p.k_offset;
      rotate(cos, v, v);
    }
    const int64_t slot = p.cache != nullptr ? p.slot_mapping[t] : -1;
    if (slot >= 0 && slot < p.cache_slots) {
      const float* row = k + t * p.k_token_stride;
      std::copy(row, row + p.cache_entry_dim, static_cast<float*>(p.cache) + slot * p.cache_entry_dim);
    }
  }
  return absl::OkStatus();
}

}  // namespace mlaserve::kernels
