// DsaIndexer: DeepSeek-V3.2's lightning indexer of one layer (Hugging Face
// DeepseekV32Indexer), part of that layer's attention (MlaAttention owns it):
//   q = wq_b(q_resid) [T, n_heads, head_dim]; k = LayerNorm(wk(x)) [T, head_dim];
//   rotate-half RoPE on the first qk_rope_head_dim values of both (unlike MLA's interleave);
//   k goes to the layer's indexer key cache; weights = weights_proj(x) * n_heads^-0.5;
//   scores and top-k by kernels/indexer with softmax_scale = head_dim^-0.5.
// On kCuda, keys and query heads are index_key_dim wide (64 or 128, what the CUDA kernel
// takes): wq_b / wk are zero-padded per head at Create (PadIndexerWeights), so the GEMMs write
// exact zeros past head_dim, the LayerNorm and RoPE touch only the first head_dim values, and
// every q.k is unchanged. The CUDA kernel stages one f32 score row per query
// (IndexerWorkspaceBytes); the queries run in chunks whose rows fit the workspace planned at
// Create (WorkspaceBytes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/common/types.h"
#include "kernels/indexer/api.h"
#include "model/deepseek_weights.h"
#include "model/layers/layer_context.h"

namespace mlaserve::model {

namespace testing {
class DeepseekEngineTestPeer;
}  // namespace testing

class DsaIndexer {
 public:
  // `context` and `weights` outlive the indexer.
  DsaIndexer(const LayerContext* context, int layer, const IndexerWeights* weights)
      : ctx_(context), layer_(layer), w_(weights) {}

  // The stored width of an indexer key / query head: index_head_dim on kCpu, rounded up to the
  // CUDA kernel's 64 or 128 on kCuda. INVALID_ARGUMENT for a config the indexer cannot run
  // (no q LoRA; on kCuda head_dim > 128, > 64 heads or top-k > 4096).
  static absl::StatusOr<int> KeyDim(const ModelConfig& c, kernels::Backend backend);
  // kCuda: the score workspace planned at Create, rows of the longest context
  // (max_pages_per_seq pages) for up to 64 MiB, at least one row and at most one per batch
  // token (or sequence).
  static size_t WorkspaceBytes(int max_pages_per_seq, const BatchLimits& limits);
  // Step scratch of the indexer of one layer (and the top-k its attention takes) at most.
  static size_t ScratchBytes(const LayerContext& context);

  // Writes the layer's indexer keys of the plan's tokens; with `need_topk`, fills topk
  // [T, index_topk] (a buffer of the backend) with the positions each query attends.
  // x: normed hidden [T, hidden]; q_resid: the q LoRA residual [T, q_lora_rank].
  absl::Status Run(const BatchPlan& plan, const void* x, const void* q_resid, bool need_topk,
                   int32_t* topk);

 private:
  friend class testing::DeepseekEngineTestPeer;

  // The indexer launches of one layer, in query chunks whose f32 score rows fit the workspace
  // planned at Create (kCuda; kCpu needs none and runs one call).
  absl::Status RunKernel(const BatchPlan& plan, kernels::IndexerParams p);

  const LayerContext* ctx_;
  int layer_;
  const IndexerWeights* w_;
  // Tests: when set, the top-k rows Run picks are copied into *probe_ (the host waits).
  std::vector<int32_t>* probe_ = nullptr;
};

// kCuda: zero-pads every layer's wq_b / wk per head to `key_dim` rows (Create, before the
// indexers are built). A no-op when key_dim is index_head_dim.
absl::Status PadIndexerWeights(const kernels::KernelContext& ctx, const ModelConfig& c, int key_dim,
                               DeepseekWeights* weights);

}  // namespace mlaserve::model
