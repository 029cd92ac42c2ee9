// SiLU(gate) * up for GEMM epilogues: the same bits as SiluMul (moe_silu.cuh:
// gate / (1 + expf(-gate)) * up, IEEE division) without its branch.
//
// The compiler's IEEE f32 division is a reciprocal estimate refined by Newton steps (FMAs)
// plus a check (FCHK) that sends operands outside a safe range to a slow subroutine. The
// branch around that call splits an epilogue into one basic block per value, so the 64 values
// of a thread run one after another at full latency (ex2 -> rcp -> FMA chain): in the 128 x 256
// cooperative tile, whose epilogue no other warp group hides, that made the fused gate_up
// GEMM ~20% slower than the unfused one. SiluMulFast runs the same refinement branch-free.
// Where it is exact: the denominator d = 1 + expf(-gate) is in [1, 2^93) for gate >= -64, so
// 1/d, gate/d and the residual stay normal (or, for tiny gates, where d is exactly 2, the
// quotient gate/2 is exact even as a denormal); the sign of a zero quotient is restored with
// copysign. Outside (gate < -64, +-inf, NaN) callers recompute with SiluMul: they track the
// smallest and largest gate they saw (SiluFastCovers), which costs two min/max per value
// instead of a range test. moe_gemm_sm90_cuda_test.cu checks the bits against SiluMul for
// every bf16 gate value (gates are rounded to bf16 before the SiLU) on the GPU.
#pragma once

#include <cmath>

#include "kernels/moe/moe_silu.cuh"

namespace mlaserve::kernels::moe_cuda {

inline constexpr float kSiluFastMinGate = -64.0f;

__device__ __forceinline__ float SiluMulFast(float gate, float up) {
  const float d = 1.0f + expf(-gate);
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(d));
  r = __fmaf_rn(r, __fmaf_rn(-d, r, 1.0f), r);  // one Newton step on 1/d
  const float q0 = gate * r;
  const float q = __fmaf_rn(r, __fmaf_rn(-d, q0, gate), q0);  // the correctly rounded gate/d
  return copysignf(q, gate) * up;
}

// Whether SiluMulFast gave SiluMul's bits for every gate in [min_gate, max_gate].
__device__ __forceinline__ bool SiluFastCovers(float min_gate, float max_gate) {
  return min_gate >= kSiluFastMinGate && max_gate < INFINITY;
}

}  // namespace mlaserve::kernels::moe_cuda
