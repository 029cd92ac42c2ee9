// activation CPU backend: out = act(gate) * up in f32, each activation as transformers 5.17 /
// torch 2.11 evaluate it in f32 (the formulas: kernels/common/activation_math.h, shared with the
// CUDA kernels). One loop per activation (the function is a template argument), so the switch is
// outside the element loop.
#include "common/status.h"
#include "kernels/activation/api.h"
#include "kernels/common/activation_math.h"
#include "kernels/common/param_check.h"

namespace mlaserve::kernels {
namespace {

template <Activation A>
void Apply(const ActAndMulParams& p) {
  const auto* x = static_cast<const float*>(p.x);
  auto* out = static_cast<float*>(p.out);
  for (int r = 0; r < p.rows; ++r) {
    const float* gate = x + r * p.x_stride;
    const float* up = gate + p.dim;
    float* o = out + r * p.out_stride;
    for (int j = 0; j < p.dim; ++j) o[j] = Activate<A>(gate[j]) * up[j];
  }
}

}  // namespace

absl::Status ActAndMulCpu(const ActAndMulParams& p) {
  RETURN_IF_ERROR(RequireCpuF32("act_and_mul", "dtype", p.dtype));
  return VisitActivation("act_and_mul", p.act, [&](auto act) {
    Apply<decltype(act)::value>(p);
    return absl::OkStatus();
  });
}

}  // namespace mlaserve::kernels
