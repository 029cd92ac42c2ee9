// Activation: the elementwise function a gated MLP applies to its gate, out = act(gate) * up
// (Hugging Face's DeepseekV2/V3/V32 MLP and every expert: `ACT2FN[config.hidden_act]`).
//
// One enumerator per distinct formula; several of transformers' ACT2FN names map onto one
// (ActivationFromHfName is the one place that reads config.json's names). The formulas, in f32
// as transformers 5.17's activations.py and torch 2.11 evaluate them:
//   kSilu        silu, swish           x / (1 + exp(-x))
//   kGelu        gelu, gelu_python     x/2 (1 + erf(x / sqrt 2))
//   kGelu10      gelu_10               kGelu clipped to [-10, 10]
//   kGeluTanh    gelu_new, gelu_pytorch_tanh, gelu_python_tanh, gelu_accurate
//                                      x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
//   kGeluFast    gelu_fast             x/2 (1 + tanh(0.7978845608 x (1 + 0.044715 x^2)))
//   kQuickGelu   quick_gelu            x * sigmoid(1.702 x)
//   kRelu        relu                  max(x, 0)
//   kRelu2       relu2                 max(x, 0)^2
//   kRelu6       relu6                 min(max(x, 0), 6)
//   kLeakyRelu   leaky_relu            x > 0 ? x : 0.01 x (nn.LeakyReLU's default slope)
//   kHardswish   hardswish             x * min(max(x + 3, 0), 6) / 6
//   kSigmoid     sigmoid               1 / (1 + exp(-x))
//   kTanh        tanh                  tanh(x)
//   kMish        mish                  x * tanh(log(1 + exp(x)))
//   kLinear      linear                x
//   kLaplace     laplace               (1 + erf((x - 0.707107) / (0.282095 sqrt 2))) / 2
//   kSqrtSoftplus sqrtsoftplus         sqrt(softplus(x)), softplus = x past 20 (torch's threshold)
// ACT2FN's prelu and xielu carry learned parameters (no DeepSeek checkpoint stores them) and
// are refused, as is any other name.
//
// Below the kernel line: no model types. Both backends run every one (kernels/activation,
// kernels/moe; the formulas as code: activation_math.h). On CUDA the MoE stream kernels (decode)
// apply every activation in their gate_up pass; the GEMM epilogues (the small-M GEMM's, the
// Hopper grouped GEMM's) fuse SiLU only, and the other activations take the unfused form there:
// the product written whole, then an act-and-mul pass over it (one more read and write of the
// [rows, 2*inter] product).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace mlaserve::kernels {

enum class Activation : uint8_t {
  kSilu,
  kGelu,
  kGelu10,
  kGeluTanh,
  kGeluFast,
  kQuickGelu,
  kRelu,
  kRelu2,
  kRelu6,
  kLeakyRelu,
  kHardswish,
  kSigmoid,
  kTanh,
  kMish,
  kLinear,
  kLaplace,
  kSqrtSoftplus,
};

struct ActivationHfName {
  std::string_view name;
  Activation act;
};

// transformers 5.17's ACT2FN keys that are plain elementwise functions, in its order.
inline constexpr ActivationHfName kActivationHfNames[] = {
    {"gelu", Activation::kGelu},
    {"gelu_10", Activation::kGelu10},
    {"gelu_fast", Activation::kGeluFast},
    {"gelu_new", Activation::kGeluTanh},
    {"gelu_python", Activation::kGelu},
    {"gelu_pytorch_tanh", Activation::kGeluTanh},
    {"gelu_python_tanh", Activation::kGeluTanh},
    {"gelu_accurate", Activation::kGeluTanh},
    {"hardswish", Activation::kHardswish},
    {"laplace", Activation::kLaplace},
    {"leaky_relu", Activation::kLeakyRelu},
    {"linear", Activation::kLinear},
    {"mish", Activation::kMish},
    {"quick_gelu", Activation::kQuickGelu},
    {"relu", Activation::kRelu},
    {"relu2", Activation::kRelu2},
    {"relu6", Activation::kRelu6},
    {"sigmoid", Activation::kSigmoid},
    {"silu", Activation::kSilu},
    {"sqrtsoftplus", Activation::kSqrtSoftplus},
    {"swish", Activation::kSilu},
    {"tanh", Activation::kTanh},
};

// The name of `a` in messages: its first name in kActivationHfNames (silu for kSilu, gelu_new
// for the tanh GELU). The table's names are string literals, so data() ends in a NUL.
inline const char* ActivationName(Activation a) {
  for (const ActivationHfName& n : kActivationHfNames) {
    if (n.act == a) return n.name.data();
  }
  return "?";
}

// "gelu, gelu_10, ..., tanh": every name ActivationFromHfName accepts.
inline std::string SupportedActivationNames() {
  std::string names;
  for (const ActivationHfName& n : kActivationHfNames) {
    if (!names.empty()) names += ", ";
    names += n.name;
  }
  return names;
}

// config.json's hidden_act (a key of transformers' ACT2FN) as an Activation; INVALID_ARGUMENT
// naming the value and listing the supported names otherwise.
inline absl::StatusOr<Activation> ActivationFromHfName(std::string_view name) {
  for (const ActivationHfName& n : kActivationHfNames) {
    if (n.name == name) return n.act;
  }
  const bool learned = name == "prelu" || name == "xielu";
  return absl::InvalidArgumentError(absl::StrCat(
      "hidden_act '", std::string(name), "' is not supported",
      learned ? " (its activation has learned parameters, which DeepSeek checkpoints do not store)"
              : "",
      "; supported: ", SupportedActivationNames()));
}

}  // namespace mlaserve::kernels
