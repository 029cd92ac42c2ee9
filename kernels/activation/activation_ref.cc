// activation CPU backend: out = act(gate) * up in f32, each activation as transformers 5.17 /
// torch 2.11 evaluate it in f32 (kernels/common/activation.h lists the formulas). One loop per
// activation (the function is a template argument), so the switch is outside the element loop.
#include <algorithm>
#include <cmath>

#include "common/status.h"
#include "kernels/activation/api.h"
#include "kernels/common/param_check.h"

namespace mlaserve::kernels {
namespace {

constexpr float kSqrtHalf = 0.70710678118654752440f;         // 1/sqrt(2): erf GELU
constexpr float kSqrt2OverPi = 0.79788456080286535588f;      // sqrt(2/pi): tanh GELU
constexpr float kGeluFastScale = 0.7978845608f;              // gelu_fast's literal sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;
constexpr float kQuickGeluScale = 1.702f;
constexpr float kGeluClip = 10.0f;                           // gelu_10: [-10, 10]
constexpr float kRelu6Cap = 6.0f;
constexpr float kLeakySlope = 0.01f;                         // nn.LeakyReLU's default
constexpr float kSoftplusThreshold = 20.0f;                  // F.softplus's default
constexpr float kLaplaceMu = 0.707107f;
// laplace divides by sigma * sqrt(2), a Python double, rounded once to f32.
constexpr float kLaplaceScale = static_cast<float>(0.282095 * 1.41421356237309504880);

float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float GeluErf(float x) { return x * 0.5f * (1.0f + std::erf(x * kSqrtHalf)); }

template <typename Act>
void Apply(const ActAndMulParams& p, Act act) {
  const auto* x = static_cast<const float*>(p.x);
  auto* out = static_cast<float*>(p.out);
  for (int r = 0; r < p.rows; ++r) {
    const float* gate = x + r * p.x_stride;
    const float* up = gate + p.dim;
    float* o = out + r * p.out_stride;
    for (int j = 0; j < p.dim; ++j) o[j] = act(gate[j]) * up[j];
  }
}

}  // namespace

absl::Status ActAndMulCpu(const ActAndMulParams& p) {
  RETURN_IF_ERROR(RequireCpuF32("act_and_mul", "dtype", p.dtype));
  switch (p.act) {
    case Activation::kSilu:
      Apply(p, [](float g) { return g / (1.0f + std::exp(-g)); });
      break;
    case Activation::kGelu:
      Apply(p, GeluErf);
      break;
    case Activation::kGelu10:
      Apply(p, [](float g) { return std::clamp(GeluErf(g), -kGeluClip, kGeluClip); });
      break;
    case Activation::kGeluTanh:
      Apply(p, [](float g) {
        const float inner = kSqrt2OverPi * (g + kGeluCubic * (g * g * g));
        return 0.5f * g * (1.0f + std::tanh(inner));
      });
      break;
    case Activation::kGeluFast:
      Apply(p, [](float g) {
        const float inner = g * kGeluFastScale * (1.0f + kGeluCubic * g * g);
        return 0.5f * g * (1.0f + std::tanh(inner));
      });
      break;
    case Activation::kQuickGelu:
      Apply(p, [](float g) { return g * Sigmoid(kQuickGeluScale * g); });
      break;
    case Activation::kRelu:
      Apply(p, [](float g) { return g > 0.0f ? g : 0.0f; });
      break;
    case Activation::kRelu2:
      Apply(p, [](float g) { return g > 0.0f ? g * g : 0.0f; });
      break;
    case Activation::kRelu6:
      Apply(p, [](float g) { return std::min(std::max(g, 0.0f), kRelu6Cap); });
      break;
    case Activation::kLeakyRelu:
      Apply(p, [](float g) { return g > 0.0f ? g : g * kLeakySlope; });
      break;
    case Activation::kHardswish:
      Apply(p, [](float g) { return g * std::min(std::max(g + 3.0f, 0.0f), 6.0f) / 6.0f; });
      break;
    case Activation::kSigmoid:
      Apply(p, Sigmoid);
      break;
    case Activation::kTanh:
      Apply(p, [](float g) { return std::tanh(g); });
      break;
    case Activation::kMish:
      Apply(p, [](float g) { return g * std::tanh(std::log1p(std::exp(g))); });
      break;
    case Activation::kLinear:
      Apply(p, [](float g) { return g; });
      break;
    case Activation::kLaplace:
      Apply(p, [](float g) { return 0.5f * (1.0f + std::erf((g - kLaplaceMu) / kLaplaceScale)); });
      break;
    case Activation::kSqrtSoftplus:
      Apply(p, [](float g) {
        return std::sqrt(g > kSoftplusThreshold ? g : std::log1p(std::exp(g)));
      });
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "act_and_mul: act=", static_cast<int>(p.act), " is not an Activation"));
  }
  return absl::OkStatus();
}

}  // namespace mlaserve::kernels
