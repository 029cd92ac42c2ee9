// The act(gate) * up row pass of the routed experts for activations other than SiLU (moe_cuda.h,
// LaunchActMul): the grouped paths' gate_up product is written whole ([A, 2*inter], in the
// weights' column order), then this pass puts act(gate) * up into each row's first inter
// columns, which the down product reads (row stride 2*inter). SiLU keeps moe_rows.cu's pass (or
// the GEMM epilogue that fuses it); this one is that pass with the activation a template
// argument (kernels/common/activation_math.h: the CPU backend's formulas), so a model with
// another hidden_act costs one more read and write of the [A, 2*inter] product than the fused
// form, and computes what the CPU reference does.
#include <cuda_bf16.h>

#include "absl/strings/str_cat.h"

#include "kernels/common/activation_math.h"
#include "kernels/common/cuda_util.cuh"
#include "kernels/common/dense_cuda.cuh"
#include "kernels/common/pdl.cuh"
#include "kernels/moe/moe_cuda.h"

namespace mlaserve::kernels::moe_cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kRowWarps = kThreads / cuda::kWarpSize;

// act(g) * u of 8 bf16 pairs, in f32.
template <Activation A>
__device__ __forceinline__ uint4 ActMul8(uint4 g, uint4 u) {
  const auto* g2 = reinterpret_cast<const __nv_bfloat162*>(&g);
  const auto* u2 = reinterpret_cast<const __nv_bfloat162*>(&u);
  uint4 out;
  auto* o2 = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 gv = __bfloat1622float2(g2[k]), uv = __bfloat1622float2(u2[k]);
    o2[k] = __floats2bfloat162_rn(Activate<A>(gv.x) * uv.x, Activate<A>(gv.y) * uv.y);
  }
  return out;
}

// Stacked rows [gate | up] (row stride 2*inter) of rows [0, offsets[E]): gate <- act(gate) * up
// in place, eight columns per thread (each thread reads and writes only its own columns).
template <Activation A>
__global__ void __launch_bounds__(kThreads)
    ActMulStackedKernel(__nv_bfloat16* h, const int32_t* offsets, int num_experts, int inter) {
  cuda::PdlEnter();  // offsets and h are the kernels' just before
  const int chunks = inter / cuda::kBf16PerChunk;
  const int64_t total = static_cast<int64_t>(offsets[num_experts]) * chunks;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / chunks, j = (i - r * chunks) * cuda::kBf16PerChunk;
    uint4* gate = reinterpret_cast<uint4*>(h + r * 2 * inter + j);
    *gate = ActMul8<A>(*gate, *reinterpret_cast<const uint4*>(h + r * 2 * inter + inter + j));
  }
}

// Interleaved rows (MoeGateUpLayout::kInterleaved8: columns [16j, 16j+8) gate, [16j+8, 16j+16)
// up of features [8j, 8j+8)), compacted in place into the row's first inter columns. One warp
// per row, 32 feature chunks a step: step s reads columns [512s, 512s+512) and writes
// [256s, 256s+256), which only this step (before the __syncwarp) or earlier steps read.
template <Activation A>
__global__ void __launch_bounds__(kThreads)
    ActMulInterleavedKernel(__nv_bfloat16* h, const int32_t* offsets, int num_experts, int inter) {
  cuda::PdlEnter();
  const int rows = offsets[num_experts];
  const int chunks = inter / cuda::kBf16PerChunk;
  const int lane = threadIdx.x % cuda::kWarpSize;
  for (int r = blockIdx.x * kRowWarps + threadIdx.x / cuda::kWarpSize; r < rows; r += gridDim.x * kRowWarps) {
    __nv_bfloat16* row = h + static_cast<int64_t>(r) * 2 * inter;
    for (int j0 = 0; j0 < chunks; j0 += cuda::kWarpSize) {
      const int j = j0 + lane;
      uint4 g{}, u{};
      if (j < chunks) {
        g = *reinterpret_cast<const uint4*>(row + 2 * j * cuda::kBf16PerChunk);
        u = *reinterpret_cast<const uint4*>(row + (2 * j + 1) * cuda::kBf16PerChunk);
      }
      __syncwarp();
      if (j < chunks) *reinterpret_cast<uint4*>(row + j * cuda::kBf16PerChunk) = ActMul8<A>(g, u);
    }
  }
}

}  // namespace

absl::Status LaunchActMul(Activation act, __nv_bfloat16* h, const int32_t* offsets, int num_experts,
                          int inter, int max_rows, bool interleaved, cudaStream_t s) {
  if (act == Activation::kSilu) {
    return LaunchSiluMul(h, offsets, num_experts, inter, max_rows, interleaved, s);
  }
  if (max_rows <= 0) return absl::OkStatus();
  cuda::LaunchShape shape;
  shape.block = dim3(kThreads);
  shape.stream = s;
  if (interleaved) {
    shape.grid = dim3(cuda::GridFor(max_rows, kRowWarps));
  } else {
    shape.grid = dim3(cuda::GridFor(static_cast<int64_t>(max_rows) * (inter / cuda::kBf16PerChunk), kThreads));
  }
  return VisitActivation("moe_experts", act, [&](auto a) {
    constexpr Activation kAct = decltype(a)::value;
    if (interleaved) {
      return cuda::LaunchPdl("moe_experts act_and_mul", shape, ActMulInterleavedKernel<kAct>, h, offsets,
                             num_experts, inter);
    }
    return cuda::LaunchPdl("moe_experts act_and_mul", shape, ActMulStackedKernel<kAct>, h, offsets,
                           num_experts, inter);
  });
}

}  // namespace mlaserve::kernels::moe_cuda
