// DeepseekEngine: the Engine for model_type deepseek_v2 / deepseek_v3 / deepseek_v32, written
// once against kernels/*/api.h.
//
// Forward (Hugging Face semantics, see docs/model.md): embed -> per layer [input RMSNorm ->
// MLA attention over the paged latent cache -> residual -> post-attention RMSNorm -> dense
// MLP or MoE (routed + shared experts) -> residual] -> final RMSNorm -> lm_head on the rows
// whose logits are wanted.
//
// Attention forms (same function, tests hold them to each other):
//   MHA:  decompress latents through kv_b_proj; the chunk attends its own keys causally and
//         its cached prefix in bounded prefix pieces, merged by LSE.
//   MLA:  absorbed; q_nope.W_UK per head, attend in latent space over the cache, then W_UV.
//         Batches where every chunk is one token use the decode kernel (mla_decode).
//   DSA (V3.2): the indexer picks top-k cached positions per query; when any sequence is
//         longer than index_topk, attention runs sparse (sparse_fwd / sparse_decode) in MLA
//         form whatever form was asked for; otherwise sparse equals dense.
//
// Backends: kCpu (f32 activations, weights converted to f32 at load). kCuda is refused with
// FAILED_PRECONDITION until the CUDA port of this runtime lands.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/common/types.h"
#include "model/config.h"
#include "model/deepseek_weights.h"
#include "model/engine.h"
#include "model/kv_pool.h"
#include "model/rope.h"

namespace mlaserve::model {

// One Forward's batch, flattened once on the host (FlashAttention varlen conventions).
struct BatchPlan {
  int batch = 0;
  int total_tokens = 0;
  std::vector<int32_t> token_ids;    // [T]
  std::vector<int32_t> positions;    // [T]
  std::vector<int64_t> slots;        // [T] cache slot of every new token
  std::vector<int32_t> cu_seqlens_q; // [B + 1]
  std::vector<int32_t> start;        // [B] cached prefix length
  std::vector<int32_t> seqlens_k;    // [B] start + chunk length
  std::vector<int32_t> block_table;  // [B, max_pages_per_seq], unused entries -1
  int max_pages_per_seq = 0;
  int max_seqlen_q = 0;
  int max_seqlen_k = 0;
  int max_prefix = 0;
  bool all_single_token = false;
  // DSA: some sequence is longer than index_topk, so attention must run sparse (set by Forward).
  bool sparse = false;
  std::vector<int32_t> logit_rows;   // token rows (in [0, T)) whose logits are returned
};

enum class AttentionForm : uint8_t { kMha, kMla, kMlaDecode };

class DeepseekEngine final : public Engine {
 public:
  static absl::StatusOr<std::unique_ptr<DeepseekEngine>> Create(const EngineOptions& options);

  const ModelConfig& config() const override { return config_; }
  kernels::Backend backend() const override { return ctx_.backend; }
  KvPool& kv_pool() override { return *pool_; }

  absl::StatusOr<ForwardResult> Forward(std::span<const SequenceChunk> batch,
                                        AttentionPath path = AttentionPath::kAuto,
                                        const LayerDoneFn& on_layer_done = nullptr) override;

  // Largest prefix piece (tokens per sequence) the MHA path decompresses at once. Tests lower
  // it to exercise the multi-piece LSE merge on short prompts.
  void set_mha_prefix_piece_tokens(int tokens) { mha_prefix_piece_tokens_ = tokens; }

 private:
  DeepseekEngine() = default;

  absl::StatusOr<BatchPlan> PlanBatch(std::span<const SequenceChunk> batch) const;

  // attention.cc. x: normed hidden [T, hidden]; out: [T, hidden].
  absl::Status Attention(int layer, const BatchPlan& plan, AttentionForm form, const float* x,
                         float* out);
  absl::Status AttendMha(int layer, const BatchPlan& plan, const float* q, const float* kv,
                         float* attn);
  absl::Status AttendLatent(int layer, const BatchPlan& plan, AttentionForm form, const float* q,
                            const int32_t* topk_indices, float* attn);
  // indexer.cc (V3.2): writes the layer's indexer keys; fills topk when `need_topk`.
  absl::Status RunIndexer(int layer, const BatchPlan& plan, const float* x, const float* q_resid,
                          bool need_topk, std::vector<int32_t>* topk);

  // moe_layer.cc. x: normed hidden [T, hidden]; out: [T, hidden].
  absl::Status Mlp(int layer, const BatchPlan& plan, const float* x, float* out);

  EngineOptions options_;
  ModelConfig config_;
  kernels::KernelContext ctx_;
  DeepseekWeights weights_;
  RopeTable rope_;
  std::unique_ptr<KvPool> pool_;
  int mha_prefix_piece_tokens_ = 4096;
};

}  // namespace mlaserve::model
