// mla_decode's combine kernel (mla_combine.cu), internal to the family: merges the split-KV
// pieces' partial outputs by their LSE into the latent output (and LSE), and optionally applies
// W_UV to each merged row (MlaValueProjection, api.h), so that no per-head GEMM follows.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/mla_decode/api.h"

namespace mlaserve::kernels::mla_decode_internal {

// The kernel's view of an MlaValueProjection (MakeValueArgs); w == null: no projection.
struct ValueArgs {
  const __nv_bfloat16* w = nullptr;
  int64_t row_stride = 0, head_stride = 0;
  int v_dim = 0;
  __nv_bfloat16* out = nullptr;
  int64_t out_token_stride = 0, out_head_stride = 0;
};

struct CombineArgs {
  int num_splits, chunk_tokens, max_q, num_heads, rank, batch;
  const int32_t* cu_seqlens_q;
  const int32_t* seqlens_k;
  const float* part_out;  // rows of rank f32, or of rank bf16 where part_bf16 (LatentSplit::part_bf16)
  const float* part_lse;
  __nv_bfloat16* out;
  float* lse;
  // Balanced schedule (pieces != null): request b has pieces[b] pieces in slots slot_base[b]...,
  // slot_rows partial rows each; a request in one piece was written directly.
  const int32_t* pieces = nullptr;
  const int32_t* slot_base = nullptr;
  int64_t slot_rows = 0;
  bool part_bf16 = false;
  // Chunks: a request whose keys fit its first chunk was written directly by the attention kernel
  // (LatentSplit::single_chunk_direct); its rows are left as they are (or only projected).
  bool single_chunk_direct = false;
  // Chunks: the chunk length in pages at this device address instead of chunk_tokens (a picking
  // plan: LatentSplit::chunk_pages_at). null: chunk_tokens.
  const int32_t* chunk_pages_at = nullptr;
  ValueArgs value{};
};

// The kernel's view of an MlaValueProjection (checked by MlaDecode); none for null.
ValueArgs MakeValueArgs(const MlaValueProjection* v);

// Asks for the attention kernel's shared-memory carveout for `kernel` (a kernel launched next to
// it: the schedule, order and combine kernels), naming `name` on failure.
absl::Status PreferSharedCarveout(const void* kernel, const char* name);

// Launches the combine with PDL: grid (row of a request, request, W_UV column slice), one slice
// without a projection. max_rows = max_seqlen_q x num_heads. few_pieces: the caller expects a
// few pieces a row (about kCombineFewPieces; one warp takes each row's pieces in rounds of 4),
// and without a projection the combine runs a warp per row, writing the same bytes
// (MLASERVE_MLA_COMBINE_ROWS, read per call, overrides: 0 never, 1 always).
// max_pieces: the most pieces the plan expects a row to have (0: no bound); where it is at most
// kCombineFewPieces the warp per row runs in fewer registers (MlaCombineRowsLeanKernel, the same
// bytes; MLASERVE_MLA_COMBINE_LEAN, read per call, overrides: 0 never, 1 wherever a warp per row runs).
inline constexpr int kCombineFewPieces = 4;
absl::Status LaunchCombine(const CombineArgs& args, int64_t max_rows, bool few_pieces, int max_pieces,
                           cudaStream_t s);

}  // namespace mlaserve::kernels::mla_decode_internal
