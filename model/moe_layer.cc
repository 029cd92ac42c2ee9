// The feed-forward half of a layer: the dense gated MLP, or the MoE block (router -> routed
// experts grouped by expert -> plus the shared experts), as Hugging Face's DeepseekV*MoE.
#include <vector>

#include "common/status.h"
#include "kernels/moe/api.h"
#include "model/deepseek_model.h"
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

absl::Status DeepseekEngine::Mlp(int layer, const BatchPlan& plan, const float* x, float* out) {
  const ModelConfig& c = config_;
  const LayerWeights& lw = weights_.layers[layer];
  const int T = plan.total_tokens;
  const int hidden = c.hidden_size;
  std::vector<float> act;
  if (!lw.is_moe) {
    act.resize(static_cast<size_t>(T) * 3 * lw.mlp.inter);
    return ops::GatedMlp(ctx_, x, T, hidden, lw.mlp, act.data(), out);
  }

  const MoeWeights& m = lw.moe;
  const int E = c.n_routed_experts;
  const int k = c.num_experts_per_tok;
  std::vector<float> logits(static_cast<size_t>(T) * E);
  RETURN_IF_ERROR(ops::Linear(ctx_, x, T, hidden, m.router, logits.data(), E));
  std::vector<int32_t> ids(static_cast<size_t>(T) * k);
  std::vector<float> weights(static_cast<size_t>(T) * k);
  kernels::MoeRoutingParams r;
  r.num_tokens = T;
  r.num_experts = E;
  r.top_k = k;
  r.n_group = c.n_group;
  r.topk_group = c.topk_group;
  r.scoring = ToKernel(c.scoring);
  r.method = ToKernel(c.routing_method);
  r.norm_topk_prob = c.norm_topk_prob;
  r.routed_scaling_factor = static_cast<float>(c.routed_scaling_factor);
  r.logits = logits.data();
  r.correction_bias = m.correction_bias.empty() ? nullptr : m.correction_bias.data();
  r.topk_ids = ids.data();
  r.topk_weights = weights.data();
  RETURN_IF_ERROR(kernels::MoeRouting(r, ctx_));

  kernels::MoeExpertsParams e;
  e.num_tokens = T;
  e.hidden = hidden;
  e.inter = c.moe_intermediate_size;
  e.num_experts = E;
  e.top_k = k;
  e.x = x;
  e.topk_ids = ids.data();
  e.topk_weights = weights.data();
  e.gate_up = m.experts_gate_up.data();
  e.down = m.experts_down.data();
  e.out = out;
  std::vector<uint8_t> workspace(kernels::MoeExpertsWorkspaceBytes(e));
  e.workspace = workspace.empty() ? nullptr : workspace.data();
  e.workspace_bytes = workspace.size();
  RETURN_IF_ERROR(kernels::MoeExperts(e, ctx_));

  if (m.shared.inter == 0) return absl::OkStatus();
  act.resize(static_cast<size_t>(T) * 3 * m.shared.inter);
  // HF: experts(x) + shared_experts(x); the shared output accumulates into `out`.
  return ops::GatedMlp(ctx_, x, T, hidden, m.shared, act.data(), out, /*beta=*/1.0f);
}

}  // namespace mlaserve::model
