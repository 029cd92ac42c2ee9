// AttentionForms: which form of MLA attention a batch runs in. The forms compute the same
// function (tests hold them to each other and to Hugging Face):
//   kMha:       decompressed; the chunk's latents and its cached prefix go through kv_b_proj.
//   kMla:       absorbed; attention in latent space over the cache (mla_prefill, or
//               sparse_fwd over the indexer's top-k).
//   kMlaDecode: kMla for a batch where every chunk is one token (mla_decode / sparse_decode).
//   kSplit:     the chunks before BatchPlan::fresh_from in kMla / kMlaDecode, the fresh prompts
//               after them in kMha: a decode step that carries prompts (the decode worker's
//               local prefill), whose prompts would otherwise attend in latent form, ~3.4x the
//               FLOPs of the MHA form at DeepSeek's widths (576 + 512 against 192 + 128 a head).
// The choice follows the caller's AttentionPath (kAuto: MHA without a cached prefix; with one,
// kSplit where the fresh prompts come last and neither a sparse batch nor
// MLASERVE_SPLIT_FORM=0 (read once, for timing comparisons) rules it out, else MLA;
// AttentionPath::kSplit, the workers' policy's choice: kSplit under the same conditions
// whether or not the leading chunks read a prefix, MHA for fresh prompts only, else MLA),
// then what must hold: DSA batches longer than index_topk, and batches that read an fp8
// cache's latents, attend sparsely in latent form; a form the backend's kernels cannot run at
// the model's stored widths gives way to the other.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "kernels/common/types.h"
#include "model/engine.h"
#include "model/loader/config.h"
#include "model/mla_dims.h"
#include "model/step/batch_plan.h"

namespace mlaserve::model {

enum class AttentionForm : uint8_t { kMha, kMla, kMlaDecode, kSplit };

class AttentionForms {
 public:
  AttentionForms() = default;
  // Which forms `backend`'s kernels take at `dims` (the stored widths of `c`); INVALID_ARGUMENT
  // naming the widths when no form can serve the model (or, for DSA, the latent form cannot).
  static absl::StatusOr<AttentionForms> Choose(const ModelConfig& c, const MlaDims& dims,
                                               kernels::Backend backend);

  // The form `plan` runs in when `path` is asked. Marks the plan sparse when the cache's
  // latents are read only by the sparse kernels (`cache_reads_sparse`, the fp8 cache) and the
  // batch reads them.
  AttentionForm Resolve(BatchPlan* plan, AttentionPath path, bool cache_reads_sparse) const;

 private:
  bool mha_runs_ = true;     // mha_prefill takes the stored head dims
  bool latent_runs_ = true;  // mla_prefill / mla_decode / sparse_* take the rank and rope dims
};

}  // namespace mlaserve::model
