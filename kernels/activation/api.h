// activation: act-and-mul, out = act(gate) * up, with x = [gate | up] per row (the layout of
// HF's fused experts.gate_up_proj output, and of our packed dense MLP). `act` is one of
// kernels/common/activation.h's elementwise functions (formulas: activation_math.h, one source for
// both backends).
// CPU: every activation, in f32. CUDA: every activation, bf16 or f32 in and out, f32 math (one
// kernel templated on the activation); the GEMM epilogues that
// fuse this op (kernels/gemm's kSiluMul, kernels/moe's grouped and stream kernels) compute SiLU
// only, so callers with another activation run the product, then this.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/common/activation.h"
#include "kernels/common/types.h"

namespace mlaserve::kernels {

struct ActAndMulParams {
  DType dtype = DType::kF32;
  int rows = 0;
  int dim = 0;               // output width; x rows hold 2*dim values
  const void* x = nullptr;   // [rows, 2*dim], row stride x_stride
  int64_t x_stride = 0;
  void* out = nullptr;       // [rows, dim], row stride out_stride; may alias the gate half of x
  int64_t out_stride = 0;
  Activation act = Activation::kSilu;
};

absl::Status ActAndMul(const ActAndMulParams& p, const KernelContext& ctx);
absl::Status ActAndMulCpu(const ActAndMulParams& p);
absl::Status ActAndMulCuda(const ActAndMulParams& p, void* stream);
absl::Status SiluAndMulCuda(const ActAndMulParams& p, void* stream);  // p.act is kSilu

// SiLU-and-mul under its first name (the CUDA benchmarks and tests call it): ActAndMul with
// act = kSilu whatever p.act says.
using SiluAndMulParams = ActAndMulParams;
inline absl::Status SiluAndMul(SiluAndMulParams p, const KernelContext& ctx) {
  p.act = Activation::kSilu;
  return ActAndMul(p, ctx);
}

}  // namespace mlaserve::kernels
