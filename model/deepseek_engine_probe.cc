#include "model/deepseek_engine_probe.h"

#include "common/status.h"

namespace mlaserve::model {

// DeepseekEngine::RunStep's layer loop (its collectives included: no-ops on one rank, so each
// rank of a sharded engine can probe its own tokens while the others run the same step), with
// the router read between a MoE layer's two halves: on the post-attention-normed input that
// FeedForward routes.
absl::StatusOr<std::vector<DeepseekEngineProbe::RouterRows>> DeepseekEngineProbe::RouterLogits(
    std::span<const SequenceChunk> batch, AttentionPath path) {
  DeepseekEngine& e = engine_;
  ASSIGN_OR_RETURN(BatchPlan plan, e.planner_.Plan(batch));
  const AttentionForm form = e.forms_.Resolve(&plan, path, e.cache_->ReadsNeedSparseForm());
  e.scratch_.Reset();
  RETURN_IF_ERROR(e.scratch_.UploadPlan(&plan));
  const ModelConfig& c = e.config_;
  const int T = plan.total_tokens;
  const int E = c.n_routed_experts;
  const int k = c.num_experts_per_tok;
  ASSIGN_OR_RETURN(const DeepseekEngine::StepActivations a, e.Embed(plan));
  std::vector<RouterRows> out;
  e.prefetch_.BeginStep();
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    RETURN_IF_ERROR(e.AttentionHalf(l, plan, form, a, nullptr));
    const FeedForward& ffn = e.layers_[l].feed_forward;
    if (ffn.is_moe()) {
      ScratchScope scope(e.scratch_.arena());
      ASSIGN_OR_RETURN(void* logits, e.scratch_.Allocate(static_cast<size_t>(T) * E * sizeof(float),
                                                         "probe router logits"));
      ASSIGN_OR_RETURN(void* ids, e.scratch_.Allocate(static_cast<size_t>(T) * k * sizeof(int32_t),
                                                      "probe topk ids"));
      ASSIGN_OR_RETURN(
          void* weights,
          e.scratch_.Allocate(static_cast<size_t>(T) * k * sizeof(float), "probe topk weights"));
      RETURN_IF_ERROR(ffn.Route(T, a.normed, static_cast<float*>(logits),
                                static_cast<int32_t*>(ids), static_cast<float*>(weights)));
      RouterRows rows{l,
                      T,
                      E,
                      k,
                      std::vector<float>(static_cast<size_t>(T) * E),
                      std::vector<int32_t>(static_cast<size_t>(T) * k)};
      RETURN_IF_ERROR(CopyBytes(e.ctx_, rows.logits.data(), logits,
                                rows.logits.size() * sizeof(float), CopyKind::kDeviceToHost));
      RETURN_IF_ERROR(CopyBytes(e.ctx_, rows.experts.data(), ids,
                                rows.experts.size() * sizeof(int32_t), CopyKind::kDeviceToHost));
      RETURN_IF_ERROR(Synchronize(e.ctx_));
      out.push_back(std::move(rows));
    }
    RETURN_IF_ERROR(e.FeedForwardHalf(l, T, a));
  }
  RETURN_IF_ERROR(e.prefetch_.EndStep());
  RETURN_IF_ERROR(Synchronize(e.ctx_));
  return out;
}

}  // namespace mlaserve::model
