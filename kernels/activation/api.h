// activation: SiLU-and-mul, out = silu(gate) * up, with x = [gate | up] per row
// (the layout of HF's fused experts.gate_up_proj output, and of our packed dense MLP).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/common/types.h"

namespace mlaserve::kernels {

struct SiluAndMulParams {
  DType dtype = DType::kF32;
  int rows = 0;
  int dim = 0;               // output width; x rows hold 2*dim values
  const void* x = nullptr;   // [rows, 2*dim], row stride x_stride
  int64_t x_stride = 0;
  void* out = nullptr;       // [rows, dim], row stride out_stride
  int64_t out_stride = 0;
};

absl::Status SiluAndMul(const SiluAndMulParams& p, const KernelContext& ctx);
absl::Status SiluAndMulCpu(const SiluAndMulParams& p);
absl::Status SiluAndMulCuda(const SiluAndMulParams& p, void* stream);

}  // namespace mlaserve::kernels
