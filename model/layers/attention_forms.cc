// AttentionForms (attention_forms.h): the forms the backend runs, and a batch's form.
#include "model/layers/attention_forms.h"

#include "absl/strings/str_cat.h"
#include "kernels/common/env_switch.h"
#include "kernels/mha_prefill/api.h"
#include "kernels/mla_prefill/api.h"

namespace mlaserve::model {

absl::StatusOr<AttentionForms> AttentionForms::Choose(const ModelConfig& c, const MlaDims& dims,
                                                      kernels::Backend b) {
  AttentionForms f;
  f.mha_runs_ = kernels::MhaPrefillSupportsHeadDims(b, dims.qk(), dims.v);
  f.latent_runs_ = kernels::LatentAttentionSupportsDims(b, dims.rank, dims.rope);
  const auto widths = [&] {
    return absl::StrCat("qk_nope_head_dim ", c.qk_nope_head_dim, ", qk_rope_head_dim ",
                        c.qk_rope_head_dim, ", v_head_dim ", c.v_head_dim, ", kv_lora_rank ",
                        c.kv_lora_rank, " (stored as ", dims.nope, "/", dims.rope, "/", dims.v, "/",
                        dims.rank, ")");
  };
  if (!f.mha_runs_ && !f.latent_runs_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json: ", widths(), " fit neither attention form on ", kernels::BackendName(b),
        ": MHA takes head dims up to ", kernels::kMhaPrefillCudaMaxHeadDim,
        ", the latent form kv_lora_rank up to ", kernels::kLatentCudaMaxRank, " and rope up to ",
        kernels::kLatentCudaMaxRopeDim));
  }
  if (c.has_indexer && !f.latent_runs_) {  // sparse attention exists in latent form only
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json: ", c.model_type_name, " with ", widths(), ": DSA's sparse attention on ",
        kernels::BackendName(b), " takes kv_lora_rank up to ", kernels::kLatentCudaMaxRank,
        " and rope up to ", kernels::kLatentCudaMaxRopeDim));
  }
  return f;
}

AttentionForm AttentionForms::Resolve(BatchPlan* plan, AttentionPath path,
                                      bool cache_reads_sparse) const {
  // Path policy: kAuto -> MHA without a cached prefix, else MLA; kSplit -> MLA, split below.
  // Sparse DSA batches run in MLA form (the indexer's selection is expressed over cache
  // positions).
  AttentionPath resolved = path;
  if (resolved == AttentionPath::kMhaOurs || resolved == AttentionPath::kMhaCudnn) {
    // The MHA form on the provider the profile's cell names, for this call.
    plan->mha_provider = resolved == AttentionPath::kMhaOurs ? kernels::MhaPrefillProvider::kOurs
                                                             : kernels::MhaPrefillProvider::kPreferCudnn;
    resolved = AttentionPath::kMha;
  }
  if (resolved == AttentionPath::kAuto) {
    resolved = plan->max_prefix == 0 ? AttentionPath::kMha : AttentionPath::kMla;
  }
  // kSplit (the workers' policy asks it for [prefixed or single-token | fresh]): the latent
  // form, split below where the batch allows; a batch of fresh prompts only (a data-parallel
  // rank's share of a split step, say) in the form of its fresh part, MHA.
  const bool split_asked = resolved == AttentionPath::kSplit;
  if (split_asked) {
    resolved = plan->batch > 0 && plan->fresh_from == 0 ? AttentionPath::kMha : AttentionPath::kMla;
  }
  // fp8 cache: a batch that reads cached latents (a prefix, or the MLA form) attends sparsely,
  // through the kernels that read fp8 (kv_cache/fp8_latent_kv_cache.cc); it is the same function.
  if (cache_reads_sparse && (plan->max_prefix > 0 || resolved == AttentionPath::kMla)) {
    plan->sparse = true;
  }
  if (plan->sparse) resolved = AttentionPath::kMla;
  // A form the backend's kernels cannot run at this model's widths gives way to the other
  // (Choose; sparse batches always have the latent form).
  if (resolved == AttentionPath::kMha && !mha_runs_) resolved = AttentionPath::kMla;
  if (resolved == AttentionPath::kMla && !latent_runs_) resolved = AttentionPath::kMha;
  // kAuto over prefixed chunks followed by fresh prompts, or kSplit over leading chunks followed
  // by fresh prompts: each part in its own form, where the backend runs both. Any other batch
  // drops the fresh part's cu_seqlens_q, so that only a split step uploads it and gets its two
  // parts (StepScratch::UploadPlan).
  static const bool split_off = kernels::EnvSwitchedOff("MLASERVE_SPLIT_FORM");
  const bool split = (path == AttentionPath::kAuto || split_asked) &&
                     resolved == AttentionPath::kMla && !plan->sparse && mha_runs_ && !split_off &&
                     plan->fresh_from > 0 && plan->fresh_from < plan->batch;
  if (split) return AttentionForm::kSplit;
  plan->fresh_cu_seqlens_q.clear();
  if (resolved == AttentionPath::kMha) return AttentionForm::kMha;
  return plan->all_single_token ? AttentionForm::kMlaDecode : AttentionForm::kMla;
}

}  // namespace mlaserve::model
