// Host interface of the CUDA latent-attention kernel shared by mla_prefill and mla_decode
// (absorbed MLA over the paged latent cache; see mla_prefill/api.h for the math).
//
// A CTA owns `rows` query rows of one request (row = query token * num_heads + head, so all
// heads of a request share every cache tile it loads) and one KV split. With num_splits = 1 it
// writes the bf16 output and LSE directly; otherwise it writes f32 partial outputs (already
// normalised) and partial LSEs into the workspace, which mla_decode's combine kernel merges.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/mla_prefill/api.h"
#include "kernels/mla_prefill/latent_tiling.h"

namespace mlaserve::kernels::mla_cuda {

using mla_internal::LatentRowsPerCta;  // rows per CTA; PlanMlaDecode counts CTAs with it

struct LatentSplit {
  int num_splits = 1;
  int chunk_tokens = 0;       // keys per split (multiple of kPageSize); 0 = whole context
  float* part_out = nullptr;  // [num_splits, batch * max_q * num_heads, kv_lora_rank]
  float* part_lse = nullptr;  // [num_splits, batch * max_q * num_heads]
  int max_q = 0;              // query tokens per request the partial rows are laid out for
};

// Validates what the kernel adds to CheckMlaShape (dtype, dims, alignment) and launches.
// `max_rows_per_request` (= max_seqlen_q * num_heads) sizes the grid.
absl::Status LaunchLatentAttention(const MlaParams& p, const LatentSplit& split,
                                   int64_t max_rows_per_request, cudaStream_t stream);

}  // namespace mlaserve::kernels::mla_cuda
