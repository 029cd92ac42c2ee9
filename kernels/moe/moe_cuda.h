// Internal to the moe family's CUDA backend: the pieces moe_experts.cu strings together.
//
// Routed experts on the GPU run in four steps, none of which syncs with the host (the
// per-expert token counts exist only on the device, so CUDA graph capture stays possible):
//   1. a stable counting sort of the num_tokens * top_k assignments by expert
//      (moe_experts.cu: expert row offsets, sorted assignment ids, each assignment's row);
//   2. the gate_up product over each expert's rows, SiLU(gate) * up;
//   3. the down product, one bf16 row per assignment (rounded as Hugging Face's expert output
//      is);
//   4. the combine: each token's top_k rows weighted and summed in token order (f32, one
//      rounding), so no atomics and the same bytes on every run.
// Steps 2-3 have three implementations, chosen per call by MoeExpertsPath (api.h):
//   kStream   few tokens per expert (decode): weights streamed once at copy bandwidth, tokens
//             as the narrow side of m16n8k16 products, SiLU * up fused into the gate_up pass;
//   kSm90     CUTLASS 3 grouped GEMM (TMA + wgmma, warp-specialized persistent kernel over
//             (expert, tile) work) on gathered rows: prefill and large decode batches;
//   kTiled    the portable mma.sync grouped GEMM (any sm_80+ GPU, and the fallback).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace mlaserve::kernels::moe_cuda {

// Rows of one grouped product: expert e owns rows [offsets[e], offsets[e+1]) of `a` (or of the
// gathered x when `sorted` is set: row r is x[sorted[r] / top_k]) and of `c`.
struct GroupedGemmArgs {
  const __nv_bfloat16* a;
  int64_t lda;
  const int32_t* sorted;   // non-null: gather rows through it
  int top_k;
  const __nv_bfloat16* w;  // [E][N, K] row-major
  int64_t w_expert_stride;
  int n, k;
  __nv_bfloat16* c;        // [A, N] rows in sorted order, row stride ldc
  int64_t ldc;
  const int32_t* offsets;       // [E + 1]
  const int32_t* tile_offsets;  // [E + 1], row tiles of kTiledRows (tiled path only)
  int num_experts;
};

// --- kTiled (moe_tiled_gemm.cu)
inline constexpr int kTiledRows = 64;  // rows per tile of the tiled grouped GEMM
absl::Status LaunchTiledGemm(const GroupedGemmArgs& g, int max_tiles, cudaStream_t s);

// --- kStream (moe_stream.cu). `active` lists the experts with rows ([0, count) valid, count
// at active[E]); grids are sized by `max_active` = min(E, assignments), known on the host.
struct StreamArgs {
  const __nv_bfloat16* x;       // [num_tokens, hidden]
  const int32_t* sorted;        // [A] assignment ids by expert
  const int32_t* offsets;       // [E + 1]
  const int32_t* active;        // [E + 1]
  int top_k, hidden, inter, num_experts, max_active;
  const __nv_bfloat16* gate_up; // [E][2*inter, hidden]
  const __nv_bfloat16* down;    // [E][hidden, inter]
  __nv_bfloat16* act;           // [A, inter]   silu(gate) * up, rows in sorted order
  __nv_bfloat16* ys;            // [A, hidden]  down output, rows in sorted order
};
absl::Status LaunchStreamExperts(const StreamArgs& a, cudaStream_t s);

// --- kSm90 (moe_gemm_sm90_v<N>.cu): d[rows of e] = a[rows of e] * w_e^T for every expert
// (bf16 d), the per-expert problem shapes and pointers built on the device from `offsets`.
// Variants are tile configurations (moe_gemm_sm90.cuh); kAuto picks per shape.
inline constexpr int kSm90Variants = 4;
struct Sm90GroupedArgs {
  const __nv_bfloat16* a;       // [A, K] row stride lda, rows in sorted order
  int64_t lda;
  const __nv_bfloat16* w;       // [E][N, K]
  void* d;                      // [A, N] bf16, row stride ldd
  int64_t ldd;
  int n, k, num_experts;
  const int32_t* offsets;       // [E + 1]
  void* args_block;             // Sm90ArgsBlockBytes(E) bytes: per-expert shapes, pointers, strides
  void* workspace;              // Sm90WorkspaceBytes() bytes for CUTLASS
};
size_t Sm90ArgsBlockBytes(int num_experts);  // the largest over the variants
size_t Sm90WorkspaceBytes(int num_experts);  // the largest over the variants
bool Sm90Available();                        // the current device is sm_90 (wgmma, TMA)
absl::Status LaunchSm90Grouped(int variant, const Sm90GroupedArgs& g, cudaStream_t s);
#define MLASERVE_MOE_SM90_DECLARE(N)                                              \
  absl::Status LaunchSm90GroupedV##N(const Sm90GroupedArgs& g, cudaStream_t s); \
  size_t Sm90WorkspaceBytesV##N(int num_experts);                               \
  size_t Sm90ArgsBlockBytesV##N(int num_experts);
MLASERVE_MOE_SM90_DECLARE(0)
MLASERVE_MOE_SM90_DECLARE(1)
MLASERVE_MOE_SM90_DECLARE(2)
MLASERVE_MOE_SM90_DECLARE(3)
#undef MLASERVE_MOE_SM90_DECLARE

}  // namespace mlaserve::kernels::moe_cuda
