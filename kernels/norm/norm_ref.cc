// norm CPU backend. Row statistics are accumulated in double (HF computes them in f32 with
// torch's cascaded sums; double keeps us at least as close to the exact value).
#include <cmath>

#include "common/status.h"
#include "kernels/common/param_check.h"
#include "kernels/common/rms_norm_row.h"
#include "kernels/norm/api.h"

namespace mlaserve::kernels {

absl::Status RmsNormCpu(const RmsNormParams& p) {
  RETURN_IF_ERROR(RequireCpuF32("rmsnorm", "dtype", p.dtype));
  const auto* x = static_cast<const float*>(p.x);
  auto* residual = static_cast<float*>(p.residual);
  const auto* w = static_cast<const float*>(p.weight);
  auto* y = static_cast<float*>(p.y);
  for (int r = 0; r < p.rows; ++r) {
    const float* xr = x + r * p.x_stride;
    float* yr = y + r * p.y_stride;
    // With the fused residual the normalised value is the updated residual row. The residual
    // is written before y, so y may alias x.
    const float* src = xr;
    if (residual != nullptr) {
      float* rr = residual + static_cast<int64_t>(r) * p.dim;
      for (int j = 0; j < p.dim; ++j) rr[j] += xr[j];
      src = rr;
    }
    RmsNormRowCpu(src, w, p.dim, p.eps, yr, p.real_dim);
  }
  return absl::OkStatus();
}

absl::Status LayerNormCpu(const LayerNormParams& p) {
  RETURN_IF_ERROR(RequireCpuF32("layernorm", "dtype", p.dtype));
  const auto* x = static_cast<const float*>(p.x);
  const auto* w = static_cast<const float*>(p.weight);
  const auto* b = static_cast<const float*>(p.bias);
  auto* y = static_cast<float*>(p.y);
  for (int r = 0; r < p.rows; ++r) {
    const float* xr = x + r * p.x_stride;
    float* yr = y + r * p.y_stride;
    double sum = 0;
    for (int j = 0; j < p.dim; ++j) sum += xr[j];
    const double mean = sum / p.dim;
    double var = 0;
    for (int j = 0; j < p.dim; ++j) var += (xr[j] - mean) * (xr[j] - mean);
    var /= p.dim;
    const double inv = 1.0 / std::sqrt(var + p.eps);
    for (int j = 0; j < p.dim; ++j) {
      const double v = (xr[j] - mean) * inv * w[j] + (b != nullptr ? b[j] : 0.0);
      yr[j] = static_cast<float>(v);
    }
  }
  return absl::OkStatus();
}

}  // namespace mlaserve::kernels
