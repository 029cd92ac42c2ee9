// Device-side pieces of the cuDNN provider (mha_prefill_cudnn.cu) that mha_prefill_cudnn.cc
// enqueues around cuDNN's SDPA:
//   - before it, cuDNN's description of the ragged batch (per-sequence lengths for the padding
//     mask, per-tensor element offsets of each sequence's first token), built on the device
//     from cu_seqlens, so the call reads nothing back to the host;
//   - after it, the rows cuDNN leaves undefined: a query row that sees no key gets out = 0 and
//     lse = -inf (api.h's contract; cuDNN before 9.25 writes NaN there).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/mha_prefill/api.h"

namespace mlaserve::kernels::cudnn_sdpa {

// Device arrays in the provider's arena. Offsets count elements of their tensor, [batch + 1]
// entries (cuDNN's ragged-offset tensors are INT64 [b + 1, 1, 1, 1]).
struct RaggedBatch {
  int32_t* seq_len_q = nullptr;     // [batch] cu_seqlens_q[b + 1] - cu_seqlens_q[b]
  int32_t* seq_len_kv = nullptr;    // [batch]
  int64_t* q_offset = nullptr;      // cu_seqlens_q * q_token_stride
  int64_t* k_offset = nullptr;      // cu_seqlens_k * k_token_stride
  int64_t* v_offset = nullptr;      // cu_seqlens_k * v_token_stride
  int64_t* o_offset = nullptr;      // cu_seqlens_q * out_token_stride
  int64_t* stats_offset = nullptr;  // cu_seqlens_q * num_heads (lse is [total_q, num_heads])
};

// Bytes of a RaggedBatch for `batch` sequences, a multiple of 256 (the workspace cuDNN gets
// follows it in the arena).
size_t RaggedBatchBytes(int batch);
// The arrays of a RaggedBatch laid out from `base` (256-byte aligned).
RaggedBatch CarveRaggedBatch(void* base, int batch);

// Fills `r` from p.cu_seqlens_q / p.cu_seqlens_k and the strides of p.
absl::Status LaunchRaggedBatch(const MhaPrefillParams& p, const RaggedBatch& r, cudaStream_t stream);

// out = 0 and lse = -inf on every row of p that sees no key.
absl::Status LaunchClearKeylessRows(const MhaPrefillParams& p, cudaStream_t stream);

}  // namespace mlaserve::kernels::cudnn_sdpa
