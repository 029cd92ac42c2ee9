// sparse_fwd: absorbed MLA prefill restricted to the positions the indexer selected.
// For query row t only keys at positions indices[t, :] (>= 0; -1 = padding, skipped) are
// attended; q/cache/out semantics as in mla_prefill. The indices are already causal.
// As in FlashMLA's sparse kernels, every listed entry is attended as listed: the softmax runs
// over the top_k entries, so a position listed twice counts twice (the indexer never lists
// one twice). A row whose entries are all -1 gets out = 0, lse = -inf. Entries must be
// < seqlens_k[b]: the CPU backend refuses others with INVALID_ARGUMENT (FlashMLA would
// treat them as padding).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/common/types.h"

namespace mlaserve::kernels {

struct SparseMlaParams {
  DType dtype = DType::kF32;  // of q and out; cache dtype below
  DType cache_dtype = DType::kF32;  // kF32 (CPU), kBF16, or kFP8E4M3 (656-byte DeepSeek layout)
  int batch = 0;
  int num_heads = 0;
  int kv_lora_rank = 0;
  int rope_dim = 0;
  int top_k = 0;
  const void* q = nullptr;  // (t, h, d) at q[t*q_token_stride + h*q_head_stride + d]
  int64_t q_token_stride = 0, q_head_stride = 0;
  const void* kv_cache = nullptr;        // [num_pages, kPageSize, entry]
  int num_pages = 0;
  const int32_t* block_table = nullptr;  // [batch, max_pages_per_seq]
  int max_pages_per_seq = 0;
  const int32_t* cu_seqlens_q = nullptr; // [batch + 1]
  const int32_t* seqlens_k = nullptr;    // [batch]
  const int32_t* indices = nullptr;      // [total_q, top_k] positions within the sequence
  void* out = nullptr;   // [total_q, num_heads, kv_lora_rank]
  float* lse = nullptr;  // [total_q, num_heads] or null
  float softmax_scale = 1.0f;
  // Bounds every request's query count; sizes the CUDA grid (sparse_fwd: required on CUDA;
  // sparse_decode: 0 means 2). The CPU backend ignores it.
  int max_seqlen_q = 0;
};

absl::Status SparseFwd(const SparseMlaParams& p, const KernelContext& ctx);
absl::Status SparseFwdCpu(const SparseMlaParams& p);
absl::Status SparseFwdCuda(const SparseMlaParams& p, void* stream);

// Shared-memory cap of the decode-style kernel's scheduler: 4*(5*rows + 1) bytes must fit
// the device's opt-in shared memory, so rows <= (smem/4 - 1)/5 (11673 at 228 KiB).
inline int SparseDecodeMaxRows(int64_t smem_optin_bytes) {
  return static_cast<int>((smem_optin_bytes / 4 - 1) / 5);
}

}  // namespace mlaserve::kernels
