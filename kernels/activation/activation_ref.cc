// activation CPU backend: out = silu(gate) * up, silu(g) = g * sigmoid(g), in f32 like HF.
#include <cmath>

#include "common/status.h"
#include "kernels/activation/api.h"
#include "kernels/common/param_check.h"

namespace mlaserve::kernels {

absl::Status SiluAndMulCpu(const SiluAndMulParams& p) {
  RETURN_IF_ERROR(RequireCpuF32("silu_and_mul", "dtype", p.dtype));
  const auto* x = static_cast<const float*>(p.x);
  auto* out = static_cast<float*>(p.out);
  for (int r = 0; r < p.rows; ++r) {
    const float* gate = x + r * p.x_stride;
    const float* up = gate + p.dim;
    float* o = out + r * p.out_stride;
    for (int j = 0; j < p.dim; ++j) {
      const float g = gate[j];
      o[j] = g / (1.0f + std::exp(-g)) * up[j];
    }
  }
  return absl::OkStatus();
}

}  // namespace mlaserve::kernels
