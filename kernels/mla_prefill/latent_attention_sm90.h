// The Hopper (sm_90a) latent-attention kernel: the same function and workspace layout as the
// mma.sync kernel of latent_attention.h, built on TMA page loads and wgmma (see
// latent_attention_sm90.cu for the design). It takes DeepSeek's widths only (bf16,
// kv_lora_rank 512, rope 64); LaunchLatentAttention uses it when it takes the shape and the
// device is a Hopper GPU, and the mma.sync kernel otherwise.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/mla_prefill/api.h"
#include "kernels/mla_prefill/latent_attention.h"

namespace mlaserve::kernels::mla_cuda {

// Whether this build has the sm_90a kernel and the current device is sm_90.
bool LatentSm90Available();
// Whether the kernel takes these parameters (dtype and widths).
bool LatentSm90Takes(const MlaParams& p);
// Launches it (or, where LatentSm90FewRowsTakes, the few-rows kernel); the caller has run
// LaunchLatentAttention's checks.
absl::Status LaunchLatentAttentionSm90(const MlaParams& p, const LatentSplit& split,
                                       int64_t max_rows_per_request, cudaStream_t stream);

// The few-rows Hopper kernel (latent_attention_sm90_few.cu): requests of at most
// kLatentFewRowsMax query rows (latent_tiling.h), products transposed (keys and value dims as
// wgmma M, the rows as N = 16).
using mla_internal::kLatentFewRowsMax;
// Whether it runs p: at most kLatentFewRowsMax rows per request, p.kernel not kWgmma64, and
// MLASERVE_MLA_FEW_ROWS not "0" (read per call; for timing comparisons).
bool LatentSm90FewRowsTakes(const MlaParams& p, int64_t max_rows_per_request);
absl::Status LaunchLatentAttentionSm90Few(const MlaParams& p, const LatentSplit& split,
                                          int64_t max_rows_per_request, cudaStream_t stream);

}  // namespace mlaserve::kernels::mla_cuda
