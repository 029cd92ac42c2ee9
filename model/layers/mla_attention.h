// MlaAttention: the multi-head latent attention of one decoder layer (Hugging Face
// DeepseekV*Attention), over the paged latent cache.
//
// Per new token: q = q_proj(x), or q_b_proj(q_a_layernorm(q_a_proj(x))) with a q LoRA (q_proj
// or q_a_proj computed with kv_a_proj_with_mqa in one GEMM over their stacked weights); the
// cache entry kv_a_layernorm(latent) | rope(k_pe) goes into the layer's cache (its format:
// kv_cache/latent_kv_cache.h); RoPE on q's rope part (one launch with k_pe's rotation and the
// latent's norm, writing straight into the absorbed query in the latent forms). The q_a / kv_a layernorms use eps 1e-6
// (HF's RMSNorm default), not rms_norm_eps. Then one of the forms (attention_forms.h):
//   MHA:  decompress latents through kv_b_proj; the chunk attends its own keys causally and its
//         cached prefix in bounded prefix pieces, merged by LSE (mla_attention_mha.cc).
//   MLA:  absorbed; q_nope . W_UK per head, attend in latent space over the cache (mla_prefill,
//         mla_decode for decode batches, or sparse_fwd / sparse_decode over the DSA indexer's
//         top-k), then W_UV per head. W_UK / W_UV are strided views of kv_b_proj, never copies.
// and o_proj. Every width is the stored one (model/mla_dims.h). On a tensor-parallel rank the
// block attends with its own heads and o_proj gives partial sums (ParallelStep reduces them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "kernels/mla_decode/api.h"
#include "model/deepseek_weights.h"
#include "model/layers/attention_forms.h"
#include "model/layers/dsa_indexer.h"
#include "model/layers/layer_context.h"

namespace mlaserve::model {

class MlaAttention {
 public:
  // `context` and `weights` (the layer's) outlive the block; `indexer` is the layer's DSA
  // indexer (V3.2) or null.
  MlaAttention(const LayerContext* context, int layer, const MlaWeights* weights,
               std::unique_ptr<DsaIndexer> indexer)
      : ctx_(context), layer_(layer), w_(weights), indexer_(std::move(indexer)) {}

  // Step scratch of one layer's attention at most (both forms, the decode kernel's workspace
  // at every batch a decode graph pads to; the indexer's is DsaIndexer::ScratchBytes).
  static absl::StatusOr<size_t> ScratchBytes(const LayerContext& context);

  // Bytes of the largest mla_decode metadata a step of this engine may build (the step keeps
  // one copy of it: StepScratch::MlaDecodeMetadata).
  static absl::StatusOr<size_t> DecodeMetadataBytes(const LayerContext& context);

  // x: normed hidden [T, hidden]; out: [T, hidden]. Writes the layer's KV of the plan's tokens.
  absl::Status Forward(const BatchPlan& plan, AttentionForm form, const void* x, void* out);

  DsaIndexer* indexer() { return indexer_.get(); }

 private:
  // A dense decode batch's mla_decode plan and the step's metadata for it (null: the plan has
  // none).
  struct LatentDecode {
    kernels::MlaDecodePlan plan;
    const void* metadata = nullptr;
  };
  // The latent kernels' parameters of `plan`'s batch but q, kv_cache and out.
  kernels::MlaParams LatentParams(const BatchPlan& plan) const;
  // The plan of `plan`'s dense decode, and the step's metadata: built here where no layer of
  // the step built it yet (one launch), else the first layer's.
  absl::StatusOr<LatentDecode> PlanLatentDecode(const BatchPlan& plan) const;

  // q: [T, H, qk] roped; kv: the new tokens' cache entries [T, latent]; attn: [T, H, v].
  absl::Status AttendMha(const BatchPlan& plan, const void* q, const void* kv, void* attn);
  // q_abs: the absorbed query [T, H, latent | rope], its rope part roped in by Forward when
  // q_abs_roped (else copied from q here), its latent part (q_nope . W_UK) computed by Forward's
  // rope launch when q_abs_absorbed (else here); topk: the indexer's [T, index_topk] for a
  // sparse batch, else null.
  // decode: a dense decode batch's plan (PlanLatentDecode), null for other batches.
  absl::Status AttendLatent(const BatchPlan& plan, AttentionForm form, const void* q, void* q_abs,
                            bool q_abs_roped, bool q_abs_absorbed, const int32_t* topk,
                            const LatentDecode* decode, void* attn);

  const LayerContext* ctx_;
  int layer_;
  const MlaWeights* w_;
  std::unique_ptr<DsaIndexer> indexer_;
};

}  // namespace mlaserve::model
