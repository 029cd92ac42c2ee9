// FeedForward (feed_forward.h): the dense MLP or the MoE block of one layer, and the routed
// experts as one rank runs them.
#include "model/layers/feed_forward.h"

#include <algorithm>

#include "common/status.h"
#include "kernels/activation/api.h"
#include "kernels/gemm/api.h"
#include "kernels/moe/api.h"
#include "kernels/moe_shard/api.h"
#include "model/forward_ops.h"

namespace mlaserve::model {
namespace {

kernels::MoeScoring ToKernel(RoutingScoring s) {
  return s == RoutingScoring::kSigmoid ? kernels::MoeScoring::kSigmoid
                                       : kernels::MoeScoring::kSoftmax;
}

kernels::MoeTopkMethod ToKernel(RoutingMethod m) {
  switch (m) {
    case RoutingMethod::kGreedy:
      return kernels::MoeTopkMethod::kGreedy;
    case RoutingMethod::kGroupLimitedGreedy:
      return kernels::MoeTopkMethod::kGroupLimitedGreedy;
    case RoutingMethod::kNoauxTc:
      return kernels::MoeTopkMethod::kNoauxTc;
  }
  return kernels::MoeTopkMethod::kGreedy;
}

}  // namespace

size_t FeedForward::ScratchBytes(const LayerContext& context) {
  const ModelConfig& c = *context.config;
  const ParallelLayout& layout = *context.layout;
  const size_t es = context.ops.elem();
  // The dense MLP's act (+ the fused gate_up's workspace), or router logits + routing + experts
  // workspace + shared act, at this rank's intermediate slices.
  const size_t ranks = layout.attention_dp() ? layout.size : 1;
  const size_t M = static_cast<size_t>(context.limits.max_batch_tokens) * ranks;
  const ModelWidths& w = context.widths;  // as stored (model_widths.h)
  size_t bytes = M * 3 * w.mlp_inter * es + kernels::MoeSharedGateUpWorkspaceBytes();
  if (c.n_routed_experts > 0) {
    kernels::MoeExpertsParams e;
    e.dtype = context.ops.dtype;
    e.num_tokens = static_cast<int>(M);
    e.hidden = w.hidden;
    e.inter = w.expert_inter;
    e.num_experts = layout.expert_parallel() ? layout.experts.count : c.n_routed_experts;
    e.top_k = c.num_experts_per_tok;
    // + the shared experts' output [M, hidden] where the routed experts' combine adds it
    // (RunBlock's prefill fold).
    const size_t moe = M * c.n_routed_experts * sizeof(float) +
                       2 * M * c.num_experts_per_tok * (sizeof(int32_t) + sizeof(float)) +
                       kernels::MoeExpertsWorkspaceBytes(e) +
                       M * 3 * static_cast<size_t>(w.shared_inter) * es +
                       kernels::MoeSharedGateUpWorkspaceBytes() +
                       (c.n_shared_experts > 0 ? M * w.hidden * es : 0);
    bytes = std::max(bytes, moe);
  }
  return bytes;
}

absl::Status FeedForward::Route(int rows, const void* x, float* logits, int32_t* ids,
                                float* weights) const {
  RETURN_IF_ERROR(RouterLogits(rows, x, logits));
  return kernels::MoeRouting(RoutingParams(rows, logits, ids, weights), ctx_->ops.kernel);
}

absl::Status FeedForward::RouterLogits(int rows, const void* x, float* logits) const {
  const ModelConfig& c = *ctx_->config;
  return ops::Linear(ctx_->ops, x, rows, ctx_->widths.hidden, w_->moe.router, logits,
                     c.n_routed_experts, 0.0f, /*y_f32=*/true);
}

bool FeedForward::AttachFusedRouter(const void* x, float* logits, const kernels::MoeExpertsParams& e,
                                    kernels::MoeRoutingParams* routing) const {
  const LinearWeight& router = w_->moe.router;
  // Expert parallelism routes before its shard (RunRoutedExperts): no experts-call routing.
  if (ctx_->layout->expert_parallel() || !router.bias.empty() ||
      router.weight.dtype != ctx_->ops.dtype || ctx_->scratch->grid_ticket() == nullptr) {
    return false;
  }
  routing->router.dtype = router.weight.dtype;
  routing->router.weight = router.weight.data();
  routing->router.x = x;
  routing->router.hidden = ctx_->widths.hidden;
  routing->router.logits = logits;
  routing->router.ticket = ctx_->scratch->grid_ticket();
  if (kernels::MoeExpertsFusesRouter(e, ctx_->ops.kernel.backend)) return true;
  routing->router = {};
  return false;
}

kernels::MoeRoutingParams FeedForward::RoutingParams(int rows, const float* logits, int32_t* ids,
                                                     float* weights) const {
  const ModelConfig& c = *ctx_->config;
  const MoeWeights& m = w_->moe;
  kernels::MoeRoutingParams r;
  r.num_tokens = rows;
  r.num_experts = c.n_routed_experts;
  r.top_k = c.num_experts_per_tok;
  r.n_group = c.n_group;
  r.topk_group = c.topk_group;
  r.scoring = ToKernel(c.scoring);
  r.method = ToKernel(c.routing_method);
  r.norm_topk_prob = c.norm_topk_prob;
  r.routed_scaling_factor = static_cast<float>(c.routed_scaling_factor);
  r.logits = logits;
  r.correction_bias =
      m.correction_bias.empty() ? nullptr : static_cast<const float*>(m.correction_bias.data());
  r.topk_ids = ids;
  r.topk_weights = weights;
  return r;
}

absl::Status FeedForward::Forward(int rows, const void* x, void* out) {
  return RunBlock(rows, x, out, nullptr).status();
}

absl::StatusOr<bool> FeedForward::ForwardFolded(int rows, const void* x, void* out,
                                                const kernels::MoeResidualNorm& norm) {
  return RunBlock(rows, x, out, &norm);
}

absl::StatusOr<bool> FeedForward::RunBlock(int rows, const void* x, void* out,
                                           const kernels::MoeResidualNorm* norm) {
  StepScratch& scratch = *ctx_->scratch;
  ScratchScope scope(scratch.arena());
  const ModelConfig& c = *ctx_->config;
  const ops::OpContext& oc = ctx_->ops;
  const int T = rows;
  const int hidden = ctx_->widths.hidden;  // as stored (model_widths.h)
  if (!w_->is_moe) {
    RETURN_IF_ERROR(RunGatedMlp(w_->mlp, T, x, out, /*beta=*/0.0f));
    return false;
  }

  const MoeWeights& m = w_->moe;
  const int E = c.n_routed_experts;
  const int k = c.num_experts_per_tok;
  ASSIGN_OR_RETURN(void* logits,
                   scratch.Allocate(static_cast<size_t>(T) * E * sizeof(float), "router logits"));
  ASSIGN_OR_RETURN(void* ids,
                   scratch.Allocate(static_cast<size_t>(T) * k * sizeof(int32_t), "topk ids"));
  ASSIGN_OR_RETURN(void* weights,
                   scratch.Allocate(static_cast<size_t>(T) * k * sizeof(float), "topk weights"));
  // The routing runs inside the experts call (on CUDA, for decode steps, in one kernel with the
  // permutation), except under expert parallelism, whose shard rewrites the routed ids before
  // the experts see them (RunRoutedExperts).
  kernels::MoeRoutingParams routing =
      RoutingParams(T, static_cast<const float*>(logits), static_cast<int32_t*>(ids),
                    static_cast<float*>(weights));

  kernels::MoeExpertsParams e;
  e.dtype = oc.dtype;
  e.num_tokens = T;
  e.hidden = hidden;
  e.inter = ctx_->widths.expert_inter;  // moe_intermediate_size or this rank's slice, stored
  e.num_experts = E;
  e.top_k = k;
  e.x = x;
  e.topk_ids = static_cast<const int32_t*>(ids);
  e.topk_weights = static_cast<const float*>(weights);
  e.gate_up = m.experts_gate_up.data();
  e.gate_up_layout = m.experts_gate_up_layout;
  e.down = m.experts_down.data();
  e.out = out;
  e.routing = &routing;
  e.act = c.activation;
  // The router's logits: inside that same kernel where the backend fuses the projection
  // (kernels::MoeExpertsFusesRouter: CUDA decode steps, one launch instead of a GEMM and the
  // routing kernel), else a GEMM here first. The fold below changes neither the path nor the
  // routing, so one answer holds for both calls.
  if (!AttachFusedRouter(x, static_cast<float*>(logits), e, &routing)) {
    RETURN_IF_ERROR(RouterLogits(T, x, static_cast<float*>(logits)));
  }
  // Decode steps on one GPU: the shared experts as slices of the routed experts' stream
  // kernels, and the residual add + next norm in their combine (kernels/moe/api.h), instead of
  // a gated MLP (two launches) and an RmsNorm after the block.
  const bool whole = !ctx_->layout->sharded();
  const bool fold_shared = whole && m.shared.inter > 0 && m.shared.gate_up.bias.empty() &&
                           m.shared.down.bias.empty();
  if (norm != nullptr && whole && (fold_shared || m.shared.inter == 0)) {
    kernels::MoeExpertsParams folded = e;
    if (fold_shared) {
      folded.shared.gate_up = m.shared.gate_up.weight.data();
      folded.shared.down = m.shared.down.weight.data();
      folded.shared.inter = m.shared.inter;
      folded.shared.gate_up_layout = m.shared.gate_up_layout;
    }
    folded.norm = *norm;
    if (kernels::MoeExpertsFoldsSharedAndNorm(folded, oc.kernel.backend)) {
      RETURN_IF_ERROR(RunRoutedExperts(folded));
      return true;
    }
  }
  // Prefill on one GPU (the grouped-GEMM paths): the shared experts first, written into their
  // own buffer, which the routed experts' combine adds as one more term before the residual
  // add + next norm (kernels::MoeExpertsFoldsAddendAndNorm), instead of a shared down GEMM that
  // reads and rewrites out and an RmsNorm that reads it again. From kMoePrefillFoldMinTokens.
  if (norm != nullptr && whole && T >= kMoePrefillFoldMinTokens) {
    kernels::MoeExpertsParams folded = e;
    folded.norm = *norm;
    void* shared_out = nullptr;
    if (m.shared.inter > 0) {
      ASSIGN_OR_RETURN(shared_out,
                       scratch.Activations(static_cast<int64_t>(T) * hidden, "shared experts output"));
      folded.addend = shared_out;
    }
    if (kernels::MoeExpertsFoldsAddendAndNorm(folded, oc.kernel.backend)) {
      RETURN_IF_ERROR(RunSharedExperts(T, x, shared_out, /*beta=*/0.0f));  // none: nothing
      RETURN_IF_ERROR(RunRoutedExperts(folded));
      return true;
    }
  }
  RETURN_IF_ERROR(RunRoutedExperts(e));
  RETURN_IF_ERROR(AddSharedExperts(T, x, out));
  return false;
}

absl::Status FeedForward::AddSharedExperts(int rows, const void* x, void* out) {
  return RunSharedExperts(rows, x, out, /*beta=*/1.0f);
}

absl::Status FeedForward::RunSharedExperts(int rows, const void* x, void* out, float beta) {
  if (!w_->is_moe || w_->moe.shared.inter == 0) return absl::OkStatus();
  // HF: experts(x) + shared_experts(x); with beta 1 the shared output accumulates into `out`.
  return RunGatedMlp(w_->moe.shared, rows, x, out, beta);
}

absl::Status FeedForward::RunGatedMlp(const GatedMlpWeights& w, int rows, const void* x, void* out,
                                      float beta) {
  if (rows == 0) return absl::OkStatus();
  StepScratch& scratch = *ctx_->scratch;
  ScratchScope scope(scratch.arena());
  const int hidden = ctx_->widths.hidden;
  ASSIGN_OR_RETURN(void* act, scratch.Activations(static_cast<int64_t>(rows) * 3 * w.inter, "gated mlp act"));
  if (w.gate_up_layout == kernels::MoeGateUpLayout::kStacked) {
    return ops::GatedMlp(ctx_->ops, x, rows, hidden, w, ctx_->config->activation, act, out, beta);
  }
  ASSIGN_OR_RETURN(void* activated, InterleavedGateUp(w, rows, x, act));
  return ops::Linear(ctx_->ops, activated, rows, w.inter, w.down, out, hidden, beta);
}

// act(x gate^T) * (x up^T) of an interleaved gate_up (kInterleaved8: rows [16j, 16j+8) gate
// features [8j, 8j+8), rows [16j+8, 16j+16) their up), in `act` (rows * 3I elements; the
// activated [rows, I] rows are its last third). Every path gives the bits of the stacked GEMM +
// ActAndMul (products rounded to bf16 first); the fused forms compute SiLU, so they run for silu
// only, and any other activation takes the product + ActAndMul form on both backends.
absl::StatusOr<void*> FeedForward::InterleavedGateUp(const GatedMlpWeights& w, int rows, const void* x,
                                                     void* act) {
  constexpr int kBlock = 8;  // features per interleaved block
  const ops::OpContext& oc = ctx_->ops;
  const int hidden = ctx_->widths.hidden;
  const int inter = w.inter;
  const kernels::Activation activation = ctx_->config->activation;
  const bool silu = activation == kernels::Activation::kSilu;
  void* activated = oc.at(act, static_cast<int64_t>(rows) * 2 * inter);
  // Many rows: the Hopper grouped GEMM as one group, SiLU * up in its epilogue.
  kernels::MoeSharedGateUpParams fused;
  fused.dtype = oc.dtype;
  fused.rows = rows;
  fused.hidden = hidden;
  fused.inter = inter;
  fused.x = x;
  fused.gate_up = w.gate_up.weight.data();
  fused.act = activated;
  if (silu && kernels::MoeSharedGateUpRuns(fused, oc.kernel.backend)) {
    fused.workspace_bytes = kernels::MoeSharedGateUpWorkspaceBytes();
    ASSIGN_OR_RETURN(fused.workspace,
                     ctx_->scratch->Allocate(fused.workspace_bytes, "fused gate_up workspace"));
    RETURN_IF_ERROR(kernels::MoeSharedGateUp(fused, oc.kernel));
    return activated;
  }
  // Few rows: the small-M GEMM's SiLU epilogue with one batch entry per block, whose 16
  // weight rows are the block's gate rows then its up rows (a stacked [16, hidden] weight).
  kernels::GemmParams g;
  g.dtype = oc.dtype;
  g.m = rows;
  g.n = 2 * kBlock;
  g.k = hidden;
  g.batch = inter / kBlock;
  g.a = x;
  g.lda = hidden;
  g.stride_a = 0;
  g.b = w.gate_up.weight.data();
  g.ldb = hidden;
  g.stride_b = int64_t{2} * kBlock * hidden;
  g.c = activated;
  g.ldc = inter;
  g.stride_c = kBlock;
  g.epilogue = kernels::GemmEpilogue::kSiluMul;
  if (silu && kernels::GemmRunsSmallM(g, oc.kernel.backend)) {
    RETURN_IF_ERROR(kernels::Gemm(g, oc.kernel));
    return activated;
  }
  // Otherwise the product in its interleaved column order, then ActAndMul over its
  // [gate 8 | up 8] pieces taken as rows of 16 (rows * inter / 8 of them; the outputs land in
  // feature order).
  RETURN_IF_ERROR(ops::Linear(oc, x, rows, hidden, w.gate_up, act, 2 * inter));
  kernels::ActAndMulParams sp;
  sp.act = activation;
  sp.dtype = oc.dtype;
  sp.rows = rows * (inter / kBlock);
  sp.dim = kBlock;
  sp.x = act;
  sp.x_stride = 2 * kBlock;
  sp.out = activated;
  sp.out_stride = kBlock;
  RETURN_IF_ERROR(kernels::ActAndMul(sp, oc.kernel));
  return activated;
}

// One GPU (or tensor-parallel experts): the stack as loaded, through kernels/moe. Expert
// parallel: the rank holds experts [begin, begin + count); kernels/moe_shard rewrites the
// routing to local ids (the other ranks' assignments become kNotLocal, which kernels/moe
// skips), so the output is this rank's share of every token's sum, over its own rows only.
absl::Status FeedForward::RunRoutedExperts(kernels::MoeExpertsParams e) {
  StepScratch& scratch = *ctx_->scratch;
  const ParallelLayout& layout = *ctx_->layout;
  if (layout.expert_parallel()) {
    // Routed first, on global ids; the shard then rewrites them to this rank's.
    if (e.routing != nullptr) RETURN_IF_ERROR(kernels::MoeRouting(*e.routing, ctx_->ops.kernel));
    e.routing = nullptr;
    const int64_t n = static_cast<int64_t>(e.num_tokens) * e.top_k;
    ASSIGN_OR_RETURN(
        void* ids, scratch.Allocate(static_cast<size_t>(n) * sizeof(int32_t), "local expert ids"));
    ASSIGN_OR_RETURN(void* weights, scratch.Allocate(static_cast<size_t>(n) * sizeof(float),
                                                     "local expert weights"));
    kernels::MoeLocalizeParams lp;
    lp.num_assignments = n;
    lp.num_experts = e.num_experts;
    lp.expert_begin = layout.experts.begin;
    lp.local_experts = layout.experts.count;
    lp.topk_ids = e.topk_ids;
    lp.topk_weights = e.topk_weights;
    lp.local_ids = static_cast<int32_t*>(ids);
    lp.local_weights = static_cast<float*>(weights);
    RETURN_IF_ERROR(kernels::MoeLocalize(lp, ctx_->ops.kernel));
    e.num_experts = layout.experts.count;
    e.topk_ids = lp.local_ids;
    e.topk_weights = lp.local_weights;
  }
  e.workspace_bytes = kernels::MoeExpertsWorkspaceBytes(e);
  ASSIGN_OR_RETURN(e.workspace, scratch.Allocate(e.workspace_bytes, "moe experts workspace"));
  return kernels::MoeExperts(e, ctx_->ops.kernel);
}

}  // namespace mlaserve::model
