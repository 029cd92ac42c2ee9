// indexer: DeepSeek-V3.2 lightning indexer -- scores every visible cached token for every
// query and keeps the top-k (index_topk) positions.
//
//   score(t, s) = sum_h weights[t, h] * relu(softmax_scale * q[t, h] . k[s])
// where k[s] comes from the paged indexer key cache (k_norm(wk(x)) with rope on its first
// rope_dim values) and weights = weights_proj(x) * index_n_heads^-0.5 (applied by the caller).
// Visibility is causal, bottom-right aligned as in mha_prefill. Output per query: the
// positions (within its sequence) of the min(top_k, visible) highest scores, sorted by
// descending score with ties broken towards the lower position, padded with -1.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/common/types.h"

namespace mlaserve::kernels {

struct IndexerParams {
  DType dtype = DType::kF32;  // of q and k_cache (CPU f32; CUDA bf16 or fp8 later)
  int batch = 0;
  int num_heads = 0;   // index_n_heads
  int head_dim = 0;    // index_head_dim
  int top_k = 0;       // index_topk
  const void* q = nullptr;           // [total_q, num_heads, head_dim] contiguous
  const float* weights = nullptr;    // [total_q, num_heads] f32
  const void* k_cache = nullptr;     // [num_pages, kPageSize, head_dim]
  int num_pages = 0;
  const int32_t* block_table = nullptr;  // [batch, max_pages_per_seq]
  int max_pages_per_seq = 0;
  const int32_t* cu_seqlens_q = nullptr; // [batch + 1]
  const int32_t* seqlens_k = nullptr;    // [batch]
  int max_seqlen_q = 0;
  int max_seqlen_k = 0;
  float softmax_scale = 1.0f;
  int32_t* topk_indices = nullptr;   // [total_q, top_k]
  void* workspace = nullptr;         // IndexerWorkspaceBytes(p) bytes (CUDA)
  // kFP8E4M3 selects the fp8 indexer key cache of kernels/kv_fp8/api.h (per page: kPageSize *
  // head_dim e4m3 values, then kPageSize f32 scales; CUDA only); any other value means the
  // cache has dtype `dtype`.
  DType k_cache_dtype = DType::kF32;
};

size_t IndexerWorkspaceBytes(const IndexerParams& p);
absl::Status Indexer(const IndexerParams& p, const KernelContext& ctx);
absl::Status IndexerCpu(const IndexerParams& p);
absl::Status IndexerCuda(const IndexerParams& p, void* stream);

}  // namespace mlaserve::kernels
