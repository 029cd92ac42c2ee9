// The formulas of kernels/common/activation.h's Activation, written once for both backends: the
// CPU backend's ActAndMul (kernels/activation/activation_ref.cc) and the CUDA kernels that apply
// an activation (kernels/activation/activation.cu, kernels/moe/moe_rows.cu, the MoE stream
// kernels through ActivateAt). f32 in, f32 out, as transformers 5.17 / torch 2.11 evaluate them
// in f32. Under nvcc they are __host__ __device__; the two sides call their own math library
// (glibc's expf / erff / tanhf / log1pf on the host, CUDA's on the device, each within 2 ulp),
// so the backends agree to a few f32 ulps,
// not bit for bit. Comparisons are written as the std::min / std::max / std::clamp they replace
// (a NaN gate propagates the same way), since those are not device functions.
//
// VisitActivation turns the runtime value into the template argument (a kernel per activation);
// ActivateAt switches at run time inside one kernel, for kernels that apply it once an output.
#pragma once

#include <math.h>

#include <type_traits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/common/activation.h"

#if defined(__CUDACC__)
#define MLASERVE_ACTIVATION_FN __host__ __device__ __forceinline__
#else
#define MLASERVE_ACTIVATION_FN inline
#endif

namespace mlaserve::kernels {

namespace activation_constants {
inline constexpr float kSqrtHalf = 0.70710678118654752440f;     // 1/sqrt(2): erf GELU
inline constexpr float kSqrt2OverPi = 0.79788456080286535588f;  // sqrt(2/pi): tanh GELU
inline constexpr float kGeluFastScale = 0.7978845608f;          // gelu_fast's literal sqrt(2/pi)
inline constexpr float kGeluCubic = 0.044715f;
inline constexpr float kQuickGeluScale = 1.702f;
inline constexpr float kGeluClip = 10.0f;                       // gelu_10: [-10, 10]
inline constexpr float kRelu6Cap = 6.0f;
inline constexpr float kLeakySlope = 0.01f;                     // nn.LeakyReLU's default
inline constexpr float kHardswishShift = 3.0f;
inline constexpr float kHardswishCap = 6.0f;
inline constexpr float kSoftplusThreshold = 20.0f;              // F.softplus's default
inline constexpr float kLaplaceMu = 0.707107f;
// laplace divides by sigma * sqrt(2), a Python double, rounded once to f32.
inline constexpr float kLaplaceScale = static_cast<float>(0.282095 * 1.41421356237309504880);
}  // namespace activation_constants

MLASERVE_ACTIVATION_FN float ActivationSigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
MLASERVE_ACTIVATION_FN float ActivationGeluErf(float x) {
  return x * 0.5f * (1.0f + erff(x * activation_constants::kSqrtHalf));
}

// act(g) for the activation A.
template <Activation A>
MLASERVE_ACTIVATION_FN float Activate(float g) {
  using namespace activation_constants;
  if constexpr (A == Activation::kSilu) {
    return g / (1.0f + expf(-g));
  } else if constexpr (A == Activation::kGelu) {
    return ActivationGeluErf(g);
  } else if constexpr (A == Activation::kGelu10) {
    const float v = ActivationGeluErf(g);  // std::clamp(v, -clip, clip)
    return v < -kGeluClip ? -kGeluClip : (kGeluClip < v ? kGeluClip : v);
  } else if constexpr (A == Activation::kGeluTanh) {
    const float inner = kSqrt2OverPi * (g + kGeluCubic * (g * g * g));
    return 0.5f * g * (1.0f + tanhf(inner));
  } else if constexpr (A == Activation::kGeluFast) {
    const float inner = g * kGeluFastScale * (1.0f + kGeluCubic * g * g);
    return 0.5f * g * (1.0f + tanhf(inner));
  } else if constexpr (A == Activation::kQuickGelu) {
    return g * ActivationSigmoid(kQuickGeluScale * g);
  } else if constexpr (A == Activation::kRelu) {
    return g > 0.0f ? g : 0.0f;
  } else if constexpr (A == Activation::kRelu2) {
    return g > 0.0f ? g * g : 0.0f;
  } else if constexpr (A == Activation::kRelu6) {
    const float v = g < 0.0f ? 0.0f : g;  // std::min(std::max(g, 0), cap)
    return kRelu6Cap < v ? kRelu6Cap : v;
  } else if constexpr (A == Activation::kLeakyRelu) {
    return g > 0.0f ? g : g * kLeakySlope;
  } else if constexpr (A == Activation::kHardswish) {
    float v = g + kHardswishShift;  // std::min(std::max(g + 3, 0), 6)
    v = v < 0.0f ? 0.0f : v;
    v = kHardswishCap < v ? kHardswishCap : v;
    return g * v / kHardswishCap;
  } else if constexpr (A == Activation::kSigmoid) {
    return ActivationSigmoid(g);
  } else if constexpr (A == Activation::kTanh) {
    return tanhf(g);
  } else if constexpr (A == Activation::kMish) {
    return g * tanhf(log1pf(expf(g)));
  } else if constexpr (A == Activation::kLinear) {
    return g;
  } else if constexpr (A == Activation::kLaplace) {
    return 0.5f * (1.0f + erff((g - kLaplaceMu) / kLaplaceScale));
  } else {
    static_assert(A == Activation::kSqrtSoftplus);
    return sqrtf(g > kSoftplusThreshold ? g : log1pf(expf(g)));
  }
}

// act(g) for an activation known only at run time, in a kernel that applies it once per output
// (the stream kernels' gate_up epilogue, moe_stream*.cu): one switch, uniform across a warp.
// A value that is no enumerator gives NaN (the launches check it first).
MLASERVE_ACTIVATION_FN float ActivateAt(Activation a, float g) {
  using A = Activation;
  switch (a) {
    case A::kSilu: return Activate<A::kSilu>(g);
    case A::kGelu: return Activate<A::kGelu>(g);
    case A::kGelu10: return Activate<A::kGelu10>(g);
    case A::kGeluTanh: return Activate<A::kGeluTanh>(g);
    case A::kGeluFast: return Activate<A::kGeluFast>(g);
    case A::kQuickGelu: return Activate<A::kQuickGelu>(g);
    case A::kRelu: return Activate<A::kRelu>(g);
    case A::kRelu2: return Activate<A::kRelu2>(g);
    case A::kRelu6: return Activate<A::kRelu6>(g);
    case A::kLeakyRelu: return Activate<A::kLeakyRelu>(g);
    case A::kHardswish: return Activate<A::kHardswish>(g);
    case A::kSigmoid: return Activate<A::kSigmoid>(g);
    case A::kTanh: return Activate<A::kTanh>(g);
    case A::kMish: return Activate<A::kMish>(g);
    case A::kLinear: return Activate<A::kLinear>(g);
    case A::kLaplace: return Activate<A::kLaplace>(g);
    case A::kSqrtSoftplus: return Activate<A::kSqrtSoftplus>(g);
  }
  return NAN;
}

// Calls run(std::integral_constant<Activation, a>{}) and returns its status; INVALID_ARGUMENT
// naming `family` and the value where `a` is no enumerator (a corrupt params struct).
template <typename Run>
absl::Status VisitActivation(const char* family, Activation a, Run&& run) {
  using A = Activation;
  switch (a) {
    case A::kSilu: return run(std::integral_constant<A, A::kSilu>{});
    case A::kGelu: return run(std::integral_constant<A, A::kGelu>{});
    case A::kGelu10: return run(std::integral_constant<A, A::kGelu10>{});
    case A::kGeluTanh: return run(std::integral_constant<A, A::kGeluTanh>{});
    case A::kGeluFast: return run(std::integral_constant<A, A::kGeluFast>{});
    case A::kQuickGelu: return run(std::integral_constant<A, A::kQuickGelu>{});
    case A::kRelu: return run(std::integral_constant<A, A::kRelu>{});
    case A::kRelu2: return run(std::integral_constant<A, A::kRelu2>{});
    case A::kRelu6: return run(std::integral_constant<A, A::kRelu6>{});
    case A::kLeakyRelu: return run(std::integral_constant<A, A::kLeakyRelu>{});
    case A::kHardswish: return run(std::integral_constant<A, A::kHardswish>{});
    case A::kSigmoid: return run(std::integral_constant<A, A::kSigmoid>{});
    case A::kTanh: return run(std::integral_constant<A, A::kTanh>{});
    case A::kMish: return run(std::integral_constant<A, A::kMish>{});
    case A::kLinear: return run(std::integral_constant<A, A::kLinear>{});
    case A::kLaplace: return run(std::integral_constant<A, A::kLaplace>{});
    case A::kSqrtSoftplus: return run(std::integral_constant<A, A::kSqrtSoftplus>{});
  }
  return absl::InvalidArgumentError(
      absl::StrCat(family, ": act=", static_cast<int>(a), " is not an Activation"));
}

}  // namespace mlaserve::kernels
