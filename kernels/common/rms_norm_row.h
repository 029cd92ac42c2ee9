// The CPU form of one RMSNorm row (Hugging Face's DeepseekV*RMSNorm in f32, the sum of squares
// in double), shared by the norm family's reference and the rope family's fused latent norm
// (RopeParams::k_norm_weight), so both give the same bits.
#pragma once

#include <cmath>

namespace mlaserve::kernels {

// dst[j] = w[j] * (src[j] / sqrt(mean(src^2) + eps)) for j < dim; dst may alias src. The mean
// divides the sum of squares by real_dim (0: dim), the row's width before zero padding
// (kernels/norm's RmsNormParams::real_dim).
inline void RmsNormRowCpu(const float* src, const float* w, int dim, float eps, float* dst,
                          int real_dim = 0) {
  double sum_sq = 0;
  for (int j = 0; j < dim; ++j) sum_sq += static_cast<double>(src[j]) * src[j];
  const int mean_dim = real_dim > 0 ? real_dim : dim;
  const float inv = static_cast<float>(1.0 / std::sqrt(sum_sq / mean_dim + eps));
  for (int j = 0; j < dim; ++j) dst[j] = w[j] * (src[j] * inv);
}

}  // namespace mlaserve::kernels
