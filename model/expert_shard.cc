// The routed experts as one rank runs them. One GPU (or tensor-parallel experts): the stack
// as loaded, through kernels/moe. Expert parallel: the rank holds experts [begin, begin +
// count) plus a zero sink expert; kernels/moe_shard rewrites the routing to local ids (the
// other ranks' assignments go to the sink with weight 0), so the output is this rank's share
// of every token's sum and the shares add up across ranks (parallel_step.cc).
#include "common/status.h"
#include "kernels/moe/api.h"
#include "kernels/moe_shard/api.h"
#include "model/deepseek_engine.h"

namespace mlaserve::model {

absl::Status DeepseekEngine::RunRoutedExperts(kernels::MoeExpertsParams e) {
  if (layout_.expert_parallel()) {
    const int64_t n = static_cast<int64_t>(e.num_tokens) * e.top_k;
    ASSIGN_OR_RETURN(void* ids, Scratch(static_cast<size_t>(n) * sizeof(int32_t), "local expert ids"));
    ASSIGN_OR_RETURN(void* weights, Scratch(static_cast<size_t>(n) * sizeof(float), "local expert weights"));
    kernels::MoeLocalizeParams lp;
    lp.num_assignments = n;
    lp.num_experts = e.num_experts;
    lp.expert_begin = layout_.experts.begin;
    lp.local_experts = layout_.experts.count;
    lp.topk_ids = e.topk_ids;
    lp.topk_weights = e.topk_weights;
    lp.local_ids = static_cast<int32_t*>(ids);
    lp.local_weights = static_cast<float*>(weights);
    RETURN_IF_ERROR(kernels::MoeLocalize(lp, ctx_));
    e.num_experts = layout_.experts.count + 1;  // + the sink
    e.topk_ids = lp.local_ids;
    e.topk_weights = lp.local_weights;
  }
  e.workspace_bytes = kernels::MoeExpertsWorkspaceBytes(e);
  ASSIGN_OR_RETURN(e.workspace, Scratch(e.workspace_bytes, "moe experts workspace"));
  return kernels::MoeExperts(e, ctx_);
}

}  // namespace mlaserve::model
