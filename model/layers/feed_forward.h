// FeedForward: the feed-forward half of one decoder layer, as Hugging Face's DeepseekV*MLP /
// DeepseekV*MoE: the dense gated MLP, or the MoE block (router -> routed experts grouped by
// expert -> plus the shared experts, accumulated into the same output).
//
// The router is gate.weight in f32 whatever the activation dtype (HF computes its logits in
// f32 too); routing uses kernels/moe with the config's method (V2: softmax, greedy or
// group-limited, never normalised; V3/V3.2: sigmoid, noaux_tc with the correction bias, group
// top-2 sums, norm_topk_prob), times routed_scaling_factor.
//
// On a sharded layout (parallel_layout.h) the block computes this rank's partial sums: its
// slice of the intermediate sizes, and under expert parallelism its shard of the experts
// (kernels/moe_shard marks the other ranks' assignments not local; kernels/moe skips them). ParallelStep
// adds the shares across ranks. With --moe-dispatch all-to-all (parallel_layout.h) an MoE block
// instead routes this rank's own rows and exchanges them with the ranks of their experts
// (ForwardAllToAll, feed_forward_a2a.cc); its shared experts are then whole on every rank.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "kernels/moe/api.h"
#include "model/deepseek_weights.h"
#include "model/layers/layer_context.h"
#include "parallel/collective.h"

namespace mlaserve::model {

// Tokens from which a step on one GPU ends its grouped-GEMM MoE block in the combine (the shared
// experts as an addend, the residual add + next norm as its epilogue; FeedForward::RunBlock).
// Measured on an H200 (random V2-Lite, docs/BENCHMARKS.md, eighth session of 2026-11-29): a
// 4096-token prefill gains ~0.44 ms; a 128-token decode step, which also takes the grouped
// path, lost ~0.2 ms (13.38 / 13.33 ms against 13.14 / 13.08 without), so below this the
// separate shared MLP and RmsNorm stay.
inline constexpr int kMoePrefillFoldMinTokens = 1024;

class FeedForward {
 public:
  // `context` and `weights` (the layer's) outlive the block.
  FeedForward(const LayerContext* context, const LayerWeights* weights)
      : ctx_(context), w_(weights) {}

  // Step scratch of one block at most, over the MLP's rows: the step's tokens, or every rank's
  // (padded) under data-parallel attention (ParallelStep).
  static size_t ScratchBytes(const LayerContext& context);

  bool is_moe() const { return w_->is_moe; }
  // x: normed hidden [rows, hidden]; out: [rows, hidden] (an MoE block with its shared experts).
  absl::Status Forward(int rows, const void* x, void* out);
  // One GPU (an unsharded layout): Forward with the shared experts, and, where the backend
  // folds the residual add and the next block's RMSNorm of `norm` into the routed experts'
  // combine, that too: on CUDA decode steps with the shared experts as slices of the routed
  // kernels (kernels::MoeExpertsFoldsSharedAndNorm), on CUDA prefill with the shared experts run
  // first into a buffer the combine adds (kernels::MoeExpertsFoldsAddendAndNorm). Returns true
  // when it did (then `norm` is done and `out` unused), false when it ran Forward (the caller
  // then adds out to the residual and normalises).
  absl::StatusOr<bool> ForwardFolded(int rows, const void* x, void* out,
                                     const kernels::MoeResidualNorm& norm);
  // out += the shared experts of x (MoE blocks with shared experts; else nothing).
  absl::Status AddSharedExperts(int rows, const void* x, void* out);
  // Expert parallel, all-to-all dispatch: the complete MoE output (routed + shared) of this
  // rank's `rows` rows. Every rank of `comm` calls it in the same layer (rows may be 0): the
  // rows go to the ranks of their experts and the weighted partial sums come back, added in
  // rank order. Syncs with the host (the counts of the second exchange): never in a graph.
  absl::Status ForwardAllToAll(int rows, const void* x, void* out, parallel::Collective& comm);
  // Step scratch of ForwardAllToAll at most, for at most `rows` rows on every rank.
  static size_t AllToAllScratchBytes(const LayerContext& context, int rows);
  // ForwardAllToAll with fixed-capacity exchanges: every rank sends every rank a block of
  // `capacity` rows (capacity >= rows on every rank: the same value on all of them), padded,
  // so no count reaches the host and a CUDA graph can hold it. The same result.
  absl::Status ForwardAllToAllFixed(int rows, int capacity, const void* x, void* out,
                                    parallel::Collective& comm);
  // Step scratch of ForwardAllToAllFixed at most, at `capacity` rows per block.
  static size_t AllToAllFixedScratchBytes(const LayerContext& context, int capacity);
  // MoE layers: the router's f32 logits [rows, n_routed_experts] of x, and the experts the
  // routing kernel chose from them, ids / weights [rows, num_experts_per_tok] (global ids).
  // Buffers of the backend.
  absl::Status Route(int rows, const void* x, float* logits, int32_t* ids, float* weights) const;

 private:
  // Forward / ForwardFolded (norm null: never folded); true when the norm was folded.
  absl::StatusOr<bool> RunBlock(int rows, const void* x, void* out,
                                const kernels::MoeResidualNorm* norm);
  // The router's f32 logits of x, and the routing parameters over them (Route's two parts).
  absl::Status RouterLogits(int rows, const void* x, float* logits) const;
  kernels::MoeRoutingParams RoutingParams(int rows, const float* logits, int32_t* ids,
                                          float* weights) const;
  // Sets routing->router (the router projection of x into `logits`, this layer's router weight)
  // when the experts call `e`, whose routing it is, computes the logits itself
  // (kernels::MoeExpertsFusesRouter); returns whether it did (else routing->router stays empty
  // and the caller runs RouterLogits first).
  bool AttachFusedRouter(const void* x, float* logits, const kernels::MoeExpertsParams& e,
                         kernels::MoeRoutingParams* routing) const;
  // out = the shared experts of x (+ beta * out: beta 1 is AddSharedExperts).
  absl::Status RunSharedExperts(int rows, const void* x, void* out, float beta);
  // out = down(act(x gate^T) * (x up^T)) (+ beta * out) of `w` (the dense MLP, the shared
  // experts), in its gate_up layout: stacked, ops::GatedMlp; interleaved, InterleavedGateUp
  // (on Hopper at many rows one GEMM with SiLU * up in its epilogue) then the down projection.
  absl::Status RunGatedMlp(const GatedMlpWeights& w, int rows, const void* x, void* out, float beta);
  // The routed experts of `e` (global expert ids, this rank's intermediate slice), through this
  // rank's shard of the experts.
  absl::Status RunRoutedExperts(kernels::MoeExpertsParams e);
  // The activated rows of `w`'s interleaved gate_up (RunGatedMlp), in the last third of `act`;
  // returns where.
  absl::StatusOr<void*> InterleavedGateUp(const GatedMlpWeights& w, int rows, const void* x, void* act);

  const LayerContext* ctx_;
  const LayerWeights* w_;
};

}  // namespace mlaserve::model
