// The feed-forward half of a layer: the dense gated MLP, or the MoE block (router -> routed
// experts grouped by expert -> plus the shared experts), as Hugging Face's DeepseekV*MoE.
#include "common/status.h"
#include "kernels/moe/api.h"
#include "model/deepseek_engine.h"
#include "model/forward_ops.h"

namespace mlaserve::model {
namespace {

kernels::MoeScoring ToKernel(RoutingScoring s) {
  return s == RoutingScoring::kSigmoid ? kernels::MoeScoring::kSigmoid
                                       : kernels::MoeScoring::kSoftmax;
}

kernels::MoeTopkMethod ToKernel(RoutingMethod m) {
  switch (m) {
    case RoutingMethod::kGreedy: return kernels::MoeTopkMethod::kGreedy;
    case RoutingMethod::kGroupLimitedGreedy: return kernels::MoeTopkMethod::kGroupLimitedGreedy;
    case RoutingMethod::kNoauxTc: return kernels::MoeTopkMethod::kNoauxTc;
  }
  return kernels::MoeTopkMethod::kGreedy;
}

}  // namespace

kernels::MoeRoutingParams DeepseekEngine::RoutingParams(int layer, int num_tokens,
                                                        const float* logits, int32_t* ids,
                                                        float* weights) const {
  const ModelConfig& c = config_;
  const MoeWeights& m = weights_.layers[layer].moe;
  kernels::MoeRoutingParams r;
  r.num_tokens = num_tokens;
  r.num_experts = c.n_routed_experts;
  r.top_k = c.num_experts_per_tok;
  r.n_group = c.n_group;
  r.topk_group = c.topk_group;
  r.scoring = ToKernel(c.scoring);
  r.method = ToKernel(c.routing_method);
  r.norm_topk_prob = c.norm_topk_prob;
  r.routed_scaling_factor = static_cast<float>(c.routed_scaling_factor);
  r.logits = logits;
  r.correction_bias = m.correction_bias.empty() ? nullptr
                                                : static_cast<const float*>(m.correction_bias.data());
  r.topk_ids = ids;
  r.topk_weights = weights;
  return r;
}

absl::Status DeepseekEngine::Mlp(int layer, int rows, const void* x, void* out) {
  ScratchScope scope(scratch_.arena());
  const ModelConfig& c = config_;
  const LayerWeights& lw = weights_.layers[layer];
  const int T = rows;
  const int hidden = c.hidden_size;
  if (!lw.is_moe) {
    ASSIGN_OR_RETURN(void* act, ScratchAct(static_cast<int64_t>(T) * 3 * lw.mlp.inter, "mlp act"));
    return ops::GatedMlp(ops_, x, T, hidden, lw.mlp, act, out);
  }

  const MoeWeights& m = lw.moe;
  const int E = c.n_routed_experts;
  const int k = c.num_experts_per_tok;
  // Router logits in f32 whatever the activation dtype (HF computes them in f32 too).
  ASSIGN_OR_RETURN(void* logits, Scratch(static_cast<size_t>(T) * E * sizeof(float), "router logits"));
  RETURN_IF_ERROR(ops::Linear(ops_, x, T, hidden, m.router, logits, E, 0.0f, /*y_f32=*/true));
  ASSIGN_OR_RETURN(void* ids, Scratch(static_cast<size_t>(T) * k * sizeof(int32_t), "topk ids"));
  ASSIGN_OR_RETURN(void* weights, Scratch(static_cast<size_t>(T) * k * sizeof(float), "topk weights"));
  const kernels::MoeRoutingParams r =
      RoutingParams(layer, T, static_cast<const float*>(logits), static_cast<int32_t*>(ids),
                    static_cast<float*>(weights));
  RETURN_IF_ERROR(kernels::MoeRouting(r, ctx_));

  kernels::MoeExpertsParams e;
  e.dtype = ops_.dtype;
  e.num_tokens = T;
  e.hidden = hidden;
  e.inter = layout_.expert_inter.count;  // moe_intermediate_size, or this rank's slice
  e.num_experts = E;
  e.top_k = k;
  e.x = x;
  e.topk_ids = r.topk_ids;
  e.topk_weights = r.topk_weights;
  e.gate_up = m.experts_gate_up.data();
  e.down = m.experts_down.data();
  e.out = out;
  // Through this rank's shard of the experts (expert_shard.cc; the whole stack on one GPU).
  RETURN_IF_ERROR(RunRoutedExperts(e));

  if (m.shared.inter == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(void* act, ScratchAct(static_cast<int64_t>(T) * 3 * m.shared.inter, "shared experts act"));
  // HF: experts(x) + shared_experts(x); the shared output accumulates into `out`.
  return ops::GatedMlp(ops_, x, T, hidden, m.shared, act, out, /*beta=*/1.0f);
}

}  // namespace mlaserve::model
