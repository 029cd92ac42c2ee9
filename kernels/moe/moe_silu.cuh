// SiLU(gate) * up of one feature, as every CUDA path of the routed experts computes it (f32, the
// same expression everywhere, so a fused and an unfused path give the same bits on the same
// bf16 inputs). Hugging Face: act_fn(gate_proj(x)) * up_proj(x) with act_fn = SiLU.
#pragma once

namespace mlaserve::kernels::moe_cuda {

__device__ __forceinline__ float SiluMul(float gate, float up) {
  return gate / (1.0f + expf(-gate)) * up;
}

}  // namespace mlaserve::kernels::moe_cuda
