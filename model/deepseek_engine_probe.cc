#include "model/deepseek_engine_probe.h"

#include "common/status.h"
#include "kernels/embedding/api.h"
#include "kernels/moe/api.h"
#include "model/forward_ops.h"

namespace mlaserve::model {

// The layer loop of DeepseekEngine::RunStep, with the router's logits read after each MoE
// layer's post-attention norm (the input Mlp routes on). Kept in step with RunStep, its
// collectives included (parallel_step.cc: no-ops on one rank), so each rank of a sharded
// engine can probe its own tokens while the others run the same step.
absl::StatusOr<std::vector<DeepseekEngineProbe::RouterRows>> DeepseekEngineProbe::RouterLogits(
    std::span<const SequenceChunk> batch, AttentionPath path) {
  DeepseekEngine& e = engine_;
  ASSIGN_OR_RETURN(BatchPlan plan, e.planner_.Plan(batch));
  const AttentionForm form = e.ResolveForm(&plan, path);
  e.scratch_.Reset();
  RETURN_IF_ERROR(e.scratch_.UploadPlan(&plan));
  const ModelConfig& c = e.config_;
  const int T = plan.total_tokens;
  const int hidden = c.hidden_size;
  const int E = c.n_routed_experts;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const int64_t act = static_cast<int64_t>(T) * hidden;
  ASSIGN_OR_RETURN(void* residual, e.ScratchAct(act, "residual"));
  ASSIGN_OR_RETURN(void* y, e.ScratchAct(act, "normed hidden"));
  ASSIGN_OR_RETURN(void* tmp, e.ScratchAct(act, "block output"));
  RETURN_IF_ERROR(e.GatherStepCounts(plan));  // data-parallel attention only
  kernels::EmbeddingParams ep;
  ep.dtype = e.ops_.dtype;
  ep.num_tokens = T;
  ep.dim = hidden;
  ep.vocab = c.vocab_size;
  ep.ids = plan.dev.token_ids;
  ep.table = e.weights_.embed.data();
  ep.out = residual;
  RETURN_IF_ERROR(kernels::Embedding(ep, e.ctx_));
  RETURN_IF_ERROR(ops::RmsNorm(e.ops_, residual, T, hidden, hidden, e.weights_.layers[0].input_norm,
                               eps, y, hidden));
  std::vector<RouterRows> out;
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const LayerWeights& lw = e.weights_.layers[l];
    RETURN_IF_ERROR(e.Attention(l, plan, form, y, tmp));
    RETURN_IF_ERROR(e.ReduceAttentionOutput(T, tmp));  // tensor-parallel attention only
    RETURN_IF_ERROR(ops::RmsNorm(e.ops_, tmp, T, hidden, hidden, lw.post_attention_norm, eps, y,
                                 hidden, residual));
    if (lw.is_moe) {
      // What Mlp computes first: the router's logits and the backend's routing of them.
      ScratchScope scope(e.scratch_.arena());
      const int k = c.num_experts_per_tok;
      ASSIGN_OR_RETURN(void* logits, e.Scratch(static_cast<size_t>(T) * E * sizeof(float), "probe router logits"));
      ASSIGN_OR_RETURN(void* ids, e.Scratch(static_cast<size_t>(T) * k * sizeof(int32_t), "probe topk ids"));
      ASSIGN_OR_RETURN(void* weights, e.Scratch(static_cast<size_t>(T) * k * sizeof(float), "probe topk weights"));
      RETURN_IF_ERROR(ops::Linear(e.ops_, y, T, hidden, lw.moe.router, logits, E, 0.0f, /*y_f32=*/true));
      RETURN_IF_ERROR(kernels::MoeRouting(
          e.RoutingParams(l, T, static_cast<const float*>(logits), static_cast<int32_t*>(ids),
                          static_cast<float*>(weights)),
          e.ctx_));
      RouterRows rows{l, T, E, k, std::vector<float>(static_cast<size_t>(T) * E),
                      std::vector<int32_t>(static_cast<size_t>(T) * k)};
      RETURN_IF_ERROR(CopyBytes(e.ctx_, rows.logits.data(), logits, rows.logits.size() * sizeof(float),
                                CopyKind::kDeviceToHost));
      RETURN_IF_ERROR(CopyBytes(e.ctx_, rows.experts.data(), ids, rows.experts.size() * sizeof(int32_t),
                                CopyKind::kDeviceToHost));
      RETURN_IF_ERROR(Synchronize(e.ctx_));
      out.push_back(std::move(rows));
    }
    RETURN_IF_ERROR(e.ParallelMlp(l, T, y, tmp));
    const WeightTensor& next_norm = l + 1 < c.num_hidden_layers ? e.weights_.layers[l + 1].input_norm
                                                                : e.weights_.final_norm;
    RETURN_IF_ERROR(ops::RmsNorm(e.ops_, tmp, T, hidden, hidden, next_norm, eps, y, hidden, residual));
  }
  RETURN_IF_ERROR(Synchronize(e.ctx_));
  return out;
}

}  // namespace mlaserve::model
